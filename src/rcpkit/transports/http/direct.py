"""The route of each request to the RCP app, decided in one place, and the direct route.

:meth:`Routing.decide` is the only code that looks at a request's verb, path and headers
to choose how it is served. Exactly one of three routes:

- ``direct`` — a POST under the base with a ``content-length`` within the limit and no
  SSE in ``Accept``: under :class:`.server.HttpServer` the endpoint answers it from the
  buffered body, with no ASGI scope or message at all (:class:`DirectRoute`);
- ``endpoint`` — any other POST under the base (SSE, a chunked body, or any ASGI server):
  the endpoint over ASGI, past Starlette's router and middleware;
- ``framework`` — everything else, and every request while CORS is on: Starlette's full
  stack (404, 405, OPTIONS preflight, CORS headers, the operational ``GET`` routes).

:class:`.server.HttpServer` asks first, from the request head; a request it does not take
directly reaches the ASGI entry, which asks the same function and gets the same route
(``endpoint`` or ``framework``), so both entries always agree.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, NamedTuple, cast

from .server import Reply

if TYPE_CHECKING:
    from .app import Endpoint

__all__ = ["EndpointDirectRoute", "Route", "Routing"]

RouteKind = Literal["direct", "endpoint", "framework"]


class Route(NamedTuple):
    kind: RouteKind
    method: str = ""
    """The RCP method named by the path (``<base>/<method>``); ``""`` for the base itself."""


_FRAMEWORK = Route("framework")
_KEPT_PATHS = 256
"""How many paths under the base keep their routes (a server has a few dozen methods): past
that, paths a client makes up are decided afresh, never kept."""


class Routing:
    """Where requests go, for an app at ``base``."""

    def __init__(self, base: str, *, max_body_bytes: int, cors: bool) -> None:
        self.base = base
        self._prefix = base + "/"
        self.max_body_bytes = max_body_bytes
        self._limit_digits = len(str(max_body_bytes))
        self.cors = cors
        self._kept: dict[str | bytes, tuple[Route, Route]] = {}

    def decide(self, verb: bytes, path: str | bytes, headers: dict[bytes, bytes] | None = None
               ) -> Route:
        """The route of one request. ``path`` has its query and root path removed and its
        escapes decoded; or it is the raw request target as bytes, where one with a query or
        an escape is ``framework`` (the ASGI entry then decides from its decoded path).
        ``headers`` come from a caller that can hand the endpoint the whole body at once
        (only :class:`.server.HttpServer` can): without them the route is never ``direct``."""
        if self.cors or verb != b"POST":
            return _FRAMEWORK
        routes = self._kept.get(path) or self._under_base(path)
        if routes is None:
            return _FRAMEWORK
        endpoint, direct = routes
        if headers is None:
            return endpoint
        accept = headers.get(b"accept")
        # ``partition``: the cheapest search on bytes (see ``messages.encode``)
        if accept is not None and accept.partition(b"text/event-stream")[1]:
            return endpoint
        length = headers.get(b"content-length", b"")
        # Fewer digits than the limit's are within it: no int() for the usual request.
        return direct if length.isdigit() and (len(length) < self._limit_digits or int(
            length) <= self.max_body_bytes) else endpoint

    def _under_base(self, key: str | bytes) -> tuple[Route, Route] | None:
        """The ``endpoint`` and ``direct`` routes of a POST to ``key`` (see :meth:`decide`);
        None outside the base. Kept for the first :data:`_KEPT_PATHS` keys, so a request does
        not build them."""
        if isinstance(key, str):
            path = key
        elif key.find(b"?") >= 0 or key.find(b"%") >= 0:
            return None
        else:
            path = key.decode("latin-1")
        if path == self.base:
            method = ""
        elif path.startswith(self._prefix) and len(path) > len(self._prefix):
            method = path[len(self._prefix):]
        else:
            return None
        routes = Route("endpoint", method), Route("direct", method)
        if len(self._kept) < _KEPT_PATHS:
            self._kept[key] = routes
        return routes


class EndpointDirectRoute:
    """:class:`.server.DirectRoute` for the endpoint: the requests routed ``direct``."""

    def __init__(self, routing: Routing, endpoint: Endpoint) -> None:
        self.routing = routing
        # The endpoint's own answer, no call in between (a route key is its path method);
        # without a stream its reply is always buffered, never None.
        self.answer = cast("Callable[[str, dict[bytes, bytes], bytes], Reply | Awaitable[Reply]]",
                           endpoint.answer)

    def claim(self, method: bytes, target: bytes, headers: dict[bytes, bytes]) -> str | None:
        """A plain target only: one with a query or escapes takes the ASGI entry, whose scope
        carries its path decoded the way every ASGI server decodes it."""
        route = self.routing.decide(method, target, headers)
        return route.method if route.kind == "direct" else None
