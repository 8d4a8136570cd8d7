"""The Engine on PostgreSQL behaves as on the embedded store (no loss of
behaviour): same hits and scores for every mode, filters (§8), pinned snapshots (§7.7.1),
cursors (§10), upserts and deletes (§7.10, §7.11) — with recall computed in the database
(``pg_recall = "database"``, the default) and from in-memory indexes (``"memory"``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from engine.test_pipeline import CORPUS, make_config
from rcpkit.engine.core import Engine
from rcpkit.engine.errors import Unavailable
from rcpkit.engine.models.embedding import HashingEmbedder
from rcpkit.engine.store.postgres import PostgresStore
from rcpkit.engine.types import DocumentIn, SearchRequest

REQUESTS = [
    SearchRequest("where do bees find flowers", mode="sparse"),
    SearchRequest("where do bees find flowers", mode="dense"),
    SearchRequest("bees flowers nest", mode="hybrid", fusion="rrf"),
    SearchRequest("bees flowers nest", mode="hybrid", fusion="convex", alpha=0.3),
    SearchRequest("bees", filter={"field": "lang", "op": "eq", "value": "es"}),
    SearchRequest("yeast compost stars", filter={"field": "year", "op": "gte", "value": 2019},
                  k=2),
    SearchRequest("bees", unit="document", mmr_lambda=0.5),
]


def postgres_engine(dsn: str, data_dir: Path, recall: str = "database") -> Engine:
    return Engine(make_config(data_dir, store={"pg_recall": recall}), PostgresStore.open(dsn),
                  HashingEmbedder(64), {})


@pytest.fixture(params=["database", "memory"])
def pair(request: pytest.FixtureRequest, pg_dsn: str,
         tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    embedded = Engine.open(make_config(tmp_path / "sqlite"))
    on_postgres = postgres_engine(pg_dsn, tmp_path / "pg", request.param)
    for engine in (embedded, on_postgres):
        engine.add(CORPUS)
        engine.add([DocumentIn("Bumblebees also visit flowers in cold weather.", id="bumble",
                               meta={"tag": "bees", "year": 2024, "lang": "en"})])
        engine.delete(["stars"])
    yield embedded, on_postgres
    embedded.close()
    on_postgres.close()


def ranking(engine: Engine, request: SearchRequest) -> list[tuple[str, float]]:
    return [(hit.id, round(hit.score, 5)) for hit in engine.search(request).hits]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: f"{r.mode}-{r.query[:12]}")
def test_same_hits_and_scores_as_the_embedded_store(pair: tuple[Engine, Engine],
                                                    request_: SearchRequest) -> None:
    embedded, on_postgres = pair
    assert ranking(on_postgres, request_) == ranking(embedded, request_)
    assert ranking(on_postgres, request_)


@pytest.mark.parametrize("mode", ["sparse", "dense", "hybrid"])
def test_same_pages_and_pinned_snapshots_as_the_embedded_store(pair: tuple[Engine, Engine],
                                                               mode: str) -> None:
    pinned = [engine.index_version for engine in pair]
    for engine in pair:
        engine.add([DocumentIn("Bees nest in flowers and in hollow trees.", id="late",
                               meta={"lang": "en", "year": 2025})])
        engine.delete(["bumble"])

    def walk(engine: Engine, version: str | None) -> list[tuple[str, float]]:
        request = SearchRequest("bees flowers nest", k=2, mode=mode, index_version=version,
                                filter={"field": "lang", "op": "in", "value": ["en", "es"]})
        page = engine.search(request)
        seen = [(hit.id, round(hit.score, 5)) for hit in page.hits]
        while page.next_cursor is not None:
            page = engine.search(replace(request, cursor=page.next_cursor))
            seen.extend((hit.id, round(hit.score, 5)) for hit in page.hits)
        return seen

    embedded, on_postgres = pair
    old = walk(on_postgres, pinned[1])
    assert old == walk(embedded, pinned[0])
    assert "bumble#0" in {hit_id for hit_id, _ in old} and len(old) == len(set(old))
    latest = walk(on_postgres, None)
    assert latest == walk(embedded, None)
    assert "late#0" in {hit_id for hit_id, _ in latest}


def test_database_recall_keeps_no_in_memory_index(pg_dsn: str, tmp_path: Path) -> None:
    for recall in ("database", "memory"):
        engine = postgres_engine(pg_dsn, tmp_path / recall, recall)
        engine.add(CORPUS)
        assert engine.stats()["dense_rows"] == (0 if recall == "database" else len(CORPUS))
        engine.close()
    assert not (tmp_path / "database" / "indexes").exists()
    assert (tmp_path / "memory" / "indexes" / "CURRENT").exists()


def test_an_unknown_recall_choice_is_refused(pg_dsn: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pg_recall"):
        postgres_engine(pg_dsn, tmp_path, "elsewhere")


def test_pinned_snapshot_and_cursor_survive_later_writes(pair: tuple[Engine, Engine]) -> None:
    _, engine = pair
    first = engine.search(SearchRequest("bees flowers", k=1))
    assert first.next_cursor is not None
    engine.add([DocumentIn("Bees and flowers, flowers and bees.", id="late")])
    pinned = engine.search(SearchRequest("bees flowers", k=10,
                                         index_version=first.index_version))
    assert "late#0" not in {h.id for h in pinned.hits}
    second = engine.search(SearchRequest("bees flowers", k=1, cursor=first.next_cursor))
    assert second.index_version == first.index_version
    assert second.hits[0].id == pinned.hits[1].id
    assert "late#0" in {h.id for h in engine.search(SearchRequest("bees flowers")).hits}


def test_reopening_rebuilds_from_the_database(pg_dsn: str, tmp_path: Path) -> None:
    engine = postgres_engine(pg_dsn, tmp_path / "a")
    engine.add(CORPUS)
    expected = ranking(engine, REQUESTS[2])
    engine.close()
    # A different data directory: no persisted indexes, so they are rebuilt from PostgreSQL.
    reopened = postgres_engine(pg_dsn, tmp_path / "b", "memory")
    assert ranking(reopened, REQUESTS[2]) == expected
    assert reopened.stats()["documents"] == len(CORPUS)
    reopened.close()


def test_a_different_embedder_is_refused(pg_dsn: str, tmp_path: Path) -> None:
    postgres_engine(pg_dsn, tmp_path / "a").close()
    with pytest.raises(Unavailable):
        Engine(make_config(tmp_path / "b", embedder={"hashing_dimension": 32}),
               PostgresStore.open(pg_dsn), HashingEmbedder(32), {})
