"""Feedback (§7.16): durable signals and the poison policy state they feed (§15.3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rcpkit.engine.errors import InvalidInput
from rcpkit.engine.store import FeedbackRecord, Store
from rcpkit.engine.types import FeedbackSignal

__all__ = ["Feedback", "Poisoned", "doc_id_of"]


@dataclass(frozen=True, slots=True)
class Poisoned:
    """Documents demoted by the poison policy, as of a feedback mark."""

    mark: int
    documents: frozenset[str]


class Feedback:
    """Records signals and keeps the poison set current; the set is swapped in whole, so
    only searches that start later see a change."""

    def __init__(self, store: Store, *, threshold: int, max_signals: int) -> None:
        self._store = store
        self._threshold = threshold
        self._max_signals = max_signals
        self.poisoned = self.as_of(store.feedback_position())

    def as_of(self, mark: int) -> Poisoned:
        """The poison set as of feedback ``mark`` (a cursor page replays its first page's)."""
        counts = self._store.poison_counts(mark)
        return Poisoned(mark, frozenset(doc for doc, n in counts.items()
                                        if n >= self._threshold))

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
        accepted = self._store.record_feedback(records)
        self.poisoned = self.as_of(self._store.feedback_position())
        return accepted


def doc_id_of(hit_id: str) -> str:
    """The document of a hit id: ``"doc#3"`` → ``"doc"``; a document-unit id is itself."""
    prefix, separator, suffix = hit_id.rpartition("#")
    return prefix if separator and suffix.isdigit() else hit_id
