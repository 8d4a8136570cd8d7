"""Live, incremental BM25 index over integer row ids (the ``sparse`` recall of §7.7).

Scoring is Lucene's BM25 (the form used by Lucene ≥ 8, Elasticsearch and OpenSearch, so the
scores of a query naming each term once equal theirs; it is ≥ 0, the ``scoreFloor`` of
§6.1)::

    score(q, d) = Σ_t∈terms(q)  w(t) · tf(t, d) / (tf(t, d) + k1 · (1 - b + b · |d| / avgdl))
    w(t)        = idf(t) ** IDF_EXPONENT
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

The sum runs over the query's distinct index terms: a term the query repeats, or writes in
two forms one stem covers ("infection", "infected"), counts once, where Lucene counts it once
per occurrence (a question's wording repeats a word, its topic does not weigh more for it;
measured in docs/benchmarks.md). A term's weight is its idf raised to :data:`IDF_EXPONENT`
(Lucene's is the idf itself, exponent 1): a rare term then outweighs a common one by more, so
a row holding the query's most specific terms leads the list, whose top the hybrid's
normalised fusion reads (chosen on development data, docs/benchmarks.md).
``N``, ``avgdl`` and ``df`` are computed at
query time over the rows of the caller's ``visible`` mask, so a search against the visibility
mask of an older version scores exactly as that version's own index would (§7.7.1 snapshots).

Layout: postings live in a term-major CSR block (``_ptr``/``_rows``/``_tf``) plus a small
append-only *delta* of recent additions that queries scan directly; the delta is folded into
the CSR block with a counting sort once it outgrows a fraction of it, so ``add`` stays
amortised linear. Per-row document lengths and presence are dense arrays indexed by rowid, so
memory grows with the largest rowid (the store hands out small increasing integers).

Not thread-safe for writes: ``add``/``remove``/``save`` need exclusive access; concurrent
``search``/``scores_for`` calls do not mutate anything and may run together.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rcpkit.engine.indexes.persist import commit_manifest, compact_ints, save_arrays, verify_file
from rcpkit.engine.text import Analyzer
from rcpkit.files import private_dir

__all__ = ["IDF_EXPONENT", "TITLE_CHARS", "LexicalIndex", "leading_title"]

_FORMAT = "rcpkit-lexical/1"
_MANIFEST = "lexical.json"
_MIN_DELTA_POSTINGS = 1 << 16  # fold the delta once it exceeds this and 1/16 of the CSR block
TITLE_CHARS = 300
"""The longest first paragraph :func:`leading_title` takes for a title."""
IDF_EXPONENT = 1.4
"""The power of the idf in a term's weight by default (``[lexical] idf_exponent``)."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class LexicalIndex:
    """BM25 over rows identified by unique, never reused ``int64`` rowids (see module doc)."""

    def __init__(self, analyzer: Analyzer | None = None, *, k1: float = 1.2, b: float = 0.75,
                 title_repeat: int = 1, idf_exponent: float = IDF_EXPONENT):
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError("BM25 needs k1 >= 0 and 0 <= b <= 1")
        if idf_exponent <= 0:
            raise ValueError("idf_exponent must be positive")
        if title_repeat < 1:
            raise ValueError("title_repeat must be at least 1")
        self.analyzer = analyzer if analyzer is not None else Analyzer()
        self.k1 = float(k1)
        self.b = float(b)
        self.idf_exponent = float(idf_exponent)
        """A term's weight is ``idf ** idf_exponent``; applied at query time, so not saved."""
        self.title_repeat = int(title_repeat)
        """How many times a text's title (:func:`leading_title`) counts: its terms' frequencies
        and the text's length, as if the title were written that many times (BM25F's field
        weight, for texts that carry their title as the first paragraph)."""
        self._vocabulary: dict[str, int] = {}
        self._terms: list[str] = []
        self._ptr: IntArray = np.zeros(1, np.int64)
        self._rows: IntArray = np.zeros(0, np.int64)
        self._tf: npt.NDArray[np.int32] = np.zeros(0, np.int32)
        self._delta_terms: IntArray = np.zeros(0, np.int64)
        self._delta_rows: IntArray = np.zeros(0, np.int64)
        self._delta_tf: npt.NDArray[np.int32] = np.zeros(0, np.int32)
        self._delta_size = 0
        self._present: BoolArray = np.zeros(0, np.bool_)
        self._length: npt.NDArray[np.int32] = np.zeros(0, np.int32)
        self._count = 0
        self._total_length = 0

    @property
    def count(self) -> int:
        """Number of rows held."""
        return self._count

    def held_rowids(self) -> IntArray:
        """The rowids held, ascending."""
        return np.flatnonzero(self._present).astype(np.int64)

    def held_mask(self) -> BoolArray:
        """A fresh mask over rowids ``0..max``: True where the row is held."""
        return self._present.copy()

    def add(self, rowids: npt.ArrayLike, texts: Sequence[str]) -> None:
        """Index ``texts[i]`` under ``rowids[i]``.

        Raises ``ValueError`` (and changes nothing) if a rowid is negative, repeated in the batch
        or already held: the store assigns fresh rowids, so a repeat is a bug, never a retry.
        """
        rows = np.asarray(rowids, dtype=np.int64).reshape(-1)
        if len(rows) != len(texts):
            raise ValueError("rowids and texts differ in length")
        if len(rows) == 0:
            return
        if rows.min() < 0 or len(np.unique(rows)) != len(rows) or self._held(rows).any():
            raise ValueError("rowids must be fresh, distinct and non-negative")
        if self.title_repeat > 1:
            texts = [text + f"\n{title}" * (self.title_repeat - 1)
                     if (title := leading_title(text)) else text for text in texts]
        counters = [Counter(tokens) for tokens in self.analyzer.tokens_batch(texts)]
        vocabulary, terms = self._vocabulary, self._terms
        for term in dict.fromkeys(chain.from_iterable(counters)):  # first-seen order
            if term not in vocabulary:
                vocabulary[term] = len(terms)
                terms.append(term)
        distinct = np.fromiter(map(len, counters), np.int64, len(counters))
        total = int(distinct.sum())
        term_ids = np.fromiter(
            map(vocabulary.__getitem__, chain.from_iterable(counters)), np.int64, total
        )
        tf = np.fromiter(chain.from_iterable(c.values() for c in counters), np.int32, total)
        lengths = np.fromiter((c.total() for c in counters), np.int64, len(counters))
        self._grow_rows(int(rows.max()) + 1)
        self._present[rows] = True
        self._length[rows] = lengths
        self._count += len(rows)
        self._total_length += int(lengths.sum())
        self._append_delta(term_ids, np.repeat(rows, distinct), tf)
        if self._delta_size > max(_MIN_DELTA_POSTINGS, len(self._rows) // 16):
            self._fold_delta()

    def remove(self, rowids: npt.ArrayLike) -> None:
        """Physically drop rows and their postings (garbage collection); unknown ids are ignored."""
        rows = np.asarray(rowids, dtype=np.int64).reshape(-1)
        rows = np.unique(rows[self._held(rows)])
        if len(rows) == 0:
            return
        self._present[rows] = False
        self._count -= len(rows)
        self._total_length -= int(self._length[rows].sum())
        self._length[rows] = 0
        keep = self._present[self._rows]
        kept_before = np.concatenate(([0], np.cumsum(keep)))
        self._ptr = kept_before[self._ptr]
        self._rows, self._tf = self._rows[keep], self._tf[keep]
        size = self._delta_size
        keep = self._present[self._delta_rows[:size]]
        self._delta_size = int(keep.sum())
        for name in ("_delta_terms", "_delta_rows", "_delta_tf"):
            buffer = getattr(self, name)
            buffer[: self._delta_size] = buffer[:size][keep]

    def search(
        self,
        query: str,
        k: int,
        *,
        visible: npt.ArrayLike | None = None,
        allow: npt.ArrayLike | None = None,
    ) -> tuple[IntArray, FloatArray]:
        """Top ``k`` rows by BM25, best first, ties to the smaller rowid; only scores > 0.

        ``visible`` fixes the rows the statistics are taken over (a version's visibility mask,
        §7.7.1); ``allow`` further restricts the candidates (e.g. a §8 filter). Both are boolean
        masks indexed by rowid; rowids beyond a mask's length count as ``False``; ``None`` means
        every row.
        """
        return _top(self._score(query, visible, allow) if k > 0 else None, k)

    def search_scoring(
        self,
        query: str,
        k: int,
        rowids: npt.ArrayLike,
        *,
        visible: npt.ArrayLike | None = None,
        allow: npt.ArrayLike | None = None,
    ) -> tuple[IntArray, FloatArray, FloatArray]:
        """:meth:`search`, plus the BM25 scores of ``rowids`` (0 where a row does not match or
        is not allowed), from the same scoring pass: a hybrid search scores the dense half's
        candidates lexically at no second pass over the postings."""
        rows = np.asarray(rowids, dtype=np.int64).reshape(-1)
        scores = self._score(query, visible, allow)
        found = _top(scores, k)
        of_rows = np.zeros(len(rows), np.float64)
        if scores is not None:
            inside = (rows >= 0) & (rows < len(scores))
            of_rows[inside] = scores[rows[inside]]
        return found[0], found[1], of_rows

    def scores_for(
        self, query: str, rowids: npt.ArrayLike, *, visible: npt.ArrayLike | None = None
    ) -> FloatArray:
        """BM25 scores of ``rowids`` (0 for rows that do not match or are not visible);
        identical to the scores :meth:`search` reports for the same rows."""
        rows = np.asarray(rowids, dtype=np.int64).reshape(-1)
        result = np.zeros(len(rows), np.float64)
        held = self._held(rows)
        if not held.any():
            return result
        allow = np.zeros(len(self._present), np.bool_)
        allow[rows[held]] = True
        scores = self._score(query, visible, allow)
        if scores is not None:
            result[held] = scores[rows[held]]
        return result

    def save(self, directory: Path) -> None:
        """Write the index under ``directory`` atomically (arrays ``.npz`` + JSON manifest).

        The arrays go to a fresh file first; replacing the manifest that names them is the
        commit point, so a crash leaves either the old or the new index. Terms whose postings
        were all removed are dropped from the saved vocabulary.
        """
        directory = Path(directory)
        private_dir(directory)
        self._fold_delta()
        used = np.diff(self._ptr) > 0
        ptr = np.concatenate(([0], np.cumsum(np.diff(self._ptr)[used])))
        arrays_name = save_arrays(directory, "lexical", {
            "ptr": compact_ints(ptr), "rows": compact_ints(self._rows),
            "tf": compact_ints(self._tf), "present": self._present,
            "length": compact_ints(self._length)})
        manifest: dict[str, Any] = {
            "format": _FORMAT,
            "k1": self.k1,
            "b": self.b,
            "title_repeat": self.title_repeat,
            "analyzer": {
                "language": self.analyzer.language,
                "stopwords": self.analyzer.stopwords,
                "stem": self.analyzer.stem,
            },
            "arrays": arrays_name,
            "terms": [term for term, keep in zip(self._terms, used.tolist(), strict=True) if keep],
        }
        commit_manifest(directory, _MANIFEST, manifest, prefix="lexical", arrays=arrays_name)

    @classmethod
    def load(cls, directory: Path, analyzer: Analyzer | None = None) -> LexicalIndex:
        """Read an index written by :meth:`save`; ``analyzer`` defaults to the saved settings."""
        directory = Path(directory)
        manifest = json.loads((directory / _MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("format") != _FORMAT:
            raise ValueError(f"{directory} does not hold a {_FORMAT} index")
        index = cls(
            analyzer if analyzer is not None else Analyzer(**manifest["analyzer"]),
            k1=manifest["k1"],
            b=manifest["b"],
            title_repeat=int(manifest.get("title_repeat", 1)),  # 1 before it was saved
        )
        verify_file(directory / manifest["arrays"], manifest.get("checksum"))
        with np.load(directory / manifest["arrays"], allow_pickle=False) as arrays:
            index._ptr = arrays["ptr"].astype(np.int64)
            index._rows = arrays["rows"].astype(np.int64)
            index._tf = arrays["tf"].astype(np.int32)
            index._present = arrays["present"].astype(np.bool_)
            index._length = arrays["length"].astype(np.int32)
        index._terms = list(manifest["terms"])
        index._vocabulary = {term: i for i, term in enumerate(index._terms)}
        index._count = int(index._present.sum())
        index._total_length = int(index._length.sum(dtype=np.int64))
        return index

    def _held(self, rows: IntArray) -> BoolArray:
        """Which of ``rows`` are currently held."""
        inside = (rows >= 0) & (rows < len(self._present))
        held = np.zeros(len(rows), np.bool_)
        held[inside] = self._present[rows[inside]]
        return held

    def _mask(self, mask: npt.ArrayLike | None) -> BoolArray:
        """``mask`` (indexed by rowid, short means False) AND presence, at full row capacity."""
        if mask is None:
            return self._present
        given = np.asarray(mask, dtype=np.bool_).reshape(-1)
        result = np.zeros(len(self._present), np.bool_)
        shared = min(len(given), len(result))
        result[:shared] = given[:shared] & self._present[:shared]
        return result

    def _score(
        self, query: str, visible: npt.ArrayLike | None, allow: npt.ArrayLike | None
    ) -> FloatArray | None:
        """Dense BM25 score vector by rowid over ``allow`` ∩ ``visible``; None if nothing matches.

        Each row's contributions are summed in the order of the query terms' text, whatever the
        term ids or the CSR/delta placement, so scores are bit-identical across callers, folds
        and rebuilds (§7.7.1).
        """
        terms = sorted({t for t in self.analyzer.tokens(query) if t in self._vocabulary})
        if not terms:
            return None
        term_ids = np.array([self._vocabulary[t] for t in terms], np.int64)
        rows, tf, which = self._postings(term_ids)
        visible_rows = self._mask(visible)
        if visible is None:
            documents, total_length = self._count, self._total_length
        else:
            documents = int(visible_rows.sum())
            total_length = int(self._length[visible_rows].sum(dtype=np.int64))
        if documents == 0 or len(rows) == 0:
            return None
        seen = visible_rows[rows]
        df = np.bincount(which[seen], minlength=len(term_ids))
        idf = np.log1p((documents - df + 0.5) / (df + 0.5)) ** self.idf_exponent
        candidates = seen if allow is None else seen & self._mask(allow)[rows]
        rows, tf, which = rows[candidates], tf[candidates].astype(np.float64), which[candidates]
        if len(rows) == 0:
            return None
        average_length = total_length / documents
        norm = self.k1 * (1.0 - self.b + self.b * self._length[rows] / average_length)
        contribution = idf[which] * tf / (tf + norm)
        summed = np.bincount(rows, weights=contribution, minlength=len(self._present))
        return summed.astype(np.float64, copy=False)

    def _postings(self, term_ids: IntArray) -> tuple[IntArray, npt.NDArray[np.int32], IntArray]:
        """Postings of ``term_ids`` grouped by term in that order: rows, tf, index of the term."""
        last = len(self._ptr) - 1  # terms first seen since the last fold have no CSR postings
        starts = self._ptr[np.minimum(term_ids, last)].tolist()
        ends = self._ptr[np.minimum(term_ids + 1, last)].tolist()
        delta_terms = self._delta_terms[: self._delta_size]
        # Which query term each delta posting belongs to (-1: none), by one table lookup per
        # posting: a binary search per posting costs ~25x more over a full delta.
        table = np.zeros(int(term_ids.max()) + 2, np.int64)
        table[term_ids] = np.arange(1, len(term_ids) + 1)
        slot = table[np.minimum(delta_terms, len(table) - 1)] - 1
        hits = np.flatnonzero(slot >= 0)
        hits = hits[np.argsort(slot[hits], kind="stable")]
        delta_ends = np.cumsum(np.bincount(slot[hits], minlength=len(term_ids))).tolist()
        rows: list[IntArray] = []
        tfs: list[npt.NDArray[np.int32]] = []
        counts: list[int] = []
        for term, (start, end) in enumerate(zip(starts, ends, strict=True)):
            in_delta = hits[(delta_ends[term - 1] if term else 0) : delta_ends[term]]
            rows += [self._rows[start:end], self._delta_rows[in_delta]]
            tfs += [self._tf[start:end], self._delta_tf[in_delta]]
            counts.append(end - start + len(in_delta))
        which = np.repeat(np.arange(len(term_ids)), counts)
        return np.concatenate(rows), np.concatenate(tfs), which

    def _grow_rows(self, capacity: int) -> None:
        if capacity <= len(self._present):
            return
        capacity = max(capacity, 2 * len(self._present))
        present = np.zeros(capacity, np.bool_)
        present[: len(self._present)] = self._present
        length = np.zeros(capacity, np.int32)
        length[: len(self._length)] = self._length
        self._present, self._length = present, length

    def _append_delta(self, terms: IntArray, rows: IntArray, tf: npt.NDArray[np.int32]) -> None:
        size, needed = self._delta_size, self._delta_size + len(terms)
        if needed > len(self._delta_terms):
            capacity = max(needed, 2 * len(self._delta_terms))
            for name in ("_delta_terms", "_delta_rows", "_delta_tf"):
                old = getattr(self, name)
                grown = np.zeros(capacity, old.dtype)
                grown[:size] = old[:size]
                setattr(self, name, grown)
        self._delta_terms[size:needed] = terms
        self._delta_rows[size:needed] = rows
        self._delta_tf[size:needed] = tf
        self._delta_size = needed

    def _fold_delta(self) -> None:
        """Merge the delta into the CSR block by a counting sort on term id."""
        vocabulary_size = len(self._terms)
        old_counts = np.zeros(vocabulary_size, np.int64)
        old_counts[: len(self._ptr) - 1] = np.diff(self._ptr)
        size = self._delta_size
        delta_terms = self._delta_terms[:size]
        order = np.argsort(delta_terms, kind="stable")
        delta_counts = np.bincount(delta_terms, minlength=vocabulary_size)
        ptr = np.concatenate(([0], np.cumsum(old_counts + delta_counts)))
        old_terms = np.repeat(np.arange(vocabulary_size), old_counts)
        old_target = np.arange(len(self._rows)) - self._ptr[old_terms] + ptr[old_terms]
        sorted_terms = delta_terms[order]
        delta_start = np.concatenate(([0], np.cumsum(delta_counts)))
        delta_target = (
            ptr[sorted_terms]
            + old_counts[sorted_terms]
            + np.arange(size)
            - delta_start[sorted_terms]
        )
        rows = np.empty(ptr[-1], np.int64)
        tf = np.empty(ptr[-1], np.int32)
        rows[old_target], tf[old_target] = self._rows, self._tf
        rows[delta_target] = self._delta_rows[:size][order]
        tf[delta_target] = self._delta_tf[:size][order]
        self._ptr, self._rows, self._tf = ptr, rows, tf
        self._delta_size = 0


def _top(scores: FloatArray | None, k: int) -> tuple[IntArray, FloatArray]:
    """The ``k`` best rows of a score vector by rowid (only scores > 0), best first, ties to
    the smaller rowid; none for ``k`` ≤ 0 or no scores."""
    if scores is None or k <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    rows = np.flatnonzero(scores)
    values = scores[rows]
    if len(rows) > k:
        threshold = values[np.argpartition(-values, k - 1)[k - 1]]
        above = np.flatnonzero(values > threshold)
        ties = np.flatnonzero(values == threshold)[: k - len(above)]
        chosen = np.concatenate((above, ties))
        rows, values = rows[chosen], values[chosen]
    order = np.lexsort((rows, -values))
    return rows[order].astype(np.int64), values[order]


def leading_title(text: str) -> str | None:
    """The title a text carries as its first paragraph: a non-empty first paragraph of at most
    :data:`TITLE_CHARS` characters followed by a blank line and more text (how ``rcpkit eval``
    and Markdown documents put it), else None."""
    head, blank, rest = text.partition("\n\n")
    if blank and head.strip() and rest.strip() and len(head) <= TITLE_CHARS:
        return head
    return None
