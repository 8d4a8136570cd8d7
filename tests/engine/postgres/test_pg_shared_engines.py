"""Scale-out on one database: engines in different processes answer consistently —
a write through one is visible through the other, and version tokens (§7.7.1) and cursors
(§10) minted by one are honoured by the other (``Engine.refresh`` before each request)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.test_pipeline import CORPUS, make_config
from engine.wire.engine_wire import HASHING_CONFIG, HttpEngine, make_data_dir
from rcpkit.engine.core import Engine
from rcpkit.engine.models.embedding import HashingEmbedder
from rcpkit.engine.store.postgres import PostgresStore
from rcpkit.engine.types import DocumentIn, SearchRequest


def ids(engine: Engine, query: str, **options: object) -> set[str]:
    return {hit.doc_id for hit in engine.search(SearchRequest(query, k=20, **options)).hits}


@pytest.mark.parametrize("recall", ["database", "memory"])
def test_two_engines_on_one_database_see_each_others_writes(pg_dsn: str, tmp_path: Path,
                                                            recall: str) -> None:
    first, second = (Engine(make_config(tmp_path / name, store={"pg_recall": recall}),
                            PostgresStore.open(pg_dsn), HashingEmbedder(64), {})
                     for name in ("one", "two"))
    added = first.add(CORPUS)
    assert "bees" in ids(second, "honeybees dance")
    second.delete(["bees"])
    assert "bees" not in ids(first, "honeybees dance")
    # A version minted by the first engine is served, identically, by the second.
    pinned = SearchRequest("honeybees dance", index_version=added.index_version)
    assert [h.id for h in first.search(pinned).hits] == [h.id for h in second.search(pinned).hits]
    page = first.search(SearchRequest("flowers bees", k=1))
    assert page.next_cursor is not None
    follow = second.search(SearchRequest("flowers bees", k=1, cursor=page.next_cursor))
    assert follow.index_version == page.index_version
    first.close()
    second.close()


def test_two_stateless_http_servers_answer_interleaved_requests(pg_dsn: str,
                                                                tmp_path: Path) -> None:
    config = f"backend = \"postgres\"\ndsn = {json.dumps(pg_dsn)}\n{HASHING_CONFIG}"
    servers = [HttpEngine(make_data_dir(tmp_path / name, config)) for name in ("a", "b")]
    a, b = servers
    try:
        documents = [{"id": d.id, "text": d.text, "meta": dict(d.meta or {})} for d in CORPUS]
        added = a.ok("index/add", {"documents": documents})

        def hits(server: HttpEngine, query: str, **options: object) -> list[str]:
            result = server.ok("retrieve", {"query": query, "k": 10, **options})
            return [hit["id"] for hit in result["hits"]]

        assert hits(b, "honeybees dance")[0] == "bees#0"
        b.ok("index/add", {"documents": [{"id": "late", "text": "Honeybees dance at dusk."}]})
        assert "late#0" in hits(a, "honeybees dance")
        deleted = a.ok("index/delete", {"ids": ["bees"]})
        assert deleted["deleted"] == 1
        assert "bees#0" not in hits(b, "honeybees dance")
        # Both serve the first snapshot by its token, with the same ranking.
        old = {"indexVersion": added["_meta"]["indexVersion"]}
        assert hits(a, "honeybees dance", **old) == hits(b, "honeybees dance", **old)
        assert "bees#0" in hits(b, "honeybees dance", **old)
        latest = [server.ok("retrieve", {"query": "bees", "k": 1})["indexVersion"]
                  for server in servers]
        assert latest[0] == latest[1] == deleted["_meta"]["indexVersion"]
    finally:
        for server in servers:
            server.close()


def test_documents_added_through_one_engine_exist_for_a_later_one(pg_dsn: str,
                                                                  tmp_path: Path) -> None:
    first = Engine(make_config(tmp_path / "one"), PostgresStore.open(pg_dsn),
                   HashingEmbedder(64), {})
    first.add([DocumentIn("Cranes lift steel beams.", id="crane")])
    second = Engine(make_config(tmp_path / "two"), PostgresStore.open(pg_dsn),
                    HashingEmbedder(64), {})
    assert ids(second, "steel beams") == {"crane"}
    assert second.index_version == first.index_version
    first.close()
    second.close()
