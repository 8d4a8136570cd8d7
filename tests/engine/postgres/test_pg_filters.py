"""§8 filters on PostgreSQL as containment over a GIN ``jsonb_path_ops`` index: the same
rows as the embedded backend for every operator family, the index usable for ``eq``/``in``,
and dense search under a selective filter as an exact scan of the filtered rows (§7.7)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rcpkit.engine.store import ChunkWrite, DocumentWrite, SqliteStore
from rcpkit.engine.store.postgres import PostgresStore
from rcpkit.protocol.filters import validate

DIMENSION = 8
FIELDS = {"n": "int", "x": "float", "kw": "keyword", "tags": "keyword", "flag": "bool",
          "body": "text", "when": "date", "release year": "int"}
# Stored shapes the validator does not police (a store keeps what it is given): numbers
# written as 7.0, numeric strings, arrays, nested arrays, quotes and spaces.
METAS: dict[str, dict[str, Any]] = {
    "int7": {"n": 7, "x": 7, "kw": "seven", "tags": ["a", "b"], "flag": True,
             "body": "Seven samurai", "when": 1_600_000_000_000, "release year": 1954},
    "float7": {"n": 7.0, "x": 7.5, "kw": "Seven", "tags": ["b"], "flag": False,
               "body": "seven seas", "when": 1_700_000_000_000},
    "string7": {"n": "7", "x": -1.25, "kw": "7", "tags": "a", "body": "7 up"},
    "array7": {"n": [7, 8], "x": 0.5, "kw": ["seven", "eight"], "tags": [], "flag": True},
    "nested7": {"n": [[7]], "kw": [["seven"]], "tags": [["a"]]},
    "int70": {"n": 70, "x": 7.0, "kw": 'say "seven"', "tags": ["a b"], "flag": False,
              "body": "", "when": 1_650_000_000_000, "release year": 2001},
    "bare": {},
}
CASES: list[tuple[str, dict[str, Any], set[str] | None]] = [
    # (label, wire filter, expected doc ids where the type subtlety is the point)
    ("int eq", {"field": "n", "op": "eq", "value": 7}, {"int7", "float7", "array7"}),
    ("int ne", {"field": "n", "op": "ne", "value": 7}, {"string7", "nested7", "int70", "bare"}),
    ("int in", {"field": "n", "op": "in", "value": [8, 70]}, {"array7", "int70"}),
    ("int nin", {"field": "n", "op": "nin", "value": [7]}, None),
    ("int in empty", {"field": "n", "op": "in", "value": []}, set()),
    ("int nin empty", {"field": "n", "op": "nin", "value": []}, set(METAS)),
    ("float eq integral", {"field": "x", "op": "eq", "value": 7.0}, {"int7", "int70"}),
    ("float eq", {"field": "x", "op": "eq", "value": 7.5}, {"float7"}),
    ("float in", {"field": "x", "op": "in", "value": [-1.25, 0.5]}, {"string7", "array7"}),
    ("float gt", {"field": "x", "op": "gt", "value": 0.5}, None),
    ("float lte", {"field": "x", "op": "lte", "value": 0.5}, None),
    ("keyword eq", {"field": "kw", "op": "eq", "value": "seven"}, {"int7", "array7"}),
    ("keyword eq quoted", {"field": "kw", "op": "eq", "value": 'say "seven"'}, {"int70"}),
    ("keyword eq numeric string", {"field": "kw", "op": "eq", "value": "7"}, {"string7"}),
    ("keyword ne", {"field": "kw", "op": "ne", "value": "seven"}, None),
    ("keyword in", {"field": "kw", "op": "in", "value": ["Seven", "eight"]},
     {"float7", "array7"}),
    ("keyword contains", {"field": "kw", "op": "contains", "value": "even"}, None),
    ("array eq", {"field": "tags", "op": "eq", "value": "a"}, {"int7", "string7"}),
    ("array in", {"field": "tags", "op": "in", "value": ["b", "a b"]},
     {"int7", "float7", "int70"}),
    ("array nin", {"field": "tags", "op": "nin", "value": ["b"]}, None),
    ("array contains", {"field": "tags", "op": "contains", "value": "a"}, None),
    ("bool eq", {"field": "flag", "op": "eq", "value": False}, {"float7", "int70"}),
    ("bool in", {"field": "flag", "op": "in", "value": [True]}, {"int7", "array7"}),
    ("text contains", {"field": "body", "op": "contains", "value": "even"}, None),
    ("text eq empty", {"field": "body", "op": "eq", "value": ""}, {"int70"}),
    ("date gte", {"field": "when", "op": "gte", "value": "2022-01-01T00:00:00Z"}, None),
    ("date eq", {"field": "when", "op": "eq", "value": 1_650_000_000_000}, {"int70"}),
    ("exists", {"field": "flag", "op": "exists", "value": True}, None),
    ("missing", {"field": "x", "op": "exists", "value": False}, None),
    ("field with a space", {"field": "release year", "op": "eq", "value": 2001}, {"int70"}),
    ("and", {"and": [{"field": "n", "op": "eq", "value": 7},
                     {"field": "flag", "op": "eq", "value": True}]}, {"int7", "array7"}),
    ("or", {"or": [{"field": "kw", "op": "eq", "value": "7"},
                   {"field": "x", "op": "lt", "value": 0}]}, None),
    ("not", {"not": {"field": "tags", "op": "in", "value": ["a", "b"]}}, None),
]


def corpus() -> list[DocumentWrite]:
    rng = np.random.default_rng(5)
    docs = []
    for doc_id, meta in METAS.items():
        vector = rng.normal(size=DIMENSION).astype(np.float32)
        vector /= np.linalg.norm(vector)
        docs.append(DocumentWrite(
            doc_id=doc_id, text=doc_id, meta=meta, filter_meta=meta, content_hash=doc_id,
            chunks=[ChunkWrite(index=0, start=0, end=len(doc_id), text=doc_id, context="",
                               headings=(), vector=vector)]))
    return docs


@pytest.fixture(scope="module")
def filters_dsn(new_schema: Callable[[], str]) -> str:
    return new_schema()


@pytest.fixture(scope="module")
def stores(filters_dsn: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SqliteStore,
                                                                      PostgresStore]]:
    """The same documents in both backends."""
    sqlite = SqliteStore.open(tmp_path_factory.mktemp("sqlite"))
    postgres = PostgresStore.open(filters_dsn)
    for store in (sqlite, postgres):
        store.write(corpus(), [], new_fields=FIELDS)
    yield sqlite, postgres
    sqlite.close()
    postgres.close()


def doc_ids(store: SqliteStore | PostgresStore, rowids: list[int]) -> list[str]:
    records = store.chunks(rowids)
    return [records[r].doc_id for r in rowids]


@pytest.mark.parametrize(("label", "wire", "expected"), CASES, ids=[c[0] for c in CASES])
def test_filters_select_the_rows_of_the_embedded_backend(
        stores: tuple[SqliteStore, PostgresStore], label: str, wire: dict[str, Any],
        expected: set[str] | None) -> None:
    sqlite, postgres = stores
    tree = validate(wire, FIELDS)
    embedded = set(doc_ids(sqlite, sqlite.filter_rowids(tree, 1).tolist()))
    assert set(doc_ids(postgres, postgres.filter_rowids(tree, 1).tolist())) == embedded, label
    if expected is not None:
        assert embedded == expected, label


@pytest.mark.parametrize(("label", "wire"), [(c[0], c[1]) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_dense_search_under_each_filter_ranks_the_embedded_rows(
        stores: tuple[SqliteStore, PostgresStore], label: str, wire: dict[str, Any]) -> None:
    """The pre-filtered exact scan returns exactly the filtered rows, best first."""
    sqlite, postgres = stores
    tree = validate(wire, FIELDS)
    allowed = sqlite.filter_rowids(tree, 1).tolist()
    vectors = {r: v for b in sqlite.iter_rows(allowed) for r, v in zip(b.rowids, b.vectors,
                                                                       strict=True)}
    query = np.ones(DIMENSION, dtype=np.float32) / np.sqrt(DIMENSION)
    expected = sorted(allowed, key=lambda r: (-float(vectors[r] @ query), r))
    rowids, _ = postgres.dense_search(query, len(METAS), 1, tree)
    assert doc_ids(postgres, rowids.tolist()) == doc_ids(sqlite, expected), label


def test_eq_and_in_can_use_the_gin_index(stores: tuple[SqliteStore, PostgresStore],
                                         filters_dsn: str) -> None:
    """On this small table the planner prefers a sequential scan; without it, containment
    must go through ``documents_filter`` (at 20k documents the planner picks it itself)."""
    dsn = filters_dsn
    options = conninfo_to_dict(dsn).get("options", "")
    with psycopg.connect(make_conninfo(dsn, options=f"{options} -c enable_seqscan=off")) as db:
        for value in ('{"kw": "seven"}', '{"kw": ["seven"]}'):
            plan = "\n".join(str(row[0]) for row in db.execute(
                "EXPLAIN SELECT row FROM documents WHERE filter_meta @> %s::jsonb", (value,)))
            assert "documents_filter" in plan, plan
        definition, options_set = db.execute(
            "SELECT pg_get_indexdef(c.oid), c.reloptions FROM pg_class c "
            "WHERE c.relname = 'documents_filter' AND c.relnamespace = "
            "current_schema()::regnamespace").fetchone() or ("", [])
    assert "gin (filter_meta jsonb_path_ops)" in definition
    assert options_set == ["fastupdate=off"]


def test_a_database_made_before_the_index_gets_it_on_open(pg_dsn: str) -> None:
    PostgresStore.open(pg_dsn).close()
    with psycopg.connect(pg_dsn, autocommit=True) as db:
        db.execute("DROP INDEX documents_filter")
    PostgresStore.open(pg_dsn).close()
    with psycopg.connect(pg_dsn) as db:
        assert db.execute("SELECT to_regclass('documents_filter')").fetchone() != (None,)


def index_scans(dsn: str, *, once: str | None = None, exceeds: int = 0) -> dict[str, int]:
    """Scans per index of the schema; with ``once``, after that index's count exceeds
    ``exceeds``: a closed store's backends flush their statistics as they exit."""
    deadline = time.monotonic() + 20
    while True:
        with psycopg.connect(dsn) as db:
            counts = {str(name): int(scans) for name, scans in db.execute(
                "SELECT indexrelname, idx_scan FROM pg_stat_user_indexes "
                "WHERE schemaname = current_schema()")}
        if once is None or counts[once] > exceeds or time.monotonic() > deadline:
            return counts
        time.sleep(0.1)


def test_selective_filters_scan_exactly_and_broad_ones_walk_the_graph(pg_dsn: str) -> None:
    """Up to ``exact_filtered`` eligible chunks the filter's documents come from the GIN
    index and no HNSW walk happens; beyond, the graph is walked (counted by the server)."""
    rng = np.random.default_rng(9)
    docs = []
    for i in range(200):
        vector = rng.normal(size=DIMENSION).astype(np.float32)
        meta = {"group": i % 20, "half": i % 2}
        docs.append(DocumentWrite(
            doc_id=f"d{i}", text="t", meta=meta, filter_meta=meta, content_hash=str(i),
            chunks=[ChunkWrite(index=0, start=0, end=1, text="t", context="", headings=(),
                               vector=vector / np.linalg.norm(vector))]))
    fields = {"group": "int", "half": "int"}
    writer = PostgresStore.open(pg_dsn)
    writer.write(docs, [], new_fields=fields)
    writer.close()
    query = np.ones(DIMENSION, dtype=np.float32)
    start = index_scans(pg_dsn)

    selective = PostgresStore(pg_dsn, exact_filtered=50)
    for wire in ({"field": "group", "op": "eq", "value": 3},  # 10 eligible chunks
                 {"field": "group", "op": "in", "value": [3, 4, 5]}):  # 30
        rowids, _ = selective.dense_search(query, 5, 1, validate(wire, fields))
        assert len(rowids) == 5
    selective.close()
    # The search's backend used the filter index (its statistics are in), not the graph.
    after_selective = index_scans(pg_dsn, once="documents_filter",
                                  exceeds=start["documents_filter"])
    assert after_selective["documents_filter"] > start["documents_filter"]
    assert after_selective["chunks_embedding"] == start["chunks_embedding"]

    broad = PostgresStore(pg_dsn, exact_filtered=50)  # 100 eligible chunks
    rowids, _ = broad.dense_search(query, 5, 1, validate(
        {"field": "half", "op": "eq", "value": 1}, fields))
    broad.close()
    assert len(rowids) == 5
    assert index_scans(pg_dsn, once="chunks_embedding",
                       exceeds=start["chunks_embedding"])["chunks_embedding"] > \
        start["chunks_embedding"]

