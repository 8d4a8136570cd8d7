"""Open the RCP engine a bridge talks to: a command over stdio (§5.1), a URL over HTTP
(§5.2), or the built-in engine on a data directory, in this process (through the client's
in-memory connection, :mod:`rcpkit.client.memory`: stdio's stream semantics, no pipe).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..client import AsyncClient, connect_http, connect_stdio
from ..client.memory import connect_memory
from ..protocol.errors import BackendUnavailable, UsageError

if TYPE_CHECKING:
    from ..server.framework import Server

__all__ = ["open_engine"]


@contextlib.asynccontextmanager
async def open_engine(*, stdio: str | Sequence[str] | None = None, http: str | None = None,
                      data: str | Path | None = None, headers: Mapping[str, str] | None = None,
                      auth: str | None = None, client_info: Mapping[str, str] | None = None,
                      govern: Callable[[Server], None] | None = None,
                      caller: Callable[[], str | None] | None = None,
                      ) -> AsyncIterator[AsyncClient]:
    """``async with open_engine(stdio="rcpkit serve --stdio") as client:`` — exactly one of
    ``stdio`` (a command line), ``http`` (the base URL) or ``data`` (a data directory of the
    built-in engine, opened in this process and closed on exit).

    In process, ``govern(server)`` adapts the server before it serves (each caller's
    stamps, caps and trust grant: :func:`rcpkit.tenancy.serving.govern_writes`), and
    ``caller()`` names who sends each request (:class:`~rcpkit.client.memory.MemoryTransport`)."""
    if sum(target is not None for target in (stdio, http, data)) != 1:
        raise UsageError("give exactly one engine: a command (stdio), a URL (http) or a "
                         "data directory")
    if (headers or auth) and http is None:
        raise UsageError("headers and auth apply to an engine reached over HTTP")
    if (govern or caller) and data is None:
        raise UsageError("govern and caller apply to an engine in this process")
    if data is not None:
        async with _in_process_engine(Path(data), client_info, govern, caller) as client:
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
                             govern: Callable[[Server], None] | None,
                             caller: Callable[[], str | None] | None,
                             ) -> AsyncIterator[AsyncClient]:
    # The engine's dependencies load only when it is used.
    from ..binding import bind
    from ..binding.errors import wire_error
    from ..engine.core import open_engine
    from ..engine.errors import ConfigError, EngineError

    # Opened on a thread: the loop meanwhile answers what needs no engine (MCP's initialize).
    opening = asyncio.ensure_future(asyncio.to_thread(open_engine, data))
    try:
        engine = await asyncio.shield(opening)
    except asyncio.CancelledError:
        opening.add_done_callback(_close_opened)
        raise
    except OSError as exc:
        raise BackendUnavailable(f"cannot open the engine on {data}: {exc}") from None
    except ConfigError as exc:
        raise UsageError(exc.message) from None
    except EngineError as exc:
        raise wire_error(exc) from None
    try:
        server = bind(engine)
        if govern is not None:
            govern(server)
        client = await connect_memory(server, log_level=None, caller=caller,
                                      client_info=dict(client_info or {}) or None)
        try:
            yield client
        finally:
            await client.close()
    finally:
        engine.close()


def _close_opened(opening: asyncio.Future[Any]) -> None:
    """Close an engine that finished opening after its caller gave up waiting."""
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()
