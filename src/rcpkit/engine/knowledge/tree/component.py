"""A RAPTOR-style summary tree over the chunk vectors (§7.7.2 ``unit: "tree-node"``).

At a version, the visible chunks' stored vectors are clustered by k-means, the cluster
centroids clustered again, and so on: a fixed number of levels (so the advertised
``retrieve.levels`` never changes with the data, §13.2), level 0 the coarsest. The branching
factor follows the corpus (``chunks ** (1 / (levels + 1))``, at least 2), so 10k chunks give
about 1,000 / 100 / 10 nodes. A node's vector is its members' normalised mean; its summary
is extractive — the first sentence of each of its members closest to the centroid — and its
leaves are the chunks under it, closest to the centroid first.

A tree is built on the first tree query at a version (cached for the last few versions) and
saved beside the data (``tree.npz``, arrays only, no pickle) for the latest version, so a
restart serves it without clustering again. Writes publish new versions, whose first query
builds their tree: the tree always matches the snapshot it answers for (§7.7.1).
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rcpkit.engine.documents.chunking import sentence_spans
from rcpkit.engine.sidecar import TREE_FILE
from rcpkit.engine.store import IndexSource
from rcpkit.files import atomic_write

__all__ = ["TREE_FILE", "SummaryTree", "TreeHit", "TreeLevels"]

_CACHED = 2
_SUMMARY_SENTENCES = 3
_SUMMARY_CHARS = 600
_LEAVES = 32
"""Leaves listed per hit (closest to the node's centroid first); ``leafCount`` has them all."""
_ITERATIONS = 12


@dataclass(frozen=True, slots=True)
class TreeHit:
    id: str
    level: int
    score: float
    summary: str
    leaves: list[str]
    leaf_count: int


class TreeLevels:
    """The tree at one version: per level the node vectors, summaries and leaves."""

    def __init__(self, seq: int, vectors: list[npt.NDArray[np.float32]],
                 summaries: list[list[str]], leaves: list[list[list[str]]],
                 leaf_counts: list[list[int]]) -> None:
        self.seq = seq
        self.vectors = vectors
        self.summaries = summaries
        self.leaves = leaves
        self.leaf_counts = leaf_counts

    @property
    def nodes(self) -> int:
        return sum(len(level) for level in self.summaries)

    def search(self, query: npt.NDArray[np.float32], k: int, level: int | None) -> list[TreeHit]:
        """Nodes by cosine to ``query``: of one level, or of all (RAPTOR's collapsed tree)."""
        levels = range(len(self.vectors)) if level is None else [level]
        scored = [(float(score), lv, int(node)) for lv in levels if len(self.vectors[lv])
                  for node, score in enumerate((self.vectors[lv] @ query).tolist())]
        scored.sort(key=lambda item: (-item[0], item[1], item[2]))
        return [TreeHit(f"tree:{lv}:{node}", lv, score, self.summaries[lv][node],
                        self.leaves[lv][node], self.leaf_counts[lv][node])
                for score, lv, node in scored[:k]]


class SummaryTree:
    """Builds, caches and persists :class:`TreeLevels` for the versions of a record."""

    def __init__(self, data_dir: Path, store: IndexSource, *, levels: int = 3) -> None:
        self.levels = levels
        self._path = Path(data_dir) / TREE_FILE
        self._store = store
        self._lock = threading.Lock()
        self._trees: OrderedDict[int, TreeLevels] = OrderedDict()

    def at(self, seq: int) -> TreeLevels:
        """The tree of version ``seq`` (built on first use)."""
        with self._lock:
            tree = self._trees.get(seq)
            if tree is None:
                tree = self._load(seq) or self._build(seq)
                self._trees[seq] = tree
                while len(self._trees) > _CACHED:
                    self._trees.popitem(last=False)
            self._trees.move_to_end(seq)
            return tree

    # ── building ───────────────────────────────────────────────────────────
    def _build(self, seq: int) -> TreeLevels:
        rowids = self._store.visible_rowids(seq).tolist()
        records = self._store.chunks(rowids)
        rowids = [r for r in rowids if r in records]
        leaf_ids = [f"{records[r].doc_id}#{records[r].index}" for r in rowids]
        texts = [_first_sentence(records[r].text) for r in rowids]
        vectors = _normalised(self._vectors(rowids))
        branching = max(2.0, len(rowids) ** (1.0 / (self.levels + 1))) if rowids else 2.0
        # Finest level first: members are chunks, then the nodes of the level below.
        below_vectors, below_texts = vectors, texts
        below_leaves: list[list[int]] = [[i] for i in range(len(rowids))]
        built: list[tuple[npt.NDArray[np.float32], list[str], list[list[int]]]] = []
        for depth in range(self.levels):
            count = max(1, math.ceil(len(rowids) / branching ** (depth + 1)))
            centroids, members = _cluster(below_vectors, count, seed=seq + depth)
            summaries, leaves = [], []
            for centroid, group in zip(centroids, members, strict=True):
                closeness = below_vectors[group] @ centroid
                ranked = [group[i] for i in np.argsort(-closeness, kind="stable")]
                summaries.append(_summary(below_texts[m] for m in ranked))
                under = [leaf for m in ranked for leaf in below_leaves[m]]
                leaves.append(sorted(under, key=lambda leaf: -float(vectors[leaf] @ centroid)))
            built.append((centroids, summaries, leaves))
            below_vectors, below_texts, below_leaves = centroids, summaries, leaves
        built.reverse()  # level 0 is the coarsest
        tree = TreeLevels(seq, [v for v, _, _ in built], [s for _, s, _ in built],
                          [[[leaf_ids[i] for i in node[:_LEAVES]] for node in lv]
                           for _, _, lv in built],
                          [[len(node) for node in lv] for _, _, lv in built])
        self._save(tree)
        return tree

    def _vectors(self, rowids: list[int]) -> npt.NDArray[np.float32]:
        stored: dict[int, npt.NDArray[np.float32]] = {}
        for batch in self._store.iter_rows(rowids):
            stored.update(zip(batch.rowids, batch.vectors, strict=True))
        if not rowids:
            return np.zeros((0, 1), dtype=np.float32)
        return np.stack([stored[rowid] for rowid in rowids]).astype(np.float32)

    # ── persistence ────────────────────────────────────────────────────────
    def _save(self, tree: TreeLevels) -> None:
        arrays: dict[str, npt.NDArray[np.generic]] = {
            f"vectors{i}": v for i, v in enumerate(tree.vectors)}
        arrays["meta"] = np.array(json.dumps({
            "database": self._store.database_id, "seq": tree.seq, "summaries": tree.summaries,
            "leaves": tree.leaves, "counts": tree.leaf_counts}))
        atomic_write(self._path, lambda stream: np.savez(stream, **arrays))  # type: ignore[arg-type]

    def _load(self, seq: int) -> TreeLevels | None:
        if not self._path.is_file():
            return None
        try:
            with np.load(self._path, allow_pickle=False) as saved:
                meta = json.loads(str(saved["meta"]))
                if meta["database"] != self._store.database_id or meta["seq"] != seq \
                        or len(meta["summaries"]) != self.levels:
                    return None
                vectors = [saved[f"vectors{i}"] for i in range(self.levels)]
        except (OSError, ValueError, KeyError):
            return None  # unreadable: rebuilt (it is derived data)
        return TreeLevels(seq, vectors, meta["summaries"], meta["leaves"], meta["counts"])


def _normalised(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.asarray(vectors / np.maximum(norms, 1e-12), dtype=np.float32)


def _cluster(vectors: npt.NDArray[np.float32], count: int, seed: int
             ) -> tuple[npt.NDArray[np.float32], list[list[int]]]:
    """k-means from randomly chosen points (fixed seed: the same version always gives the
    same tree; scipy's k-means++ start costs O(k² n) and took minutes at 5k chunks);
    empty clusters are dropped, centroids are normalised member means."""
    if len(vectors) <= count:
        return vectors.copy(), [[i] for i in range(len(vectors))]
    # Imported here: scipy's clustering costs ~0.4 s to import, and only a build needs it.
    from scipy.cluster.vq import kmeans2

    _, labels = kmeans2(vectors.astype(np.float64), count, iter=_ITERATIONS, minit="points",
                        seed=np.random.default_rng(seed))
    members: Mapping[int, list[int]] = _groups(labels)
    groups = [members[label] for label in sorted(members)]
    centroids = _normalised(np.stack([vectors[g].mean(axis=0) for g in groups]))
    return centroids, groups


def _groups(labels: npt.NDArray[np.int32]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for index, label in enumerate(labels.tolist()):
        groups.setdefault(int(label), []).append(index)
    return groups


def _first_sentence(text: str) -> str:
    spans = sentence_spans(text)
    start, end = spans[0] if spans else (0, len(text))
    return text[start:end].strip()


def _summary(texts: Iterable[str]) -> str:
    """The first sentences of the closest members, up to a few hundred characters."""
    kept: list[str] = []
    size = 0
    for text in texts:
        sentence = _first_sentence(text)
        if not sentence or sentence in kept:
            continue
        if kept and size + len(sentence) > _SUMMARY_CHARS:
            break
        kept.append(sentence)
        size += len(sentence)
        if len(kept) == _SUMMARY_SENTENCES:
            break
    return " ".join(kept)

