"""``rcpkit mcp``: serve any RCP engine to MCP hosts (see :mod:`rcpkit.integrations.mcp`).

The engine is a command spoken to over stdio (``--stdio 'CMD'``), a URL (``--http URL``)
or the built-in engine on a data directory, in this process (``--data DIR``). MCP is
served on stdin/stdout (what desktop hosts launch), or as streamable HTTP with
``--listen HOST:PORT``. In stdio mode nothing but MCP frames reaches stdout; errors are
one line on stderr (``rcpkit mcp: error: …``) and exit status 2.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from .. import __version__
from ..cli_support import LogLevelOption, configure_logging, configure_tracing, fail
from ..protocol.errors import RcpError, UsageError

__all__ = ["register"]


def _fail(message: str) -> NoReturn:
    fail("mcp", message)


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        _fail(f"--listen expects HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _headers(values: list[str]) -> dict[str, str]:
    headers = {}
    for value in values:
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            _fail(f"--header expects 'Name: value', got {value!r}")
        headers[name.strip()] = content.strip()
    return headers


def mcp(
    stdio: Annotated[str | None, typer.Option(
        "--stdio", metavar="CMD", help="The engine: a command serving RCP on stdin/stdout.")]
    = None,
    http: Annotated[str | None, typer.Option(
        "--http", metavar="URL", help="The engine: an RCP base URL, e.g. http://host/rcp.")]
    = None,
    data: Annotated[Path | None, typer.Option(
        "--data", metavar="DIR", help="The engine: rcpkit's engine on DIR, in this process.")]
    = None,
    header: Annotated[list[str] | None, typer.Option(
        "--header", metavar="'NAME: VALUE'", help="HTTP header for the engine (repeatable).")]
    = None,
    auth_token: Annotated[str | None, typer.Option(
        help="Bearer token for the engine over HTTP.", envvar="RCPKIT_ENGINE_TOKEN")] = None,
    listen: Annotated[str | None, typer.Option(
        "--listen", metavar="HOST:PORT",
        help="Serve MCP as streamable HTTP here instead of on stdio (port 0: any free "
             "port); the address is announced on stderr.")] = None,
    path: Annotated[str, typer.Option(help="MCP endpoint path with --listen.")] = "/mcp",
    read_only: Annotated[bool, typer.Option(
        "--read-only", help="Offer no tool that changes the corpus.")] = False,
    log_level: LogLevelOption = "warning",
) -> None:
    """Serve an RCP engine to MCP hosts: its retrieval as tools, its documents as resources."""
    try:
        from .mcp import McpBridge, serve_http, serve_stdio
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("mcp"):
            raise
        _fail("needs the MCP SDK: pip install 'rcpkit[mcp]'")
    from .engines import open_engine

    address = _host_port(listen) if listen is not None else None
    headers = _headers(header or [])
    configure_logging("mcp", log_level)
    configure_tracing("mcp")

    async def run() -> None:
        async with open_engine(stdio=stdio, http=http, data=data, headers=headers or None,
                               auth=auth_token,
                               client_info={"name": "rcpkit-mcp", "version": __version__},
                               ) as client:
            bridge = McpBridge(client, allow_writes=not read_only)
            if address is None:
                await serve_stdio(bridge)
            else:
                await serve_http(bridge, *address, path=path)

    try:
        asyncio.run(run())
    except (RcpError, UsageError) as exc:
        _fail(exc.message if isinstance(exc, RcpError) else str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    """Add ``mcp`` to the ``rcpkit`` command line."""
    app.command("mcp")(mcp)
