"""Per-method checks for the other advertised methods: ``index/*`` (§7.10, §7.11),
``embed`` and vector encodings (§7.3, §7.3.1), ``embed/sparse`` (§7.4),
``embed/multi`` (§7.5), ``rerank`` (§7.6), ``query/transform`` (§7.8),
``graph`` (§7.9), ``catalog/list`` (§7.13), ``feedback`` (§7.16),
``memory/*`` (§7.17)."""

from __future__ import annotations

import base64
import binascii
import math
import struct
import uuid
from typing import Any

from rcpkit.conformance.checks.retrieve import expect_hits, is_integer, is_number
from rcpkit.conformance.model import Ctx, Level, check

L0, L1, L2 = Level.L0, Level.L1, Level.L2


def unique_ids(count: int) -> list[str]:
    """Fresh document ids so checks never collide with the server's corpus."""
    stem = f"rcpcheck-{uuid.uuid4().hex[:12]}"
    return [f"{stem}-{i}" for i in range(count)]


def writable(ctx: Ctx) -> None:
    if (ctx.cap("index") or {}).get("writable") is not True:
        raise ctx.skip("index.writable is not true")


def _register_invalid(
    method: str, capability: str, name: str, title: str, params: Any, level: Level = L0
) -> None:
    @check(f"{method}.invalid.{name}", level, "12", title, requires=(capability,))
    def invalid(ctx: Ctx) -> None:
        if method == "index/add":
            writable(ctx)
        ctx.error(method, params, -32602)


for _method, _cap, _name, _title, _params in (
    ("index/add", "index", "no-documents", "index/add without documents yields -32602", {}),
    (
        "index/add",
        "index",
        "text-number",
        "index/add with numeric text yields -32602",
        {"documents": [{"id": "rcpcheck-bad", "text": 5}]},
    ),
    ("index/delete", "index", "no-ids", "index/delete without ids yields -32602", {}),
    (
        "index/delete",
        "index",
        "ids-string",
        "index/delete with ids as a string yields -32602",
        {"ids": "rcpcheck-x"},
    ),
    ("embed", "embed", "no-inputs", "embed without inputs yields -32602", {}),
    (
        "embed",
        "embed",
        "inputs-string",
        "embed with inputs as a string yields -32602",
        {"inputs": "hello"},
    ),
    ("embed/sparse", "sparseEmbed", "no-texts", "embed/sparse without texts yields -32602", {}),
    ("embed/multi", "multiVector", "no-inputs", "embed/multi without inputs yields -32602", {}),
    ("rerank", "rerank", "no-query", "rerank without query yields -32602", {"passages": ["a"]}),
    ("rerank", "rerank", "no-passages", "rerank without passages yields -32602", {"query": "q"}),
    (
        "rerank",
        "rerank",
        "topn-negative",
        "rerank topN=-1 yields -32602",
        {"query": "q", "passages": ["a"], "topN": -1},
    ),
    (
        "query/transform",
        "transform",
        "no-query",
        "query/transform without query yields -32602",
        {"method": "rewrite"},
    ),
    ("graph", "graph", "no-op", "graph without op yields -32602", {"query": "q"}),
    ("feedback", "feedback", "no-signals", "feedback without signals yields -32602", {}),
    ("memory/recall", "memory", "no-query", "memory/recall without query yields -32602", {}),
):
    _register_invalid(_method, _cap, _name, _title, _params)


# -- index (§7.10, §7.11) ----------------------------------------------------------------------


@check(
    "index.positional-ids",
    L1,
    "7.10",
    "index/add returns one id per document, in order",
    requires=("index",),
)
def positional_ids(ctx: Ctx) -> None:
    writable(ctx)
    first, second = unique_ids(2)
    documents = [
        {"id": first, "text": "conformance alpha document"},
        {"text": "conformance document without an id"},
        {"id": second, "text": "conformance beta document"},
    ]
    ids = ctx.result("index/add", {"documents": documents}).get("ids")
    try:
        ctx.expect(isinstance(ids, list) and len(ids) == 3, "ids with 3 entries (§7.10)")
        assert isinstance(ids, list)
        ctx.expect(ids[0] == first and ids[2] == second, "explicit ids in input order")
        ctx.expect(isinstance(ids[1], str) and ids[1] != "", "a minted string id for doc 2")
    finally:
        minted = [i for i in ids or [] if isinstance(i, str)]
        ctx.call("index/delete", {"ids": sorted({first, second, *minted})})


@check(
    "index.upsert",
    L1,
    "7.10",
    "re-adding an explicit id replaces it (no duplicate, no error)",
    requires=("index",),
)
def upsert(ctx: Ctx) -> None:
    writable(ctx)
    (doc_id,) = unique_ids(1)
    marker = "zyxquartzconformance"
    try:
        ctx.result("index/add", {"documents": [{"id": doc_id, "text": f"{marker} old text"}]})
        response = ctx.call(
            "index/add", {"documents": [{"id": doc_id, "text": f"{marker} new text"}]}
        )
        if "error" in response:
            ctx.expect(response["error"]["code"] == -32016, "upsert, or -32016 Conflict (§7.10)")
            return
        if "retrieve" in ctx.capabilities:
            hits = expect_hits(ctx, ctx.result("retrieve", {"query": marker, "k": 10}), 10)
            matching = [h for h in hits if h.get("id") == doc_id]
            ctx.expect(len(matching) <= 1, f"at most one hit with id {doc_id}", got=hits)
    finally:
        ctx.call("index/delete", {"ids": [doc_id]})


@check(
    "index.identical-readd",
    L1,
    "7.10",
    "repeating an identical add is not an error",
    requires=("index",),
)
def identical_readd(ctx: Ctx) -> None:
    writable(ctx)
    (doc_id,) = unique_ids(1)
    params = {"documents": [{"id": doc_id, "text": "identical conformance text"}]}
    try:
        first = ctx.result("index/add", params)
        response = ctx.call("index/add", params)
        if "error" in response:
            ctx.expect(response["error"]["code"] == -32016, "same result or -32016 (§7.10)")
        else:
            ctx.expect(response["result"].get("ids") == first.get("ids"), "the same ids")
    finally:
        ctx.call("index/delete", {"ids": [doc_id]})


@check(
    "index.delete-idempotent",
    L1,
    "7.11",
    "delete counts removals; a repeat deletes 0",
    requires=("index",),
)
def delete_idempotent(ctx: Ctx) -> None:
    writable(ctx)
    (doc_id,) = unique_ids(1)
    ctx.result("index/add", {"documents": [{"id": doc_id, "text": "to be deleted"}]})
    first = ctx.result("index/delete", {"ids": [doc_id]})
    ctx.expect(first.get("deleted") == 1, "deleted: 1 on the first delete (§7.11)")
    second = ctx.result("index/delete", {"ids": [doc_id]})
    ctx.expect(second.get("deleted") == 0, "deleted: 0 on the repeat (§7.11)")


@check(
    "index.delete-absent", L0, "7.11", "deleting an absent id is not an error", requires=("index",)
)
def delete_absent(ctx: Ctx) -> None:
    result = ctx.result("index/delete", {"ids": unique_ids(1)})
    ctx.expect(result.get("deleted") == 0, "deleted: 0")


# -- embed (§7.3, §7.3.1) -----------------------------------------------------------------------


def dimension(ctx: Ctx, capability: str) -> int:
    value = (ctx.cap(capability) or {}).get("dimension")
    ctx.expect(is_integer(value) and value > 0, f"{capability}.dimension a positive integer (§6)")
    assert isinstance(value, int)
    return value


def expect_vector(ctx: Ctx, vector: Any, size: int) -> None:
    ctx.expect(
        isinstance(vector, list)
        and len(vector) == size
        and all(is_number(x) and math.isfinite(x) for x in vector),
        f"a vector of {size} finite numbers",
        got=vector if not isinstance(vector, list) else f"{len(vector)} items",
    )


@check(
    "embed.basic",
    L1,
    "7.3",
    "embed returns one vector of dimension floats per input",
    requires=("embed",),
)
def embed_basic(ctx: Ctx) -> None:
    size = dimension(ctx, "embed")
    result = ctx.result("embed", {"inputs": ["first text", "second text", "third ü 東京"]})
    ctx.expect(result.get("encoding", "json") == "json", "json encoding when none requested")
    vectors = result.get("vectors")
    ctx.expect(isinstance(vectors, list) and len(vectors) == 3, "3 vectors, input order")
    assert isinstance(vectors, list)
    for vector in vectors:
        expect_vector(ctx, vector, size)


@check(
    "embed.texts-synonym", L0, "7.3", "embed accepts the legacy field texts", requires=("embed",)
)
def embed_texts(ctx: Ctx) -> None:
    vectors = ctx.result("embed", {"texts": ["legacy field"]}).get("vectors")
    ctx.expect(isinstance(vectors, list) and len(vectors) == 1, "1 vector")


@check(
    "embed.f32-base64",
    L2,
    "7.3.1",
    "f32-base64 blobs decode to dimension×4 bytes",
    requires=("embed",),
)
def embed_f32(ctx: Ctx) -> None:
    encodings = (ctx.cap("embed") or {}).get("encodings")
    if not isinstance(encodings, list) or "f32-base64" not in encodings:
        raise ctx.skip("f32-base64 not advertised")
    size = dimension(ctx, "embed")
    result = ctx.result("embed", {"inputs": ["a", "b"], "encoding": "f32-base64"})
    ctx.expect(result.get("encoding") == "f32-base64", "encoding echoed (§7.3.1)")
    ctx.expect(result.get("dimension") == size, f"dimension {size} present")
    vectors = result.get("vectors")
    ctx.expect(isinstance(vectors, list) and len(vectors) == 2, "2 blobs")
    assert isinstance(vectors, list)
    for blob in vectors:
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise ctx.fail("padded standard base64 (RFC 4648 §4)", got=blob) from None
        ctx.expect(len(raw) == size * 4, f"{size * 4} bytes", got=f"{len(raw)} bytes")
        values = struct.unpack(f"<{size}f", raw)
        ctx.expect(all(math.isfinite(v) for v in values), "finite little-endian float32")


@check(
    "embed.encoding-unadvertised",
    L0,
    "7.3.1",
    "an unadvertised encoding yields -32005",
    requires=("embed",),
)
def embed_unadvertised_encoding(ctx: Ctx) -> None:
    ctx.error("embed", {"inputs": ["a"], "encoding": "x-f16-base64"}, -32005)


@check(
    "embed.image-unadvertised",
    L0,
    "4.8",
    "an image block on a text-only embed yields -32005",
    requires=("embed",),
)
def embed_image(ctx: Ctx) -> None:
    modalities = (ctx.cap("embed") or {}).get("modalities")
    if isinstance(modalities, list) and "image" in modalities:
        raise ctx.skip("image modality advertised")
    block = {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
    ctx.error("embed", {"inputs": [block]}, -32005)


@check(
    "sparse.basic",
    L2,
    "7.4",
    "embed/sparse returns aligned integer indices and float values",
    requires=("sparseEmbed",),
)
def sparse_basic(ctx: Ctx) -> None:
    sparse = ctx.result("embed/sparse", {"texts": ["sparse one", "sparse two"]}).get("sparse")
    ctx.expect(isinstance(sparse, list) and len(sparse) == 2, "2 sparse vectors")
    assert isinstance(sparse, list)
    for entry in sparse:
        indices, values = entry.get("indices"), entry.get("values")
        ctx.expect(
            isinstance(indices, list)
            and isinstance(values, list)
            and len(indices) == len(values)
            and all(is_integer(i) for i in indices)
            and all(is_number(v) and math.isfinite(v) for v in values),
            "indices:[int] and values:[float] of equal length",
            got=entry,
        )


@check(
    "multi.basic",
    L2,
    "7.5",
    "embed/multi returns one matrix of dimension-wide rows per input",
    requires=("multiVector",),
)
def multi_basic(ctx: Ctx) -> None:
    size = dimension(ctx, "multiVector")
    result = ctx.result("embed/multi", {"inputs": ["late interaction", "colbert"]})
    matrices = result.get("matrices")
    ctx.expect(isinstance(matrices, list) and len(matrices) == 2, "2 matrices")
    assert isinstance(matrices, list)
    for matrix in matrices:
        ctx.expect(isinstance(matrix, list) and matrix != [], "a non-empty matrix")
        for row in matrix:
            expect_vector(ctx, row, size)


# -- rerank (§7.6) ----------------------------------------------------------------------------

PASSAGES = ["the eiffel tower is in paris", "bananas are yellow", "paris is the capital"]


@check(
    "rerank.scores", L2, "7.6", "rerank returns one finite score per passage", requires=("rerank",)
)
def rerank_scores(ctx: Ctx) -> None:
    result = ctx.result("rerank", {"query": "where is the eiffel tower", "passages": PASSAGES})
    scores = result.get("scores")
    ctx.expect(
        isinstance(scores, list)
        and len(scores) == len(PASSAGES)
        and all(is_number(s) and math.isfinite(s) for s in scores),
        "scores: 3 finite numbers aligned with passages",
    )


@check(
    "rerank.order",
    L2,
    "7.6",
    "rerank order, when present, lists indices best-first",
    requires=("rerank",),
)
def rerank_order(ctx: Ctx) -> None:
    result = ctx.result("rerank", {"query": "where is the eiffel tower", "passages": PASSAGES})
    order, scores = result.get("order"), result.get("scores")
    if order is None:
        raise ctx.skip("no order returned")
    ctx.expect(
        isinstance(order, list)
        and len(set(order)) == len(order)
        and all(is_integer(i) and 0 <= i < len(PASSAGES) for i in order),
        "distinct passage indices",
    )
    assert isinstance(order, list) and isinstance(scores, list)
    ranked = [scores[i] for i in order]
    ctx.expect(ranked == sorted(ranked, reverse=True), "indices sorted by score, best first")


@check("rerank.topn", L2, "7.6", "rerank with topN=1 is accepted", requires=("rerank",))
def rerank_top_n(ctx: Ctx) -> None:
    result = ctx.result("rerank", {"query": "paris", "passages": PASSAGES, "topN": 1})
    ctx.expect(isinstance(result.get("scores"), list), "scores present")


@check(
    "rerank.method-unadvertised",
    L0,
    "7.6",
    "a rerank method outside rerank.methods → -32005",
    requires=("rerank",),
)
def rerank_method(ctx: Ctx) -> None:
    methods = (ctx.cap("rerank") or {}).get("methods")
    advertised = methods if isinstance(methods, list) else []
    method = next((m for m in ("llm", "colbert", "cross-encoder") if m not in advertised), None)
    if method is None:
        raise ctx.skip("every rerank method advertised")
    ctx.error("rerank", {"query": "q", "passages": ["a"], "method": method}, -32005)


# -- transform, graph, catalog, feedback, memory -------------------------------------------------


def _advertised(ctx: Ctx, capability: str, key: str) -> list[str]:
    values = (ctx.cap(capability) or {}).get(key)
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


@check(
    "transform.methods",
    L2,
    "7.8",
    "every advertised transform method returns queries",
    requires=("transform",),
)
def transform_methods(ctx: Ctx) -> None:
    for method in _advertised(ctx, "transform", "methods"):
        result = ctx.result("query/transform", {"query": "eiffel tower height", "method": method})
        queries = result.get("queries")
        ctx.expect(
            isinstance(queries, list) and all(isinstance(q, str) for q in queries),
            f"queries: [string] for {method}",
        )


@check(
    "transform.unadvertised",
    L0,
    "7.8",
    "an unadvertised transform method yields -32005",
    requires=("transform",),
)
def transform_unadvertised(ctx: Ctx) -> None:
    advertised = _advertised(ctx, "transform", "methods")
    all_methods = ("rewrite", "hyde", "multi-query", "decompose", "step-back")
    method = next((m for m in all_methods if m not in advertised), None)
    if method is None:
        raise ctx.skip("every transform method advertised")
    ctx.error("query/transform", {"query": "q", "method": method}, -32005)


@check(
    "graph.ops",
    L2,
    "7.9",
    "every advertised graph op answers with its result shape",
    requires=("graph",),
)
def graph_ops(ctx: Ctx) -> None:
    keys = {
        "local": "hits",
        "global": "communities",
        "drift": "hits",
        "communities": "communities",
        "neighbors": "nodes",
    }
    for op in _advertised(ctx, "graph", "ops"):
        result = ctx.result("graph", {"op": op, "query": "eiffel tower", "k": 3})
        if op in keys:
            ctx.expect(isinstance(result.get(keys[op]), list), f"{keys[op]} array for op {op}")
        if op in ("local", "drift"):
            expect_hits(ctx, result, 3)


@check(
    "graph.unadvertised", L0, "7.9", "an op outside graph.ops yields -32005", requires=("graph",)
)
def graph_unadvertised(ctx: Ctx) -> None:
    advertised = _advertised(ctx, "graph", "ops")
    op = next(
        (
            o
            for o in ("local", "global", "drift", "communities", "neighbors")
            if o not in advertised
        ),
        None,
    )
    if op is None:
        raise ctx.skip("every graph op advertised")
    ctx.error("graph", {"op": op, "query": "q"}, -32005)


@check(
    "catalog.list",
    L2,
    "7.13",
    "catalog/list returns engines with id, server, capabilities",
    requires=("catalog",),
)
def catalog_list(ctx: Ctx) -> None:
    engines = ctx.result("catalog/list", {}).get("engines")
    ctx.expect(isinstance(engines, list), "engines array")
    assert isinstance(engines, list)
    for engine in engines:
        ctx.expect(
            isinstance(engine.get("id"), str)
            and isinstance(engine.get("server"), dict)
            and isinstance(engine.get("capabilities"), dict),
            "{id, server, capabilities}",
            got=engine,
        )


@check(
    "feedback.accepted",
    L2,
    "7.16",
    "feedback reports how many signals it accepted",
    requires=("feedback",),
)
def feedback_accepted(ctx: Ctx) -> None:
    signals = [{"hitId": "rcpcheck-1", "used": True}, {"hitId": "rcpcheck-2", "reward": 0.5}]
    accepted = ctx.result("feedback", {"signals": signals}).get("accepted")
    ctx.expect(is_integer(accepted) and 0 <= accepted <= 2, "accepted an integer in [0, 2]")


@check(
    "memory.build-recall",
    L2,
    "7.17",
    "memory/build returns memoryId usable by recall",
    requires=("memory",),
)
def memory_build_recall(ctx: Ctx) -> None:
    built = ctx.result("memory/build", {"documents": [{"text": "memory conformance text"}]})
    memory_id = built.get("memoryId")
    ctx.expect(isinstance(memory_id, str), "memoryId string")
    clues = ctx.result("memory/recall", {"query": "memory", "memoryId": memory_id}).get("clues")
    ctx.expect(isinstance(clues, list), "clues array")


@check(
    "memory.unknown-id",
    L2,
    "12",
    "memory/recall with an unknown memoryId yields -32015",
    requires=("memory",),
)
def memory_unknown(ctx: Ctx) -> None:
    ctx.error("memory/recall", {"query": "q", "memoryId": "rcpcheck-no-such-memory"}, -32015)
