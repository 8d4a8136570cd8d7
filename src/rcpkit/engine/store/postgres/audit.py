"""Audit and repair of what the PostgreSQL record keeps for its own search (``rcpkit verify``).

Besides the rows, the record holds tables and indexes derived from them (:mod:`.records`):
the BM25 postings of every stored chunk and its token ``length``, per-version statistics
(``versions``), the pgvector HNSW index, the filter GIN index and the full-text index. Each
is checked against the rows in one read-only snapshot; :meth:`PostgresStore.rebuild_search`
rebuilds them from the rows under the record's write lock, so a serving process never sees
them half-built.
The rows themselves (documents, chunks, the log) are checked by ``rcpkit.engine.verify``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg

from rcpkit.engine.text import Analyzer

from ..base import indexed_text
from .records import COUNTED_VERSIONS, INDEXES

__all__ = ["SearchProblem", "audit"]

_BATCH = 1000
_SHOWN = 5


SearchProblem = tuple[str, str]
"""``(part, problem)``: a search table or index of :data:`INDEXES` (or ``"postings"``,
``"versions"``, ``"chunks.embedding"``) and how it disagrees with the rows."""


def _rows(found: list[int]) -> str:
    shown = ", ".join(map(str, sorted(found)[:_SHOWN]))
    return f"{len(found)} rows ({shown}{', …' if len(found) > _SHOWN else ''})"


def _postings(db: psycopg.Connection[Any], analyzer: Analyzer) -> Iterator[SearchProblem]:
    """Every stored chunk's postings and length against the analyzer's terms of its text
    (what :meth:`PostgresStore._insert` writes), and no postings of a chunk not stored."""
    wrong: list[int] = []
    lengths: list[int] = []
    with db.cursor(name="audit_postings") as cursor:
        cursor.execute(
            "SELECT c.chunk_id, c.context, c.text, c.length, "
            "COALESCE((SELECT jsonb_object_agg(p.term, p.tf) FROM postings p "
            "          WHERE p.chunk_id = c.chunk_id), '{}'::jsonb) "
            "FROM chunks c ORDER BY c.chunk_id")
        while rows := cursor.fetchmany(_BATCH):
            tokens = analyzer.tokens_batch([indexed_text(row[1], row[2]) for row in rows])
            for row, terms in zip(rows, tokens, strict=True):
                expected = Counter(terms)
                if dict(expected) != {str(t): int(n) for t, n in row[4].items()}:
                    wrong.append(int(row[0]))
                elif expected.total() != int(row[3]):
                    lengths.append(int(row[0]))
    if wrong:
        yield ("postings", f"{_rows(wrong)} with postings other than their text's")
    if lengths:
        yield ("postings", f"{_rows(lengths)} with a wrong token length")
    orphans = [int(row[0]) for row in db.execute(
        "SELECT DISTINCT p.chunk_id FROM postings p LEFT JOIN chunks c "
        "ON c.chunk_id = p.chunk_id WHERE c.chunk_id IS NULL")]
    if orphans:
        yield ("postings", f"holds {_rows(orphans)} the record does not")


def _versions(db: psycopg.Connection[Any]) -> Iterator[SearchProblem]:
    """The BM25 statistics of every retained version (from the collection floor up) against
    the chunks visible at it, counted in one pass over the rows' add and delete marks."""
    rows = db.execute(
        f"SELECT c.seq, v.chunks, v.total_length, c.chunks, c.total_length "
        f"FROM ({COUNTED_VERSIONS}) AS c(seq, chunks, total_length) "
        f"LEFT JOIN versions v ON v.seq = c.seq ORDER BY c.seq").fetchall()
    missing = [int(r[0]) for r in rows if r[1] is None]
    wrong = [int(r[0]) for r in rows
             if r[1] is not None and (int(r[1]), int(r[2])) != (int(r[3]), int(r[4]))]
    if missing:
        yield ("versions", f"lacks the statistics of {len(missing)} retained "
                                        f"versions ({', '.join(map(str, missing[:_SHOWN]))})")
    if wrong:
        yield ("versions", f"counts other chunks than the record at "
                                        f"{len(wrong)} versions "
                                        f"({', '.join(map(str, wrong[:_SHOWN]))})")


def _indexes(db: psycopg.Connection[Any]) -> Iterator[SearchProblem]:
    """Each search index present and valid (an interrupted build leaves one invalid), and
    every vector of the dimension the record was fixed to."""
    dimension = db.execute("SELECT value FROM settings WHERE key = 'dimension'").fetchone()
    expected = [name for name, _ in INDEXES if name != "chunks_embedding" or dimension]
    valid = dict(db.execute(
        "SELECT c.relname, i.indisvalid AND i.indisready FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE c.relname = ANY(%s) AND c.relnamespace = "
        "(SELECT relnamespace FROM pg_class WHERE oid = 'chunks'::regclass)",
        (expected,)).fetchall())
    for name in expected:
        if name not in valid:
            yield (name, "index missing")
        elif not valid[name]:
            yield (name, "index invalid (an interrupted build or a failed "
                                      "concurrent reindex)")
    if dimension is not None:
        odd = [int(row[0]) for row in db.execute(
            "SELECT chunk_id FROM chunks WHERE vector_dims(embedding) <> %s",
            (int(dimension[0]),))]
        if odd:
            yield ("chunks.embedding", f"{_rows(odd)} not of the record's "
                                                    f"dimension {dimension[0]}")


def audit(db: psycopg.Connection[Any], analyzer: Analyzer | None = None) -> list[SearchProblem]:
    """The search tables' and indexes' disagreements with the rows, read in one snapshot
    (``db`` is an autocommit connection to the record's schema; nothing is written)."""
    with db.transaction():
        db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        return [*_postings(db, analyzer or Analyzer()), *_versions(db), *_indexes(db)]

