"""Typed params/results (§7): decoding rules, error paths, encoding, schema conformance."""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcpkit.protocol import codec
from rcpkit.protocol import methods as M
from rcpkit.protocol import types as P
from rcpkit.protocol.content import ContentBlock
from rcpkit.protocol.errors import InvalidParams, ProtocolViolation
from rcpkit.protocol.methods import CANCEL, LOG, METHODS, PROGRESS
from support.schema import load_schema

MAX = 2**53 - 1


def decode(method: str, params: Any) -> Any:
    return M.decode_params(method, params)


def field_of(method: str, params: Any) -> str | None:
    with pytest.raises(InvalidParams) as info:
        decode(method, params)
    assert info.value.code == -32602
    return (info.value.data or {}).get("field")


# ── coverage of the roster ──────────────────────────────────────────────────

def test_every_method_has_params_and_every_request_a_result() -> None:
    assert set(METHODS) | {CANCEL, PROGRESS, LOG} == set(M.PARAMS)
    assert set(METHODS) == set(M.RESULTS)


# ── valid params ────────────────────────────────────────────────────────────

VALID: list[tuple[str, dict[str, Any]]] = [
    ("initialize", {"protocolVersion": 1, "client": {"name": "c", "version": "1"},
                    "capabilities": {"streaming": {}, "x-acme": [1, None]}}),
    ("info", {}),
    ("ping", {"nonce": "abc"}),
    ("ping", {"nonce": 7}),
    ("shutdown", {}),
    ("embed", {"inputs": ["a", {"type": "text", "text": "b"}], "kind": "query",
               "encoding": "f32-base64"}),
    ("embed/sparse", {"texts": ["a"]}),
    ("embed/multi", {"inputs": [{"type": "image", "mimeType": "image/png", "data": "eA=="}]}),
    ("rerank", {"query": "q", "passages": ["a", "b"], "method": "colbert", "topN": 1,
                "model": "m"}),
    ("retrieve", {
        "query": [{"type": "text", "text": "q"}], "k": 10, "mode": "hybrid",
        "modality": "text", "candidateK": 100,
        "fusion": {"method": "rrf", "weights": {"dense": 0.7, "sparse": 0.3}, "rrfK": 60,
                   "alpha": 0.5},
        "rerank": {"method": "cross-encoder", "model": "m", "topN": 20},
        "mmr": {"lambda": 0.5}, "rewrite": "hyde",
        "filter": {"field": "lang", "op": "eq", "value": "en"},
        "minScore": -0.5, "recency": {"field": "ts", "halfLifeDays": 30},
        "unit": "chunk", "level": 0, "tokenBudget": 4000, "sessionId": "s",
        "includeText": False, "includeVectors": True, "seed": -12345, "indexVersion": "v1",
        "strict": False, "cursor": "c1", "encoding": "json", "_meta": {"progressToken": 1}}),
    ("retrieve", {"query": "q", "k": 1, "rerank": False, "rewrite": False}),
    ("query/transform", {"query": "q", "method": "multi-query", "n": 3}),
    ("graph", {"op": "local", "query": "q", "k": 5, "seedIds": ["a"], "hops": 2, "level": 1}),
    ("index/add", {"documents": [{"id": "d1", "text": "t", "meta": {"lang": "en"}},
                                 {"text": "no id"}], "chunk": True, "contextual": False}),
    ("index/delete", {"ids": ["a", "b"]}),
    ("catalog/list", {}),
    ("feedback", {"sessionId": "s", "query": "q",
                  "signals": [{"hitId": "h#1", "used": True, "reward": -1},
                              {"hitId": 7, "poisonSuspected": True}]}),
    ("memory/build", {"documents": [{"text": "t"}], "memoryId": "m", "scope": "global"}),
    ("memory/recall", {"query": "q", "memoryId": "m", "n": 5}),
    ("notifications/cancel", {"id": "r-7", "reason": "user aborted"}),
    ("notifications/cancel", {"id": 7}),
    ("notifications/progress", {"progressToken": "t", "progress": 0.6, "stage": "rerank",
                                "partial": {"hits": [{"id": 1, "score": None}]}}),
    ("notifications/log", {"level": "info", "message": "m", "logger": "l",
                           "data": {"latencyMs": 42, "x": None}}),
]


@pytest.mark.parametrize(("method", "params"), VALID)
def test_valid_params_decode_and_round_trip(method: str, params: dict[str, Any]) -> None:
    typed = decode(method, params)
    assert isinstance(typed, M.PARAMS[method])
    assert decode(method, codec.to_builtins(typed)) == typed


def test_retrieve_fields_are_typed() -> None:
    typed = decode("retrieve", VALID[9][1])
    assert isinstance(typed, P.RetrieveParams)
    assert typed.query == [ContentBlock(type="text", text="q")]
    assert typed.fusion == P.FusionOptions(method="rrf", weights={"dense": 0.7, "sparse": 0.3},
                                           rrf_k=60, alpha=0.5)
    assert typed.rerank_options == P.RerankOptions(method="cross-encoder", model="m", top_n=20)
    assert typed.mmr == P.MmrOptions(lambda_=0.5)
    assert typed.rewrite_method == "hyde"
    assert typed.filter == {"field": "lang", "op": "eq", "value": "en"}
    assert (typed.token_budget, typed.strict, typed.include_text) == (4000, False, False)
    assert typed.meta == {"progressToken": 1}


def test_rerank_and_rewrite_false_switch_stages_off() -> None:
    typed = decode("retrieve", {"query": "q", "k": 1, "rerank": False, "rewrite": False})
    assert typed.rerank_options is None and typed.rewrite_method is None


def test_absent_params_are_an_empty_object() -> None:
    assert decode("ping", None) == P.PingParams()
    assert decode("shutdown", None) == P.ShutdownParams()


def test_vendor_methods_pass_through() -> None:
    raw = {"a": [1, None]}
    assert decode("x-acme/rerank-v2", raw) is raw


# ── liberal input ───────────────────────────────────────────────────────────

def test_null_is_absent_outside_free_form_objects() -> None:
    typed = decode("retrieve", {"query": "q", "k": 3, "mode": None, "rerank": None,
                                "strict": None, "fusion": {"method": None, "alpha": None},
                                "_meta": {"progressToken": None},
                                "filter": {"field": "f", "op": "eq", "value": None}})
    assert typed.mode is None and typed.rerank is None and typed.strict is True
    assert typed.fusion == P.FusionOptions()
    assert typed.meta == {"progressToken": None}
    assert typed.filter == {"field": "f", "op": "eq", "value": None}


def test_null_required_field_is_missing() -> None:
    assert field_of("retrieve", {"query": None, "k": 3}) == "query"


def test_unknown_fields_and_vendor_keys_are_ignored() -> None:
    typed = decode("retrieve", {"query": "q", "k": 3, "x-acme": {"boost": 2}, "future": 1,
                                "rerank": {"topN": 5, "x-acme-temp": 0.1}})
    assert typed == P.RetrieveParams(query="q", k=3, rerank=P.RerankOptions(top_n=5))


@pytest.mark.parametrize(("method", "params", "attr", "value"), [
    ("embed", {"texts": ["a"]}, "inputs", ["a"]),
    ("embed", {"inputs": ["new"], "texts": ["old"]}, "inputs", ["new"]),
    ("embed/sparse", {"inputs": ["a"]}, "inputs", ["a"]),
    ("embed/multi", {"texts": ["a"]}, "inputs", ["a"]),
    ("rerank", {"query": "q", "documents": ["a"]}, "passages", ["a"]),
])
def test_synonyms(method: str, params: dict[str, Any], attr: str, value: Any) -> None:
    assert getattr(decode(method, params), attr) == value


@pytest.mark.parametrize("k", [3.0, 1e2])
def test_integral_floats_are_integers(k: float) -> None:
    typed = decode("retrieve", {"query": "q", "k": k})
    assert typed.k == int(k) and isinstance(typed.k, int)


# ── invalid params → exact data.field ───────────────────────────────────────

INVALID: list[tuple[str, Any, str | None]] = [
    ("retrieve", [1, 2], "params"),
    ("retrieve", "q", "params"),
    ("retrieve", {"k": 3}, "query"),
    ("retrieve", {"query": "q"}, "k"),
    ("retrieve", {"query": "q", "k": 0}, "k"),
    ("retrieve", {"query": "q", "k": -1}, "k"),
    ("retrieve", {"query": "q", "k": 3.5}, "k"),
    ("retrieve", {"query": "q", "k": "3"}, "k"),
    ("retrieve", {"query": "q", "k": True}, "k"),
    ("retrieve", {"query": "q", "k": MAX + 1}, "k"),
    ("retrieve", {"query": "q", "k": 10**40}, "k"),
    ("retrieve", {"query": "q", "k": 1, "seed": -(MAX + 1)}, "seed"),
    ("retrieve", {"query": "q", "k": 1, "seed": 2.0**60}, "seed"),
    ("retrieve", {"query": 5, "k": 1}, "query"),
    ("retrieve", {"query": [{"type": "text"}], "k": 1}, "query[0]"),
    ("retrieve", {"query": "q", "k": 1, "candidateK": 0}, "candidateK"),
    ("retrieve", {"query": "q", "k": 1, "rerank": {"topN": 0}}, "rerank.topN"),
    ("retrieve", {"query": "q", "k": 1, "rerank": {"topN": "5"}}, "rerank.topN"),
    ("retrieve", {"query": "q", "k": 1, "rerank": True}, "rerank"),
    ("retrieve", {"query": "q", "k": 1, "rerank": "colbert"}, "rerank"),
    ("retrieve", {"query": "q", "k": 1, "rewrite": True}, "rewrite"),
    ("retrieve", {"query": "q", "k": 1, "mmr": {"lambda": 1.5}}, "mmr.lambda"),
    ("retrieve", {"query": "q", "k": 1, "mmr": {"lambda": -0.1}}, "mmr.lambda"),
    ("retrieve", {"query": "q", "k": 1, "fusion": {"alpha": 2}}, "fusion.alpha"),
    ("retrieve", {"query": "q", "k": 1, "fusion": {"weights": {"dense": "x"}}},
     "fusion.weights"),
    ("retrieve", {"query": "q", "k": 1, "minScore": float("nan")}, "minScore"),
    ("retrieve", {"query": "q", "k": 1, "minScore": float("inf")}, "minScore"),
    ("retrieve", {"query": "q", "k": 1, "minScore": "0.5"}, "minScore"),
    ("retrieve", {"query": "q", "k": 1, "tokenBudget": 0}, "tokenBudget"),
    ("retrieve", {"query": "q", "k": 1, "level": -1}, "level"),
    ("retrieve", {"query": "q", "k": 1, "strict": "false"}, "strict"),
    ("retrieve", {"query": "q", "k": 1, "includeText": 1}, "includeText"),
    ("retrieve", {"query": "q", "k": 1, "filter": [1]}, "filter"),
    ("retrieve", {"query": "q", "k": 1, "_meta": 5}, "_meta"),
    ("retrieve", {"query": "q", "k": 1, "recency": {"halfLifeDays": 0}}, "recency.halfLifeDays"),
    ("embed", {}, "inputs"),
    ("embed", {"inputs": "a"}, "inputs"),
    ("embed", {"inputs": ["a", 3]}, "inputs[1]"),
    ("embed", {"inputs": ["a", {"type": "image", "mimeType": "image/png"}]}, "inputs[1]"),
    ("embed/sparse", {}, "inputs"),
    ("rerank", {"query": "q"}, "passages"),
    ("rerank", {"query": "q", "passages": ["a"], "topN": 0}, "topN"),
    ("query/transform", {"query": "q", "method": "hyde", "n": 0}, "n"),
    ("query/transform", {"query": "q"}, "method"),
    ("graph", {"op": "local", "hops": 0}, "hops"),
    ("graph", {"op": "local", "seedIds": [1]}, "seedIds[0]"),
    ("index/add", {}, "documents"),
    ("index/add", {"documents": [{"text": "a"}, {"text": "b"}, {"id": "c"}]}, "documents[2].text"),
    ("index/add", {"documents": [{"text": "a", "id": 3}]}, "documents[0].id"),
    ("index/add", {"documents": [{"text": "a"}], "chunk": "yes"}, "chunk"),
    ("index/delete", {"ids": "a"}, "ids"),
    ("feedback", {"signals": [{"hitId": "a", "reward": 1.5}]}, "signals[0].reward"),
    ("feedback", {"signals": [{"used": True}]}, "signals[0].hitId"),
    ("memory/recall", {"query": "q", "n": 0}, "n"),
    ("initialize", {}, "protocolVersion"),
    ("initialize", {"protocolVersion": 0}, "protocolVersion"),
    ("initialize", {"protocolVersion": 1, "client": {"version": "1"}}, "client.name"),
    ("ping", {"nonce": True}, "nonce"),
    ("ping", {"nonce": [1]}, "nonce"),
    ("notifications/cancel", {}, "id"),
    ("notifications/cancel", {"id": True}, "id"),
    ("notifications/cancel", {"id": [7]}, "id"),
    ("notifications/progress", {"progressToken": "t", "progress": 1.5}, "progress"),
    ("notifications/log", {"level": "info"}, "message"),
]


@pytest.mark.parametrize(("method", "params", "field"), INVALID)
def test_invalid_params_name_the_field(method: str, params: Any, field: str) -> None:
    assert field_of(method, params) == field


def test_error_message_never_echoes_huge_input() -> None:
    huge = "x" * 100_000
    with pytest.raises(InvalidParams) as info:
        decode("retrieve", {"query": [{"type": huge}], "k": 1})
    assert len(info.value.message) < 400
    assert info.value.data == {"field": "query[0].type"}


# ── §3.3 funnel ─────────────────────────────────────────────────────────────

@pytest.mark.parametrize(("extra", "field"), [
    ({"candidateK": 5}, "candidateK"),
    ({"rerank": {"topN": 5}}, "rerank.topN"),
    ({"candidateK": 20, "rerank": {"topN": 30}}, "candidateK"),
    ({"candidateK": 30, "rerank": {"topN": 20}}, None),
    ({"candidateK": 10, "rerank": {"topN": 10}}, None),
    ({"candidateK": 10_000}, None),
    ({"rerank": False, "candidateK": 10}, None),
])
def test_funnel_invariant(extra: dict[str, Any], field: str | None) -> None:
    params = {"query": "q", "k": 10, **extra}
    if field is None:
        P.check_funnel(decode("retrieve", params))
    else:
        assert field_of("retrieve", params) == field


# ── encoding ────────────────────────────────────────────────────────────────

def test_to_builtins_names_and_omissions() -> None:
    wire = codec.to_builtins(P.RetrieveParams(query="q", k=3, candidate_k=30,
                                          mmr=P.MmrOptions(lambda_=0.3),
                                          meta={"progressToken": "t"}))
    assert wire == {"query": "q", "k": 3, "candidateK": 30, "mmr": {"lambda": 0.3},
                    "_meta": {"progressToken": "t"}}
    assert codec.to_builtins(P.RetrieveParams(query="q", k=3, strict=False))["strict"] is False


def test_to_builtins_on_dataclasses_omits_none() -> None:
    from dataclasses import dataclass

    @dataclass
    class Thing:
        a: int
        b: str | None = None

    assert codec.to_builtins(Thing(a=1)) == {"a": 1}


def test_non_finite_floats_are_never_emitted() -> None:
    nan, inf = float("nan"), float("inf")
    result = P.RetrieveResult(hits=[P.Hit(
        id="a", score=nan, confidence=inf, vector=[1.0, nan, -inf],
        scores={"dense": inf, "sparse": 0.5}, meta={"x": nan, "keep": None},
    )], usage=P.Usage(latency_ms=nan))
    wire = codec.to_builtins(result)
    json.dumps(wire, allow_nan=False)
    hit = wire["hits"][0]
    assert hit["score"] == 0.0 and "confidence" not in hit
    assert hit["vector"] == [1.0, 0.0, 0.0]
    assert hit["scores"] == {"sparse": 0.5}
    assert hit["meta"] == {"x": None, "keep": None}
    assert wire["usage"] == {}


def test_to_builtins_does_not_mutate_shared_objects() -> None:
    meta = {"x": float("nan")}
    codec.to_builtins(P.Hit(id=1, score=1.0, meta=meta))
    assert math.isnan(meta["x"])


finite = st.floats(allow_nan=False, allow_infinity=False)
any_float = st.floats(allow_nan=True, allow_infinity=True)


@settings(max_examples=80, deadline=None)
@given(scores=st.lists(any_float, max_size=8), vector=st.lists(any_float, max_size=8))
def test_hypothesis_encoded_results_are_valid_json(scores: list[float],
                                                   vector: list[float]) -> None:
    hits = [P.Hit(id=i, score=s, vector=vector) for i, s in enumerate(scores)]
    wire = codec.to_builtins(P.RetrieveResult(hits=hits))
    json.dumps(wire, allow_nan=False)
    rerank = codec.to_builtins(P.RerankResult.from_scores(scores))
    json.dumps(rerank, allow_nan=False)
    assert sorted(rerank["order"]) == list(range(len(scores)))


retrieve_params = st.builds(
    P.RetrieveParams,
    query=st.one_of(st.text(), st.lists(st.builds(ContentBlock, type=st.just("text"),
                                                  text=st.text()), min_size=1, max_size=3)),
    k=st.integers(1, 50),
    candidate_k=st.one_of(st.none(), st.integers(60, MAX)),
    mode=st.one_of(st.none(), st.sampled_from(["dense", "sparse", "hybrid"])),
    rerank=st.one_of(st.none(), st.just(False),
                     st.builds(P.RerankOptions, top_n=st.integers(50, 60),
                               method=st.one_of(st.none(), st.just("colbert")))),
    mmr=st.one_of(st.none(), st.builds(P.MmrOptions, lambda_=st.floats(0, 1))),
    min_score=st.one_of(st.none(), finite),
    seed=st.one_of(st.none(), st.integers(-MAX, MAX)),
    strict=st.booleans(),
    meta=st.one_of(st.none(), st.dictionaries(st.text(max_size=5),
                                              st.one_of(st.none(), st.integers(), st.text()),
                                              max_size=3)),
)


@settings(max_examples=100, deadline=None)
@given(params=retrieve_params)
def test_hypothesis_retrieve_params_round_trip(params: P.RetrieveParams) -> None:
    wire = json.loads(json.dumps(codec.to_builtins(params)))
    assert decode("retrieve", wire) == params


# ── results ─────────────────────────────────────────────────────────────────

def test_rerank_result_from_scores_is_best_first() -> None:
    result = P.RerankResult.from_scores([0.2, 0.9, 0.5], top_n=2)
    assert result.order == [1, 2]
    assert [(r.index, r.score) for r in result.results or []] == [(1, 0.9), (2, 0.5)]
    assert result.scores == [0.2, 0.9, 0.5]


def test_decode_result_blames_the_peer() -> None:
    assert M.decode_result("index/delete", {"deleted": 2}) == P.IndexDeleteResult(deleted=2)
    with pytest.raises(ProtocolViolation) as info:
        M.decode_result("retrieve", {"hits": [{"id": "a"}]})
    assert info.value.data == {"field": "hits[0].score"}
    with pytest.raises(ProtocolViolation):
        M.decode_result("retrieve", [])


HIT = P.Hit(
    id="arxiv:1706.03762#3", score=12.5, confidence=0.8, text="attention",
    content=[ContentBlock(type="image", mime_type="image/png", uri="https://x/p.png")],
    modality="multimodal", unit="chunk", level=0, meta={"lang": "en"},
    vector=[0.1, 0.2], scores={"dense": 0.7, "sparse": 0.3},
    citation=P.Citation(source="arxiv", uri="https://arxiv.org/abs/1706.03762",
                        title="Attention", start=0, end=10, page=3),
    provenance=P.Provenance(path=["a", "b"], nodes=["a"],
                            edges=[P.ProvenanceEdge(src="a", dst="b")], leaves=["l"]),
    trust=P.Trust(level="trusted", score=0.9, injection_suspected=False, sanitized=True),
    chunk=P.ChunkRef(doc_id="arxiv:1706.03762", index=3, context="ctx"),
)

RESULT_EXAMPLES: list[tuple[str, Any]] = [
    ("initialize", P.InitializeResult(protocol_version=1, server=P.PeerInfo(name="s", version="1"),
                                      capabilities={"retrieve": {"maxK": 100}, "x-acme": {}})),
    ("info", P.InitializeResult(protocol_version=1, server=P.PeerInfo(name="s"),
                                capabilities={})),
    ("ping", P.PingResult(nonce="n")),
    ("ping", P.PingResult()),
    ("shutdown", P.ShutdownResult()),
    ("embed", P.EmbedResult(vectors=[[0.1, 0.2]])),
    ("embed", P.EmbedResult(vectors=["AACAPw=="], encoding="f32-base64", dimension=1)),
    ("embed/sparse", P.SparseEmbedResult(sparse=[P.SparseVector(indices=[1, 5],
                                                                values=[0.5, 0.1])])),
    ("embed/multi", P.MultiEmbedResult(matrices=[[[0.1, 0.2], [0.3, 0.4]]], dimension=2)),
    ("rerank", P.RerankResult.from_scores([0.1, 0.7])),
    ("retrieve", P.RetrieveResult(hits=[HIT, P.Hit(id=7, score=float("nan"))],
                                  next_cursor="c", index_version="v",
                                  usage=P.Usage(candidates=100, reranked=30, latency_ms=42,
                                                tokens=512, notes=["n"]),
                                  rewritten_query="rq", meta={"t": 1})),
    ("query/transform", P.TransformResult(queries=["a", "b"], hypothetical="h")),
    ("graph", P.GraphResult(hits=[HIT], followups=["f"])),
    ("graph", P.GraphResult(summary="s", communities=[P.Community(id="c", summary="s",
                                                                  score=0.5, level=1)])),
    ("graph", P.GraphResult(nodes=[P.GraphNode(id=1, score=0.5)],
                            edges=[P.GraphEdge(src=1, dst="b", weight=0.3)])),
    ("index/add", P.IndexAddResult(ids=["a", "b"], chunks=4)),
    ("index/delete", P.IndexDeleteResult(deleted=0)),
    ("catalog/list", P.CatalogListResult(engines=[P.CatalogEngine(
        id="docs", server=P.PeerInfo(name="d", version="1"),
        capabilities={"retrieve": {"maxK": 100}},
        endpoint=P.Endpoint(transport="http", url="http://localhost/rcp"))])),
    ("feedback", P.FeedbackResult(accepted=2)),
    ("memory/build", P.MemoryBuildResult(memory_id="m", tokens=10)),
    ("memory/recall", P.MemoryRecallResult(clues=[P.Clue(query="q", seed_ids=["a"], weight=0.9)],
                                           hits=[HIT])),
]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return load_schema()


@pytest.mark.parametrize(("method", "result"), RESULT_EXAMPLES)
def test_results_match_the_normative_schema(schema: dict[str, Any], method: str,
                                            result: Any) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator({"$ref": "#/$defs/ResultFor",
                                                 "$defs": schema["$defs"]})
    wire = json.loads(json.dumps(codec.to_builtins(result), allow_nan=False))
    validator.validate({"method": method, "result": wire})
    assert M.decode_result(method, wire) == msgspec.convert(wire, M.RESULTS[method])


SCHEMA_PARAMS = {"initialize": "InitializeParams", "embed": "EmbedParams",
                 "rerank": "RerankParams", "retrieve": "RetrieveParams",
                 "query/transform": "TransformParams", "graph": "GraphParams",
                 "feedback": "FeedbackParams", "memory/build": "MemoryBuildParams",
                 "memory/recall": "MemoryRecallParams", "index/add": "IndexAddParams",
                 "index/delete": "IndexDeleteParams", "ping": "PingParams"}


@pytest.mark.parametrize(("method", "params"),
                         [(m, p) for m, p in VALID if m in SCHEMA_PARAMS])
def test_encoded_params_match_the_normative_schema(schema: dict[str, Any], method: str,
                                                   params: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator({"$ref": f"#/$defs/{SCHEMA_PARAMS[method]}",
                                                 "$defs": schema["$defs"]})
    validator.validate(codec.to_builtins(decode(method, params)))


def test_numpy_values_encode_as_plain_numbers() -> None:
    import numpy as np

    engine_values: dict[str, Any] = {
        "id": 1, "score": np.float32(0.5), "vector": np.array([1.0, np.nan], dtype=np.float32),
        "scores": {"dense": np.float32(np.inf)}}
    hit = P.Hit(**engine_values)
    assert codec.to_builtins(hit) == {"id": 1, "score": 0.5, "vector": [1.0, 0.0], "scores": {}}


def test_graph_result_types_rcpkit_extra_keys_beside_the_spec_fields() -> None:
    """§7.9 results are open objects (§4.6): the extra keys rcpkit sends decode typed and
    encode back unchanged."""
    wire = {"nodes": [{"id": "concept:bee", "score": 0.5, "kind": "concept", "label": "bee"}],
            "edges": [{"src": "concept:bee", "dst": "a#0", "weight": 1.0}],
            "unknownSeedIds": ["nope"],
            "communities": [{"id": "c1", "level": 0, "summary": "bees", "size": 3,
                             "concepts": ["bee"], "chunks": ["a#0"]}]}
    result = M.decode_result("graph", wire)
    assert result.nodes[0].kind == "concept" and result.nodes[0].label == "bee"
    assert result.unknown_seed_ids == ["nope"]
    assert result.communities[0].size == 3 and result.communities[0].chunks == ["a#0"]
    assert codec.to_builtins(result) == wire
