"""A tiny in-memory BM25 index with upserts: the engine behind the eval tests' fake targets."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

_TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class TinyBm25:
    """Okapi BM25 (k1=1.2, b=0.75) over upserted documents; ties broken by id."""

    def __init__(self) -> None:
        self.documents: dict[str, dict[str, Any]] = {}
        self._term_counts: dict[str, Counter[str]] = {}

    def upsert(self, doc_id: str, text: str, meta: dict[str, Any] | None = None) -> None:
        self.documents[doc_id] = {"text": text, "meta": meta or {}}
        self._term_counts[doc_id] = Counter(tokenize(text))

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        n = len(self._term_counts)
        if n == 0:
            return []
        average = sum(sum(c.values()) for c in self._term_counts.values()) / n
        terms = set(tokenize(query))
        frequency = {t: sum(1 for c in self._term_counts.values() if t in c) for t in terms}
        scored = []
        for doc_id, counts in self._term_counts.items():
            length = sum(counts.values())
            score = 0.0
            for term in terms:
                tf = counts.get(term, 0)
                if tf:
                    idf = math.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
                    score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))
            if score > 0:
                scored.append((doc_id, score))
        scored.sort(key=lambda item: (-item[1], item[0]))
        return scored[:k]
