"""``rcpkit index|query|stats --backend postgres --dsn …`` write to and read from PostgreSQL
(never silently to an SQLite file in ``--data``), and ``stats`` says which backend it read."""

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
    # The same data directory without the flags is an SQLite index that does not exist yet.
    sqlite = _run("index", "stats", "--data", str(data))
    assert sqlite.returncode == 0 and "sqlite" in sqlite.stdout
    assert any(line.split()[:2] == ["documents", "0"] for line in sqlite.stdout.splitlines())
