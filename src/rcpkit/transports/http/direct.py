"""The route of each request to the RCP app, decided in one place, and the direct route.

:class:`Routing` is the only code that looks at a request's verb, path and headers to
choose how it is served. Exactly one of three routes:

- direct — a POST under the base with a ``content-length`` within the limit and no SSE
  in ``Accept``: under :class:`.server.HttpServer` the endpoint answers it from the
  buffered body, with no ASGI scope or message at all (:meth:`Routing.claim`);
- ``endpoint`` — any other POST under the base (SSE, a chunked body, or any ASGI server):
  the endpoint over ASGI, past Starlette's router and middleware;
- ``framework`` — everything else, and every request while CORS is on: Starlette's full
  stack (404, 405, OPTIONS preflight, CORS headers, the operational ``GET`` routes).

:class:`.server.HttpServer` asks first, from the request head (:meth:`Routing.claim`); a
request it does not take directly reaches the ASGI entry, which asks
:meth:`Routing.decide`: both look the path up in the same table, so they always agree.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, NamedTuple, cast

from .server import Reply

if TYPE_CHECKING:
    from .app import Endpoint

__all__ = ["EndpointDirectRoute", "Route", "Routing"]

RouteKind = Literal["endpoint", "framework"]


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
        self._kept: dict[str | bytes, tuple[Route, str]] = {}

    def decide(self, verb: bytes, path: str) -> Route:
        """The route of a request at the ASGI entry: ``path`` has its query and root path
        removed and its escapes decoded. Never ``direct``: only the server that buffers the
        whole body can take that route (:meth:`claim`)."""
        routes = verb == b"POST" and (self._kept.get(path) or self._under_base(path))
        return routes[0] if routes else _FRAMEWORK

    def claim(self, verb: bytes, target: bytes, headers: dict[bytes, bytes]) -> str | None:
        """The path method of a request routed ``direct``, from its raw request target and
        lower-cased headers (:meth:`.server.DirectRoute.claim`); else None, and the ASGI
        entry decides. A target with a query or an escape goes there too: its scope carries
        the path decoded the way every ASGI server decodes it."""
        routes = verb == b"POST" and (self._kept.get(target) or self._under_base(target))
        if not routes:
            return None
        accept = headers.get(b"accept")
        # ``partition``: the cheapest search on bytes (see ``messages.encode``)
        if accept is not None and accept.partition(b"text/event-stream")[1]:
            return None
        length = headers.get(b"content-length", b"")
        # Fewer digits than the limit's are within it: no int() for the usual request.
        return routes[1] if length.isdigit() and (len(length) < self._limit_digits or int(
            length) <= self.max_body_bytes) else None

    def _under_base(self, key: str | bytes) -> tuple[Route, str] | None:
        """The ``endpoint`` route of a POST to ``key`` and its path method (see
        :meth:`decide`); None outside the base, and for every request while CORS is on.
        Kept for the first :data:`_KEPT_PATHS` keys, so a request does not build them."""
        if self.cors:
            return None
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
        routes = Route("endpoint", method), method
        if len(self._kept) < _KEPT_PATHS:
            self._kept[key] = routes
        return routes


class EndpointDirectRoute:
    """:class:`.server.DirectRoute` for the endpoint: the requests routed ``direct``."""

    def __init__(self, routing: Routing, endpoint: Endpoint) -> None:
        # The routing's and the endpoint's own methods, no call in between (a route key is
        # its path method); without a stream the endpoint's reply is always buffered.
        self.claim = routing.claim
        self.answer = cast("Callable[[str, dict[bytes, bytes], bytes], Reply | Awaitable[Reply]]",
                           endpoint.answer)
