"""A raw MCP host over stdio: the handshake and a few requests as JSON lines, no SDK."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["mcp_stdio_replies"]

HANDSHAKE = ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                 "protocolVersion": "2025-06-18", "capabilities": {},
                 "clientInfo": {"name": "raw-host", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"})


async def mcp_stdio_replies(argv: Sequence[str], requests: Sequence[dict[str, Any]]
                            ) -> tuple[list[dict[str, Any]], asyncio.subprocess.Process]:
    """Start ``argv``, send the handshake then ``requests`` (ids from 2), and read one reply
    each (the ``initialize`` answer first). The process is returned with stdin open."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    frames = [*HANDSHAKE, *({"jsonrpc": "2.0", "id": n, **request}
                            for n, request in enumerate(requests, start=2))]
    process.stdin.write(b"".join(json.dumps(frame).encode() + b"\n" for frame in frames))
    await process.stdin.drain()
    replies = [json.loads(await asyncio.wait_for(process.stdout.readline(), 60))
               for _ in range(len(requests) + 1)]
    return replies, process
