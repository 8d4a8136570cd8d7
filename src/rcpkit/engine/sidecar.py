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
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcpkit.engine.errors import disk_full, is_disk_full
from rcpkit.files import private_dir, private_file

if TYPE_CHECKING:
    from rcpkit.engine.store import Store

__all__ = ["GRAPH_FILE", "MEMORY_FILE", "TREE_FILE", "SideTables", "SidecarDatabase",
           "finish_transaction", "open_side_tables"]

# The side files of a data directory (graph, memories, summary tree), named here rather than
# beside their code, so that tools that only copy or check files need not import the optional
# graph extra.
GRAPH_FILE = "graph.sqlite"
MEMORY_FILE = "memory.sqlite"
TREE_FILE = "tree.npz"

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
            except BaseException as exc:
                finish_transaction(self.db, exc)
                raise
            finish_transaction(self.db, None)


def finish_transaction(db: sqlite3.Connection, exc: object,
                       release: Callable[[], None] | None = None) -> None:
    """Commit (or, after ``exc``, roll back) the transaction open on ``db``, then
    ``release`` its lock if given. SQLite may roll a transaction back by itself when the disk fills
    (a failed ``COMMIT`` included), so there is only a rollback left to do while one is
    open; a write the full disk stopped raises :func:`~rcpkit.engine.errors.disk_full`."""
    failure = exc
    try:
        if exc is None:
            try:
                db.execute("COMMIT")
            except sqlite3.Error as failed:
                failure = failed
        if db.in_transaction:
            db.execute("ROLLBACK")
    finally:
        if release is not None:
            release()
    if isinstance(failure, BaseException) and is_disk_full(failure):
        raise disk_full() from failure
    if failure is not exc and isinstance(failure, BaseException):
        raise failure


def open_side_tables(store: Store, path: Path, sqlite_schema: str,
                     postgres_schema: str) -> SideTables:
    """The tables in ``store``'s database when it keeps them, else in the file ``path``."""
    tables = store.side_tables(postgres_schema)
    return tables if tables is not None else SidecarDatabase(path, sqlite_schema)
