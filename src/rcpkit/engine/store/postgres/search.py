"""Recall computed in PostgreSQL (:class:`~rcpkit.engine.store.base.DatabaseSearch`, §7.7):
dense by pgvector HNSW (cosine) and lexical by BM25 from postings and per-version statistics
kept in tables (or PostgreSQL's ``ts_rank``), both at a snapshot and under a §8 filter.

``eq``/``in`` compile to containment over a GIN ``jsonb_path_ops`` index on ``filter_meta``
(:mod:`.dialect`), so a selective filter finds its documents without scanning the others,
and dense search under it is an exact scan of just those rows.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import psycopg

from rcpkit.engine.text import Analyzer
from rcpkit.protocol.filters import FilterNode

from ..base import ScoredRows
from ..sql import VISIBLE
from .dialect import DIALECT

__all__ = ["TS_CONFIG", "LexicalRanking", "PostgresSearch"]

LexicalRanking = Literal["bm25", "tsvector"]

TS_CONFIG = "english"
"""The text-search configuration of the ``tsv`` column and of ``tsvector`` queries."""
_BM25_K1 = 1.2
_BM25_B = 0.75
# BM25 as the embedded LexicalIndex computes it: N, average length and document frequencies
# are those of the snapshot ``seq``, each distinct query term counts once, and a term's weight
# is its idf to the power ``[lexical] idf_exponent``.
_BM25_SQL = """
WITH q AS (SELECT unnest(%s::text[]) AS term),
v AS (SELECT chunks AS n, total_length::float8 / GREATEST(chunks, 1) AS avgdl
      FROM versions WHERE seq = %s),
hits AS MATERIALIZED (
    SELECT p.term, p.chunk_id, p.tf, c.length, c.doc_row FROM postings p JOIN q USING (term)
    JOIN chunks c ON c.chunk_id = p.chunk_id
    WHERE c.added_seq <= %s AND (c.deleted_seq IS NULL OR c.deleted_seq > %s)),
idf AS (SELECT h.term, power(ln(1 + (v.n - COUNT(*) + 0.5) / (COUNT(*) + 0.5)), %s) AS w
        FROM hits h CROSS JOIN v GROUP BY h.term, v.n)
SELECT h.chunk_id, SUM(idf.w * h.tf / (h.tf + %s * (1 - %s + %s * h.length / v.avgdl)))
FROM hits h JOIN idf USING (term) CROSS JOIN v
{where}
GROUP BY h.chunk_id ORDER BY 2 DESC, 1 LIMIT %s
"""
_VISIBLE = DIALECT.sql(VISIBLE)


class PostgresSearch(abc.ABC):
    """The database-side search of the PostgreSQL store, over its tables.

    ``lexical`` picks the ranking of :meth:`lexical_search`: ``"bm25"`` (postings and
    per-version statistics in tables, the analyzer of the embedded index) or
    ``"tsvector"`` (PostgreSQL full-text ``ts_rank``); see docs/postgres.md. Dense search
    is exact when at most ``exact_filtered`` chunks are eligible: below that, scanning the
    filtered rows is faster than an HNSW walk that skips almost every node (the default is
    the measured crossover, docs/postgres.md), and exact."""

    _lexical: LexicalRanking
    _idf_exponent: float
    _exact_filtered: int
    _analyzer: Analyzer

    @abc.abstractmethod
    def _reader(self) -> psycopg.Connection[Any]:
        """This thread's connection for reads."""

    @abc.abstractmethod
    def field_types(self) -> dict[str, str]:
        """The persisted filter schema."""

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

    def lexical_search(self, query: str, k: int, seq: int,
                       node: FilterNode | None = None) -> ScoredRows:
        """BM25 (k1=1.2, b=0.75, a term's idf to the power ``idf_exponent``) with statistics
        of the snapshot, or ``ts_rank``."""
        if self._lexical == "tsvector":
            return self._tsvector_search(query, k, seq, node)
        names = sorted(set(self._analyzer.tokens(query)))
        if not names:
            return _ranked([])
        params: list[Any] = [names, seq, seq, seq, self._idf_exponent,
                             _BM25_K1, _BM25_B, _BM25_B]
        where = ""
        if node is not None:
            clause = DIALECT.compile(node, self.field_types(), params)
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
            f"unnest(tsvector_to_array(to_tsvector('{TS_CONFIG}', %s))) l) "
            "SELECT c.chunk_id, ts_rank(c.tsv, q.tsq, 1) FROM q, chunks c "
            f"{where} AND c.tsv @@ q.tsq ORDER BY 2 DESC, 1 LIMIT %s",
            params).fetchall()
        return _ranked(rows)

    def _where(self, node: FilterNode | None, params: list[Any]) -> str:
        """``WHERE`` visibility (two ``seq`` params already in ``params``) and the filter."""
        if node is None:
            return f"WHERE {_VISIBLE}"
        clause = DIALECT.compile(node, self.field_types(), params)
        return (f"WHERE {_VISIBLE} AND EXISTS (SELECT 1 FROM documents d "
                f"WHERE d.row = c.doc_row AND ({clause}))")

    def vectors(self, rowids: Sequence[int]) -> npt.NDArray[np.float32]:
        ids = [int(r) for r in rowids]
        if not ids:
            return np.zeros((0, 0), dtype=np.float32)
        with self._reader().cursor(binary=True) as cursor:
            found = dict(cursor.execute("SELECT chunk_id, embedding FROM chunks "
                                        "WHERE chunk_id = ANY(%s)", (ids,)).fetchall())
        return np.stack([found[i] for i in ids])


def _ranked(rows: Sequence[Any]) -> ScoredRows:
    """Rows sorted best first, ties to the smaller rowid, as the in-memory indexes do."""
    ordered = sorted(((int(r[0]), float(r[1])) for r in rows), key=lambda p: (-p[1], p[0]))
    return (np.fromiter((p[0] for p in ordered), dtype=np.int64, count=len(ordered)),
            np.fromiter((p[1] for p in ordered), dtype=np.float32, count=len(ordered)))
