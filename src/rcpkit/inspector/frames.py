"""The inspector's wiretap: every frame its client sends or receives, as the peer saw it.

The client transports are subclassed (not wrapped) so the client's own
``isinstance`` checks on its transport keep working. Each frame is kept in a short
history (the connection view shows ``initialize``) and routed to the call it
belongs to: the call registers a listener in a context variable, the request
frame it sends claims the request id, and responses (by ``id``) and
``notifications/progress`` (by ``progressToken``, which the client sets to the
request id, §9) are handed to that listener as they arrive.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import orjson

from ..client.session import Sink, Transport
from ..client.transports import HttpTransport, StdioTransport
from ..protocol.errors import RcpError, TransportClosed

__all__ = ["Frame", "FrameListener", "FrameLog", "TappedHttpTransport", "TappedStdioTransport"]

Direction = Literal["sent", "received", "failed"]
RequestId = int | str


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame on the wire (``failed``: the transport's error for a request)."""

    seq: int
    direction: Direction
    at_ms: float
    frame: Any

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "direction": self.direction, "atMs": self.at_ms,
                "frame": self.frame}


FrameListener = Callable[[Frame], None]
_current: contextvars.ContextVar[FrameListener | None] = contextvars.ContextVar(
    "rcpkit_inspector_listener", default=None)


def _route_key(message: Any) -> RequestId | None:
    """The request a frame belongs to: its ``id``, or a progress frame's token."""
    if not isinstance(message, dict):
        return None
    if "method" in message:
        params = message.get("params")
        token = params.get("progressToken") if isinstance(params, dict) else None
        key = message.get("id") if "id" in message else token
    else:
        key = message.get("id")
    return key if isinstance(key, int | str) and not isinstance(key, bool) else None


class FrameLog:
    """A bounded history of frames plus the routing of each to its call's listener."""

    def __init__(self, keep: int = 200) -> None:
        self.recent: collections.deque[Frame] = collections.deque(maxlen=keep)
        self._seq = itertools.count(1)
        self._listeners: dict[RequestId, FrameListener] = {}

    @contextlib.contextmanager
    def watch(self, listener: FrameListener) -> Iterator[None]:
        """Route the frames of requests sent in this context to ``listener``."""
        token = _current.set(listener)
        try:
            yield
        finally:
            _current.reset(token)
            for key in [key for key, owner in self._listeners.items() if owner is listener]:
                del self._listeners[key]

    def sent(self, message: dict[str, Any] | list[dict[str, Any]],
             request_ids: Sequence[RequestId]) -> None:
        listener = _current.get()
        if listener is not None:
            self._listeners.update(dict.fromkeys(request_ids, listener))
        # A snapshot: the caller's dict must not change the record afterwards.
        self._record("sent", orjson.loads(orjson.dumps(message)))

    def received(self, raw: bytes) -> None:
        try:
            parsed: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = {"unparsable": raw.decode("utf-8", "replace")}
        self._record("received", parsed)

    def failed(self, request_id: RequestId, error: RcpError) -> None:
        self._record("failed", {"id": request_id, "error": error.to_wire()})

    def _record(self, direction: Direction, message: Any) -> None:
        frame = Frame(next(self._seq), direction, time.time() * 1000, message)
        self.recent.append(frame)
        notified: set[int] = set()
        for member in message if isinstance(message, list) else [message]:
            key = _route_key(member)
            listener = self._listeners.get(key) if key is not None else None
            if listener is not None and id(listener) not in notified:
                notified.add(id(listener))
                listener(frame)


class _TapSink:
    """Passes frames on to the client session after recording them."""

    def __init__(self, sink: Sink, log: FrameLog) -> None:
        self._sink = sink
        self._log = log

    def deliver(self, frame: bytes) -> None:
        self._log.received(frame)
        self._sink.deliver(frame)

    def fail(self, request_id: RequestId, error: RcpError) -> None:
        self._log.failed(request_id, error)
        self._sink.fail(request_id, error)

    def connection_lost(self, error: TransportClosed) -> None:
        self._sink.connection_lost(error)


class _Tap:
    """Records what a client transport sends, and what it delivers to its session."""

    frame_log: FrameLog

    def _inner(self) -> Transport:
        return cast(Transport, super())

    async def start(self, sink: Sink) -> None:
        await self._inner().start(_TapSink(sink, self.frame_log))

    async def send(self, frame: dict[str, Any], *, method: str,
                   request_id: RequestId | None, stream: bool) -> None:
        self.frame_log.sent(frame, [] if request_id is None else [request_id])
        await self._inner().send(frame, method=method, request_id=request_id, stream=stream)

    async def send_batch(self, frames: list[dict[str, Any]], *,
                         request_ids: Sequence[RequestId]) -> None:
        self.frame_log.sent(frames, request_ids)
        await self._inner().send_batch(frames, request_ids=request_ids)


class TappedHttpTransport(_Tap, HttpTransport):
    """:class:`HttpTransport` whose frames go to ``frame_log`` too."""

    def __init__(self, frame_log: FrameLog, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.frame_log = frame_log


class TappedStdioTransport(_Tap, StdioTransport):
    """:class:`StdioTransport` whose frames go to ``frame_log`` too."""

    def __init__(self, frame_log: FrameLog, argv: Sequence[str], **options: Any) -> None:
        super().__init__(argv, **options)
        self.frame_log = frame_log
