"""Framing for the two transports: NDJSON lines (§5.1) and SSE frames (§5.2).

:class:`LineBuffer` is sans-I/O: feed it whatever ``read()`` returned and take
complete lines out. Blank lines are skipped; a line longer than the limit is
reported once as :data:`OVERSIZED` and its bytes are discarded up to the next
newline, so one huge frame cannot exhaust memory or kill the reader.
"""

from __future__ import annotations

from typing import Final

__all__ = ["OVERSIZED", "LineBuffer", "SseParser", "ndjson", "sse_event"]

OVERSIZED: Final = b""
"""Sentinel yielded by :meth:`LineBuffer.feed` in place of an over-long line."""


class LineBuffer:
    """Split a byte stream into NDJSON lines (§5.1)."""

    def __init__(self, max_line: int = 16 * 1024 * 1024) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._discarding = False

    def feed(self, data: bytes) -> list[bytes]:
        """Return the complete, non-blank lines now available (without ``\\n``)."""
        buf = self._buf
        buf += data
        lines: list[bytes] = []
        end = buf.rfind(b"\n")
        if end >= 0:  # every complete line at once: one split, not one search per line
            pieces = bytes(buf[:end]).split(b"\n")
            del buf[:end + 1]
            if self._discarding:  # the first piece ends the over-long line being dropped
                self._discarding = False
                del pieces[0]
            limit = self.max_line
            lines = [OVERSIZED if len(line) > limit else line.rstrip(b"\r") for line in pieces
                     if len(line) > limit or (line and not line.isspace())]
        if len(buf) > self.max_line and not self._discarding:
            self._discarding = True
            lines.append(OVERSIZED)
        if self._discarding:
            buf.clear()
        return lines

    def finish(self) -> list[bytes]:
        """At EOF: a final unterminated line still counts as a frame."""
        rest = bytes(self._buf)
        self._buf.clear()
        if self._discarding:
            self._discarding = False
            return []
        if len(rest) > self.max_line:
            return [OVERSIZED]
        return [rest] if rest.strip() else []


def ndjson(frame: bytes) -> bytes:
    """One NDJSON line: compact JSON (never contains a raw newline) plus ``\\n``."""
    return frame + b"\n"


def sse_event(frame: bytes) -> bytes:
    """One SSE event: a single ``data:`` line and a blank line (§5.2)."""
    return b"data: " + frame + b"\n\n"


class SseParser:
    """Incremental SSE reader for clients: yields each event's ``data`` payload."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk
        events: list[bytes] = []
        while True:
            newline = self._buf.find(b"\n")
            if newline < 0:
                break
            line = bytes(self._buf[:newline]).rstrip(b"\r")
            del self._buf[: newline + 1]
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                payload = line[5:]
                self._data.append(payload[1:] if payload.startswith(b" ") else payload)
            # comments (":") and other fields (event:, id:, retry:) are ignored
        return events
