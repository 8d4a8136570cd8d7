"""Embedded system of record on stdlib ``sqlite3`` (WAL, ``synchronous=FULL``, one writer).

A write commits before it is acknowledged, so after a crash every acknowledged
document is present and no half-written one is (§7.10, §13.1). Filters are
compiled to SQL with bound parameters only (§15.4).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from rcpkit.engine.errors import Unavailable
from rcpkit.engine.sidecar import finish_transaction
from rcpkit.files import private_dir, private_file, sync_file
from rcpkit.protocol.filters import Condition, FilterNode

from .base import (
    ChunkRecord,
    DocumentWrite,
    FeedbackRecord,
    IndexDelta,
    RowBatch,
    RowIds,
    StoreCounts,
    StoreVersionError,
    WriteOutcome,
    compile_filter,
    indexed_text,
    refuse_newer_schema,
)
from .sql import SqlStore

__all__ = ["SqliteStore", "copy_database"]

logger = logging.getLogger("rcpkit.engine")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    row INTEGER PRIMARY KEY AUTOINCREMENT,
    doc_id TEXT NOT NULL,
    text TEXT NOT NULL,
    meta TEXT NOT NULL,
    filter_meta TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    added_seq INTEGER NOT NULL,
    deleted_seq INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS documents_live ON documents(doc_id) WHERE deleted_seq IS NULL;
CREATE INDEX IF NOT EXISTS documents_deleted ON documents(deleted_seq);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id INTEGER PRIMARY KEY AUTOINCREMENT,
    doc_row INTEGER NOT NULL REFERENCES documents(row),
    doc_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    text TEXT,
    context TEXT NOT NULL,
    headings TEXT NOT NULL,
    added_seq INTEGER NOT NULL,
    deleted_seq INTEGER
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc_row);
CREATE INDEX IF NOT EXISTS chunks_added ON chunks(added_seq);
CREATE INDEX IF NOT EXISTS chunks_deleted ON chunks(deleted_seq);
CREATE TABLE IF NOT EXISTS vectors (
    chunk_id INTEGER PRIMARY KEY REFERENCES chunks(chunk_id),
    vector BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS write_log (
    pos INTEGER PRIMARY KEY AUTOINCREMENT,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    at REAL NOT NULL,
    doc_ids TEXT NOT NULL,
    added TEXT NOT NULL,
    removed TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS write_log_at ON write_log(kind, at);
CREATE INDEX IF NOT EXISTS write_log_time ON write_log(at);
CREATE TABLE IF NOT EXISTS field_schema (name TEXT PRIMARY KEY, type TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY, reply TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idempotency_time ON idempotency(at);
CREATE TABLE IF NOT EXISTS feedback (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    session_id TEXT,
    query TEXT,
    hit_id TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    used INTEGER,
    cited INTEGER,
    helpful INTEGER,
    reward REAL,
    poison_suspected INTEGER,
    injection_suspected INTEGER
);
CREATE INDEX IF NOT EXISTS feedback_poison ON feedback(doc_id) WHERE poison_suspected = 1;
"""

_SCHEMA_OBJECTS = tuple(re.findall(r"IF NOT EXISTS (\w+)", _SCHEMA))
"""The tables and indexes ``_SCHEMA`` creates where they are missing."""
_VISIBLE = "c.added_seq <= ? AND (c.deleted_seq IS NULL OR c.deleted_seq > ?)"
_CHUNK_TEXT = "COALESCE(c.text, substr(d.text, c.start + 1, c.end - c.start))"
"""A chunk's text: stored, or (NULL, layout 2) the document's ``text[start:end]`` — SQLite's
``substr`` counts characters as Python does."""
_CHUNK_COLUMNS = (f"c.chunk_id, c.doc_id, c.idx, c.start, c.end, {_CHUNK_TEXT}, c.context, "
                  "c.headings, d.meta, d.filter_meta")


def _json_path(name: str) -> str:
    # Bound as a parameter; names reach here only from the validated schema.
    return f'$."{name}"'


def _hash_text(stored: str | bytes) -> str:
    """A stored content hash as the text it was written from."""
    return stored.hex() if isinstance(stored, bytes) else stored


def _rowid_array(rows: Sequence[tuple[int, ...]] | list[Any]) -> RowIds:
    return np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))


SCHEMA_VERSION = 3
"""The layout of ``_SCHEMA``, kept in SQLite's ``user_version`` header field; bump it whenever
the tables or their encodings change. Layout 1 keeps vectors as float32 and every chunk's
text; layout 2 keeps vectors as float16 and no chunk text that is a slice of its document's;
layout 3 (new stores) also keeps a hexadecimal content hash as its raw bytes (a BLOB: 32
bytes for SHA-256 instead of 64 characters). A store keeps the layout it was created with:
one written by an older rcpkit opens, is written and answers as before."""
BUSY_TIMEOUT_S = 30.0
"""How long a connection waits for a lock another process holds (SQLite's busy timeout): in
WAL only writers wait, one write transaction at a time, so this bounds one process's wait
behind the writes of all the others."""
_HEX = re.compile(r"(?:[0-9a-f]{2})+")
"""Lowercase hexadecimal of whole bytes: what ``bytes.hex`` gives back unchanged."""


class SqliteStore(SqlStore):
    """:class:`Store` in one SQLite file (``<data_dir>/store.sqlite3``)."""

    FILE_NAME = "store.sqlite3"

    def __init__(self, path: Path) -> None:
        self._path = path
        private_file(private_dir(path.parent) / path.name)
        self._writer = self._connect()
        self._writer_lock = threading.Lock()
        recorded = self._schema_version()
        fresh = recorded == 0 and self._writer.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'documents'").fetchone() is None
        self._layout = SCHEMA_VERSION if fresh else max(recorded, 1)
        if not fresh:
            self._keep_before_upgrade(recorded)
        self._writer.executescript(_SCHEMA)
        if recorded < self._layout:
            self._writer.execute(f"PRAGMA user_version = {self._layout}")
        self._vector_dtype = np.float16 if self._layout >= 2 else np.float32
        self._raw_hashes = self._layout >= 3
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._unreadable: set[int] = set()
        """Rows already reported by :meth:`chunks` (reported once each)."""
        settings = dict(self._writer.execute("SELECT key, value FROM settings").fetchall())
        if "database_id" not in settings:
            settings = {"database_id": secrets.token_hex(8), "secret": secrets.token_hex(32),
                        "seq": "0", "gc_floor": "0"}
            with self._transaction() as db:
                db.executemany("INSERT INTO settings(key, value) VALUES (?, ?)",
                               settings.items())
        self._database_id: str = settings["database_id"]
        self._secret = bytes.fromhex(settings["secret"])

    def _schema_version(self) -> int:
        """The recorded schema version. A newer one than this code's is refused before the
        tables are touched; a store from before versions were recorded reads 0 and has the
        layout-1 tables."""
        found = int(self._writer.execute("PRAGMA user_version").fetchone()[0])
        try:
            refuse_newer_schema(found, SCHEMA_VERSION, str(self._path))
        except StoreVersionError:
            self._writer.close()
            raise
        return found

    def _keep_before_upgrade(self, recorded: int) -> None:
        """Copy an existing store aside before this open changes its schema (a table or
        index to add, or the version mark of a store from before versions were recorded):
        an upgrade never rewrites a store without a copy of what it was."""
        present = {row[0] for row in self._writer.execute("SELECT name FROM sqlite_master")}
        if recorded >= self._layout and set(_SCHEMA_OBJECTS) <= present:
            return
        target = self._path.with_name(f"{self._path.name}.pre-upgrade-v{recorded}")
        if target.exists():
            target = target.with_name(f"{target.name}-{time.strftime('%Y%m%dT%H%M%S')}")
        copy_database(self._path, target)
        logger.warning("%s is upgraded in place (schema version %d to %d); a copy of it as "
                       "it was is kept in %s", self._path, recorded, self._layout, target)

    @classmethod
    def open(cls, data_dir: str | Path) -> SqliteStore:
        """Open (creating if needed) the store under ``data_dir``; a file that is not an
        SQLite database, or a damaged one, is :class:`Unavailable` saying so."""
        path = Path(data_dir) / cls.FILE_NAME
        try:
            return cls(path)
        except sqlite3.DatabaseError as exc:
            raise Unavailable(f"{path} is not a readable SQLite database ({exc}); "
                                     "restore it from a backup or move it aside") from None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False,
                             timeout=BUSY_TIMEOUT_S)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=ON")
        return db

    def _reader(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._connect()
            db.execute("PRAGMA query_only=ON")
            self._local.db = db
            with self._readers_lock:
                self._readers.append(db)
        return db

    def _transaction(self) -> _Transaction:
        return _Transaction(self._writer, self._writer_lock)

    def close(self) -> None:
        with self._readers_lock:
            for db in self._readers:
                db.close()
            self._readers.clear()
        self._writer.close()

    def _setting(self, db: sqlite3.Connection, key: str) -> str:
        row = db.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return str(row[0])

    def setting(self, key: str) -> str | None:
        row = self._reader().execute("SELECT value FROM settings WHERE key = ?",
                                     (f"engine.{key}",)).fetchone()
        return None if row is None else str(row[0])

    def set_setting(self, key: str, value: str) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO settings(key, value) VALUES (?, ?)",
                       (f"engine.{key}", value))

    def current_seq(self) -> int:
        return int(self._setting(self._reader(), "seq"))

    def gc_floor(self) -> int:
        return int(self._setting(self._reader(), "gc_floor"))

    def change_marks(self) -> tuple[int, int]:
        """Read again only when a commit happened since this thread last read them: SQLite's
        ``data_version`` moves when any other connection (the writer, another process)
        commits, and reading it touches no table."""
        db = self._reader()
        version = db.execute("PRAGMA data_version").fetchone()[0]
        known: tuple[int, tuple[int, int]] | None = getattr(self._local, "marks", None)
        if known is not None and known[0] == version:
            return known[1]
        seq, feedback = db.execute(
            "SELECT (SELECT value FROM settings WHERE key = 'seq'), "
            "(SELECT COALESCE(MAX(id), 0) FROM feedback)").fetchone()
        marks = int(seq), int(feedback)
        self._local.marks = version, marks
        return marks

    # ── writes ──────────────────────────────────────────────────────────────

    def live_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return {doc_id: _hash_text(stored)
                for doc_id, stored in self._live_column(doc_ids, "content_hash")}

    def _stored_hash(self, content_hash: str) -> str | bytes:
        """How ``content_hash`` is kept: its bytes when it is hexadecimal (layout 3), else
        the text (:func:`_hash_text` reads either back)."""
        if self._raw_hashes and _HEX.fullmatch(content_hash):
            return bytes.fromhex(content_hash)
        return content_hash

    def live_meta(self, doc_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        return {doc_id: json.loads(meta) for doc_id, meta in self._live_column(doc_ids, "meta")}

    def _live_column(self, doc_ids: Sequence[str], column: str) -> list[tuple[str, str]]:
        db = self._reader()
        found: list[tuple[str, str]] = []
        for start in range(0, len(doc_ids), 500):
            part = list(doc_ids[start:start + 500])
            marks = ",".join("?" * len(part))
            # Named, because the planner otherwise scans every live row through
            # documents_deleted (deleted_seq IS NULL): 80x slower at 100k documents.
            found.extend(db.execute(
                f"SELECT doc_id, {column} FROM documents INDEXED BY documents_live "
                f"WHERE deleted_seq IS NULL AND doc_id IN ({marks})", part).fetchall())
        return found

    def write(self, upserts: Sequence[DocumentWrite], deletes: Sequence[str], *,
              new_fields: Mapping[str, str] | None = None,
              idempotency_key: str | None = None,
              reply: Mapping[str, Any] | None = None,
              now: float | None = None) -> WriteOutcome:
        at = time.time() if now is None else now
        with self._transaction() as db:
            seq = int(self._setting(db, "seq")) + 1
            added: list[int] = []
            changed: list[str] = []
            deleted = 0
            for doc in upserts:
                live = db.execute("SELECT content_hash FROM documents "
                                  "WHERE doc_id = ? AND deleted_seq IS NULL",
                                  (doc.doc_id,)).fetchone()
                if live is not None and _hash_text(live[0]) == doc.content_hash:
                    continue
                self._retire(db, doc.doc_id, seq)
                added.extend(self._insert(db, doc, seq))
                changed.append(doc.doc_id)
            for doc_id in deletes:
                if self._retire(db, doc_id, seq):
                    deleted += 1
                    changed.append(doc_id)
            if new_fields:
                db.executemany("INSERT OR IGNORE INTO field_schema(name, type) VALUES (?, ?)",
                               new_fields.items())
            if changed:
                db.execute("UPDATE settings SET value = ? WHERE key = 'seq'", (str(seq),))
                db.execute("INSERT INTO write_log(seq, kind, at, doc_ids, added, removed) "
                           "VALUES (?, 'write', ?, ?, ?, '[]')",
                           (seq, at, json.dumps(changed), json.dumps(added)))
            else:
                seq -= 1
            if idempotency_key is not None and reply is not None:
                db.execute("INSERT OR REPLACE INTO idempotency(key, reply, seq, at) "
                           "VALUES (?, ?, ?, ?)",
                           (idempotency_key, json.dumps(dict(reply)), seq, at))
        return WriteOutcome(seq=seq, added_rowids=added, changed_ids=changed, deleted=deleted)

    @staticmethod
    def _retire(db: sqlite3.Connection, doc_id: str, seq: int) -> bool:
        row = db.execute("SELECT row FROM documents WHERE doc_id = ? AND deleted_seq IS NULL",
                         (doc_id,)).fetchone()
        if row is None:
            return False
        db.execute("UPDATE documents SET deleted_seq = ? WHERE row = ?", (seq, row[0]))
        db.execute("UPDATE chunks SET deleted_seq = ? WHERE doc_row = ?", (seq, row[0]))
        return True

    def _insert(self, db: sqlite3.Connection, doc: DocumentWrite, seq: int) -> list[int]:
        cursor = db.execute(
            "INSERT INTO documents(doc_id, text, meta, filter_meta, content_hash, added_seq) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (doc.doc_id, doc.text, json.dumps(dict(doc.meta)), json.dumps(dict(doc.filter_meta)),
             self._stored_hash(doc.content_hash), seq))
        doc_row = cursor.lastrowid
        # SQLite's substr stops at a NUL character, so such a text is stored whole.
        sliceable = self._layout >= 2 and "\x00" not in doc.text
        rowids: list[int] = []
        for chunk in doc.chunks:
            text = None if sliceable and chunk.text == doc.text[chunk.start:chunk.end] \
                else chunk.text
            cursor = db.execute(
                "INSERT INTO chunks(doc_row, doc_id, idx, start, end, text, context, headings, "
                "added_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (doc_row, doc.doc_id, chunk.index, chunk.start, chunk.end, text,
                 chunk.context, json.dumps(list(chunk.headings)), seq))
            rowid = int(cursor.lastrowid or 0)
            db.execute("INSERT INTO vectors(chunk_id, vector) VALUES (?, ?)",
                       (rowid, np.asarray(chunk.vector, dtype=self._vector_dtype).tobytes()))
            rowids.append(rowid)
        return rowids

    def idempotent_reply(self, key: str, *,
                         not_before: float = 0.0) -> tuple[dict[str, Any], int] | None:
        row = self._reader().execute("SELECT reply, seq FROM idempotency "
                                     "WHERE key = ? AND at >= ?", (key, not_before)).fetchone()
        return None if row is None else (json.loads(row[0]), int(row[1]))

    def collect_garbage(self, keep_versions: int, keep_seconds: float, now: float) -> list[int]:
        with self._transaction() as db:
            seq = int(self._setting(db, "seq"))
            floor = int(self._setting(db, "gc_floor"))
            # Version v is superseded by write v+1; keep it while that write is recent.
            recent = db.execute("SELECT MIN(seq) FROM write_log WHERE kind = 'write' AND at >= ?",
                                (now - keep_seconds,)).fetchone()[0]
            new_floor = self._new_gc_floor(seq, floor, keep_versions,
                                           None if recent is None else int(recent))
            if new_floor == floor:
                return []
            doomed = [int(r[0]) for r in db.execute(
                "SELECT chunk_id FROM chunks WHERE deleted_seq <= ?", (new_floor,))]
            db.execute("DELETE FROM vectors WHERE chunk_id IN "
                       "(SELECT chunk_id FROM chunks WHERE deleted_seq <= ?)", (new_floor,))
            db.execute("DELETE FROM chunks WHERE deleted_seq <= ?", (new_floor,))
            db.execute("DELETE FROM documents WHERE deleted_seq <= ?", (new_floor,))
            db.execute("UPDATE settings SET value = ? WHERE key = 'gc_floor'", (str(new_floor),))
            if doomed:
                db.execute("INSERT INTO write_log(seq, kind, at, doc_ids, added, removed) "
                           "VALUES (?, 'gc', ?, '[]', '[]', ?)",
                           (seq, now, json.dumps(doomed)))
        return doomed

    # ── derived-index support ──────────────────────────────────────────────

    def log_position(self) -> int:
        # The AUTOINCREMENT counter, not MAX(pos): pruning may have emptied the log.
        row = self._reader().execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'write_log'").fetchone()
        return 0 if row is None else int(row[0])

    def delta_since(self, position: int) -> IndexDelta | None:
        db = self._reader()
        delta = self._fold_log(position, db.execute(
            "SELECT pos, added, removed FROM write_log WHERE pos > ? ORDER BY pos",
            (position,)), json.loads)
        # Read after the rows: the floor only grows, so a floor still at or below
        # ``position`` now was so while they were read, and none of them was missing.
        return None if _log_floor(db) > position else delta

    def log_floor(self) -> int:
        return _log_floor(self._reader())

    def prune_bookkeeping(self, *, log_up_to: int | None, log_before: float,
                          keys_before: float) -> tuple[int, int]:
        bound, params = ("", [log_before]) if log_up_to is None else \
            (" AND pos <= ?", [log_before, log_up_to])
        with self._transaction() as db:
            newest = db.execute(f"SELECT MAX(pos) FROM write_log INDEXED BY write_log_time "
                                f"WHERE at < ?{bound}", params).fetchone()[0]
            log_rows = 0
            if newest is not None:
                log_rows = db.execute("DELETE FROM write_log WHERE pos <= ? AND at < ?",
                                      (newest, log_before)).rowcount
                if newest > _log_floor(db):
                    db.execute("INSERT OR REPLACE INTO settings(key, value) "
                               "VALUES ('log_floor', ?)", (str(newest),))
            keys = db.execute("DELETE FROM idempotency WHERE at < ?", (keys_before,)).rowcount
        return log_rows, keys

    def iter_rows(self, rowids: Sequence[int] | None = None,
                  batch_size: int = 512) -> Iterator[RowBatch]:
        db = self._reader()
        select = (f"SELECT c.chunk_id, c.context, {_CHUNK_TEXT}, v.vector FROM chunks c "
                  "JOIN documents d ON d.row = c.doc_row JOIN vectors v ON v.chunk_id = c.chunk_id")
        if rowids is None:
            cursor = db.execute(f"{select} ORDER BY c.chunk_id")
            while rows := cursor.fetchmany(batch_size):
                yield self._row_batch(rows)
            return
        ids = [int(r) for r in rowids]
        for start in range(0, len(ids), batch_size):
            part = ids[start:start + batch_size]
            rows = db.execute(f"{select} WHERE c.chunk_id IN ({','.join('?' * len(part))}) "
                              "ORDER BY c.chunk_id", part).fetchall()
            if rows:
                yield self._row_batch(rows)

    def stored_vectors(self, rowids: RowIds) -> tuple[RowIds, npt.NDArray[np.float32]]:
        """One pass over the vectors table, keeping the rows asked for (a saved dense index
        covers most rows: a scan beats lookups). Decoded a batch at a time into one matrix:
        a blob object per row for all rows at once would stay in the heap after they go."""
        wanted = np.unique(np.asarray(rowids, dtype=np.int64))
        if len(wanted) == 0:
            return wanted, np.zeros((0, 0), dtype=np.float32)
        found: list[RowIds] = []
        matrix = np.zeros((0, 0), dtype=np.float32)
        filled = 0
        cursor = self._reader().execute("SELECT chunk_id, vector FROM vectors ORDER BY chunk_id")
        while rows := cursor.fetchmany(256):
            ids = _rowid_array(rows)
            keep = wanted[np.minimum(np.searchsorted(wanted, ids), len(wanted) - 1)] == ids
            if not keep.any():
                continue
            block = self._decode_vectors(
                [row[1] for row, kept in zip(rows, keep.tolist(), strict=True) if kept])
            if filled == 0:
                matrix = np.empty((len(wanted), block.shape[1]), dtype=np.float32)
            matrix[filled:filled + len(block)] = block
            filled += len(block)
            found.append(ids[keep])
        return (np.concatenate(found) if found else np.zeros(0, dtype=np.int64),
                matrix[:filled])

    def _decode_vectors(self, blobs: list[bytes]) -> npt.NDArray[np.float32]:
        """Stored vector blobs (all of one dimension) as a float32 ``(n, d)`` matrix."""
        if not blobs:
            return np.zeros((0, 0), dtype=np.float32)
        flat = np.frombuffer(b"".join(blobs), dtype=self._vector_dtype)
        return flat.reshape(len(blobs), -1).astype(np.float32)

    def _row_batch(self, rows: list[Any]) -> RowBatch:
        return RowBatch(rowids=[int(r[0]) for r in rows],
                        texts=[indexed_text(r[1], r[2]) for r in rows],
                        vectors=self._decode_vectors([r[3] for r in rows]))

    # ── reads ──────────────────────────────────────────────────────────────

    def visible_rowids(self, seq: int) -> RowIds:
        rows = self._reader().execute(
            f"SELECT c.chunk_id FROM chunks c WHERE {_VISIBLE} ORDER BY c.chunk_id",
            (seq, seq)).fetchall()
        return _rowid_array(rows)

    def hidden_rowids(self, seq: int) -> RowIds:
        rows = self._reader().execute(
            "SELECT chunk_id FROM chunks WHERE added_seq > ? "
            "UNION ALL SELECT chunk_id FROM chunks WHERE deleted_seq <= ?",
            (seq, seq)).fetchall()
        return _rowid_array(rows)

    def filter_rowids(self, node: FilterNode, seq: int) -> RowIds:
        known = self.field_types()
        params: list[Any] = [seq, seq]
        clause = _compile(node, known, params)
        rows = self._reader().execute(
            f"SELECT c.chunk_id FROM chunks c JOIN documents d ON d.row = c.doc_row "
            f"WHERE {_VISIBLE} AND ({clause}) ORDER BY c.chunk_id", params).fetchall()
        return _rowid_array(rows)

    def chunks(self, rowids: Sequence[int]) -> dict[int, ChunkRecord]:
        """Rows whose stored JSON is unreadable (a lone surrogate, written before the wire
        refused them, §4.6) are skipped with a warning, so such a store still opens."""
        db = self._reader()
        records: dict[int, ChunkRecord] = {}
        ids = [int(r) for r in rowids]
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            for row in db.execute(
                    f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN documents d "
                    f"ON d.row = c.doc_row WHERE c.chunk_id IN ({','.join('?' * len(part))})",
                    part):
                try:
                    headings, meta, filter_meta = (orjson.loads(row[7]), orjson.loads(row[8]),
                                                   orjson.loads(row[9]))
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
        return dict(self._reader().execute("SELECT name, type FROM field_schema").fetchall())

    def counts(self) -> StoreCounts:
        db = self._reader()
        seq = int(self._setting(db, "seq"))
        documents = db.execute("SELECT COUNT(*) FROM documents WHERE deleted_seq IS NULL"
                               ).fetchone()[0]
        chunks = db.execute("SELECT COUNT(*) FROM chunks c WHERE " + _VISIBLE,
                            (seq, seq)).fetchone()[0]
        stored = db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        size = sum(os.path.getsize(p) for p in (self._path, Path(f"{self._path}-wal"))
                   if p.exists())
        return StoreCounts(documents=int(documents), chunks=int(chunks),
                           stored_rows=int(stored), bytes_on_disk=size)

    # ── feedback ───────────────────────────────────────────────────────────

    def record_feedback(self, records: Sequence[FeedbackRecord]) -> int:
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                "INSERT INTO feedback(at, session_id, query, hit_id, doc_id, used, cited, "
                "helpful, reward, poison_suspected, injection_suspected) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(now, r.session_id, r.query, r.hit_id, r.doc_id, r.used, r.cited, r.helpful,
                  r.reward, r.poison_suspected, r.injection_suspected) for r in records])
        return len(records)

    def feedback_position(self) -> int:
        return int(self._reader().execute("SELECT COALESCE(MAX(id), 0) FROM feedback"
                                          ).fetchone()[0])

    def poison_counts(self, up_to: int) -> dict[str, int]:
        return {doc_id: int(n) for doc_id, n in self._reader().execute(
            "SELECT doc_id, COUNT(*) FROM feedback WHERE poison_suspected = 1 AND id <= ? "
            "GROUP BY doc_id", (up_to,))}

    def poison_clears(self, up_to: int) -> dict[str, int]:
        return {label: int(mark) for label, mark in self._reader().execute(
            "SELECT hit_id, MAX(id) FROM feedback WHERE doc_id = '' AND id <= ? "
            "GROUP BY hit_id", (up_to,))}


def copy_database(source: Path, target: Path) -> None:
    """One committed snapshot of the SQLite database ``source`` in the new private file
    ``target`` (the backup API in a single step: a concurrent commit cannot tear it; WAL
    lets writers go on meanwhile), flushed to disk."""
    if target.exists():
        raise FileExistsError(target)
    private_file(private_dir(target.parent) / target.name)
    reading = sqlite3.connect(source, timeout=30.0)
    writing = sqlite3.connect(target)
    try:
        reading.backup(writing, pages=-1)
        writing.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
    finally:
        writing.close()
        reading.close()
    sync_file(target)


def _log_floor(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT value FROM settings WHERE key = 'log_floor'").fetchone()
    return 0 if row is None else int(row[0])


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (or ``ROLLBACK`` on error) on the one writer
    connection, which threads take turns to use."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self._db = db
        self._lock = lock

    def __enter__(self) -> sqlite3.Connection:
        self._lock.acquire()
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self._lock.release()
            if isinstance(exc, sqlite3.OperationalError) and \
                    getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY:
                raise Unavailable(f"the store is busy: another process held its write lock "
                                  f"for {BUSY_TIMEOUT_S:g} s; nothing was written, retry",
                                  detail="busy") from exc
            raise
        return self._db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        finish_transaction(self._db, exc, self._lock.release)


# ── §8 filter compilation (bound parameters only, §15.4) ───────────────────

def _compile(node: FilterNode, known: Mapping[str, str], params: list[Any]) -> str:
    return compile_filter(node, lambda condition: _condition(condition, known, params))


def _condition(cond: Condition, known: Mapping[str, str], params: list[Any]) -> str:
    if cond.field not in known:
        # The validator only admits advertised fields; an unknown one matches nothing.
        return "0"
    path = _json_path(cond.field)
    op, value = cond.op, cond.value
    if op == "exists":
        params.append(path)
        return "json_type(d.filter_meta, ?) IS NOT NULL" if value else \
            "json_type(d.filter_meta, ?) IS NULL"
    if op in ("eq", "ne"):
        params.extend((path, value))
        member = "EXISTS (SELECT 1 FROM json_each(d.filter_meta, ?) j WHERE j.value = ?)"
        # ne is the negation of eq, so a document without the field matches ne.
        return member if op == "eq" else f"NOT {member}"
    if op in ("in", "nin"):
        if not value:
            return "0" if op == "in" else "1"
        params.append(path)
        params.extend(value)
        member = (f"EXISTS (SELECT 1 FROM json_each(d.filter_meta, ?) j "
                  f"WHERE j.value IN ({','.join('?' * len(value))}))")
        return member if op == "in" else f"NOT {member}"
    if op == "contains":
        # Element membership for array values, case-sensitive substring for strings (§8).
        params.extend((path, path, value, path, value))
        return ("CASE json_type(d.filter_meta, ?) WHEN 'array' THEN "
                "EXISTS (SELECT 1 FROM json_each(d.filter_meta, ?) j WHERE j.value = ?) "
                "ELSE instr(json_extract(d.filter_meta, ?), ?) > 0 END")
    comparison = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[op]
    params.extend((path, path, value))
    return (f"json_type(d.filter_meta, ?) IN ('integer', 'real') "
            f"AND json_extract(d.filter_meta, ?) {comparison} ?")
