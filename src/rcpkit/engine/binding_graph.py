"""``graph`` (§7.9) and ``query/transform`` (§7.8) served from the engine's knowledge
components: :class:`~rcpkit.engine.graph.ConceptGraph` and
:class:`~rcpkit.engine.transform.QueryTransformer`.

:func:`bind_knowledge` opens the graph beside the engine's data (``graph.sqlite``), hooks
its :meth:`~rcpkit.engine.graph.ConceptGraph.sync` to every published version, advertises
both capabilities with their bounds, and registers the handlers. Without the ``graph``
extra (scipy, igraph) nothing is advertised.

Bounds (§15.5), advertised beside the spec's keys: ``graph.maxHops`` (``hops`` above it is
-32602), ``graph.levels`` (``level`` must be below it), ``graph.maxK`` (a larger ``k`` is
clamped, with a note) and ``transform.maxN`` (``n`` above it is -32602).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rcpkit import fusion
from rcpkit.engine.pipeline import Engine, Progress, record_hit
from rcpkit.engine.types import SearchRequest, SearchResult
from rcpkit.protocol.errors import InvalidParams, OptionUnsupported
from rcpkit.protocol.types import GraphParams, TransformParams
from rcpkit.server import Context, Server

if TYPE_CHECKING:
    from rcpkit.engine.graph import ConceptGraph, GraphHit, RankedCommunity
    from rcpkit.engine.transform import QueryTransformer

__all__ = ["GRAPH_OPS", "Rewriter", "bind_knowledge"]

GRAPH_OPS = ("local", "global", "drift", "communities", "neighbors")
_DEFAULT_K = 10
_FOLLOWUPS = 3


def bind_knowledge(server: Server, engine: Engine) -> Rewriter | None:
    """Serve ``graph`` and ``query/transform`` on ``server`` when the extra is installed;
    returns what ``retrieve.rewrite`` runs through (the graph's file stays open for the
    engine's lifetime)."""
    try:
        from rcpkit.engine.graph import ConceptGraph
        from rcpkit.engine.transform import TRANSFORM_METHODS, QueryTransformer
    except ImportError:
        return None
    graph = ConceptGraph.open(engine.config.data_dir, engine.store)
    engine.on_publish(graph.sync)

    def top_texts(query: str, k: int) -> list[str]:
        found = engine.search(SearchRequest(query=query, k=k, mode="sparse"))
        return [hit.text for hit in found.hits if hit.text]

    transformer = QueryTransformer(graph, top_texts)
    handlers = _KnowledgeHandlers(engine, graph, transformer)
    server.capability("graph", {"ops": list(GRAPH_OPS), "maxHops": graph.max_hops,
                                "levels": graph.levels, "maxK": engine.config.max_k})
    server.capability("transform", {"methods": list(TRANSFORM_METHODS),
                                    "maxN": transformer.max_n})
    server.add_method("graph", handlers.graph)
    server.add_method("query/transform", handlers.transform)
    return Rewriter(engine, transformer)


class Rewriter:
    """``retrieve`` with ``rewrite`` (§7.7, §7.8): the query goes through the same transform
    as ``query/transform`` first. One resulting query (``rewrite``; ``hyde``, whose passage
    is the query) is searched as usual; several (``multi-query``, ``decompose``,
    ``step-back``) are searched at one snapshot and fused by RRF, without a cursor (§10: the
    fused ranking has no single query to page through)."""

    def __init__(self, engine: Engine, transformer: QueryTransformer) -> None:
        self._engine = engine
        self._transformer = transformer

    def search(self, request: SearchRequest, method: str, *, progress: Progress | None = None,
               cancelled: Callable[[], bool] | None = None) -> SearchResult:
        done = self._transformer.transform(request.query, method, None,
                                           self._engine.snapshot(request.index_version))
        queries = [done.hypothetical] if done.hypothetical else done.queries
        if len(queries) == 1:
            return self._engine.search(replace(request, query=queries[0]), progress=progress,
                                       cancelled=cancelled)
        if request.cursor is not None:
            raise InvalidParams(f"rewrite {method!r} fuses several queries and has no pages",
                                field="cursor")
        first = self._engine.search(replace(request, query=queries[0]), cancelled=cancelled)
        pinned = replace(request, index_version=first.index_version)
        results = [first, *(self._engine.search(replace(pinned, query=query),
                                                cancelled=cancelled) for query in queries[1:])]
        hits = {hit.id: hit for result in reversed(results) for hit in result.hits}
        fused = fusion.rrf([[(hit.id, hit.score) for hit in result.hits] for result in results])
        note = f"rewrite {method}: {len(queries)} queries fused by RRF"
        return SearchResult(
            hits=[replace(hits[item.key], score=item.score) for item in fused[:request.k]],
            index_version=first.index_version,
            usage=replace(first.usage, notes=(*first.usage.notes, note)))


class _KnowledgeHandlers:
    def __init__(self, engine: Engine, graph: ConceptGraph,
                 transformer: QueryTransformer) -> None:
        self.engine = engine
        self.knowledge = graph
        self.transformer = transformer

    # ── graph (§7.9) ───────────────────────────────────────────────────────
    def graph(self, params: GraphParams, ctx: Context) -> dict[str, Any]:
        if params.op not in GRAPH_OPS:
            raise OptionUnsupported(f"graph op {params.op!r} is not supported", option="op")
        pinned = params.index_version
        if params.cursor is not None:
            pinned, offset, level = _open_cursor(params.cursor)
        seq = self.engine.snapshot(pinned)
        version = self.engine.version_token(seq)
        notes: list[str] = []
        k = params.k or _DEFAULT_K
        if k > self.engine.config.max_k:
            k = self.engine.config.max_k
            notes.append(f"k clamped to maxK={k}")
        if params.hops is not None and params.hops > self.knowledge.max_hops:
            raise InvalidParams(f"hops must be at most {self.knowledge.max_hops}", field="hops")
        if params.level is not None and params.level >= self.knowledge.levels:
            raise InvalidParams(f"level must be below {self.knowledge.levels}", field="level")
        body: dict[str, Any]
        if params.op == "neighbors":
            body = self._neighbors(params, seq, k)
        elif params.op == "communities":
            if params.cursor is None:
                offset, level = 0, params.level or 0
            body = self._communities(seq, version, level, offset, k)
        else:
            query = _required_query(params.query)
            if params.op == "local":
                body = {"hits": self._hits(self.knowledge.local(seq, query, k))}
            elif params.op == "drift":
                body = {"hits": self._hits(self.knowledge.local(seq, query, k)),
                        "followups": self.knowledge.followups(seq, query, _FOLLOWUPS)}
            else:
                ranked = self.knowledge.ranked_communities(seq, query, params.level or 0, k)
                communities = [_community(c) for c in ranked]
                body = {"summary": " ".join(c["summary"] for c in communities),
                        "communities": communities}
        meta: dict[str, Any] = {"indexVersion": version}
        if notes:
            meta["notes"] = notes
        body["_meta"] = meta
        return body

    def _hits(self, found: Sequence[GraphHit]) -> list[dict[str, Any]]:
        records = self.engine.store.chunks([hit.rowid for hit in found])
        hits = []
        for hit in found:
            record = records.get(hit.rowid)
            if record is None:  # collected since the walk (its snapshot has expired)
                continue
            wire = record_hit(record, hit.score).to_wire()
            wire["provenance"] = {"nodes": list(hit.nodes),
                                  "edges": [{"src": s, "dst": d} for s, d in hit.edges]}
            hits.append(wire)
        return hits

    def _neighbors(self, params: GraphParams, seq: int, k: int) -> dict[str, Any]:
        seed_ids = params.seed_ids
        if not seed_ids and params.query and params.query.strip():
            # Liberal: without seeds, the query's concepts are the seeds.
            seed_ids = self.knowledge.query_concepts(seq, params.query)
            if not seed_ids:
                return {"nodes": [], "edges": []}
        if not seed_ids:
            raise InvalidParams("neighbors needs seedIds (or a query)", field="seedIds")
        found = self.knowledge.neighbors(seq, seed_ids, params.hops or 1, k)
        if len(found.unknown) == len(seed_ids):
            raise InvalidParams("no seedIds is a node of this graph (chunk ids 'doc#index' "
                                "or 'concept:<key>')", field="seedIds")
        nodes = []
        for node in found.nodes:
            wire: dict[str, Any] = {"id": node.id, "score": node.score, "kind": node.kind}
            if node.label is not None:
                wire["label"] = node.label
            nodes.append(wire)
        body: dict[str, Any] = {
            "nodes": nodes,
            "edges": [{"src": s, "dst": d, "weight": w} for s, d, w in found.edges]}
        if found.unknown:
            body["unknownSeedIds"] = found.unknown
        return body

    def _communities(self, seq: int, version: str, level: int, offset: int,
                     k: int) -> dict[str, Any]:
        every = self.knowledge.communities(seq, level)
        page = [_community(self.knowledge.describe(seq, c)) for c in every[offset:offset + k]]
        body: dict[str, Any] = {"communities": page}
        if offset + k < len(every):
            body["nextCursor"] = _cursor(version, offset + k, level)
        return body

    # ── query/transform (§7.8) ─────────────────────────────────────────────
    def transform(self, params: TransformParams, ctx: Context) -> dict[str, Any]:
        query = _required_query(params.query)
        if params.n is not None and params.n > self.transformer.max_n:
            raise InvalidParams(f"n must be at most {self.transformer.max_n}", field="n")
        done = self.transformer.transform(query, params.method, params.n,
                                          self.engine.snapshot())
        body: dict[str, Any] = {"queries": done.queries}
        if done.hypothetical is not None:
            body["hypothetical"] = done.hypothetical
        return body


def _required_query(query: str | None) -> str:
    if query is None or not query.strip():
        raise InvalidParams("this op needs a non-empty query", field="query")
    return query


def _community(community: RankedCommunity) -> dict[str, Any]:
    wire: dict[str, Any] = {"id": community.id, "level": community.level,
                            "summary": community.summary, "size": community.size,
                            "concepts": community.concepts, "chunks": community.cited}
    if community.score is not None:
        wire["score"] = community.score
    return wire


def _cursor(version: str, offset: int, level: int) -> str:
    """An opaque §10 cursor for the next ``communities`` page (it only names a page of a
    snapshot, so it needs no signature: any value decodes to a page or -32602)."""
    body = json.dumps({"v": version, "o": offset, "l": level}, separators=(",", ":"))
    return base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def _open_cursor(cursor: str) -> tuple[str, int, int]:
    try:
        state = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        version, offset, level = state["v"], state["o"], state["l"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise InvalidParams("malformed cursor", field="cursor") from None
    if not (isinstance(version, str) and isinstance(offset, int) and isinstance(level, int)
            and offset >= 0 and level >= 0):
        raise InvalidParams("malformed cursor", field="cursor")
    return version, offset, level
