"""The interface of the knowledge components' derived tables (the concept graph, the
memories): one SQL text per component, run wherever the record's backend keeps them — a
SQLite file beside the data (``rcpkit.engine.sidecar``) or the record's own PostgreSQL
schema (:meth:`~rcpkit.engine.store.base.SideTableHost.side_tables`).

A component writes its SQL once, with ``?`` placeholders and the syntax SQLite and
PostgreSQL share (``ON CONFLICT``). It lives in the store package, which imports nothing
of the components: they depend on the store, never the reverse.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["Row", "SideTables"]

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
