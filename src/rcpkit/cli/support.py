"""What every ``rcpkit`` command shares: one error style on stderr.

A user-fixable error is one line, ``rcpkit <command>: error: <message>``, and an exit status
(2 for usage and configuration errors, the command's own status otherwise); never a
traceback and never anything on stdout, which may carry frames or JSON.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated, NoReturn

import typer

__all__ = ["LOG_LEVELS", "LogLevelOption", "configure_logging", "configure_tracing", "fail"]

LOG_LEVELS = ("debug", "info", "warning", "error")
LogLevelOption = Annotated[str, typer.Option(
    "--log-level", help=f"Server log on stderr: {', '.join(LOG_LEVELS)}.")]


def fail(command: str, message: str, *, code: int = 2) -> NoReturn:
    """Print ``rcpkit <command>: error: <message>`` on stderr and exit with ``code``."""
    one_line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    typer.echo(f"rcpkit {command}: error: {one_line}", err=True)
    raise typer.Exit(code)


def configure_logging(command: str, level: str) -> None:
    """Log records at ``level`` and above to stderr (stdout may carry frames)."""
    if level not in LOG_LEVELS:
        fail(command, f"--log-level must be one of {', '.join(LOG_LEVELS)}")
    logging.basicConfig(stream=sys.stderr, level=level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def configure_tracing(command: str) -> None:
    """OpenTelemetry traces for a serving command, when the ``OTEL_*`` environment asks for
    them (:func:`rcpkit.tracing.from_environment`); a misconfiguration is one line, exit 2."""
    from ..protocol.errors import UsageError
    from ..tracing import from_environment

    try:
        from_environment()
    except UsageError as exc:
        fail(command, str(exc))
