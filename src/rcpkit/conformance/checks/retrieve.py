"""``retrieve`` checks (§7.7): params validation, the funnel and ``k`` clamping,
options vs ``strict``, ``minScore``, determinism and snapshots (§7.7.1),
pagination (§10), streaming progress (§9), and the L1 profile (§14.2)."""

from __future__ import annotations

import math
import re
from typing import Any, TypeGuard

from rcpkit.conformance.checks.corpus import SEED_WORD, seed_corpus
from rcpkit.conformance.model import Ctx, Level, check

L0, L1, L2 = Level.L0, Level.L1, Level.L2
RET = ("retrieve",)
PROBE_QUERIES = ("retrieval", "search", "the", "data", "protocol", "a")
MODES = ("dense", "sparse", "hybrid")


def is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def expect_hits(ctx: Ctx, result: dict[str, Any], k: int) -> list[dict[str, Any]]:
    """§7.7 Hit shape, finite scores (§4.6) and at most ``k`` hits."""
    hits = result.get("hits")
    ctx.expect(isinstance(hits, list), "result.hits an array (§7.7)")
    assert isinstance(hits, list)
    ctx.expect(len(hits) <= k, f"at most k={k} hits (§7.7)", got=f"{len(hits)} hits")
    for hit in hits:
        ctx.expect(isinstance(hit, dict), "each hit an object", got=hit)
        hit_id = hit.get("id")
        ctx.expect(isinstance(hit_id, str) or is_integer(hit_id), "hit.id string|number", got=hit)
        score = hit.get("score")
        ctx.expect(
            is_number(score) and math.isfinite(score), "hit.score a finite number (§4.6)", got=hit
        )
        if "confidence" in hit:
            ctx.expect(
                is_number(hit["confidence"]) and 0 <= hit["confidence"] <= 1,
                "hit.confidence in [0,1] (§7.7.2)",
                got=hit,
            )
        trust = hit.get("trust")
        if isinstance(trust, dict) and "score" in trust:
            ctx.expect(
                is_number(trust["score"]) and 0 <= trust["score"] <= 1,
                "trust.score in [0,1] (§4.6)",
                got=hit,
            )
    return hits


def probe_query(ctx: Ctx) -> str:
    """A query with at least two hits in the default mode and one in every advertised mode,
    cached per session.

    A writable index is probed with documents the harness writes itself (reserved
    ``rcpcheck-seed-`` ids, deleted afterwards), whatever it already holds, and with a word
    every seed contains, so the checks measure what they wrote. A read-only index is probed
    with common words, then with a word taken from one of its own hits."""
    scratch = ctx.session.scratch
    if "probe_query" not in scratch:
        queries: tuple[str, ...] = (SEED_WORD,) if seed_corpus(ctx) else PROBE_QUERIES
        scratch["probe_query"] = _find_probe_query(ctx, queries)
        if scratch["probe_query"] is None:
            scratch["probe_query"] = _find_probe_query(ctx, _words_of_a_hit(ctx))
    query = scratch["probe_query"]
    if not isinstance(query, str):
        raise ctx.skip("no probe query returned two or more hits on this corpus")
    return query


def _find_probe_query(ctx: Ctx, queries: tuple[str, ...]) -> str | None:
    for query in queries:
        hits = expect_hits(ctx, ctx.result("retrieve", {"query": query, "k": 5}), 5)
        if len(hits) >= 2 and all(
            expect_hits(ctx, ctx.result("retrieve", {"query": query, "k": 2, "mode": mode}), 2)
            for mode in advertised_modes(ctx)
        ):
            return query
    return None


def _words_of_a_hit(ctx: Ctx) -> tuple[str, ...]:
    """The longest words of the first hit that carries text (any mode that returns one)."""
    for query in PROBE_QUERIES:
        for hit in ctx.result("retrieve", {"query": query, "k": 3}).get("hits") or []:
            text = hit.get("text") if isinstance(hit, dict) else None
            if isinstance(text, str):
                words = sorted(set(re.findall(r"[^\W\d_]{4,}", text)),
                               key=lambda word: (-len(word), word))
                return tuple(words[:3])
    return ()


def retrieve_cap(ctx: Ctx) -> dict[str, Any]:
    return ctx.cap("retrieve") or {}


def advertised_modes(ctx: Ctx) -> list[str]:
    modes = retrieve_cap(ctx).get("modes")
    return [m for m in modes if isinstance(m, str)] if isinstance(modes, list) else []


@check("ret.basic", L1, "7.7", "retrieve returns well-formed hits, at most k", requires=RET)
def basic(ctx: Ctx) -> None:
    expect_hits(ctx, ctx.result("retrieve", {"query": probe_query(ctx), "k": 3}), 3)


@check("ret.k-one", L1, "7.7", "k=1 returns at most one hit", requires=RET)
def k_one(ctx: Ctx) -> None:
    expect_hits(ctx, ctx.result("retrieve", {"query": probe_query(ctx), "k": 1}), 1)


@check("ret.sorted", L1, "14.2", "hits are ordered by non-increasing score", requires=RET)
def sorted_by_score(ctx: Ctx) -> None:
    hits = expect_hits(ctx, ctx.result("retrieve", {"query": probe_query(ctx), "k": 10}), 10)
    scores = [h["score"] for h in hits]
    ctx.expect(scores == sorted(scores, reverse=True), "scores best-first", got=scores)


@check("ret.k-clamp", L0, "12", "k above maxK is clamped, not an error", requires=RET)
def k_clamp(ctx: Ctx) -> None:
    max_k = retrieve_cap(ctx).get("maxK")
    k = max_k + 1000 if is_integer(max_k) else 1_000_000
    hits = expect_hits(ctx, ctx.result("retrieve", {"query": probe_query(ctx), "k": k}), k)
    if is_integer(max_k):
        ctx.expect(len(hits) <= max_k, f"at most maxK={max_k} hits (§7.7 clamp)")


@check(
    "ret.candidatek-clamp", L0, "7.7", "a huge candidateK is clamped, not an error", requires=RET
)
def candidate_k_clamp(ctx: Ctx) -> None:
    expect_hits(
        ctx,
        ctx.result("retrieve", {"query": probe_query(ctx), "k": 2, "candidateK": 1_000_000}),
        2,
    )


@check(
    "ret.funnel",
    L0,
    "7.7",
    "candidateK < k is rejected with -32602 or served with at most k hits",
    requires=RET,
)
def funnel(ctx: Ctx) -> None:
    response = ctx.call("retrieve", {"query": probe_query(ctx), "k": 5, "candidateK": 2})
    if "error" in response:
        ctx.expect(response["error"]["code"] == -32602, "-32602 for a funnel violation")
    else:
        expect_hits(ctx, response["result"], 5)


@check(
    "ret.usage-counts",
    L1,
    "7.7",
    "usage counts, when reported, are non-negative integers",
    requires=RET,
)
def usage_counts(ctx: Ctx) -> None:
    result = ctx.result("retrieve", {"query": probe_query(ctx), "k": 2})
    usage = result.get("usage")
    if usage is None:
        raise ctx.skip("no usage reported")
    ctx.expect(isinstance(usage, dict), "usage an object")
    for key in ("candidates", "reranked"):
        if key in usage:
            ctx.expect(is_integer(usage[key]) and usage[key] >= 0, f"usage.{key} integer ≥ 0")


def _register_invalid(name: str, title: str, params: dict[str, Any]) -> None:
    @check(f"ret.invalid.{name}", L0, "12", title, requires=RET)
    def invalid(ctx: Ctx) -> None:
        ctx.error("retrieve", params, -32602)


for _name, _title, _params in (
    ("no-query", "missing query yields -32602", {"k": 3}),
    ("query-number", "a numeric query yields -32602", {"query": 42, "k": 3}),
    ("k-negative", "k=-1 yields -32602", {"query": "q", "k": -1}),
    ("k-fraction", "k=2.5 yields -32602", {"query": "q", "k": 2.5}),
    ("k-string", 'k="3" yields -32602 (integers are never strings)', {"query": "q", "k": "3"}),
    ("k-bool", "k=true yields -32602 (booleans are not numbers)", {"query": "q", "k": True}),
    ("minscore-string", 'minScore="high" yields -32602', {"query": "q", "k": 3, "minScore": "x"}),
    ("filter-not-object", "filter=[] yields -32602", {"query": "q", "k": 3, "filter": []}),
    ("strict-string", 'strict="no" yields -32602', {"query": "q", "k": 3, "strict": "no"}),
):
    _register_invalid(_name, _title, _params)


@check("ret.unicode", L0, "4.6", "a query using the full Unicode range is accepted", requires=RET)
def unicode_query(ctx: Ctx) -> None:
    query = "Zürich — 東京 — naïve émigré — Ελλάδα — 😀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"
    expect_hits(ctx, ctx.result("retrieve", {"query": query, "k": 3}), 3)


@check("ret.unknown-fields", L0, "4.6", "unknown and x- params fields are ignored", requires=RET)
def unknown_fields(ctx: Ctx) -> None:
    params = {"query": probe_query(ctx), "k": 2, "futureOption": {"a": 1}, "x-acme-boost": 2}
    expect_hits(ctx, ctx.result("retrieve", params), 2)


@check("ret.meta", L0, "4.4", "unknown _meta keys on retrieve are ignored", requires=RET)
def meta_ignored(ctx: Ctx) -> None:
    params = {"query": probe_query(ctx), "k": 2, "_meta": {"x-trace": "abc", "future": [1]}}
    expect_hits(ctx, ctx.result("retrieve", params), 2)


@check("ret.null-absent", L0, "4.6", "null optional options are treated as absent", requires=RET)
def null_as_absent(ctx: Ctx) -> None:
    params = {"query": probe_query(ctx), "k": 2, "minScore": None, "cursor": None, "seed": None}
    expect_hits(ctx, ctx.result("retrieve", params), 2)


@check("ret.seed-tolerated", L0, "7.7.1", "seed is never an error", requires=RET)
def seed_tolerated(ctx: Ctx) -> None:
    expect_hits(ctx, ctx.result("retrieve", {"query": probe_query(ctx), "k": 2, "seed": 7}), 2)


@check("ret.min-score", L1, "7.7", "every hit scores at least minScore", requires=RET)
def min_score(ctx: Ctx) -> None:
    query = probe_query(ctx)
    hits = expect_hits(ctx, ctx.result("retrieve", {"query": query, "k": 5}), 5)
    threshold = hits[len(hits) // 2]["score"]
    filtered = expect_hits(
        ctx, ctx.result("retrieve", {"query": query, "k": 5, "minScore": threshold}), 5
    )
    if any(h["score"] > threshold for h in hits):
        ctx.expect(filtered != [], "the hits scoring above minScore to remain")
    ctx.expect(
        all(h["score"] >= threshold for h in filtered),
        f"every score ≥ minScore={threshold}",
        got=[h["score"] for h in filtered],
    )


@check("ret.min-score-high", L1, "7.7", "minScore above every score yields no hits", requires=RET)
def min_score_high(ctx: Ctx) -> None:
    query = probe_query(ctx)
    hits = expect_hits(ctx, ctx.result("retrieve", {"query": query, "k": 5}), 5)
    threshold = max(h["score"] for h in hits) * 2 + 1e6
    result = ctx.result("retrieve", {"query": query, "k": 5, "minScore": threshold})
    ctx.expect(expect_hits(ctx, result, 5) == [], f"no hit with score ≥ {threshold}")


def _register_mode(mode: str) -> None:
    @check(f"ret.mode.{mode}", L1, "14.5", f"advertised {mode} mode returns hits", requires=RET)
    def mode_works(ctx: Ctx) -> None:
        if mode not in advertised_modes(ctx):
            raise ctx.skip(f"mode {mode} not advertised")
        params = {"query": probe_query(ctx), "k": 3, "mode": mode}
        ctx.expect(expect_hits(ctx, ctx.result("retrieve", params), 3) != [], "hits")


for _mode in MODES:
    _register_mode(_mode)


def _unadvertised_mode(ctx: Ctx) -> str:
    missing = [m for m in MODES if m not in advertised_modes(ctx)]
    if not missing:
        raise ctx.skip("every mode is advertised")
    return missing[0]


@check(
    "ret.mode-unsupported",
    L0,
    "7.7",
    "an unadvertised mode yields -32005 (strict default)",
    requires=RET,
)
def mode_unsupported(ctx: Ctx) -> None:
    mode = _unadvertised_mode(ctx)
    ctx.error("retrieve", {"query": "q", "k": 2, "mode": mode}, -32005)


@check(
    "ret.mode-strict-false",
    L0,
    "7.7",
    "strict:false lets an unadvertised mode degrade",
    requires=RET,
)
def mode_strict_false(ctx: Ctx) -> None:
    params = {"query": probe_query(ctx), "k": 2, "mode": _unadvertised_mode(ctx), "strict": False}
    expect_hits(ctx, ctx.result("retrieve", params), 2)


@check(
    "ret.mode-bogus", L0, "7.7", "an undefined mode value is rejected (-32005/-32602)", requires=RET
)
def mode_bogus(ctx: Ctx) -> None:
    ctx.error("retrieve", {"query": "q", "k": 2, "mode": "x-bogus"}, (-32005, -32602))


@check(
    "ret.fusion-unsupported", L0, "7.7", "an unadvertised fusion method yields -32005", requires=RET
)
def fusion_unsupported(ctx: Ctx) -> None:
    fusion = retrieve_cap(ctx).get("fusion")
    advertised = fusion if isinstance(fusion, list) else []
    method = next((m for m in ("rrf", "weighted", "convex") if m not in advertised), None)
    if method is None or "hybrid" not in advertised_modes(ctx):
        raise ctx.skip("hybrid with every fusion method advertised, or no hybrid")
    params = {"query": "q", "k": 2, "mode": "hybrid", "fusion": {"method": method}}
    ctx.error("retrieve", params, -32005)


@check(
    "ret.rerank-unsupported",
    L0,
    "7.7",
    "an unadvertised inline rerank method yields -32005",
    requires=RET,
)
def rerank_unsupported(ctx: Ctx) -> None:
    methods = (ctx.cap("rerank") or {}).get("methods")
    builtin = retrieve_cap(ctx).get("rerankBuiltin") is True
    advertised = methods if builtin and isinstance(methods, list) else []
    method = next((m for m in ("llm", "colbert", "cross-encoder") if m not in advertised), None)
    if method is None:
        raise ctx.skip("every rerank method is advertised")
    params = {"query": "q", "k": 2, "rerank": {"method": method}}
    ctx.error("retrieve", params, -32005)


@check("ret.mmr-unsupported", L0, "7.7", "mmr without retrieve.mmr yields -32005", requires=RET)
def mmr_unsupported(ctx: Ctx) -> None:
    if retrieve_cap(ctx).get("mmr") is True:
        raise ctx.skip("mmr advertised")
    ctx.error("retrieve", {"query": "q", "k": 2, "mmr": {"lambda": 0.5}}, -32005)


@check("ret.unit-unsupported", L0, "7.7.2", "an unadvertised unit yields -32005", requires=RET)
def unit_unsupported(ctx: Ctx) -> None:
    units = retrieve_cap(ctx).get("units")
    if isinstance(units, list) and "community" in units:
        raise ctx.skip("unit community advertised")
    ctx.error("retrieve", {"query": "q", "k": 2, "unit": "community"}, -32005)


@check(
    "ret.modality-unsupported",
    L0,
    "4.8",
    "an image query block on a text-only server yields -32005",
    requires=RET,
)
def modality_unsupported(ctx: Ctx) -> None:
    modalities = retrieve_cap(ctx).get("modalities")
    if isinstance(modalities, list) and "image" in modalities:
        raise ctx.skip("image modality advertised")
    block = {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
    ctx.error("retrieve", {"query": block, "k": 2}, -32005)


@check(
    "ret.text-block",
    L0,
    "4.8",
    "a multimodal server accepts a text Content block query",
    requires=RET,
)
def text_block(ctx: Ctx) -> None:
    modalities = retrieve_cap(ctx).get("modalities")
    if not isinstance(modalities, list) or modalities in ([], ["text"]):
        raise ctx.skip("text-only server (string form suffices)")
    block = {"type": "text", "text": probe_query(ctx)}
    expect_hits(ctx, ctx.result("retrieve", {"query": block, "k": 2}), 2)


@check(
    "ret.no-progress-without-token",
    L0,
    "9",
    "no progress frames for a request without token",
    requires=RET,
)
def no_progress_without_token(ctx: Ctx) -> None:
    ctx.result("retrieve", {"query": probe_query(ctx), "k": 3})
    progress = [n for n in ctx.notifications if n.get("method") == "notifications/progress"]
    ctx.expect(progress == [], "no notifications/progress (§9)", got=progress[:2])


def _register_progress_token(name: str, token: Any) -> None:
    @check(
        f"stream.token-{name}",
        L2,
        "9",
        f"a {name} progressToken is echoed verbatim",
        requires=("retrieve", "streaming"),
    )
    def token_echo(ctx: Ctx) -> None:
        params = {"query": probe_query(ctx), "k": 3, "_meta": {"progressToken": token}}
        expect_hits(ctx, ctx.result("retrieve", params), 3)
        for note in ctx.notifications:
            if note.get("method") != "notifications/progress":
                continue
            body = note.get("params", {})
            ctx.expect(
                type(body.get("progressToken")) is type(token)
                and body.get("progressToken") == token,
                f"progressToken {token!r} (§9)",
                got=note,
            )
            progress = body.get("progress")
            ctx.expect(is_number(progress) and 0 <= progress <= 1, "progress in [0,1]", got=note)


for _name, _token in (("int", 77), ("string", "tok-ü")):
    _register_progress_token(_name, _token)


@check(
    "ret.determinism", L2, "7.7.1", "same query, params and seed give identical hits", requires=RET
)
def determinism(ctx: Ctx) -> None:
    if retrieve_cap(ctx).get("deterministic") is not True:
        raise ctx.skip("retrieve.deterministic not advertised")
    params = {"query": probe_query(ctx), "k": 5, "seed": 12345}
    first = expect_hits(ctx, ctx.result("retrieve", params), 5)
    second = expect_hits(ctx, ctx.result("retrieve", params), 5)
    pairs = [[(h["id"], h["score"]) for h in hits] for hits in (first, second)]
    ctx.expect(pairs[0] == pairs[1], "identical (id, score) lists", got=pairs)


@check("ret.snapshot-pin", L2, "7.7.1", "pinning the served indexVersion is honoured", requires=RET)
def snapshot_pin(ctx: Ctx) -> None:
    if retrieve_cap(ctx).get("snapshots") is not True:
        raise ctx.skip("retrieve.snapshots not advertised")
    query = probe_query(ctx)
    first = ctx.result("retrieve", {"query": query, "k": 3})
    version = first.get("indexVersion")
    ctx.expect(isinstance(version, str), "result.indexVersion echoed (§7.7.1)")
    pinned = ctx.result("retrieve", {"query": query, "k": 3, "indexVersion": version})
    ctx.expect(pinned.get("indexVersion") == version, f"the pinned snapshot {version!r} served")


@check(
    "ret.snapshot-unknown",
    L2,
    "7.7.1",
    "an unknown pinned indexVersion fails (-32010/-32016)",
    requires=RET,
)
def snapshot_unknown(ctx: Ctx) -> None:
    if retrieve_cap(ctx).get("snapshots") is not True:
        raise ctx.skip("retrieve.snapshots not advertised")
    params = {"query": "q", "k": 3, "indexVersion": "x-conformance-no-such-snapshot"}
    ctx.error("retrieve", params, (-32010, -32016))


#: Pages the walk of ``page.terminates`` takes at most; its page size follows from ``maxK``.
PAGING_WALK = 50


@check(
    "page.terminates",
    L2,
    "10",
    "following nextCursor ends within maxK hits without repeating a cursor",
    requires=("retrieve", "pagination"),
)
def pagination_terminates(ctx: Ctx) -> None:
    """§10 paging under the advertised bounds: recall is clamped to ``retrieve.maxK`` (§7.7),
    so every cursor is new and the pages end before their hits exceed ``maxK`` (one more,
    empty, page allowed), however large the corpus. Pages of ``ceil(maxK / 50)`` hits keep
    the walk within about 50 requests. Without ``maxK`` nothing bounds the end: a walk still
    minting new cursors after 50 pages is skipped, not failed."""
    advertised = retrieve_cap(ctx).get("maxK")
    max_k = advertised if is_integer(advertised) and advertised >= 1 else None
    k, pages = 2, PAGING_WALK
    if max_k is not None:
        k = min(max_k, max(2, -(-max_k // PAGING_WALK)))
        pages = -(-max_k // k) + 1
    params: dict[str, Any] = {"query": probe_query(ctx), "k": k}
    seen: set[str] = set()
    hits = 0
    for page in range(1, pages + 1):
        result = ctx.result("retrieve", params)
        hits += len(expect_hits(ctx, result, k))
        if max_k is not None:
            ctx.expect(hits <= max_k, f"at most maxK={max_k} hits over all pages (§7.7, §10)",
                       got=f"{hits} hits in {page} pages of k={k}")
        cursor = result.get("nextCursor")
        if cursor in (None, ""):
            return
        ctx.expect(isinstance(cursor, str) and cursor not in seen, "a new opaque cursor (§10)")
        seen.add(cursor)
        params = {**params, "cursor": cursor}
    if max_k is None:
        raise ctx.skip(f"no retrieve.maxK bounds paging: {pages} pages of k={k} followed, "
                       "each with a new cursor")
    raise ctx.fail(f"pagination to end within {pages} pages of k={k} (maxK={max_k}, §10)")


@check(
    "page.bad-cursor",
    L2,
    "10",
    "a forged cursor is rejected (-32015/-32602)",
    requires=("retrieve", "pagination"),
)
def bad_cursor(ctx: Ctx) -> None:
    ctx.error("retrieve", {"query": "q", "k": 2, "cursor": "x-forged-cursor"}, (-32015, -32602))


@check(
    "cite.present",
    L1,
    "6",
    "with citations advertised, hits carry citation or trust",
    requires=("retrieve", "citations"),
)
def citations(ctx: Ctx) -> None:
    hits = expect_hits(ctx, ctx.result("retrieve", {"query": probe_query(ctx), "k": 3}), 3)
    for hit in hits:
        citation = hit.get("citation")
        ctx.expect(
            (isinstance(citation, dict) and isinstance(citation.get("source"), str))
            or isinstance(hit.get("trust"), dict),
            "citation {source} or trust on each hit (§6)",
            got=hit,
        )


# -- level profiles (§14.2, §14.3) -------------------------------------------------------------

L2_FEATURES = (
    "rerank",
    "multiVector",
    "sparseEmbed",
    "transform",
    "graph",
    "streaming",
    "pagination",
    "log",
)


@check(
    "profile.l1",
    L1,
    "14.2",
    "L1 profile: retrieve with dense/sparse/hybrid, filter and citations",
    profile=True,
)
def profile_l1(ctx: Ctx) -> None:
    missing = [m for m in MODES if m not in advertised_modes(ctx)]
    missing += [c for c in ("retrieve", "filter", "citations") if c not in ctx.capabilities]
    if missing:
        raise ctx.skip(f"L1 not claimed by capabilities; missing: {', '.join(missing)}")


@check("profile.l2", L2, "14.3", "L2 profile: at least two SOTA features advertised", profile=True)
def profile_l2(ctx: Ctx) -> None:
    features = [f for f in L2_FEATURES if f in ctx.capabilities]
    cap = retrieve_cap(ctx)
    if cap.get("deterministic") is True or cap.get("snapshots") is True:
        features.append("reproducibility")
    if len(features) < 2:
        raise ctx.skip(f"only {features or 'no'} L2 features advertised")
