"""Saved §8 filter columns (``FilterColumns.save``/``load``) and the engine's use of them.

A loaded image must select exactly the rows of the columns it was saved from and of columns
rebuilt from the surviving rows, for every operator family of §8 and under later writes; an
engine reopens on its saved columns without reading the filter metadata of the store, catches
up the writes made after the save, and rebuilds columns it cannot read (older states saved
without them, damaged files) instead of failing to open.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_columns import METAS, SCHEMA, TREES

from rcpkit.engine.config import EmbedderConfig, EngineConfig, IndexConfig, RetentionConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.indexes.columns import FilterColumns
from rcpkit.engine.store import SqliteStore
from rcpkit.engine.types import DocumentIn, SearchRequest
from rcpkit.protocol.filters import validate

DAY_MS = 86_400_000
# Every kind a column holds: numbers (integer, real), booleans, dates (epoch-ms), strings,
# string arrays, mixed arrays with nested containers, objects, JSON nulls and absent fields.
VARIED: list[dict[str, Any]] = [
    {"kw": "alpha", "n": 1, "x": 0.5, "flag": True, "when": 3 * DAY_MS, "mix": "a"},
    {"kw": ["alpha", "beta"], "n": -2, "flag": False, "mix": [1, "b", [2, 3]], "txt": "Ab é"},
    {"kw": "beta", "x": 10.5, "when": 0, "mix": {"k": "v", "n": 1}, "txt": "ba"},
    {"n": None, "mix": True, "obj": {"deep": ["x", 1]}},
    {"kw": [], "mix": 1.0, "flag": True},
    {"kw": "gamma", "n": 3, "x": -1.5, "when": 5 * DAY_MS, "mix": ["a", None, True]},
    {},
    {"kw": "alpha", "mix": 2, "txt": "", "obj": {"deep": "x"}},
]
WIRE_TREES: list[dict[str, Any]] = [
    {"field": "kw", "op": "eq", "value": "alpha"},
    {"field": "kw", "op": "ne", "value": "beta"},
    {"field": "kw", "op": "in", "value": ["beta", "gamma"]},
    {"field": "kw", "op": "nin", "value": ["alpha"]},
    {"field": "kw", "op": "contains", "value": "mm"},
    {"field": "txt", "op": "contains", "value": "b"},
    {"field": "mix", "op": "contains", "value": "b"},
    {"field": "mix", "op": "eq", "value": 1},
    {"field": "mix", "op": "in", "value": [True, "a"]},
    {"field": "obj", "op": "contains", "value": "x"},
    {"field": "n", "op": "gt", "value": 0},
    {"field": "n", "op": "lte", "value": 1},
    {"field": "x", "op": "gte", "value": 0.5},
    {"field": "x", "op": "lt", "value": 0},
    {"field": "flag", "op": "eq", "value": True},
    {"field": "flag", "op": "ne", "value": True},
    {"field": "when", "op": "gte", "value": DAY_MS},
    {"field": "when", "op": "exists", "value": False},
    {"field": "n", "op": "exists", "value": True},
    {"field": "ghost", "op": "ne", "value": "x"},
    {"and": [{"field": "kw", "op": "exists", "value": True},
             {"not": {"field": "n", "op": "gt", "value": 0}}]},
    {"or": [{"field": "flag", "op": "eq", "value": False},
            {"not": {"field": "x", "op": "lt", "value": 1}}]},
]
UNIT_SCHEMA = {**SCHEMA, "obj": "any"}


def build(rowids: Sequence[int], metas: Sequence[dict[str, Any]]) -> FilterColumns:
    columns = FilterColumns()
    columns.add(rowids, metas)
    return columns


def reloaded(columns: FilterColumns) -> FilterColumns:
    with tempfile.TemporaryDirectory() as work:
        columns.save(Path(work))
        return FilterColumns.load(Path(work))


def assert_same_masks(expected: FilterColumns, actual: FilterColumns, trees: Sequence[Any],
                      size: int) -> None:
    for wire in trees:
        for node in (wire, {"not": wire}):
            tree = validate(node, UNIT_SCHEMA)
            assert (np.flatnonzero(actual.mask(tree, size, UNIT_SCHEMA)).tolist()
                    == np.flatnonzero(expected.mask(tree, size, UNIT_SCHEMA)).tolist()), node


def test_round_trip_keeps_every_operator_family_and_forgets_removed_rows() -> None:
    rowids = [3 * i + 1 for i in range(len(VARIED))]  # gaps between rowids
    original = build(rowids, VARIED)
    removed = [rowids[1], rowids[5]]  # fewer than held: left to lazy compaction
    original.remove(np.asarray(removed, dtype=np.int64))
    survivors = [(r, m) for r, m in zip(rowids, VARIED, strict=True) if r not in removed]
    rebuilt = build([r for r, _ in survivors], [m for _, m in survivors])
    loaded = reloaded(original)
    size = rowids[-1] + 5  # masks longer than the saved image
    assert_same_masks(original, loaded, WIRE_TREES, size)
    assert_same_masks(rebuilt, loaded, WIRE_TREES, size)
    # The loaded columns stay live: later rows and removals behave as on the original.
    later = [{"kw": "alpha", "n": 7, "mix": ["b"]}, {"flag": False, "txt": "zab"}]
    for columns in (original, loaded):
        columns.add([size + 1, size + 2], later)
        columns.remove(np.asarray([rowids[0], size + 2], dtype=np.int64))
    assert_same_masks(original, loaded, WIRE_TREES, size + 8)


def test_empty_and_fully_removed_columns_round_trip() -> None:
    tree = validate({"field": "kw", "op": "ne", "value": "a"}, UNIT_SCHEMA)
    assert not reloaded(FilterColumns()).mask(tree, 4, UNIT_SCHEMA).any()
    emptied = build([0, 1], [{"kw": "a"}, {"kw": ["b"]}])
    emptied.remove(np.asarray([0, 1], dtype=np.int64))
    loaded = reloaded(emptied)
    assert not loaded.mask(tree, 4, UNIT_SCHEMA).any()
    loaded.add([2], [{"kw": "b"}])
    assert np.flatnonzero(loaded.mask(tree, 4, UNIT_SCHEMA)).tolist() == [2]


@settings(max_examples=40, deadline=None)
@given(metas=METAS, trees=st.lists(TREES, min_size=1, max_size=4), data=st.data())
def test_random_round_trips_match_original_and_rebuilt(metas: list[dict[str, Any]],
                                                       trees: list[Any],
                                                       data: st.DataObject) -> None:
    rowids = [2 * i for i in range(len(metas))]
    removed = data.draw(st.sets(st.sampled_from(rowids)))
    original = build(rowids, metas)
    original.remove(np.asarray(sorted(removed), dtype=np.int64))
    kept = [i for i, rowid in enumerate(rowids) if rowid not in removed]
    rebuilt = build([rowids[i] for i in kept], [metas[i] for i in kept])
    loaded = reloaded(original)
    size = 2 * len(metas) + 3
    assert_same_masks(original, loaded, trees, size)
    assert_same_masks(rebuilt, loaded, trees, size)


def test_save_replaces_the_previous_image_and_load_rejects_damage(tmp_path: Path) -> None:
    columns = build([0, 1], [{"kw": "a"}, {"kw": ["a", "b"], "n": 2}])
    columns.save(tmp_path)
    columns.add([2], [{"kw": "c"}])
    columns.save(tmp_path)
    assert len(list(tmp_path.glob("columns-*.npz"))) == 1
    tree = validate({"field": "kw", "op": "in", "value": ["a", "c"]}, UNIT_SCHEMA)
    assert FilterColumns.load(tmp_path).mask(tree, 3, UNIT_SCHEMA).tolist() == [True] * 3
    manifest_path = tmp_path / "columns.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["fields"][0]["keys"].pop()  # keys no longer match the posting counts
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError):
        FilterColumns.load(tmp_path)
    manifest_path.write_text(json.dumps({**manifest, "format": "something-else"}))
    with pytest.raises(ValueError):
        FilterColumns.load(tmp_path)
    with pytest.raises(OSError):
        FilterColumns.load(tmp_path / "missing")


# ── the engine ───────────────────────────────────────────────────────────────

ENGINE_FILTERS: list[dict[str, Any]] = [
    {"field": "lang", "op": "eq", "value": "fr"},
    {"field": "lang", "op": "nin", "value": ["en", "de"]},
    {"field": "year", "op": "gt", "value": 2003},
    {"field": "score", "op": "lte", "value": 2.5},
    {"field": "public", "op": "eq", "value": True},
    {"field": "published", "op": "gte", "value": "2024-05-01"},
    {"field": "tags", "op": "contains", "value": "t1"},
    {"field": "tags", "op": "exists", "value": False},
    {"field": "title", "op": "contains", "value": "ote 1"},
    {"or": [{"field": "lang", "op": "eq", "value": "de"},
            {"not": {"field": "year", "op": "lt", "value": 2005}}]},
]


def document(i: int, text: str = "common words") -> DocumentIn:
    meta: dict[str, Any] = {"lang": ("en", "fr", "de")[i % 3], "year": 2000 + i % 7,
                            "score": i / 4, "public": i % 2 == 0,
                            "published": f"2024-{1 + i % 9:02d}-1{i % 10}"}
    if i % 6:
        meta["tags"] = [f"t{i % 4}", f"t{i % 5}"]
    if i % 4 == 0:
        meta["title"] = f"note {i}"
    return DocumentIn(f"{text} {i}", id=f"d{i}", meta=meta)


def config(data_dir: Path) -> EngineConfig:
    # Old versions are collected at once, so the saved columns hold removed rows too.
    return EngineConfig(data_dir=data_dir, embedder=EmbedderConfig(name="hashing"),
                        index=IndexConfig(save_every=1000),
                        retention=RetentionConfig(versions=1, seconds=0))


def filtered_hits(engine: Engine) -> list[list[str]]:
    return [sorted(hit.id for hit in engine.search(SearchRequest(
        "common", k=100, mode="sparse", filter=wire)).hits) for wire in ENGINE_FILTERS]


def populate(data_dir: Path) -> list[list[str]]:
    """A saved engine state after upserts and deletes; the filtered hits at close."""
    with Engine.open(config(data_dir)) as engine:
        engine.add([document(i) for i in range(40)])
        engine.add([document(i, "common rewritten") for i in range(0, 40, 5)])
        engine.delete([f"d{i}" for i in range(1, 40, 7)])
        hits = filtered_hits(engine)
    assert all(hits) and all(len(h) < 34 for h in hits)  # every filter selects a subset
    return hits


def open_spied(data_dir: Path, monkeypatch: pytest.MonkeyPatch
               ) -> tuple[Engine, list[tuple[str, Any]]]:
    """The engine on a store whose row reads are recorded (name, rowids) while it opens."""
    store = SqliteStore.open(data_dir)
    reads: list[tuple[str, Any]] = []
    for name in ("chunks", "iter_rows"):
        def spy(*args: Any, _name: str = name, _read: Any = getattr(store, name),
                **kwargs: Any) -> Any:
            reads.append((_name, list(args[0]) if args and args[0] is not None else None))
            return _read(*args, **kwargs)
        monkeypatch.setattr(store, name, spy)
    engine = Engine.open(config(data_dir), store=store)
    return engine, list(reads)


def state_dir(data_dir: Path) -> Path:
    root = data_dir / "indexes"
    return root / (root / "CURRENT").read_text().strip()


def test_reopen_uses_the_saved_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = populate(tmp_path)
    assert (state_dir(tmp_path) / "columns" / "columns.json").is_file()
    engine, reads = open_spied(tmp_path, monkeypatch)
    with engine:
        assert reads == []  # no filter metadata (or any row) was read from the store
        assert filtered_hits(engine) == before


@pytest.mark.parametrize("damage", ["state without columns", "garbage arrays"])
def test_unreadable_columns_are_rebuilt_from_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        damage: str) -> None:
    before = populate(tmp_path)
    columns_dir = state_dir(tmp_path) / "columns"
    if damage == "state without columns":  # as saved before the columns were persisted
        shutil.rmtree(columns_dir)
    else:
        for arrays in columns_dir.glob("columns-*.npz"):
            arrays.write_bytes(b"garbage")
    with caplog.at_level(logging.WARNING, logger="rcpkit.engine"):
        engine, reads = open_spied(tmp_path, monkeypatch)
    with engine:
        assert "filter columns" in caplog.text
        assert ("iter_rows", None) in reads  # the columns were rebuilt from every row
        assert filtered_hits(engine) == before
    FilterColumns.load(state_dir(tmp_path) / "columns")  # the close saved them again


def test_writes_after_the_save_are_caught_up(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    populate(tmp_path)
    crashing = Engine.open(config(tmp_path))
    crashing.add([document(i, "common late") for i in (2, 40, 41)])  # an upsert and two new
    crashing.delete(["d3"])
    expected = filtered_hits(crashing)
    crashing._store.close()  # a crash: the indexes are not saved on the way out
    engine, reads = open_spied(tmp_path, monkeypatch)
    with engine:
        assert ("iter_rows", None) not in reads  # only the logged rows were read
        read_rows = {rowid for name, rowids in reads if name == "iter_rows" for rowid in rowids}
        assert len(read_rows) == 3
        assert filtered_hits(engine) == expected
    assert any("d40#0" in hits for hits in expected)
    assert not any("d3#0" in hits for hits in expected)
