"""PostgreSQL + pgvector system of record, shareable by several engine processes.

Same contract as the embedded backend (:class:`~rcpkit.engine.store.base.Store`): MVCC
versions via ``added_seq``/``deleted_seq`` (§7.7.1), each write one committed transaction
(§7.10, §7.11), §8 filters compiled to SQL with bound parameters only (§15.4).

Several processes may write to one database: a write takes the row lock on the ``seq``
setting (``SELECT … FOR UPDATE``), so versions and write-log positions are allocated in
commit order, without gaps. Every read goes to the database, so a write through one
process is visible through every other as soon as it commits.

Besides the derived-index support of the interface, the store searches in the database
(:class:`DatabaseSearch`): dense by pgvector HNSW (cosine) and lexical by BM25 computed
from postings and per-version statistics kept in tables, both at a snapshot and under a
filter (§7.7, §8). ``eq``/``in`` compile to containment over a GIN ``jsonb_path_ops`` index
on ``filter_meta``, so a selective filter finds its documents without scanning the others,
and dense search under it is an exact scan of just those rows.
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar, cast

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format
from psycopg.types import TypeInfo

from rcpkit.engine.errors import Unavailable, disk_full
from rcpkit.engine.sidecar import SideTables
from rcpkit.engine.text import Analyzer
from rcpkit.protocol.filters import Condition, FilterNode

from .base import (
    ChunkRecord,
    DatabaseSearch,
    DocumentWrite,
    FeedbackRecord,
    IndexDelta,
    RowBatch,
    RowIds,
    ScoredRows,
    StoreCounts,
    WriteOutcome,
    compile_filter,
    indexed_text,
    refuse_newer_schema,
)
from .sql import SqlStore

__all__ = ["SCHEMA_VERSION", "DatabaseSearch", "LexicalRanking", "PostgresStore"]

SCHEMA_VERSION = 1
"""The layout of ``_SCHEMA``, kept in ``settings.schema_version``; bump it (with a migration
of older databases) whenever the tables change."""

LexicalRanking = Literal["bm25", "tsvector"]

_TABLES = ("settings", "documents", "chunks", "postings", "versions", "write_log",
           "field_schema", "idempotency", "feedback")

_TS_CONFIG = "english"
_SCHEMA = f"""
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE settings (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE documents (
    row bigserial PRIMARY KEY,
    doc_id text NOT NULL,
    text text NOT NULL,
    meta jsonb NOT NULL,
    filter_meta jsonb NOT NULL,
    content_hash text NOT NULL,
    added_seq bigint NOT NULL,
    deleted_seq bigint
);
CREATE UNIQUE INDEX documents_live ON documents(doc_id) WHERE deleted_seq IS NULL;
CREATE INDEX documents_deleted ON documents(deleted_seq);
CREATE TABLE chunks (
    chunk_id bigserial PRIMARY KEY,
    doc_row bigint NOT NULL REFERENCES documents(row),
    doc_id text NOT NULL,
    idx integer NOT NULL,
    start_offset integer NOT NULL,
    end_offset integer NOT NULL,
    text text NOT NULL,
    context text NOT NULL,
    headings jsonb NOT NULL,
    added_seq bigint NOT NULL,
    deleted_seq bigint,
    length integer NOT NULL,
    embedding vector NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('{_TS_CONFIG}', context || ' ' || text)) STORED
);
CREATE INDEX chunks_doc ON chunks(doc_row);
CREATE INDEX chunks_deleted ON chunks(deleted_seq);
CREATE INDEX chunks_tsv ON chunks USING gin (tsv);
CREATE TABLE postings (
    term text NOT NULL,
    chunk_id bigint NOT NULL REFERENCES chunks(chunk_id),
    tf integer NOT NULL,
    PRIMARY KEY (term, chunk_id)
);
CREATE INDEX postings_chunk ON postings(chunk_id);
CREATE TABLE versions (
    seq bigint PRIMARY KEY, chunks bigint NOT NULL, total_length bigint NOT NULL
);
CREATE TABLE write_log (
    pos bigint PRIMARY KEY,
    seq bigint NOT NULL,
    kind text NOT NULL,
    at double precision NOT NULL,
    doc_ids jsonb NOT NULL,
    added bigint[] NOT NULL,
    removed bigint[] NOT NULL
);
CREATE INDEX write_log_at ON write_log(kind, at);
CREATE TABLE field_schema (name text PRIMARY KEY, type text NOT NULL);
CREATE TABLE idempotency (
    key text PRIMARY KEY, reply jsonb NOT NULL, seq bigint NOT NULL, at double precision NOT NULL
);
CREATE TABLE feedback (
    id bigserial PRIMARY KEY,
    at double precision NOT NULL,
    session_id text,
    query text,
    hit_id text NOT NULL,
    doc_id text NOT NULL,
    used boolean,
    cited boolean,
    helpful boolean,
    reward double precision,
    poison_suspected boolean,
    injection_suspected boolean
);
CREATE INDEX feedback_poison ON feedback(doc_id) WHERE poison_suspected;
"""
# Indexes added after the first schema: created with a new database, and on opening one
# made before them. The bookkeeping-retention pair; then the filter index, which lets the
# containment form of ``eq``/``in`` (§8) find a selective filter's documents directly. No
# pending list (``fastupdate``): every search would scan it until a vacuum, 3 ms instead of
# 0.05 ms at 20k documents.
_LATE_INDEXES = (
    ("write_log_time", "CREATE INDEX write_log_time ON write_log(at)"),
    ("idempotency_time", "CREATE INDEX idempotency_time ON idempotency(at)"),
    ("documents_filter", "CREATE INDEX documents_filter ON documents "
                         "USING gin (filter_meta jsonb_path_ops) WITH (fastupdate = off)"),
)

_VISIBLE = "c.added_seq <= %s AND (c.deleted_seq IS NULL OR c.deleted_seq > %s)"
_CHUNK_COLUMNS = ("c.chunk_id, c.doc_id, c.idx, c.start_offset, c.end_offset, c.text, "
                  "c.context, c.headings, d.meta, d.filter_meta")
_ANALYZE_MIN_ROWS = 1000
"""Chunks a process adds (and at least a fifth of those it has seen) before it refreshes the
planner statistics itself."""
_BM25_K1 = 1.2
_BM25_B = 0.75
# BM25 as the embedded LexicalIndex computes it: N, average length and document frequencies
# are those of the snapshot ``seq``, the query weight of a term is its count in the query.
_BM25_SQL = """
WITH q AS (SELECT term, weight FROM unnest(%s::text[], %s::int[]) AS u(term, weight)),
v AS (SELECT chunks AS n, total_length::float8 / GREATEST(chunks, 1) AS avgdl
      FROM versions WHERE seq = %s),
hits AS MATERIALIZED (
    SELECT p.term, p.chunk_id, p.tf, c.length, c.doc_row FROM postings p JOIN q USING (term)
    JOIN chunks c ON c.chunk_id = p.chunk_id
    WHERE c.added_seq <= %s AND (c.deleted_seq IS NULL OR c.deleted_seq > %s)),
idf AS (SELECT h.term, q.weight * ln(1 + (v.n - COUNT(*) + 0.5) / (COUNT(*) + 0.5)) AS w
        FROM hits h JOIN q USING (term) CROSS JOIN v GROUP BY h.term, q.weight, v.n)
SELECT h.chunk_id, SUM(idf.w * h.tf / (h.tf + %s * (1 - %s + %s * h.length / v.avgdl)))
FROM hits h JOIN idf USING (term) CROSS JOIN v
{where}
GROUP BY h.chunk_id ORDER BY 2 DESC, 1 LIMIT %s
"""
# A fixed key for the advisory lock that serialises schema creation across processes.
_SCHEMA_LOCK = 0x72_63_70_6B_69_74


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _database_errors(method: _Method) -> _Method:
    """Report a lost or failing database as ``Unavailable`` (§12), never as a raw
    driver error; the broken connection is replaced on the next call."""

    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except psycopg.OperationalError as exc:
            raise Unavailable(f"PostgreSQL is unavailable: {exc}") from exc

    return cast(_Method, guarded)


class _VectorDumper(Dumper):
    """numpy float32 array → pgvector binary (``uint16 dim, uint16 0, float4[dim]`` BE)."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        values = np.ascontiguousarray(obj, dtype=">f4")
        return struct.pack(">HH", len(values), 0) + values.tobytes()


class _VectorLoader(Loader):
    """pgvector binary → numpy float32 array."""

    format = Format.BINARY

    def load(self, data: Any) -> npt.NDArray[np.float32]:
        dimension = struct.unpack_from(">H", data)[0]
        return np.frombuffer(bytes(data), dtype=">f4", count=dimension,
                             offset=4).astype(np.float32)


class PostgresStore(SqlStore):
    """:class:`Store` in one PostgreSQL database with the pgvector extension.

    ``lexical`` picks the ranking of :meth:`lexical_search`: ``"bm25"`` (postings and
    per-version statistics in tables, the analyzer of the embedded index) or
    ``"tsvector"`` (PostgreSQL full-text ``ts_rank``); see docs/postgres.md. Dense search
    is exact when at most ``exact_filtered`` chunks are eligible: below that, scanning the
    filtered rows is faster than an HNSW walk that skips almost every node (the default is
    the measured crossover, docs/postgres.md), and exact.
    """

    def __init__(self, dsn: str, *, lexical: LexicalRanking = "bm25",
                 analyzer: Analyzer | None = None, exact_filtered: int = 5000) -> None:
        self._dsn = dsn
        self._lexical = lexical
        self._exact_filtered = exact_filtered
        self._analyzer = analyzer or Analyzer()
        self._local = threading.local()
        self._connections: list[psycopg.Connection[Any]] = []
        self._connections_lock = threading.Lock()
        self._writer_lock = threading.Lock()
        self._analyzed_rows = 0
        self._unanalyzed_rows = 0
        try:
            self._create_schema()
            self._writer = self._connect()
            self._database_id = self._setting(self._writer, "database_id")
            self._secret = bytes.fromhex(self._setting(self._writer, "secret"))
        except psycopg.Error as exc:  # e.g. no right to create the vector extension
            raise Unavailable(f"cannot use this PostgreSQL database: {exc}") from exc

    def _create_schema(self) -> None:
        """Create the tables on a new database (one process at a time)."""
        with self._connect() as setup, setup.transaction():
            setup.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            # DDL only on a new database: even "IF NOT EXISTS" locks tables writers use.
            if not _relation_exists(setup, "versions"):
                setup.execute(_SCHEMA)
                setup.execute(
                    "INSERT INTO settings(key, value) VALUES ('database_id', %s), "
                    "('secret', %s), ('seq', '0'), ('gc_floor', '0'), ('log_pos', '0'), "
                    "('schema_version', %s)",
                    (secrets.token_hex(8), secrets.token_hex(32), str(SCHEMA_VERSION)))
                setup.execute("INSERT INTO versions(seq, chunks, total_length) VALUES (0, 0, 0)")
            else:
                self._check_schema_version(setup)
            for name, ddl in _LATE_INDEXES:
                if not _relation_exists(setup, name):
                    setup.execute(ddl)

    def _check_schema_version(self, db: psycopg.Connection[Any]) -> None:
        """Refuse a database with a newer layout before anything in it is touched; one from
        before versions were recorded has the version-1 tables and is marked so."""
        row = db.execute("SELECT value FROM settings WHERE key = 'schema_version'").fetchone()
        if row is None:
            db.execute("INSERT INTO settings(key, value) VALUES ('schema_version', %s)",
                       (str(SCHEMA_VERSION),))
            return
        name = db.execute("SELECT current_database()").fetchone()
        refuse_newer_schema(int(row[0]), SCHEMA_VERSION,
                            f"in PostgreSQL database {name[0] if name else '?'!r}")

    @classmethod
    def open(cls, dsn: str, *, lexical: LexicalRanking = "bm25") -> PostgresStore:
        """Connect to ``dsn`` (creating the tables if needed)."""
        return cls(dsn, lexical=lexical)

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            db = psycopg.connect(self._dsn, autocommit=True)
        except psycopg.OperationalError as exc:
            raise Unavailable(f"cannot connect to PostgreSQL: {exc}") from exc
        info = TypeInfo.fetch(db, "vector")
        if info is not None:  # absent only before the schema creates the extension
            info.register(db)
            dumper = type("VectorDumper", (_VectorDumper,), {"oid": info.oid})
            db.adapters.register_dumper(np.ndarray, dumper)
            db.adapters.register_loader(info.oid, _VectorLoader)
        return db

    def _reader(self) -> psycopg.Connection[Any]:
        db: psycopg.Connection[Any] | None = getattr(self._local, "db", None)
        if db is not None and (db.closed or db.broken):
            with self._connections_lock:
                self._connections.remove(db)
            db.close()
            db = None
        if db is None:
            db = self._connect()
            self._local.db = db
            with self._connections_lock:
                self._connections.append(db)
        return db

    @contextmanager
    def _transaction(self, *, versioned: bool = True) -> Iterator[psycopg.Connection[Any]]:
        """One transaction on the writer connection; a ``versioned`` one (it may create a
        version or collect old ones) first takes the cross-process write lock."""
        with self._writer_lock, _refusing_a_full_disk():
            if self._writer.broken:
                self._writer = self._connect()
            with self._writer.transaction():
                if versioned:
                    self._writer.execute(
                        "SELECT value FROM settings WHERE key = 'seq' FOR UPDATE")
                yield self._writer

    def close(self) -> None:
        with self._connections_lock:
            for db in self._connections:
                db.close()
            self._connections.clear()
        with self._writer_lock:
            self._writer.close()

    @staticmethod
    def _setting(db: psycopg.Connection[Any], key: str) -> str:
        row = db.execute("SELECT value FROM settings WHERE key = %s", (key,)).fetchone()
        if row is None:
            raise Unavailable(f"store setting {key!r} is missing")
        return str(row[0])

    @_database_errors
    def setting(self, key: str) -> str | None:
        row = self._reader().execute("SELECT value FROM settings WHERE key = %s",
                                     (f"engine.{key}",)).fetchone()
        return None if row is None else str(row[0])

    @_database_errors
    def set_setting(self, key: str, value: str) -> None:
        with self._transaction(versioned=False) as db:
            db.execute(
                "INSERT INTO settings(key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (f"engine.{key}", value))

    @_database_errors
    def side_tables(self, schema: str) -> SideTables:
        """Tables of a derived component in this database's schema (§7.9, §7.17): created
        under the schema lock by their own idempotent DDL, so they need no store schema
        version of their own — an older engine never touches them."""
        with self._connect() as setup, setup.transaction():
            setup.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            setup.execute(schema)
        return PostgresSideTables(self._connect)

    @_database_errors
    def current_seq(self) -> int:
        return int(self._setting(self._reader(), "seq"))

    @_database_errors
    def change_marks(self) -> tuple[int, int]:
        row = self._reader().execute(
            "SELECT (SELECT value FROM settings WHERE key = 'seq')::bigint, "
            "(SELECT COALESCE(MAX(id), 0) FROM feedback)").fetchone()
        if row is None:
            raise Unavailable("store setting 'seq' is missing")
        return int(row[0]), int(row[1])

    @_database_errors
    def gc_floor(self) -> int:
        return int(self._setting(self._reader(), "gc_floor"))

    # ── writes ──────────────────────────────────────────────────────────────

    @_database_errors
    def live_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        rows = self._reader().execute(
            "SELECT doc_id, content_hash FROM documents "
            "WHERE deleted_seq IS NULL AND doc_id = ANY(%s)", (list(doc_ids),)).fetchall()
        return {str(doc_id): str(content_hash) for doc_id, content_hash in rows}

    @_database_errors
    def live_meta(self, doc_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        rows = self._reader().execute(
            "SELECT doc_id, meta FROM documents "
            "WHERE deleted_seq IS NULL AND doc_id = ANY(%s)", (list(doc_ids),)).fetchall()
        return {str(doc_id): dict(meta) for doc_id, meta in rows}

    @_database_errors
    def write(self, upserts: Sequence[DocumentWrite], deletes: Sequence[str], *,
              new_fields: Mapping[str, str] | None = None,
              idempotency_key: str | None = None,
              reply: Mapping[str, Any] | None = None,
              now: float | None = None) -> WriteOutcome:
        at = time.time() if now is None else now
        with self._transaction() as db:
            seq = int(self._setting(db, "seq")) + 1
            live = dict(db.execute(
                "SELECT doc_id, content_hash FROM documents "
                "WHERE deleted_seq IS NULL AND doc_id = ANY(%s)",
                ([doc.doc_id for doc in upserts] + list(deletes),)).fetchall())
            # Apply the batch in order to a model of the live set (upserts, then deletes).
            current = dict(live)
            pending: dict[str, DocumentWrite] = {}
            changed: list[str] = []
            for doc in upserts:
                if current.get(doc.doc_id) == doc.content_hash:
                    continue
                pending.pop(doc.doc_id, None)  # an earlier version here would never be visible
                pending[doc.doc_id] = doc
                current[doc.doc_id] = doc.content_hash
                changed.append(doc.doc_id)
            deleted = 0
            for doc_id in deletes:
                if current.pop(doc_id, None) is not None:
                    pending.pop(doc_id, None)
                    deleted += 1
                    changed.append(doc_id)
            retired = [doc_id for doc_id in live if doc_id in pending or doc_id not in current]
            removed_chunks, removed_length = self._retire(db, retired, seq)
            added, added_length = self._insert(db, list(pending.values()), seq)
            if new_fields:
                db.cursor().executemany(
                    "INSERT INTO field_schema(name, type) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    list(new_fields.items()))
            if changed:
                db.execute("UPDATE settings SET value = %s WHERE key = 'seq'", (str(seq),))
                db.execute(
                    "INSERT INTO versions(seq, chunks, total_length) "
                    "SELECT %s, chunks + %s, total_length + %s FROM versions WHERE seq = %s",
                    (seq, len(added) - removed_chunks, added_length - removed_length, seq - 1))
                self._log(db, seq, "write", at, changed, added, [])
            else:
                seq -= 1
            if idempotency_key is not None and reply is not None:
                db.execute(
                    "INSERT INTO idempotency(key, reply, seq, at) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET reply = EXCLUDED.reply, seq = EXCLUDED.seq, "
                    "at = EXCLUDED.at",
                    (idempotency_key, json.dumps(dict(reply)), seq, at))
        self._refresh_statistics(len(added))
        return WriteOutcome(seq=seq, added_rowids=added, changed_ids=changed, deleted=deleted)

    def _refresh_statistics(self, added_rows: int) -> None:
        """``ANALYZE`` once this process has added enough chunks since it last did: on stale
        planner statistics the BM25 join of :meth:`lexical_search` runs several times slower
        (docs/postgres.md), and autovacuum may take a minute to notice a bulk load. The write
        has committed: a failure here is logged, not reported."""
        with self._writer_lock:
            self._unanalyzed_rows += added_rows
            if self._unanalyzed_rows < max(_ANALYZE_MIN_ROWS, self._analyzed_rows // 5):
                return
            self._analyzed_rows += self._unanalyzed_rows
            self._unanalyzed_rows = 0
            try:
                self._writer.execute("ANALYZE chunks, postings, documents")
            except psycopg.Error:
                logging.getLogger(__name__).warning("ANALYZE after a write failed",
                                                    exc_info=True)

    def _log(self, db: psycopg.Connection[Any], seq: int, kind: str, at: float,
             doc_ids: list[str], added: list[int], removed: list[int]) -> None:
        """Append to the write log; positions are allocated under the write lock, in order."""
        position = int(self._setting(db, "log_pos")) + 1
        db.execute("UPDATE settings SET value = %s WHERE key = 'log_pos'", (str(position),))
        db.execute("INSERT INTO write_log(pos, seq, kind, at, doc_ids, added, removed) "
                   "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                   (position, seq, kind, at, json.dumps(doc_ids), added, removed))

    @staticmethod
    def _retire(db: psycopg.Connection[Any], doc_ids: Sequence[str],
                seq: int) -> tuple[int, int]:
        """Mark the live versions of ``doc_ids`` deleted at ``seq``; returns the number of
        chunks retired and their total length."""
        if not doc_ids:
            return 0, 0
        count, length = db.execute(
            "WITH docs AS (UPDATE documents SET deleted_seq = %s "
            "              WHERE deleted_seq IS NULL AND doc_id = ANY(%s) RETURNING row), "
            "gone AS (UPDATE chunks SET deleted_seq = %s "
            "         WHERE doc_row IN (SELECT row FROM docs) RETURNING length) "
            "SELECT COUNT(*), COALESCE(SUM(length), 0) FROM gone",
            (seq, list(doc_ids), seq)).fetchone() or (0, 0)
        return int(count), int(length)

    def _insert(self, db: psycopg.Connection[Any], docs: Sequence[DocumentWrite],
                seq: int) -> tuple[list[int], int]:
        """Bulk-insert document versions with their chunks, vectors and postings (binary
        ``COPY``); returns the new chunk rowids, ascending, and their total length."""
        chunks = [(doc, chunk) for doc in docs for chunk in doc.chunks]
        if not docs:
            return [], 0
        if chunks:
            self._ensure_dimension(db, len(chunks[0][1].vector))
        doc_rows = _allocate(db, "documents", "row", len(docs))
        rowids = _allocate(db, "chunks", "chunk_id", len(chunks))
        row_of = {doc.doc_id: row for doc, row in zip(docs, doc_rows, strict=True)}
        counters = [Counter(tokens) for tokens in self._analyzer.tokens_batch(
            [indexed_text(chunk.context, chunk.text) for _, chunk in chunks])]
        with db.cursor() as cursor:
            with cursor.copy("COPY documents (row, doc_id, text, meta, filter_meta, "
                             "content_hash, added_seq) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "text", "text", "jsonb", "jsonb", "text", "int8"])
                for doc, row in zip(docs, doc_rows, strict=True):
                    copy.write_row((row, doc.doc_id, doc.text, dict(doc.meta),
                                    dict(doc.filter_meta), doc.content_hash, seq))
            with cursor.copy("COPY chunks (chunk_id, doc_row, doc_id, idx, start_offset, "
                             "end_offset, text, context, headings, added_seq, length, embedding) "
                             "FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "int8", "text", "int4", "int4", "int4", "text", "text",
                                "jsonb", "int8", "int4", "vector"])
                for rowid, (doc, chunk), counter in zip(rowids, chunks, counters, strict=True):
                    copy.write_row((rowid, row_of[doc.doc_id], doc.doc_id, chunk.index,
                                    chunk.start, chunk.end, chunk.text, chunk.context,
                                    list(chunk.headings), seq, counter.total(),
                                    np.asarray(chunk.vector, dtype=np.float32)))
            with cursor.copy("COPY postings (term, chunk_id, tf) FROM STDIN (FORMAT BINARY)"
                             ) as copy:
                copy.set_types(["text", "int8", "int4"])
                for rowid, counter in zip(rowids, counters, strict=True):
                    for term, tf in counter.items():
                        copy.write_row((term, rowid, tf))
        return rowids, sum(counter.total() for counter in counters)

    def _ensure_dimension(self, db: psycopg.Connection[Any], dimension: int) -> None:
        """Fix the vector column's dimension on the first write and build the HNSW index."""
        row = db.execute("SELECT value FROM settings WHERE key = 'dimension'").fetchone()
        if row is not None:
            if int(row[0]) != dimension:
                raise Unavailable(f"this database holds {row[0]}-dimensional vectors, "
                                         f"not {dimension}")
            return
        db.execute(f"ALTER TABLE chunks ALTER COLUMN embedding TYPE vector({int(dimension)})")
        db.execute("CREATE INDEX chunks_embedding ON chunks "
                   "USING hnsw (embedding vector_cosine_ops)")
        db.execute("INSERT INTO settings(key, value) VALUES ('dimension', %s)", (str(dimension),))

    @_database_errors
    def idempotent_reply(self, key: str, *,
                         not_before: float = 0.0) -> tuple[dict[str, Any], int] | None:
        row = self._reader().execute("SELECT reply, seq FROM idempotency "
                                     "WHERE key = %s AND at >= %s", (key, not_before)).fetchone()
        return None if row is None else (dict(row[0]), int(row[1]))

    @_database_errors
    def collect_garbage(self, keep_versions: int, keep_seconds: float, now: float) -> list[int]:
        with self._transaction() as db:
            seq = int(self._setting(db, "seq"))
            floor = int(self._setting(db, "gc_floor"))
            # Version v is superseded by write v+1; keep it while that write is recent.
            recent = (db.execute("SELECT MIN(seq) FROM write_log WHERE kind = 'write' AND at >= %s",
                                 (now - keep_seconds,)).fetchone() or (None,))[0]
            new_floor = self._new_gc_floor(seq, floor, keep_versions,
                                           None if recent is None else int(recent))
            if new_floor == floor:
                return []
            doomed = [int(r[0]) for r in db.execute(
                "SELECT chunk_id FROM chunks WHERE deleted_seq <= %s ORDER BY chunk_id",
                (new_floor,))]
            db.execute("DELETE FROM postings WHERE chunk_id = ANY(%s)", (doomed,))
            db.execute("DELETE FROM chunks WHERE deleted_seq <= %s", (new_floor,))
            db.execute("DELETE FROM documents WHERE deleted_seq <= %s", (new_floor,))
            db.execute("DELETE FROM versions WHERE seq < %s", (new_floor,))
            db.execute("UPDATE settings SET value = %s WHERE key = 'gc_floor'", (str(new_floor),))
            if doomed:
                self._log(db, seq, "gc", now, [], [], doomed)
        return doomed

    # ── derived-index support ──────────────────────────────────────────────

    @_database_errors
    def log_position(self) -> int:
        return int(self._setting(self._reader(), "log_pos"))

    @_database_errors
    def delta_since(self, position: int) -> IndexDelta | None:
        db = self._reader()
        delta = self._fold_log(position, db.execute(
            "SELECT pos, added, removed FROM write_log WHERE pos > %s ORDER BY pos",
            (position,)), list)
        # Read after the rows: the floor only grows, so a floor still at or below
        # ``position`` now was so while they were read, and none of them was missing.
        return None if _log_floor(db) > position else delta

    @_database_errors
    def log_floor(self) -> int:
        return _log_floor(self._reader())

    @_database_errors
    def prune_bookkeeping(self, *, log_up_to: int | None, log_before: float,
                          keys_before: float) -> tuple[int, int]:
        # Not versioned: pruning allocates no version, so writers are not held up; the
        # floor row lock orders concurrent pruners and GREATEST keeps the floor monotonic.
        bound, params = ("", [log_before]) if log_up_to is None else \
            (" AND pos <= %s", [log_before, log_up_to])
        with self._transaction(versioned=False) as db:
            newest = (db.execute(f"SELECT MAX(pos) FROM write_log WHERE at < %s{bound}",
                                 params).fetchone() or (None,))[0]
            log_rows = 0
            if newest is not None:
                log_rows = db.execute("DELETE FROM write_log WHERE pos <= %s AND at < %s",
                                      (newest, log_before)).rowcount
                db.execute("INSERT INTO settings(key, value) VALUES ('log_floor', %s) "
                           "ON CONFLICT (key) DO UPDATE SET value = "
                           "GREATEST(settings.value::bigint, EXCLUDED.value::bigint)::text",
                           (str(newest),))
            keys = db.execute("DELETE FROM idempotency WHERE at < %s", (keys_before,)).rowcount
        return log_rows, keys

    def iter_rows(self, rowids: Sequence[int] | None = None,
                  batch_size: int = 512) -> Iterator[RowBatch]:
        select = "SELECT chunk_id, context, text, embedding FROM chunks"
        if rowids is None:
            with self._connect() as db, db.transaction(), \
                    db.cursor(name="iter_rows", binary=True) as cursor:
                cursor.execute(f"{select} ORDER BY chunk_id")
                while rows := cursor.fetchmany(batch_size):
                    yield _row_batch(rows)
            return
        ids = [int(r) for r in rowids]
        db = self._reader()
        for start in range(0, len(ids), batch_size):
            with db.cursor(binary=True) as cursor:
                rows = cursor.execute(f"{select} WHERE chunk_id = ANY(%s) ORDER BY chunk_id",
                                      (ids[start:start + batch_size],)).fetchall()
            if rows:
                yield _row_batch(rows)

    # ── reads ──────────────────────────────────────────────────────────────

    @_database_errors
    def visible_rowids(self, seq: int) -> RowIds:
        rows = self._reader().execute(
            f"SELECT c.chunk_id FROM chunks c WHERE {_VISIBLE} ORDER BY c.chunk_id",
            (seq, seq)).fetchall()
        return _rowid_array(rows)

    @_database_errors
    def hidden_rowids(self, seq: int) -> RowIds:
        rows = self._reader().execute(
            "SELECT chunk_id FROM chunks WHERE added_seq > %s "
            "UNION ALL SELECT chunk_id FROM chunks WHERE deleted_seq <= %s",
            (seq, seq)).fetchall()
        return _rowid_array(rows)

    @_database_errors
    def filter_rowids(self, node: FilterNode, seq: int) -> RowIds:
        params: list[Any] = [seq, seq]
        clause = _compile(node, self.field_types(), params)
        rows = self._reader().execute(
            f"SELECT c.chunk_id FROM chunks c JOIN documents d ON d.row = c.doc_row "
            f"WHERE {_VISIBLE} AND ({clause}) ORDER BY c.chunk_id", params).fetchall()
        return _rowid_array(rows)

    @_database_errors
    def chunks(self, rowids: Sequence[int]) -> dict[int, ChunkRecord]:
        rows = self._reader().execute(
            f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.row = c.doc_row "
            f"WHERE c.chunk_id = ANY(%s)", ([int(r) for r in rowids],)).fetchall()
        return {int(row[0]): ChunkRecord(
            rowid=int(row[0]), doc_id=row[1], index=int(row[2]), start=int(row[3]),
            end=int(row[4]), text=row[5], context=row[6], headings=tuple(row[7]),
            meta=row[8], filter_meta=row[9]) for row in rows}

    @_database_errors
    def field_types(self) -> dict[str, str]:
        return {str(name): str(ftype) for name, ftype in
                self._reader().execute("SELECT name, type FROM field_schema").fetchall()}

    @_database_errors
    def counts(self) -> StoreCounts:
        db = self._reader()
        seq = int(self._setting(db, "seq"))
        documents, chunks, stored, size = db.execute(
            "SELECT (SELECT COUNT(*) FROM documents WHERE deleted_seq IS NULL), "
            "(SELECT chunks FROM versions WHERE seq = %s), (SELECT COUNT(*) FROM chunks), "
            "(SELECT SUM(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) t)",
            (seq, list(_TABLES))).fetchone() or (0, 0, 0, 0)
        return StoreCounts(documents=int(documents), chunks=int(chunks or 0),
                           stored_rows=int(stored), bytes_on_disk=int(size or 0))

    # ── database-side search (§7.7) ────────────────────────────────────────

    @_database_errors
    def dense_search(self, query: npt.NDArray[np.float32], k: int, seq: int,
                     node: FilterNode | None = None, *, exact: bool = False) -> ScoredRows:
        """Cosine top ``k``. Exact when asked (``exact``: a pinned snapshot must not depend
        on the HNSW graph, which later inserts reshape, §7.7.1) or when at most
        ``exact_filtered`` chunks are eligible (a small snapshot or a selective filter);
        otherwise pgvector HNSW, forced over the planner's choice, with iterative scans so
        that visibility and filters do not starve the result (pgvector ≥ 0.8). Ties go to
        the smaller rowid."""
        vector = np.asarray(query, dtype=np.float32)
        params: list[Any] = [seq, seq]
        where = self._where(node, params)
        db = self._reader()
        with db.transaction():
            if node is not None and not exact:
                # The planner underrates containment evaluated on every document and scans
                # them all from a few percent on (25 ms vs 10 ms at 1000 of 20k): when the
                # filter has an indexable part, its documents come from the GIN index.
                db.execute("SELECT set_config('enable_seqscan', 'off', true)")
            if exact or not self._exceeds_exact_limit(db, seq, node, where, params):
                # Ordering by the score expression cannot use the HNSW index: an exact scan
                # of the filtered rows.
                return _ranked(db.execute(
                    f"SELECT c.chunk_id, 1 - (c.embedding <=> %s) AS score FROM chunks c "
                    f"{where} ORDER BY score DESC, c.chunk_id LIMIT %s",
                    [vector, *params, k]).fetchall())
        with db.transaction():
            db.execute("SELECT set_config('hnsw.ef_search', %s, true), "
                       "set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                       "set_config('enable_seqscan', 'off', true), "
                       "set_config('enable_bitmapscan', 'off', true), "
                       "set_config('enable_sort', 'off', true)",
                       (str(min(1000, max(40, 2 * k))),))
            rows = db.execute(
                f"SELECT c.chunk_id, 1 - (c.embedding <=> %s) FROM chunks c {where} "
                f"ORDER BY c.embedding <=> %s LIMIT %s", [vector, *params, vector, k]).fetchall()
        return _ranked(rows)

    def _exceeds_exact_limit(self, db: psycopg.Connection[Any], seq: int,
                             node: FilterNode | None, where: str, params: list[Any]) -> bool:
        """Whether more than ``exact_filtered`` chunks are eligible: the snapshot's count
        from ``versions`` when unfiltered, else a count that stops past the limit (a
        selective ``eq``/``in`` filter finds its documents through the GIN index)."""
        if node is None:
            row = db.execute("SELECT chunks FROM versions WHERE seq = %s", (seq,)).fetchone()
            if row is not None:
                return int(row[0]) > self._exact_filtered
        row = db.execute(f"SELECT COUNT(*) FROM (SELECT 1 FROM chunks c {where} LIMIT %s) e",
                         [*params, self._exact_filtered + 1]).fetchone()
        return row is not None and int(row[0]) > self._exact_filtered

    @_database_errors
    def lexical_search(self, query: str, k: int, seq: int,
                       node: FilterNode | None = None) -> ScoredRows:
        """BM25 (k1=1.2, b=0.75) with statistics of the snapshot, or ``ts_rank``."""
        if self._lexical == "tsvector":
            return self._tsvector_search(query, k, seq, node)
        terms = Counter(self._analyzer.tokens(query))
        if not terms:
            return _ranked([])
        names = sorted(terms)
        params: list[Any] = [names, [terms[t] for t in names], seq, seq, seq,
                             _BM25_K1, _BM25_B, _BM25_B]
        where = ""
        if node is not None:
            clause = _compile(node, self.field_types(), params)
            where = (f"WHERE EXISTS (SELECT 1 FROM documents d "
                     f"WHERE d.row = h.doc_row AND ({clause}))")
        params.append(k)
        rows = self._reader().execute(_BM25_SQL.format(where=where), params).fetchall()
        return _ranked(rows)

    def _tsvector_search(self, query: str, k: int, seq: int,
                         node: FilterNode | None) -> ScoredRows:
        """PostgreSQL full-text ranking: any query lexeme matches (OR), scored by ``ts_rank``
        normalised by 1 + log(length), its best variant on the FAQ eval (docs/postgres.md)."""
        params: list[Any] = [query, seq, seq]
        where = self._where(node, params)
        params.append(k)
        rows = self._reader().execute(
            "WITH q AS (SELECT string_agg(quote_literal(l), ' | ')::tsquery AS tsq FROM "
            f"unnest(tsvector_to_array(to_tsvector('{_TS_CONFIG}', %s))) l) "
            "SELECT c.chunk_id, ts_rank(c.tsv, q.tsq, 1) FROM q, chunks c "
            f"{where} AND c.tsv @@ q.tsq ORDER BY 2 DESC, 1 LIMIT %s",
            params).fetchall()
        return _ranked(rows)

    def _where(self, node: FilterNode | None, params: list[Any]) -> str:
        """``WHERE`` visibility (two ``seq`` params already in ``params``) and the filter."""
        if node is None:
            return f"WHERE {_VISIBLE}"
        clause = _compile(node, self.field_types(), params)
        return (f"WHERE {_VISIBLE} AND EXISTS (SELECT 1 FROM documents d "
                f"WHERE d.row = c.doc_row AND ({clause}))")

    @_database_errors
    def vectors(self, rowids: Sequence[int]) -> npt.NDArray[np.float32]:
        ids = [int(r) for r in rowids]
        if not ids:
            return np.zeros((0, 0), dtype=np.float32)
        with self._reader().cursor(binary=True) as cursor:
            found = dict(cursor.execute("SELECT chunk_id, embedding FROM chunks "
                                        "WHERE chunk_id = ANY(%s)", (ids,)).fetchall())
        return np.stack([found[i] for i in ids])

    # ── feedback ───────────────────────────────────────────────────────────

    @_database_errors
    def record_feedback(self, records: Sequence[FeedbackRecord]) -> int:
        now = time.time()
        with self._transaction(versioned=False) as db, db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO feedback(at, session_id, query, hit_id, doc_id, used, cited, "
                "helpful, reward, poison_suspected, injection_suspected) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [(now, r.session_id, r.query, r.hit_id, r.doc_id, r.used, r.cited, r.helpful,
                  r.reward, r.poison_suspected, r.injection_suspected) for r in records])
        return len(records)

    @_database_errors
    def feedback_position(self) -> int:
        row = self._reader().execute("SELECT COALESCE(MAX(id), 0) FROM feedback").fetchone()
        return int(row[0]) if row else 0

    @_database_errors
    def poison_counts(self, up_to: int) -> dict[str, int]:
        return {str(doc_id): int(n) for doc_id, n in self._reader().execute(
            "SELECT doc_id, COUNT(*) FROM feedback WHERE poison_suspected AND id <= %s "
            "GROUP BY doc_id", (up_to,))}

    @_database_errors
    def poison_clears(self, up_to: int) -> dict[str, int]:
        return {str(label): int(mark) for label, mark in self._reader().execute(
            "SELECT hit_id, MAX(id) FROM feedback WHERE doc_id = '' AND id <= %s "
            "GROUP BY hit_id", (up_to,))}


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

    @_database_errors
    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._connection().execute(_placeholders(sql), params).fetchall()

    @_database_errors
    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self._lock:
            self._connection().execute(_placeholders(sql), params)

    @_database_errors
    def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self._lock, self._connection().cursor() as cursor:
            cursor.executemany(_placeholders(sql), rows)

    @contextmanager
    def transaction(self) -> Iterator[SideTables]:
        with self._lock, _refusing_a_full_disk(), self._connection().transaction():
            yield self

    def close(self) -> None:
        with self._lock:
            self._db.close()


@contextmanager
def _refusing_a_full_disk() -> Iterator[None]:
    """A transaction PostgreSQL rolled back for want of disk space (``53100``) is
    :func:`~rcpkit.engine.errors.disk_full`, as on SQLite."""
    try:
        yield
    except psycopg.errors.DiskFull as exc:
        raise disk_full() from exc


def _placeholders(sql: str) -> str:
    return sql.replace("?", "%s")


def _relation_exists(db: psycopg.Connection[Any], name: str) -> bool:
    return (db.execute("SELECT to_regclass(%s)", (name,)).fetchone() or (None,))[0] is not None


def _log_floor(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT value FROM settings WHERE key = 'log_floor'").fetchone()
    return 0 if row is None else int(row[0])


def _allocate(db: psycopg.Connection[Any], table: str, column: str, count: int) -> list[int]:
    """``count`` fresh ids from the serial behind ``table.column``, ascending (never reused)."""
    if count == 0:
        return []
    rows = db.execute("SELECT nextval(pg_get_serial_sequence(%s, %s)) "
                      "FROM generate_series(1, %s)", (table, column, count)).fetchall()
    return sorted(int(row[0]) for row in rows)


def _rowid_array(rows: Sequence[Any]) -> RowIds:
    return np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))


def _ranked(rows: Sequence[Any]) -> ScoredRows:
    """Rows sorted best first, ties to the smaller rowid, as the in-memory indexes do."""
    ordered = sorted(((int(r[0]), float(r[1])) for r in rows), key=lambda p: (-p[1], p[0]))
    return (np.fromiter((p[0] for p in ordered), dtype=np.int64, count=len(ordered)),
            np.fromiter((p[1] for p in ordered), dtype=np.float32, count=len(ordered)))


def _row_batch(rows: Sequence[Any]) -> RowBatch:
    return RowBatch(rowids=[int(r[0]) for r in rows],
                    texts=[indexed_text(r[1], r[2]) for r in rows],
                    vectors=np.stack([r[3] for r in rows]))


# ── §8 filter compilation (bound parameters only, §15.4) ───────────────────

def _compile(node: FilterNode, known: Mapping[str, str], params: list[Any]) -> str:
    """A boolean SQL expression over ``d.filter_meta`` that is never NULL."""
    return compile_filter(node, lambda condition: _condition(condition, known, params))


def _condition(cond: Condition, known: Mapping[str, str], params: list[Any]) -> str:
    if cond.field not in known:
        # The validator only admits advertised fields; an unknown one matches nothing.
        return "false"
    field, op, value = cond.field, cond.op, cond.value
    if op == "exists":
        params.append(field)
        return "(d.filter_meta ? %s)" if value else "NOT (d.filter_meta ? %s)"
    if op in ("eq", "ne"):
        member = _contained(field, value, params)
        return member if op == "eq" else f"NOT {member}"
    if op in ("in", "nin"):
        member = f"({' OR '.join(_contained(field, v, params) for v in value)})" \
            if value else "false"
        return member if op == "in" else f"NOT {member}"
    if op == "contains":
        # Element membership for array values, case-sensitive substring for strings (§8).
        params.extend((field, field, json.dumps(value), field, value))
        return ("COALESCE(CASE jsonb_typeof(d.filter_meta -> %s) "
                "WHEN 'array' THEN (d.filter_meta -> %s) @> %s::jsonb "
                "ELSE strpos(d.filter_meta ->> %s, %s) > 0 END, false)")
    comparison = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[op]
    params.extend((field, field, value))
    return (f"COALESCE(CASE WHEN jsonb_typeof(d.filter_meta -> %s) = 'number' "
            f"THEN (d.filter_meta -> %s)::numeric {comparison} %s END, false)")


def _contained(field: str, value: Any, params: list[Any]) -> str:
    """``field`` equals the scalar ``value`` or is an array holding it (§8), written as
    containment of the whole ``filter_meta`` so that its GIN ``jsonb_path_ops`` index applies.
    Inside an object, containment matches a scalar only by jsonb equality (``7`` = ``7.0``,
    never ``"7"``) and an array only by element, hence one form for each shape."""
    params.extend((json.dumps({field: value}), json.dumps({field: [value]})))
    return "(d.filter_meta @> %s::jsonb OR d.filter_meta @> %s::jsonb)"
