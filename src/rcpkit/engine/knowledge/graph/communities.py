"""Hierarchical concept communities and their extractive summaries (§7.9 ``communities``,
``global``, ``drift``).

Level 0 is Leiden (modularity, igraph's C implementation) over the concept co-occurrence
graph of a snapshot; each community larger than ``split_above`` concepts is split again by
Leiden on its own subgraph, down to ``levels`` levels — the hierarchical Leiden of
GraphRAG. Ids spell the path: ``community:3`` at level 0, ``community:3.1`` inside it.
Concepts without co-occurrence edges (seen in a single chunk, say) and communities of one
concept carry no grouping signal and are left out.

A community's *summary* is extractive (no LLM): the sentences of its most central chunks
that mention the most central concepts, citing those chunks.
"""

from __future__ import annotations

import importlib.util
import random
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from rcpkit.engine.knowledge.graph.concepts import ConceptExtractor
from rcpkit.engine.knowledge.graph.view import FloatArray, GraphView

__all__ = ["COMMUNITY_PREFIX", "Community", "Hierarchy"]

# igraph is imported only when a hierarchy is built (see :func:`_leiden`), but the graph
# extra is required here, so that an engine without it advertises no graph (§6).
if importlib.util.find_spec("igraph") is None:
    raise ModuleNotFoundError("No module named 'igraph' (pip install 'rcpkit[graph]')",
                              name="igraph")

COMMUNITY_PREFIX = "community:"
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_SEED = 42
_RNG_LOCK = threading.Lock()
"""igraph draws from one process-wide generator: seeding it and running Leiden is atomic."""


@dataclass(slots=True)
class Community:
    """One community: its concepts (columns of the view), best first by centrality."""

    id: str
    level: int
    parent: str | None
    concepts: list[int]
    centrality: list[float]
    summary: str | None = None
    cited: list[int] = field(default_factory=list)
    """Chunk nodes whose sentences make the summary."""


class Hierarchy:
    """The communities of one :class:`GraphView`; summaries are made on first use."""

    def __init__(self, view: GraphView, extractor: ConceptExtractor,
                 texts: Callable[[Sequence[int]], Mapping[int, str]], *, levels: int = 3,
                 split_above: int = 40, sentences: int = 3) -> None:
        self.view = view
        self._extractor = extractor
        self._texts = texts
        self._sentences = sentences
        self._lock = threading.Lock()
        self.communities: list[Community] = []
        linked = np.flatnonzero(np.diff(view.association.indptr) > 0)
        graph = view.association[linked][:, linked].tocsr()
        self._split(graph, linked, 0, levels, split_above, None)
        self.by_id = {c.id: c for c in self.communities}

    @property
    def depth(self) -> int:
        return 1 + max((c.level for c in self.communities), default=-1)

    def at_level(self, level: int) -> list[Community]:
        return [c for c in self.communities if c.level == level]

    def scores(self, level: int, concept_scores: FloatArray) -> list[tuple[Community, float]]:
        """Communities at ``level`` by the mass of ``concept_scores`` (one per concept)
        on their concepts, best first; those with none are left out."""
        ranked = [(c, float(concept_scores[c.concepts].sum())) for c in self.at_level(level)]
        return sorted([pair for pair in ranked if pair[1] > 0],
                      key=lambda pair: (-pair[1], pair[0].id))

    def summarise(self, community: Community) -> Community:
        """Fill ``summary`` and ``cited`` (once per community)."""
        with self._lock:
            if community.summary is None:
                community.summary, community.cited = self._summary(community)
        return community

    def _split(self, graph: sp.csr_matrix, members: np.ndarray, level: int, levels: int,
               split_above: int, parent: str | None) -> None:
        if graph.nnz == 0:
            return
        parts = _leiden(graph)
        # Strength of each concept inside its own community, for all communities at once.
        edges = graph.tocoo()
        inside = parts[edges.row] == parts[edges.col]
        strength = np.bincount(edges.row[inside], weights=edges.data[inside],
                               minlength=graph.shape[0])
        groups = [group for group in (np.flatnonzero(parts == p) for p in np.unique(parts))
                  if len(group) >= 2]
        groups.sort(key=lambda group: (-len(group), int(members[group].min())))
        if parent is not None and len(groups) < 2:
            return
        for position, group in enumerate(groups):
            order = group[np.lexsort((members[group], -strength[group]))]
            ident = f"{parent}.{position}" if parent else f"{COMMUNITY_PREFIX}{position}"
            self.communities.append(Community(
                ident, level, parent, [int(m) for m in members[order]],
                [float(w) for w in strength[order]]))
            if level + 1 < levels and len(group) > split_above:
                self._split(graph[group][:, group].tocsr(), members[group], level + 1, levels,
                            split_above, ident)

    def _summary(self, community: Community) -> tuple[str, list[int]]:
        view = self.view
        weights = np.zeros(len(view.keys))
        weights[community.concepts] = np.asarray(community.centrality) + 1e-9
        coverage = view.tfidf @ weights
        chunks = [int(i) for i in np.argsort(-coverage, kind="stable")[:3] if coverage[i] > 0]
        texts = self._texts([int(view.rowids[i]) for i in chunks])
        central = {view.keys[c]: w for c, w in zip(community.concepts, community.centrality,
                                                   strict=True)}
        candidates: list[tuple[float, int, int, str]] = []
        for chunk in chunks:
            text = texts.get(int(view.rowids[chunk]), "")
            for position, sentence in enumerate(_SENTENCE_END.split(text)):
                keys = {" ".join(stem for stem, _ in run[i:i + n])
                        for run in self._extractor.runs(sentence)
                        for n in range(1, self._extractor.max_words + 1)
                        for i in range(len(run) - n + 1)}
                score = sum(central.get(key, 0.0) for key in keys)
                if score > 0:
                    candidates.append((score, chunk, position, sentence.strip()))
        chosen = sorted(candidates, key=lambda c: (-c[0], c[1], c[2]))[:self._sentences]
        chosen.sort(key=lambda c: (chunks.index(c[1]), c[2]))
        summary = " ".join(sentence for _, _, _, sentence in chosen)
        if not summary:
            summary = ", ".join(view.labels[c] for c in community.concepts[:8])
        return summary, list(dict.fromkeys(chunk for _, chunk, _, _ in chosen))


def _leiden(graph: sp.csr_matrix) -> np.ndarray:
    """Leiden modularity partition of a weighted undirected graph: one label per node."""
    # Imported here: igraph loads matplotlib (about a second), which only a build needs,
    # not an engine opening to serve.
    import igraph

    upper = sp.triu(graph, k=1).tocoo()
    network = igraph.Graph(n=graph.shape[0], edges=list(zip(upper.row.tolist(),
                                                            upper.col.tolist(), strict=True)))
    with _RNG_LOCK:
        igraph.set_random_number_generator(random.Random(_SEED))
        partition = network.community_leiden(objective_function="modularity",
                                             weights=upper.data.tolist(), n_iterations=2)
        igraph.set_random_number_generator(random)
    return np.asarray(partition.membership, dtype=np.int64)
