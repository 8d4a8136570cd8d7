"""``retrieve`` with ``unit: "tree-node"``, ``"community"`` and ``"node"`` (§7.7.2) on the
served engine: advertised in ``retrieve.units`` / ``levels`` (§6.1), hit shapes against the
schema with ``provenance.leaves``, ``level``, snapshot pinning (§7.7.1) after a delete, the
tree kept across a restart, and the chunk-only options refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_wire import Engine
from test_wire_graph import DOCS

from support.schema import assert_result

pytest.importorskip("scipy")
pytest.importorskip("igraph")


@pytest.fixture
def engine(serve: Any) -> Engine:
    started: Engine = serve()
    started.add(DOCS)
    return started


def units(engine: Engine, unit: str, query: str, **params: Any) -> dict[str, Any]:
    result = engine.retrieve(query, unit=unit, **params)
    assert_result("retrieve", result)
    return result


def test_units_and_levels_are_advertised(engine: Engine) -> None:
    retrieve = engine.info["capabilities"]["retrieve"]
    assert {"chunk", "community", "node", "tree-node"} <= set(retrieve["units"])
    assert retrieve["levels"] == engine.info["capabilities"]["graph"]["levels"] == 3


def test_tree_nodes_cover_their_leaves_at_every_level(engine: Engine) -> None:
    every = units(engine, "tree-node", "honey bee colony", k=50)["hits"]
    assert {hit["level"] for hit in every} == {0, 1, 2}
    known = {f"{doc['id']}#0" for doc in DOCS}
    for hit in every:
        assert hit["unit"] == "tree-node" and hit["text"]
        leaves = hit["provenance"]["leaves"]
        assert leaves and set(leaves) <= known and hit["meta"]["leafCount"] == len(leaves)
    # Level 0 is the coarsest: its nodes partition every chunk.
    top = units(engine, "tree-node", "honey bee colony", k=50, level=0)["hits"]
    assert {hit["level"] for hit in top} == {0}
    covered = [leaf for hit in top for leaf in hit["provenance"]["leaves"]]
    assert sorted(covered) == sorted(known)
    assert [h["score"] for h in every] == sorted((h["score"] for h in every), reverse=True)


def test_a_tree_query_pinned_to_a_version_sees_that_snapshot(engine: Engine) -> None:
    before = units(engine, "tree-node", "pole star", k=50, level=0)
    engine.ok("index/delete", {"ids": ["stars-0", "stars-1"]})
    after = units(engine, "tree-node", "pole star", k=50, level=0)
    leaves_after = {leaf for hit in after["hits"] for leaf in hit["provenance"]["leaves"]}
    assert "stars-0#0" not in leaves_after and len(leaves_after) == len(DOCS) - 2
    pinned = units(engine, "tree-node", "pole star", k=50, level=0,
                   indexVersion=before["indexVersion"])
    assert pinned["hits"] == before["hits"]


def test_the_tree_is_kept_across_a_restart(serve: Any, data_dir: Path) -> None:
    first = serve()
    first.add(DOCS)
    before = units(first, "tree-node", "sourdough bread", k=5)
    first.close()
    assert (data_dir / "tree.npz").is_file()
    assert units(serve(), "tree-node", "sourdough bread", k=5)["hits"] == before["hits"]


def test_community_hits_cite_their_chunks(engine: Engine) -> None:
    hits = units(engine, "community", "sourdough bread", k=3)["hits"]
    assert hits and all(h["unit"] == "community" and h["level"] == 0 for h in hits)
    assert {leaf.split("-")[0] for leaf in hits[0]["provenance"]["leaves"]} == {"bread"}


def test_node_hits_are_graph_concepts_with_their_chunks(engine: Engine) -> None:
    hits = units(engine, "node", "honey bee colony", k=3)["hits"]
    assert hits and all(h["unit"] == "node" and h["id"].startswith("concept:") for h in hits)
    assert all(leaf.startswith("bees-") for h in hits for leaf in h["provenance"]["leaves"])
    near = engine.ok("graph", {"op": "neighbors", "seedIds": [hits[0]["id"]], "hops": 1})
    assert near["nodes"][0]["id"] == hits[0]["id"]


@pytest.mark.parametrize(("params", "field"), [
    ({"unit": "node", "level": 0}, "level"),
    ({"unit": "community", "cursor": "abc"}, "cursor"),
])
def test_bad_unit_params_are_invalid(engine: Engine, params: dict[str, Any],
                                     field: str) -> None:
    error = engine.error("retrieve", {"query": "bees", "k": 3, **params})
    assert error["code"] == -32602 and error["data"]["field"] == field


def test_a_level_beyond_retrieve_levels_is_unsupported(engine: Engine) -> None:
    levels = engine.info["capabilities"]["retrieve"]["levels"]
    units(engine, "tree-node", "bees", k=3, level=levels - 1)
    error = engine.error("retrieve", {"query": "bees", "k": 3, "unit": "tree-node",
                                      "level": levels})
    assert error["code"] == -32005 and error["data"]["option"] == "level"


def test_a_filter_does_not_apply_to_a_summary_unit(engine: Engine, serve: Any) -> None:
    engine.add([{"id": "tagged", "text": "bees", "meta": {"summary": "x"}}])
    # A new session, whose advertised filter fields include the one just written (§13.2).
    error = serve().error("retrieve", {"query": "bees", "k": 3, "unit": "tree-node",
                                      "filter": {"field": "summary", "op": "eq",
                                                 "value": "x"}})
    assert error["code"] == -32005 and error["data"]["option"] == "filter", error
