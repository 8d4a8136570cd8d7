"""The PostgreSQL store records its schema version like the SQLite one; a database written
by a newer rcpkit is refused with the same error before anything in it changes."""

from __future__ import annotations

import psycopg
import pytest

from rcpkit.engine.store import StoreVersionError
from rcpkit.engine.store.postgres import SCHEMA_VERSION, PostgresStore


def recorded_version(dsn: str) -> str | None:
    with psycopg.connect(dsn) as db:
        row = db.execute("SELECT value FROM settings WHERE key = 'schema_version'").fetchone()
        return None if row is None else str(row[0])


def test_a_new_database_records_the_schema_version(pg_dsn: str) -> None:
    PostgresStore.open(pg_dsn).close()
    assert recorded_version(pg_dsn) == str(SCHEMA_VERSION)


def test_a_database_from_before_versions_opens_and_is_marked(pg_dsn: str) -> None:
    store = PostgresStore.open(pg_dsn)
    store.set_setting("embedder", "kept")
    store.close()
    with psycopg.connect(pg_dsn) as db:
        db.execute("DELETE FROM settings WHERE key = 'schema_version'")
    reopened = PostgresStore.open(pg_dsn)
    try:
        assert reopened.setting("embedder") == "kept"
    finally:
        reopened.close()
    assert recorded_version(pg_dsn) == str(SCHEMA_VERSION)


def test_a_newer_schema_is_refused_before_anything_changes(pg_dsn: str) -> None:
    PostgresStore.open(pg_dsn).close()
    with psycopg.connect(pg_dsn) as db:
        db.execute("UPDATE settings SET value = %s WHERE key = 'schema_version'",
                   (str(SCHEMA_VERSION + 1),))
        db.execute("DROP INDEX write_log_time")
        before = db.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = "
                            "current_schema()").fetchone()
    with pytest.raises(StoreVersionError, match="upgrade rcpkit"):
        PostgresStore.open(pg_dsn)
    with psycopg.connect(pg_dsn) as db:
        after = db.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = "
                           "current_schema()").fetchone()
    assert after == before  # not even the late indexes were created
    assert recorded_version(pg_dsn) == str(SCHEMA_VERSION + 1)
