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
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rcpkit.engine.errors import Unavailable, disk_full, is_disk_full
from rcpkit.files import private_dir, private_file, sync_file

from .base import (
    DocumentWrite,
    RowBatch,
    RowIds,
    StoreCounts,
    StoreVersionError,
    indexed_text,
    refuse_newer_schema,
)
from .side import SideTables
from .sql import VISIBLE, Dialect, FilterLeaves, SqlStore, rowid_array

__all__ = ["SqliteStore", "copy_database", "finish_transaction"]

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
_CHUNK_TEXT = "COALESCE(c.text, substr(d.text, c.start + 1, c.end - c.start))"
"""A chunk's text: stored, or (NULL, layout 2) the document's ``text[start:end]`` — SQLite's
``substr`` counts characters as Python does."""
_CHUNK_COLUMNS = (f"c.chunk_id, c.doc_id, c.idx, c.start, c.end, {_CHUNK_TEXT}, c.context, "
                  "c.headings, d.meta, d.filter_meta")


def _json_path(name: str) -> str:
    # Bound as a parameter; names reach here only from the validated schema.
    return f'$."{name}"'


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


class _JsonLeaves(FilterLeaves):
    """§8 tests through SQLite's JSON functions; the path is bound as a parameter (names
    reach here only from the validated schema)."""

    def exists(self, field: str, params: list[Any]) -> str:
        params.append(_json_path(field))
        return "json_type(d.filter_meta, ?) IS NOT NULL"

    def equals(self, field: str, value: Any, params: list[Any]) -> str:
        params.extend((_json_path(field), value))
        return "EXISTS (SELECT 1 FROM json_each(d.filter_meta, ?) j WHERE j.value = ?)"

    def any_of(self, field: str, values: Sequence[Any], params: list[Any]) -> str:
        params.extend((_json_path(field), *values))
        return (f"EXISTS (SELECT 1 FROM json_each(d.filter_meta, ?) j "
                f"WHERE j.value IN ({','.join('?' * len(values))}))")

    def contains(self, field: str, value: Any, params: list[Any]) -> str:
        path = _json_path(field)
        params.extend((path, path, value, path, value))
        return ("CASE json_type(d.filter_meta, ?) WHEN 'array' THEN "
                "EXISTS (SELECT 1 FROM json_each(d.filter_meta, ?) j WHERE j.value = ?) "
                "ELSE instr(json_extract(d.filter_meta, ?), ?) > 0 END")

    def compare(self, field: str, operator: str, value: Any, params: list[Any]) -> str:
        path = _json_path(field)
        params.extend((path, path, value))
        return (f"json_type(d.filter_meta, ?) IN ('integer', 'real') "
                f"AND json_extract(d.filter_meta, ?) {operator} ?")

DIALECT = Dialect(placeholder="?", true="1", false="0", greatest="max", index_hints=True,
                  list_parameters=False, encode_ids=json.dumps, decode_ids=json.loads,
                  load_json=json.loads, leaves=_JsonLeaves())


class SqliteStore(SqlStore):
    """:class:`Store` in one SQLite file (``<data_dir>/store.sqlite3``)."""

    FILE_NAME = "store.sqlite3"
    dialect = DIALECT
    chunk_columns = _CHUNK_COLUMNS
    chunk_tables = ("vectors",)

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
        self._unreadable = set()
        settings = dict(self._writer.execute("SELECT key, value FROM settings").fetchall())
        if "database_id" not in settings:
            settings = {"database_id": secrets.token_hex(8), "secret": secrets.token_hex(32),
                        "seq": "0", "gc_floor": "0"}
            with self._transaction() as db:
                db.executemany("INSERT INTO settings(key, value) VALUES (?, ?)",
                               settings.items())
        self._database_id = settings["database_id"]
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

    def _transaction(self, *, versioned: bool = True) -> _Transaction:
        """``BEGIN IMMEDIATE`` takes the database's one write lock: every transaction is
        versioned."""
        return _Transaction(self._writer, self._writer_lock)

    def _execute_many(self, db: sqlite3.Connection, sql: str,
                      rows: Iterable[Sequence[Any]]) -> None:
        db.executemany(sql, rows)

    def close(self) -> None:
        with self._readers_lock:
            for db in self._readers:
                db.close()
            self._readers.clear()
        self._writer.close()

    def side_tables(self, schema: str) -> SideTables | None:
        """None: the side tables are files beside this one (``rcpkit.engine.sidecar``)."""
        return None

    def change_marks(self) -> tuple[int, int]:
        """Read again only when a commit happened since this thread last read them: SQLite's
        ``data_version`` moves when any other connection (the writer, another process)
        commits, and reading it touches no table."""
        db = self._reader()
        version = db.execute("PRAGMA data_version").fetchone()[0]
        known: tuple[int, tuple[int, int]] | None = getattr(self._local, "marks", None)
        if known is not None and known[0] == version:
            return known[1]
        marks = self._read_marks(db)
        self._local.marks = version, marks
        return marks

    # ── writes ──────────────────────────────────────────────────────────────

    def _stored_hash(self, content_hash: str) -> str | bytes:
        """How ``content_hash`` is kept: its bytes when it is hexadecimal (layout 3), else
        the text (read back as text by the shared path)."""
        if self._raw_hashes and _HEX.fullmatch(content_hash):
            return bytes.fromhex(content_hash)
        return content_hash

    def _insert(self, db: sqlite3.Connection, docs: Sequence[DocumentWrite],
                seq: int) -> tuple[list[int], int]:
        """Row by row (SQLite inserts are cheap in one transaction), each vector in the
        layout's precision; no length statistics are kept here."""
        rowids: list[int] = []
        for doc in docs:
            cursor = db.execute(
                "INSERT INTO documents(doc_id, text, meta, filter_meta, content_hash, "
                "added_seq) VALUES (?, ?, ?, ?, ?, ?)",
                (doc.doc_id, doc.text, json.dumps(dict(doc.meta)),
                 json.dumps(dict(doc.filter_meta)), self._stored_hash(doc.content_hash), seq))
            doc_row = cursor.lastrowid
            # SQLite's substr stops at a NUL character, so such a text is stored whole.
            sliceable = self._layout >= 2 and "\x00" not in doc.text
            for chunk in doc.chunks:
                text = None if sliceable and chunk.text == doc.text[chunk.start:chunk.end] \
                    else chunk.text
                cursor = db.execute(
                    "INSERT INTO chunks(doc_row, doc_id, idx, start, end, text, context, "
                    "headings, added_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (doc_row, doc.doc_id, chunk.index, chunk.start, chunk.end, text,
                     chunk.context, json.dumps(list(chunk.headings)), seq))
                rowid = int(cursor.lastrowid or 0)
                db.execute("INSERT INTO vectors(chunk_id, vector) VALUES (?, ?)",
                           (rowid, np.asarray(chunk.vector, dtype=self._vector_dtype).tobytes()))
                rowids.append(rowid)
        return rowids, 0

    def _next_log_position(self, db: sqlite3.Connection) -> None:
        return None  # AUTOINCREMENT: never reused, even after pruning

    # ── derived-index support ──────────────────────────────────────────────

    def log_position(self) -> int:
        # The AUTOINCREMENT counter, not MAX(pos): pruning may have emptied the log.
        row = self._reader().execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'write_log'").fetchone()
        return 0 if row is None else int(row[0])

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
            ids = rowid_array(rows)
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

    def counts(self) -> StoreCounts:
        db = self._reader()
        seq = int(self._setting(db, "seq"))
        documents = db.execute("SELECT COUNT(*) FROM documents WHERE deleted_seq IS NULL"
                               ).fetchone()[0]
        chunks = db.execute("SELECT COUNT(*) FROM chunks c WHERE " + VISIBLE,
                            (seq, seq)).fetchone()[0]
        stored = db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        size = sum(os.path.getsize(p) for p in (self._path, Path(f"{self._path}-wal"))
                   if p.exists())
        return StoreCounts(documents=int(documents), chunks=int(chunks),
                           stored_rows=int(stored), bytes_on_disk=size)


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


def finish_transaction(db: sqlite3.Connection, exc: object,
                       release: Callable[[], None] | None = None) -> None:
    """Commit (or, after ``exc``, roll back) the transaction open on ``db``, then
    ``release`` its lock if given. SQLite may roll a transaction back by itself when the disk
    fills (a failed ``COMMIT`` included), so there is only a rollback left to do while one is
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
