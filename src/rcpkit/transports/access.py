"""The access log (``rcpkit serve --access-log``, off by default): one line per request on
stderr — over stdio too, whose stdout carries frames only (§5.1).

A line says when (UTC, at the reply), the method, the collection, the principal, the HTTP
status (``-`` over stdio), the JSON-RPC outcome (``0`` for a result, else the §12 code of
the first error), the duration and the bytes in and out. Never a body: the query and the
documents are the caller's data (§15.6). Text::

    2026-12-04T16:11:00.123Z retrieve kb key-7f3a 200 0 3.2ms in=120 out=2048

or, with ``--access-log-format json``, one JSON object per line with the keys ``time``,
``method``, ``collection``, ``principal``, ``status``, ``code``, ``durationMs``,
``bytesIn``, ``bytesOut`` (``null`` where unknown).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

import msgspec

__all__ = ["FORMATS", "AccessLog", "StreamAccess", "outcome_code", "request_summary"]

FORMATS = ("text", "json")
Format = Literal["text", "json"]


class _Error(msgspec.Struct):
    code: int = 0


class _Message(msgspec.Struct):
    """What the log reads of a frame: a request's id and method, a reply's error code."""

    id: Any = None
    method: str | None = None
    error: _Error | None = None


_decode = msgspec.json.Decoder(_Message | list[_Message]).decode


def _messages(frame: bytes) -> list[_Message]:
    try:
        decoded = _decode(frame)
    except msgspec.DecodeError:
        return []
    return decoded if isinstance(decoded, list) else [decoded]


def request_summary(frame: bytes) -> tuple[str, list[Any]]:
    """The method of a request frame (``batch`` for a batch, ``-`` when unreadable) and its
    members' ids."""
    members = _messages(frame)
    if len(members) == 1 and members[0].method is not None:
        return members[0].method, [members[0].id]
    return ("batch" if members else "-"), [member.id for member in members]


def outcome_code(frame: bytes) -> int | None:
    """The first error code of a reply frame, 0 when all are results, None when it holds
    no reply (a notification, or no JSON)."""
    replies = [member for member in _messages(frame) if member.method is None]
    if not replies:
        return None
    return next((reply.error.code for reply in replies if reply.error is not None), 0)


class AccessLog:
    """Writes access lines to ``stream`` (default: stderr, looked up at each line, as the
    stdio transport repoints ``sys.stderr``-bound streams at start), one write per line."""

    def __init__(self, format: Format = "text", *, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if format not in FORMATS:
            raise ValueError(f"access log format must be one of {', '.join(FORMATS)}")
        self.json = format == "json"
        self.clock = clock
        self.stream = stream
        self._lock = threading.Lock()

    def record(self, *, method: str, collection: str, principal: str | None,
               status: int | None, code: int | None, seconds: float,
               bytes_in: int | None, bytes_out: int | None) -> None:
        """One request answered (or refused)."""
        when = datetime.fromtimestamp(self.clock(), UTC).isoformat(timespec="milliseconds")
        when = when.replace("+00:00", "Z")
        milliseconds = round(seconds * 1000, 3)
        if self.json:
            line = msgspec.json.encode({
                "time": when, "method": method, "collection": collection,
                "principal": principal, "status": status, "code": code,
                "durationMs": milliseconds, "bytesIn": bytes_in,
                "bytesOut": bytes_out}).decode()
        else:
            line = " ".join((when, _token(method), collection, principal or "-",
                             "-" if status is None else str(status),
                             "-" if code is None else str(code), f"{milliseconds}ms",
                             f"in={'-' if bytes_in is None else bytes_in}",
                             f"out={'-' if bytes_out is None else bytes_out}"))
        stream = self.stream or sys.stderr
        with self._lock:  # whole lines, whichever thread answers
            stream.write(line + "\n")
            stream.flush()


_MAX_METHOD = 100


def _token(method: str) -> str:
    """``method`` as one printable field: a caller's method name must not forge a line."""
    method = method[:_MAX_METHOD]
    return method if method.isprintable() and " " not in method \
        else msgspec.json.encode(method).decode()


class StreamAccess:
    """The access lines of a frame stream (stdio): a request frame is remembered by its
    ids when read, and logged when the frame answering it is written."""

    def __init__(self, log: AccessLog, collection: str, principal: str | None) -> None:
        self.log = log
        self.collection = collection
        self.principal = principal
        self._pending: dict[tuple[type, Any], tuple[str, float, int]] = {}

    def received(self, frame: bytes) -> None:
        """A frame read from the peer."""
        method, ids = request_summary(frame)
        entry = (method, time.perf_counter(), len(frame))
        for request_id in ids:
            if request_id is not None:
                self._pending[_id_key(request_id)] = entry

    def sent(self, frame: bytes) -> None:
        """A frame written to the peer: a reply (or a batch of them) ends its requests."""
        code = outcome_code(frame)
        if code is None:  # a notification (progress, log)
            return
        found = [self._pending.pop(_id_key(reply.id), None) for reply in _messages(frame)
                 if reply.id is not None]
        method, started, size = next((entry for entry in found if entry is not None),
                                     ("-", time.perf_counter(), None))
        self.log.record(method=method, collection=self.collection, principal=self.principal,
                        status=None, code=code, seconds=time.perf_counter() - started,
                        bytes_in=size, bytes_out=len(frame))


def _id_key(request_id: Any) -> tuple[type, Any]:
    """Ids compare by JSON type and value (§4.7), as the dispatcher keys them."""
    return (str, request_id) if isinstance(request_id, str) else (float, request_id)
