"""The async JSON-RPC core of the client: ids, correlation, cancel, deadlines, notifications.

One :class:`RpcSession` sits on one transport. It allocates request ids, keeps
the pending map and correlates responses by id whatever their order (§4.7),
routes ``notifications/progress`` by token (§9) and ``notifications/log`` to a
handler (§17.1), and ignores any other notification (§4.5). A caller that stops
waiting — its task was cancelled, or its deadline elapsed — sends
``notifications/cancel`` (§7.14); the late response that may still arrive is
discarded cleanly (§13.1). When the transport dies, every in-flight request
fails at once with :class:`TransportClosed`. :meth:`RpcSession.batch` sends
several messages as one JSON-RPC batch frame (§11).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..protocol import messages
from ..protocol.errors import (
    ProtocolViolation,
    RcpError,
    Timeout,
    TransportClosed,
    error_from_wire,
)
from ..protocol.methods import CANCEL, LOG, PROGRESS
from ..tracing import TRACE_META_KEY, active

__all__ = ["LogHandler", "Outgoing", "ProgressCallback", "RpcSession", "Sink", "Transport",
           "log_to_logging"]

RequestId = int | str
ProgressCallback = Callable[[dict[str, Any]], None]
"""Receives the raw params of each ``notifications/progress`` frame of one request."""
LogHandler = Callable[[dict[str, Any]], None]
"""Receives the raw params of each ``notifications/log`` frame."""

_log = logging.getLogger("rcpkit.client")
_server_log = logging.getLogger("rcpkit.client.server")
_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
               "warning": logging.WARNING, "error": logging.ERROR}


def log_to_logging(params: dict[str, Any]) -> None:
    """Default ``notifications/log`` handler: the ``rcpkit.client.server`` Python logger."""
    level = _LOG_LEVELS.get(str(params.get("level")), logging.INFO)
    origin = params.get("logger")
    prefix = f"{origin}: " if isinstance(origin, str) else ""
    _server_log.log(level, "%s%s", prefix, params.get("message"),
                    extra={"rcp_data": params.get("data")})


class Sink(Protocol):
    """What a transport reports to its session."""

    def deliver(self, frame: bytes) -> None:
        """One complete frame (a message or a batch) read from the server."""

    def fail(self, request_id: RequestId, error: RcpError) -> None:
        """The transport could not obtain a response for this request (HTTP only)."""

    def connection_lost(self, error: TransportClosed) -> None:
        """The transport is dead: nothing more will be delivered."""


class Transport(Protocol):
    """A client transport: moves frames, knows nothing about ids or methods' meaning."""

    async def start(self, sink: Sink) -> None:
        """Open the connection; frames read afterwards go to ``sink``."""

    async def send(self, frame: dict[str, Any], *, method: str,
                   request_id: RequestId | None, stream: bool) -> None:
        """Write one message; ``stream`` asks for progress frames (SSE over HTTP)."""

    async def send_batch(self, frames: list[dict[str, Any]], *,
                         request_ids: Sequence[RequestId]) -> None:
        """Write ``frames`` as one batch frame (§11); ``request_ids`` are its requests' ids."""

    def abandon(self, request_id: RequestId) -> None:
        """The caller no longer waits for this request; release what it holds."""

    async def close(self) -> None:
        """Close the connection and release its resources."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One member of a batch (§11): a request, or a notification when ``notification``."""

    method: str
    params: Mapping[str, Any] | None = None
    notification: bool = False
    deadline_ms: int | None = None
    on_progress: ProgressCallback | None = None


@dataclass(frozen=True, slots=True)
class _SentBatch:
    """A batch awaiting its reply: its member count and its requests' ids."""

    size: int
    request_ids: tuple[RequestId, ...]


class RpcSession:
    """Request/response correlation over one :class:`Transport` (§4.7, §7.14, §13.1)."""

    def __init__(self, transport: Transport, *, log_handler: LogHandler | None = None) -> None:
        self.transport = transport
        self.log_handler: LogHandler = log_handler or log_to_logging
        self.late_responses = 0
        """Responses that arrived after their caller stopped waiting (discarded)."""
        self._ids = itertools.count(1)
        self._pending: dict[RequestId, asyncio.Future[Any]] = {}
        self._progress: dict[RequestId, ProgressCallback] = {}
        self._closed: TransportClosed | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._batches: list[_SentBatch] = []

    @property
    def is_closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def start(self) -> None:
        await self.transport.start(self)

    async def request(self, method: str, params: Mapping[str, Any] | None = None, *,
                      deadline_ms: int | None = None,
                      on_progress: ProgressCallback | None = None) -> Any:
        """Send one request and return its ``result``; a wire error raises its exception.

        ``deadline_ms`` travels as ``_meta.deadlineMs`` and bounds the local wait
        (expiry raises :class:`Timeout` and cancels the request server-side).
        ``on_progress`` attaches a ``_meta.progressToken`` (§9).
        """
        if self._closed is not None:
            raise _copy_closed(self._closed)
        request_id, frame, future = self._open_request(method, params, deadline_ms, on_progress)
        try:
            await self.transport.send(frame, method=method, request_id=request_id,
                                      stream=on_progress is not None)
            if deadline_ms is None:
                return await future
            try:
                async with asyncio.timeout(deadline_ms / 1000):
                    return await future
            except TimeoutError:
                self._abandon(request_id, "client deadline elapsed")
                raise _client_timeout(method, deadline_ms) from None
        except asyncio.CancelledError:
            self._abandon(request_id, "cancelled by the client")
            raise
        finally:
            self._forget(request_id)

    async def batch(self, members: Sequence[Outgoing], *,
                    deadline_ms: int | None = None) -> list[Any]:
        """Send ``members`` as one batch frame (§11); return one outcome per member, in order.

        An outcome is the request's ``result``, its :class:`RcpError` (one member's
        error never fails the others), or None for a notification. ``deadline_ms``
        bounds the wait for the whole batch and is the ``_meta.deadlineMs`` of the
        members without their own; when it elapses, the unanswered members become
        :class:`Timeout` and are cancelled server-side (§7.14), as they are when the
        caller is cancelled. Nothing is sent for no members (§11: an empty batch is
        invalid); a batch of notifications only gets no reply, so none is awaited.
        """
        if self._closed is not None:
            raise _copy_closed(self._closed)
        if not members:
            return []
        frames: list[dict[str, Any]] = []
        waiting: dict[RequestId, asyncio.Future[Any]] = {}
        for member in members:
            if member.notification:
                frames.append(messages.notification(member.method, dict(member.params or {})))
                continue
            member_deadline = member.deadline_ms if member.deadline_ms is not None \
                else deadline_ms
            request_id, frame, future = self._open_request(member.method, member.params,
                                                           member_deadline, member.on_progress)
            frames.append(frame)
            waiting[request_id] = future
        sent = _SentBatch(len(frames), tuple(waiting))
        self._batches.append(sent)
        try:
            await self.transport.send_batch(frames, request_ids=sent.request_ids)
            if waiting:
                async with asyncio.timeout(None if deadline_ms is None else deadline_ms / 1000):
                    await asyncio.wait(waiting.values())
        except TimeoutError:
            self._abandon_unanswered(waiting, "client deadline elapsed")
        except asyncio.CancelledError:
            self._abandon_unanswered(waiting, "cancelled by the client")
            raise
        finally:
            self._batches.remove(sent)
            for request_id in waiting:
                self._forget(request_id)
        outcomes = iter(waiting.values())
        return [None if member.notification else _outcome(next(outcomes), member.method,
                                                          deadline_ms)
                for member in members]

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification (no response, §4.5)."""
        if self._closed is not None:
            raise _copy_closed(self._closed)
        await self.transport.send(messages.notification(method, dict(params or {})),
                                  method=method, request_id=None, stream=False)

    async def close(self) -> None:
        """Close the transport; requests still in flight fail with :class:`TransportClosed`."""
        await self.transport.close()
        for task in list(self._background):
            task.cancel()
        self.connection_lost(TransportClosed("the client closed the connection"))

    # ── Sink ─────────────────────────────────────────────────────────────────

    def deliver(self, frame: bytes) -> None:
        parsed = messages.parse(frame, allow_compact=False)
        for message in parsed if isinstance(parsed, list) else [parsed]:
            self._route(message)

    def fail(self, request_id: RequestId, error: RcpError) -> None:
        future = self._pending.get(request_id)
        if future is not None and not future.done():
            future.set_exception(error)

    def connection_lost(self, error: TransportClosed) -> None:
        """Mark the session dead and fail every in-flight request at once."""
        if self._closed is None:
            self._closed = error
        for future in self._pending.values():
            if not future.done():
                future.set_exception(_copy_closed(error))

    # ── internals ────────────────────────────────────────────────────────────

    def _route(self, message: messages.Message) -> None:
        if isinstance(message, messages.Response):
            self._resolve(message)
        elif isinstance(message, messages.Notification):
            params = message.params if isinstance(message.params, dict) else {}
            if message.method == PROGRESS:
                self._on_progress(params)
            elif message.method == LOG:
                self._call_safely(self.log_handler, params)
            # any other notification is ignored (§4.5)
        elif isinstance(message, messages.Request):
            _log.debug("ignoring a request from the server: %s", message.method)
        else:
            _log.warning("discarding an invalid frame from the server: %s", message.error.message)

    def _resolve(self, response: messages.Response) -> None:
        future = self._pending.get(response.id) if response.id is not None else None
        if future is None or future.done():
            if response.id is None and response.error is not None:
                if not self._refuse_batches(response.error):
                    _log.warning("server reported an error not tied to a request: %s",
                                 error_from_wire(response.error))
            else:
                self.late_responses += 1
                _log.debug("discarding a late or unknown response (id=%r)", response.id)
            return
        if response.error is not None:
            future.set_exception(error_from_wire(response.error))
        elif isinstance(response.result, dict):
            future.set_result(response.result)
        else:
            future.set_exception(ProtocolViolation("a result must be a JSON object (§4.2)"))

    def _refuse_batches(self, error: Any) -> bool:
        """Attribute an error with ``id: null`` to the batch it refused as a whole (§11).

        A server may refuse a whole batch with one non-array error, e.g. ``-32013``
        for too many members. Batches whose requests are all unanswered may be the
        one refused: with ``data.limit`` (the member cap), those over it are; without
        it, only a single such batch can be named. Returns whether any was failed.
        """
        silent = [sent for sent in self._batches if sent.request_ids and all(
            request_id in self._pending and not self._pending[request_id].done()
            for request_id in sent.request_ids)]
        data = error.get("data") if isinstance(error, dict) else None
        limit = data.get("limit") if isinstance(data, dict) else None
        if isinstance(limit, int) and not isinstance(limit, bool):
            refused = [sent for sent in silent if sent.size > limit]
        else:
            refused = silent if len(silent) == 1 else []
        for sent in refused:
            for request_id in sent.request_ids:
                self._pending[request_id].set_exception(error_from_wire(error))
        return bool(refused)

    def _on_progress(self, params: dict[str, Any]) -> None:
        token = params.get("progressToken")
        callback = self._progress.get(token) if isinstance(token, int | str) else None
        if callback is not None:  # an unknown token is ignored (§9)
            self._call_safely(callback, params)

    @staticmethod
    def _call_safely(callback: Callable[[dict[str, Any]], None], params: dict[str, Any]) -> None:
        """A failing user callback is logged; it never breaks the reader."""
        try:
            callback(params)
        except Exception:
            _log.exception("progress/log callback raised")

    def _open_request(self, method: str, params: Mapping[str, Any] | None,
                      deadline_ms: int | None, on_progress: ProgressCallback | None,
                      ) -> tuple[RequestId, dict[str, Any], asyncio.Future[Any]]:
        """Allocate an id, attach ``_meta`` (progress token, deadline), register the waiter."""
        request_id = next(self._ids)
        wire = dict(params or {})
        meta = dict(wire.get("_meta") or {})
        if on_progress is not None:
            meta["progressToken"] = request_id
            self._progress[request_id] = on_progress
        if deadline_ms is not None:
            meta["deadlineMs"] = deadline_ms
        tracing = active()
        if tracing is not None:  # the current span continues on the server (any transport)
            carrier: dict[str, str] = {}
            tracing.inject(carrier)
            if carrier:
                meta[TRACE_META_KEY] = carrier
        if meta:
            wire["_meta"] = meta
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        return request_id, messages.request(request_id, method, wire), future

    def _forget(self, request_id: RequestId) -> None:
        self._pending.pop(request_id, None)
        self._progress.pop(request_id, None)

    def _abandon_unanswered(self, waiting: Mapping[RequestId, asyncio.Future[Any]],
                            reason: str) -> None:
        for request_id, future in waiting.items():
            if not future.done():
                self._abandon(request_id, reason)

    def _abandon(self, request_id: RequestId, reason: str) -> None:
        """Stop waiting for ``request_id``: tell the server (§7.14) and free the transport."""
        self._forget(request_id)
        self.transport.abandon(request_id)
        if self._closed is None:
            task = asyncio.ensure_future(self._send_cancel(request_id, reason))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _send_cancel(self, request_id: RequestId, reason: str) -> None:
        try:
            await self.notify(CANCEL, {"id": request_id, "reason": reason})
        except RcpError as exc:  # best effort: the transport may be gone already
            _log.debug("could not send notifications/cancel for %r: %s", request_id, exc)


def _client_timeout(method: str, deadline_ms: int) -> RcpError:
    return Timeout(f"no response to {method!r} within the {deadline_ms} ms deadline (client side)",
                   data={"deadlineMs": deadline_ms})


def _outcome(future: asyncio.Future[Any], method: str, deadline_ms: int | None) -> Any:
    """A batch member's result or error; unsettled means the batch deadline elapsed."""
    if not future.done():
        assert deadline_ms is not None
        return _client_timeout(method, deadline_ms)
    return future.exception() or future.result()


def _copy_closed(error: TransportClosed) -> TransportClosed:
    """A fresh exception per waiter (one instance must not be raised in many tasks)."""
    return TransportClosed(error.message, data=error.data)
