"""Sentence-window multi-vector dense index: dense recall (§3.1, §7.7) that reads long chunks.

The encoder reads the first 256 tokens of a passage (about :data:`HEAD_CHARS` characters of
English), so the rest of a long chunk never reaches its vector. This index keeps, next to each
chunk's whole-text vector, vectors of whole-sentence *windows* covering what the encoder did not
read (:func:`sentence_windows`), and scores a chunk

    ``whole + mix · max(0, best window − whole)``

(``mix`` 1: the best of its vectors; 0: the whole-text vector alone). The mix 0.5 default was
chosen on development data (docs/benchmarks.md, "Quality (development data)").

It answers the :class:`~rcpkit.engine.indexes.dense.DenseIndex` interface the engine
searches: row ids are the store's, and ``allow`` (§8 filters, §7.7.1 snapshots) and ``exact``
apply to the whole-text search that proposes the candidates (the engine asks for candidateK of
them); each candidate is then re-scored exactly with its windows. A chunk without windows
(text within the head) keeps its whole-text cosine. Searching the windows for candidates of
their own as well (a second HNSW graph) bought 0.001 nDCG@10 on SciFact for a second graph
search per query, so window vectors are only read, never searched: they are kept without a
graph.

Window vectors are derived data, like the whole-text index they sit beside: they are embedded
when rows reach the index (:func:`embed_windows`, before the caller takes its lock), saved with
the index and rebuilt from the texts when a saved state lacks them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rcpkit.engine.documents.chunking import sentence_spans
from rcpkit.engine.indexes.dense import EXPANSION_SEARCH, DenseIndex, StoredVectors
from rcpkit.engine.indexes.persist import commit_manifest, save_arrays, verify_file

__all__ = ["HEAD_CHARS", "WINDOW_CHARS", "SentenceWindowIndex", "WindowVectors",
           "embed_windows", "sentence_windows"]

HEAD_CHARS = 1000
"""About what the encoder reads of English text (256 word pieces): windows start past it."""
WINDOW_CHARS = 1000
"""Longest window: whole sentences up to this many characters, so the encoder reads it all."""
_MANIFEST = "windows.json"
_ARRAYS = "windows"
_FORMAT = 1
_EMPTY_IDS = np.zeros(0, dtype=np.int64)


def sentence_windows(text: str, *, head_chars: int = HEAD_CHARS,
                     window_chars: int = WINDOW_CHARS) -> list[str]:
    """Whole-sentence windows of at most ``window_chars`` covering ``text`` from the first
    sentence that does not end within ``head_chars``; ``[]`` when the whole text fits in it."""
    if len(text) <= head_chars:
        return []
    windows: list[str] = []
    start = end = -1
    for sentence_start, sentence_end in sentence_spans(text, max_chars=window_chars):
        if sentence_end <= head_chars:
            continue
        if start < 0:
            start, end = sentence_start, sentence_end
        elif sentence_end - start <= window_chars:
            end = sentence_end
        else:
            windows.append(text[start:end])
            start, end = sentence_start, sentence_end
    if start >= 0:
        windows.append(text[start:end])
    return windows


@dataclass(frozen=True, slots=True)
class WindowVectors:
    """Window vectors for a batch of rows: ``vectors[i]`` is a window of row ``owners[i]``."""

    owners: np.ndarray
    vectors: np.ndarray


def embed_windows(rowids: Sequence[int], texts: Sequence[str],
                  embed: Callable[[list[str]], np.ndarray], dimension: int) -> WindowVectors:
    """The :func:`sentence_windows` of each row, embedded as documents by ``embed``."""
    owners: list[int] = []
    windows: list[str] = []
    for rowid, text in zip(rowids, texts, strict=True):
        found = sentence_windows(text)
        owners.extend([rowid] * len(found))
        windows.extend(found)
    vectors = (np.asarray(embed(windows), dtype=np.float32) if windows
               else np.zeros((0, dimension), dtype=np.float32))
    return WindowVectors(np.asarray(owners, dtype=np.int64), vectors)


@dataclass(frozen=True, slots=True)
class _Owners:
    """Which chunk each stored window belongs to; never mutated once published."""

    window_ids: np.ndarray
    """Sorted window ids (the keys of the window vectors)."""
    owners: np.ndarray
    """``owners[i]``: the row id whose window ``window_ids[i]`` is."""
    by_owner: np.ndarray
    """Positions into the two arrays above, ordered by owner."""
    sorted_owners: np.ndarray
    """``owners[by_owner]``, kept so a search does not gather it again."""

    @classmethod
    def of(cls, window_ids: np.ndarray, owners: np.ndarray) -> _Owners:
        order = np.argsort(window_ids, kind="stable")
        window_ids, owners = window_ids[order], owners[order]
        by_owner = np.argsort(owners, kind="stable")
        return cls(window_ids, owners, by_owner, owners[by_owner])

    def windows_of(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The window ids of ``rowids`` and, for each, the index in ``rowids`` it belongs to."""
        starts = np.searchsorted(self.sorted_owners, rowids, side="left")
        ends = np.searchsorted(self.sorted_owners, rowids, side="right")
        counts = ends - starts
        if not counts.any():
            return _EMPTY_IDS, _EMPTY_IDS
        which = np.repeat(np.arange(len(rowids)), counts)
        offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        positions = self.by_owner[np.repeat(starts, counts) + offsets]
        return self.window_ids[positions], which


class SentenceWindowIndex:
    """Whole-text vectors plus sentence-window vectors per row id (see module docstring).

    ``enabled`` False keeps no windows: the index is then its whole-text
    :class:`~rcpkit.engine.indexes.dense.DenseIndex`, searched directly.
    """

    def __init__(self, whole: DenseIndex, windows: DenseIndex, *, enabled: bool,
                 mix: float = 0.5) -> None:
        if not 0.0 <= mix <= 1.0:
            raise ValueError("the window mix must be in [0, 1]")
        self.whole = whole
        self.windows = windows
        self.enabled = enabled
        self.mix = mix
        self._owners = _Owners.of(_EMPTY_IDS, _EMPTY_IDS)
        self._next_window = 0

    @classmethod
    def create(cls, dimension: int, *, enabled: bool, mix: float = 0.5,
               exact_threshold: int = 50_000, build_threads: int = 1,
               graph_dtype: str = "f16", expansion_search: int = EXPANSION_SEARCH
               ) -> SentenceWindowIndex:
        whole = DenseIndex(dimension, exact_threshold=exact_threshold,
                           build_threads=build_threads, graph_dtype=graph_dtype,
                           expansion_search=expansion_search)
        return cls(whole, _window_store(dimension), enabled=enabled, mix=mix)

    @property
    def count(self) -> int:
        """Number of rows (chunks) stored."""
        return self.whole.count

    @property
    def window_count(self) -> int:
        """Number of window vectors stored next to the rows' whole-text vectors."""
        return self.windows.count

    # -- writes ---------------------------------------------------------------------------

    def add(self, rowids: np.ndarray, vectors: np.ndarray,
            windows: WindowVectors | None) -> None:
        """Store the rows' whole-text ``vectors`` and their ``windows`` (required when enabled:
        a row added without them would silently score by its head alone)."""
        if self.enabled and windows is None:
            raise ValueError("sentence windows are enabled: add needs the rows' windows")
        self.whole.add(rowids, vectors)
        if windows is None or len(windows.owners) == 0:
            return
        ids = np.arange(self._next_window, self._next_window + len(windows.owners),
                        dtype=np.int64)
        self.windows.add(ids, windows.vectors)
        self._next_window += len(ids)
        self._owners = _Owners.of(np.concatenate([self._owners.window_ids, ids]),
                                  np.concatenate([self._owners.owners, windows.owners]))

    def remove(self, rowids: np.ndarray) -> None:
        """Drop the rows and their windows; unknown row ids are ignored."""
        ids = np.asarray(rowids, dtype=np.int64).reshape(-1)
        self.whole.remove(ids)
        gone, _ = self._owners.windows_of(np.unique(ids))
        if len(gone):
            keep = ~np.isin(self._owners.window_ids, gone)
            self._owners = _Owners.of(self._owners.window_ids[keep], self._owners.owners[keep])
            self.windows.remove(gone)

    # -- reads ----------------------------------------------------------------------------

    def get(self, rowids: np.ndarray) -> np.ndarray:
        """The rows' whole-text vectors (what MMR and rerank read as the chunk's vector)."""
        return self.whole.get(rowids)

    def search(self, query: np.ndarray, k: int, *, allow: np.ndarray | None = None,
               exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` ``(rowids int64, scores float32)``, best first, ties by smaller row id;
        ``allow`` and ``exact`` as in :meth:`DenseIndex.search`."""
        rowids, whole = self.whole.search(query, k, allow=allow, exact=exact)
        scores = self._with_windows(_unit(query), rowids, whole)
        if scores is whole:
            return rowids, whole
        order = np.lexsort((rowids, -scores))
        return rowids[order], scores[order].astype(np.float32)

    def score(self, query: np.ndarray, rowids: np.ndarray) -> np.ndarray:
        """The scores :meth:`search` gives ``rowids`` (stored rows), in their order: how a
        hybrid search's dense half scores the rows only the lexical half found."""
        unit = _unit(query)
        rows = np.asarray(rowids, dtype=np.int64).reshape(-1)
        return self._with_windows(unit, rows, self.whole.get(rows) @ unit)

    def _with_windows(self, unit: np.ndarray, rowids: np.ndarray,
                      whole: np.ndarray) -> np.ndarray:
        """``whole`` raised by the rows' best windows (``whole`` itself when none counts)."""
        if not self.enabled or self.mix == 0.0:  # no windows kept, or they do not count
            return whole
        window_ids, which = self._owners.windows_of(rowids)
        if len(window_ids) == 0:
            return whole
        best = np.full(len(rowids), -np.inf, dtype=np.float32)
        np.maximum.at(best, which, self.windows.get(window_ids) @ unit)
        raised: np.ndarray = whole + self.mix * np.maximum(0.0, best - whole)
        return raised

    # -- background work ------------------------------------------------------------------

    @property
    def uses_graph(self) -> bool:
        """Whether unfiltered, non-exact searches consult the whole-text HNSW graph."""
        return self.whole.uses_graph

    def wait_for_graph(self, timeout: float | None = None) -> bool:
        """Block until no build of the whole-text graph runs (or ``timeout`` s pass)."""
        return self.whole.wait_for_graph(timeout)

    def close(self) -> None:
        self.whole.close()
        self.windows.close()

    # -- persistence ----------------------------------------------------------------------

    def save(self, directory: Path, *, vectors: bool = True) -> None:
        """Write both parts under ``directory`` (the windows in ``windows/``), then the
        manifest naming the window owners; ``load`` refuses a save of other settings.
        ``vectors=False`` leaves out the whole-text vectors (the record has them), never the
        window vectors (it has not)."""
        directory = Path(directory)
        self.whole.save(directory, vectors=vectors)
        owners = self._owners
        if self.enabled:
            self.windows.save(directory / "windows")
        arrays = save_arrays(directory, _ARRAYS, {"window_ids": owners.window_ids,
                                                  "owners": owners.owners})
        commit_manifest(directory, _MANIFEST, {
            "format": _FORMAT, "enabled": self.enabled, "head_chars": HEAD_CHARS,
            "window_chars": WINDOW_CHARS, "next_window": self._next_window, "arrays": arrays},
            prefix=_ARRAYS, arrays=arrays)

    @staticmethod
    def saved_rowids(directory: Path) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, window owners)`` of a saved index, every file checked against its
        checksum, no vector read (an audit)."""
        directory = Path(directory)
        rows = DenseIndex.saved_rowids(directory)
        manifest_path = directory / _MANIFEST
        if not manifest_path.is_file():
            return rows, np.zeros(0, dtype=np.int64)
        manifest = json.loads(manifest_path.read_text())
        if not manifest.get("enabled"):
            return rows, np.zeros(0, dtype=np.int64)
        DenseIndex.saved_rowids(directory / "windows")
        verify_file(directory / manifest["arrays"], manifest.get("checksum"))
        with np.load(directory / manifest["arrays"], allow_pickle=False) as arrays:
            return rows, arrays["owners"].astype(np.int64)

    @classmethod
    def load(cls, directory: Path, *, enabled: bool, mix: float = 0.5,
             build_threads: int = 1, vectors: StoredVectors | None = None,
             graph_dtype: str = "f16", expansion_search: int = EXPANSION_SEARCH
             ) -> SentenceWindowIndex:
        """Read what :meth:`save` wrote. A save made with windows off (or before windows
        existed) loads only when they are off; one with other window settings never does:
        the caller rebuilds (ValueError)."""
        directory = Path(directory)
        whole = DenseIndex.load(directory, build_threads=build_threads, vectors=vectors,
                                graph_dtype=graph_dtype, expansion_search=expansion_search)
        manifest_path = directory / _MANIFEST
        manifest: dict[str, Any] = (json.loads(manifest_path.read_text())
                                    if manifest_path.is_file()
                                    else {"format": _FORMAT, "enabled": False})
        if manifest.get("format") != _FORMAT:
            raise ValueError(f"unsupported sentence-window format {manifest.get('format')!r}")
        if bool(manifest.get("enabled")) != enabled or (enabled and (
                manifest.get("head_chars"), manifest.get("window_chars"))
                != (HEAD_CHARS, WINDOW_CHARS)):
            whole.close()
            raise ValueError("the saved dense index was built with other sentence-window "
                             "settings")
        if not enabled:
            return cls(whole, _window_store(whole.dimension), enabled=False, mix=mix)
        windows = DenseIndex.load(directory / "windows", first_pass=False)
        index = cls(whole, windows, enabled=True, mix=mix)
        verify_file(directory / manifest["arrays"], manifest.get("checksum"))
        with np.load(directory / manifest["arrays"], allow_pickle=False) as arrays:
            window_ids = arrays["window_ids"].astype(np.int64)
            owners = arrays["owners"].astype(np.int64)
        if len(window_ids) != windows.count or len(owners) != len(window_ids):
            index.close()
            raise ValueError("the saved sentence windows and their owners do not match")
        index._owners = _Owners.of(window_ids, owners)
        index._next_window = int(manifest["next_window"])
        return index


def _unit(query: np.ndarray) -> np.ndarray:
    unit = np.asarray(query, dtype=np.float32)
    norm = float(np.linalg.norm(unit))
    return unit / norm if norm > 0 else unit


def _window_store(dimension: int) -> DenseIndex:
    """Window vectors are read by id, never searched: a dense index that never builds a graph."""
    return DenseIndex(dimension, exact_threshold=sys.maxsize, first_pass=False)
