"""Federated retrieve over in-memory engines: fusion on hits, dedup, tie-breaks (§16.3),
partial failure, deadlines and hop handling (§16.2), capability views (§16.4)."""

from __future__ import annotations

import pytest

from rcpkit.federation import Hop
from rcpkit.protocol.errors import BackendUnavailable, NotFound, OptionUnsupported, Timeout
from rcpkit.protocol.methods import decode_params
from rcpkit.protocol.types import RetrieveParams

from .fakes import FakeClient, federation, hits


def params(k: int = 10, **extra: object) -> RetrieveParams:
    decoded: RetrieveParams = decode_params("retrieve", {"query": "q", "k": k, **extra})
    return decoded


def ranking(result: dict) -> list[tuple[str, float]]:
    return [(str(hit["id"]), round(hit["score"], 6)) for hit in result["hits"]]


async def test_rrf_hand_computed() -> None:
    a = FakeClient("a", hits(("d1", 9.0), ("d2", 8.0), ("d3", 7.0)))
    b = FakeClient("b", hits(("d2", 0.9), ("d4", 0.8)))
    result = await federation([a, b]).retrieve(params())
    # d2: 1/62 + 1/61; d1: 1/61; d4: 1/62; d3: 1/63 (§16.3, rrfK 60)
    assert ranking(result) == [("d2", round(1 / 62 + 1 / 61, 6)), ("d1", round(1 / 61, 6)),
                               ("d4", round(1 / 62, 6)), ("d3", round(1 / 63, 6))]


async def test_rrf_k_and_engine_weights() -> None:
    a = FakeClient("a", hits(("x", 1.0)))
    b = FakeClient("b", hits(("y", 1.0)))
    fed = federation([a, b], settings={"b": {"weight": 3.0}})
    result = await fed.retrieve(params(fusion={"method": "rrf", "rrfK": 10}))
    assert ranking(result) == [("y", round(3 / 11, 6)), ("x", round(1 / 11, 6))]
    # fusion.weights overrides the registry weight, by engine id
    result = await fed.retrieve(params(fusion={"rrfK": 10, "weights": {"b": 0.5}}))
    assert ranking(result) == [("x", round(1 / 11, 6)), ("y", round(0.5 / 11, 6))]


async def test_tie_broken_by_id() -> None:
    a = FakeClient("a", hits(("y", 1.0), ("x", 0.5)))
    b = FakeClient("b", hits(("x", 1.0), ("y", 0.5)))
    result = await federation([a, b]).retrieve(params())
    # equal fused score and summed weight: the smaller stringified id wins (§16.3)
    assert [hit["id"] for hit in result["hits"]] == ["x", "y"]


async def test_weighted_min_max_and_tie_broken_by_weight() -> None:
    a = FakeClient("a", hits(("a", 2.0), ("b", 0.0)))
    b = FakeClient("b", hits(("b", 5.0), ("c", 3.0)))
    result = await federation([a, b]).retrieve(params(fusion={"method": "weighted"}))
    # a: 1.0 (weight 1); b: 0.0 + 1.0 (weight 2) -> b before a despite the id; c: 0.0
    assert ranking(result) == [("b", 1.0), ("a", 1.0), ("c", 0.0)]


async def test_convex_anchored_at_score_floor() -> None:
    a = FakeClient("a", hits(("a", 4.0), ("b", 2.0)),
                   caps={"retrieve": {"scoreFloor": 0.0}})
    b = FakeClient("b", hits(("b", 1.0), ("c", 0.0)),
                   caps={"retrieve": {"scoreFloor": -1.0}})
    result = await federation([a, b]).retrieve(params(fusion={"method": "convex"}))
    # a: 4/4 = 1; b: 2/4 + (1+1)/2 = 1.5; c: (0+1)/2 = 0.5
    assert ranking(result) == [("b", 1.5), ("a", 1.0), ("c", 0.5)]
    assert "notes" not in result["usage"]


async def test_convex_alpha_weighs_two_engines() -> None:
    a = FakeClient("a", hits(("a", 1.0)), caps={"retrieve": {"scoreFloor": 0.0}})
    b = FakeClient("b", hits(("b", 1.0)), caps={"retrieve": {"scoreFloor": 0.0}})
    result = await federation([a, b]).retrieve(
        params(fusion={"method": "convex", "alpha": 0.25}))
    assert ranking(result) == [("b", 0.75), ("a", 0.25)]


async def test_convex_falls_back_to_rrf_without_every_floor() -> None:
    a = FakeClient("a", hits(("a", 4.0)), caps={"retrieve": {"scoreFloor": 0.0}})
    b = FakeClient("b", hits(("b", 1.0)))
    result = await federation([a, b]).retrieve(params(fusion={"method": "convex"}))
    assert ranking(result) == [("a", round(1 / 61, 6)), ("b", round(1 / 61, 6))]
    assert any("fused with rrf" in note for note in result["usage"]["notes"])


async def test_unknown_fusion_method() -> None:
    with pytest.raises(OptionUnsupported) as caught:
        await federation([FakeClient("a", hits())]).retrieve(params(fusion={"method": "max"}))
    assert caught.value.data == {"option": "fusion.method", "value": "max"}


async def test_dedup_keeps_richest_body_and_merges_meta() -> None:
    a = FakeClient("a", hits((7, 3.0, {"text": "short", "meta": {"x": 1, "src": "a"}})))
    b = FakeClient("b", hits(("0", 2.0), ("7", 1.0, {"text": "a much longer body",
                                                      "meta": {"y": 2, "src": "b"}})))
    result = await federation([a, b]).retrieve(params())
    assert [str(hit["id"]) for hit in result["hits"]] == ["7", "0"]
    fused = result["hits"][0]
    assert fused["id"] == "7" and fused["text"] == "a much longer body"
    assert fused["meta"] == {"y": 2, "src": "b", "x": 1, "engine": "b", "engineRank": 2,
                             "engineScore": 1.0}
    assert result["hits"][1]["meta"] == {"engine": "b", "engineRank": 1, "engineScore": 2.0}


async def test_k_truncates_and_engines_get_headroom() -> None:
    a = FakeClient("a", hits(*[(f"d{i}", 10.0 - i) for i in range(6)]),
                   caps={"retrieve": {"maxK": 5}})
    b = FakeClient("b", hits(("z", 1.0)))
    result = await federation([a, b], headroom=3).retrieve(params(k=2, candidateK=4))
    assert len(result["hits"]) == 2
    asked = {client.server.name: client.calls[0][1] for client in (a, b)}
    assert (asked["a"]["k"], asked["a"]["candidateK"]) == (5, 5)  # 2×3 clamped to maxK
    assert (asked["b"]["k"], asked["b"]["candidateK"]) == (6, 6)
    assert asked["a"]["_meta"] == {"federation": {"depth": 3, "path": []}}
    assert "fusion" not in asked["a"]


async def test_partial_failure_and_slow_engine() -> None:
    good = FakeClient("good", hits(("d1", 1.0)))
    broken = FakeClient("broken", NotFound("gone"))
    slow = FakeClient("slow", hits(("d9", 1.0)), delay_s=5.0)
    result = await federation([good, broken, slow]).retrieve(params(), deadline_ms=300)
    assert [hit["id"] for hit in result["hits"]] == ["d1"]
    assert result["_meta"] == {"degraded": ["broken", "slow"]}
    notes = " | ".join(result["usage"]["notes"])
    assert "'broken' failed" in notes and "-32015" in notes and "'slow' failed" in notes
    # the downstream deadline is strictly smaller than the caller's (§16.2)
    assert all(call[2] is not None and call[2] < 300 for call in good.calls + slow.calls)


async def test_required_engine_failure_fails_the_query() -> None:
    good = FakeClient("good", hits(("d1", 1.0)))
    broken = FakeClient("broken", NotFound("gone"))
    with pytest.raises(NotFound):
        await federation([good, broken],
                         settings={"broken": {"required": True}}).retrieve(params())
    with pytest.raises(BackendUnavailable):  # a required engine that cannot be reached
        await federation([good], unreachable=["gone"],
                         settings={"gone": {"required": True}}).retrieve(params())


async def test_every_engine_failing_is_backend_unavailable() -> None:
    fed = federation([FakeClient("a", NotFound()), FakeClient("b", Timeout())])
    with pytest.raises(BackendUnavailable) as caught:
        await fed.retrieve(params())
    assert caught.value.code == -32010
    assert caught.value.data == {"degraded": ["a", "b"]}


async def test_no_hits_is_a_success() -> None:
    result = await federation([FakeClient("a", hits())]).retrieve(params())
    assert result["hits"] == [] and "_meta" not in result


async def test_deadline_too_short_is_timeout() -> None:
    with pytest.raises(Timeout):
        await federation([FakeClient("a", hits())]).retrieve(params(), deadline_ms=5)


async def test_engines_on_the_path_are_skipped() -> None:
    a = FakeClient("a", hits(("d1", 1.0)))
    b = FakeClient("gw-b", hits(("d2", 1.0)))
    c = FakeClient("c-server", hits(("d3", 1.0)))
    fed = federation([a, b, c])
    result = await fed.retrieve(params(), hop=Hop(1, ("gw-b", "c-server")))
    assert [hit["id"] for hit in result["hits"]] == ["d1"]
    assert not b.calls and not c.calls  # skipped by registry id and by server name
    assert sum("cycle" in note for note in result["usage"]["notes"]) == 2
    assert a.calls[0][1]["_meta"] == {"federation": {"depth": 1, "path": ["gw-b", "c-server"]}}


async def test_engines_lacking_retrieve_or_options_are_skipped() -> None:
    embed_only = FakeClient("emb", hits(("x", 1.0)), caps={"embed": {"dimension": 4,
                                                                       "identity": "t"}})
    dense = FakeClient("dense", hits(("d1", 1.0)), caps={"retrieve": {"modes": ["dense"]}})
    sparse = FakeClient("sparse", hits(("s1", 1.0)), caps={"retrieve": {"modes": ["sparse"]}})
    result = await federation([embed_only, dense, sparse]).retrieve(params(mode="dense"))
    assert [hit["id"] for hit in result["hits"]] == ["d1"]
    assert not embed_only.calls and not sparse.calls
    assert "_meta" not in result  # skipped engines are not degraded


async def test_capability_union_and_intersection() -> None:
    a = FakeClient("a", hits(), caps={"retrieve": {"maxK": 100, "modes": ["dense", "hybrid"],
                                                   "mmr": True},
                                      "embed": {"dimension": 4, "identity": "t"}})
    b = FakeClient("b", hits(), caps={"retrieve": {"maxK": 50, "modes": ["sparse", "dense"],
                                                   "mmr": False, "scoreScale": "bm25"}})
    fed = federation([a, b])
    await fed.connect()
    assert fed.union().to_wire() == {
        "retrieve": {"maxK": 100, "modes": ["dense", "hybrid", "sparse"], "mmr": True,
                     "scoreScale": "bm25"},
        "embed": {"dimension": 4, "identity": "t"}}
    assert fed.intersection().to_wire() == {
        "retrieve": {"maxK": 50, "modes": ["dense"], "mmr": False}}


async def test_connect_reports_unreachable_engines() -> None:
    fed = federation([FakeClient("a", hits())], unreachable=["b"])
    notes = await fed.connect()
    assert len(notes) == 1 and "'b' is unreachable" in notes[0]
    assert fed.unreachable == ["b"]
    catalog = await fed.catalog()
    assert [entry["id"] for entry in catalog] == ["a"]
