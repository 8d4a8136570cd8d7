"""The ``rcpkit check`` command: certify an RCP server at L0/L1/L2 (§14.5)."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Annotated

import typer

from rcpkit.cli.support import fail
from rcpkit.conformance.report import CheckResult, Outcome
from rcpkit.conformance.runner import Target, run_checks

__all__ = ["check_command", "register"]


def _parse_headers(values: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for value in values:
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            raise typer.BadParameter(
                f"expected 'Name: value', got {value!r}", param_hint="--header"
            )
        headers[name.strip()] = content.strip()
    return headers


def check_command(
    command: Annotated[
        list[str] | None, typer.Argument(help="Server command line (after --), for stdio.")
    ] = None,
    http: Annotated[
        str | None, typer.Option("--http", help="HTTP base URL, e.g. http://h/rcp")
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option("--header", "-H", help="Extra HTTP header 'K: V'.")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON report.")] = False,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML here.")] = None,
    schema: Annotated[
        Path | None, typer.Option("--schema", help="Validate every frame against this schema.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each frame.")] = 10.0,
    only: Annotated[
        list[str] | None, typer.Option("--only", help="Run checks whose id matches this glob.")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Hide skipped checks.")] = False,
) -> None:
    """Run every applicable conformance check and certify the highest level reached."""
    if bool(command) == bool(http):
        raise typer.BadParameter("give either a server command after -- or --http URL")
    target = Target(argv=tuple(command or ()), url=http, headers=_parse_headers(header or []))
    patterns = only or []

    def print_live(result: CheckResult) -> None:
        if not json_output and not (quiet and result.outcome is Outcome.SKIP):
            typer.echo("\n".join(result.text_lines()))

    try:
        report = run_checks(
            target,
            timeout=timeout,
            schema_path=str(schema) if schema else None,
            select=(lambda c: any(fnmatch.fnmatch(c.id, p) for p in patterns))
            if patterns
            else None,
            on_result=print_live,
        )
    except OSError as exc:  # the server command could not be started at all
        fail("check", f"cannot start {target.describe()!r}: {exc.strerror or exc}")
    if json_output:
        typer.echo(report.dumps())
    else:
        typer.echo("\n".join(report.summary_lines()))
    if junit is not None:
        junit.write_text(report.to_junit(), encoding="utf-8")
    raise typer.Exit(0 if report.ok else 1)


def register(app: typer.Typer) -> None:
    """Add the ``check`` command to the rcpkit Typer app."""
    app.command("check", no_args_is_help=True)(check_command)
