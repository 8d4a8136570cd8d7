"""The HTTP transport, server side (§5.2): a Starlette ASGI app, mountable in any ASGI stack
and served by :mod:`.httpserver` (optionally in several worker processes).

Routes: ``POST <base>/<method>`` for one message (the body's method must match
the path, else ``-32600``) and ``POST <base>`` for a batch or any single
message. Status mapping (§5.2):

=====  ==================================================================
200    every JSON-RPC response, errors included (JSON, or SSE on request)
204    a notification or a notification-only batch (no body)
400    a body that is not JSON (with a ``-32700`` body)
401    missing/wrong credentials (with a ``-32012`` body), before dispatch
404    a path outside ``<base>``; 405 a verb other than POST (OPTIONS with CORS)
413    a body over ``max_body_bytes`` (with a ``-32013`` body)
429    over ``max_pending`` requests in flight, or a newcomer while all ``max_sessions``
       token sessions are in recent use (``Retry-After``, ``-32011`` body)
500    a failure of the transport itself (``-32603`` body)
=====  ==================================================================

Back-end failures travel as JSON-RPC errors (``-32010``) with status 200,
because a JSON-RPC response was produced (§5.2), so 503 is never needed.

Session policies (§5.2, §13):

- ``stateless`` — every request is implicitly initialized at the advertised
  capabilities; ``initialize``/``info`` are idempotent; ``-32003`` still applies.
- ``token`` — ``initialize`` mints ``result._meta.session``; later requests
  carry it in the ``RCP-Session`` header. A missing, unknown or expired token is
  treated as an uninitialized session: gated methods get ``-32001`` (with
  ``data.detail``), whose §12.2 remedy — initialize again — is exactly the fix.
  Sessions idle for ``session_ttl_s`` expire; ``shutdown`` ends one at once; at
  ``max_sessions`` the never-used, then the least recently used, make room.
- ``single`` — one process-wide session, as the reference server behaves;
  ``shutdown`` ends it and the next ``initialize`` starts afresh.

Auth (§5.2, §15.6): with ``auth_tokens`` set, every POST needs
``Authorization: Bearer <token>`` (or the ``api_key_header``), checked before
anything is parsed, so nothing — not even ``info`` — is revealed without it.

Scaling out (:func:`serve_http` ``workers=N``): N processes accept on one socket.
Only the ``stateless`` policy qualifies — its dispatcher keeps nothing between
requests, and ``notifications/cancel`` is a no-op there anyway — and only a server
that sets ``Server.multiprocess_safe``, because any state its handlers keep in
memory (an in-memory index, a cache of another process's writes) would silently
differ between workers.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import logging
import math
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Protocol

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..protocol import messages
from ..protocol.errors import (
    InternalError,
    InvalidRequest,
    NotInitialized,
    ParseError,
    PayloadTooLarge,
    RateLimited,
    RcpError,
    Unauthorized,
    UsageError,
)
from ..protocol.framing import sse_event
from ..protocol.lifecycle import State
from ..protocol.messages import Invalid
from ..protocol.messages import Request as RpcRequest
from ..server.context import ServerSession
from ..server.dispatcher import Authorize, Dispatcher
from ..server.framework import Server
from .httpserver import DirectRoute, HttpServer, Reply, header_map

__all__ = ["SESSION_HEADER", "Gate", "SessionPolicy", "TokenGate", "create_app",
           "presented_credentials", "serve_app", "serve_http", "shed", "unauthenticated"]

logger = logging.getLogger("rcpkit.server")

SessionPolicy = Literal["stateless", "token", "single"]
SESSION_HEADER = "RCP-Session"


class _Sessions:
    """Finds the dispatcher for a request under the configured policy.

    Token mode keeps at most ``max_sessions`` sessions. A newcomer at the cap takes the
    place of the oldest session never used since its ``initialize``, else of the least
    recently used one, so a flood of ``initialize`` cannot lock users out; only while
    every session was used within ``_BUSY_S`` is it refused (429), with a ``Retry-After``
    saying when the least recently used one may be taken."""

    def __init__(self, server: Server, policy: SessionPolicy, ttl_s: float, max_sessions: int,
                 dispatcher_options: dict[str, Any]) -> None:
        if policy not in ("stateless", "token", "single"):
            raise UsageError(f"unknown session policy {policy!r}")
        if max_sessions < 1 or ttl_s <= 0:
            raise UsageError("max_sessions and session_ttl_s must be positive")
        self.server = server
        self.policy = policy
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._options = dispatcher_options
        self._by_token: collections.OrderedDict[str, Dispatcher] = collections.OrderedDict()
        """Live sessions, least recently used first."""
        self._unused: collections.OrderedDict[str, None] = collections.OrderedDict()
        """Sessions not used since their ``initialize``, oldest first."""
        self._shared: Dispatcher | None = None
        self._next_sweep = 0.0

    def _new(self, *, stateless: bool = False, token: str | None = None) -> Dispatcher:
        return Dispatcher(self.server, session=ServerSession(token=token), stateless=stateless,
                          **self._options)

    def dispatcher_for(self, token: str | None) -> Dispatcher:
        """The dispatcher to use; in token mode a fresh, uninitialized one for a new or
        unknown token (see :meth:`after`)."""
        if self.policy == "stateless":
            if self._shared is None:
                self._shared = self._new(stateless=True)
            return self._shared
        if self.policy == "single":
            if self._shared is None or self._shared.session.protocol.state is State.CLOSED:
                self._shared = self._new()
            return self._shared
        now = time.monotonic()
        self._sweep(now)
        known = self._by_token.get(token) if token is not None else None
        if known is not None and now - known.session.last_used <= self.ttl_s:
            assert token is not None
            known.session.last_used = now
            self._by_token.move_to_end(token)
            self._unused.pop(token, None)
            return known
        return self._new(token=secrets.token_urlsafe(24))

    def after(self, dispatcher: Dispatcher) -> None:
        """Token mode: keep a session that just initialized; forget one that shut down."""
        if self.policy != "token":
            return
        token = dispatcher.session.token
        assert token is not None
        state = dispatcher.session.protocol.state
        if state is State.READY and token not in self._by_token:
            while len(self._by_token) >= self.max_sessions:
                self._forget(next(iter(self._unused or self._by_token)))
            self._by_token[token] = dispatcher
            self._unused[token] = None
        elif state is State.CLOSED:
            self._forget(token)

    def retry_after(self, dispatcher: Dispatcher) -> float | None:
        """Token mode at ``max_sessions`` with every session in recent use: the seconds until
        a newcomer may take the least recently used one's place; None when it is served."""
        if self.policy != "token" or len(self._by_token) < self.max_sessions \
                or dispatcher.session.token in self._by_token or self._unused:
            return None
        oldest = next(iter(self._by_token.values())).session.last_used
        wait = oldest + _BUSY_S - time.monotonic()
        return wait if wait > 0 else None

    def _forget(self, token: str) -> None:
        self._by_token.pop(token, None)
        self._unused.pop(token, None)

    def _sweep(self, now: float) -> None:
        """Forget idle sessions (at most every 30 s; lookups also check the age)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + min(self.ttl_s, 30.0)
        while self._by_token:
            token, oldest = next(iter(self._by_token.items()))
            if now - oldest.session.last_used <= self.ttl_s:
                break
            self._forget(token)


_BUSY_S = 5.0
"""A token session used this recently is mid-conversation: a newcomer does not evict it."""


def _error_body(error: RcpError) -> bytes:
    return messages.encode(messages.error_response(None, error))


Headers = dict[bytes, bytes]
Stream = tuple[Receive, Send]
"""The ASGI pair a reply can be streamed on (SSE) and a disconnect learned from."""


class Gate(Protocol):
    """Who may send a request, decided from its head before the body is read (§15.6).

    ``admit`` returns the caller's principal (None: anonymous) or the refusal to send;
    every admitted request is later given back to ``release``, so a gate may count
    requests in flight per principal."""

    def admit(self, headers: Headers) -> str | Reply | None: ...

    def release(self, principal: str | None) -> None: ...


def presented_credentials(headers: Headers, api_key_header: bytes | None) -> list[bytes] | Reply:
    """The credentials in ``Authorization: Bearer`` and the API-key header (whitespace
    stripped), or 400 when a credential header came more than once (combined with commas,
    which no token holds)."""
    authorization = headers.get(b"authorization")
    api_key = headers.get(api_key_header) if api_key_header is not None else None
    if (authorization is not None and b"," in authorization) \
            or (api_key is not None and b"," in api_key):
        return 400, [], _error_body(InvalidRequest("a credential header appears twice"))
    presented: list[bytes] = []
    if authorization is not None and authorization[:7].lower() == b"bearer ":
        presented.append(authorization[7:].strip())
    if api_key is not None:
        presented.append(api_key.strip())
    return presented


def unauthenticated() -> Reply:
    """401 with a ``-32012`` body: no credential presented is right."""
    return 401, [(b"www-authenticate", b"Bearer")], _error_body(
        Unauthorized("missing or invalid credentials"))


class TokenGate:
    """The fixed list of accepted tokens (``--auth-token``): the principal is
    ``credential-<n>``, which accepted token; no tokens means no authentication."""

    def __init__(self, auth_tokens: Iterable[str], api_key_header: str | None) -> None:
        self.auth_tokens = tuple(token.encode() for token in auth_tokens if token)
        self.api_key_header = api_key_header.lower().encode() if api_key_header else None

    def admit(self, headers: Headers) -> str | Reply | None:
        if not self.auth_tokens:
            return None
        presented = presented_credentials(headers, self.api_key_header)
        if isinstance(presented, tuple):
            return presented
        for offered in presented:
            for index, known in enumerate(self.auth_tokens):
                if hmac.compare_digest(offered, known):
                    return f"credential-{index}"
        return unauthenticated()

    def release(self, principal: str | None) -> None:
        """Nothing is counted."""


class _Endpoint:
    """The POST handler shared by ``<base>`` and ``<base>/<method>``.

    A plain ASGI app (no Request/Response objects on the hot path): Starlette routes
    to it, answers 404/405 and applies CORS around it.
    """

    def __init__(self, server: Server, sessions: _Sessions, gate: Gate, max_body_bytes: int,
                 max_pending: int) -> None:
        self.server = server
        self.sessions = sessions
        self.gate = gate
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
        reply = await self.answer(scope.get("path_params", {}).get("method"),
                                  header_map(scope["headers"]), receive, (receive, send))
        if reply is not None:
            await _respond(send, *reply)

    async def answer(self, path_method: str | None, headers: Headers, body: bytes | Receive,
                     stream: Stream | None) -> Reply | None:
        """The reply to one POST, or None once it went out as SSE on ``stream``.

        ``body`` is the request body, or the ASGI ``receive`` to read it from; without a
        ``stream`` the reply is always buffered. The gate goes first (credentials and
        what else it checks), then load (429), then the body; an unexpected failure here is
        a 500 (``-32603``)."""
        principal = self.gate.admit(headers)
        if isinstance(principal, tuple):
            return principal
        if self.pending >= self.max_pending:
            self.gate.release(principal)
            return shed(_PENDING_RETRY_S, "server busy")
        self.pending += 1
        try:
            if not isinstance(body, bytes):
                received = await self.read_body(headers, body)
                if received is None:
                    return self.too_large()
                body = received
            return await self.dispatch(path_method, headers, body, stream, principal)
        except ClientDisconnect:
            return None
        except Exception:
            logger.exception("HTTP transport failure")
            return 500, [], _error_body(InternalError())
        finally:
            self.pending -= 1
            self.gate.release(principal)

    def too_large(self) -> Reply:
        return 413, [], _error_body(PayloadTooLarge(
            f"the body exceeds {self.max_body_bytes} bytes", data={"limit": self.max_body_bytes}))

    async def dispatch(self, path_method: str | None, headers: Headers, body: bytes,
                       stream: Stream | None, principal: str | None) -> Reply | None:
        """``principal`` is the caller of a stateless request, whose session all share; a
        token or single session is the caller itself."""
        parsed = messages.parse(body)
        if isinstance(parsed, Invalid) and isinstance(parsed.error, ParseError):
            return 400, [], _error_body(parsed.error)
        token = headers.get(_SESSION_KEY)
        presented = token.decode("latin-1") if token is not None else None
        dispatcher = self.sessions.dispatcher_for(presented)
        wait = self.sessions.retry_after(dispatcher)
        if wait is not None:
            return shed(wait, "every session is in use")
        if self.sessions.policy == "token" and presented is not None \
                and dispatcher.session.token != presented:
            parsed = _refuse_unknown_session(parsed)
        caller = principal if self.sessions.policy == "stateless" else None
        if stream is not None and isinstance(parsed, RpcRequest) \
                and self.wants_sse(headers, dispatcher):
            await self.stream(*stream, dispatcher, parsed, path_method, caller)
            return None
        reply = await dispatcher.handle_message(parsed, path_method=path_method, caller=caller)
        self.sessions.after(dispatcher)
        return (204, [], b"") if reply is None else (200, [], reply)

    def wants_sse(self, headers: Headers, dispatcher: Dispatcher) -> bool:
        advertised = dispatcher.session.protocol.capabilities or self.server.capabilities
        return "streaming" in advertised and b"text/event-stream" in headers.get(b"accept", b"")

    async def stream(self, receive: Receive, send: Send, dispatcher: Dispatcher,
                     parsed: RpcRequest, path_method: str | None, caller: str | None) -> None:
        """Progress/log frames as they come, then exactly one final frame (§5.2). A client
        that disconnects cancels the call: nobody is left to read its result."""
        frames: asyncio.Queue[bytes] = asyncio.Queue()
        call = asyncio.ensure_future(dispatcher.handle_message(
            parsed, notify=frames.put_nowait, path_method=path_method, caller=caller))
        gone = asyncio.ensure_future(_disconnect(receive))
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
        try:
            while not call.done():
                getter = asyncio.ensure_future(frames.get())
                await asyncio.wait({getter, call, gone}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    await _send_chunk(send, sse_event(getter.result()))
                else:
                    getter.cancel()
                if gone.done() and not call.done():
                    return
            while not frames.empty():
                await _send_chunk(send, sse_event(frames.get_nowait()))
            reply = call.result()
            self.sessions.after(dispatcher)
            await send({"type": "http.response.body",
                        "body": sse_event(reply) if reply is not None else b""})
        finally:
            call.cancel()
            gone.cancel()


async def _disconnect(receive: Receive) -> None:
    """Return once the client is gone (ASGI ``http.disconnect``, after the request body)."""
    while (await receive())["type"] != "http.disconnect":
        pass


_SESSION_KEY = SESSION_HEADER.lower().encode()
_JSON = (b"content-type", b"application/json")
_PENDING_RETRY_S = 1.0
"""Retry advice when ``max_pending`` requests are in flight: requests take milliseconds, so
a second is enough for some to finish."""


def shed(seconds: float, reason: str) -> Reply:
    """429 with ``Retry-After`` (whole seconds, rounded up) and ``data.retryAfterMs``."""
    whole = max(1, math.ceil(seconds))
    return 429, [(b"retry-after", b"%d" % whole)], _error_body(
        RateLimited(reason, retryAfterMs=math.ceil(seconds * 1000)))


def _headers(status: int, extra: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A reply's headers besides ``content-length``: JSON unless it is a bodiless 204."""
    return list(extra) if status == 204 else [_JSON, *extra]


async def _respond(send: Send, status: int, extra: list[tuple[bytes, bytes]],
                   body: bytes) -> None:
    headers = _headers(status, extra)
    if status != 204:
        headers.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_chunk(send: Send, chunk: bytes) -> None:
    await send({"type": "http.response.body", "body": chunk, "more_body": True})


def _refuse_unknown_session(parsed: Any) -> Any:
    """Token mode: a request naming an unknown/expired session is answered as uninitialized,
    except the methods callable at any time, which a fresh session handles normally."""
    if isinstance(parsed, RpcRequest) and parsed.method not in ("info", "ping", "shutdown",
                                                                "initialize"):
        return Invalid(parsed.id, NotInitialized(
            "unknown or expired session: send initialize for a new one",
            data={"detail": f"{SESSION_HEADER} not recognised"}))
    return parsed


class _RcpApp(Starlette):
    """Starlette, plus two shortcuts for the hot path, a POST under ``base``: in any ASGI
    server it goes straight to the endpoint, skipping the generic middleware and router;
    under :class:`.httpserver.HttpServer` it is answered as a :class:`.httpserver.DirectRoute`
    (no ASGI at all) unless it may want SSE. Everything else, and every request when CORS
    is on, takes the full Starlette stack (404, 405, OPTIONS preflight, CORS headers)."""

    def __init__(self, base: str, endpoint: _Endpoint, *, fast_path: bool,
                 **options: Any) -> None:
        super().__init__(**options)
        self._base = base
        self._prefix = base + "/"
        self._endpoint = endpoint
        self._fast_path = fast_path
        self.direct: DirectRoute | None = self if fast_path else None

    def _route(self, path: str) -> str | None:
        """``""`` for the base path, the method for ``<base>/<method>``, else None."""
        if path == self._base:
            return ""
        if path.startswith(self._prefix) and len(path) > len(self._prefix):
            return path[len(self._prefix):]
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._fast_path and scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            root = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root):]
            route = self._route(path)
            if route is not None:
                scope["path_params"] = {"method": route} if route else {}
                await self._endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def claim(self, method: bytes, target: bytes, headers: Headers) -> str | None:
        """:class:`.httpserver.DirectRoute`: a POST to a plain path under ``base`` with a
        body length within the limit and no SSE in ``Accept``."""
        if method != b"POST" or b"?" in target or b"%" in target \
                or b"text/event-stream" in headers.get(b"accept", b""):
            return None
        length = headers.get(b"content-length", b"")
        if not length.isdigit() or int(length) > self._endpoint.max_body_bytes:
            return None
        return self._route(target.decode("latin-1"))

    async def answer(self, route: str, headers: Headers, body: bytes) -> Reply:
        reply = await self._endpoint.answer(route or None, headers, body, None)
        assert reply is not None, "without a stream every reply is buffered"
        status, extra, payload = reply
        return status, _headers(status, extra), payload


def create_app(server: Server, *, base: str = "/rcp", sessions: SessionPolicy = "stateless",
               auth_tokens: Iterable[str] = (), api_key_header: str | None = None,
               cors_origins: Iterable[str] = (), max_body_bytes: int = 8 * 1024 * 1024,
               session_ttl_s: float = 900.0, max_sessions: int = 10_000,
               max_pending: int = 1024, max_concurrency: int = 64,
               request_timeout_ms: float | None = None, gate: Gate | None = None,
               authorize: Authorize | None = None) -> Starlette:
    """The ASGI app serving ``server`` at ``base`` (see the module docstring). ``gate``
    replaces the ``auth_tokens`` check; ``authorize`` is the dispatcher's per-request
    check of the caller (:class:`~rcpkit.server.dispatcher.Dispatcher`)."""
    base = "/" + base.strip("/")
    endpoint = _Endpoint(server, _Sessions(server, sessions, session_ttl_s, max_sessions, {
        "max_concurrency": max_concurrency, "request_timeout_ms": request_timeout_ms,
        "authorize": authorize}),
        gate or TokenGate(auth_tokens, api_key_header), max_body_bytes, max_pending)
    routes = [Route(base, endpoint, methods=["POST"]),
              Route(base + "/{method:path}", endpoint, methods=["POST"])]
    middleware = []
    origins = list(cors_origins)
    if origins:
        allowed_headers = ["Authorization", "Content-Type", SESSION_HEADER]
        if api_key_header:
            allowed_headers.append(api_key_header)
        middleware.append(Middleware(CORSMiddleware, allow_origins=origins,
                                     allow_methods=["POST", "OPTIONS"],
                                     allow_headers=allowed_headers))
    return _RcpApp(base, endpoint, fast_path=not origins, routes=routes, middleware=middleware)



ServerSource = Server | Callable[[], Server]


def serve_http(server: ServerSource, host: str = "127.0.0.1", port: int = 8080, *,
               workers: int = 1, graceful_timeout_s: float = 10.0,
               limits: Mapping[str, Any] | None = None, **app_options: Any) -> int:
    """Serve ``server`` over HTTP/1.1 with the lean server of :mod:`.httpserver` until
    SIGINT/SIGTERM; in-flight requests then get ``graceful_timeout_s`` to finish.
    ``limits`` go to :class:`.httpserver.HttpServer` (``max_connections``,
    ``max_header_bytes``, ``header_timeout_s``, …), ``app_options`` to :func:`create_app`.
    Returns the exit status.

    ``workers > 1`` runs that many processes accepting on one listening socket, for the
    ``stateless`` policy only (``token``/``single`` sessions live in one process). Each
    worker calls ``server`` — then a zero-argument factory — *after* the fork, so no
    model, thread or database handle is shared, and the server it builds must declare
    ``Server.multiprocess_safe``; otherwise nothing is served and the status is 2.
    """
    if workers < 1:
        raise UsageError("workers must be at least 1")
    if workers == 1:
        app = create_app(server if isinstance(server, Server) else server(), **app_options)
        return serve_app(app, host, port, base=app_options.get("base", "/rcp"),
                         graceful_timeout_s=graceful_timeout_s, limits=limits)
    if app_options.get("sessions", "stateless") != "stateless":
        raise UsageError("several workers need the stateless session policy: token and "
                         "single sessions live in one process")
    if isinstance(server, Server):
        raise UsageError("several workers need a factory that builds the server after the "
                         "fork, not a Server built beforehand")
    listener = _listen(host, port)
    return _Workers(server, listener, workers, graceful_timeout_s, app_options,
                    dict(limits or {})).run()


def serve_app(app: Any, host: str = "127.0.0.1", port: int = 8080, *, base: str = "/rcp",
              graceful_timeout_s: float = 10.0, limits: Mapping[str, Any] | None = None) -> int:
    """Serve a ready ASGI ``app`` (RCP at ``base``) in this process, as :func:`serve_http`
    does with one worker."""
    listener = _listen(host, port)
    _announce(listener, base)
    HttpServer(app, graceful_timeout_s=graceful_timeout_s, **(limits or {})).run(listener)
    return 0


def _announce(listener: socket.socket, base: str, workers: int = 1) -> None:
    """Say on stderr where requests go, with the port actually bound (``:0`` included)."""
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    processes = f" in {workers} worker processes" if workers > 1 else ""
    print(f"rcpkit: serving RCP/1 over HTTP at http://{shown}:{port}{base}{processes} "
          "(Ctrl-C stops)", file=sys.stderr, flush=True)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    listener.listen(2048)
    return listener


_SUPERVISOR_POLL_S = 0.2


class _Workers:
    """Pre-fork supervisor: one worker first (it must build and declare itself safe), then
    the rest; a signal is passed on to every worker; when one worker ends, all do."""

    def __init__(self, build: Callable[[], Server], listener: socket.socket, count: int,
                 graceful_timeout_s: float, app_options: dict[str, Any],
                 limits: dict[str, Any]) -> None:
        self.build = build
        self.limits = limits
        self.listener = listener
        self.count = count
        self.graceful_timeout_s = graceful_timeout_s
        self.app_options = app_options
        self.pids: list[int] = []
        self.ended: dict[int, int] = {}
        """Exit codes of the workers reaped so far (negative: killed by that signal)."""

    def run(self) -> int:
        stopping: list[int] = []

        def forward(signum: int, _frame: Any) -> None:
            stopping.append(signum)
            self._signal_all(signum)

        previous = {signum: signal.signal(signum, forward)
                    for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self._spawn_first():
                # Said once the first worker serves: a refused server never claims to listen.
                _announce(self.listener, self.app_options.get("base", "/rcp"), self.count)
                while len(self.pids) < self.count and not stopping:
                    self.pids.append(self._fork(None))
                while not self._any_ended():  # only our own children are waited for
                    time.sleep(_SUPERVISOR_POLL_S)
                self._signal_all(signal.SIGTERM)
            return self._reap_all()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.listener.close()

    def _spawn_first(self) -> bool:
        """Fork one worker and wait until it serves (True) or gave up (False)."""
        ready_read, ready_write = os.pipe()
        self.pids.append(self._fork(ready_write))
        os.close(ready_write)
        with os.fdopen(ready_read, "rb") as ready:
            return ready.read(1) == b"1"

    def _fork(self, ready_fd: int | None) -> int:
        pid = os.fork()
        if pid:
            return pid
        status = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            status = self._serve_worker(ready_fd)
        except BaseException:
            logger.exception("HTTP worker failure")
        finally:
            os._exit(status)

    def _serve_worker(self, ready_fd: int | None) -> int:
        try:
            server = self.build()
            if not server.multiprocess_safe:
                raise UsageError(f"server {server.name!r} does not declare itself multi-process "
                                 "safe (Server.multiprocess_safe); serve it with one worker")
        except UsageError as exc:
            print(f"rcpkit serve: error: {exc}", file=sys.stderr, flush=True)
            return 2
        app = create_app(server, **self.app_options)
        if ready_fd is not None:
            os.write(ready_fd, b"1")
            os.close(ready_fd)
        HttpServer(app, graceful_timeout_s=self.graceful_timeout_s, **self.limits).run(
            self.listener)
        return 0

    def _signal_all(self, signum: int) -> None:
        for pid in self.pids:
            if pid not in self.ended:  # a reaped pid may already belong to someone else
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)

    def _any_ended(self) -> bool:
        for pid in self.pids:
            if pid not in self.ended:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    self.ended[pid] = os.waitstatus_to_exitcode(status)
        return bool(self.ended)

    def _reap_all(self) -> int:
        """Wait for every worker; the status is the worst one's (0 when all stopped cleanly)."""
        for pid in self.pids:
            if pid not in self.ended:
                self.ended[pid] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        failures = [code if code > 0 else 1 for code in self.ended.values()
                    if code not in (0, -signal.SIGTERM, -signal.SIGINT)]
        return max(failures, default=0)
