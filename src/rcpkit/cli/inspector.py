"""``rcpkit inspect``: see and drive any RCP server from a browser.

The first line on stdout is the page's address with its one-time token; logs go
to stderr. Exit codes: 0 after Ctrl-C, 1 the server could not be reached or
initialised, 2 usage error.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import shlex
import socket
import sys
import threading
import webbrowser
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from ..inspector.app import create_app
from ..inspector.session import Inspector, TargetSpec
from ..protocol.errors import RcpError, UsageError
from ..transports.http.server import HttpServer
from .support import fail

__all__ = ["register"]

_log = logging.getLogger("rcpkit.inspector")


def _usage(message: str) -> NoReturn:
    fail("inspect", message)


def _address(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        _usage(f"--listen expects HOST:PORT, got {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def inspect(
    http: Annotated[str | None, typer.Option("--http", help="Server base URL (…/rcp).")] = None,
    stdio: Annotated[str | None, typer.Option("--stdio", help="Server command to launch.")]
    = None,
    data: Annotated[Path | None, typer.Option(
        "--data", metavar="DIR", help="Inspect the built-in engine on this data directory.")]
    = None,
    header: Annotated[list[str] | None, typer.Option(
        "--header", "-H", help="HTTP header 'Name: value' for the server (repeatable; kept "
                               "out of the page).")] = None,
    listen: Annotated[str, typer.Option(
        "--listen", metavar="HOST:PORT", help="Where the inspector listens (port 0: any free).")]
    = "127.0.0.1:0",
    no_open: Annotated[bool, typer.Option("--no-open", help="Do not open a browser.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for initialize.")] = 30.0,
    eval_root: Annotated[Path | None, typer.Option(
        "--eval-root", metavar="DIR", help="Evaluations read datasets under this directory "
                                          "only (default: the current directory).")] = None,
    allow_stdio: Annotated[list[str] | None, typer.Option(
        "--allow-stdio", metavar="CMD", help="A server command the page may start "
                                             "(repeatable; no other can be).")] = None,
) -> None:
    """Open a web inspector on an RCP server: identity, capabilities, method forms, raw
    frames, retrieve results, certification and evaluation."""
    headers: dict[str, str] = {}
    for item in header or []:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            _usage(f"--header must look like 'Name: value', got {item!r}")
        headers[name.strip()] = value.strip()
    try:
        spec = TargetSpec(http=http, stdio=None if stdio is None else shlex.split(stdio), data=data,
                          headers=headers)
    except UsageError as exc:
        _usage(str(exc))
    allowed = [TargetSpec(stdio=shlex.split(command)) for command in allow_stdio or []]
    if not all(target.command for target in allowed):
        _usage("--allow-stdio needs a command")
    if eval_root is not None and not eval_root.is_dir():
        _usage(f"--eval-root {eval_root} is not a directory")
    host, port = _address(listen)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        listener = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host
                                        else socket.AF_INET)
    except OSError as exc:
        _usage(f"cannot listen on {listen}: {exc.strerror or exc}")
    if not _is_loopback(host):
        typer.echo(f"warning: listening on {host}, reachable beyond this machine; the token "
                   "is the only protection", err=True)
    try:
        asyncio.run(_serve(spec, listener, timeout, eval_root, allowed,
                           open_browser=not no_open))
    except (RcpError, OSError) as exc:
        fail("inspect", f"cannot inspect {spec.describe()['address']}: {exc}", code=1)
    finally:
        listener.close()


async def _serve(spec: TargetSpec, listener: socket.socket, timeout: float,
                 eval_root: Path | None, allowed: list[TargetSpec], *,
                 open_browser: bool) -> None:
    inspector = await Inspector.open(spec, timeout=timeout, eval_root=eval_root,
                                     allowed_stdio=allowed)
    try:
        host, port = listener.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        hosts = {f"{shown}:{port}", f"localhost:{port}"} if _is_loopback(host) else None
        token = secrets.token_urlsafe(24)
        url = f"http://{shown}:{port}/?token={token}"
        print(url, flush=True)
        if open_browser:
            # webbrowser may block until a browser process starts: keep it off the loop.
            threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
        await HttpServer(create_app(inspector, token, hosts=hosts)).serve(listener)
    finally:
        await inspector.close()


def register(app: typer.Typer) -> None:
    """Add ``inspect`` to the ``rcpkit`` command line."""
    app.command("inspect")(inspect)
