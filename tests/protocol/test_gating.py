"""Option gating (§6, §7.7 strict rule, §12 -32005) and typed capabilities (§6, §6.1)."""

from __future__ import annotations

from typing import Any

import pytest

from rcpkit.protocol.capabilities import (
    CAPABILITY_TYPES,
    Capabilities,
    FilterCap,
    IndexCap,
    RetrieveCap,
)
from rcpkit.protocol.errors import CapabilityMissing, InvalidParams, OptionUnsupported
from rcpkit.protocol.filters import MAX_NODES, All, Condition
from rcpkit.protocol.gating import validate_filter
from rcpkit.protocol.methods import check_options, decode_params

PNG = {"type": "image", "mimeType": "image/png", "data": "eA=="}

FULL: dict[str, Any] = {
    "embed": {"dimension": 384, "identity": "minilm", "encodings": ["json", "f32-base64"],
              "modalities": ["text", "image"]},
    "sparseEmbed": {"identity": "splade"},
    "multiVector": {"dimension": 128, "identity": "colbert", "encodings": ["f32-base64"]},
    "rerank": {"methods": ["cross-encoder", "colbert"], "maxCandidates": 100},
    "retrieve": {"maxK": 200, "modes": ["dense", "sparse", "hybrid"], "fusion": ["rrf"],
                 "mmr": True, "rerankBuiltin": True, "units": ["chunk", "document"],
                 "levels": 2, "tokenBudget": True, "deterministic": True,
                 "modalities": ["text", "code"]},
    "transform": {"methods": ["rewrite", "hyde"]},
    "graph": {"ops": ["local", "global"]},
    "index": {"writable": True, "chunking": True, "contextual": True},
    "memory": {"scopes": ["global"]},
    "filter": {"fields": {"lang": "keyword", "year": "int"}, "operators": ["eq", "gte", "in"]},
    "pagination": {},
    "x-acme": {"anything": [1, 2]},
}
MINIMAL: dict[str, Any] = {"retrieve": {"modes": ["dense"]}, "embed": {"dimension": 8},
                           "multiVector": {}, "rerank": {"methods": ["cross-encoder"]},
                           "transform": {}, "graph": {}, "index": {"writable": True},
                           "memory": {"scopes": ["session"]}}


def gate(method: str, params: dict[str, Any], caps: dict[str, Any]) -> list[str]:
    return check_options(method, decode_params(method, params),
                         Capabilities.from_wire(caps))


def q(**extra: Any) -> dict[str, Any]:
    return {"query": "q", "k": 5, **extra}


ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("retrieve", q()),
    ("retrieve", q(mode="hybrid", fusion={"method": "rrf", "rrfK": 60}, candidateK=50,
                   rerank={"method": "colbert", "topN": 10}, mmr={"lambda": 0.5},
                   rewrite="hyde", unit="document", level=1, tokenBudget=1000, cursor="c",
                   filter={"and": [{"field": "lang", "op": "eq", "value": "en"},
                                   {"field": "year", "op": "gte", "value": 2020}]},
                   modality="code", encoding="f32-base64", includeVectors=True, seed=3)),
    ("retrieve", q(rerank=False, rewrite=False, level=0, encoding="json")),
    ("embed", {"inputs": ["a", PNG], "kind": "document", "encoding": "f32-base64"}),
    ("embed/sparse", {"texts": ["a"], "kind": "query"}),
    ("embed/multi", {"inputs": ["a"], "encoding": "f32-base64"}),
    ("rerank", {"query": "q", "passages": ["a"], "method": "cross-encoder"}),
    ("query/transform", {"query": "q", "method": "hyde"}),
    ("graph", {"op": "global", "cursor": "c"}),
    ("index/add", {"documents": [{"text": "t"}], "chunk": True, "contextual": True}),
    ("index/delete", {"ids": ["a"]}),
    ("memory/build", {"scope": "global"}),
    ("feedback", {"signals": [{"hitId": "a"}]}),
    ("ping", {}),
]


@pytest.mark.parametrize(("method", "params"), ACCEPTED)
def test_advertised_options_pass_without_notes(method: str, params: dict[str, Any]) -> None:
    assert gate(method, params, FULL) == []


# (method, params, caps, option) — rejected with -32005 under the default strict=true
STRICT_REJECTED: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("retrieve", q(mode="hybrid"), MINIMAL, "mode"),
    ("retrieve", q(mode="colbert"), FULL, "mode"),
    ("retrieve", q(fusion={"method": "rrf"}), MINIMAL, "fusion"),
    ("retrieve", q(fusion={"method": "convex"}), FULL, "fusion.method"),
    ("retrieve", q(rerank={"method": "llm"}), FULL, "rerank.method"),
    ("retrieve", q(rerank={"topN": 10}), {"retrieve": {}}, "rerank"),
    ("retrieve", q(mmr={"lambda": 0.3}), MINIMAL, "mmr"),
    ("retrieve", q(rewrite="hyde"), {"retrieve": {}}, "rewrite"),
    ("retrieve", q(rewrite="step-back"), FULL, "rewrite"),
    ("retrieve", q(unit="community"), FULL, "unit"),
    ("retrieve", q(unit="document"), MINIMAL, "unit"),
    ("retrieve", q(level=2), FULL, "level"),
    ("retrieve", q(level=1), MINIMAL, "level"),
    ("retrieve", q(tokenBudget=100), MINIMAL, "tokenBudget"),
    ("retrieve", q(cursor="c"), MINIMAL, "cursor"),
    ("retrieve", q(modality="image"), FULL, "modality"),
    ("retrieve", q(encoding="f32-base64"), MINIMAL, "encoding"),
    ("embed", {"inputs": ["a"], "encoding": "f32-base64"}, MINIMAL, "encoding"),
    ("embed", {"inputs": ["a"], "encoding": "f16"}, FULL, "encoding"),
    ("embed", {"inputs": ["a"], "kind": "passage"}, FULL, "kind"),
    ("embed/sparse", {"inputs": ["a"], "kind": "passage"}, FULL, "kind"),
    ("embed/multi", {"inputs": ["a"], "encoding": "f32-base64"}, MINIMAL, "encoding"),
    ("index/add", {"documents": [{"text": "t"}], "chunk": True}, MINIMAL, "chunk"),
    ("index/add", {"documents": [{"text": "t"}], "contextual": True}, MINIMAL, "contextual"),
    ("memory/build", {"scope": "global"}, MINIMAL, "scope"),
    ("graph", {"op": "local", "cursor": "c"}, {"graph": {"ops": ["local"]}}, "cursor"),
]


@pytest.mark.parametrize(("method", "params", "caps", "option"), STRICT_REJECTED)
def test_unadvertised_options_are_rejected_when_strict(method: str, params: dict[str, Any],
                                                       caps: dict[str, Any], option: str) -> None:
    with pytest.raises(OptionUnsupported) as info:
        gate(method, params, caps)
    assert info.value.code == -32005
    assert info.value.data is not None
    assert option in (info.value.data["param"], info.value.data["option"])
    assert isinstance(info.value.data["option"], str)


@pytest.mark.parametrize(("method", "params", "caps", "option"),
                         [case for case in STRICT_REJECTED
                          if case[0] in ("retrieve", "embed", "embed/multi")])
def test_strict_false_degrades_with_a_note(method: str, params: dict[str, Any],
                                           caps: dict[str, Any], option: str) -> None:
    notes = gate(method, {**params, "strict": False}, caps)
    assert len(notes) == 1 and f"({option})" in notes[0]


# Rejected whatever `strict` says: the spec makes these MUST (§4.8, §7.6, §7.8, §7.9).
ALWAYS_REJECTED: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("rerank", {"query": "q", "passages": ["a"], "method": "llm"}, FULL, "method"),
    ("rerank", {"query": "q", "passages": ["a"], "method": "colbert"}, {"rerank": {}}, "method"),
    ("rerank", {"query": "q", "passages": [PNG]}, FULL, "modality"),
    ("rerank", {"query": [PNG], "passages": ["a"]}, FULL, "modality"),
    ("query/transform", {"query": "q", "method": "decompose"}, FULL, "method"),
    ("query/transform", {"query": "q", "method": "hyde"}, MINIMAL, "method"),
    ("graph", {"op": "drift"}, FULL, "op"),
    ("graph", {"op": "local"}, MINIMAL, "op"),
    ("retrieve", q(query=[PNG], strict=False), FULL, "modality"),
    ("retrieve", q(filter={"field": "lang", "op": "eq", "value": "en"}, strict=False),
     MINIMAL, "filter"),
    ("retrieve", q(filter={"field": "lang", "op": "nin", "value": ["en"]}, strict=False),
     FULL, "nin"),
    ("embed", {"inputs": ["a", PNG], "strict": False}, MINIMAL, "modality"),
    ("embed", {"inputs": [{"type": "audio", "mimeType": "audio/wav", "uri": "file:///a"}]},
     FULL, "modality"),
    ("embed/multi", {"inputs": [PNG]}, FULL, "modality"),
    ("embed/sparse", {"inputs": [PNG]}, FULL, "modality"),
]


@pytest.mark.parametrize(("method", "params", "caps", "option"), ALWAYS_REJECTED)
def test_must_rules_ignore_strict(method: str, params: dict[str, Any], caps: dict[str, Any],
                                  option: str) -> None:
    with pytest.raises(OptionUnsupported) as info:
        gate(method, params, caps)
    assert info.value.data is not None
    assert option in (info.value.data["param"], info.value.data["option"])
    assert isinstance(info.value.data["option"], str)


def test_seed_on_non_deterministic_server_is_only_a_note() -> None:
    notes = gate("retrieve", q(seed=7), MINIMAL)
    assert len(notes) == 1 and "seed" in notes[0]


def test_strict_false_collects_every_note() -> None:
    notes = gate("retrieve", q(strict=False, mode="hybrid", mmr={"lambda": 0.2}, unit="page",
                               tokenBudget=10, cursor="c"), MINIMAL)
    assert [note.rsplit("(", 1)[1] for note in notes] == [
        "mode)", "mmr)", "unit)", "tokenBudget)", "cursor)"]


@pytest.mark.parametrize("index", [{"writable": False}, {}, {"writable": "yes"}])
def test_index_add_on_a_read_only_index_is_capability_missing(index: dict[str, Any]) -> None:
    with pytest.raises(CapabilityMissing) as info:
        gate("index/add", {"documents": [{"text": "t"}]}, {"index": index})
    assert info.value.code == -32003
    assert gate("index/delete", {"ids": ["a"]}, {"index": index}) == []


def test_methods_without_options_are_never_gated() -> None:
    assert check_options("ping", decode_params("ping", {}), Capabilities()) == []
    assert check_options("x-acme/foo", {"a": 1}, Capabilities()) == []


def test_mode_is_free_when_modes_are_not_advertised() -> None:
    assert gate("retrieve", q(mode="sparse"), {"retrieve": {}}) == []
    with pytest.raises(OptionUnsupported):
        gate("retrieve", q(mode="sparse"), {"retrieve": {"defaultMode": "dense"}})


# ── validate_filter (§8) ────────────────────────────────────────────────────

def filter_tree(flt: Any, caps: dict[str, Any]) -> Any:
    return validate_filter(decode_params("retrieve", q(filter=flt)), Capabilities.from_wire(caps))


def test_validate_filter_returns_the_normalised_tree() -> None:
    tree = filter_tree({"and": [{"field": "lang", "op": "eq", "value": "en"},
                                {"field": "year", "op": "gte", "value": 2020.0}]}, FULL)
    assert tree == All((Condition("lang", "eq", "en"), Condition("year", "gte", 2020)))
    assert validate_filter(decode_params("retrieve", q()), Capabilities()) is None


@pytest.mark.parametrize(("flt", "field"), [
    ({"field": "author", "op": "eq", "value": "x"}, "filter.author"),
    ({"field": "year", "op": "gte", "value": "recent"}, "filter.year"),
    ({"and": []}, "filter.and"),
    # a -32602 problem wins over an unadvertised operator elsewhere in the tree
    ({"and": [{"field": "lang", "op": "nin", "value": ["x"]},
              {"field": "author", "op": "eq", "value": "x"}]}, "filter.author"),
])
def test_filter_structural_errors_are_invalid_params(flt: Any, field: str) -> None:
    with pytest.raises(InvalidParams) as info:
        filter_tree(flt, FULL)
    assert info.value.data == {"field": field}


def test_filter_refusals_map_to_their_wire_errors() -> None:
    caps = {"filter": {"fields": {"lang": "keyword"}, "operators": ["eq"]}}
    with pytest.raises(OptionUnsupported) as unadvertised:
        filter_tree({"field": "lang", "op": "ne", "value": "x"}, caps)
    assert unadvertised.value.code == -32005
    assert unadvertised.value.data == {"option": "ne", "param": "filter.op"}
    wide = {"or": [{"field": "lang", "op": "eq", "value": str(i)} for i in range(MAX_NODES)]}
    with pytest.raises(InvalidParams) as too_many:
        filter_tree(wide, caps)
    assert too_many.value.code == -32602
    assert too_many.value.data == {"field": "filter", "limit": MAX_NODES}


def test_filter_with_untyped_fields_and_all_operators() -> None:
    caps = {"filter": {"fields": ["lang"]}}
    assert filter_tree({"field": "lang", "op": "nin", "value": ["en"]}, caps) == Condition(
        "lang", "nin", ["en"])


# ── capabilities container ──────────────────────────────────────────────────

def test_capabilities_round_trip_losslessly() -> None:
    wire = {**FULL, "retrieve": {**FULL["retrieve"], "x-acme-boost": 2, "maxK": "lots"},
            "futureCap": {"nested": [None, {"a": 1}]}, "citations": True}
    caps = Capabilities.from_wire(wire)
    assert caps.to_wire() == wire
    assert Capabilities.from_wire(caps.to_wire()) == caps
    assert caps.extra == {"x-acme": FULL["x-acme"], "futureCap": wire["futureCap"]}


def test_typed_views_are_tolerant() -> None:
    caps = Capabilities.from_wire({"retrieve": {"maxK": "lots", "modes": ["dense"], "mmr": 1},
                                   "filter": {"fields": 3, "operators": ["eq"]},
                                   "citations": True, "streaming": None, "log": False,
                                   "x-acme": "not an object"})
    assert caps.retrieve == RetrieveCap(modes=["dense"])
    assert caps.filter == FilterCap(operators=["eq"])
    assert caps.has("citations") and caps.citations is not None
    assert not caps.has("streaming") and caps.streaming is None
    assert not caps.has("log")
    assert caps.get("x-acme") == "not an object"
    assert caps.get("pagination") is None
    assert set(caps.keys()) == {"retrieve", "filter", "citations", "x-acme"}


def test_non_object_wire_reads_as_no_capabilities() -> None:
    assert Capabilities.from_wire([1, 2]).keys() == []


def test_capabilities_from_typed_metadata() -> None:
    caps = Capabilities({"index": IndexCap(writable=True), "retrieve": RetrieveCap(max_k=50),
                         "x-acme": {"v": 1}})
    assert caps.to_wire() == {"index": {"writable": True}, "retrieve": {"maxK": 50},
                              "x-acme": {"v": 1}}
    assert caps.index == IndexCap(writable=True)


def test_every_known_capability_has_a_typed_view() -> None:
    caps = Capabilities.from_wire({key: {} for key in CAPABILITY_TYPES})
    for key, typ in CAPABILITY_TYPES.items():
        assert isinstance(caps.get(key), typ)
