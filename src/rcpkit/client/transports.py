"""Client transports (§5): a stdio child process and HTTP (+SSE).

Both only move frames; ids, correlation and cancellation live in
:mod:`rcpkit.client.session`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import email.utils
import logging
import os
import ssl
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from .. import __version__
from ..protocol import messages
from ..protocol.errors import (
    BackendUnavailable,
    InternalError,
    PayloadTooLarge,
    ProtocolViolation,
    RateLimited,
    RcpError,
    TransportClosed,
    Unauthorized,
    error_from_wire,
)
from ..protocol.framing import OVERSIZED, LineBuffer, SseParser, ndjson
from ..tracing import active
from .http11 import HttpError, HttpPool, HttpResponse
from .session import RequestId, Sink

__all__ = ["HttpTransport", "StdioTransport"]

_log = logging.getLogger("rcpkit.client")
_stderr_log = logging.getLogger("rcpkit.client.stderr")
_CHUNK = 1 << 16


class StdioTransport:
    """Launch the server as a child process and speak NDJSON over its stdin/stdout (§5.1).

    The child's stderr is drained continuously into the ``rcpkit.client.stderr``
    logger (DEBUG) and a ring buffer (:attr:`stderr_tail`), so the child can never
    block on a full pipe. :meth:`close` closes stdin (EOF is a shutdown, §7.12),
    waits, then terminates, then kills.
    """

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike[str] | None = None, stop_grace_s: float = 3.0,
                 stderr_lines: int = 200, max_line_bytes: int = 256 * 1024 * 1024) -> None:
        if not argv:
            raise ValueError("argv must name the server command")
        self.argv = list(argv)
        self.env = {**os.environ, **env} if env is not None else None
        self.cwd = cwd
        self.stop_grace_s = stop_grace_s
        self.max_line_bytes = max_line_bytes
        self._stderr: deque[str] = deque(maxlen=stderr_lines)
        self._process: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []

    @property
    def stderr_tail(self) -> list[str]:
        """The last lines the child wrote to stderr."""
        return list(self._stderr)

    @property
    def returncode(self) -> int | None:
        """The child's exit status once it has exited."""
        return self._process.returncode if self._process else None

    async def start(self, sink: Sink) -> None:
        try:
            self._process = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self.env, cwd=self.cwd)
        except OSError as exc:
            raise BackendUnavailable(f"cannot start the server {self.argv[0]!r}: "
                                     f"{exc.strerror or exc}") from exc
        self._readers = [asyncio.ensure_future(self._read_stdout(sink)),
                         asyncio.ensure_future(self._drain_stderr())]

    async def send(self, frame: dict[str, Any], *, method: str,
                   request_id: RequestId | None, stream: bool) -> None:
        await self._write(frame)

    async def send_batch(self, frames: list[dict[str, Any]], *,
                         request_ids: Sequence[RequestId]) -> None:
        """The whole batch is one NDJSON line (§5.1, §11)."""
        await self._write(frames)

    async def _write(self, frame: dict[str, Any] | list[dict[str, Any]]) -> None:
        stdin = self._process.stdin if self._process else None
        if stdin is None or stdin.is_closing():
            raise TransportClosed("the server's stdin is closed")
        stdin.write(ndjson(messages.encode(frame)))
        try:
            await stdin.drain()
        except (ConnectionError, OSError) as exc:
            raise TransportClosed(f"cannot write to the server: {exc}") from exc

    def abandon(self, request_id: RequestId) -> None:
        """Nothing to release: the late response is read and discarded by the session."""

    async def close(self) -> None:
        process = self._process
        if process is None:
            return
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()
        for stop in (None, process.terminate, process.kill):
            if stop is not None:
                with contextlib.suppress(ProcessLookupError):
                    stop()
            try:
                await asyncio.wait_for(process.wait(), self.stop_grace_s)
                break
            except TimeoutError:
                continue
        await asyncio.gather(*self._readers, return_exceptions=True)

    async def _read_stdout(self, sink: Sink) -> None:
        assert self._process is not None and self._process.stdout is not None
        stdout = self._process.stdout
        lines = LineBuffer(self.max_line_bytes)
        try:
            while chunk := await stdout.read(_CHUNK):
                self._deliver(sink, lines.feed(chunk))
            self._deliver(sink, lines.finish())
        except (ConnectionError, OSError) as exc:
            _log.debug("reading the server's stdout failed: %s", exc)
        sink.connection_lost(TransportClosed(await self._death_notice()))

    @staticmethod
    def _deliver(sink: Sink, lines: list[bytes]) -> None:
        for line in lines:
            if line is OVERSIZED:
                _log.warning("discarding an over-long line from the server")
            else:
                sink.deliver(line)

    async def _death_notice(self) -> str:
        """Why the transport died: exit code and the child's last stderr lines."""
        assert self._process is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._process.wait(), 1.0)
        code = self._process.returncode
        status = f"exited with code {code}" if code is not None else "closed its stdout"
        tail = " | ".join(self.stderr_tail[-3:])
        return (f"the server process {self.argv[0]!r} {status}; in-flight requests may or may "
                f"not have taken effect" + (f" (stderr: {tail})" if tail else ""))

    async def _drain_stderr(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        stderr = self._process.stderr
        pending = b""
        while chunk := await stderr.read(_CHUNK):
            *complete, pending = (pending + chunk).split(b"\n")
            for raw in complete:
                self._record_stderr(raw)
            if len(pending) > _CHUNK:
                self._record_stderr(pending)
                pending = b""
        if pending:
            self._record_stderr(pending)

    def _record_stderr(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        self._stderr.append(line)
        _stderr_log.debug("%s", line)


class HttpTransport:
    """POST each message to ``<base>/<method>`` (§5.2), and a batch to ``<base>`` (§11), over
    pooled keep-alive connections.

    A response is read as SSE when the server answers ``text/event-stream``
    (asked for with ``stream=True``), else as one JSON body. ``session_token``,
    once set from ``initialize.result._meta.session``, is sent as ``RCP-Session``.
    Non-200 statuses become the matching error: the JSON-RPC body when there is
    one, otherwise 401/403 → -32012, 413 → -32013, 429 → -32011, 503 → -32010,
    5xx → -32603, with ``Retry-After`` as ``data.retryAfterMs``. ``auth`` is a
    bearer token or a ``(user, password)`` pair for Basic auth.
    """

    def __init__(self, url: str, *, headers: Mapping[str, str] | None = None,
                 auth: str | tuple[str, str] | None = None, timeout_s: float = 300.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.url = url.rstrip("/")
        self.session_token: str | None = None
        self._pool = HttpPool(url, read_timeout_s=timeout_s, ssl_context=ssl_context)
        self._headers = [("User-Agent", f"rcpkit/{__version__}"),
                         ("Content-Type", "application/json"), *(headers or {}).items()]
        if isinstance(auth, tuple):
            basic = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self._headers.append(("Authorization", f"Basic {basic}"))
        elif auth is not None:
            self._headers.append(("Authorization", f"Bearer {auth}"))
        self._tasks: dict[RequestId, asyncio.Task[None]] = {}
        self._notifications: set[asyncio.Task[None]] = set()
        self._sink: Sink | None = None
        self._closed = False

    async def start(self, sink: Sink) -> None:
        self._sink = sink

    async def send(self, frame: dict[str, Any], *, method: str,
                   request_id: RequestId | None, stream: bool) -> None:
        self._start_post(frame, method, () if request_id is None else (request_id,), stream)

    async def send_batch(self, frames: list[dict[str, Any]], *,
                         request_ids: Sequence[RequestId]) -> None:
        """One POST to the base path; its reply is buffered (no SSE for a batch).

        A batch of notifications only is answered 204. Abandoning any member
        abandons the whole POST (the batch reply arrives all at once).
        """
        self._start_post(frames, None, tuple(request_ids), False)

    def _start_post(self, frame: dict[str, Any] | list[dict[str, Any]], method: str | None,
                    request_ids: tuple[RequestId, ...], stream: bool) -> None:
        if self._closed or self._sink is None:
            raise TransportClosed("the HTTP client is closed")
        task = asyncio.ensure_future(self._post(self._sink, frame, method, request_ids, stream))
        if not request_ids:
            self._notifications.add(task)
            task.add_done_callback(self._notifications.discard)
            return
        for request_id in request_ids:
            self._tasks[request_id] = task
        task.add_done_callback(lambda _: self._forget(request_ids))

    def _forget(self, request_ids: tuple[RequestId, ...]) -> None:
        for request_id in request_ids:
            self._tasks.pop(request_id, None)

    def abandon(self, request_id: RequestId) -> None:
        task = self._tasks.pop(request_id, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        self._closed = True
        tasks = [*self._tasks.values(), *self._notifications]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._pool.close()
        if self._sink is not None:
            self._sink.connection_lost(TransportClosed("the client closed the connection"))

    async def _post(self, sink: Sink, frame: dict[str, Any] | list[dict[str, Any]],
                    method: str | None, request_ids: tuple[RequestId, ...], stream: bool) -> None:
        """POST one frame; a request it leaves unanswered fails with the reason."""
        headers = [*self._headers, ("Accept", "text/event-stream, application/json" if stream
                                    else "application/json")]
        if self.session_token:
            headers.append(("RCP-Session", self.session_token))
        tracing = active()
        if tracing is not None:  # the W3C headers, for proxies on the way that trace too
            carrier: dict[str, str] = {}
            tracing.inject(carrier)
            headers.extend(carrier.items())
        what = method or "batch"
        try:
            async with self._pool.post(method, messages.encode(frame), headers) as response:
                if response.status == 200:
                    error: RcpError = await self._read_body(sink, response, method is None) \
                        or ProtocolViolation(
                            "the HTTP response carried no JSON-RPC response for this request")
                elif response.status in (202, 204):
                    await response.read()
                    return
                else:
                    error = _status_error(response, await response.read(), self.url)
        except HttpError as exc:
            error = TransportClosed(f"HTTP {what} to {self.url} failed ({exc}); it may or "
                                    "may not have taken effect")
        if not request_ids:
            _log.debug("notification %s failed: %s", what, error)
        for request_id in request_ids:  # a no-op for those whose response was delivered
            sink.fail(request_id, copy.copy(error))  # one instance per waiter

    @staticmethod
    async def _read_body(sink: Sink, response: HttpResponse, batch: bool) -> RcpError | None:
        """Deliver the body's frames; for a batch answered by a single error (``id: null``,
        e.g. ``-32013`` for too many members, §11), return that error instead."""
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            events = SseParser()
            async for chunk in response.iter_bytes():
                for event in events.feed(chunk):
                    sink.deliver(event)
            return None
        body = await response.read()
        if batch and body.lstrip()[:1] == b"{":
            return _batch_refusal(body)
        if body.strip():
            sink.deliver(body)
        return None


_STATUS_ERRORS: dict[int, type[RcpError]] = {
    401: Unauthorized, 403: Unauthorized, 413: PayloadTooLarge, 429: RateLimited,
    503: BackendUnavailable,
}


def _status_error(response: HttpResponse, body: bytes, url: str) -> RcpError:
    """The error for a non-200 answer (§5.2): its JSON-RPC body when present, else the status."""
    retry_after = _retry_after_ms(response.headers.get("retry-after"))
    error: RcpError | None = None
    with contextlib.suppress(RcpError):
        message = messages.classify(messages.decode(body)) if body.strip() else None
        if isinstance(message, messages.Response) and message.error is not None:
            error = error_from_wire(message.error)
    if error is None:
        status = response.status
        kind = _STATUS_ERRORS.get(status, InternalError if status >= 500 else ProtocolViolation)
        error = kind(f"HTTP {status} {response.reason} from {url}")
    if retry_after is not None and error.retry_after_ms is None:
        error.data = {**(error.data or {}), "retryAfterMs": retry_after}
    return error


def _batch_refusal(body: bytes) -> RcpError:
    """The error a server answered a whole batch with (§11), instead of an array."""
    with contextlib.suppress(RcpError):
        message = messages.classify(messages.decode(body))
        if isinstance(message, messages.Response) and message.error is not None:
            return error_from_wire(message.error)
    return ProtocolViolation("a batch must be answered with an array of responses (§11)")


def _retry_after_ms(value: str | None) -> int | None:
    """``Retry-After`` (delta seconds or an HTTP date) in milliseconds."""
    if not value:
        return None
    try:
        return max(0, round(float(value) * 1000))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0, round((when - time.time()) * 1000))
