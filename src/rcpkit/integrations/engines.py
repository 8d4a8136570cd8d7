"""Open the RCP engine a bridge talks to: a command over stdio (§5.1), a URL over HTTP
(§5.2), or the built-in engine on a data directory, in this process.

The in-process engine is reached through :class:`InProcessTransport`, which hands frames
straight to a :class:`~rcpkit.server.dispatcher.Dispatcher`: the same stream semantics
as stdio (§5.1: replies and notifications in any order, cancellation by id), with no
pipe and no child process.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..client import AsyncClient, connect_http, connect_stdio
from ..client.session import RequestId, Sink
from ..protocol import messages
from ..protocol.errors import BackendUnavailable, UsageError
from ..server.dispatcher import Dispatcher
from ..server.framework import Server

__all__ = ["InProcessTransport", "connect_in_process", "open_engine"]


class InProcessTransport:
    """A client transport into a :class:`Server` running on the caller's event loop."""

    def __init__(self, server: Server) -> None:
        self._dispatcher = Dispatcher(server)

    async def start(self, sink: Sink) -> None:
        self._dispatcher.start(sink.deliver)

    async def send(self, frame: dict[str, Any], *, method: str,
                   request_id: RequestId | None, stream: bool) -> None:
        self._dispatcher.feed(messages.encode(frame))

    async def send_batch(self, frames: list[dict[str, Any]], *,
                         request_ids: Sequence[RequestId]) -> None:
        self._dispatcher.feed(messages.encode(frames))

    def abandon(self, request_id: RequestId) -> None:
        """Nothing to release: the session's ``notifications/cancel`` stops the handler."""

    async def close(self) -> None:
        """EOF semantics (§7.12): requests in flight are finished first."""
        await self._dispatcher.drain()


async def connect_in_process(server: Server, *, client_info: Mapping[str, str] | None = None,
                             log_level: str | None = None) -> AsyncClient:
    """An initialised :class:`AsyncClient` on ``server`` in this process (§7.1)."""
    return await AsyncClient.open(InProcessTransport(server), client_info=client_info,
                                  log_level=log_level)


@contextlib.asynccontextmanager
async def open_engine(*, stdio: str | Sequence[str] | None = None, http: str | None = None,
                      data: str | Path | None = None, headers: Mapping[str, str] | None = None,
                      auth: str | None = None, client_info: Mapping[str, str] | None = None,
                      ) -> AsyncIterator[AsyncClient]:
    """``async with open_engine(stdio="rcpkit serve --stdio") as client:`` — exactly one of
    ``stdio`` (a command line), ``http`` (the base URL) or ``data`` (a data directory of the
    built-in engine, opened in this process and closed on exit)."""
    if sum(target is not None for target in (stdio, http, data)) != 1:
        raise UsageError("give exactly one engine: a command (stdio), a URL (http) or a "
                         "data directory")
    if (headers or auth) and http is None:
        raise UsageError("headers and auth apply to an engine reached over HTTP")
    if data is not None:
        async with _in_process_engine(Path(data), client_info) as client:
            yield client
        return
    try:
        if stdio is not None:
            argv = shlex.split(stdio) if isinstance(stdio, str) else list(stdio)
            client = await connect_stdio(argv, client_info=client_info, log_level=None)
        else:
            assert http is not None
            client = await connect_http(http, headers=headers, auth=auth,
                                        client_info=client_info, log_level=None)
    except OSError as exc:
        raise BackendUnavailable(f"cannot reach the engine: {exc}") from None
    try:
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def _in_process_engine(data: Path, client_info: Mapping[str, str] | None,
                             ) -> AsyncIterator[AsyncClient]:
    from ..engine import service  # the engine's dependencies load only when it is used

    engine = service.open_engine(data)
    try:
        client = await connect_in_process(service.bind(engine), client_info=client_info)
        try:
            yield client
        finally:
            await client.close()
    finally:
        engine.close()
