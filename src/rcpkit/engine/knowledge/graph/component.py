"""The knowledge-graph component (§7.9): built at index time without an LLM, kept in step
with the record, answered at any served snapshot.

:class:`ConceptGraph` extracts the concepts of every chunk row once (see ``concepts``),
persists them (``storage``) and follows the record's write log through :meth:`sync` — the
engine calls it whenever it publishes a version, so ``index/add`` and ``index/delete`` update
the graph incrementally. :meth:`view` gives the graph of the rows visible at a version
(§7.7.1): an op pinned to an ``indexVersion`` sees that snapshot's graph and nothing newer.

The ops return plain data (chunk rowids, node ids, scores); the protocol binding lives in
``rcpkit.binding.graph``.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rcpkit.engine.errors import Unavailable
from rcpkit.engine.knowledge.graph.communities import Community, Hierarchy
from rcpkit.engine.knowledge.graph.concepts import ConceptExtractor
from rcpkit.engine.knowledge.graph.storage import GRAPH_FILE, GraphStorage, StoredChunk
from rcpkit.engine.knowledge.graph.view import GraphView, Vocabulary
from rcpkit.engine.store import IndexSource, Store

__all__ = ["GRAPH_FILE", "ConceptGraph", "GraphHit", "GraphNode", "Neighborhood",
           "RankedCommunity", "distinct_labels"]

logger = logging.getLogger(__name__)

Mentions = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]
"""A chunk's concept ids and their counts."""
_CACHED_VIEWS = 4


@dataclass(frozen=True, slots=True)
class GraphHit:
    """A chunk reached by a walk, with the concepts and edges that led to it (§7.7.2
    ``provenance``)."""

    rowid: int
    score: float
    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class GraphNode:
    id: str
    score: float
    kind: str
    """``"chunk"`` or ``"concept"``."""
    label: str | None = None


@dataclass(frozen=True, slots=True)
class Neighborhood:
    nodes: list[GraphNode]
    edges: list[tuple[str, str, float]]
    unknown: list[str]
    """Seed ids that are no node at the snapshot."""


@dataclass(frozen=True, slots=True)
class RankedCommunity:
    id: str
    level: int
    summary: str
    score: float | None
    concepts: list[str]
    """Labels of the most central concepts."""
    cited: list[str]
    """Hit ids (``doc#index``) of the chunks the summary quotes."""
    size: int


class ConceptGraph:
    """Concepts and co-occurrence over a :class:`IndexSource`'s chunks; see the module docstring."""

    def __init__(self, storage: GraphStorage, store: IndexSource, extractor: ConceptExtractor, *,
                 levels: int = 3, max_hops: int = 3) -> None:
        self.storage = storage
        self.extractor = extractor
        self.levels = levels
        self.max_hops = max_hops
        self._store = store
        self._lock = threading.RLock()
        self._chunks: dict[int, tuple[str, Mentions]] = {}
        self._vocabulary = Vocabulary()
        self._views: OrderedDict[int, tuple[GraphView, Hierarchy | None]] = OrderedDict()
        position = storage.meta("position")
        self._position = int(position) if position is not None else 0
        self._vocabulary.add(storage.concepts())
        for rowid, hit_id, mentions in storage.load():
            self._chunks[rowid] = (hit_id, _arrays(mentions))

    @classmethod
    def open(cls, data_dir: Path, store: Store, extractor: ConceptExtractor | None = None,
             **options: int) -> ConceptGraph:
        """Open the graph kept beside ``store`` (rebuilt when it was made for another record
        or extractor) and catch it up with ``store`` if the disk takes it."""
        extractor = extractor or ConceptExtractor()
        storage = GraphStorage.open(data_dir, store)
        settings = {"database_id": store.database_id, "extractor": extractor.signature}
        if any(storage.meta(key) != value for key, value in settings.items()):
            storage.reset(settings)
        graph = cls(storage, store, extractor, **options)
        try:
            graph.sync()
        except Unavailable as exc:  # a full disk: a later publish or view catches it up
            logger.warning("the concept graph did not catch up with the record (%s)", exc)
        return graph

    def close(self) -> None:
        self.storage.close()

    @property
    def chunk_count(self) -> int:
        """Chunk rows processed (every physical row the record holds, once synced)."""
        return len(self._chunks)

    # ── keeping up with the record ─────────────────────────────────────────
    def sync(self) -> None:
        """Take in the rows written and dropped since the last sync (the write hook)."""
        with self._lock:
            delta = self._store.delta_since(self._position)
            if delta is None:  # the log was pruned past us: compare the row sets instead
                position = self._store.log_position()
                present = {rowid for batch in self._store.iter_rows() for rowid in batch.rowids}
                added = sorted(present - self._chunks.keys())
                removed = sorted(self._chunks.keys() - present)
            else:
                position = delta.position
                added = [rowid for rowid in delta.added if rowid not in self._chunks]
                removed = [rowid for rowid in delta.removed if rowid in self._chunks]
            if added or removed or position != self._position:
                self._ingest(added, removed, position)

    def _ingest(self, rowids: Sequence[int], removed: Sequence[int],
                position: int | None) -> None:
        """Extract (or load, when another process sharing the file did) ``rowids``, forget
        ``removed`` and persist, then update memory."""
        stored = self.storage.load(rowids) if rowids else []
        done = {rowid for rowid, _, _ in stored}
        records = self._store.chunks([rowid for rowid in rowids if rowid not in done])
        extracted = [(rowid, f"{record.doc_id}#{record.index}",
                      self.extractor.extract(record.indexed_text))
                     for rowid, record in sorted(records.items())]
        ids = self.storage.concept_ids(
            (concept.key, concept.label) for _, _, concepts in extracted for concept in concepts)
        fresh: list[StoredChunk] = [
            (rowid, hit_id, [(ids[c.key], float(c.count)) for c in concepts])
            for rowid, hit_id, concepts in extracted]
        self.storage.save(fresh, removed, position)
        unknown = {concept for _, _, mentions in [*stored, *fresh] for concept, _ in mentions
                   if concept not in self._vocabulary}
        if unknown:
            self._vocabulary.add(self.storage.concepts(sorted(unknown)))
        for rowid in removed:
            self._chunks.pop(rowid, None)
        for rowid, hit_id, mentions in [*stored, *fresh]:
            self._chunks[rowid] = (hit_id, _arrays(mentions))
        if position is not None:
            self._position = position

    # ── snapshots ──────────────────────────────────────────────────────────
    def view(self, seq: int) -> GraphView:
        """The graph of the chunks visible at version ``seq``."""
        return self._snapshot(seq)[0]

    def hierarchy(self, seq: int) -> Hierarchy:
        """The community hierarchy at version ``seq`` (computed once per version)."""
        with self._lock:
            view, hierarchy = self._snapshot(seq)
            if hierarchy is None:
                hierarchy = Hierarchy(view, self.extractor, self._texts, levels=self.levels)
                self._views[seq] = (view, hierarchy)
            return hierarchy

    def _snapshot(self, seq: int) -> tuple[GraphView, Hierarchy | None]:
        with self._lock:
            cached = self._views.get(seq)
            if cached is not None:
                self._views.move_to_end(seq)
                return cached
            visible = self._store.visible_rowids(seq).tolist()
            unseen = [rowid for rowid in visible if rowid not in self._chunks]
            if unseen:  # published but not synced yet: extract them now
                self._ingest(unseen, [], None)
            rows = [rowid for rowid in visible if rowid in self._chunks]
            view = GraphView(seq, rows, [self._chunks[r][0] for r in rows],
                             [self._chunks[r][1] for r in rows], self._vocabulary)
            self._views[seq] = (view, None)
            while len(self._views) > _CACHED_VIEWS:
                self._views.popitem(last=False)
            return view, None

    def _texts(self, rowids: Sequence[int]) -> Mapping[int, str]:
        return {rowid: record.text for rowid, record in self._store.chunks(rowids).items()}

    # ── ops ────────────────────────────────────────────────────────────────
    def query_seeds(self, view: GraphView, query: str) -> dict[int, float]:
        """Concept nodes of ``query`` at ``view`` (idf-weighted), the walk's restart set."""
        return view.concept_weights({c.key: float(c.count)
                                     for c in self.extractor.extract(query)})

    def query_concepts(self, seq: int, query: str) -> list[str]:
        """Node ids of the query's concepts present at version ``seq``, strongest first."""
        view = self.view(seq)
        seeds = self.query_seeds(view, query)
        return [view.node_id(node) for node in sorted(seeds, key=lambda n: (-seeds[n], n))]

    def local(self, seq: int, query: str, k: int) -> list[GraphHit]:
        """``local``: chunks by personalised PageRank from the query's concepts."""
        view = self.view(seq)
        seeds = self.query_seeds(view, query)
        if not seeds:
            return []
        walk = view.pagerank(seeds)
        scores = walk[:view.chunks]
        order = [int(i) for i in np.lexsort((view.rowids, -scores))[:k] if scores[i] > 0]
        return [self._provenance(view, chunk, float(scores[chunk]), seeds, walk)
                for chunk in order]

    def _provenance(self, view: GraphView, chunk: int, score: float,
                    seeds: Mapping[int, float], walk: np.ndarray) -> GraphHit:
        row = view.counts.indices[view.counts.indptr[chunk]:view.counts.indptr[chunk + 1]]
        mentioned = [view.chunks + int(c) for c in row]
        chunk_id = view.node_id(chunk)
        direct = [node for node in mentioned if node in seeds]
        if direct:
            nodes = [view.node_id(node) for node in direct]
            edges = [(node, chunk_id) for node in nodes]
            return GraphHit(int(view.rowids[chunk]), score, (*nodes, chunk_id), tuple(edges))
        # Reached through a related concept: name it and the seed most associated with it.
        via = max(mentioned, key=lambda node: (walk[node], -node))
        seed = max(seeds, key=lambda node: (
            view.association[node - view.chunks, via - view.chunks], -node))
        seed_id, via_id = view.node_id(seed), view.node_id(via)
        return GraphHit(int(view.rowids[chunk]), score, (seed_id, via_id, chunk_id),
                        ((seed_id, via_id), (via_id, chunk_id)))

    def neighbors(self, seq: int, seed_ids: Sequence[str], hops: int, k: int) -> Neighborhood:
        """``neighbors``: up to ``k`` nodes within ``hops`` edges of the seeds (chunk,
        concept or document ids, :meth:`GraphView.seed_nodes`)."""
        view = self.view(seq)
        resolved = {seed_id: view.seed_nodes(seed_id) for seed_id in seed_ids}
        seeds = [node for seed_id in seed_ids for node in resolved[seed_id]]
        unknown = [seed_id for seed_id in seed_ids if not resolved[seed_id]]
        ranked, walked = view.expand(list(dict.fromkeys(seeds)), hops, k)
        kept = ranked[:len(set(seeds)) + k]
        members = {entry.node for entry in kept}
        nodes = [GraphNode(view.node_id(e.node), e.score,
                           "chunk" if e.node < view.chunks else "concept",
                           view.node_label(e.node)) for e in kept]
        edges = [(view.node_id(src), view.node_id(dst), weight) for src, dst, weight in walked
                 if src in members and dst in members]
        return Neighborhood(nodes, edges, unknown)

    def communities(self, seq: int, level: int) -> list[Community]:
        """``communities`` at ``level`` (0 is the coarsest), largest first."""
        return self.hierarchy(seq).at_level(level)

    def describe(self, seq: int, community: Community, score: float | None = None
                 ) -> RankedCommunity:
        """A community with its extractive summary and cited chunks."""
        hierarchy = self.hierarchy(seq)
        view = hierarchy.view
        hierarchy.summarise(community)
        return RankedCommunity(community.id, community.level, community.summary or "", score,
                               [view.labels[c] for c in community.concepts[:8]],
                               [view.hit_ids[c] for c in community.cited],
                               len(community.concepts))

    def ranked_communities(self, seq: int, query: str, level: int, k: int
                           ) -> list[RankedCommunity]:
        """``global``: communities at ``level`` ranked by the PageRank mass the query's
        concepts put on them, best first, summarised."""
        hierarchy = self.hierarchy(seq)
        view = hierarchy.view
        seeds = self.query_seeds(view, query)
        if not seeds:
            return []
        concept_scores = view.pagerank(seeds)[view.chunks:]
        return [self.describe(seq, community, score)
                for community, score in hierarchy.scores(level, concept_scores)[:k]]

    def followups(self, seq: int, query: str, n: int) -> list[str]:
        """``drift`` follow-ups: for the communities next to the query's own (by PageRank
        mass, after the best one), the query's main concept with their central ones; the
        query's own community comes last, with the central concepts the query did not ask."""
        hierarchy = self.hierarchy(seq)
        view = hierarchy.view
        seeds = self.query_seeds(view, query)
        if not seeds:
            return []
        walk = view.pagerank(seeds)
        anchor = view.node_label(max(seeds, key=lambda node: (seeds[node], -node))) or ""
        level = max(0, hierarchy.depth - 1)
        asked = {node - view.chunks for node in seeds}
        followups: list[str] = []
        reached = hierarchy.scores(level, walk[view.chunks:])
        for community, _ in [*reached[1:], *reached[:1]]:
            fresh = distinct_labels((view.labels[c] for c in community.concepts
                                     if c not in asked), 2, taken=anchor.split())
            if fresh:
                followups.append(" ".join(dict.fromkeys(" ".join([anchor, *fresh]).split())))
            if len(followups) == n:
                break
        return list(dict.fromkeys(followups))


def distinct_labels(labels: Iterable[str], limit: int, taken: Iterable[str] = ()) -> list[str]:
    """Up to ``limit`` of ``labels`` in order, skipping those whose words are all in the
    ones kept (or in ``taken``): ``["neural networks", "networks", "gradient"]`` keeps the
    first and the last."""
    words = {word.casefold() for word in taken}
    kept: list[str] = []
    for label in labels:
        parts = {word.casefold() for word in label.split()}
        if parts <= words:
            continue
        kept.append(label)
        words |= parts
        if len(kept) == limit:
            break
    return kept


def _arrays(mentions: Sequence[tuple[int, float]]) -> Mentions:
    return (np.fromiter((c for c, _ in mentions), dtype=np.int64, count=len(mentions)),
            np.fromiter((n for _, n in mentions), dtype=np.float64, count=len(mentions)))
