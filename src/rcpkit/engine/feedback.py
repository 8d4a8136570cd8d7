"""Feedback (§7.16): durable signals and the poison policy state they feed (§15.3).

The policy acts at two levels. A document with ``threshold`` ``poisonSuspected`` reports is
demoted. A *source* — a document's ``meta.source`` or its writer ``written_by``, labelled
``source:<value>`` / ``written_by:<value>`` — is quarantined (every document of it, later
ones included, left out of retrieval) once ``source_threshold`` (or its own entry in
``source_thresholds``) of its documents are demoted. Counting demoted documents rather than
raw reports keeps the signal advisory (§15.3): one reporter repeating a report against one
document cannot take a whole source down; the operator chooses the thresholds (0: never)
and clears a source, which discards the reports on its documents made before the clear.
Clears are feedback rows themselves, so every process sharing the record follows them and a
cursor replays the state of its own feedback mark (§10).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rcpkit.engine.errors import InvalidInput
from rcpkit.engine.store import FeedbackLog, FeedbackRecord, RecordReads
from rcpkit.engine.types import WRITE_STAMP, FeedbackSignal

__all__ = ["SOURCE_FIELDS", "Feedback", "Poisoned", "SourceState", "doc_id_of",
           "source_labels"]

SOURCE_FIELDS = ("source", WRITE_STAMP[0])
"""The metadata naming a document's sources: where it came from and who wrote it."""


class FeedbackStore(FeedbackLog, RecordReads, Protocol):
    """What feedback reads and writes: the signals, and the documents they name."""


@dataclass(frozen=True, slots=True)
class SourceState:
    """One source's standing under the poison policy since its last clear."""

    label: str
    reports: int
    demoted: int
    threshold: int
    """Demoted documents that quarantine the source; 0: never."""

    @property
    def quarantined(self) -> bool:
        return 0 < self.threshold <= self.demoted


@dataclass(frozen=True, slots=True)
class Poisoned:
    """Documents demoted and sources quarantined by the poison policy, as of a feedback mark."""

    mark: int
    documents: frozenset[str]
    sources: tuple[SourceState, ...] = ()
    quarantined: frozenset[str] = frozenset()

    def excludes(self, meta: Mapping[str, Any]) -> bool:
        """Whether a document with ``meta`` belongs to a quarantined source."""
        return any(label in self.quarantined for label in source_labels(meta))


class Feedback:
    """Records signals and keeps the poison set current; the set is swapped in whole, so
    only searches that start later see a change."""

    def __init__(self, store: FeedbackStore, *, threshold: int, max_signals: int,
                 source_threshold: int = 0,
                 source_thresholds: Mapping[str, int] | None = None) -> None:
        self._store = store
        self._threshold = threshold
        self._max_signals = max_signals
        self._source_threshold = source_threshold
        self._source_thresholds = dict(source_thresholds or {})
        self.poisoned = self.as_of(store.feedback_position())

    def as_of(self, mark: int) -> Poisoned:
        """The poison state as of feedback ``mark`` (a cursor page replays its first page's)."""
        counts = self._store.poison_counts(mark)
        if not counts:
            return Poisoned(mark, frozenset())
        clears = self._store.poison_clears(mark)
        metas = self._store.live_meta(sorted(counts))
        labels = {doc: source_labels(metas.get(doc, {})) for doc in counts}
        floors = {doc: max((clears.get(label, 0) for label in labels[doc]), default=0)
                  for doc in counts}
        before = {floor: self._store.poison_counts(floor)
                  for floor in set(floors.values()) if floor}
        reports = {doc: n - before.get(floors[doc], {}).get(doc, 0)
                   for doc, n in counts.items()}
        demoted = frozenset(doc for doc, n in reports.items() if n >= self._threshold)
        tally: Counter[str] = Counter()
        demoted_tally: Counter[str] = Counter()
        for doc, n in reports.items():
            for label in labels[doc]:
                tally[label] += n
                demoted_tally[label] += doc in demoted
        sources = tuple(SourceState(label, n, demoted_tally[label], self.threshold_of(label))
                        for label, n in tally.most_common() if n)
        return Poisoned(mark, demoted, sources,
                        frozenset(s.label for s in sources if s.quarantined))

    def threshold_of(self, label: str) -> int:
        """Demoted documents that quarantine the source ``label`` (0: never)."""
        return self._source_thresholds.get(label, self._source_threshold)

    def follow(self, mark: int) -> bool:
        """Take in feedback up to ``mark`` (another process's included); True if it moved."""
        if mark == self.poisoned.mark:
            return False
        self.poisoned = self.as_of(mark)
        return True

    def record(self, signals: Sequence[FeedbackSignal], session_id: str | None,
               query: str | None) -> int:
        """Store ``signals``; they only affect later searches."""
        if len(signals) > self._max_signals:
            raise InvalidInput(f"at most {self._max_signals} signals per call", field="signals")
        records = [FeedbackRecord(hit_id=s.hit_id, doc_id=doc_id_of(s.hit_id),
                                  session_id=session_id, query=query, used=s.used,
                                  cited=s.cited, helpful=s.helpful, reward=s.reward,
                                  poison_suspected=s.poison_suspected,
                                  injection_suspected=s.injection_suspected)
                   for s in signals]
        for position, record in enumerate(records):
            if not record.doc_id:
                # An empty document id marks an operator's clear.
                raise InvalidInput("hitId names no document",
                                   field=f"signals[{position}].hitId")
        accepted = self._store.record_feedback(records)
        self.poisoned = self.as_of(self._store.feedback_position())
        return accepted

    def clear(self, label: str) -> Poisoned:
        """Discard the reports so far on the documents of source ``label`` (an operator's
        decision, §15.3): it is no longer quarantined, nor its documents demoted."""
        field, separator, value = label.partition(":")
        if field not in SOURCE_FIELDS or not separator or not value:
            raise InvalidInput(f"a source is {' or '.join(f + ':<value>' for f in SOURCE_FIELDS)}",
                               field="source")
        self._store.record_feedback([FeedbackRecord(hit_id=label, doc_id="")])
        self.poisoned = self.as_of(self._store.feedback_position())
        return self.poisoned


def source_labels(meta: Mapping[str, Any]) -> list[str]:
    """The sources of a document with ``meta``: ``field:value`` for each of SOURCE_FIELDS."""
    return [f"{field}:{meta[field]}" for field in SOURCE_FIELDS
            if isinstance(meta.get(field), str) and meta[field]]


def doc_id_of(hit_id: str) -> str:
    """The document of a hit id: ``"doc#3"`` → ``"doc"``; a document-unit id is itself."""
    prefix, separator, suffix = hit_id.rpartition("#")
    return prefix if separator and suffix.isdigit() else hit_id
