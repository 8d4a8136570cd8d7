"""One call answered as a Server-Sent Events stream (§5.2, §9): progress and log frames as
they come, then exactly one final frame."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import Receive, Send

from ...protocol.framing import sse_event
from ...protocol.messages import Request as RpcRequest
from ...server.dispatcher import Dispatcher

__all__ = ["stream_call", "wants_sse"]


def wants_sse(accept: bytes, dispatcher: Dispatcher, server_capabilities: dict[str, object]
              ) -> bool:
    """SSE when the client accepts it and the session (else the server) advertises
    ``streaming``."""
    advertised = dispatcher.session.protocol.capabilities or server_capabilities
    return "streaming" in advertised and b"text/event-stream" in accept


async def stream_call(receive: Receive, send: Send, dispatcher: Dispatcher,
                      parsed: RpcRequest, path_method: str | None, caller: str | None,
                      headers: dict[bytes, bytes], done: Callable[[Dispatcher], None]) -> None:
    """Stream the call's frames; ``done`` runs once the final frame is known. A client that
    disconnects cancels the call: nobody is left to read its result."""
    frames: asyncio.Queue[bytes] = asyncio.Queue()
    call = asyncio.ensure_future(dispatcher.handle_message(
        parsed, notify=frames.put_nowait, path_method=path_method, caller=caller,
        headers=headers))
    gone = asyncio.ensure_future(_disconnect(receive))
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
    try:
        while not call.done():
            getter = asyncio.ensure_future(frames.get())
            await asyncio.wait({getter, call, gone}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                await _send_chunk(send, sse_event(getter.result()))
            else:
                getter.cancel()
            if gone.done() and not call.done():
                return
        while not frames.empty():
            await _send_chunk(send, sse_event(frames.get_nowait()))
        reply = call.result()
        done(dispatcher)
        await send({"type": "http.response.body",
                    "body": sse_event(reply) if reply is not None else b""})
    finally:
        call.cancel()
        gone.cancel()


async def _disconnect(receive: Receive) -> None:
    """Return once the client is gone (ASGI ``http.disconnect``, after the request body)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send_chunk(send: Send, chunk: bytes) -> None:
    await send({"type": "http.response.body", "body": chunk, "more_body": True})
