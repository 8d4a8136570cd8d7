"""Two ``rcpkit serve --http`` processes on two copies of a root (two machines), counting
limits in one PostgreSQL database (``[limits_store] dsn``), grant a key its burst once,
with truthful ``Retry-After`` (§15.5)."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg
import pytest

from tenancy.test_shared_limits_wire import assert_one_burst_across, limited_root

pytestmark = pytest.mark.timeout(300)


def test_two_machines_sharing_a_database_admit_a_key_s_burst_once(
        tmp_path: Path, pg_dsn: str) -> None:
    first = tmp_path / "machine1"
    token = limited_root(first)
    (first / "rcpkit.toml").write_text(f"[limits_store]\ndsn = {pg_dsn!r}\n")
    second = tmp_path / "machine2"
    shutil.copytree(first, second)
    assert_one_burst_across([first, second], token)
    assert not (first / "limits.sqlite3").exists() and not (second / "limits.sqlite3").exists()
    with psycopg.connect(pg_dsn) as db:  # in the schema the DSN names, not in public
        schemas = db.execute("SELECT table_schema FROM information_schema.tables "
                             "WHERE table_name = 'rcpkit_buckets'").fetchall()
        assert db.execute("SELECT current_schema()").fetchone() in schemas
        assert ("public",) not in schemas
        assert db.execute("SELECT principal FROM rcpkit_buckets").fetchall() == [("alice",)]
