"""``retrieve`` with a hierarchical ``unit`` (§7.7.2): ``community`` (the graph's Leiden
communities, by the PageRank mass the query puts on them), ``node`` (concept nodes, by
personalised PageRank from the query's concepts) and ``tree-node`` (the RAPTOR-style
summary tree, by cosine to the query vector; all levels at once unless ``level`` is given).

Each hit carries its ``unit``, its ``level`` (for communities and tree nodes, 0 the
coarsest), its summary or label as ``text`` and ``provenance.leaves``: the chunk ids it
covers (for a tree node the closest to its centroid, all of them counted in
``meta.leafCount``). ``retrieve.units`` and ``retrieve.levels`` (§6.1) advertise them.
Chunk-only options do not apply: a ``filter`` is -32005, a ``cursor`` -32602, as is a
``level`` for ``node``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rcpkit.engine.core import Engine
from rcpkit.protocol.content import plain_text
from rcpkit.protocol.errors import InvalidParams, OptionUnsupported
from rcpkit.protocol.types import RetrieveParams
from rcpkit.server import Context, Server

if TYPE_CHECKING:
    from rcpkit.engine.knowledge.graph import ConceptGraph
    from rcpkit.engine.knowledge.tree import SummaryTree

__all__ = ["HIERARCHICAL_UNITS", "UnitRetriever", "register"]

HIERARCHICAL_UNITS = ("community", "node", "tree-node")
_DEFAULT_K = 10
_NODE_LEAVES = 8


def register(server: Server, engine: Engine, graph: ConceptGraph) -> UnitRetriever:
    """Advertise the hierarchical units in ``retrieve`` and return what serves them (only
    once the ``graph`` extra imported: the tree clusters with scipy, so it is imported
    here, not with this module)."""
    from rcpkit.engine.knowledge.tree import SummaryTree

    tree = SummaryTree(engine.config.data_dir, engine.store, levels=graph.levels)
    retrieve = dict(server.capabilities["retrieve"])
    retrieve["units"] = [*retrieve.get("units", ["chunk"]), *HIERARCHICAL_UNITS]
    retrieve["levels"] = graph.levels
    server.capability("retrieve", retrieve)
    return UnitRetriever(engine, graph, tree)


class UnitRetriever:
    """Serves ``retrieve`` for :data:`HIERARCHICAL_UNITS`; see the module docstring."""

    def __init__(self, engine: Engine, graph: ConceptGraph, tree: SummaryTree) -> None:
        self.engine = engine
        self.graph = graph
        self.tree = tree

    def retrieve(self, params: RetrieveParams, ctx: Context) -> dict[str, Any]:
        unit = params.unit
        assert unit in HIERARCHICAL_UNITS  # the caller routes only these here
        if params.filter is not None:
            raise OptionUnsupported(f"filter does not apply to unit {unit!r}", option="filter")
        if params.cursor is not None:
            raise InvalidParams(f"unit {unit!r} has no pages", field="cursor")
        # Gating refuses a level beyond retrieve.levels (-32005); concept nodes have none.
        if params.level is not None and unit == "node":
            raise InvalidParams("concept nodes have no level", field="level")
        query = plain_text(params.query, "query")
        if not query.strip():
            raise InvalidParams("query must not be empty", field="query")
        k = min(params.k or _DEFAULT_K, self.engine.config.requests.max_k)
        seq = self.engine.snapshot(params.index_version)
        if unit == "tree-node":
            vector = np.asarray(self.engine.embed([query], "query")[0], dtype=np.float32)
            hits = [_hit(hit.id, "tree-node", hit.score, hit.summary, hit.leaves, hit.level,
                         {"leafCount": hit.leaf_count})
                    for hit in self.tree.at(seq).search(vector, k, params.level)]
        elif unit == "community":
            hits = [_hit(c.id, "community", c.score or 0.0, c.summary, c.cited, c.level,
                         {"concepts": c.concepts, "size": c.size})
                    for c in self.graph.ranked_communities(seq, query, params.level or 0, k)]
        else:
            hits = self._nodes(seq, query, k)
        return {"hits": hits, "indexVersion": self.engine.version_token(seq),
                "usage": {"candidates": len(hits),
                          "notes": [f"unit {unit}: scored by the "
                                    + ("tree" if unit == "tree-node" else "concept graph")]}}

    def _nodes(self, seq: int, query: str, k: int) -> list[dict[str, Any]]:
        view = self.graph.view(seq)
        seeds = self.graph.query_seeds(view, query)
        if not seeds:
            return []
        concepts = view.pagerank(seeds)[view.chunks:]
        order = [int(c) for c in np.lexsort((np.arange(len(concepts)), -concepts))[:k]
                 if concepts[c] > 0]
        by_concept = view.tfidf.tocsc()
        hits = []
        for column in order:
            start, end = by_concept.indptr[column], by_concept.indptr[column + 1]
            rows = by_concept.indices[start:end][np.argsort(-by_concept.data[start:end],
                                                            kind="stable")][:_NODE_LEAVES]
            hits.append(_hit(view.node_id(view.chunks + column), "node",
                             float(concepts[column]), view.labels[column],
                             [view.hit_ids[int(r)] for r in rows], None, None))
        return hits


def _hit(hit_id: str, unit: str, score: float, text: str, leaves: list[str],
         level: int | None, meta: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"id": hit_id, "score": score, "unit": unit, "text": text,
                            "provenance": {"leaves": leaves}}
    if level is not None:
        body["level"] = level
    if meta is not None:
        body["meta"] = meta
    return body
