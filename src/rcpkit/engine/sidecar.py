"""Derived tables of the knowledge components (the concept graph, the memories), kept where
the record's backend keeps them: a SQLite file beside the engine's data, or tables in the
record's own PostgreSQL schema (``PostgresStore.side_tables``), so that every process on one
database shares them and every collection keeps its own.

:class:`~rcpkit.engine.store.side.SideTables` is the one interface both implement; a
component gets its tables from :func:`open_side_tables` with one schema per dialect. This
module depends on the store package, never the reverse.

The SQLite file uses WAL so several processes can share it, one writer at a time per process,
and write transactions taken up front (``BEGIN IMMEDIATE``) so two writers never deadlock on
an upgrade.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rcpkit.engine.store.base import SideTableHost
from rcpkit.engine.store.side import Row, SideTables
from rcpkit.engine.store.sqlite import finish_transaction
from rcpkit.files import private_dir, private_file

__all__ = ["GRAPH_FILE", "MEMORY_FILE", "TREE_FILE", "SideTables", "SidecarDatabase",
           "open_side_tables"]

# The side files of a data directory (graph, memories, summary tree), named here rather than
# beside their code, so that tools that only copy or check files need not import the optional
# graph extra.
GRAPH_FILE = "graph.sqlite"
MEMORY_FILE = "memory.sqlite"
TREE_FILE = "tree.npz"


class SidecarDatabase(SideTables):
    """A derived SQLite file."""

    ordinal = "rowid"

    def __init__(self, path: Path, schema: str) -> None:
        private_file(private_dir(path.parent) / path.name)
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                                  timeout=30)
        self.lock = threading.RLock()
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(schema)

    def close(self) -> None:
        with self.lock:
            self.db.close()

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self.lock:
            return self.db.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self.lock:
            self.db.execute(sql, params)

    def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self.lock:
            self.db.executemany(sql, rows)

    @contextmanager
    def transaction(self) -> Iterator[SideTables]:
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self
            except BaseException as exc:
                finish_transaction(self.db, exc)
                raise
            finish_transaction(self.db, None)


def open_side_tables(store: SideTableHost, path: Path, sqlite_schema: str,
                     postgres_schema: str) -> SideTables:
    """The tables in ``store``'s database when it keeps them, else in the file ``path``."""
    tables = store.side_tables(postgres_schema)
    return tables if tables is not None else SidecarDatabase(path, sqlite_schema)
