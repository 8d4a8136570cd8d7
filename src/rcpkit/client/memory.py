"""An in-process client transport: a :class:`~rcpkit.server.Server` driven with no I/O.

Like h11's connection pair or httpx's ``MockTransport``: the client and the
server's :class:`~rcpkit.server.dispatcher.Dispatcher` share one event loop and
exchange encoded frames directly, with the stdio stream semantics (§5.1):
replies and notifications arrive as each request completes, a batch is one
frame (§11), an answered ``shutdown`` ends the connection once in-flight
requests are answered (§13.1). Frames are encoded and parsed exactly as on a
pipe, so what passes here passes the wire codec (§4.6). Use it to test a
server without starting a process::

    async with await connect_memory(build_server()) as client:
        assert (await client.ping()).nonce is None
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from ..protocol import messages
from ..protocol.errors import TransportClosed
from ..server.dispatcher import Dispatcher
from ..server.framework import Server
from .client import AsyncClient
from .retry import RetryPolicy
from .session import LogHandler, RequestId, Sink

__all__ = ["MemoryTransport", "connect_memory"]


class MemoryTransport:
    """Frames to and from ``server``'s dispatcher in this process (see the module docstring).

    ``max_concurrency``, ``request_timeout_ms`` and ``max_batch`` are the
    dispatcher's own options, as a stdio server would use them; closing waits
    ``stop_grace_s`` for in-flight requests, then cancels them. ``caller()``, asked as each
    frame is sent, names who sends it when one connection carries several callers' requests
    (a bridge serving many users): the server stamps, caps and grants per caller (§15.3,
    §15.5, §15.2) as over an authenticated HTTP request. None: the session is the caller.
    """

    def __init__(self, server: Server, *, max_concurrency: int = 64,
                 request_timeout_ms: float | None = None, max_batch: int = 1024,
                 stop_grace_s: float = 3.0, caller: Callable[[], str | None] | None = None,
                 ) -> None:
        self.server = server
        self.stop_grace_s = stop_grace_s
        self.caller = caller
        self._options: dict[str, Any] = {"max_concurrency": max_concurrency,
                                         "request_timeout_ms": request_timeout_ms,
                                         "max_batch": max_batch}
        self._dispatcher: Dispatcher | None = None
        self._sink: Sink | None = None
        self._ending: asyncio.Task[None] | None = None

    @property
    def dispatcher(self) -> Dispatcher:
        """The server side of the connection (once started)."""
        if self._dispatcher is None:
            raise TransportClosed("the in-memory connection is not started")
        return self._dispatcher

    async def start(self, sink: Sink) -> None:
        self._sink = sink
        self._dispatcher = Dispatcher(self.server, **self._options)
        self._dispatcher.start(sink.deliver)

    async def send(self, frame: dict[str, Any], *, method: str,
                   request_id: RequestId | None, stream: bool) -> None:
        self._feed(frame)

    async def send_batch(self, frames: list[dict[str, Any]], *,
                         request_ids: Sequence[RequestId]) -> None:
        self._feed(frames)

    def _feed(self, frame: dict[str, Any] | list[dict[str, Any]]) -> None:
        dispatcher = self._dispatcher
        if dispatcher is None or dispatcher.closed or self._ending is not None:
            raise TransportClosed("the in-memory server has stopped reading")
        dispatcher.feed(messages.encode(frame), None if self.caller is None else self.caller())
        if dispatcher.closed:  # an answered shutdown: the server stops reading (§13.1)
            self._ending = asyncio.ensure_future(self._end("the server shut down"))

    def abandon(self, request_id: RequestId) -> None:
        """Nothing to release: a late reply is discarded by the session."""

    async def close(self) -> None:
        """EOF (§5.1): the server answers what is in flight, then the connection ends."""
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._end("the client closed the connection"))
        await self._ending

    async def _end(self, reason: str) -> None:
        if self._dispatcher is not None:
            # cancelling the drain cancels the requests still in flight
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dispatcher.drain(), self.stop_grace_s)
        if self._sink is not None:
            self._sink.connection_lost(TransportClosed(reason))


async def connect_memory(server: Server, *, strict: bool = True,
                         log_handler: LogHandler | None = None, log_level: str | None = "info",
                         timeout: float = 30.0, retry: RetryPolicy = RetryPolicy(),
                         client_info: dict[str, str] | None = None,
                         request_timeout_ms: float | None = None,
                         caller: Callable[[], str | None] | None = None) -> AsyncClient:
    """An :class:`AsyncClient` on ``server`` in this process, initialized (§7.1); ``caller``
    as :class:`MemoryTransport` takes it."""
    transport = MemoryTransport(server, request_timeout_ms=request_timeout_ms, caller=caller)
    return await AsyncClient.open(transport, strict=strict, log_handler=log_handler,
                                  log_level=log_level, timeout=timeout, retry=retry,
                                  client_info=client_info)
