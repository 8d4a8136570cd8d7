"""In-memory §8 filter columns (engine/columns.py) against the SQL filter of the SQLite store.

The SQL compiler defines the semantics (three-valued ``not``, ``ne``/``nin`` on absent fields,
array elements, byte-ordered strings); every case of the store and wire filter tables and
random trees over random metadata must select exactly the rows ``filter_rowids`` selects.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_store import DOCS, FIELDS, FILTER_CASES, doc

from rcpkit.engine.config import EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.indexes.columns import FilterColumns
from rcpkit.engine.store import SqliteStore
from rcpkit.engine.types import DocumentIn
from rcpkit.protocol.filters import FilterNode, validate

sys.path.insert(0, str(Path(__file__).parent / "wire"))
from test_wire_filters import CASES as WIRE_CASES
from test_wire_filters import DOCS as WIRE_DOCS


def build_columns(store: SqliteStore) -> FilterColumns:
    """The columns of every stored row, fed the way the engine feeds them."""
    columns = FilterColumns()
    for batch in store.iter_rows():
        records = store.chunks(batch.rowids)
        columns.add(batch.rowids, [records[r].filter_meta for r in batch.rowids])
    return columns


def assert_same_rows(store: SqliteStore, columns: FilterColumns, tree: FilterNode,
                     seq: int) -> None:
    visible = store.visible_rowids(seq)
    size = int(visible.max()) + 1 if len(visible) else 0
    in_view = np.zeros(size, dtype=bool)
    in_view[visible] = True
    selected = np.flatnonzero(columns.mask(tree, size, store.field_types()) & in_view)
    assert selected.tolist() == store.filter_rowids(tree, seq).tolist(), tree


@pytest.fixture
def filtered(tmp_path: Path) -> Any:
    store = SqliteStore.open(tmp_path)
    store.write([doc(name, meta=meta) for name, meta in DOCS.items()], [], new_fields=FIELDS)
    yield store
    store.close()


@pytest.mark.parametrize("wire", [case[1] for case in FILTER_CASES],
                         ids=[case[0] for case in FILTER_CASES])
def test_store_table_matches_sql(filtered: SqliteStore, wire: dict[str, Any]) -> None:
    columns = build_columns(filtered)
    tree = validate(wire, filtered.field_types())
    assert_same_rows(filtered, columns, tree, filtered.current_seq())
    assert_same_rows(filtered, columns, validate({"not": wire}, filtered.field_types()),
                     filtered.current_seq())


def test_wire_table_matches_sql(tmp_path: Path) -> None:
    """The wire table's corpus, normalised by the engine (dates as epoch-ms, inferred types)."""
    config = EngineConfig(data_dir=tmp_path,
                          embedder=EmbedderConfig(name="hashing")).with_overrides(
        field_types={"summary": "text"})
    with Engine.open(config) as engine:
        engine.add([DocumentIn(text=f"document {d['id']}", id=d["id"], meta=d["meta"])
                    for d in WIRE_DOCS])
    store = SqliteStore.open(tmp_path)
    try:
        columns = build_columns(store)
        schema = store.field_types()
        for wire in WIRE_CASES:
            for node in (wire, {"not": wire}):
                assert_same_rows(store, columns, validate(node, schema), store.current_seq())
    finally:
        store.close()


# "mix" is untyped ("any"): its rows and filter values mix strings, numbers and booleans.
SCHEMA = {"kw": "keyword", "txt": "text", "n": "int", "x": "float", "flag": "bool",
          "when": "date", "mix": "any", "ghost": "keyword"}
WORDS = st.sampled_from(["a", "b", "ab", "B", "ba", "é", "1", ""])
MIXED = st.one_of(WORDS, st.integers(-2, 12), st.booleans(), st.sampled_from([0.5, 1.0, 10.5]))
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "kw": st.one_of(WORDS, st.lists(WORDS, max_size=3)),
    "txt": st.text(alphabet="abAB é", max_size=6),
    "n": st.integers(-3, 3),
    "x": st.floats(-2, 2, allow_nan=False).map(lambda v: round(v, 1)),
    "flag": st.booleans(),
    "when": st.integers(0, 5).map(lambda day: day * 86_400_000),
    "mix": st.one_of(MIXED, st.lists(MIXED, max_size=3)),
}
METAS = st.lists(st.fixed_dictionaries(
    {}, optional={name: st.one_of(st.none(), values) for name, values in VALUES.items()}),
    min_size=1, max_size=8)


def conditions() -> st.SearchStrategy[dict[str, Any]]:
    def leaf(field: str, ftype: str) -> st.SearchStrategy[dict[str, Any]]:
        scalar = (WORDS if ftype in ("keyword", "text") else MIXED if ftype == "any"
                  else VALUES[field])
        ordered = VALUES["n"] if ftype == "any" else scalar
        ops = ["eq", "ne", "in", "nin", "exists"]
        if ftype in ("keyword", "text", "any"):
            ops.append("contains")
        if ftype in ("int", "float", "date", "any"):
            ops += ["gt", "gte", "lt", "lte"]
        return st.sampled_from(ops).flatmap(lambda op: st.builds(
            lambda value: {"field": field, "op": op, "value": value},
            st.booleans() if op == "exists"
            else st.lists(scalar, max_size=3) if op in ("in", "nin")
            else ordered if op in ("gt", "gte", "lt", "lte") else scalar))

    return st.one_of(*(leaf(field, ftype) for field, ftype in SCHEMA.items()))


TREES = st.recursive(conditions(), lambda children: st.one_of(
    st.builds(lambda nodes: {"and": nodes}, st.lists(children, min_size=1, max_size=3)),
    st.builds(lambda nodes: {"or": nodes}, st.lists(children, min_size=1, max_size=3)),
    st.builds(lambda node: {"not": node}, children)), max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(metas=METAS, trees=st.lists(TREES, min_size=1, max_size=5))
def test_random_trees_match_sql(metas: list[dict[str, Any]], trees: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as work:
        store = SqliteStore.open(work)
        try:
            known = {name: ftype for name, ftype in SCHEMA.items() if name != "ghost"}
            store.write([doc(f"d{i}", meta=meta) for i, meta in enumerate(metas)], [],
                        new_fields=known)
            columns = build_columns(store)
            for wire in trees:
                assert_same_rows(store, columns, validate(wire, SCHEMA), store.current_seq())
        finally:
            store.close()


def test_removed_rows_are_forgotten_and_versions_still_agree(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path)
    try:
        store.write([doc(f"d{i}", meta={"lang": "en" if i % 2 else "fr", "year": i},
                         chunks=2) for i in range(10)], [], new_fields={"lang": "keyword",
                                                                         "year": "int"})
        columns = build_columns(store)
        store.write([doc(f"d{i}", text="new", meta={"lang": "de"}) for i in range(6)], [])
        delta = store.delta_since(0)
        records = store.chunks(delta.added)
        columns.add(delta.added, [records[r].filter_meta for r in delta.added])
        trees = [validate(w, store.field_types()) for w in (
            {"field": "lang", "op": "eq", "value": "en"},
            {"field": "lang", "op": "ne", "value": "de"},
            {"not": {"field": "year", "op": "gte", "value": 3}})]
        for tree in trees:
            assert_same_rows(store, columns, tree, 1)
            assert_same_rows(store, columns, tree, 2)
        removed = np.asarray(store.collect_garbage(0, 0, now=2e12), dtype=np.int64)
        assert len(removed) == 12
        columns.remove(removed)
        for tree in trees:
            assert_same_rows(store, columns, tree, 2)
            assert not columns.mask(tree, 64, store.field_types())[removed].any()
    finally:
        store.close()
