"""The RCP endpoint over HTTP (§5.2): one POST in, its reply out, whoever serves it.

Every RCP request over HTTP is answered by one :class:`Endpoint`, through one of two doors:

- :meth:`Endpoint.answer` — the body at hand, the reply buffered. The in-house server
  (:mod:`.server`) calls it for a POST it read whole;
- :meth:`Endpoint.stream` — the body read from ASGI ``receive``, the reply written on
  ``send``, as Server-Sent Events when the client asks and the session streams (§9). The ASGI
  adapter (:mod:`.asgi`) calls it, under uvicorn, a Starlette mount or the in-house server
  (a chunked body, SSE in ``Accept``, a query in the target).

Both run the same steps, in this order, each refusal answered before the next step:

1. the gate (:class:`.auth.Gate`): credentials and whatever else it checks (401/403/429),
   before the body is read, so nothing is revealed without them (§15.6);
2. load: at ``max_pending`` requests in flight, 429 with ``Retry-After``;
3. the body: over ``max_body_bytes``, 413 (``-32013``);
4. JSON: a body that is not JSON is 400 (``-32700``);
5. the session (:mod:`.sessions`, §13), then the dispatcher
   (:class:`~rcpkit.server.dispatcher.Dispatcher`); a failure of this code itself is 500.

:class:`Endpoints` is the one table of which endpoint answers a path: the server asks it
from the raw request head (:meth:`Endpoints.claim`), the ASGI adapter from the decoded path
(:meth:`Endpoints.find`). A collections server (:mod:`rcpkit.tenancy.app`) routes through
the same table, one endpoint per collection.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.types import Receive, Send

from ...protocol import messages
from ...protocol.errors import InternalError, ParseError, PayloadTooLarge
from ...protocol.messages import Invalid
from ...protocol.messages import Request as RpcRequest
from ...server.dispatcher import AdmitMember, Authorize
from ...server.framework import Server
from ...tracing import Tracing
from ..access import AccessLog, outcome_code, request_summary
from .auth import Authenticator, Gate
from .metrics import Metrics
from .replies import JSON_HEADERS, error_reply, respond, shed
from .server import Reply
from .sessions import SESSION_HEADER, SessionPolicy, Sessions, refuse_unknown_session
from .sse import stream_call, wants_sse

__all__ = ["Endpoint", "Endpoints", "Route", "open_endpoint"]

logger = logging.getLogger("rcpkit.server")

Headers = dict[bytes, bytes]
Stream = tuple[Receive, Send]
"""The ASGI pair a body is read from and a reply written on (SSE included)."""

_SESSION_KEY = SESSION_HEADER.lower().encode()
_PENDING_RETRY_S = 1.0
"""Retry advice when ``max_pending`` requests are in flight: requests take milliseconds, so
a second is enough for some to finish."""


class Endpoint:
    """The RCP endpoint of one server: ``<base>`` and ``<base>/<method>`` (see the module
    docstring for its steps). ``label`` names it in metrics and access lines."""

    def __init__(self, server: Server, sessions: Sessions, gate: Gate, *,
                 max_body_bytes: int, max_pending: int,
                 refused: Callable[[str], None], access_log: AccessLog | None = None,
                 label: str = "") -> None:
        self.server = server
        self.sessions = sessions
        self.gate = gate
        self.max_body_bytes = max_body_bytes
        self.max_pending = max_pending
        self.pending = 0
        """Requests in flight (the body read, or its reply awaited)."""
        self.refused = refused
        """Told the reason of each request refused before any handler saw it
        (:data:`REFUSALS`): metrics count them."""
        self.access_log = access_log
        self.label = label
        self.limit_digits = len(str(max_body_bytes))
        """A declared length with fewer digits is within the limit (:meth:`Endpoints.claim`)."""
        self._handle: Callable[[str, Headers, bytes | None, Stream | None],
                               Coroutine[Any, Any, Reply]] = (
            self._handle_logged if access_log is not None else self._handle_request)
        """Chosen once: without an access log, no wrapper runs."""

    def answer(self, method: str, headers: Headers, body: bytes) -> Coroutine[Any, Any, Reply]:
        """The buffered reply to a POST of ``body``. ``method`` is the method the path
        names (``<base>/<method>``), ``""`` for the base itself; ``headers`` are lower-cased.

        A coroutine that may finish on its first step (a reply no handler waits for):
        the in-house server steps it once before making it a task."""
        return self._handle(method, headers, body, None)

    async def stream(self, method: str, headers: Headers, receive: Receive,
                     send: Send) -> None:
        """Answer a POST over ASGI: its body read from ``receive`` (within the limit), its
        reply written on ``send``, as SSE when asked (see :meth:`answer`)."""
        reply = await self._handle(method, headers, None, (receive, send))
        if reply is not _SENT:
            await respond(send, *reply)

    async def _handle_request(self, method: str, headers: Headers, body: bytes | None,
                              stream: Stream | None, seen: _Seen | None = None) -> Reply:
        """The steps of the module docstring; ``body`` None: read it from ``stream``.
        :data:`_SENT` when the reply went out as SSE, or the client left while sending the
        body. ``seen`` is told who called and the body read (the access line)."""
        principal = self.gate.admit(headers)
        if isinstance(principal, tuple):
            self.refused(REFUSALS.get(principal[0], str(principal[0])))
            return principal
        if seen is not None:
            seen.principal = principal
        if self.pending >= self.max_pending:
            self.gate.release(principal)
            self.refused("shed")
            return shed(_PENDING_RETRY_S, "server busy")
        self.pending += 1
        try:
            if body is None:
                assert stream is not None
                body = await self._read_body(headers, stream[0])
                if body is None:
                    self.refused("payload_too_large")
                    return error_reply(413, PayloadTooLarge(
                        f"the body exceeds {self.max_body_bytes} bytes",
                        data={"limit": self.max_body_bytes}))
                if seen is not None:
                    seen.body = body
            return await self._dispatch(method, headers, body, stream, principal)
        except ClientDisconnect:
            return _SENT
        except Exception:
            logger.exception("HTTP transport failure")
            return error_reply(500, InternalError())
        finally:
            self.pending -= 1
            self.gate.release(principal)

    async def _read_body(self, headers: Headers, receive: Receive) -> bytes | None:
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

    async def _dispatch(self, method: str, headers: Headers, body: bytes,
                        stream: Stream | None, principal: str | None) -> Reply:
        """``principal`` is the caller of a stateless request, whose session all share; a
        token or single session is the caller itself."""
        path_method = method or None
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
            await stream_call(*stream, dispatcher, parsed, path_method, caller, headers,
                              sessions.after)
            return _SENT
        # (the dispatcher answers at once when no handler runs: no coroutine is awaited)
        outcome = dispatcher.handle_now(parsed, path_method=path_method, caller=caller,
                                        headers=headers)
        reply = outcome if outcome is None or isinstance(outcome, bytes) else await outcome
        if sessions.policy == "token":  # keeps a session that just initialized
            sessions.after(dispatcher)
        return (204, (), b"") if reply is None else (200, JSON_HEADERS, reply)

    # ── the access log (:mod:`..access`) ────────────────────────────────────
    async def _handle_logged(self, method: str, headers: Headers, body: bytes | None,
                             stream: Stream | None) -> Reply:
        """:meth:`_handle_request`, then one access line."""
        seen = _Seen(time.perf_counter(), body)
        reply = await self._handle_request(method, headers, body, stream, seen)
        assert self.access_log is not None
        summary, _ids = request_summary(seen.body) if seen.body is not None else ("-", [])
        status, code, size = (200, None, None) if reply is _SENT \
            else (reply[0], outcome_code(reply[2]), len(reply[2]))
        self.access_log.record(
            method=method or summary, collection=self.label, principal=seen.principal,
            status=status, code=code, seconds=time.perf_counter() - seen.started,
            bytes_in=None if seen.body is None else len(seen.body), bytes_out=size)
        return reply


@dataclass(slots=True)
class _Seen:
    """What the access line of one request needs to know from its handling."""

    started: float
    body: bytes | None
    principal: str | None = None


_SENT: Reply = (200, (), b"")
"""What :meth:`Endpoint._handle_request` gives (this very object) when nothing is left to
send: the reply went out as SSE (status 200), or the client left."""

REFUSALS = {400: "bad_request", 401: "unauthenticated", 403: "forbidden", 413:
            "payload_too_large", 429: "rate_limited"}
"""The ``reason`` label of a request the gate refused, by HTTP status; ``shed`` is a
refusal for load."""


def open_endpoint(server: Server, *, sessions: SessionPolicy = "stateless",
                  auth_tokens: Iterable[str] = (), api_key_header: str | None = None,
                  max_body_bytes: int = 8 * 1024 * 1024, session_ttl_s: float = 900.0,
                  max_sessions: int = 10_000, max_pending: int = 1024,
                  max_concurrency: int = 64, request_timeout_ms: float | None = None,
                  metrics: Metrics | None = None, collection: str | None = None,
                  log_bodies: bool = False, gate: Gate | None = None,
                  authorize: Authorize | None = None, admit_member: AdmitMember | None = None,
                  tracing: Tracing | None = None, access_log: AccessLog | None = None,
                  clock: Callable[[], float] = time.monotonic) -> Endpoint:
    """The endpoint serving ``server`` (options: :func:`.asgi.create_app`)."""
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
    return Endpoint(server,
                    Sessions(server, sessions, session_ttl_s, max_sessions, options, clock),
                    gate or Authenticator(auth_tokens, api_key_header),
                    max_body_bytes=max_body_bytes, max_pending=max_pending, refused=refused,
                    access_log=access_log, label=label)


def _observe(metrics: Metrics, collection: str, method: str | None, code: int,
             seconds: float) -> None:
    metrics.request_done(method, collection, code, seconds)


def _uncounted(reason: str) -> None:
    """Without metrics a refusal is not counted."""


Route = tuple[Endpoint, str]
"""The endpoint answering a path, and the method the path names (``""``: the base)."""

_KEPT_PATHS = 256
"""How many paths keep their routes (a server has a few dozen methods): past that, paths a
client makes up are looked up afresh, never kept."""


class Endpoints:
    """Which endpoint answers a POST, by its path: ``base`` and ``base/<method>`` go to
    ``root`` (:meth:`locate`; a subclass routes more paths). Everything else — another
    verb or path, and every request while the app applies CORS — is the framework's
    (Starlette's 404, 405, OPTIONS, CORS headers, the operational ``GET`` routes)."""

    def __init__(self, base: str, root: Endpoint) -> None:
        self.base = base
        self.root = root
        self.prefix = base + "/"
        self.cors = False
        """Set by the app while it applies CORS: no request is then found here."""
        self._kept: dict[str | bytes, Route] = {}

    def locate(self, path: str) -> Route | None:
        """The route of a POST to ``path`` (decoded), None outside the base."""
        if path == self.base:
            return self.root, ""
        if path.startswith(self.prefix) and len(path) > len(self.prefix):
            return self.root, path[len(self.prefix):]
        return None

    def find(self, verb: str, path: str) -> Route | None:
        """The route of a request at the ASGI entry (``path`` decoded, the root path
        removed); None: the framework's."""
        if verb != "POST" or self.cors:
            return None
        return self._kept.get(path) or self._keep(path, path)

    def claim(self, verb: bytes, target: bytes, headers: Headers) -> Route | None:
        """The route of a request the in-house server may read whole and have answered
        (:meth:`Endpoint.answer`), from its raw target and lower-cased headers: a POST with
        a ``content-length`` within the endpoint's limit, not asking for SSE. None: the
        ASGI entry decides — also for a target with a query or an escape, whose path
        every ASGI server decodes the same way."""
        if verb != b"POST" or self.cors:
            return None
        route = self._kept.get(target) or self._keep(
            target, None if target.find(b"?") >= 0 or target.find(b"%") >= 0
            else target.decode("latin-1"))
        if route is None:
            return None
        accept = headers.get(b"accept")
        # ``partition``: the cheapest search on bytes (see ``messages.encode``)
        if accept is not None and accept.partition(b"text/event-stream")[1]:
            return None
        length = headers.get(b"content-length", b"")
        endpoint = route[0]
        # Fewer digits than the limit's are within it: no int() for the usual request.
        return route if length.isdigit() and (len(length) < endpoint.limit_digits or int(
            length) <= endpoint.max_body_bytes) else None

    def _keep(self, key: str | bytes, path: str | None) -> Route | None:
        """The route of ``path`` (None: not one to look up), kept under ``key`` while fewer
        than :data:`_KEPT_PATHS` are."""
        route = None if path is None else self.locate(path)
        if route is not None and len(self._kept) < _KEPT_PATHS:
            self._kept[key] = route
        return route
