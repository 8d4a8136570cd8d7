"""The engine on PostgreSQL keeps the embedded engine's behaviour on the wire — the
same L2 certification by ``rcpkit check`` and the same FAQ quality floors."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from support.quality import assert_faq_quality
from support.schema import schema_cli_args

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]
HASHING = 'embedder = "hashing"\nhashing_dimension = 64\n'


def serve_argv(data: Path, dsn: str) -> list[str]:
    return [*RCPKIT, "serve", "--stdio", "--create", "--data", str(data), "--backend", "postgres",
            "--dsn", dsn]


def test_postgres_engine_certifies_l2_over_stdio(pg_dsn: str, tmp_path: Path) -> None:
    data = tmp_path / "kb"
    data.mkdir()
    (data / "rcpkit.toml").write_text(HASHING)
    run = subprocess.run([*RCPKIT, "check", "--json", "--timeout", "30", *schema_cli_args(), "--",
                          *serve_argv(data, pg_dsn)],
                         capture_output=True, text=True, timeout=600)
    report = json.loads(run.stdout)
    failed = [c for c in report["checks"] if c["outcome"] == "FAIL"]
    assert not failed, json.dumps(failed, indent=1)[:4000]
    assert report["certifiedLevel"] == "L2" and report["declarationHonest"] is True
    assert run.returncode == 0


@pytest.mark.slow
async def test_postgres_engine_meets_the_faq_quality_floors(pg_dsn: str, tmp_path: Path) -> None:
    await assert_faq_quality(shlex.join(serve_argv(tmp_path / "faq", pg_dsn)))
