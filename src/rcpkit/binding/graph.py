"""``graph`` (§7.9) served from :class:`~rcpkit.engine.knowledge.graph.ConceptGraph`.

With a language model configured (:mod:`rcpkit.engine.knowledge.llm`), the ``global`` summary is
written by it from the ranked communities' extractive summaries (those, joined, when it
fails); ``graph.summaries`` says which.

Bounds (§15.5), advertised beside the spec's keys: ``graph.maxHops`` (``hops`` above it is
-32602), ``graph.levels`` (``level`` must be below it) and ``graph.maxK`` (a larger ``k`` is
clamped, with a note).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from rcpkit.binding.convert import reply, wire_hit
from rcpkit.binding.errors import answering
from rcpkit.engine.core import Engine
from rcpkit.engine.knowledge.llm import LanguageModel, community_summary
from rcpkit.engine.search.stages import record_hit
from rcpkit.protocol.errors import InvalidParams, OptionUnsupported
from rcpkit.protocol.types import (
    Community,
    GraphEdge,
    GraphNode,
    GraphParams,
    GraphResult,
    Hit,
    Provenance,
    ProvenanceEdge,
)
from rcpkit.server import Context, Server

if TYPE_CHECKING:
    from rcpkit.engine.knowledge.graph import ConceptGraph, GraphHit, RankedCommunity

__all__ = ["DEFAULT_HOPS", "GRAPH_OPS", "register", "required_query"]

GRAPH_OPS = ("local", "global", "drift", "communities", "neighbors")
_DEFAULT_K = 10
DEFAULT_HOPS = 1
"""The ``hops`` of a ``neighbors`` request without one."""
_FOLLOWUPS = 3


def register(server: Server, engine: Engine, graph: ConceptGraph,
             model: LanguageModel | None) -> None:
    server.capability("graph", {"ops": list(GRAPH_OPS), "maxHops": graph.max_hops,
                                "levels": graph.levels, "maxK": engine.config.requests.max_k,
                                "summaries": "extractive" if model is None else "abstractive"})
    server.add_method("graph", answering(_Graph(engine, graph, model)))


class _Graph:
    def __init__(self, engine: Engine, graph: ConceptGraph,
                 model: LanguageModel | None) -> None:
        self.engine = engine
        self.knowledge = graph
        self.model = model

    def __call__(self, params: GraphParams, ctx: Context) -> dict[str, Any]:
        if params.op not in GRAPH_OPS:
            raise OptionUnsupported(f"graph op {params.op!r} is not supported", option="op")
        pinned = params.index_version
        if params.cursor is not None:
            pinned, offset, level = _open_cursor(params.cursor)
        seq = self.engine.snapshot(pinned)
        version = self.engine.version_token(seq)
        notes: list[str] = []
        k = params.k or _DEFAULT_K
        if k > self.engine.config.requests.max_k:
            k = self.engine.config.requests.max_k
            notes.append(f"k clamped to maxK={k}")
        if params.hops is not None and params.hops > self.knowledge.max_hops:
            raise InvalidParams(f"hops must be at most {self.knowledge.max_hops}", field="hops")
        if params.level is not None and params.level >= self.knowledge.levels:
            raise InvalidParams(f"level must be below {self.knowledge.levels}", field="level")
        if params.op == "neighbors":
            result = self._neighbors(params, seq, k)
        elif params.op == "communities":
            if params.cursor is None:
                offset, level = 0, params.level or 0
            result = self._communities(seq, version, level, offset, k)
        else:
            query = required_query(params.query)
            if params.op == "local":
                result = GraphResult(hits=self._hits(self.knowledge.local(seq, query, k)))
            elif params.op == "drift":
                result = GraphResult(hits=self._hits(self.knowledge.local(seq, query, k)),
                                     followups=self.knowledge.followups(seq, query, _FOLLOWUPS))
            else:
                ranked = self.knowledge.ranked_communities(seq, query, params.level or 0, k)
                summaries = [c.summary for c in ranked]
                generated = (community_summary(self.model, query, summaries)
                             if self.model is not None and summaries else None)
                result = GraphResult(summary=generated or " ".join(summaries),
                                     communities=[_community(c) for c in ranked])
        meta: dict[str, Any] = {"indexVersion": version}
        if notes:
            meta["notes"] = notes
        return reply(msgspec.structs.replace(result, meta=meta))

    def _hits(self, found: Sequence[GraphHit]) -> list[Hit]:
        records = self.engine.store.chunks([hit.rowid for hit in found])
        hits = []
        for hit in found:
            record = records.get(hit.rowid)
            if record is None:  # collected since the walk (its snapshot has expired)
                continue
            provenance = Provenance(nodes=list(hit.nodes),
                                    edges=[ProvenanceEdge(src=s, dst=d) for s, d in hit.edges])
            hits.append(wire_hit(record_hit(record, hit.score), provenance=provenance))
        return hits

    def _neighbors(self, params: GraphParams, seq: int, k: int) -> GraphResult:
        seed_ids = params.seed_ids
        if not seed_ids and params.query and params.query.strip():
            # Liberal: without seeds, the query's concepts are the seeds.
            seed_ids = self.knowledge.query_concepts(seq, params.query)
            if not seed_ids:
                return GraphResult(nodes=[], edges=[])
        if not seed_ids:
            raise InvalidParams("neighbors needs seedIds (or a query)", field="seedIds")
        found = self.knowledge.neighbors(seq, seed_ids, params.hops or DEFAULT_HOPS, k)
        if len(found.unknown) == len(seed_ids):
            raise InvalidParams("no seedIds is a node of this graph (document ids, chunk ids "
                                "'doc#index' or 'concept:<key>')", field="seedIds")
        return GraphResult(
            nodes=[GraphNode(id=node.id, score=node.score, kind=node.kind, label=node.label)
                   for node in found.nodes],
            edges=[GraphEdge(src=s, dst=d, weight=w) for s, d, w in found.edges],
            unknown_seed_ids=found.unknown or None)

    def _communities(self, seq: int, version: str, level: int, offset: int,
                     k: int) -> GraphResult:
        every = self.knowledge.communities(seq, level)
        page = [_community(self.knowledge.describe(seq, c)) for c in every[offset:offset + k]]
        more = offset + k < len(every)
        return GraphResult(communities=page,
                           next_cursor=_cursor(version, offset + k, level) if more else None)


def required_query(query: str | None) -> str:
    """The op's query, refused (``-32602`` on ``query``) when absent or blank."""
    if query is None or not query.strip():
        raise InvalidParams("this op needs a non-empty query", field="query")
    return query


def _community(community: RankedCommunity) -> Community:
    return Community(id=community.id, level=community.level, summary=community.summary,
                     score=community.score, size=community.size,
                     concepts=community.concepts, chunks=community.cited)


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
