"""``rcpkit gateway``: serve a federation of RCP engines as one RCP server (§16).

A bad registry or flag is one line on stderr and exit status 2; engines that cannot be
reached at start are reported on stderr and retried when a query needs them.
"""

from __future__ import annotations

import logging
from typing import Annotated, NoReturn

import typer

from ..federation.gateway import build_gateway
from ..federation.registry import RegistryError, load_registry
from .serve import ConfigError, _parse_host_port
from .support import LogLevelOption, configure_logging, configure_tracing, fail

__all__ = ["register"]

_log = logging.getLogger("rcpkit.federation")


def _fail(message: str) -> NoReturn:
    fail("gateway", message)


def gateway(
    registry: Annotated[str, typer.Option("--registry", metavar="RCP_JSON",
                                          help="Engine registry (§16.1).")] = "rcp.json",
    stdio: Annotated[bool, typer.Option("--stdio", help="Serve NDJSON on stdin/stdout.")] = False,
    http: Annotated[str | None, typer.Option("--http", metavar="HOST:PORT",
                                             help="Serve HTTP on HOST:PORT.")] = None,
    identity: Annotated[str, typer.Option(
        help="Server name, also this gateway's entry in _meta.federation.path.")
    ] = "rcpkit-gateway",
    base: Annotated[str, typer.Option(help="HTTP base path.")] = "/rcp",
    log_level: LogLevelOption = "warning",
) -> None:
    """Serve the engines of a registry as one federated RCP server."""
    if stdio == (http is not None):
        _fail("choose exactly one of --stdio or --http HOST:PORT")
    try:
        address = _parse_host_port(http) if http is not None else None
        engines = load_registry(registry)
    except (ConfigError, RegistryError) as exc:
        _fail(str(exc))
    configure_logging("gateway", log_level)
    configure_tracing("gateway")
    server = build_gateway(engines, identity=identity)
    for note in server.startup_notes:
        _log.warning("%s (retried on use)", note)
    try:
        if address is None:
            from ..transports.stdio import serve_stdio

            serve_stdio(server)
        else:
            from ..transports.http import serve_http

            serve_http(server, *address, base=base)
    finally:
        server.close()


def register(app: typer.Typer) -> None:
    """Add ``gateway`` to the ``rcpkit`` command line."""
    app.command("gateway")(gateway)
