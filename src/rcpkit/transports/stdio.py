"""The stdio transport, server side (§5.1): NDJSON over stdin/stdout.

- stdout carries frames only: at start the real stdout file descriptor is kept
  for frames, while fd 1 and ``sys.stdout`` are pointed at stderr, so a stray
  ``print`` (or a C library writing to fd 1) cannot corrupt the stream;
- blank lines are skipped, partial reads buffered (``framing.LineBuffer``);
- a line longer than ``max_line`` bytes is answered with ``-32600`` and
  ``id: null`` and the server keeps going. ``-32600`` rather than ``-32700``:
  the bytes are discarded unread, so claiming they are not JSON would be a
  guess; what is certain is that they are not accepted as a request, and with
  no id recovered the error carries ``id: null``;
- all replies produced while handling one read chunk go out in one write;
- EOF (or an answered ``shutdown``, §13.1) stops reading; in-flight requests
  are finished and flushed, then the process exits 0.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import Callable
from typing import Any

from ..protocol import messages
from ..protocol.errors import InvalidRequest
from ..protocol.framing import OVERSIZED, LineBuffer
from ..server.dispatcher import Dispatcher
from ..server.framework import Server
from ..tracing import Tracing
from .access import AccessLog, StreamAccess

__all__ = ["DEFAULT_MAX_LINE", "serve_stdio"]

DEFAULT_MAX_LINE = 16 * 1024 * 1024
_READ_SIZE = 256 * 1024


def serve_stdio(server: Server, *, max_line: int = DEFAULT_MAX_LINE, max_concurrency: int = 64,
                request_timeout_ms: float | None = None, log_bodies: bool = False,
                tracing: Tracing | None = None, access_log: AccessLog | None = None) -> int:
    """Serve ``server`` on this process's stdin/stdout until EOF or ``shutdown``; return 0.
    ``log_bodies`` lets failure logs quote queries and documents (§15.6; off by default).
    ``tracing`` (default: the process's, :func:`rcpkit.tracing.active`) traces every
    request, a child of the trace context in its ``_meta``. ``access_log`` writes one line
    per request to stderr (:mod:`.access`)."""
    frames_fd = _claim_stdout()
    dispatcher_options: dict[str, Any] = {"max_concurrency": max_concurrency,
                                          "request_timeout_ms": request_timeout_ms,
                                          "log_bodies": log_bodies,
                                          "tracing": tracing}
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_serve(server, sys.stdin.fileno(), frames_fd, max_line, dispatcher_options,
                          access_log))
    return 0


def _claim_stdout() -> int:
    """Keep the real stdout for frames; send fd 1 and ``sys.stdout`` to stderr."""
    sys.stdout.flush()
    frames_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return frames_fd


def _loop_factory() -> Any:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


class _FrameWriter:
    """Collects outgoing frames and writes them in as few ``write`` calls as possible: the
    frames answered while one read chunk is handled go out together when it is done
    (``holding``); frames emitted later (a task's reply) are flushed on the next loop turn."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        self._fd = fd
        self._loop = loop
        self._pending = bytearray()
        self._scheduled = False
        self.holding = False
        self.broken = False

    def emit(self, frame: bytes) -> None:
        self._pending += frame
        self._pending += b"\n"
        if not (self._scheduled or self.holding):
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        data, self._pending = self._pending, bytearray()
        view = memoryview(data)
        while view and not self.broken:
            try:
                written = os.write(self._fd, view)
            except OSError:  # the client went away (EPIPE): nobody is left to answer
                self.broken = True
                break
            view = view[written:]


FeedChunk = Callable[[bytes], None]
AtEof = Callable[[], None]


class _StdinProtocol(asyncio.Protocol):
    def __init__(self, feed_chunk: FeedChunk, at_eof: AtEof) -> None:
        self._feed_chunk = feed_chunk
        self._at_eof = at_eof

    def data_received(self, data: bytes) -> None:
        self._feed_chunk(data)

    def eof_received(self) -> bool:
        self._at_eof()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._at_eof()


async def _serve(server: Server, in_fd: int, out_fd: int, max_line: int,
                 dispatcher_options: dict[str, Any], access_log: AccessLog | None = None
                 ) -> None:
    loop = asyncio.get_running_loop()
    writer = _FrameWriter(out_fd, loop)
    dispatcher = Dispatcher(server, trace_attributes={"rcp.collection": server.name},
                            **dispatcher_options)
    feed: Callable[[bytes], None] = dispatcher.feed
    emit = writer.emit
    if access_log is not None:  # the stdio peer is whoever started the process (§15.6)
        seen = StreamAccess(access_log, server.name, "stdio")

        def feed(frame: bytes) -> None:
            seen.received(frame)
            dispatcher.feed(frame)

        def emit(frame: bytes) -> None:
            writer.emit(frame)
            seen.sent(frame)
    dispatcher.start(emit)
    lines = LineBuffer(max_line)
    finished = loop.create_future()

    def feed_lines(batch: list[bytes]) -> None:
        for line in batch:
            if dispatcher.closed:
                break
            if line is OVERSIZED:
                emit(messages.encode(messages.error_response(None, InvalidRequest(
                    f"line longer than {max_line} bytes", data={"limit": max_line}))))
            else:
                feed(line)

    def feed_chunk(data: bytes) -> None:
        if finished.done():
            return
        writer.holding = True
        try:
            feed_lines(lines.feed(data))
        finally:
            writer.holding = False
        writer.flush()
        if dispatcher.closed:
            finished.set_result(None)

    def at_eof() -> None:
        if not finished.done():
            feed_lines(lines.finish())
            finished.set_result(None)

    reader = await _read_stdin(loop, in_fd, feed_chunk, at_eof)
    try:
        await finished
    finally:
        if isinstance(reader, asyncio.Task):
            reader.cancel()
        else:
            reader.close()
    await dispatcher.drain()
    writer.flush()
    os.close(out_fd)


async def _read_stdin(loop: asyncio.AbstractEventLoop, fd: int, feed_chunk: FeedChunk,
                      at_eof: AtEof) -> asyncio.BaseTransport | asyncio.Task[None]:
    """Pipes, sockets and terminals are read by the event loop; anything else — a regular
    file or a device such as ``/dev/null`` — by a worker thread: epoll refuses to watch those
    (EPERM), which uvloop's libuv answers with ``abort()`` and asyncio with an error."""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
        return loop.create_task(_read_file(loop, fd, feed_chunk, at_eof))
    pipe = os.fdopen(fd, "rb", buffering=0, closefd=False)
    transport, _ = await loop.connect_read_pipe(lambda: _StdinProtocol(feed_chunk, at_eof), pipe)
    return transport


async def _read_file(loop: asyncio.AbstractEventLoop, fd: int, feed_chunk: FeedChunk,
                     at_eof: AtEof) -> None:
    while chunk := await loop.run_in_executor(None, os.read, fd, _READ_SIZE):
        feed_chunk(chunk)
    at_eof()
