"""The test server: the public keyword example plus ``x-test/*`` hooks that misbehave on
purpose (slow, failing, printing, streaming). Run as a script to serve it over stdio."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from rcpkit.protocol.errors import NotFound
from rcpkit.server import Context, Server
from rcpkit.server.example import build_server

__all__ = ["build_test_server"]


def build_test_server(*, streaming: bool = True, log: bool = True,
                      cancelled: list[Any] | None = None) -> Server:
    """``cancelled`` collects the request ids of ``x-test/sleep`` calls that were cancelled."""
    server = build_server()
    if not streaming:
        del server.capabilities["streaming"]
    if not log:
        del server.capabilities["log"]
    server.capability("x-test", {})

    @server.method("x-test/sleep")
    async def sleep(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        """Async: sleeps ``seconds``; reports progress first."""
        ctx.progress(0.5, stage="sleep", message="sleeping")
        try:
            await asyncio.sleep(float(params.get("seconds", 1.0)))
        except asyncio.CancelledError:
            if cancelled is not None:
                cancelled.append(ctx.request_id)
            raise
        return {"slept": params.get("seconds", 1.0)}

    @server.method("x-test/busy")
    def busy(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        """Sync (worker thread): polls cancellation while 'working'."""
        end = time.monotonic() + float(params.get("seconds", 1.0))
        while time.monotonic() < end:
            ctx.check_cancelled()
            ctx.progress(0.1, stage="busy")
            time.sleep(0.01)
        return {"done": True}

    @server.method("x-test/boom")
    def boom(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        raise RuntimeError("secret internal detail /etc/passwd")

    @server.method("x-test/notfound")
    def not_found(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        raise NotFound("no such thing", data={"field": "id"})

    @server.method("x-test/print")
    def stray_print(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        print("stray print from a handler")
        sys.stdout.write("more stray output\n")
        return {"printed": True}

    @server.method("x-test/log")
    def log(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        for level in ("debug", "info", "warning"):
            ctx.log(level, f"a {level} message", {"n": 1})
        return {}

    @server.method("x-test/nan")
    def nan(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        return {"score": float("nan"), "inf": [float("inf")]}

    @server.method("x-test/unserialisable")
    def unserialisable(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        return {"value": object()}

    @server.method("x-test/deadline")
    async def deadline(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        return {"remainingMs": ctx.remaining_ms}

    return server


if __name__ == "__main__":
    from rcpkit.transports.stdio import serve_stdio

    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
    timeout = float(sys.argv[2]) if len(sys.argv) > 2 else None
    sys.exit(serve_stdio(build_test_server(), max_line=limit, request_timeout_ms=timeout))
