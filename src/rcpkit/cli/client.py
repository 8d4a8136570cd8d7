"""``rcpkit call`` and ``rcpkit info``: talk to any RCP server from the shell.

Exit codes: 0 success, 1 the call failed (the RCP error code, its name and what
to do are printed on one line), 2 usage error (bad flags, bad JSON, a method or
option the server did not advertise). ``--json`` prints the result as one JSON document
on stdout, for both commands.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import msgspec
import typer
from rich.console import Console
from rich.table import Table

from ..client.client import AsyncClient, connect_http, connect_stdio
from ..protocol.errors import CODE_NAMES, RcpError, UsageError
from ..protocol.openrpc import openrpc_document
from .support import fail

__all__ = ["register"]

T = TypeVar("T")

#: §12.2 "client action", one line per code.
ADVICE: dict[int, str] = {
    -32700: "the server could not parse the request: report it as a client bug",
    -32600: "the request was malformed: check the method name and params",
    -32601: "the server does not know this method",
    -32602: "fix the params (see the field named in the message)",
    -32603: "the server failed internally: retry once, then check the server's logs",
    -32001: "the server needs initialize first: reconnect",
    -32002: "no common protocol version: upgrade the client or the server",
    -32003: "the server does not offer this capability: run `rcpkit info` to see what it offers",
    -32004: "not an RCP method: check the spelling (extensions are x-<vendor>/<name>)",
    -32005: "that option is not advertised: drop it, or pass \"strict\": false",
    -32006: "the request was cancelled",
    -32010: "the backend is unavailable: retry later or use another engine",
    -32011: "the server is shedding load: wait and retry",
    -32012: "not authorised: pass credentials with --header 'Authorization: Bearer …'",
    -32013: "the request is too large: split it",
    -32014: "the deadline elapsed: retry with a longer --timeout or a smaller request",
    -32015: "the referenced entity does not exist: re-create it or restart pagination",
    -32016: "the write conflicts with current state: re-read and retry",
}

StdioOption = Annotated[str | None, typer.Option("--stdio", help="Server command to launch.")]
HttpOption = Annotated[str | None, typer.Option("--http", help="Server base URL (…/rcp).")]
HeaderOption = Annotated[list[str] | None, typer.Option(
    "--header", "-H", help="HTTP header 'Name: value' (repeatable).")]
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds to wait per call.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]


def register(app: typer.Typer) -> None:
    """Add ``call`` and ``info`` to the ``rcpkit`` app."""
    app.command("call")(call)
    app.command("info")(info)


def call(
    method: Annotated[str, typer.Argument(help="RCP method, e.g. retrieve.")],
    params: Annotated[str | None, typer.Argument(help="Params as a JSON object.")] = None,
    stdio: StdioOption = None,
    http: HttpOption = None,
    header: HeaderOption = None,
    raw_json: JsonOption = False,
    strict: Annotated[bool, typer.Option(
        "--strict/--no-strict", help="Refuse methods the server did not advertise.")] = True,
    timeout: TimeoutOption = 60.0,
) -> None:
    """Call METHOD on a server and print its result."""
    try:
        parsed = json.loads(params) if params else {}
    except json.JSONDecodeError as exc:
        fail("call", f"params are not valid JSON: {exc}")
    if not isinstance(parsed, dict):
        fail("call", "params must be a JSON object")

    async def run(client: AsyncClient) -> dict[str, Any]:
        return await client.call(method, parsed, deadline_ms=round(timeout * 1000))

    result = _run("call", stdio, http, header, timeout, run, strict=strict)
    if raw_json:
        typer.echo(json.dumps(result, ensure_ascii=False))
    else:
        _print_result(result)


def info(stdio: StdioOption = None, http: HttpOption = None, header: HeaderOption = None,
         timeout: TimeoutOption = 30.0, raw_json: JsonOption = False,
         openrpc: Annotated[bool, typer.Option(
             "--openrpc", help="Print the methods the server advertises as an OpenRPC "
                               "document (JSON).")] = False) -> None:
    """Show a server's identity, protocol version, conformance level and capabilities."""

    async def run(client: AsyncClient) -> AsyncClient:
        return client

    client = _run("info", stdio, http, header, timeout, run)
    if openrpc:
        typer.echo(json.dumps(openrpc_document(client.server.name, client.server.version or "",
                                               client.capabilities), ensure_ascii=False))
        return
    if raw_json:
        typer.echo(json.dumps({
            "server": {"name": client.server.name, "version": client.server.version},
            "protocolVersion": client.protocol_version, "conformance": client.conformance,
            "capabilities": {key: metadata for key, metadata
                             in client.capabilities.to_wire().items()
                             if client.capabilities.has(key)}}, ensure_ascii=False))
        return
    console = Console()
    identity = Table(show_header=False, title="RCP server")
    identity.add_row("name", client.server.name)
    identity.add_row("version", client.server.version or "—")
    identity.add_row("protocol", f"RCP/{client.protocol_version}")
    identity.add_row("conformance", client.conformance or "not declared")
    console.print(identity)
    capabilities = Table("capability", "metadata", title="Capabilities")
    for key, metadata in client.capabilities.to_wire().items():
        if client.capabilities.has(key):
            capabilities.add_row(key, json.dumps(metadata, ensure_ascii=False))
    console.print(capabilities)


def _run(command: str, stdio: str | None, http: str | None, header: list[str] | None,
         timeout: float, action: Callable[[AsyncClient], Awaitable[T]], *,
         strict: bool = True) -> T:
    if (stdio is None) == (http is None):
        fail(command, "give exactly one of --stdio 'CMD' or --http URL")
    headers = dict(_header(command, item) for item in header or [])
    if headers and stdio is not None:
        fail(command, "--header applies to --http only")

    async def session() -> T:
        if stdio is not None:
            client = await connect_stdio(stdio, timeout=timeout, log_level=None, strict=strict)
        else:
            assert http is not None
            client = await connect_http(http, headers=headers, timeout=timeout, log_level=None,
                                        strict=strict)
        async with client:
            return await action(client)

    try:
        return asyncio.run(session())
    except UsageError as exc:
        fail(command, str(exc))
    except RcpError as exc:
        name = CODE_NAMES.get(exc.code, type(exc).__name__)
        advice = ADVICE.get(exc.code, "see the server's documentation")
        fail(command, f"{exc.code} {name}: {exc.message} — {advice}", code=1)


def _header(command: str, item: str) -> tuple[str, str]:
    name, sep, value = item.partition(":")
    if not sep or not name.strip():
        fail(command, f"--header must look like 'Name: value', got {item!r}")
    return name.strip(), value.strip()


def _print_result(result: dict[str, Any]) -> None:
    """Hits as a table (§7.7), everything else as highlighted JSON."""
    console = Console()
    hits = result.get("hits")
    if isinstance(hits, list) and all(isinstance(hit, dict) for hit in hits):
        table = Table("#", "id", "score", "text", title=f"{len(hits)} hits")
        for rank, hit in enumerate(hits, 1):
            text = str(hit.get("text") or "")
            table.add_row(str(rank), str(hit.get("id")), f"{hit.get('score', 0):.4g}",
                          text if len(text) <= 80 else text[:79] + "…")
        console.print(table)
        result = {key: value for key, value in result.items() if key != "hits"}
        if not result:
            return
    console.print_json(msgspec.json.encode(result).decode())
