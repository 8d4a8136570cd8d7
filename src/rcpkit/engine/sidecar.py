"""Derived tables of the knowledge components (the concept graph, the memories), kept where
the record's backend keeps them: a SQLite file beside the engine's data, or tables in the
record's own PostgreSQL schema (``PostgresStore.side_tables``), so that every process on one
database shares them and every collection keeps its own.

:class:`SideTables` is the one interface both implement; a component writes its SQL once,
with ``?`` placeholders and the syntax SQLite and PostgreSQL share (``ON CONFLICT``), and
gets its tables from :func:`open_side_tables` with one schema per dialect.

The SQLite file uses WAL so several processes can share it, one writer at a time per process,
and write transactions taken up front (``BEGIN IMMEDIATE``) so two writers never deadlock on
an upgrade.
"""

from __future__ import annotations

import abc
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcpkit.files import private_dir, private_file

if TYPE_CHECKING:
    from rcpkit.engine.store import Store

__all__ = ["SideTables", "SidecarDatabase", "open_side_tables"]

Row = tuple[Any, ...]


class SideTables(abc.ABC):
    """Statements against the derived tables; :meth:`transaction` groups writes."""

    ordinal: str
    """A column of every table giving the insertion order of its rows."""

    @abc.abstractmethod
    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """The rows of one query, outside any transaction."""

    @abc.abstractmethod
    def transaction(self) -> AbstractContextManager[SideTables]:
        """A write transaction; the yielded tables run every statement inside it."""

    @abc.abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """One write (inside :meth:`transaction`)."""

    @abc.abstractmethod
    def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """One write per row (inside :meth:`transaction`)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection; the tables stay."""


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
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")


def open_side_tables(store: Store, path: Path, sqlite_schema: str,
                     postgres_schema: str) -> SideTables:
    """The tables in ``store``'s database when it keeps them, else in the file ``path``."""
    tables = store.side_tables(postgres_schema)
    return tables if tables is not None else SidecarDatabase(path, sqlite_schema)
