"""What the SQL backends share (SQLite and PostgreSQL): the record's identity, the
write-log folding of :meth:`Store.delta_since`, and the §7.7.1 retention arithmetic of
:meth:`Store.collect_garbage`. Each backend keeps its own SQL (placeholders, locking and
column types differ); the decisions made on what that SQL returns are made here once."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .base import IndexDelta, Store

__all__ = ["SqlStore"]


class SqlStore(Store):
    """Base of the SQL stores: ``_database_id`` and ``_secret`` are set by the backend from
    its ``settings`` table when it opens."""

    _database_id: str
    _secret: bytes

    @property
    def database_id(self) -> str:
        return self._database_id

    @property
    def secret(self) -> bytes:
        return self._secret

    @staticmethod
    def _new_gc_floor(seq: int, floor: int, keep_versions: int,
                      oldest_recent_write: int | None) -> int:
        """The collection floor: version ``v`` is kept while it is one of the last
        ``keep_versions`` or the write that superseded it (``v + 1``) is recent; the floor
        never goes down."""
        by_time = seq if oldest_recent_write is None else oldest_recent_write - 1
        return max(floor, min(seq - keep_versions, by_time), 0)

    @staticmethod
    def _fold_log(position: int, rows: Iterable[tuple[Any, Any, Any]],
                  ids: Callable[[Any], Iterable[int]]) -> IndexDelta:
        """The net delta of write-log ``rows`` ``(pos, added, removed)`` after ``position``,
        in order; ``ids`` reads a stored id list."""
        added: set[int] = set()
        removed: set[int] = set()
        last = position
        for pos, added_ids, removed_ids in rows:
            added.update(ids(added_ids))
            removed.update(ids(removed_ids))
            last = int(pos)
        return IndexDelta(position=last, added=sorted(added - removed),
                          removed=sorted(removed - added))
