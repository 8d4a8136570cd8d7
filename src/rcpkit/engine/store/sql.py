"""The one write path of the SQL stores (SQLite and PostgreSQL), over a small :class:`Dialect`.

Both backends keep the same tables under the same names (``settings``, ``documents``,
``chunks``, ``write_log``, ``field_schema``, ``idempotency``, ``feedback``) and the same MVCC
rule (§7.7.1): a chunk is visible at ``v`` while ``added_seq <= v < deleted_seq``. So every
decision is made here once — which documents a write changes, the version it allocates, the
log row and idempotency key it leaves (§7.10), the collection floor and what it drops, the
bookkeeping retention, the write-log folding of :meth:`delta_since`, the reads of snapshots,
settings and feedback — in SQL written once with ``?`` placeholders and the syntax both
databases share (``ON CONFLICT``, ``CAST``).

What differs is the dialect (placeholders, the boolean literal, SQLite's index hints, how an
id list and a JSON value are stored, the §8 filter leaf) and a few backend steps: the
transaction and its lock (``BEGIN IMMEDIATE`` / a row lock on ``seq``), how a document's
rows are inserted (row by row with a vectors table / binary ``COPY`` with postings), where a
log position comes from (``AUTOINCREMENT`` / a counter row), and the statistics PostgreSQL
keeps per version for BM25.
"""

from __future__ import annotations

import abc
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from rcpkit.engine.errors import Unavailable
from rcpkit.protocol.filters import Condition, FilterNode

from .base import (
    ChunkRecord,
    DocumentWrite,
    FeedbackRecord,
    IndexDelta,
    RowIds,
    Store,
    WriteOutcome,
    compile_filter,
)

__all__ = ["VISIBLE", "Dialect", "FilterLeaves", "SqlStore", "fold_log", "rowid_array"]

logger = logging.getLogger("rcpkit.engine")

Connection = Any
"""An open DB-API connection of the backend (``sqlite3`` or ``psycopg``): ``execute`` returns
a cursor in both."""
VISIBLE = "c.added_seq <= ? AND (c.deleted_seq IS NULL OR c.deleted_seq > ?)"
"""Visibility of chunk ``c`` at a version (bound twice), §7.7.1."""


class FilterLeaves(abc.ABC):
    """How one database tests a field of a document's ``filter_meta`` (``d``), each test in
    the driver's own placeholders with its values appended to the bound parameters, never
    written into the text (§15.4). :meth:`Dialect.compile` does the rest of §8 once."""

    @abc.abstractmethod
    def exists(self, field: str, params: list[Any]) -> str:
        """The document has ``field``."""

    @abc.abstractmethod
    def equals(self, field: str, value: Any, params: list[Any]) -> str:
        """``field`` is ``value``, or an array holding it (never NULL)."""

    @abc.abstractmethod
    def any_of(self, field: str, values: Sequence[Any], params: list[Any]) -> str:
        """``field`` equals one of ``values`` (not empty), as :meth:`equals`."""

    @abc.abstractmethod
    def contains(self, field: str, value: Any, params: list[Any]) -> str:
        """Element membership for an array, case-sensitive substring for a string."""

    @abc.abstractmethod
    def compare(self, field: str, operator: str, value: Any, params: list[Any]) -> str:
        """``field`` is a number and ``field operator value`` holds."""


_COMPARISONS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


@dataclass(frozen=True, slots=True)
class Dialect:
    """What one database spells differently."""

    placeholder: str
    """The driver's parameter mark; statements here are written with ``?``."""
    true: str
    """The literal a boolean column compares with (a partial index matches it as written)."""
    false: str
    greatest: str
    """The two-argument maximum function."""
    index_hints: bool
    """Whether ``INDEXED BY`` is understood (SQLite), for where the planner chooses badly."""
    list_parameters: bool
    """Whether a whole list binds to one parameter (``= ANY(%s)``); else ``IN (?, …)``."""
    encode_ids: Callable[[list[int]], Any]
    decode_ids: Callable[[Any], Iterable[int]]
    """A stored write-log id list, written and read (JSON text / ``bigint[]``)."""
    load_json: Callable[[Any], Any]
    """A stored JSON value as Python (parsed from text / already decoded by the driver)."""
    leaves: FilterLeaves

    def sql(self, text: str) -> str:
        """``text`` with the driver's placeholders."""
        return text if self.placeholder == "?" else text.replace("?", self.placeholder)

    def indexed(self, table: str, index: str) -> str:
        """``table``, told to use ``index`` where the dialect takes hints."""
        return f"{table} INDEXED BY {index}" if self.index_hints else table

    def members(self, column: str, values: Sequence[Any]) -> Iterator[tuple[str, list[Any]]]:
        """``column`` among ``values`` as ``(condition, params)`` in as few statements as
        the dialect allows (none for no values)."""
        if not values:
            return
        if self.list_parameters:
            yield f"{column} = ANY({self.placeholder})", [list(values)]
            return
        for start in range(0, len(values), 500):
            part = list(values[start:start + 500])
            yield f"{column} IN ({','.join('?' * len(part))})", part

    def compile(self, node: FilterNode, known: Mapping[str, str], params: list[Any]) -> str:
        """A validated §8 tree as one boolean SQL expression over ``d.filter_meta``; field
        names come from the stored schema ``known``."""
        return compile_filter(node, lambda condition: self._condition(condition, known, params))

    def _condition(self, cond: Condition, known: Mapping[str, str], params: list[Any]) -> str:
        if cond.field not in known:
            # The validator only admits advertised fields; an unknown one matches nothing.
            return self.false
        field, op, value = cond.field, cond.op, cond.value
        if op == "exists":
            test = self.leaves.exists(field, params)
            return test if value else f"NOT ({test})"
        if op in ("eq", "ne"):
            # ne is the negation of eq, so a document without the field matches ne.
            test = self.leaves.equals(field, value, params)
            return test if op == "eq" else f"NOT ({test})"
        if op in ("in", "nin"):
            if not value:
                return self.false if op == "in" else self.true
            test = self.leaves.any_of(field, value, params)
            return test if op == "in" else f"NOT ({test})"
        if op == "contains":
            return self.leaves.contains(field, value, params)
        return self.leaves.compare(field, _COMPARISONS[op], value, params)


def rowid_array(rows: Sequence[Any]) -> RowIds:
    """The first column of ``rows`` as rowids."""
    return np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))


def fold_log(position: int, rows: Iterable[tuple[Any, Any, Any]],
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


def _hash_text(stored: str | bytes) -> str:
    """A stored content hash as the text it was written from (SQLite layout 3 keeps a
    hexadecimal one as its bytes)."""
    return stored.hex() if isinstance(stored, bytes) else stored


def _json_value(stored: Any) -> Any:
    return orjson.loads(stored) if isinstance(stored, str | bytes) else stored


class SqlStore(Store):
    """A :class:`Store` over SQL tables; a backend supplies its :attr:`dialect`, its
    connections and the steps named in the module docstring. ``_database_id`` and
    ``_secret`` are read from ``settings`` when it opens."""

    dialect: Dialect
    chunk_columns: str
    """The :class:`ChunkRecord` fields of chunk ``c`` and document ``d``, in order."""
    chunk_tables: tuple[str, ...]
    """Tables keyed by ``chunk_id`` dropped with their chunks."""

    _database_id: str
    _secret: bytes
    _unreadable: set[int]
    """Rows already reported by :meth:`chunks` (reported once each)."""

    # ── backend steps ──

    @abc.abstractmethod
    def _reader(self) -> Connection:
        """This thread's connection for reads."""

    @abc.abstractmethod
    def _transaction(self, *, versioned: bool = True) -> AbstractContextManager[Connection]:
        """One write transaction; a ``versioned`` one (it may create a version or collect
        old ones) excludes every other such transaction on the record, in every process."""

    @abc.abstractmethod
    def _execute_many(self, db: Connection, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """``sql`` once per row of ``rows``."""

    @abc.abstractmethod
    def _insert(self, db: Connection, docs: Sequence[DocumentWrite],
                seq: int) -> tuple[list[int], int]:
        """Insert new document versions with their chunks at ``seq``; returns the new chunk
        rowids, ascending, and their total indexed length where the backend keeps it."""

    @abc.abstractmethod
    def _next_log_position(self, db: Connection) -> int | None:
        """The position of the next write-log row (None: the table assigns it)."""

    def _version_created(self, db: Connection, seq: int, added: int, added_length: int) -> None:
        """Bookkeeping of a new version (the write's rows are in place)."""

    def _floor_raised(self, db: Connection, floor: int) -> None:
        """Bookkeeping of versions below ``floor`` being collected."""

    def _written(self, added_rows: int) -> None:
        """After a write committed ``added_rows`` chunks."""

    # ── identity and settings ──

    @property
    def database_id(self) -> str:
        return self._database_id

    @property
    def secret(self) -> bytes:
        return self._secret

    def _setting(self, db: Connection, key: str) -> str:
        row = db.execute(self.dialect.sql("SELECT value FROM settings WHERE key = ?"),
                         (key,)).fetchone()
        if row is None:
            raise Unavailable(f"store setting {key!r} is missing")
        return str(row[0])

    def _set(self, db: Connection, key: str, value: object) -> None:
        db.execute(self.dialect.sql("UPDATE settings SET value = ? WHERE key = ?"),
                   (str(value), key))

    def setting(self, key: str) -> str | None:
        row = self._reader().execute(self.dialect.sql(
            "SELECT value FROM settings WHERE key = ?"), (f"engine.{key}",)).fetchone()
        return None if row is None else str(row[0])

    def set_setting(self, key: str, value: str) -> None:
        with self._transaction(versioned=False) as db:
            db.execute(self.dialect.sql(
                "INSERT INTO settings(key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value"),
                (f"engine.{key}", value))

    def current_seq(self) -> int:
        return int(self._setting(self._reader(), "seq"))

    def gc_floor(self) -> int:
        return int(self._setting(self._reader(), "gc_floor"))

    def _read_marks(self, db: Connection) -> tuple[int, int]:
        row = db.execute("SELECT CAST((SELECT value FROM settings WHERE key = 'seq') AS BIGINT), "
                         "(SELECT COALESCE(MAX(id), 0) FROM feedback)").fetchone()
        if row is None or row[0] is None:
            raise Unavailable("store setting 'seq' is missing")
        return int(row[0]), int(row[1])

    def change_marks(self) -> tuple[int, int]:
        return self._read_marks(self._reader())

    # ── writes ──

    def _live_column(self, db: Connection, doc_ids: Sequence[str],
                     column: str) -> list[tuple[str, Any]]:
        found: list[tuple[str, Any]] = []
        # Named where the dialect takes hints: SQLite's planner otherwise scans every live
        # row through documents_deleted (deleted_seq IS NULL), 80x slower at 100k documents.
        table = self.dialect.indexed("documents", "documents_live")
        for member, params in self.dialect.members("doc_id", doc_ids):
            found.extend(db.execute(self.dialect.sql(
                f"SELECT doc_id, {column} FROM {table} WHERE deleted_seq IS NULL AND {member}"),
                params).fetchall())
        return found

    def live_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return {str(doc_id): _hash_text(stored)
                for doc_id, stored in self._live_column(self._reader(), doc_ids, "content_hash")}

    def live_meta(self, doc_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        return {str(doc_id): dict(self.dialect.load_json(meta))
                for doc_id, meta in self._live_column(self._reader(), doc_ids, "meta")}

    def write(self, upserts: Sequence[DocumentWrite], deletes: Sequence[str], *,
              new_fields: Mapping[str, str] | None = None,
              idempotency_key: str | None = None,
              reply: Mapping[str, Any] | None = None,
              now: float | None = None) -> WriteOutcome:
        at = time.time() if now is None else now
        with self._transaction() as db:
            seq = int(self._setting(db, "seq")) + 1
            live = {doc_id: _hash_text(stored) for doc_id, stored in self._live_column(
                db, [doc.doc_id for doc in upserts] + list(deletes), "content_hash")}
            # Apply the batch in order to a model of the live set (upserts, then deletes):
            # a version superseded within the batch would never be visible, so it is not
            # written at all.
            current = dict(live)
            pending: dict[str, DocumentWrite] = {}
            changed: list[str] = []
            for doc in upserts:
                if current.get(doc.doc_id) == doc.content_hash:
                    continue
                pending.pop(doc.doc_id, None)
                pending[doc.doc_id] = doc
                current[doc.doc_id] = doc.content_hash
                changed.append(doc.doc_id)
            deleted = 0
            for doc_id in deletes:
                if current.pop(doc_id, None) is not None:
                    pending.pop(doc_id, None)
                    deleted += 1
                    changed.append(doc_id)
            self._retire(db, [doc_id for doc_id in live
                              if doc_id in pending or doc_id not in current], seq)
            added, added_length = self._insert(db, list(pending.values()), seq)
            if new_fields:
                self._execute_many(db, self.dialect.sql(
                    "INSERT INTO field_schema(name, type) VALUES (?, ?) ON CONFLICT DO NOTHING"),
                    list(new_fields.items()))
            if changed:
                self._set(db, "seq", seq)
                self._version_created(db, seq, len(added), added_length)
                self._log(db, seq, "write", at, changed, added, [])
            else:
                seq -= 1
            if idempotency_key is not None and reply is not None:
                db.execute(self.dialect.sql(
                    "INSERT INTO idempotency(key, reply, seq, at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET reply = excluded.reply, "
                    "seq = excluded.seq, at = excluded.at"),
                    (idempotency_key, json.dumps(dict(reply)), seq, at))
        self._written(len(added))
        return WriteOutcome(seq=seq, added_rowids=added, changed_ids=changed, deleted=deleted)

    def _retire(self, db: Connection, doc_ids: Sequence[str], seq: int) -> None:
        """Mark the live versions of ``doc_ids`` and their chunks deleted at ``seq``."""
        live = self.dialect.indexed("documents", "documents_live")
        for member, params in self.dialect.members("doc_id", doc_ids):
            db.execute(self.dialect.sql(
                f"UPDATE chunks SET deleted_seq = ? WHERE doc_row IN "
                f"(SELECT row FROM {live} WHERE deleted_seq IS NULL AND {member})"),
                [seq, *params])
            db.execute(self.dialect.sql(
                f"UPDATE {live} SET deleted_seq = ? WHERE deleted_seq IS NULL AND {member}"),
                [seq, *params])

    def _log(self, db: Connection, seq: int, kind: str, at: float,
             doc_ids: list[str], added: list[int], removed: list[int]) -> None:
        """Append to the write log (positions in commit order: under the write lock)."""
        db.execute(self.dialect.sql(
            "INSERT INTO write_log(pos, seq, kind, at, doc_ids, added, removed) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)"),
            (self._next_log_position(db), seq, kind, at, json.dumps(doc_ids),
             self.dialect.encode_ids(added), self.dialect.encode_ids(removed)))

    def idempotent_reply(self, key: str, *,
                         not_before: float = 0.0) -> tuple[dict[str, Any], int] | None:
        row = self._reader().execute(self.dialect.sql(
            "SELECT reply, seq FROM idempotency WHERE key = ? AND at >= ?"),
            (key, not_before)).fetchone()
        return None if row is None else (dict(self.dialect.load_json(row[0])), int(row[1]))

    @staticmethod
    def _new_gc_floor(seq: int, floor: int, keep_versions: int,
                      oldest_recent_write: int | None) -> int:
        """The collection floor: version ``v`` is kept while it is one of the last
        ``keep_versions`` or the write that superseded it (``v + 1``) is recent; the floor
        never goes down."""
        by_time = seq if oldest_recent_write is None else oldest_recent_write - 1
        return max(floor, min(seq - keep_versions, by_time), 0)

    def collect_garbage(self, keep_versions: int, keep_seconds: float, now: float) -> list[int]:
        sql = self.dialect.sql
        with self._transaction() as db:
            seq = int(self._setting(db, "seq"))
            floor = int(self._setting(db, "gc_floor"))
            # Version v is superseded by write v+1; keep it while that write is recent.
            recent = db.execute(sql("SELECT MIN(seq) FROM write_log "
                                    "WHERE kind = 'write' AND at >= ?"),
                                (now - keep_seconds,)).fetchone()[0]
            new_floor = self._new_gc_floor(seq, floor, keep_versions,
                                           None if recent is None else int(recent))
            if new_floor == floor:
                return []
            doomed = [int(r[0]) for r in db.execute(sql(
                "SELECT chunk_id FROM chunks WHERE deleted_seq <= ? ORDER BY chunk_id"),
                (new_floor,))]
            for table in self.chunk_tables:
                db.execute(sql(f"DELETE FROM {table} WHERE chunk_id IN "
                               "(SELECT chunk_id FROM chunks WHERE deleted_seq <= ?)"),
                           (new_floor,))
            db.execute(sql("DELETE FROM chunks WHERE deleted_seq <= ?"), (new_floor,))
            db.execute(sql("DELETE FROM documents WHERE deleted_seq <= ?"), (new_floor,))
            self._floor_raised(db, new_floor)
            self._set(db, "gc_floor", new_floor)
            if doomed:
                self._log(db, seq, "gc", now, [], [], doomed)
        return doomed

    def prune_bookkeeping(self, *, log_up_to: int | None, log_before: float,
                          keys_before: float) -> tuple[int, int]:
        # Not versioned: pruning allocates no version, so writers are not held up; the
        # floor row orders concurrent pruners and the maximum keeps it monotonic.
        sql = self.dialect.sql
        bound, params = ("", [log_before]) if log_up_to is None else \
            (" AND pos <= ?", [log_before, log_up_to])
        log = self.dialect.indexed("write_log", "write_log_time")
        with self._transaction(versioned=False) as db:
            newest = db.execute(sql(f"SELECT MAX(pos) FROM {log} WHERE at < ?{bound}"),
                                params).fetchone()[0]
            log_rows = 0
            if newest is not None:
                log_rows = db.execute(sql("DELETE FROM write_log WHERE pos <= ? AND at < ?"),
                                      (newest, log_before)).rowcount
                db.execute(sql(
                    "INSERT INTO settings(key, value) VALUES ('log_floor', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = CAST("
                    f"{self.dialect.greatest}(CAST(settings.value AS BIGINT), "
                    "CAST(excluded.value AS BIGINT)) AS TEXT)"), (str(newest),))
            keys = db.execute(sql("DELETE FROM idempotency WHERE at < ?"),
                              (keys_before,)).rowcount
        return log_rows, keys

    # ── derived-index support ──

    def _log_floor(self, db: Connection) -> int:
        row = db.execute("SELECT value FROM settings WHERE key = 'log_floor'").fetchone()
        return 0 if row is None else int(row[0])

    def delta_since(self, position: int) -> IndexDelta | None:
        db = self._reader()
        delta = fold_log(position, db.execute(self.dialect.sql(
            "SELECT pos, added, removed FROM write_log WHERE pos > ? ORDER BY pos"),
            (position,)), self.dialect.decode_ids)
        # Read after the rows: the floor only grows, so a floor still at or below
        # ``position`` now was so while they were read, and none of them was missing.
        return None if self._log_floor(db) > position else delta

    def log_floor(self) -> int:
        return self._log_floor(self._reader())

    # ── reads ──

    def visible_rowids(self, seq: int) -> RowIds:
        return rowid_array(self._reader().execute(self.dialect.sql(
            f"SELECT c.chunk_id FROM chunks c WHERE {VISIBLE} ORDER BY c.chunk_id"),
            (seq, seq)).fetchall())

    def hidden_rowids(self, seq: int) -> RowIds:
        return rowid_array(self._reader().execute(self.dialect.sql(
            "SELECT chunk_id FROM chunks WHERE added_seq > ? "
            "UNION ALL SELECT chunk_id FROM chunks WHERE deleted_seq <= ?"),
            (seq, seq)).fetchall())

    def filter_rowids(self, node: FilterNode, seq: int) -> RowIds:
        params: list[Any] = [seq, seq]
        clause = self.dialect.compile(node, self.field_types(), params)
        return rowid_array(self._reader().execute(self.dialect.sql(
            f"SELECT c.chunk_id FROM chunks c JOIN documents d ON d.row = c.doc_row "
            f"WHERE {VISIBLE}") + f" AND ({clause}) ORDER BY c.chunk_id", params).fetchall())

    def chunks(self, rowids: Sequence[int]) -> dict[int, ChunkRecord]:
        """Rows whose stored JSON is unreadable (a lone surrogate, written before the wire
        refused them, §4.6) are skipped with a warning, so such a store still opens."""
        db = self._reader()
        records: dict[int, ChunkRecord] = {}
        for member, params in self.dialect.members("c.chunk_id", [int(r) for r in rowids]):
            for row in db.execute(self.dialect.sql(
                    f"SELECT {self.chunk_columns} FROM chunks c JOIN documents d "
                    f"ON d.row = c.doc_row WHERE {member}"), params):
                try:
                    headings, meta, filter_meta = (_json_value(row[7]), _json_value(row[8]),
                                                   _json_value(row[9]))
                except orjson.JSONDecodeError:
                    self._report_unreadable(int(row[0]), row[1])
                    continue
                records[int(row[0])] = ChunkRecord(
                    rowid=int(row[0]), doc_id=row[1], index=int(row[2]), start=int(row[3]),
                    end=int(row[4]), text=row[5], context=row[6],
                    headings=tuple(headings), meta=meta, filter_meta=filter_meta)
        return records

    def _report_unreadable(self, rowid: int, doc_id: str) -> None:
        if rowid not in self._unreadable:
            self._unreadable.add(rowid)
            logger.warning("skipping chunk %d of document %r: its stored metadata is not "
                           "valid Unicode; re-add or delete the document", rowid, doc_id)

    def field_types(self) -> dict[str, str]:
        return {str(name): str(ftype) for name, ftype in
                self._reader().execute("SELECT name, type FROM field_schema").fetchall()}

    # ── feedback (§7.16) ──

    def record_feedback(self, records: Sequence[FeedbackRecord]) -> int:
        now = time.time()
        with self._transaction(versioned=False) as db:
            self._execute_many(db, self.dialect.sql(
                "INSERT INTO feedback(at, session_id, query, hit_id, doc_id, used, cited, "
                "helpful, reward, poison_suspected, injection_suspected) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                [(now, r.session_id, r.query, r.hit_id, r.doc_id, r.used, r.cited, r.helpful,
                  r.reward, r.poison_suspected, r.injection_suspected) for r in records])
        return len(records)

    def feedback_position(self) -> int:
        row = self._reader().execute("SELECT COALESCE(MAX(id), 0) FROM feedback").fetchone()
        return int(row[0]) if row else 0

    def poison_counts(self, up_to: int) -> dict[str, int]:
        return {str(doc_id): int(n) for doc_id, n in self._reader().execute(self.dialect.sql(
            f"SELECT doc_id, COUNT(*) FROM feedback WHERE poison_suspected = {self.dialect.true} "
            "AND id <= ? GROUP BY doc_id"), (up_to,))}

    def poison_clears(self, up_to: int) -> dict[str, int]:
        return {str(label): int(mark) for label, mark in self._reader().execute(self.dialect.sql(
            "SELECT hit_id, MAX(id) FROM feedback WHERE doc_id = '' AND id <= ? "
            "GROUP BY hit_id"), (up_to,))}

