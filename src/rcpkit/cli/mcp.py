"""``rcpkit mcp``: serve any RCP engine to MCP hosts (see :mod:`rcpkit.integrations.mcp`).

The engine is a command spoken to over stdio (``--stdio 'CMD'``), a URL (``--http URL``)
or the built-in engine on a data directory, in this process (``--data DIR``; a collection
of a collections root with ``--data ROOT --collection NAME``). MCP is served on
stdin/stdout (what desktop hosts launch), or as stateless streamable HTTP with ``--listen
HOST:PORT`` (``--workers N`` processes; the root's keys or OAuth access tokens as bearer
tokens, :mod:`rcpkit.integrations.mcp_http`). In stdio mode nothing but MCP frames reaches
stdout; errors are one line on stderr (``rcpkit mcp: error: …``) and exit status 2.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from .. import __version__
from ..protocol.errors import RcpError, UsageError
from .support import LogLevelOption, configure_logging, configure_tracing, fail

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


def _collection(data: Path | None, collection: str | None,
                ) -> tuple[Path | None, Path | None, bool]:
    """(the engine's data directory, the collections root whose keys apply if any, whether
    the engine is a collection of a root)."""
    from ..tenancy.collections import CollectionError, CollectionRegistry, is_collection_root
    from ..tenancy.keys import KeyStore

    if data is None or not is_collection_root(data):
        if collection is not None:
            _fail("--collection needs --data naming a collections root")
        return data, None, False
    registry = CollectionRegistry(data)
    if collection is None:
        _fail(f"{data} holds collections ({', '.join(registry.names()) or 'none yet'}): "
              "name one with --collection")
    try:
        directory = registry.path(collection)
    except CollectionError as exc:
        _fail(str(exc))
    # Keys apply once the root has any; fixed now, so a keys file that disappears later
    # leaves no key valid rather than the server open.
    return directory, data if KeyStore(data).in_force() else None, True


def _as_stdio_peer(server: Any) -> None:
    # Imported once the engine is open: the engine's modules load with it, not before
    # the host's initialize is answered.
    from ..tenancy.serving import as_stdio_peer

    as_stdio_peer(server)


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
    collection: Annotated[str | None, typer.Option(
        "--collection", metavar="NAME",
        help="With --data ROOT (a collections root): the collection to serve; over HTTP "
             "the root's keys (keys.json) are then the bearer tokens.")] = None,
    workers: Annotated[int, typer.Option(
        "--workers", min=1, help="Worker processes with --listen (stateless: any worker "
                                 "answers any request).")] = 1,
    oauth_issuer: Annotated[str | None, typer.Option(
        "--oauth-issuer", metavar="URL",
        help="With --listen: accept JWT access tokens of this OAuth 2.1 issuer.")] = None,
    oauth_jwks: Annotated[str | None, typer.Option(
        "--oauth-jwks", metavar="URL", help="The issuer's JWKS URL (its signing keys).")]
    = None,
    public_url: Annotated[str | None, typer.Option(
        "--public-url", metavar="URL",
        help="This MCP endpoint's public URL: the tokens' audience (default: "
             "http://HOST:PORT/PATH of --listen).")] = None,
    oauth_read_scope: Annotated[str, typer.Option(
        help="Token scope granting read (tools that only read, resources).")] = "rcp:read",
    oauth_write_scope: Annotated[str, typer.Option(
        help="Token scope granting write (tools that change the corpus).")] = "rcp:write",
    log_level: LogLevelOption = "warning",
) -> None:
    """Serve an RCP engine to MCP hosts: its retrieval as tools, its documents as resources."""
    try:
        from ..integrations.mcp import McpBridge, serve_stdio, serve_stdio_opening
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("mcp"):
            raise
        _fail("needs the MCP SDK: pip install 'rcpkit[mcp]'")
    from ..integrations.engines import open_engine

    address = _host_port(listen) if listen is not None else None
    headers = _headers(header or [])
    data, keys_root, is_collection = _collection(data, collection)
    if address is None and (workers > 1 or oauth_issuer or oauth_jwks or public_url):
        _fail("--workers, --oauth-issuer, --oauth-jwks and --public-url need --listen")
    if (oauth_issuer is None) != (oauth_jwks is None):
        _fail("--oauth-issuer and --oauth-jwks go together")
    if oauth_issuer is not None:
        try:
            import jwt  # noqa: F401
        except ModuleNotFoundError:
            _fail("OAuth needs PyJWT: pip install 'rcpkit[oauth]'")
    configure_logging("mcp", log_level)
    configure_tracing("mcp")
    engine: dict[str, Any] = {"stdio": stdio, "http": http, "data": data,
                              "headers": headers or None, "auth": auth_token}

    if address is not None:
        # Only here: a stdio bridge does not pay for the HTTP server's imports.
        from ..integrations.mcp_http import McpHttp, OAuth, serve_http

        host, port = address
        shown = f"[{host}]" if ":" in host else host
        oauth = None if oauth_issuer is None or oauth_jwks is None else OAuth(
            issuer=oauth_issuer, jwks_url=oauth_jwks,
            resource=public_url or f"http://{shown}:{port}{path}",
            read_scope=oauth_read_scope, write_scope=oauth_write_scope)
        settings = McpHttp(host=host, port=port, path=path, workers=workers, engine=engine,
                           read_only=read_only, keys_root=keys_root, collection=collection,
                           oauth=oauth)
        serve: Callable[[], None] = functools.partial(serve_http, settings)
    else:
        if is_collection:  # as `rcpkit serve --stdio` serves a collection
            engine["govern"] = _as_stdio_peer

        async def run_stdio() -> None:
            opening = open_engine(**engine, client_info={"name": "rcpkit-mcp",
                                                         "version": __version__})
            if data is not None and stdio is None and http is None:  # opening it takes a while
                await serve_stdio_opening(opening, engine=data.name, allow_writes=not read_only)
                return
            async with opening as client:
                await serve_stdio(McpBridge(client, allow_writes=not read_only))

        serve = functools.partial(asyncio.run, run_stdio())

    try:
        serve()
    except (RcpError, UsageError) as exc:
        _fail(exc.message if isinstance(exc, RcpError) else str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    """Add ``mcp`` to the ``rcpkit`` command line."""
    app.command("mcp")(mcp)
