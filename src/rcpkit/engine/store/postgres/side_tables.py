"""The knowledge components' tables in the record's PostgreSQL schema (§7.9, §7.17)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from ..side import Row, SideTables
from .connection import database_errors, refusing_a_full_disk
from .dialect import DIALECT

__all__ = ["PostgresSideTables"]


class PostgresSideTables(SideTables):
    """:class:`SideTables` on a connection of their own: SQLite's ``?`` placeholders become
    psycopg's ``%s``; a lost connection is replaced on the next statement."""

    ordinal = "ordinal"

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]]) -> None:
        self._connect = connect
        self._db = connect()
        self._lock = threading.RLock()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._db.broken or self._db.closed:
            self._db = self._connect()
        return self._db

    @database_errors
    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self._lock:
            return self._connection().execute(DIALECT.sql(sql), params).fetchall()

    @database_errors
    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self._lock:
            self._connection().execute(DIALECT.sql(sql), params)

    @database_errors
    def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self._lock, self._connection().cursor() as cursor:
            cursor.executemany(DIALECT.sql(sql), rows)

    @contextmanager
    def transaction(self) -> Iterator[SideTables]:
        with self._lock, refusing_a_full_disk(), self._connection().transaction():
            yield self

    def close(self) -> None:
        with self._lock:
            self._db.close()

