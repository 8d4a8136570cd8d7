"""``graph`` (§7.9) and ``query/transform`` (§7.8) on the served engine: capabilities and
their bounds (§15.5), result shapes against the schema, snapshot pinning (§7.7.1), paging
(§10), errors; and the reference SDK (``rcp-protocol``) calling both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_wire import Engine, rcpkit_argv

from support.schema import assert_result

pytest.importorskip("scipy")
pytest.importorskip("igraph")

DOCS = [
    {"id": "bees-0", "text": "Honey bees pollinate flowering plants. A worker bee visits "
                             "hundreds of flowers a day."},
    {"id": "bees-1", "text": "The honey bee colony stores nectar as honey. Worker bees fan "
                             "the nectar."},
    {"id": "bees-2", "text": "Pollination by honey bees raises fruit yields of flowering "
                             "plants."},
    {"id": "bread-0", "text": "Sourdough starter is wild yeast in flour and water. Feed the "
                              "sourdough starter daily."},
    {"id": "bread-1", "text": "Bread dough rises when yeast ferments the flour. Knead the "
                              "bread dough."},
    {"id": "bread-2", "text": "A sourdough loaf needs a long fermentation of the bread dough."},
    {"id": "stars-0", "text": "Polaris is the pole star of the northern sky. Sailors found "
                              "north by the pole star."},
    {"id": "stars-1", "text": "The northern sky shows constellations around the pole star."},
]


@pytest.fixture
def engine(serve: Any) -> Engine:
    started: Engine = serve()
    started.add(DOCS)
    return started


def graph(engine: Engine, **params: Any) -> dict[str, Any]:
    result = engine.ok("graph", params)
    assert_result("graph", result)
    return result


def test_graph_and_transform_are_advertised_with_their_bounds(engine: Engine) -> None:
    caps = engine.info["capabilities"]
    assert caps["graph"]["ops"] == ["local", "global", "drift", "communities", "neighbors"]
    assert caps["graph"]["maxHops"] >= 1 and caps["graph"]["levels"] >= 1
    assert caps["transform"]["methods"] == ["rewrite", "multi-query", "decompose",
                                            "step-back", "hyde"]
    assert caps["transform"]["maxN"] >= 1


def test_local_hits_are_retrieve_hits_with_provenance(engine: Engine) -> None:
    result = graph(engine, op="local", query="honey bee colony", k=3)
    hits = result["hits"]
    assert [h["id"].split("-")[0] for h in hits] == ["bees"] * 3
    for hit in hits:
        assert hit["unit"] == "chunk" and hit["chunk"]["docId"] == hit["id"].split("#")[0]
        assert hit["citation"]["source"] == hit["chunk"]["docId"]
        provenance = hit["provenance"]
        assert provenance["nodes"][-1] == hit["id"]
        assert all(edge["dst"] in provenance["nodes"] for edge in provenance["edges"])
    assert result["_meta"]["indexVersion"]


def test_each_op_answers_with_its_shape(engine: Engine) -> None:
    drift = graph(engine, op="drift", query="sourdough bread", k=2)
    assert drift["hits"] and all(isinstance(f, str) for f in drift["followups"])
    ranked = graph(engine, op="global", query="sourdough bread")
    top = ranked["communities"][0]
    assert {c.split("-")[0] for c in top["chunks"]} == {"bread"}
    assert top["summary"] in ranked["summary"] and top["score"] > 0
    communities = graph(engine, op="communities", level=0)["communities"]
    assert {c["level"] for c in communities} == {0} and all(c["summary"] for c in communities)
    seed = drift["hits"][0]["id"]
    near = graph(engine, op="neighbors", seedIds=[seed], hops=2, k=5)
    assert near["nodes"][0] == {"id": seed, "score": 1.0, "kind": "chunk"}
    assert len(near["nodes"]) <= 1 + 5
    ids = {n["id"] for n in near["nodes"]}
    assert all(e["src"] in ids and e["dst"] in ids for e in near["edges"])
    by_query = graph(engine, op="neighbors", query="pole star")
    assert by_query["nodes"][0]["id"].startswith("concept:")


def test_neighbors_start_from_the_document_ids_a_client_indexed(engine: Engine) -> None:
    """§7.9 ``seedIds`` are ids a client knows: the ids it gave to ``index/add`` name their
    chunks, beside chunk ids and concept keys."""
    near = graph(engine, op="neighbors", seedIds=["bees-0"], hops=1, k=5)
    assert near["nodes"][0] == {"id": "bees-0#0", "score": 1.0, "kind": "chunk"}
    assert near == graph(engine, op="neighbors", seedIds=["bees-0#0"], hops=1, k=5)
    long_text = " ".join(f"Sentence {n} about honey bees and flowering plants." for n in
                         range(400))
    engine.ok("index/add", {"documents": [{"id": "long-bees", "text": long_text}],
                            "chunk": True})
    every = graph(engine, op="neighbors", seedIds=["long-bees"], hops=1, k=1)
    seeds = [node for node in every["nodes"] if node["id"].startswith("long-bees#")]
    assert len(seeds) > 1 and all(node["score"] == 1.0 for node in seeds)
    assert every["nodes"][:len(seeds)] == seeds  # every chunk of it is a seed
    mixed = graph(engine, op="neighbors", seedIds=["bees-0", "nope"], hops=1)
    assert mixed["unknownSeedIds"] == ["nope"]
    error = engine.error("graph", {"op": "neighbors", "seedIds": ["nope"]})
    assert error["code"] == -32602 and "document ids" in error["message"]


def test_an_op_pinned_to_an_index_version_sees_that_snapshot(engine: Engine) -> None:
    before = graph(engine, op="local", query="pole star", k=5)
    pinned = before["_meta"]["indexVersion"]
    deleted = engine.ok("index/delete", {"ids": ["stars-0", "stars-1"]})
    assert graph(engine, op="local", query="pole star")["hits"] == []
    again = graph(engine, op="local", query="pole star", k=5, indexVersion=pinned)
    assert [h["id"] for h in again["hits"]] == [h["id"] for h in before["hits"]]
    assert again["_meta"]["indexVersion"] == pinned != deleted["_meta"]["indexVersion"]
    error = engine.error("graph", {"op": "local", "query": "x", "indexVersion": "nope.1"})
    assert error["code"] == -32010


def test_communities_page_with_a_cursor(engine: Engine) -> None:
    every = graph(engine, op="communities", k=50)["communities"]
    assert len(every) >= 2
    first = graph(engine, op="communities", k=1)
    second = graph(engine, op="communities", cursor=first["nextCursor"], k=1)
    assert [first["communities"][0]["id"], second["communities"][0]["id"]] == [
        c["id"] for c in every[:2]]
    error = engine.error("graph", {"op": "communities", "cursor": "%%%"})
    assert error["code"] == -32602 and error["data"]["field"] == "cursor"


@pytest.mark.parametrize(("params", "field"), [
    ({"op": "neighbors", "seedIds": ["bees-0#0"], "hops": 99}, "hops"),
    ({"op": "communities", "level": 99}, "level"),
    ({"op": "local"}, "query"),
    ({"op": "global", "query": "  "}, "query"),
    ({"op": "neighbors"}, "seedIds"),
    ({"op": "neighbors", "seedIds": ["missing#0"]}, "seedIds"),
    ({"op": "local", "query": "q", "k": 0}, "k"),
])
def test_bad_graph_params_are_invalid_params(engine: Engine, params: dict[str, Any],
                                             field: str) -> None:
    error = engine.error("graph", params)
    assert error["code"] == -32602 and error["data"]["field"] == field


def test_an_unknown_op_is_unsupported(engine: Engine) -> None:
    error = engine.error("graph", {"op": "pathfind", "query": "q"})
    assert error["code"] == -32005 and error["data"]["option"] == "pathfind"


def test_k_above_max_k_is_clamped_with_a_note(engine: Engine) -> None:
    max_k = engine.info["capabilities"]["graph"]["maxK"]
    result = graph(engine, op="local", query="honey", k=max_k + 1)
    assert result["_meta"]["notes"] == [f"k clamped to maxK={max_k}"]


def test_transform_methods_over_the_wire(engine: Engine) -> None:
    for method in engine.info["capabilities"]["transform"]["methods"]:
        result = engine.ok("query/transform", {"query": "How do honey bees polinate plants?",
                                               "method": method, "n": 2})
        assert_result("query/transform", result)
        assert 1 <= len(result["queries"]) <= 2
    rewrite = engine.ok("query/transform", {"query": "please tell me about sourdugh starter",
                                            "method": "rewrite"})
    assert rewrite["queries"] == ["sourdough starter"]
    hyde = engine.ok("query/transform", {"query": "bread dough", "method": "hyde"})
    assert "dough" in hyde["hypothetical"]


def test_transform_n_above_max_n_is_invalid(engine: Engine) -> None:
    max_n = engine.info["capabilities"]["transform"]["maxN"]
    error = engine.error("query/transform", {"query": "q", "method": "multi-query",
                                             "n": max_n + 1})
    assert error["code"] == -32602 and error["data"]["field"] == "n"
    error = engine.error("query/transform", {"query": "q", "method": "summarise"})
    assert error["code"] == -32005 and error["data"]["option"] == "summarise"


def test_the_graph_survives_a_restart(serve: Any, data_dir: Path) -> None:
    first = serve()
    first.add(DOCS)
    before = first.ok("graph", {"op": "local", "query": "pole star"})
    first.close()
    assert (data_dir / "graph.sqlite").is_file()
    second = serve()
    assert second.ok("graph", {"op": "local", "query": "pole star"})["hits"] == before["hits"]


def test_the_reference_sdk_calls_graph_and_transform(engine: Engine, data_dir: Path) -> None:
    engine.close()
    import rcp

    client = rcp.Client().connect_stdio(rcpkit_argv("serve", "--stdio", "--data",
                                                    str(data_dir)))
    try:
        assert client.supports(rcp.Capability.Graph)
        local = client.graph("local", {"query": "sourdough starter", "k": 2})
        assert [h["id"].split("-")[0] for h in local["hits"]] == ["bread", "bread"]
        assert local["hits"][0]["provenance"]["nodes"]
        ranked = client.graph("global", {"query": "honey bees"})
        assert ranked["communities"] and ranked["summary"]
        transformed = client.transform("sourdough and honey", "decompose")
        assert transformed["queries"] == ["sourdough", "honey"]
    finally:
        client.shutdown()


def test_the_engine_passes_every_knowledge_check(data_dir: Path) -> None:
    from rcpkit.conformance import Outcome, Target, run_checks
    from rcpkit.conformance.checks import knowledge

    report = run_checks(Target(argv=tuple(rcpkit_argv("serve", "--stdio", "--data",
                                                      str(data_dir)))),
                        timeout=30, select=lambda c: c.run.__module__ == knowledge.__name__)
    outcomes = {r.check.id: (r.outcome, r.detail) for r in report.results}
    assert len(outcomes) == 14
    assert all(outcome is Outcome.PASS for outcome, _ in outcomes.values()), outcomes


def test_our_client_has_typed_graph_and_transform(engine: Engine, data_dir: Path) -> None:
    engine.close()
    from rcpkit.client import Client

    with Client.connect_stdio(rcpkit_argv("serve", "--stdio", "--data", str(data_dir))) as client:
        local = client.graph("local", query="pole star", k=2)
        assert local.hits and local.hits[0].provenance and local.hits[0].provenance.nodes
        assert local.meta is not None
        pinned = local.meta["indexVersion"]
        client.index_delete(["stars-0", "stars-1"])
        assert client.graph("local", query="pole star").hits == []
        again = client.graph("local", query="pole star", k=2, index_version=pinned)
        assert [h.id for h in again.hits] == [h.id for h in local.hits]
        near = client.graph("neighbors", seed_ids=["bees-0#0"], hops=1, k=3)
        assert near.nodes and near.nodes[0].id == "bees-0#0" and near.edges
        listed = client.graph("communities", level=0, k=1)
        assert listed.communities and listed.communities[0].level == 0 and listed.next_cursor
        multi = client.transform("honey bees", "multi-query", n=2)
        assert len(multi.queries) == 2
        assert client.transform("bread dough", "hyde").hypothetical


def test_retrieve_rewrite_runs_the_same_transforms(engine: Engine) -> None:
    misspelled = engine.retrieve("sourdugh startr", k=1, mode="sparse")
    assert misspelled["hits"] == []
    fixed = engine.retrieve("sourdugh startr", k=1, mode="sparse", rewrite="rewrite")
    assert fixed["hits"][0]["id"] == "bread-0#0"
    fused = engine.retrieve("honey bees and the pole star", k=4, mode="sparse",
                            rewrite="decompose")
    assert {h["id"].split("-")[0] for h in fused["hits"]} == {"bees", "stars"}
    assert any("fused by RRF" in note for note in fused["usage"]["notes"])
    assert "nextCursor" not in fused
    hyde = engine.retrieve("bread dough", k=2, mode="sparse", rewrite="hyde")
    assert hyde["hits"][0]["id"].startswith("bread")
    page = engine.retrieve("honey", k=1, mode="sparse")
    error = engine.error("retrieve", {"query": "honey", "k": 1, "mode": "sparse",
                                      "rewrite": "multi-query", "cursor": page["nextCursor"]})
    assert error["code"] == -32602 and error["data"]["field"] == "cursor"
