"""The concept graph at one snapshot (§7.7.1, §7.9), as sparse matrices.

Nodes are the snapshot's chunks (``0 … C-1``, id ``"doc#index"`` as in ``retrieve`` hits) and
its concepts (``C … C+K-1``, id ``"concept:<key>"``) — every single word, and the phrases
that at least two chunks share. Edges:

- chunk↔concept, weighted by tf-idf (count in the chunk × ``log(1 + C / df)``);
- concept↔concept co-occurrence: two concepts among the ``cooccurrence_top`` strongest of
  one chunk (counting only concepts shared by several chunks) co-occur there; the weight is
  their co-occurrence count over the geometric mean of their counts (a cosine in ``[0, 1]``,
  so frequent concepts do not become hubs).

Personalised PageRank (HippoRAG) runs on this weighted, undirected graph.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

__all__ = ["CONCEPT_PREFIX", "GraphView", "NodeScore", "Vocabulary"]

CONCEPT_PREFIX = "concept:"
FloatArray = npt.NDArray[np.float64]
_DAMPING = 0.5
"""Probability of following an edge (HippoRAG's); the rest restarts at the seeds."""
_PPR_ITERATIONS = 40
_PPR_TOLERANCE = 1e-6
"""L1 change at which the walk stops: with damping 0.5 about 20 iterations, far below the
gaps between the scores that rank hits."""
_CACHED_WALKS = 16
_CONCEPT_EDGE_SCALE = 0.5
"""Weight of concept↔concept edges relative to chunk↔concept ones in the walk."""


class Vocabulary:
    """Every concept known to the graph: key → id, and key/label by id (ids are the storage's,
    small and dense), growing as concepts are added."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self._keys: list[str] = []
        self._labels: list[str] = []
        self._phrase: list[bool] = []
        self._arrays: tuple[npt.NDArray[np.object_], npt.NDArray[np.object_]] | None = None
        self._phrases = np.zeros(0, dtype=bool)

    def __contains__(self, concept: int) -> bool:
        return concept < len(self._keys) and self._keys[concept] != ""

    def add(self, concepts: Iterable[tuple[int, str, str]]) -> None:
        for concept, key, label in concepts:
            if concept >= len(self._keys):
                grow = concept + 1 - len(self._keys)
                self._keys.extend([""] * grow)
                self._labels.extend([""] * grow)
                self._phrase.extend([False] * grow)
            self._keys[concept] = key
            self._labels[concept] = label
            self._phrase[concept] = " " in key
            self.ids[key] = concept
        self._arrays = None

    def arrays(self) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.object_]]:
        """Keys and labels indexed by concept id."""
        if self._arrays is None:
            self._arrays = (np.array(self._keys, dtype=object),
                            np.array(self._labels, dtype=object))
            self._phrases = np.array(self._phrase, dtype=bool)
        return self._arrays

    def phrases(self) -> npt.NDArray[np.bool_]:
        """Whether each concept id is a multi-word phrase."""
        self.arrays()
        return self._phrases


@dataclass(frozen=True, slots=True)
class NodeScore:
    node: int
    score: float


class GraphView:
    """Immutable graph of the chunks visible at ``seq``; see the module docstring."""

    def __init__(self, seq: int, rowids: Sequence[int], hit_ids: Sequence[str],
                 mentions: Sequence[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]],
                 vocabulary: Vocabulary, *, cooccurrence_top: int = 10) -> None:
        self.seq = seq
        self.rowids = np.asarray(rowids, dtype=np.int64)
        self.hit_ids = list(hit_ids)
        self._vocabulary = vocabulary
        lengths = np.fromiter((len(ids) for ids, _ in mentions), dtype=np.int64,
                              count=len(mentions))
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        global_ids = (np.concatenate([ids for ids, _ in mentions]) if mentions
                      else np.zeros(0, dtype=np.int64))
        counts = (np.concatenate([n for _, n in mentions]) if mentions
                  else np.zeros(0, dtype=np.float64))
        keys, labels = vocabulary.arrays()
        # A phrase only one chunk mentions links nothing (its words still do): left out.
        chunk_of = np.repeat(np.arange(len(lengths)), lengths)
        phrase = vocabulary.phrases()[global_ids]
        _, inverse, spread = np.unique(global_ids, return_inverse=True, return_counts=True)
        kept = ~phrase | (spread[inverse] >= 2)
        global_ids, counts = global_ids[kept], counts[kept]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(chunk_of[kept],
                                                            minlength=len(lengths)))])
        self.concept_ids, columns = np.unique(global_ids, return_inverse=True)
        self.keys: list[str] = keys[self.concept_ids].tolist()
        self.labels: list[str] = labels[self.concept_ids].tolist()
        chunks, concepts = len(self.rowids), len(self.concept_ids)
        self.counts = sp.csr_matrix((counts, columns, indptr), shape=(chunks, concepts))
        self.df = np.asarray((self.counts > 0).sum(axis=0), dtype=np.float64).ravel()
        self.idf = np.log1p(chunks / np.maximum(self.df, 1.0))
        self.tfidf = sp.csr_matrix(self.counts.multiply(self.idf[None, :]))
        # A concept of a single chunk links nothing across chunks: only shared ones compete
        # for a chunk's co-occurrence slots.
        shared = sp.csr_matrix(self.tfidf.multiply((self.df >= 2)[None, :]))
        shared.eliminate_zeros()
        self.association, self.cooccurrence = _cooccurrence(shared, cooccurrence_top)
        self._chunk_index = {hit_id: i for i, hit_id in enumerate(self.hit_ids)}
        adjacency = sp.bmat([[None, self.tfidf],
                             [self.tfidf.T, _CONCEPT_EDGE_SCALE * self.association]],
                            format="csr") if chunks and concepts else sp.csr_matrix(
                                (chunks + concepts, chunks + concepts))
        self.adjacency: sp.csr_matrix = sp.csr_matrix(adjacency)
        degree = np.asarray(self.adjacency.sum(axis=1), dtype=np.float64).ravel()
        inverse = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
        # Column-stochastic transition (x ← Pᵀx): edge weight over the source's degree.
        self._transition = sp.csr_matrix(self.adjacency.T.multiply(inverse[None, :]),
                                         dtype=np.float32)
        self._walks: OrderedDict[tuple[tuple[int, float], ...], FloatArray] = OrderedDict()
        self._walks_lock = threading.Lock()

    # ── nodes ──────────────────────────────────────────────────────────────
    @property
    def chunks(self) -> int:
        return len(self.rowids)

    @property
    def size(self) -> int:
        return self.chunks + len(self.keys)

    def node_id(self, node: int) -> str:
        if node < self.chunks:
            return self.hit_ids[node]
        return CONCEPT_PREFIX + self.keys[node - self.chunks]

    def node_label(self, node: int) -> str | None:
        return None if node < self.chunks else self.labels[node - self.chunks]

    def node(self, node_id: str) -> int | None:
        """The node of a ``"doc#index"`` or ``"concept:<key>"`` id at this snapshot."""
        if node_id.startswith(CONCEPT_PREFIX):
            return self.concept_node(node_id[len(CONCEPT_PREFIX):])
        return self._chunk_index.get(node_id)

    def seed_nodes(self, seed_id: str) -> list[int]:
        """The nodes a §7.9 ``seedIds`` entry names: a chunk, a concept, or a document id a
        client indexed (every chunk of it at this snapshot); ``[]`` for none."""
        node = self.node(seed_id)
        if node is not None:
            return [node]
        if seed_id.startswith(CONCEPT_PREFIX):
            return []
        return list(self._document_chunks.get(seed_id, ()))

    @functools.cached_property
    def _document_chunks(self) -> dict[str, list[int]]:
        """Document id → its chunk nodes, in chunk order (built on first use)."""
        chunks: dict[str, list[int]] = {}
        for node, hit_id in enumerate(self.hit_ids):
            chunks.setdefault(hit_id.rpartition("#")[0], []).append(node)
        return chunks

    def concept_node(self, key: str) -> int | None:
        concept = self._column(key)
        return None if concept is None else self.chunks + concept

    def _column(self, key: str) -> int | None:
        """This view's column of concept ``key``, if any chunk here mentions it."""
        global_id = self._vocabulary.ids.get(key)
        if global_id is None:
            return None
        column = int(np.searchsorted(self.concept_ids, global_id))
        found = column < len(self.concept_ids) and self.concept_ids[column] == global_id
        return column if found else None

    # ── walks ──────────────────────────────────────────────────────────────
    def pagerank(self, seeds: Mapping[int, float]) -> FloatArray:
        """Personalised PageRank restarting at ``seeds`` (node → weight); sums to 1 over the
        nodes reachable from them (dangling mass goes back to the seeds). The last few walks
        are kept (read-only): ``drift`` and ``global`` walk from the same seeds more than once."""
        key = tuple(sorted(seeds.items()))
        with self._walks_lock:
            cached = self._walks.get(key)
        if cached is not None:
            return cached
        restart = np.zeros(self.size, dtype=np.float32)
        for node, weight in seeds.items():
            restart[node] += weight
        total = restart.sum()
        if total <= 0:
            return restart.astype(np.float64)
        restart /= total
        scores = restart.copy()
        for _ in range(_PPR_ITERATIONS):
            walked = _DAMPING * (self._transition @ scores)
            updated = walked + (1.0 - walked.sum()) * restart
            done = float(np.abs(updated - scores).sum()) < _PPR_TOLERANCE
            scores = updated
            if done:
                break
        walk = np.asarray(scores, dtype=np.float64)
        walk.flags.writeable = False
        with self._walks_lock:
            self._walks[key] = walk
            while len(self._walks) > _CACHED_WALKS:
                self._walks.popitem(last=False)
        return walk

    def expand(self, seeds: Sequence[int], hops: int, width: int
               ) -> tuple[list[NodeScore], list[tuple[int, int, float]]]:
        """Breadth-first expansion ``hops`` deep from ``seeds``, keeping the ``width``
        strongest new nodes per hop. A reached node scores its parent's score times the
        edge weight over the parent's strongest edge; seeds score 1. Returns the nodes
        (seeds first, then best first) and the edges walked ``(src, dst, weight)``."""
        best: dict[int, float] = dict.fromkeys(seeds, 1.0)
        edges: dict[tuple[int, int], float] = {}
        frontier = list(dict.fromkeys(seeds))
        indptr, indices, data = (self.adjacency.indptr, self.adjacency.indices,
                                 self.adjacency.data)
        for _ in range(hops):
            reached: dict[int, tuple[float, int, float]] = {}
            for parent in frontier:
                start, end = indptr[parent], indptr[parent + 1]
                if start == end:
                    continue
                weights = data[start:end]
                strongest = float(weights.max())
                for child, weight in zip(indices[start:end].tolist(), weights.tolist(),
                                         strict=True):
                    score = best[parent] * weight / strongest
                    if child not in best and score > reached.get(child, (0.0, 0, 0.0))[0]:
                        reached[child] = (score, parent, weight)
            kept = sorted(reached.items(), key=lambda item: (-item[1][0], item[0]))[:width]
            for child, (score, parent, weight) in kept:
                best[child] = score
                edges[(parent, child)] = weight
            frontier = [child for child, _ in kept]
            if not frontier:
                break
        seed_set = set(seeds)
        ranked = sorted(best.items(), key=lambda item: (item[0] not in seed_set, -item[1],
                                                        item[0]))
        return ([NodeScore(node, score) for node, score in ranked],
                [(src, dst, weight) for (src, dst), weight in edges.items()])

    def concept_weights(self, keys: Mapping[str, float]) -> dict[int, float]:
        """Seed nodes for concept ``keys`` (key → weight) present here, weighted by idf."""
        seeds: dict[int, float] = {}
        for key, weight in keys.items():
            concept = self._column(key)
            if concept is not None:
                seeds[self.chunks + concept] = weight * float(self.idf[concept])
        return seeds


def _cooccurrence(tfidf: sp.csr_matrix, top: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(association cosine, raw count) between concepts among each chunk's ``top``
    strongest; both symmetric with a zero diagonal."""
    concepts = tfidf.shape[1]
    if tfidf.nnz == 0:
        empty = sp.csr_matrix((concepts, concepts))
        return empty, empty
    rows = np.repeat(np.arange(tfidf.shape[0]), np.diff(tfidf.indptr))
    order = np.lexsort((-tfidf.data, rows))
    rank = np.arange(len(order)) - tfidf.indptr[rows[order]]
    kept = order[rank < top]
    strongest = sp.csr_matrix((np.ones(len(kept)), (rows[kept], tfidf.indices[kept])),
                              shape=tfidf.shape)
    product = sp.csr_matrix(strongest.T @ strongest)
    norm = np.sqrt(np.maximum(product.diagonal(), 1.0))
    coo = product.tocoo()
    off = coo.row != coo.col
    row, col, data = coo.row[off], coo.col[off], coo.data[off]
    association = sp.csr_matrix((data / (norm[row] * norm[col]), (row, col)),
                                shape=product.shape)
    counts = sp.csr_matrix((data, (row, col)), shape=product.shape)
    return association, counts
