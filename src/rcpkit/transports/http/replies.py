"""Buffered HTTP replies of the RCP endpoint (§5.2): JSON-RPC error bodies, 429 shedding,
and writing a reply on ASGI."""

from __future__ import annotations

import math

from starlette.types import Send

from ...protocol import messages
from ...protocol.errors import RateLimited, RcpError
from .server import Reply

__all__ = ["error_body", "reply_headers", "respond", "shed"]

_JSON = (b"content-type", b"application/json")


def error_body(error: RcpError) -> bytes:
    return messages.encode(messages.error_response(None, error))


def shed(seconds: float, reason: str) -> Reply:
    """429 with ``Retry-After`` (whole seconds, rounded up) and ``data.retryAfterMs``."""
    whole = max(1, math.ceil(seconds))
    return 429, [(b"retry-after", b"%d" % whole)], error_body(
        RateLimited(reason, retryAfterMs=math.ceil(seconds * 1000)))


def reply_headers(status: int, extra: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A reply's headers besides ``content-length``: JSON unless it is a bodiless 204."""
    return list(extra) if status == 204 else [_JSON, *extra]


async def respond(send: Send, status: int, extra: list[tuple[bytes, bytes]],
                  body: bytes) -> None:
    """Send a buffered reply on ASGI."""
    headers = reply_headers(status, extra)
    if status != 204:
        headers.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
