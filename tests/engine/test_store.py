"""SQLite system of record: upserts, deletes, MVCC versions (§7.7.1), GC, §8 filters (§15.4)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcpkit.engine.store import ChunkWrite, DocumentWrite, FeedbackRecord, SqliteStore
from rcpkit.protocol.filters import validate


def doc(
    doc_id: str, text: str = "body", meta: Mapping[str, Any] | None = None, chunks: int = 1
) -> DocumentWrite:
    pieces = [
        ChunkWrite(
            index=i,
            start=i * 10,
            end=i * 10 + 10,
            text=f"{text} {i}",
            context="",
            headings=(),
            vector=np.full(4, i + 1, dtype=np.float32),
        )
        for i in range(chunks)
    ]
    return DocumentWrite(
        doc_id=doc_id,
        text=text,
        meta=dict(meta or {}),
        filter_meta=dict(meta or {}),
        content_hash=f"{text}|{meta}|{chunks}",
        chunks=pieces,
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    opened = SqliteStore.open(tmp_path)
    yield opened
    opened.close()


def live_docs(store: SqliteStore, seq: int) -> set[str]:
    records = store.chunks(store.visible_rowids(seq).tolist())
    return {r.doc_id for r in records.values()}


def test_write_creates_versions_and_upsert_replaces(store: SqliteStore) -> None:
    first = store.write([doc("a", chunks=2), doc("b")], [])
    assert first.seq == 1 and len(first.added_rowids) == 3
    second = store.write([doc("a", text="new")], [])
    assert second.seq == 2
    assert live_docs(store, 1) == {"a", "b"} and live_docs(store, 2) == {"a", "b"}
    at_two = store.chunks(store.visible_rowids(2).tolist())
    assert sorted(r.text for r in at_two.values()) == ["body 0", "new 0"]
    at_one = store.chunks(store.visible_rowids(1).tolist())
    assert sorted(r.text for r in at_one.values()) == ["body 0", "body 0", "body 1"]
    assert min(second.added_rowids) > max(first.added_rowids)  # rowids never reused


def test_identical_upsert_is_a_no_op(store: SqliteStore) -> None:
    store.write([doc("a")], [])
    again = store.write([doc("a")], [])
    assert again.seq == 1 and again.changed_ids == [] and again.added_rowids == []
    assert store.counts().stored_rows == 1


def test_delete_is_idempotent_with_exact_counts(store: SqliteStore) -> None:
    store.write([doc("a"), doc("b")], [])
    assert store.write([], ["a", "missing"]).deleted == 1
    repeat = store.write([], ["a"])
    assert repeat.deleted == 0 and repeat.seq == 2
    assert live_docs(store, 2) == {"b"} and live_docs(store, 1) == {"a", "b"}
    assert store.counts().documents == 1


def test_gc_respects_retention_and_logs_removals(store: SqliteStore) -> None:
    store.write([doc("a")], [])
    store.write([doc("a", text="v2")], [])
    store.write([doc("a", text="v3")], [])
    assert store.collect_garbage(keep_versions=5, keep_seconds=0, now=1e12) == []
    position = store.log_position()
    removed = store.collect_garbage(keep_versions=0, keep_seconds=0, now=1e12)
    assert len(removed) == 2 and store.gc_floor() == 3
    assert store.counts().stored_rows == 1
    delta = store.delta_since(position)
    assert delta.removed == sorted(removed) and delta.added == []
    # A retention window in seconds keeps recent versions even with keep_versions=0.
    store.write([doc("a", text="v4")], [])
    assert store.collect_garbage(keep_versions=0, keep_seconds=3600, now=time.time()) == []


def test_delta_nets_out_rows_added_and_collected(store: SqliteStore) -> None:
    store.write([doc("a")], [])
    store.write([doc("a", text="v2")], [])
    store.collect_garbage(keep_versions=0, keep_seconds=0, now=1e12)
    delta = store.delta_since(0)
    assert len(delta.added) == 1 and delta.removed == []
    assert [b.rowids for b in store.iter_rows(delta.added)] == [delta.added]


def test_idempotency_and_feedback_persist(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path)
    store.write(
        [doc("a")],
        [],
        new_fields={"lang": "keyword"},
        idempotency_key="k1",
        reply={"ids": ["a"], "chunks": 1},
    )
    store.record_feedback([FeedbackRecord(hit_id="a#0", doc_id="a", poison_suspected=True)] * 2)
    store.record_feedback([FeedbackRecord(hit_id="source:feed", doc_id="")])  # a clear
    database_id = store.database_id
    store.close()
    reopened = SqliteStore.open(tmp_path)
    assert reopened.database_id == database_id
    assert reopened.idempotent_reply("k1") == ({"ids": ["a"], "chunks": 1}, 1)
    assert reopened.field_types() == {"lang": "keyword"}
    assert reopened.poison_counts(reopened.feedback_position()) == {"a": 2}
    assert reopened.poison_counts(1) == {"a": 1}
    position = reopened.feedback_position()
    assert reopened.poison_clears(position) == {"source:feed": position}
    assert reopened.poison_clears(position - 1) == {}
    assert reopened.live_meta(["a", "gone"]) == {"a": {}}
    reopened.close()


FIELDS = {
    "lang": "keyword",
    "body": "text",
    "year": "int",
    "score": "float",
    "public": "bool",
    "published": "date",
    "tags": "keyword",
}
DOCS = {
    "en": {
        "lang": "en",
        "body": "Graph neural nets",
        "year": 2020,
        "score": 0.5,
        "public": True,
        "published": 1_600_000_000_000,
        "tags": ["ml", "graphs"],
    },
    "fr": {
        "lang": "fr",
        "body": "Réseaux de neurones",
        "year": 2023,
        "score": 1.5,
        "public": False,
        "published": 1_700_000_000_000,
        "tags": ["ml"],
    },
    "bare": {"lang": "de"},
}

FILTER_CASES: list[tuple[str, dict[str, Any], set[str]]] = [
    ("keyword eq", {"field": "lang", "op": "eq", "value": "en"}, {"en"}),
    ("keyword ne", {"field": "lang", "op": "ne", "value": "en"}, {"fr", "bare"}),
    ("keyword in", {"field": "lang", "op": "in", "value": ["en", "de"]}, {"en", "bare"}),
    ("keyword nin", {"field": "lang", "op": "nin", "value": ["en"]}, {"fr", "bare"}),
    ("keyword contains", {"field": "lang", "op": "contains", "value": "f"}, {"fr"}),
    ("keyword exists", {"field": "tags", "op": "exists", "value": True}, {"en", "fr"}),
    ("keyword missing", {"field": "tags", "op": "exists", "value": False}, {"bare"}),
    ("array eq", {"field": "tags", "op": "eq", "value": "graphs"}, {"en"}),
    ("array contains", {"field": "tags", "op": "contains", "value": "ml"}, {"en", "fr"}),
    ("array in", {"field": "tags", "op": "in", "value": ["graphs", "x"]}, {"en"}),
    ("array nin", {"field": "tags", "op": "nin", "value": ["graphs"]}, {"fr", "bare"}),
    ("text contains", {"field": "body", "op": "contains", "value": "seaux"}, {"fr"}),
    (
        "text contains is case-sensitive",
        {"field": "body", "op": "contains", "value": "graph"},
        set(),
    ),
    ("text eq", {"field": "body", "op": "eq", "value": "Graph neural nets"}, {"en"}),
    ("int eq", {"field": "year", "op": "eq", "value": 2020}, {"en"}),
    ("int ne", {"field": "year", "op": "ne", "value": 2020}, {"fr", "bare"}),
    ("int gt", {"field": "year", "op": "gt", "value": 2020}, {"fr"}),
    ("int gte", {"field": "year", "op": "gte", "value": 2020}, {"en", "fr"}),
    ("int lt", {"field": "year", "op": "lt", "value": 2023}, {"en"}),
    ("int lte", {"field": "year", "op": "lte", "value": 2023}, {"en", "fr"}),
    ("int in", {"field": "year", "op": "in", "value": [2023, 1999]}, {"fr"}),
    ("int nin", {"field": "year", "op": "nin", "value": [2023]}, {"en", "bare"}),
    ("int exists", {"field": "year", "op": "exists", "value": True}, {"en", "fr"}),
    ("float gt", {"field": "score", "op": "gt", "value": 1}, {"fr"}),
    ("float lte", {"field": "score", "op": "lte", "value": 0.5}, {"en"}),
    ("float eq", {"field": "score", "op": "eq", "value": 1.5}, {"fr"}),
    ("bool eq", {"field": "public", "op": "eq", "value": True}, {"en"}),
    ("bool ne", {"field": "public", "op": "ne", "value": True}, {"fr", "bare"}),
    ("bool in", {"field": "public", "op": "in", "value": [False]}, {"fr"}),
    (
        "date gte string",
        {"field": "published", "op": "gte", "value": "2022-01-01T00:00:00Z"},
        {"fr"},
    ),
    ("date lt ms", {"field": "published", "op": "lt", "value": 1_650_000_000_000}, {"en"}),
    ("date eq", {"field": "published", "op": "eq", "value": 1_600_000_000_000}, {"en"}),
    (
        "and",
        {
            "and": [
                {"field": "year", "op": "gte", "value": 2020},
                {"field": "lang", "op": "eq", "value": "fr"},
            ]
        },
        {"fr"},
    ),
    (
        "or",
        {
            "or": [
                {"field": "lang", "op": "eq", "value": "de"},
                {"field": "year", "op": "lt", "value": 2021},
            ]
        },
        {"en", "bare"},
    ),
    ("not", {"not": {"field": "lang", "op": "eq", "value": "en"}}, {"fr", "bare"}),
]


@pytest.fixture
def filtered(store: SqliteStore) -> SqliteStore:
    store.write([doc(name, meta=meta) for name, meta in DOCS.items()], [], new_fields=FIELDS)
    return store


@pytest.mark.parametrize(
    ("label", "wire", "expected"), FILTER_CASES, ids=[case[0] for case in FILTER_CASES]
)
def test_filter_operator_by_field_type(
    filtered: SqliteStore, label: str, wire: dict[str, Any], expected: set[str]
) -> None:
    tree = validate(wire, filtered.field_types())
    rows = filtered.filter_rowids(tree, filtered.current_seq())
    assert {r.doc_id for r in filtered.chunks(rows.tolist()).values()} == expected, label


def test_filter_values_are_bound_not_concatenated(filtered: SqliteStore) -> None:
    hostile = "en' OR 1=1; DROP TABLE chunks; --"
    tree = validate({"field": "lang", "op": "eq", "value": hostile}, filtered.field_types())
    assert filtered.filter_rowids(tree, 1).tolist() == []
    tree = validate(
        {"field": "body", "op": "contains", "value": "%' OR '1'='1"}, filtered.field_types()
    )
    assert filtered.filter_rowids(tree, 1).tolist() == []
    assert filtered.counts().stored_rows == 3


def test_filter_is_evaluated_at_the_requested_version(filtered: SqliteStore) -> None:
    filtered.write([doc("en", meta={**DOCS["en"], "lang": "es"})], [])
    tree = validate({"field": "lang", "op": "eq", "value": "en"}, filtered.field_types())
    assert len(filtered.filter_rowids(tree, 1)) == 1
    assert len(filtered.filter_rowids(tree, 2)) == 0
