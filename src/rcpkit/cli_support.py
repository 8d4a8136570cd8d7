"""What every ``rcpkit`` command shares: one error style on stderr.

A user-fixable error is one line, ``rcpkit <command>: error: <message>``, and an exit status
(2 for usage and configuration errors, the command's own status otherwise); never a
traceback and never anything on stdout, which may carry frames or JSON.
"""

from __future__ import annotations

from typing import NoReturn

import typer

__all__ = ["fail"]


def fail(command: str, message: str, *, code: int = 2) -> NoReturn:
    """Print ``rcpkit <command>: error: <message>`` on stderr and exit with ``code``."""
    typer.echo(f"rcpkit {command}: error: {message}", err=True)
    raise typer.Exit(code)
