"""The RCP endpoint and the Starlette app around it (§5.2); routes in :mod:`.direct`."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.routing import Route as StarletteRoute
from starlette.types import Receive, Scope, Send

from ...protocol import messages
from ...protocol.errors import InternalError, ParseError, PayloadTooLarge
from ...protocol.messages import Invalid
from ...protocol.messages import Request as RpcRequest
from ...server.dispatcher import AdmitMember, Authorize, Dispatcher
from ...server.framework import Server
from ...tracing import Tracing
from ..access import AccessLog, outcome_code, request_summary
from .auth import Authenticator, Gate, cors_middleware
from .direct import EndpointDirectRoute, Routing
from .discovery import openrpc_route
from .metrics import Metrics
from .operations import operational_routes
from .replies import JSON_HEADERS, error_reply, respond, shed
from .server import Reply, header_map
from .sessions import SESSION_HEADER, SessionPolicy, Sessions, refuse_unknown_session
from .sse import stream_call, wants_sse

__all__ = ["Endpoint", "RcpApp", "create_app"]

logger = logging.getLogger("rcpkit.server")

Headers = dict[bytes, bytes]
Stream = tuple[Receive, Send]
"""The ASGI pair a reply can be streamed on (SSE) and a disconnect learned from."""

_SESSION_KEY = SESSION_HEADER.lower().encode()
_PENDING_RETRY_S = 1.0
"""Retry advice when ``max_pending`` requests are in flight: requests take milliseconds, so
a second is enough for some to finish."""


class Endpoint:
    """The POST handler shared by ``<base>`` and ``<base>/<method>``.

    A plain ASGI app (no Request/Response objects on the hot path): Starlette routes
    to it, answers 404/405 and applies CORS around it.
    """

    def __init__(self, server: Server, sessions: Sessions, auth: Gate,
                 max_body_bytes: int, max_pending: int, refused: Callable[[str], None],
                 access_log: AccessLog | None = None, label: str = "") -> None:
        self.server = server
        self.refused = refused
        """Told the reason of each request refused before any handler saw it
        (:data:`REFUSALS`): metrics count them."""
        self.access_log = access_log
        self.label = label
        """The collection named in access lines."""
        if access_log is not None:  # chosen once: without a log, no wrapper runs
            self.answer = self._logged_answer  # type: ignore[method-assign,assignment]
        self.sessions = sessions
        self.auth = auth
        self.max_body_bytes = max_body_bytes
        self.max_pending = max_pending
        self.pending = 0

    async def read_body(self, headers: Headers, receive: Receive) -> bytes | None:
        """The body, or None when it exceeds the limit (declared or actual)."""
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return None
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                return None
            if not message.get("more_body", False):
                return body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry; ``scope["path_params"]["method"]`` is the method named by the path."""
        outcome = self.answer(scope.get("path_params", {}).get("method"),
                              header_map(scope["headers"]), receive, (receive, send))
        reply = outcome if outcome is None or isinstance(outcome, tuple) else await outcome
        if reply is not None:
            await respond(send, *reply)

    def answer(self, path_method: str | None, headers: Headers, body: bytes | Receive,
               stream: Stream | None = None, seen: _Seen | None = None
               ) -> Reply | Awaitable[Reply | None] | None:
        """The reply to one POST, or None once it went out as SSE on ``stream``: at once
        when nothing is waited for (the body at hand, no handler to run), else an awaitable.
        ``path_method`` is the method the path names; None or ``""`` for the base itself.

        ``body`` is the request body, or the ASGI ``receive`` to read it from; without a
        ``stream`` the reply is always buffered. The gate goes first (credentials and
        what else it checks), then load (429), then the body; an unexpected failure here is
        a 500 (``-32603``). ``seen`` is told who called and the body read (the access log's
        record of the request, :meth:`_logged_answer`)."""
        principal = self.auth.admit(headers)
        if isinstance(principal, tuple):
            self.refused(REFUSALS.get(principal[0], str(principal[0])))
            return principal
        if seen is not None:
            seen.principal = principal
        if self.pending >= self.max_pending:
            self.auth.release(principal)
            self.refused("shed")
            return shed(_PENDING_RETRY_S, "server busy")
        try:
            outcome = (self.dispatch(path_method, headers, body, stream, principal)
                       if isinstance(body, bytes)
                       else self._read_and_dispatch(path_method, headers, body, stream,
                                                    principal, seen))
        except Exception:
            self.auth.release(principal)
            return _failed()
        if outcome is None or isinstance(outcome, tuple):
            self.auth.release(principal)
            return outcome
        # pending: the requests that wait for something (one answered at once is over
        # before another can arrive)
        self.pending += 1
        return self._finish(outcome, principal)

    async def _read_and_dispatch(self, path_method: str | None, headers: Headers,
                                 receive: Receive, stream: Stream | None,
                                 principal: str | None, seen: _Seen | None) -> Reply | None:
        body = await self.read_body(headers, receive)
        if body is None:
            return self.too_large()
        if seen is not None:
            seen.body = body
        outcome = self.dispatch(path_method, headers, body, stream, principal)
        return outcome if outcome is None or isinstance(outcome, tuple) else await outcome

    async def _finish(self, outcome: Awaitable[Reply | None],
                      principal: str | None) -> Reply | None:
        """The reply :meth:`answer` could not give at once; the request ends with it."""
        try:
            return await outcome
        except ClientDisconnect:
            return None
        except Exception:
            return _failed()
        finally:
            self.pending -= 1
            self.auth.release(principal)

    def too_large(self) -> Reply:
        self.refused("payload_too_large")
        return error_reply(413, PayloadTooLarge(
            f"the body exceeds {self.max_body_bytes} bytes", data={"limit": self.max_body_bytes}))

    def dispatch(self, path_method: str | None, headers: Headers, body: bytes,
                 stream: Stream | None, principal: str | None
                 ) -> Reply | Awaitable[Reply | None] | None:
        """``principal`` is the caller of a stateless request, whose session all share; a
        token or single session is the caller itself. The reply comes at once when the
        dispatcher gives it so (:meth:`~rcpkit.server.dispatcher.Dispatcher.handle_now`)."""
        path_method = path_method or None  # the base itself may come as ""
        parsed = messages.parse(body)
        if isinstance(parsed, Invalid) and isinstance(parsed.error, ParseError):
            return error_reply(400, parsed.error)
        sessions = self.sessions
        caller = None
        if sessions.policy == "stateless":  # one session for all: the caller is told apart
            dispatcher, caller = sessions.dispatcher_for(None), principal
        else:
            token = headers.get(_SESSION_KEY)
            presented = token.decode("latin-1") if token is not None else None
            dispatcher = sessions.dispatcher_for(presented)
            if sessions.policy == "token":  # only token sessions can be full or unknown
                wait = sessions.retry_after(dispatcher)
                if wait is not None:
                    self.refused("shed")
                    return shed(wait, "every session is in use")
                if presented is not None and dispatcher.session.token != presented:
                    parsed = refuse_unknown_session(parsed)
        if stream is not None and isinstance(parsed, RpcRequest) \
                and wants_sse(headers.get(b"accept", b""), dispatcher, self.server.capabilities):
            return stream_call(*stream, dispatcher, parsed, path_method, caller, headers,
                               sessions.after)
        reply = dispatcher.handle_now(parsed, path_method=path_method, caller=caller,
                                      headers=headers)
        if reply is None or isinstance(reply, bytes):
            return self._replied(dispatcher, reply)
        return self._replied_later(dispatcher, reply)

    def _replied(self, dispatcher: Dispatcher, reply: bytes | None) -> Reply:
        if self.sessions.policy == "token":  # keeps a session that just initialized
            self.sessions.after(dispatcher)
        return (204, (), b"") if reply is None else (200, JSON_HEADERS, reply)

    async def _replied_later(self, dispatcher: Dispatcher,
                             reply: Awaitable[bytes | None]) -> Reply:
        return self._replied(dispatcher, await reply)

    # ── the access log (:mod:`..access`) ────────────────────────────────────
    def _logged_answer(self, path_method: str | None, headers: Headers, body: bytes | Receive,
                       stream: Stream | None = None, seen: None = None
                       ) -> Reply | Awaitable[Reply | None] | None:
        """:meth:`answer`, then one access line (``seen``: :meth:`answer`'s signature)."""
        record = _Seen(time.perf_counter(), body if isinstance(body, bytes) else None)
        outcome = Endpoint.answer(self, path_method, headers, body, stream, record)
        if outcome is None or isinstance(outcome, tuple):
            self._log(record, path_method, outcome)
            return outcome
        return self._logged_later(record, path_method, outcome)

    async def _logged_later(self, seen: _Seen, path_method: str | None,
                            outcome: Awaitable[Reply | None]) -> Reply | None:
        reply = await outcome
        self._log(seen, path_method, reply)
        return reply

    def _log(self, seen: _Seen, path_method: str | None, reply: Reply | None) -> None:
        assert self.access_log is not None
        method, _ids = request_summary(seen.body) if seen.body is not None else ("-", [])
        status, code, size = (200, None, None) if reply is None \
            else (reply[0], outcome_code(reply[2]), len(reply[2]))  # None: streamed (SSE)
        self.access_log.record(
            method=path_method or method, collection=self.label, principal=seen.principal,
            status=status, code=code, seconds=time.perf_counter() - seen.started,
            bytes_in=None if seen.body is None else len(seen.body), bytes_out=size)


@dataclass(slots=True)
class _Seen:
    """What the access line of one request needs to know from its handling."""

    started: float
    body: bytes | None
    principal: str | None = None


REFUSALS = {400: "bad_request", 401: "unauthenticated", 403: "forbidden", 413:
            "payload_too_large", 429: "rate_limited"}
"""The ``reason`` label of a request the gate refused, by HTTP status; ``shed`` is a
refusal for load."""


def _failed() -> Reply:
    """A failure of the transport itself (called while handling it): logged, then 500."""
    logger.exception("HTTP transport failure")
    return error_reply(500, InternalError())


class RcpApp(Starlette):
    """Starlette, entered through :meth:`.direct.Routing.decide`: a request routed
    ``endpoint`` goes straight to the endpoint, skipping the generic middleware and router;
    one routed ``framework`` takes the full Starlette stack. Requests the direct route claims
    (:meth:`.direct.Routing.claim`) never arrive here: :class:`.server.HttpServer` answers
    them through :attr:`direct`."""

    def __init__(self, routing: Routing, endpoint: Endpoint, **options: Any) -> None:
        super().__init__(**options)
        self.routing = routing
        self.endpoint = endpoint
        self.direct = EndpointDirectRoute(routing, endpoint)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            root = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root):]
            route = self.routing.decide(scope["method"].encode("latin-1"), path)
            if route.kind == "endpoint":
                scope["path_params"] = {"method": route.method} if route.method else {}
                await self.endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def create_app(server: Server, *, base: str = "/rcp", sessions: SessionPolicy = "stateless",
               auth_tokens: Iterable[str] = (), api_key_header: str | None = None,
               cors_origins: Iterable[str] = (), max_body_bytes: int = 8 * 1024 * 1024,
               session_ttl_s: float = 900.0, max_sessions: int = 10_000,
               max_pending: int = 1024, max_concurrency: int = 64,
               request_timeout_ms: float | None = None, metrics: Metrics | None = None,
               collection: str | None = None, log_bodies: bool = False,
               gate: Gate | None = None, authorize: Authorize | None = None,
               admit_member: AdmitMember | None = None, tracing: Tracing | None = None,
               access_log: AccessLog | None = None,
               clock: Callable[[], float] = time.monotonic) -> RcpApp:
    """The ASGI app serving ``server`` at ``base`` (see :mod:`rcpkit.transports.http`), with
    ``/healthz`` and ``/readyz`` beside the base, ``<base>/openrpc.json`` (:mod:`.discovery`),
    and ``/metrics`` when ``metrics`` is given
    (its requests labelled ``collection``, by default the server's name). ``log_bodies``
    lets failure logs quote queries and documents (§15.6; off by default). ``gate``
    replaces the ``auth_tokens`` check; ``authorize`` is the dispatcher's check of each
    request's caller and ``admit_member`` its admission of a batch's requests after the
    first, which the gate admitted with the POST (:class:`~rcpkit.server.dispatcher.Dispatcher`).
    ``tracing`` (default: the process's, :func:`rcpkit.tracing.active`) traces every request,
    its span labelled ``collection``. ``access_log`` writes one line per request
    (:mod:`..access`). ``clock`` (monotonic seconds) times token sessions' idleness."""
    base = "/" + base.strip("/")
    label = collection or server.name
    refused: Callable[[str], None] = _uncounted
    options: dict[str, Any] = {"max_concurrency": max_concurrency,
                               "request_timeout_ms": request_timeout_ms,
                               "log_bodies": log_bodies, "authorize": authorize,
                               "admit_member": admit_member, "tracing": tracing,
                               "trace_attributes": {"rcp.collection": label}}
    if metrics is not None:
        metrics.watch(label, server)
        options["observer"] = functools.partial(_observe, metrics, label)
        refused = functools.partial(metrics.refused, label)
    endpoint = Endpoint(server,
                        Sessions(server, sessions, session_ttl_s, max_sessions, options, clock),
                        gate or Authenticator(auth_tokens, api_key_header), max_body_bytes,
                        max_pending, refused, access_log, label)
    middleware = cors_middleware(cors_origins, api_key_header)
    routing = Routing(base, max_body_bytes=max_body_bytes, cors=bool(middleware))
    return RcpApp(routing, endpoint, middleware=middleware, routes=[
        *operational_routes(base, server, metrics),
        openrpc_route(base, server, endpoint.auth),
        StarletteRoute(base, endpoint, methods=["POST"]),
        StarletteRoute(base + "/{method:path}", endpoint, methods=["POST"])])


def _observe(metrics: Metrics, collection: str, method: str | None, code: int,
             seconds: float) -> None:
    metrics.request_done(method, collection, code, seconds)


def _uncounted(reason: str) -> None:
    """Without metrics a refusal is not counted."""
