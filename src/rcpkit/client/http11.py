"""A lean keep-alive HTTP/1.1 client for the RCP HTTP transport (§5.2): h11 over asyncio.

Why not httpx: measured on loopback against rcpkit's server (2 cores), httpx
spent ~0.3 ms per request in its client layer alone and its connection pool
collapsed under 64 concurrent requests (~200 req/s); this pool does the same
work at ~1.8k req/s sequential and ~2.6k req/s with 64 in flight
(``benchmarks/bench_client.py``). RCP needs only ``POST`` to one origin, JSON
or SSE bodies, keep-alive, TLS and a few headers.

One :class:`HttpPool` per origin keeps idle connections for reuse (dropped
after ``idle_s``, before a typical server's keep-alive timeout), opens at most
``max_connections`` at once, and closes any connection whose exchange did not
finish cleanly (an abandoned or failed request), so a reused connection is
always at a message boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import h11

__all__ = ["HttpError", "HttpPool", "HttpResponse"]

_READ_CHUNK = 1 << 16


class HttpError(Exception):
    """The HTTP exchange failed (connect, write, read, timeout or a malformed response)."""


@dataclass
class HttpResponse:
    """Status, lower-cased headers and an incremental body."""

    status: int
    reason: str
    headers: dict[str, str]
    _connection: _Connection = field(repr=False)

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        """The body, chunk by chunk as it arrives (SSE events are not buffered)."""
        while True:
            event = await self._connection.next_event()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._connection.complete = True
                return

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_bytes()])


class _Connection:
    """One socket with its h11 state machine."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 read_timeout_s: float | None) -> None:
        self.reader = reader
        self.writer = writer
        self.state = h11.Connection(h11.CLIENT)
        self.read_timeout_s = read_timeout_s
        self.complete = False
        self.idle_since = 0.0

    @property
    def reusable(self) -> bool:
        return (not self.writer.is_closing() and not self.reader.at_eof()
                and self.state.our_state is h11.IDLE and self.state.their_state is h11.IDLE)

    def send(self, *events: h11.Event) -> None:
        self.writer.write(b"".join(self.state.send(event) or b"" for event in events))

    async def next_event(self) -> h11.Event:
        while True:
            event = self.state.next_event()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            async with asyncio.timeout(self.read_timeout_s):
                data = await self.reader.read(_READ_CHUNK)
            self.state.receive_data(data)  # b"" marks EOF; h11 then reports the error

    def finish(self) -> bool:
        """After an exchange: True when the connection can carry another one."""
        if self.complete and self.state.our_state is h11.DONE \
                and self.state.their_state is h11.DONE:
            self.state.start_next_cycle()
            self.complete = False
            return self.reusable
        return False

    def close(self) -> None:
        self.writer.close()


class HttpPool:
    """Keep-alive connections to the origin of ``url``; ``post`` streams one exchange."""

    def __init__(self, url: str, *, connect_timeout_s: float = 10.0,
                 read_timeout_s: float | None = 300.0, max_connections: int = 64,
                 idle_s: float = 4.0, ssl_context: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.authority = parts.netloc.rpartition("@")[2]
        self.path = parts.path.rstrip("/")
        self.ssl = ssl_context or (ssl.create_default_context() if parts.scheme == "https"
                                   else None)
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.idle_s = idle_s
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    @contextlib.asynccontextmanager
    async def post(self, path: str | None, body: bytes,
                   headers: Sequence[tuple[str, str]]) -> AsyncIterator[HttpResponse]:
        """``POST <base path>/<path>`` (the base path itself when ``path`` is None); the
        response body must be read inside the block."""
        target = f"{self.path}/{path}" if path is not None else self.path or "/"
        async with self._slots:
            connection = await self._acquire()
            reusable = False
            try:
                try:
                    connection.send(
                        h11.Request(method="POST", target=target, headers=[
                            ("Host", self.authority), ("Content-Length", str(len(body))),
                            *headers]),
                        h11.Data(data=body), h11.EndOfMessage())
                    await connection.writer.drain()
                    event = await connection.next_event()
                    while isinstance(event, h11.InformationalResponse):
                        event = await connection.next_event()
                except (OSError, EOFError, TimeoutError, h11.ProtocolError) as exc:
                    raise HttpError(_describe(exc)) from exc
                if not isinstance(event, h11.Response):
                    raise HttpError(f"unexpected HTTP event {type(event).__name__}")
                response = HttpResponse(
                    event.status_code, event.reason.decode("latin-1"),
                    {name.decode("latin-1").lower(): value.decode("latin-1")
                     for name, value in event.headers}, connection)
                try:
                    yield response
                except (OSError, EOFError, TimeoutError, h11.ProtocolError) as exc:
                    raise HttpError(_describe(exc)) from exc
                reusable = connection.finish()
            finally:
                if reusable and not self._closed:
                    connection.idle_since = time.monotonic()
                    self._idle.append(connection)
                else:
                    connection.close()

    async def _acquire(self) -> _Connection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.reusable and now - connection.idle_since < self.idle_s:
                return connection
            connection.close()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.ssl,
                    server_hostname=self.host if self.ssl else None)
        except (OSError, TimeoutError) as exc:
            raise HttpError(f"cannot connect to {self.host}:{self.port}: "
                            f"{_describe(exc)}") from exc
        return _Connection(reader, writer, self.read_timeout_s)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
