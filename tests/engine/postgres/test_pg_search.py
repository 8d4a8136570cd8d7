"""Database-side recall (§7.7): pgvector HNSW cosine and BM25/tsvector in SQL, at a snapshot
(§7.7.1) and under §8 filters, checked against exact in-memory references."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rcpkit.engine.indexes.lexical import LexicalIndex
from rcpkit.engine.store import ChunkWrite, DocumentWrite
from rcpkit.engine.store.postgres import DatabaseSearch, PostgresStore
from rcpkit.protocol.filters import validate

WORDS = ["river", "bridge", "concrete", "steel", "permit", "crane", "scaffold", "tunnel",
         "drainage", "asphalt", "foundation", "inspection", "safety", "helmet", "timber", "beam"]
DIMENSION = 16


def corpus(count: int, seed: int) -> list[DocumentWrite]:
    """Documents of random words with random unit vectors and a ``part`` field."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(count):
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(3, 12))))
        vector = rng.normal(size=DIMENSION).astype(np.float32)
        vector /= np.linalg.norm(vector)
        meta = {"part": "even" if i % 2 == 0 else "odd", "n": i}
        docs.append(DocumentWrite(
            doc_id=f"d{i}", text=text, meta=meta, filter_meta=meta, content_hash=f"{seed}-{i}",
            chunks=[ChunkWrite(index=0, start=0, end=len(text), text=text, context="",
                               headings=(), vector=vector)]))
    return docs


@pytest.fixture(scope="module")
def loaded_dsn(new_schema: Callable[[], str]) -> str:
    """One corpus at two versions, shared by the read-only tests of this module."""
    dsn = new_schema()
    store = PostgresStore.open(dsn)
    store.write(corpus(300, seed=1), [], new_fields={"part": "keyword", "n": "int"})
    # Version 2 replaces a third of the documents and deletes another tenth.
    replaced = corpus(300, seed=2)[:100]
    store.write(replaced, [f"d{i}" for i in range(250, 280)])
    store.close()
    return dsn


@pytest.fixture(scope="module")
def loaded(loaded_dsn: str) -> Iterator[PostgresStore]:
    store = PostgresStore.open(loaded_dsn)
    yield store
    store.close()


def exact_dense(store: PostgresStore, query: np.ndarray, seq: int,
                allowed: set[int] | None = None) -> list[int]:
    rowids = [r for r in store.visible_rowids(seq).tolist() if allowed is None or r in allowed]
    batch = {b: v for batch in store.iter_rows(rowids) for b, v in zip(batch.rowids,
                                                                        batch.vectors,
                                                                        strict=True)}
    scores = {r: float(np.dot(batch[r], query)) for r in rowids}
    return sorted(scores, key=lambda r: (-scores[r], r))


def test_the_store_offers_database_search(loaded: PostgresStore) -> None:
    assert isinstance(loaded, DatabaseSearch)


@pytest.mark.parametrize("seq", [1, 2])
def test_dense_search_matches_exact_cosine_at_each_snapshot(loaded: PostgresStore,
                                                            seq: int) -> None:
    rng = np.random.default_rng(7)
    for _ in range(5):
        query = rng.normal(size=DIMENSION).astype(np.float32)
        query /= np.linalg.norm(query)
        rowids, scores = loaded.dense_search(query, 10, seq)
        assert rowids.tolist() == exact_dense(loaded, query, seq)[:10]
        assert np.all(np.diff(scores) <= 1e-6) and -1.0 <= scores.min() <= scores.max() <= 1.0


def test_dense_search_is_exact_under_a_selective_filter(loaded: PostgresStore) -> None:
    tree = validate({"and": [{"field": "part", "op": "eq", "value": "odd"},
                             {"field": "n", "op": "lt", "value": 40}]}, loaded.field_types())
    allowed = set(loaded.filter_rowids(tree, 2).tolist())
    assert 0 < len(allowed) <= 20
    query = np.ones(DIMENSION, dtype=np.float32) / np.sqrt(DIMENSION)
    rowids, _ = loaded.dense_search(query, 10, 2, tree)
    assert rowids.tolist() == exact_dense(loaded, query, 2, allowed)[:10]


@pytest.mark.parametrize("seq", [1, 2])
def test_bm25_in_sql_equals_the_in_memory_index(loaded: PostgresStore, seq: int) -> None:
    index = LexicalIndex()
    for batch in loaded.iter_rows():
        index.add(np.asarray(batch.rowids), batch.texts)
    visible = loaded.visible_rowids(seq)
    mask = np.zeros(int(visible.max()) + 1, dtype=bool)
    mask[visible] = True
    for query in ("steel bridge", "crane crane permit", "safety inspection of the tunnel"):
        expected_rows, expected_scores = index.search(query, 15, visible=mask)
        rows, scores = loaded.lexical_search(query, 15, seq)
        assert rows.tolist() == expected_rows.tolist(), query
        np.testing.assert_allclose(scores, expected_scores, rtol=1e-5)


def test_lexical_search_honours_filters_and_unknown_terms(loaded: PostgresStore) -> None:
    tree = validate({"field": "part", "op": "eq", "value": "even"}, loaded.field_types())
    rows, scores = loaded.lexical_search("concrete", 50, 2, tree)
    records = loaded.chunks(rows.tolist())
    assert rows.size and all(r.meta["part"] == "even" for r in records.values())
    assert all("concrete" in r.text for r in records.values()) and scores.min() > 0
    assert loaded.lexical_search("zeppelin", 10, 2)[0].size == 0
    assert loaded.lexical_search("the of", 10, 2)[0].size == 0  # stop words only


def test_tsvector_ranking_matches_any_term_under_a_filter(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, lexical="tsvector")
    store.write(corpus(50, seed=3), [], new_fields={"part": "keyword", "n": "int"})
    tree = validate({"field": "part", "op": "eq", "value": "odd"}, store.field_types())
    rows, scores = store.lexical_search("cranes or bridges", 50, 1, tree)
    texts = [r.text for r in store.chunks(rows.tolist()).values()]
    assert texts and all(("crane" in t or "bridge" in t) for t in texts)
    assert scores.min() > 0 and np.all(np.diff(scores) <= 0)
    store.close()


def test_vectors_come_back_in_the_requested_order(loaded: PostgresStore) -> None:
    rowids = loaded.visible_rowids(2)[:5][::-1].tolist()
    expected = {r: v for b in loaded.iter_rows(rowids) for r, v in zip(b.rowids, b.vectors,
                                                                       strict=True)}
    np.testing.assert_array_equal(loaded.vectors(rowids), np.stack([expected[r]
                                                                    for r in rowids]))


def test_hnsw_index_path_keeps_recall_with_filters(loaded_dsn: str) -> None:
    options = conninfo_to_dict(loaded_dsn)["options"]
    forced_dsn = make_conninfo(loaded_dsn, options=f"{options} -c enable_seqscan=off")
    with psycopg.connect(forced_dsn) as db:
        plan = "\n".join(str(row[0]) for row in db.execute(
            "EXPLAIN SELECT chunk_id FROM chunks ORDER BY embedding <=> %s::vector LIMIT 10",
            (str(np.ones(DIMENSION).tolist()),)))
    assert "chunks_embedding" in plan  # the HNSW index, not a sequential scan
    forced = PostgresStore(forced_dsn, exact_filtered=0)
    tree = validate({"field": "part", "op": "eq", "value": "odd"}, forced.field_types())
    allowed = set(forced.filter_rowids(tree, 2).tolist())
    rng = np.random.default_rng(11)
    recalls = []
    for _ in range(10):
        query = rng.normal(size=DIMENSION).astype(np.float32)
        query /= np.linalg.norm(query)
        rowids, _ = forced.dense_search(query, 10, 2, tree)
        assert set(rowids.tolist()) <= allowed and len(rowids) == 10
        recalls.append(len(set(rowids.tolist()) & set(exact_dense(forced, query, 2,
                                                                  allowed)[:10])) / 10)
    assert np.mean(recalls) >= 0.9
    forced.close()


@pytest.mark.parametrize("seq", [1, 2])
def test_exact_dense_search_bypasses_the_graph(loaded_dsn: str, seq: int) -> None:
    """A pinned or seeded request asks for ``exact`` (§7.7.1): the exact ranking at that
    snapshot even where the graph would be used, here for every query."""
    store = PostgresStore(loaded_dsn, exact_filtered=0)
    tree = validate({"field": "part", "op": "eq", "value": "even"}, store.field_types())
    allowed = set(store.filter_rowids(tree, seq).tolist())
    rng = np.random.default_rng(13)
    for _ in range(5):
        query = rng.normal(size=DIMENSION).astype(np.float32)
        query /= np.linalg.norm(query)
        rowids, _ = store.dense_search(query, 50, seq, exact=True)
        assert rowids.tolist() == exact_dense(store, query, seq)[:50]
        rowids, _ = store.dense_search(query, 50, seq, tree, exact=True)
        assert rowids.tolist() == exact_dense(store, query, seq, allowed)[:50]
    store.close()
