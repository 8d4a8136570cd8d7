"""A lean HTTP/1.1 server for the RCP ASGI app (§5.2): asyncio + httptools, nothing else.

It runs the very app :func:`rcpkit.transports.http.create_app` returns — the same
endpoint, sessions, auth, CORS and SSE code that any ASGI server runs — so it adds
no protocol logic of its own; it only replaces uvicorn's general-purpose HTTP layer
(measured: 1.15–1.8× the requests/s of uvicorn with httptools + uvloop on the same app,
see docs/benchmarks.md "Protocol").

Scope, on purpose: ``http`` scopes only (no lifespan, no WebSocket — the RCP app
uses neither); keep-alive with an idle timeout; pipelined requests answered in
order; request bodies streamed to the app with back-pressure; ``Expect:
100-continue``; responses with a ``Content-Length`` or chunked (SSE); graceful stop
(stop accepting, let in-flight requests finish within a grace period, then close).
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import logging
import signal
import socket
import time
from http import HTTPStatus
from typing import Any, cast
from urllib.parse import unquote

import httptools
from starlette.types import ASGIApp, Message

__all__ = ["HttpServer"]

logger = logging.getLogger("rcpkit.server")

_BODY_HIGH_WATER = 1 << 16
"""Stop reading from a client once this many request-body bytes wait for the app."""
_MAX_PIPELINE = 16
"""Stop reading from a client with this many requests queued behind the current one."""

_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
_NO_BODY_STATUSES = frozenset({204, 304})


class _DateHeader:
    """The ``Date`` header (RFC 9110 §6.6.1), formatted at most once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._line = b""

    def line(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._line = b"date: " + email.utils.formatdate(now, usegmt=True).encode() + b"\r\n"
        return self._line


class _Exchange:
    """One request/response on a connection: the ASGI ``receive``/``send`` pair."""

    def __init__(self, conn: _Connection, scope: dict[str, Any], keep_alive: bool,
                 expect_continue: bool) -> None:
        self.conn = conn
        self.scope = scope
        self.keep_alive = keep_alive
        self.expect_continue = expect_continue
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.request_complete = False
        self.body_delivered = False
        self.disconnected = False
        self.waiter: asyncio.Future[None] | None = None
        self.response_started = False
        self.response_complete = False
        self.chunked = False
        self.head_only = scope["method"] == "HEAD"
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
            self.head = self._head(message["status"], message.get("headers", []))
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

    def _head(self, status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        """Status line and headers; framing decided here (length, chunked or none)."""
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"")),
                 self.conn.server.date.line()]
        has_length = False
        for name, value in headers:
            lowered = name.lower()
            if lowered == b"content-length":
                has_length = True
            elif lowered == b"connection" and value.lower() == b"close":
                self.keep_alive = False
                continue
            lines.append(name + b": " + value + b"\r\n")
        framed = has_length or self.head_only or status in _NO_BODY_STATUSES or status < 200
        if not framed:
            if self.keep_alive and self.scope["http_version"] == "1.1":
                self.chunked = True
                lines.append(b"transfer-encoding: chunked\r\n")
            else:
                self.keep_alive = False  # the body ends where the connection does
        if not self.keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        return b"".join(lines)

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
            self.conn.write(self._head(500, [(b"content-type", b"text/plain; charset=utf-8"),
                                             (b"content-length", str(len(body)).encode())])
                            + body)
        self._finish()


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
        self.queue: collections.deque[_Exchange] = collections.deque()
        """Exchanges parsed or being parsed, answered in order; the first one runs."""
        self.reading_paused = False
        self.writing_paused = False
        self.drain_waiter: asyncio.Future[None] | None = None
        self.idle_timer: asyncio.TimerHandle | None = None

    # ── asyncio.Protocol ────────────────────────────────────────────────────
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's does not subclass it
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local = _address(transport.get_extra_info("sockname"))
        self.remote = _address(transport.get_extra_info("peername"))
        self.server.connections.add(self)
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self._cancel_idle_timer()
        for exchange in self.queue:
            exchange.disconnected = True
            exchange.wake()
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no protocol switch is offered; the request is served as plain HTTP
        except httptools.HttpParserError:
            self._reject_malformed()

    def eof_received(self) -> bool | None:
        return None

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    # ── httptools callbacks ─────────────────────────────────────────────────
    def on_message_begin(self) -> None:
        self._cancel_idle_timer()
        self.url = b""
        self.headers = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        parsed = httptools.parse_url(self.url)
        raw_path: bytes = parsed.path
        scope: dict[str, Any] = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": self.parser.get_http_version(),
            "method": self.parser.get_method().decode("ascii"), "scheme": "http",
            "path": unquote(raw_path.decode("ascii", "replace")), "raw_path": raw_path,
            "query_string": parsed.query or b"", "root_path": "", "headers": self.headers,
            "server": self.local, "client": self.remote, "state": {}}
        expect = any(name == b"expect" and value.lower() == b"100-continue"
                     for name, value in self.headers)
        exchange = _Exchange(self, scope, self.parser.should_keep_alive(), expect)
        self.current = exchange
        self.queue.append(exchange)
        if len(self.queue) == 1:
            self._start(exchange)
        elif len(self.queue) > _MAX_PIPELINE:
            self.pause_reading()

    def on_body(self, body: bytes) -> None:
        exchange = self.current
        if exchange is None or exchange.response_complete:
            return
        exchange.chunks.append(body)
        exchange.buffered += len(body)
        if exchange.buffered > _BODY_HIGH_WATER:
            self.pause_reading()
        exchange.wake()

    def on_message_complete(self) -> None:
        exchange = self.current
        if exchange is not None:
            exchange.request_complete = True
            exchange.wake()
        self.current = None

    # ── running exchanges ───────────────────────────────────────────────────
    def _start(self, exchange: _Exchange) -> None:
        task = self.loop.create_task(self._run(exchange))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    async def _run(self, exchange: _Exchange) -> None:
        try:
            await self.server.app(exchange.scope, exchange.receive, exchange.send)
        except Exception:
            logger.exception("HTTP application failure")
        exchange.fail()
        self.queue.popleft()
        if self.transport is None or self.transport.is_closing():
            return
        if not exchange.keep_alive or self.server.stopping:
            self.transport.close()
            return
        self.resume_reading()
        if self.queue:
            self._start(self.queue[0])
        else:
            self._arm_idle_timer()

    def _reject_malformed(self) -> None:
        body = b"Invalid HTTP request"
        self.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\n"
                   b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        assert self.transport is not None
        self.transport.close()

    # ── I/O helpers ─────────────────────────────────────────────────────────
    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    async def drained(self) -> None:
        """Wait while the client is not reading (streamed responses)."""
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
            self.transport.resume_reading()

    def idle(self) -> bool:
        return not self.queue

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _arm_idle_timer(self) -> None:
        self._cancel_idle_timer()
        self.idle_timer = self.loop.call_later(self.server.keep_alive_s, self.close)

    def _cancel_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None


def _address(info: Any) -> tuple[str, int] | None:
    return (str(info[0]), int(info[1])) if isinstance(info, tuple) and len(info) >= 2 else None


class HttpServer:
    """Serve one ASGI app over HTTP/1.1 on a listening socket.

    ``run(sock)`` blocks until SIGINT/SIGTERM (or :meth:`stop` from another thread);
    it then stops accepting, closes idle keep-alive connections, gives in-flight
    requests ``graceful_timeout_s`` to finish and closes the rest.
    """

    def __init__(self, app: ASGIApp, *, keep_alive_s: float = 30.0,
                 graceful_timeout_s: float = 10.0) -> None:
        self.app = app
        self.keep_alive_s = keep_alive_s
        self.graceful_timeout_s = graceful_timeout_s
        self.date = _DateHeader()
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        self.started = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "the server is not running"
        return self._loop

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
        try:
            await self._stop.wait()
        finally:
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
