"""The PostgreSQL + pgvector system of record: its tables and the record's backend steps.

Same contract as the embedded backend, through the one write path of
:class:`~rcpkit.engine.store.sql.SqlStore`: MVCC versions via ``added_seq``/``deleted_seq``
(§7.7.1), each write one committed transaction (§7.10, §7.11), §8 filters compiled to SQL
with bound parameters only (§15.4).

Several processes may write to one database: a write takes the row lock on the ``seq``
setting (``SELECT … FOR UPDATE``), so versions and write-log positions are allocated in
commit order, without gaps. Every read goes to the database, so a write through one
process is visible through every other as soon as it commits. Besides the rows, a write
keeps what the database-side search (:mod:`.search`) needs: postings and per-version
statistics for BM25.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import psycopg

from rcpkit.engine.errors import Unavailable
from rcpkit.engine.text import Analyzer

from ..base import DocumentWrite, RowBatch, StoreCounts, indexed_text, refuse_newer_schema
from ..side import SideTables
from ..sql import SqlStore
from .connection import SCHEMA_LOCK, connect, guarded, refusing_a_full_disk, relation_exists
from .dialect import DIALECT
from .search import TS_CONFIG, LexicalRanking, PostgresSearch
from .side_tables import PostgresSideTables

__all__ = ["COUNTED_VERSIONS", "INDEXES", "SCHEMA_VERSION", "PostgresStore"]

SCHEMA_VERSION = 1
"""The layout of ``_SCHEMA``, kept in ``settings.schema_version``; bump it (with a migration
of older databases) whenever the tables change."""

_TABLES = ("settings", "documents", "chunks", "postings", "versions", "write_log",
           "field_schema", "idempotency", "feedback")

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
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('{TS_CONFIG}', context || ' ' || text)) STORED
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
_HNSW = "CREATE INDEX chunks_embedding ON chunks USING hnsw (embedding vector_cosine_ops)"
INDEXES = (*((match[1], match[0]) for match in re.findall(
    r"(CREATE (?:UNIQUE )?INDEX (\w+) ON [^;]+);", _SCHEMA)), *_LATE_INDEXES,
           ("chunks_embedding", _HNSW))
"""Every index of the record, ``(name, DDL)``; ``chunks_embedding`` exists once the first
write has fixed the vector dimension."""
COUNTED_VERSIONS = """
WITH marks AS (SELECT added_seq AS seq, 1 AS n, length FROM chunks
               UNION ALL SELECT deleted_seq, -1, -length FROM chunks
               WHERE deleted_seq IS NOT NULL),
steps AS (SELECT seq, SUM(n) AS n, SUM(length) AS length FROM marks GROUP BY seq)
SELECT w.seq, (SELECT COALESCE(SUM(n), 0) FROM steps WHERE steps.seq <= w.seq),
       (SELECT COALESCE(SUM(length), 0) FROM steps WHERE steps.seq <= w.seq)
FROM generate_series((SELECT CAST(value AS BIGINT) FROM settings WHERE key = 'gc_floor'),
                     (SELECT CAST(value AS BIGINT) FROM settings WHERE key = 'seq')) AS w(seq)
"""
"""``(seq, chunks, total_length)`` of every retained version, counted from the chunks' add
and delete marks in one pass: what ``versions`` holds when it agrees with the rows."""

_CHUNK_COLUMNS = ("c.chunk_id, c.doc_id, c.idx, c.start_offset, c.end_offset, c.text, "
                  "c.context, c.headings, d.meta, d.filter_meta")
_ANALYZE_MIN_ROWS = 1000
"""Chunks a process adds (and at least a fifth of those it has seen) before it refreshes the
planner statistics itself."""


@guarded
class PostgresStore(SqlStore, PostgresSearch):
    """:class:`Store` in one PostgreSQL database with the pgvector extension, searching in
    it (:class:`~.search.PostgresSearch` says what ``lexical`` and ``exact_filtered``
    choose)."""

    dialect = DIALECT
    chunk_columns = _CHUNK_COLUMNS
    chunk_tables = ("postings",)

    def __init__(self, dsn: str, *, lexical: LexicalRanking = "bm25",
                 analyzer: Analyzer | None = None, exact_filtered: int = 5000,
                 idf_exponent: float = 1.4) -> None:
        self._dsn = dsn
        self._lexical = lexical
        self._idf_exponent = idf_exponent  # [lexical] idf_exponent, as the embedded index
        self._exact_filtered = exact_filtered
        self._analyzer = analyzer or Analyzer()
        self._local = threading.local()
        self._connections: list[psycopg.Connection[Any]] = []
        self._connections_lock = threading.Lock()
        self._writer_lock = threading.Lock()
        self._unreadable = set()
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
            setup.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            # DDL only on a new database: even "IF NOT EXISTS" locks tables writers use.
            if not relation_exists(setup, "versions"):
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
                if not relation_exists(setup, name):
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
    def open(cls, dsn: str, *, lexical: LexicalRanking = "bm25",
             idf_exponent: float = 1.4) -> PostgresStore:
        """Connect to ``dsn`` (creating the tables if needed)."""
        return cls(dsn, lexical=lexical, idf_exponent=idf_exponent)

    def _connect(self) -> psycopg.Connection[Any]:
        return connect(self._dsn)

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
        with self._writer_lock, refusing_a_full_disk():
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

    def _execute_many(self, db: psycopg.Connection[Any], sql: str,
                      rows: Iterable[Sequence[Any]]) -> None:
        with db.cursor() as cursor:
            cursor.executemany(sql, rows)

    def side_tables(self, schema: str) -> SideTables:
        """Tables of a derived component in this database's schema (§7.9, §7.17): created
        under the schema lock by their own idempotent DDL, so they need no store schema
        version of their own — an older engine never touches them."""
        with self._connect() as setup, setup.transaction():
            setup.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            setup.execute(schema)
        return PostgresSideTables(self._connect)

    # ── the write path's steps ─────────────────────────────────────────────

    def _version_created(self, db: psycopg.Connection[Any], seq: int, added: int,
                         added_length: int) -> None:
        """The snapshot's BM25 statistics: the previous version's, plus the chunks added,
        minus those retired at ``seq`` (found through ``chunks_deleted``)."""
        db.execute(
            "INSERT INTO versions(seq, chunks, total_length) "
            "SELECT %s, v.chunks + %s - r.n, v.total_length + %s - r.length "
            "FROM versions v, (SELECT COUNT(*) AS n, COALESCE(SUM(length), 0) AS length "
            "                  FROM chunks WHERE deleted_seq = %s) r WHERE v.seq = %s",
            (seq, added, added_length, seq, seq - 1))

    def _floor_raised(self, db: psycopg.Connection[Any], floor: int) -> None:
        db.execute("DELETE FROM versions WHERE seq < %s", (floor,))

    def _next_log_position(self, db: psycopg.Connection[Any]) -> int:
        """A counter row read and moved under the write lock: positions in commit order."""
        position = int(self._setting(db, "log_pos")) + 1
        self._set(db, "log_pos", position)
        return position

    def _written(self, added_rows: int) -> None:
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
        db.execute(_HNSW)
        db.execute("INSERT INTO settings(key, value) VALUES ('dimension', %s)", (str(dimension),))

    # ── repair of the search tables (``rcpkit verify --repair``) ────────────

    def rebuild_search(self, parts: set[str]) -> list[str]:
        """Rebuild the search tables and indexes named in ``parts`` (``"postings"``,
        ``"versions"`` or an index of :data:`INDEXES`) from the rows, in one transaction
        under the write lock; returns what was rebuilt. Postings go first: the versions'
        statistics sum the lengths they fix."""
        done: list[str] = []
        with self._transaction() as db:
            if "postings" in parts:
                self._rebuild_postings(db)
                done.append("postings: rebuilt from the chunks' text")
            if parts & {"postings", "versions"}:
                db.execute("DELETE FROM versions WHERE seq >= %s",
                           (int(self._setting(db, "gc_floor")),))
                db.execute(f"INSERT INTO versions(seq, chunks, total_length) {COUNTED_VERSIONS}")
                done.append("versions: statistics recounted from the chunks")
            for name, ddl in INDEXES:
                if name not in parts:
                    continue
                if relation_exists(db, name):
                    db.execute(f"REINDEX INDEX {name}")
                else:
                    db.execute(ddl)
                done.append(f"{name}: index rebuilt")
        return done

    def _rebuild_postings(self, db: psycopg.Connection[Any]) -> None:
        """Every stored chunk's postings and length again from its indexed text."""
        db.execute("DELETE FROM postings")
        lengths: list[tuple[int, int]] = []
        with db.cursor(name="rebuild_postings") as rows, db.cursor() as writes:
            rows.execute("SELECT chunk_id, context, text FROM chunks ORDER BY chunk_id")
            while batch := rows.fetchmany(1000):
                counters = [Counter(tokens) for tokens in self._analyzer.tokens_batch(
                    [indexed_text(context, text) for _, context, text in batch])]
                with writes.copy("COPY postings (term, chunk_id, tf) FROM STDIN "
                                 "(FORMAT BINARY)") as copy:
                    copy.set_types(["text", "int8", "int4"])
                    for (rowid, _, _), counter in zip(batch, counters, strict=True):
                        for term, tf in counter.items():
                            copy.write_row((term, rowid, tf))
                lengths.extend((counter.total(), int(rowid))
                               for (rowid, _, _), counter in zip(batch, counters, strict=True))
            writes.executemany("UPDATE chunks SET length = %s WHERE chunk_id = %s "
                               "AND length IS DISTINCT FROM %s",
                               [(length, rowid, length) for length, rowid in lengths])

    # ── derived-index support ──────────────────────────────────────────────

    def log_position(self) -> int:
        return int(self._setting(self._reader(), "log_pos"))

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


def _allocate(db: psycopg.Connection[Any], table: str, column: str, count: int) -> list[int]:
    """``count`` fresh ids from the serial behind ``table.column``, ascending (never reused)."""
    if count == 0:
        return []
    rows = db.execute("SELECT nextval(pg_get_serial_sequence(%s, %s)) "
                      "FROM generate_series(1, %s)", (table, column, count)).fetchall()
    return sorted(int(row[0]) for row in rows)


def _row_batch(rows: Sequence[Any]) -> RowBatch:
    return RowBatch(rowids=[int(r[0]) for r in rows],
                    texts=[indexed_text(r[1], r[2]) for r in rows],
                    vectors=np.stack([r[3] for r in rows]))
