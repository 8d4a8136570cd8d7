"""Checks of the knowledge surfaces: ``query/transform`` (§7.8), ``graph`` (§7.9) and
``memory/build`` / ``memory/recall`` (§7.17).

Beyond ``methods``' basic presence checks: each op's own result fields, ``op`` and
``method`` outside the advertised lists (-32005), the §15.5 bounds a server advertises
(``graph.maxHops``, ``graph.levels``, ``transform.maxN``, ``memory.maxN``: one past the
bound is -32602, or -32011 shed) and ``n`` respected; memory scopes, updates, -32015 for
an unknown ``memoryId`` on build, and clue ``seedIds`` that ``graph neighbors`` accepts.
Queries come from the harness seed corpus when the index is writable, so a graph built
from it has concepts to walk. With ``--schema`` every result is also validated against
``ResultFor`` (``schema.frames``).
"""

from __future__ import annotations

from typing import Any

from rcpkit.conformance.checks.corpus import seed_corpus
from rcpkit.conformance.checks.retrieve import expect_hits, is_integer, is_number
from rcpkit.conformance.model import Ctx, Level, check

L0, L1, L2 = Level.L0, Level.L1, Level.L2
_QUERY = "hybrid retrieval of documents"
_BOUND_CODES = (-32602, -32011)


def _listed(ctx: Ctx, capability: str, key: str) -> list[str]:
    values = (ctx.cap(capability) or {}).get(key)
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


def _bound(ctx: Ctx, capability: str, key: str) -> int:
    value = (ctx.cap(capability) or {}).get(key)
    if not is_integer(value) or value < 1:
        raise ctx.skip(f"{capability}.{key} not advertised")
    return value


def _require(ctx: Ctx, capability: str, key: str, value: str) -> None:
    if value not in _listed(ctx, capability, key):
        raise ctx.skip(f"{value} not in {capability}.{key}")


def _graph(ctx: Ctx, op: str, **params: Any) -> dict[str, Any]:
    seed_corpus(ctx)
    return ctx.result("graph", {"op": op, **params})


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _expect_communities(ctx: Ctx, result: dict[str, Any], *, scored: bool) -> None:
    communities = result.get("communities")
    ctx.expect(isinstance(communities, list), "communities an array (§7.9)", got=result)
    assert isinstance(communities, list)
    for community in communities:
        ctx.expect(isinstance(community, dict) and (isinstance(community.get("id"), str)
                                                     or is_integer(community.get("id"))),
                   "each community an object with an id (§7.9)", got=community)
        ctx.expect(isinstance(community.get("summary"), str),
                   "community.summary a string (§7.9)", got=community)
        if scored:
            ctx.expect(is_number(community.get("score")), "community.score a number (§7.9)",
                       got=community)
        else:
            level = community.get("level")
            ctx.expect(is_integer(level) and level >= 0,
                       "community.level an integer ≥ 0 (§7.9)", got=community)


@check("graph.op-fields", L2, "7.9", "each graph op returns the fields §7.9 gives it",
       requires=("graph",))
def graph_op_fields(ctx: Ctx) -> None:
    ops = _listed(ctx, "graph", "ops")
    seeds: list[str] = []
    for op in ("local", "drift"):
        if op in ops:
            result = _graph(ctx, op, query=_QUERY, k=3)
            hits = expect_hits(ctx, result, 3)
            seeds += [str(hit["id"]) for hit in hits]
            if op == "drift":
                ctx.expect(_strings(result.get("followups", [])),
                           "drift followups an array of strings (§7.9)", got=result)
    if "global" in ops:
        result = _graph(ctx, "global", query=_QUERY, k=3)
        ctx.expect(isinstance(result.get("summary"), str), "global summary a string (§7.9)",
                   got=result)
        _expect_communities(ctx, result, scored=True)
    if "communities" in ops:
        _expect_communities(ctx, _graph(ctx, "communities", level=0), scored=False)
    if "neighbors" in ops and seeds:
        result = _graph(ctx, "neighbors", seedIds=seeds[:1], hops=1, k=5)
        nodes, edges = result.get("nodes"), result.get("edges", [])
        ctx.expect(isinstance(nodes, list) and all(
            isinstance(n, dict) and "id" in n and is_number(n.get("score", 0)) for n in nodes),
            "neighbors nodes [{id, score}] (§7.9)", got=result)
        ctx.expect(isinstance(edges, list) and all(
            isinstance(e, dict) and "src" in e and "dst" in e
            and is_number(e.get("weight", 0)) for e in edges),
            "neighbors edges [{src, dst, weight}] (§7.9)", got=result)


@check("graph.unknown-op", L0, "7.9", "an op that is in no graph.ops yields -32005",
       requires=("graph",))
def graph_unknown_op(ctx: Ctx) -> None:
    error = ctx.error("graph", {"op": "x-rcpcheck-unknown", "query": "q"}, -32005)
    data = error.get("data")
    ctx.expect(isinstance(data, dict) and isinstance(data.get("option"), str),
               "error.data.option naming the op (§12.1)", got=error)


@check("graph.hops-bound", L1, "15.5", "hops above the advertised graph.maxHops is refused",
       requires=("graph",))
def graph_hops_bound(ctx: Ctx) -> None:
    _require(ctx, "graph", "ops", "neighbors")
    max_hops = _bound(ctx, "graph", "maxHops")
    seed = _seed_ids(ctx)
    _graph(ctx, "neighbors", seedIds=seed, hops=max_hops)
    error = ctx.error("graph", {"op": "neighbors", "seedIds": seed, "hops": max_hops + 1},
                      _BOUND_CODES)
    if error["code"] == -32602:
        ctx.expect((error.get("data") or {}).get("field") == "hops",
                   "error.data.field = hops (§12.1)", got=error)


def _seed_ids(ctx: Ctx) -> list[str]:
    """One hit id for ``neighbors``: from ``graph local``, else from ``retrieve``."""
    seed_corpus(ctx)
    if "local" in _listed(ctx, "graph", "ops"):
        hits = expect_hits(ctx, _graph(ctx, "local", query=_QUERY, k=1), 1)
    elif "retrieve" in ctx.capabilities:
        hits = expect_hits(ctx, ctx.result("retrieve", {"query": _QUERY, "k": 1}), 1)
    else:
        hits = []
    if not hits:
        raise ctx.skip("no hit to seed neighbors with")
    return [str(hits[0]["id"])]


@check("graph.level-bound", L1, "7.9", "communities at a level beyond graph.levels is refused",
       requires=("graph",))
def graph_level_bound(ctx: Ctx) -> None:
    _require(ctx, "graph", "ops", "communities")
    levels = _bound(ctx, "graph", "levels")
    result = _graph(ctx, "communities", level=levels - 1)
    for community in result.get("communities") or []:
        if isinstance(community, dict) and "level" in community:
            ctx.expect(community["level"] == levels - 1,
                       f"only communities of level {levels - 1}", got=community)
    ctx.error("graph", {"op": "communities", "level": levels}, _BOUND_CODES)


@check("transform.unknown-method", L0, "7.8",
       "a method that is in no transform.methods yields -32005", requires=("transform",))
def transform_unknown_method(ctx: Ctx) -> None:
    error = ctx.error("query/transform", {"query": "q", "method": "x-rcpcheck-unknown"}, -32005)
    data = error.get("data")
    ctx.expect(isinstance(data, dict) and isinstance(data.get("option"), str),
               "error.data.option naming the method (§12.1)", got=error)


@check("transform.n", L2, "7.8", "multi-query and decompose return between 1 and n queries",
       requires=("transform",))
def transform_n(ctx: Ctx) -> None:
    methods = [m for m in ("multi-query", "decompose") if m in _listed(ctx, "transform",
                                                                        "methods")]
    if not methods:
        raise ctx.skip("neither multi-query nor decompose advertised")
    seed_corpus(ctx)
    for method in methods:
        result = ctx.result("query/transform", {
            "query": "hybrid search and chunking of long documents", "method": method, "n": 2})
        queries = result.get("queries")
        ctx.expect(isinstance(queries, list) and _strings(queries) and 1 <= len(queries) <= 2,
                   f"{method}: 1 to n=2 queries (§7.8, §15.5)", got=result)


@check("transform.n-bound", L1, "15.5", "n above the advertised transform.maxN is refused",
       requires=("transform",))
def transform_n_bound(ctx: Ctx) -> None:
    _require(ctx, "transform", "methods", "multi-query")
    max_n = _bound(ctx, "transform", "maxN")
    ctx.result("query/transform", {"query": _QUERY, "method": "multi-query", "n": max_n})
    error = ctx.error("query/transform",
                      {"query": _QUERY, "method": "multi-query", "n": max_n + 1}, _BOUND_CODES)
    if error["code"] == -32602:
        ctx.expect((error.get("data") or {}).get("field") == "n",
                   "error.data.field = n (§12.1)", got=error)


@check("transform.hyde", L2, "7.8", "hyde returns its passage in hypothetical",
       requires=("transform",))
def transform_hyde(ctx: Ctx) -> None:
    _require(ctx, "transform", "methods", "hyde")
    seed_corpus(ctx)
    result = ctx.result("query/transform", {"query": _QUERY, "method": "hyde"})
    hypothetical = result.get("hypothetical")
    ctx.expect(isinstance(hypothetical, str) and hypothetical.strip() != "",
               "a non-empty hypothetical string (§7.8)", got=result)


# ── memory (§7.17) ─────────────────────────────────────────────────────────────
_SPEC_SCOPES = ("global", "session")
_MEMORY_DOCUMENTS = [
    {"id": "rcpcheck-mem-0", "text": "Hybrid retrieval fuses lexical and dense rankings. "
                                     "Dense retrieval embeds documents."},
    {"id": "rcpcheck-mem-1", "text": "Lexical retrieval scores documents with BM25. Hybrid "
                                     "retrieval of documents beats either alone."},
]


def _memory(ctx: Ctx, **params: Any) -> str:
    """Build a memory over the harness documents; its id, after checking the result."""
    built = ctx.result("memory/build", {"documents": _MEMORY_DOCUMENTS, **params})
    memory_id = built.get("memoryId")
    ctx.expect(isinstance(memory_id, str) and memory_id != "",
               "memoryId a non-empty string (§7.17)", got=built)
    if "tokens" in built:
        ctx.expect(is_integer(built["tokens"]) and built["tokens"] >= 0,
                   "tokens an integer ≥ 0 (§7.17)", got=built)
    assert isinstance(memory_id, str)
    return memory_id


def _expect_clues(ctx: Ctx, result: dict[str, Any]) -> list[dict[str, Any]]:
    clues = result.get("clues")
    ctx.expect(isinstance(clues, list), "clues an array (§7.17)", got=result)
    assert isinstance(clues, list)
    for clue in clues:
        ctx.expect(isinstance(clue, dict), "each clue an object (§7.17)", got=clue)
        ctx.expect(isinstance(clue.get("query", ""), str), "clue.query a string (§7.17)",
                   got=clue)
        ctx.expect(_strings(clue.get("seedIds", [])), "clue.seedIds an array of strings "
                   "(§7.17)", got=clue)
        ctx.expect(is_number(clue.get("weight", 0)), "clue.weight a number (§7.17)", got=clue)
    if "hits" in result:
        expect_hits(ctx, result, len(result["hits"]) if isinstance(result["hits"], list) else 0)
    return clues


@check("memory.result-fields", L2, "7.17",
       "memory/build answers memoryId (tokens an integer), memory/recall clues and hits",
       requires=("memory",))
def memory_result_fields(ctx: Ctx) -> None:
    memory_id = _memory(ctx)
    _expect_clues(ctx, ctx.result("memory/recall", {"query": _QUERY, "memoryId": memory_id}))
    if seed_corpus(ctx):
        built = ctx.result("memory/build", {})
        ctx.expect(isinstance(built.get("memoryId"), str),
                   "a memory over the live index has a memoryId (§7.17)", got=built)
        _expect_clues(ctx, ctx.result("memory/recall", {"query": _QUERY,
                                                        "memoryId": built["memoryId"]}))


@check("memory.update", L2, "7.17", "memory/build with a memoryId updates that memory",
       requires=("memory",))
def memory_update(ctx: Ctx) -> None:
    memory_id = _memory(ctx)
    updated = ctx.result("memory/build", {"memoryId": memory_id,
                                          "documents": _MEMORY_DOCUMENTS[:1]})
    ctx.expect(updated.get("memoryId") == memory_id,
               "the same memoryId back from an update (§7.17)", got=updated)
    ctx.error("memory/build", {"memoryId": "rcpcheck-no-such-memory",
                               "documents": _MEMORY_DOCUMENTS}, -32015)


@check("memory.scopes", L1, "7.17", "every advertised scope builds; another is -32005",
       requires=("memory",))
def memory_scopes(ctx: Ctx) -> None:
    scopes = _listed(ctx, "memory", "scopes")
    ctx.expect(bool(scopes) and set(scopes) <= set(_SPEC_SCOPES),
               "memory.scopes a non-empty subset of global, session (§6)", got=scopes)
    for scope in scopes:
        memory_id = _memory(ctx, scope=scope)
        _expect_clues(ctx, ctx.result("memory/recall", {"query": _QUERY,
                                                        "memoryId": memory_id}))
    for scope in set(_SPEC_SCOPES) - set(scopes):
        ctx.error("memory/build", {"documents": _MEMORY_DOCUMENTS, "scope": scope}, -32005)


@check("memory.n", L2, "7.17", "memory/recall returns at most n clues", requires=("memory",))
def memory_n(ctx: Ctx) -> None:
    memory_id = _memory(ctx)
    for n in (1, 2):
        clues = _expect_clues(ctx, ctx.result("memory/recall", {
            "query": "hybrid lexical dense retrieval", "memoryId": memory_id, "n": n}))
        ctx.expect(len(clues) <= n, f"at most n={n} clues (§7.17, §15.5)", got=clues)


@check("memory.n-bound", L1, "15.5", "n above the advertised memory.maxN is refused",
       requires=("memory",))
def memory_n_bound(ctx: Ctx) -> None:
    max_n = _bound(ctx, "memory", "maxN")
    memory_id = _memory(ctx)
    ctx.result("memory/recall", {"query": _QUERY, "memoryId": memory_id, "n": max_n})
    error = ctx.error("memory/recall", {"query": _QUERY, "memoryId": memory_id,
                                        "n": max_n + 1}, _BOUND_CODES)
    if error["code"] == -32602:
        ctx.expect((error.get("data") or {}).get("field") == "n",
                   "error.data.field = n (§12.1)", got=error)


@check("memory.seeds-graph", L2, "7.17",
       "clue seedIds of a memory over the live index are nodes graph neighbors accepts",
       requires=("memory", "graph"))
def memory_seeds_graph(ctx: Ctx) -> None:
    _require(ctx, "graph", "ops", "neighbors")
    seed_corpus(ctx)
    built = ctx.result("memory/build", {})
    recalled = ctx.result("memory/recall", {"query": _QUERY, "memoryId": built.get("memoryId")})
    seeds = [s for clue in _expect_clues(ctx, recalled) for s in clue.get("seedIds", [])]
    if not seeds:
        raise ctx.skip("no clue carries seedIds")
    result = ctx.result("graph", {"op": "neighbors", "seedIds": seeds[:4], "hops": 1})
    ctx.expect(isinstance(result.get("nodes"), list) and bool(result["nodes"]),
               "neighbors of the clue seeds (§7.17: clues seed a graph traversal)", got=result)
