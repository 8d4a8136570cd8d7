"""``rcpkit db status|stop`` against the session's server, and on a directory without one."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from rcpkit.cli.db import register
from rcpkit.engine import pgserver


def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.callback()
    def root() -> None:
        """A root so that ``db`` stays a sub-command."""

    return app


def test_status_prints_the_dsn_of_a_running_server(pg_server: pgserver.LocalPostgres) -> None:
    result = CliRunner().invoke(cli(), ["db", "status", "--dir", str(pg_server.data_dir)])
    assert result.exit_code == 0
    assert result.output.strip() == pg_server.dsn_for("rcpkit")


def test_status_and_stop_fail_cleanly_without_a_server(tmp_path: Path) -> None:
    for command in ("status", "stop"):
        result = CliRunner().invoke(cli(), ["db", command, "--dir", str(tmp_path)])
        assert result.exit_code == 1
        assert "no PostgreSQL is running" in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
