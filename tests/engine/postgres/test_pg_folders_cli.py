"""``rcpkit index|query|stats --backend postgres --dsn …`` write to and read from PostgreSQL
(never silently to an SQLite file in ``--data``), ``stats`` says which backend it read, and
``index add`` records the backend in ``--data``'s rcpkit.toml for the commands after it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RCPKIT, *args], capture_output=True, text=True, timeout=180)


def test_folder_indexed_into_postgres_from_the_cli(pg_dsn: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "rcpkit.toml").write_text('embedder = "hashing"\nhashing_dimension = 64\n')
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tides.txt").write_text("Tide tables predict high water at the harbour.")
    backend = ("--backend", "postgres", "--dsn", pg_dsn)
    added = _run("index", "add", str(docs), "--data", str(data), *backend)
    assert added.returncode == 0, added.stderr
    assert not (data / "store.sqlite3").exists()
    stats = _run("index", "stats", "--data", str(data), *backend)
    assert stats.returncode == 0, stats.stderr
    assert any(line.split()[:2] == ["backend", "postgres"] for line in stats.stdout.splitlines())
    assert any(line.split()[:2] == ["documents", "1"] for line in stats.stdout.splitlines())
    found = _run("query", "tide tables", "--data", str(data), "--mode", "sparse", *backend)
    assert found.returncode == 0 and "tides.txt#0" in found.stdout, found.stderr
    # The data directory now names its record: later commands need no flags (issue 33).
    recorded = (data / "rcpkit.toml").read_text()
    assert 'backend = "postgres"' in recorded and 'embedder = "hashing"' in recorded
    assert (data / "rcpkit.toml").stat().st_mode & 0o777 == 0o600
    stats = _run("index", "stats", "--data", str(data))
    assert stats.returncode == 0, stats.stderr
    assert any(line.split()[:2] == ["backend", "postgres"] for line in stats.stdout.splitlines())
    assert any(line.split()[:2] == ["documents", "1"] for line in stats.stdout.splitlines())
    found = _run("query", "tide tables", "--data", str(data), "--mode", "sparse")
    assert found.returncode == 0 and "tides.txt#0" in found.stdout, found.stderr
    assert not (data / "store.sqlite3").exists()
