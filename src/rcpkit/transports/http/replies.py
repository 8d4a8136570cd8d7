"""Buffered HTTP replies of the RCP endpoint (§5.2): JSON bodies, JSON-RPC error replies,
429 shedding, and writing a reply on ASGI."""

from __future__ import annotations

import math
from collections.abc import Sequence

from starlette.types import Send

from ...protocol import messages
from ...protocol.errors import RateLimited, RcpError
from .server import Reply

__all__ = ["JSON_HEADERS", "error_reply", "respond", "shed"]

JSON_HEADERS = ((b"content-type", b"application/json"),)
"""The headers of a reply with a JSON body and nothing else to say."""


def error_reply(status: int, error: RcpError, *extra: tuple[bytes, bytes]) -> Reply:
    """``status`` with the JSON-RPC error response of ``error`` (id null) and ``extra``
    headers."""
    return status, (*JSON_HEADERS, *extra), messages.encode(messages.error_response(None, error))


def shed(seconds: float, reason: str) -> Reply:
    """429 with ``Retry-After`` (whole seconds, rounded up) and ``data.retryAfterMs``."""
    return error_reply(429, RateLimited(reason, retryAfterMs=math.ceil(seconds * 1000)),
                       (b"retry-after", b"%d" % max(1, math.ceil(seconds))))


async def respond(send: Send, status: int, headers: Sequence[tuple[bytes, bytes]],
                  body: bytes) -> None:
    """Send a buffered reply on ASGI."""
    framed = [*headers, (b"content-length", b"%d" % len(body))] if status != 204 \
        else list(headers)
    await send({"type": "http.response.start", "status": status, "headers": framed})
    await send({"type": "http.response.body", "body": body})
