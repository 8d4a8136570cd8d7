"""Paging cursors (§10): signed, opaque page states bound to one query's fingerprint."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass, replace

import msgspec

from rcpkit.engine.errors import UnknownCursor
from rcpkit.engine.types import SearchRequest

__all__ = ["CursorState", "Cursors"]


@dataclass(frozen=True, slots=True)
class CursorState:
    """What a continuation page needs to rebuild the first page's ranking."""

    seq: int
    offset: int
    now_ms: float
    feedback_mark: int


class Cursors:
    """Issues and verifies cursors with the record's secret, so any process sharing the
    record accepts the cursors of the others."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def fingerprint(self, request: SearchRequest) -> str:
        """Identifies a query and its ranking parameters across pages."""
        fixed = replace(request, cursor=None, index_version=None, session_id=None)
        body = msgspec.json.encode(fixed, order="sorted", enc_hook=repr)
        return hmac.new(self._secret, body, hashlib.sha256).hexdigest()[:32]

    def issue(self, state: CursorState, fingerprint: str) -> str:
        """An opaque cursor: base64url JSON of the page state, signed with HMAC."""
        body = json.dumps({"f": fingerprint, "v": state.seq, "o": state.offset,
                           "t": state.now_ms, "p": state.feedback_mark}, separators=(",", ":"))
        tag = hmac.new(self._secret, body.encode(), hashlib.sha256).digest()[:16]
        return f"{_b64(body.encode())}.{_b64(tag)}"

    def open(self, cursor: str, fingerprint: str, gc_floor: int) -> CursorState:
        """Verify a cursor; a forged, foreign, mismatched or expired one is refused."""
        try:
            body_text, _, tag_text = cursor.partition(".")
            body = _unb64(body_text)
            expected = hmac.new(self._secret, body, hashlib.sha256).digest()[:16]
            if not hmac.compare_digest(expected, _unb64(tag_text)):
                raise ValueError("bad signature")
            fields = json.loads(body)
            state = CursorState(seq=int(fields["v"]), offset=int(fields["o"]),
                                now_ms=float(fields["t"]), feedback_mark=int(fields["p"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise UnknownCursor("unknown cursor") from exc
        if fields["f"] != fingerprint:
            raise UnknownCursor("cursor does not belong to this query")
        if state.seq < gc_floor:
            raise UnknownCursor("cursor expired: its snapshot was garbage-collected")
        return state


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
