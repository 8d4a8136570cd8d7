"""A lean HTTP/1.1 server for the RCP ASGI app (§5.2): asyncio + httptools, nothing else.

It runs the very app :func:`rcpkit.transports.http.create_app` returns — the same
endpoint, sessions, auth, CORS and SSE code that any ASGI server runs — so it adds
no protocol logic of its own; it only replaces uvicorn's general-purpose HTTP layer
(measured: 1.3–1.8× the requests/s of uvicorn with httptools + uvloop on the same app,
see docs/benchmarks.md "Protocol").

Scope, on purpose: ``http`` scopes only (no lifespan, no WebSocket — the RCP app
uses neither); keep-alive with an idle timeout; pipelined requests answered in
order; request bodies streamed to the app with back-pressure; ``Expect:
100-continue``; responses with a ``Content-Length`` or chunked (SSE); graceful stop
(stop accepting, let in-flight requests finish within a grace period, then close).

Limits against hostile clients (§15.5; each one configurable on :class:`HttpServer`):
a request line over ``max_request_line`` bytes is 414 and a head over
``max_header_bytes`` is 431, both checked before the parser buffers them and before
the app (hence auth) sees the request; a head must arrive within ``header_timeout_s``
of its first byte and a body within ``body_timeout_s`` of its head (else 408), so a
trickle of bytes cannot hold a connection; at ``max_connections`` open connections a
newcomer takes the place of the longest-idle keep-alive connection, else of the longest
trickling head, else it is answered 503 and closed. An ``Upgrade`` offer (``h2c``, what
``curl --http2`` sends) is ignored and the request served as HTTP/1.1, its body included.

Two shortcuts keep a small request cheap (the RCP hot path is a ~40-byte JSON body):

- an app may offer its RCP endpoints (its ``endpoints`` attribute, :class:`Claims`): a
  request they claim from its head is read whole and handed to its endpoint's ``answer``,
  which gives ``(status, headers, body)``, with no ASGI scope or message at all; when its
  client disconnects, such a request still running is cancelled (an ASGI app learns of it
  from ``http.disconnect`` instead);
- every request runs eagerly, up to its first suspension, from the parser callback;
  only a request that actually waits becomes a task (what ``asyncio``'s eager task
  factory does from Python 3.12 on), and one answered on its first step (nothing to wait
  for) is written from that same callback.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import email.utils
import logging
import signal
import socket
import time
from collections.abc import Coroutine, Generator, Sequence
from http import HTTPStatus
from typing import Any, Generic, Protocol, TypeVar, cast
from urllib.parse import unquote

import httptools
from starlette.types import ASGIApp, Message

__all__ = ["Answers", "Claims", "HttpServer", "Reply", "header_map"]

logger = logging.getLogger("rcpkit.server")

_BODY_HIGH_WATER = 1 << 16
"""Stop reading from a client once this many request-body bytes wait for the app."""
_MAX_PIPELINE = 16
"""Stop reading from a client with this many requests queued behind the current one."""

_SWEEP_S = 1.0
"""How often read deadlines are checked (their precision) and the ``Date`` is renewed."""
_SLOW_HEAD_S = 1.0
"""At the connection cap, a head still arriving after this long gives way to a newcomer."""

T = TypeVar("T")

_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


class _StatusLines(dict[int, bytes]):
    """Status code → status line; a code without a reason phrase gets an empty one."""

    def __missing__(self, status: int) -> bytes:
        return b"HTTP/1.1 %d \r\n" % status


_STATUS_LINES = _StatusLines({code: b"HTTP/1.1 %d %s\r\n" % (code, reason)
                              for code, reason in _REASONS.items()})
_NO_BODY_STATUSES = frozenset({204, 304})
_LENGTH_LINES_KEPT = 1024
_LENGTH_LINES = [b"content-length: %d\r\n" % length for length in range(_LENGTH_LINES_KEPT)]
"""The ``content-length`` lines of small bodies (most RCP replies), made once: formatting
one per reply is the costliest step of a small reply's head."""


def _date_line() -> bytes:
    """The ``Date`` header (RFC 9110 §6.6.1) of this second."""
    return b"date: " + email.utils.formatdate(time.time(), usegmt=True).encode() + b"\r\n"


def header_map(pairs: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """Lower-cased names → values; a field given on several lines is one comma-joined value
    (RFC 9110 §5.3), so a repeated singleton such as ``Authorization`` stays visible."""
    headers = {name.lower(): value for name, value in pairs}
    if len(headers) != len(pairs):
        for name in headers:
            values = [value for other, value in pairs if other.lower() == name]
            headers[name] = b", ".join(values)
    return headers


Reply = tuple[int, Sequence[tuple[bytes, bytes]], bytes]
"""A buffered response: status, every header but ``content-length`` (the server adds it),
body. The headers may be shared by many replies: they are never changed."""


class Answers(Protocol):
    """An endpoint the server hands the requests claimed for it (:class:`Claims`)."""

    def answer(self, method: str, headers: dict[bytes, bytes], body: bytes
               ) -> Coroutine[Any, Any, Reply]:
        """The response to a claimed request, read whole: a coroutine, which may finish on
        its first step (stepped from the parser callback; a task only if it waits)."""


Route = tuple[Answers, str]
"""The endpoint of a claimed request and the method its path names."""


class Claims(Protocol):
    """The requests an app has answered from a fully buffered body, bypassing ASGI."""

    def claim(self, verb: bytes, target: bytes, headers: dict[bytes, bytes]) -> Route | None:
        """The endpoint and method of this request (by its verb, raw request target and
        lower-cased headers), or None for the ASGI app. Only requests with a
        ``content-length`` the endpoint accepts may be claimed: the server buffers them."""


class _Exchange:
    """One request/response on a connection: the ASGI ``receive``/``send`` pair, or the
    buffered body of a request its endpoint answers (``route`` set, :class:`Claims`)."""

    # Slots: no per-exchange attribute dict or weak-reference list to make and free.
    __slots__ = ("body_delivered", "buffered", "chunked", "chunks", "conn", "disconnected",
                 "expect_continue", "head", "head_only", "headers", "http_version", "keep_alive",
                 "request_complete", "response_complete", "response_started", "route", "scope",
                 "started", "task", "waiter")

    def __init__(self, conn: _Connection, scope: dict[str, Any] | None, keep_alive: bool,
                 expect_continue: bool, http_version: str, head_only: bool,
                 headers: dict[bytes, bytes], route: Route | None = None) -> None:
        self.conn = conn
        self.scope = scope
        self.route = route
        self.headers = headers
        """The request's headers, names lower-cased; a claimed request's endpoint is handed
        them."""
        self.keep_alive = keep_alive
        self.http_version = http_version
        self.expect_continue = expect_continue
        self.head_only = head_only
        self.chunks: list[bytes] = []
        self.started = False
        self.task: asyncio.Task[None] | None = None  # once it waits for something
        self.buffered = 0
        self.request_complete = False
        self.body_delivered = False
        self.disconnected = False
        self.waiter: asyncio.Future[None] | None = None
        self.response_started = False
        self.response_complete = False
        self.chunked = False
        self.head = b""

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def receive(self) -> Message:
        if self.body_delivered:  # afterwards only the end of the exchange is news (ASGI)
            while not (self.disconnected or self.response_complete):
                await self._wait()
            return {"type": "http.disconnect"}
        while not (self.chunks or self.request_complete or self.disconnected):
            if self.expect_continue:
                self.expect_continue = False
                self.conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.conn.resume_reading()
            await self._wait()
        if self.disconnected:
            return {"type": "http.disconnect"}
        body = b"".join(self.chunks)
        self.chunks.clear()
        self.buffered = 0
        self.conn.resume_reading()
        self.body_delivered = self.request_complete
        return {"type": "http.request", "body": body, "more_body": not self.request_complete}

    async def _wait(self) -> None:
        self.waiter = self.conn.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    async def send(self, message: Message) -> None:
        if self.disconnected or self.response_complete:
            return
        if message["type"] == "http.response.start":
            self.response_started = True
            self.head = self.encode_head(message["status"], message.get("headers", []))
            return
        if message["type"] != "http.response.body":
            return
        body: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        if self.head:
            head, self.head = self.head, b""
            if not more and not self.chunked:
                self.conn.write(head + (b"" if self.head_only else body))
                self._finish()
                return
            self.conn.write(head)
        if self.chunked:
            frame = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            self.conn.write(frame if more else frame + b"0\r\n\r\n")
        elif body and not self.head_only:
            self.conn.write(body)
        if not more:
            self._finish()
        else:
            await self.conn.drained()

    def encode_head(self, status: int, headers: Sequence[tuple[bytes, bytes]]) -> bytes:
        """Status line and headers of a streamed reply: its framing decided here (its own
        ``content-length``, chunked, or to the end of the connection)."""
        fields, has_length, closes = _header_fields(headers)
        head = _STATUS_LINES[status] + self.conn.server.date_line + fields
        if closes:
            self.keep_alive = False
        if not (has_length or self.head_only or status in _NO_BODY_STATUSES or status < 200):
            if self.keep_alive and self.http_version == "1.1":
                self.chunked = True
                head += b"transfer-encoding: chunked\r\n"
            else:
                self.keep_alive = False  # the body ends where the connection does
        if not self.keep_alive:
            head += b"connection: close\r\n"
        return head + b"\r\n"

    def _finish(self) -> None:
        self.response_complete = True
        self.wake()
        if not self.request_complete:
            self.keep_alive = False  # the unread rest of the body would be taken as a request

    def fail(self) -> None:
        """The app ended without a complete response: 500 if nothing was sent, else close."""
        if self.response_complete:
            return
        self.keep_alive = False
        if not self.response_started:
            body = b"Internal Server Error"
            self.conn.write(self.encode_head(500, [(b"content-type", b"text/plain; charset=utf-8"),
                                                   (b"content-length", str(len(body)).encode())])
                            + body)
        self._finish()


HeaderFields = tuple[bytes, bool, bool]
_fields_kept: dict[tuple[tuple[bytes, bytes], ...], HeaderFields] = {}
_FIELDS_KEPT = 64
"""How many header tuples keep their encoding: an app's replies share a few (a JSON reply's,
a 429's), so each is encoded once rather than per reply; lists are always encoded afresh."""


def _header_fields(headers: Sequence[tuple[bytes, bytes]]) -> HeaderFields:
    """The header lines of ``headers`` but a ``connection: close``, whether they hold a
    ``content-length``, and whether they ask to close the connection; a tuple's are kept
    (:func:`encode_reply` looks there first)."""
    fields, has_length, closes = b"", False, False
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"content-length":
            has_length = True
        elif lowered == b"connection" and value.lower() == b"close":
            closes = True
            continue
        fields += b"%s: %s\r\n" % (name, value)
    encoded = fields, has_length, closes
    if type(headers) is tuple and len(_fields_kept) < _FIELDS_KEPT:
        _fields_kept[headers] = encoded
    return encoded


def encode_reply(date_line: bytes, reply: Reply, keep_alive: bool) -> tuple[bytes, bool]:
    """A buffered reply's bytes, its ``content-length`` added (none for 204/304), and whether
    the connection stays open after it (``keep_alive``, unless its headers close it)."""
    status, headers, body = reply
    fields, _, closes = ((type(headers) is tuple and _fields_kept.get(headers))
                         or _header_fields(headers))
    length = len(body)
    keep_alive = keep_alive and not closes
    # One join: bytes joined are copied once, where each ``+`` would copy the head again.
    return b"".join((
        _STATUS_LINES[status], date_line, fields,
        b"" if status in _NO_BODY_STATUSES else _LENGTH_LINES[length]
        if length < _LENGTH_LINES_KEPT else b"content-length: %d\r\n" % length,
        b"\r\n" if keep_alive else b"connection: close\r\n\r\n", body)), keep_alive


class _Connection(asyncio.Protocol):
    """One client connection: parses requests and runs them through the app in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.loop = server.loop
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.local: tuple[str, int] | None = None
        self.remote: tuple[str, int] | None = None
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.current: _Exchange | None = None
        """The exchange being parsed (its body is still arriving)."""
        self.claimed: tuple[Route, dict[bytes, bytes], bool] | None = None
        """The route, headers and keep-alive of the request being read when it has no
        exchange: claimed with nothing queued before it, it is answered as soon as its body
        is complete (:meth:`_answer_direct`)."""
        self.claimed_body: list[bytes] = []
        self.queue: collections.deque[_Exchange] = collections.deque()
        """Exchanges parsed or being parsed, answered in order; the first one runs."""
        self.reading_paused = False
        self.writing_paused = False
        self.starting = False
        """True while :meth:`_start` runs exchanges (it is not re-entered)."""
        self.reading_head = True
        """Whether the next bytes belong to a request head (its limits apply)."""
        self.head_bytes = 0
        """Bytes of the request head being read, counted before the parser buffers them."""
        self.read_started: float | None = None
        """When the request being read (head, then body) began; None between requests."""
        self.raw_body_left = 0
        """Body bytes of an ``Upgrade`` request still to be read past the parser."""
        self.upgrade_body = 0
        """The declared body length of the ``Upgrade`` request whose head was just parsed."""
        self.drain_waiter: asyncio.Future[None] | None = None
        self.idle_timer: asyncio.TimerHandle | None = None
        self.idle_since = self.loop.time()
        """When the connection last received bytes or finished a response."""

    # ── asyncio.Protocol ────────────────────────────────────────────────────
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's does not subclass it
        if not self.server.admit(self):
            return
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local = _address(transport.get_extra_info("sockname"))
        self.remote = _address(transport.get_extra_info("peername"))
        self.server.connections.add(self)
        self._arm_idle_timer(self.server.keep_alive_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self._cancel_idle_timer()
        for exchange in self.queue:
            exchange.disconnected = True
            exchange.wake()
            if exchange.route is not None and exchange.task is not None:
                exchange.task.cancel()  # nobody is left to read the answer
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.idle_since = self.loop.time()
        if self.reading_head:
            if self.read_started is None:
                self.read_started = self.idle_since
            counted = self.head_bytes + len(data)
            # All of ``data`` counts as head until that could pass the limit: only then is
            # the head's end looked for (the parser resets the count once it has the head).
            if counted > self.server.max_header_bytes and not self._head_fits(data):
                return
            self.head_bytes = counted
        while data:
            if self.raw_body_left:
                data = self._take_raw_body(data)
                continue
            try:
                self.parser.feed_data(data)
                break
            except httptools.HttpParserUpgrade as upgrade:
                # No protocol switch is offered: the parser stopped after the head, so the
                # request is served as plain HTTP/1.1 and its body read past the parser.
                data = data[upgrade.args[0]:]
                self.parser = httptools.HttpRequestParser(self)
            except httptools.HttpParserError:
                if self.queue and not self.queue[-1].keep_alive:
                    # bytes after a request that closes the connection, which the parser
                    # refuses: that request is still answered, and no more are read
                    self.pause_reading()
                elif self.transport is not None and not self.transport.is_closing():
                    self.refuse(400, b"Invalid HTTP request")
                break
        if self.queue:
            self._start()

    def _head_fits(self, data: bytes) -> bool:
        """Count the head bytes in ``data`` before the parser sees them (it buffers a header
        piece by piece); answer 431 and close once a head exceeds its limit."""
        end = data.find(b"\r\n\r\n")
        if self.head_bytes + (len(data) if end < 0 else end + 4) <= self.server.max_header_bytes:
            return True
        self.refuse(431, b"the request head is too large")
        return False

    def _take_raw_body(self, data: bytes) -> bytes:
        piece = data[:self.raw_body_left]
        self.raw_body_left -= len(piece)
        self.on_body(piece)
        if not self.raw_body_left:
            self.on_message_complete()
        return data[len(piece):]

    def eof_received(self) -> bool | None:
        return None

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    # ── httptools callbacks ─────────────────────────────────────────────────
    # No ``on_message_begin`` (a callback less per request): ``on_url`` is the first news of
    # a request, and ``on_headers_complete`` leaves ``url`` and ``headers`` empty for the next.
    def on_url(self, url: bytes) -> None:
        if self.read_started is None:  # a request pipelined behind one just read
            self.read_started = self.loop.time()
        self.url = self.url + url if self.url else url  # its first piece is usually all of it
        if len(self.url) > self.server.max_request_line:
            self.refuse(414, b"the request target is too long")
            raise _Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        method = parser.get_method()
        keep_alive = parser.should_keep_alive()
        self.reading_head = False
        self.head_bytes = 0
        self.read_started = self.idle_since  # now the body's deadline
        url, pairs = self.url, self.headers  # header names lowered already (on_header)
        self.url, self.headers = b"", []
        headers = dict(pairs)
        if len(headers) != len(pairs):
            headers = header_map(pairs)
        # both are rare: a request without either pays two lookups
        expect = (b"expect" in headers or b"upgrade" in headers) and self._expects(headers)
        endpoints = self.server.endpoints
        route = None if endpoints is None or expect else endpoints.claim(method, url, headers)
        if route is not None:
            if not self.queue:  # the usual case: no exchange at all (see ``claimed``)
                self.claimed = route, headers, keep_alive
                return
            exchange = self._claimed_exchange(route, headers, keep_alive)
        else:
            http_version = parser.get_http_version()
            exchange = _Exchange(self, self._scope(method, http_version, url, pairs),
                                 keep_alive, expect, http_version, method == b"HEAD", headers)
            self.queue.append(exchange)
        self.current = exchange
        if len(self.queue) > _MAX_PIPELINE:
            self.pause_reading()

    def _expects(self, headers: dict[bytes, bytes]) -> bool:
        """Whether the request head just parsed asks for ``100 Continue``; an ``Upgrade``
        offer's body length is noted (its body is read past the parser)."""
        if b"upgrade" in headers and b"upgrade" in headers.get(b"connection", b"").lower():
            length = headers.get(b"content-length", b"0")
            self.upgrade_body = int(length) if length.isdigit() else 0
        return headers.get(b"expect", b"").lower() == b"100-continue"

    def _scope(self, method: bytes, http_version: str, url: bytes,
               pairs: list[tuple[bytes, bytes]]) -> dict[str, Any]:
        """The ASGI ``http`` scope of the request whose head was just parsed."""
        parsed = httptools.parse_url(url)
        raw_path: bytes = parsed.path
        return {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": http_version, "method": method.decode("ascii"), "scheme": "http",
            "path": unquote(raw_path.decode("ascii", "replace")), "raw_path": raw_path,
            "query_string": parsed.query or b"", "root_path": "", "headers": pairs,
            "server": self.local, "client": self.remote, "state": {}}

    def on_body(self, body: bytes) -> None:
        exchange = self.current
        if exchange is None:
            if self.claimed is not None:
                self.claimed_body.append(body)
            return
        if exchange.response_complete:
            return
        exchange.chunks.append(body)
        exchange.buffered += len(body)
        if exchange.route is None and exchange.buffered > _BODY_HIGH_WATER:
            self.pause_reading()
        if exchange.waiter is not None:
            exchange.wake()

    def on_message_complete(self) -> None:
        if self.upgrade_body:  # the parser ends an Upgrade request at its head
            self.raw_body_left, self.upgrade_body = self.upgrade_body, 0
            return
        self.reading_head = True
        self.read_started = None
        claimed = self.claimed
        if claimed is not None:
            self.claimed = None
            route, headers, keep_alive = claimed
            parts = self.claimed_body
            self.claimed_body = []
            self._answer_direct(route, headers, keep_alive, b"".join(parts))
            return
        exchange = self.current
        self.current = None
        if exchange is None:
            return
        exchange.request_complete = True
        if exchange.waiter is not None:
            exchange.wake()

    # ── running exchanges ───────────────────────────────────────────────────
    def _start(self) -> None:
        """Run the queued exchanges in order, each once the previous one answered; a claimed
        one once its body is complete. Called once the received bytes are parsed, so an
        answer written at once still knows whether its request was read whole (keep-alive).

        A loop, not recursion: an exchange answered eagerly (inside ``spawn``) calls back
        here through :meth:`_next`, which then only returns, and this loop goes on — so a
        long pipeline of instant answers costs no stack."""
        if self.starting:
            return
        self.starting = True
        try:
            while self.queue:
                exchange = self.queue[0]
                if exchange.started or (exchange.route is not None
                                        and not exchange.request_complete):
                    return
                if self.transport is None or self.transport.is_closing():
                    return  # a request behind one that closed the connection is not run
                exchange.started = True
                if exchange.route is None:
                    exchange.task = self.server.spawn(self._run(exchange))
                else:
                    self._answer_direct(exchange.route, exchange.headers, exchange.keep_alive,
                                        b"".join(exchange.chunks), exchange)
        finally:
            self.starting = False

    async def _run(self, exchange: _Exchange) -> None:
        assert exchange.scope is not None
        try:
            await self.server.app(exchange.scope, exchange.receive, exchange.send)
        except Exception:
            logger.exception("HTTP application failure")
        exchange.fail()
        self._next(exchange)

    def _answer_direct(self, route: Route, headers: dict[bytes, bytes], keep_alive: bool,
                       body: bytes, exchange: _Exchange | None = None) -> None:
        """Have a claimed request, read whole, answered by its endpoint: its coroutine is
        stepped once here, and becomes a task only if it waits; either way it runs in a
        context of its own, as with :meth:`HttpServer.spawn`. ``exchange`` is the queued
        one of a request that waited for others; without it (a request ``claimed`` with
        nothing before it, answered from the parser callback), an exchange is made only if
        the answer waits."""
        endpoint, method = route
        context = contextvars.copy_context()
        try:
            answering = endpoint.answer(method, headers, body)
            pending = context.run(answering.send, None)
        except StopIteration as done:
            reply: Reply = done.value
        except Exception:
            self._direct_failed(exchange or self._claimed_exchange(route, headers, keep_alive))
            return
        else:
            if exchange is None:
                exchange = self._claimed_exchange(route, headers, keep_alive)
                exchange.started = exchange.request_complete = True
            exchange.task = self.server.track(self.loop.create_task(
                self._await_direct(exchange, _Resumed(answering, pending)), context=context))
            return
        if exchange is not None:
            self._reply_direct(exchange, reply)
            return
        data, keep_alive = encode_reply(self.server.date_line, reply, keep_alive)
        # (no clock read for ``idle_since``: it was read when the request's bytes came,
        # in this same callback)
        self.write(data)
        if not keep_alive or self.server.stopping:
            self.close()
            raise _Refused  # nothing more is read (requests pipelined behind it)

    def _claimed_exchange(self, route: Route, headers: dict[bytes, bytes],
                          keep_alive: bool) -> _Exchange:
        """The queued exchange of a claimed request."""
        # its reply has a length, so the version (which only decides chunking) is moot
        exchange = _Exchange(self, None, keep_alive, False, "1.1", False, headers, route)
        self.queue.append(exchange)
        return exchange

    async def _await_direct(self, exchange: _Exchange, answering: _Resumed[Reply]) -> None:
        try:
            reply = await answering
        except asyncio.CancelledError:
            return  # the client left, or the graceful stop ran out of time
        except Exception:
            self._direct_failed(exchange)
            return
        self._reply_direct(exchange, reply)

    def _reply_direct(self, exchange: _Exchange, reply: Reply) -> None:
        exchange.response_started = exchange.response_complete = True
        data, exchange.keep_alive = encode_reply(self.server.date_line, reply,
                                                 exchange.keep_alive)
        self.write(data)
        self._next(exchange)

    def _direct_failed(self, exchange: _Exchange) -> None:
        """Called while handling the endpoint's exception: logged, then a 500 (and close)."""
        logger.exception("HTTP application failure")
        exchange.fail()
        self._next(exchange)

    def _next(self, exchange: _Exchange) -> None:
        """After a response: close, or go on with the next queued request, or idle."""
        self.queue.popleft()
        self.idle_since = self.loop.time()
        if self.transport is None or self.transport.is_closing():
            return
        if not exchange.keep_alive or self.server.stopping:
            self.close()
            return
        if self.reading_paused:
            self.resume_reading()
        if self.queue:
            self._start()

    def refuse(self, status: int, reason: bytes) -> None:
        """Answer ``status`` without reading further and close the connection (a request we
        will not read, or could not parse)."""
        self.write(b"HTTP/1.1 %d %s\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
                   b"connection: close\r\n\r\n%s"
                   % (status, _REASONS.get(status, b""), len(reason), reason))
        self.close()

    def check_read_deadline(self, now: float) -> None:
        """408 for a head not read within ``header_timeout_s`` of its first byte, or a body
        not read within ``body_timeout_s`` of its head; reading paused by the server (the app
        is behind) does not count against the client."""
        started = self.read_started
        if started is None or self.reading_paused:
            return
        limit = self.server.header_timeout_s if self.reading_head else self.server.body_timeout_s
        if now - started > limit:
            self.read_started = None
            self.refuse(408, b"the request was not received in time")

    # ── I/O helpers ─────────────────────────────────────────────────────────
    def write(self, data: bytes) -> None:
        """Send ``data``: the first reply of a round of the loop at once, later ones at the
        round's end, together (:meth:`HttpServer.end_round`)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        server = self.server
        held = server.held
        if held is not None:
            held.append((transport, data))
            return
        transport.write(data)
        if len(server.connections) > 1:  # (a lone connection's replies are never held)
            server.held = []
            self.loop.call_soon(server.end_round, context=server.round_context)

    async def drained(self) -> None:
        """Wait while the client is not reading (streamed responses)."""
        self.server.write_held()  # so that the transport knows what waits to be sent
        if self.writing_paused and self.transport is not None \
                and not self.transport.is_closing():
            self.drain_waiter = self.loop.create_future()
            await self.drain_waiter
            self.drain_waiter = None

    def pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.reading_paused and self.transport is not None \
                and len(self.queue) <= _MAX_PIPELINE:
            self.reading_paused = False
            if self.read_started is not None:  # the wait was the server's, not the client's
                self.read_started = self.loop.time()
            self.transport.resume_reading()

    def idle(self) -> bool:
        return not self.queue and self.claimed is None

    def close(self) -> None:
        if self.transport is not None:
            self.server.write_held()  # what this connection was sent goes out first
            self.transport.close()

    def _arm_idle_timer(self, delay: float) -> None:
        self.idle_timer = self.loop.call_later(delay, self._check_idle)

    def _check_idle(self) -> None:
        """Close after ``keep_alive_s`` without a request in progress or a byte received.

        One timer per connection, re-armed only when it fires, so a request costs no
        timer bookkeeping (a half-sent request head counts as idle, too)."""
        left = self.idle_since + self.server.keep_alive_s - self.loop.time()
        if self.queue or left > 0:
            self._arm_idle_timer(self.server.keep_alive_s if self.queue else left)
        else:
            self.close()

    def _cancel_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a request already refused."""


class _Resumed(Generic[T]):
    """A coroutine already stepped once, continued by a task: the task waits on what the
    first step yielded, then drives the coroutine onwards; awaited, it gives its result."""

    def __init__(self, coro: Coroutine[Any, Any, T], pending: Any) -> None:
        self.coro = coro
        self.pending = pending

    async def run(self) -> None:
        await self

    def __await__(self) -> Generator[Any, Any, T]:
        coro, pending = self.coro, self.pending
        while True:
            try:
                try:
                    sent = yield pending
                except BaseException as exc:  # cancellation included: on to the coroutine
                    pending = coro.throw(exc)
                else:
                    pending = coro.send(sent)
            except StopIteration as done:
                return cast(T, done.value)


def _address(info: Any) -> tuple[str, int] | None:
    return (str(info[0]), int(info[1])) if isinstance(info, tuple) and len(info) >= 2 else None


class HttpServer:
    """Serve one ASGI app over HTTP/1.1 on a listening socket.

    ``run(sock)`` blocks until SIGINT/SIGTERM (or :meth:`stop` from another thread);
    it then stops accepting, closes idle keep-alive connections, gives in-flight
    requests ``graceful_timeout_s`` to finish and closes the rest.
    """

    def __init__(self, app: ASGIApp, *, keep_alive_s: float = 30.0,
                 graceful_timeout_s: float = 10.0, max_connections: int = 1024,
                 max_request_line: int = 8 * 1024, max_header_bytes: int = 64 * 1024,
                 header_timeout_s: float = 10.0, body_timeout_s: float = 60.0) -> None:
        self.app = app
        self.endpoints: Claims | None = getattr(app, "endpoints", None)
        self.keep_alive_s = keep_alive_s
        self.graceful_timeout_s = graceful_timeout_s
        self.max_connections = max_connections
        self.max_request_line = max_request_line
        self.max_header_bytes = max_header_bytes
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.date_line = _date_line()
        """Refreshed by the deadline sweep, so a response's ``Date`` is at most a tick old."""
        self.connections: set[_Connection] = set()
        self.held: list[tuple[asyncio.Transport, bytes]] | None = None
        """Writes held until the end of the loop's round, once one was sent in it (else
        None): see :meth:`end_round`."""
        self.round_context = contextvars.Context()
        """The context :meth:`end_round` runs in (given, so that none is copied for it)."""
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        self.started = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the HTTP server is not running")
        return self._loop

    def spawn(self, coro: Coroutine[Any, Any, None], context: contextvars.Context | None = None
              ) -> asyncio.Task[None] | None:
        """Run ``coro`` now up to its first suspension; only then does it become a task
        (returned, and tracked for the graceful stop). Either way it runs in a context of
        its own: ``context``, else a copy of the current one."""
        if context is None:
            context = contextvars.copy_context()
        try:
            pending = context.run(coro.send, None)
        except StopIteration:
            return None
        return self.track(self.loop.create_task(_Resumed(coro, pending).run(), context=context))

    def track(self, task: asyncio.Task[None]) -> asyncio.Task[None]:
        """Keep ``task`` until it ends: the graceful stop waits for it."""
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def end_round(self) -> None:
        """Send the writes held in this round of the loop, in order.

        With many busy connections, one round answers a request on each of several of
        them. Writing every answer as it is made wakes the clients' threads one reply at a
        time, and on a VM each wake-up of an idle CPU costs the writer an inter-processor
        interrupt (measured: ~3 µs a reply, 12 % of the server's time at 16 connections).
        So the first reply of a round goes out at once, and the others go out together
        once the round's callbacks have run; those clients then wake once for the lot
        (docs/benchmarks.md, "Replies sent together"). A lone connection's replies are
        never held (no other can share its round)."""
        self.write_held()
        self.held = None

    def write_held(self) -> None:
        """Send the writes held so far in this round (:meth:`end_round`); the round goes on."""
        held = self.held
        if held:
            for transport, data in held:
                if not transport.is_closing():
                    transport.write(data)
            held.clear()

    def admit(self, conn: _Connection) -> bool:
        """Make room for a new connection at ``max_connections``: close the longest-idle
        keep-alive connection; else refuse (408) the one whose request head has been
        arriving longest, if for over ``_SLOW_HEAD_S`` — a trickle, while a real client's
        head comes in one piece; else answer the newcomer 503 and close it."""
        if len(self.connections) < self.max_connections:
            return True
        idle = [other for other in self.connections if other.idle()
                and other.read_started is None]
        if idle:
            min(idle, key=lambda other: other.idle_since).close()
            return True
        slow = [other for other in self.connections if other.idle() and other.reading_head
                and other.read_started is not None]
        if slow:
            slowest = min(slow, key=lambda other: other.read_started or 0.0)
            if self.loop.time() - (slowest.read_started or 0.0) > _SLOW_HEAD_S:
                slowest.refuse(408, b"the request was not received in time")
                return True
        conn.write(b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\n"
                   b"content-length: 0\r\nconnection: close\r\n\r\n")
        conn.close()
        return False

    async def _sweep_deadlines(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_S)
            self.date_line = _date_line()
            now = self.loop.time()
            for conn in list(self.connections):
                conn.check_read_deadline(now)

    def run(self, sock: socket.socket, *, handle_signals: bool = True) -> None:
        """Serve on ``sock`` (bound; listening or not) until stopped, on uvloop if installed."""
        try:
            import uvloop
        except ImportError:
            asyncio.run(self.serve(sock, handle_signals=handle_signals))
        else:
            uvloop.run(self.serve(sock, handle_signals=handle_signals))

    async def serve(self, sock: socket.socket, *, handle_signals: bool = True) -> None:
        """Serve on ``sock`` until stopped (see the class docstring)."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if handle_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._loop.add_signal_handler(signum, self._stop.set)
        listener = await self._loop.create_server(lambda: _Connection(self), sock=sock,
                                                  backlog=2048)
        self.started = True
        sweeper = self._loop.create_task(self._sweep_deadlines())
        try:
            await self._stop.wait()
        finally:
            sweeper.cancel()
            await self._shut_down(listener)

    def stop(self) -> None:
        """Ask a running server to stop gracefully; callable from any thread."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def _shut_down(self, listener: asyncio.Server) -> None:
        self.stopping = True
        listener.close()
        for conn in list(self.connections):
            if conn.idle():
                conn.close()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=self.graceful_timeout_s)
        for conn in list(self.connections):
            conn.close()
        for task in set(self.tasks):
            task.cancel()
        await listener.wait_closed()
