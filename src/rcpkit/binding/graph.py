"""``graph`` (§7.9) served from :class:`~rcpkit.engine.graph.ConceptGraph`.

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

from rcpkit.binding.convert import reply, wire_hit
from rcpkit.binding.errors import answering
from rcpkit.engine.core import Engine
from rcpkit.engine.search.stages import record_hit
from rcpkit.protocol.errors import InvalidParams, OptionUnsupported
from rcpkit.protocol.types import GraphParams, Provenance, ProvenanceEdge
from rcpkit.server import Context, Server

if TYPE_CHECKING:
    from rcpkit.engine.graph import ConceptGraph, GraphHit, RankedCommunity

__all__ = ["GRAPH_OPS", "register", "required_query"]

GRAPH_OPS = ("local", "global", "drift", "communities", "neighbors")
_DEFAULT_K = 10
_FOLLOWUPS = 3


def register(server: Server, engine: Engine, graph: ConceptGraph) -> None:
    server.capability("graph", {"ops": list(GRAPH_OPS), "maxHops": graph.max_hops,
                                "levels": graph.levels, "maxK": engine.config.max_k})
    server.add_method("graph", answering(_Graph(engine, graph)))


class _Graph:
    def __init__(self, engine: Engine, graph: ConceptGraph) -> None:
        self.engine = engine
        self.knowledge = graph

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
            query = required_query(params.query)
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
            provenance = Provenance(nodes=list(hit.nodes),
                                    edges=[ProvenanceEdge(src=s, dst=d) for s, d in hit.edges])
            hits.append(reply(wire_hit(record_hit(record, hit.score), provenance=provenance)))
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


def required_query(query: str | None) -> str:
    """The op's query, refused (``-32602`` on ``query``) when absent or blank."""
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
