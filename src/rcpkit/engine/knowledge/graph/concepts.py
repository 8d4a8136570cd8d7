"""LLM-free concept extraction for the knowledge graph (§7.9).

A *concept* is a keyphrase: a run of content words between phrase boundaries
(punctuation) and function words, in the spirit of RAKE and of LazyGraphRAG's noun-phrase
concepts, without a part-of-speech model. Words come from the engine's own
:class:`~rcpkit.engine.text.Analyzer` — so the graph is exactly as multilingual as lexical
search (Unicode words, CJK bigrams, Snowball stems) — and a concept's *key* is its stems
joined by spaces (``"neural networks"`` and ``"Neural network"`` are one concept), its
*label* the first surface form seen.

Each content word is a concept by itself, and so is every n-gram of 2 to ``max_words``
words inside a run: unigrams let a query reach a chunk that never repeats its exact phrase,
phrases carry the specific meaning that links chunks ("honey bee colony" also yields
"honey bee", which another chunk may share).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from rcpkit.engine.text import ENGLISH_STOPWORDS, Analyzer

__all__ = ["Concept", "ConceptExtractor"]

# Phrase boundaries: sentence and clause punctuation, brackets, quotes, dashes, line breaks.
_BOUNDARY = re.compile(r"[.,;:!?()\[\]{}<>\"“”„«»|/\\\n\r\t•·–—…。、，；：！？（）「」『』]+")
_MAX_WORD_CHARS = 40


@dataclass(frozen=True, slots=True)
class Concept:
    """One concept found in a text: stemmed ``key``, surface ``label``, occurrence ``count``."""

    key: str
    label: str
    count: int

    @property
    def words(self) -> int:
        return self.key.count(" ") + 1


class ConceptExtractor:
    """Keyphrase concepts of a text; at most ``per_text`` per text, most frequent first
    (phrases before single words on ties, as they are more specific)."""

    def __init__(self, language: str = "english", *, max_words: int = 3,
                 per_text: int = 32) -> None:
        if max_words < 1 or per_text < 1:
            raise ValueError("max_words and per_text must be positive")
        self.language = language
        self.max_words = max_words
        self.per_text = per_text
        self._surface = Analyzer(language, stopwords=False, stem=False)
        self._stemmed = Analyzer(language, stopwords=False, stem=True)
        self._stop = ENGLISH_STOPWORDS if language == "english" else frozenset()

    @property
    def signature(self) -> str:
        """What the extracted concepts depend on: a stored graph built with another one is
        rebuilt."""
        return f"rake-stem:{self.language}:{self.max_words}:{self.per_text}"

    def key(self, phrase: str) -> str:
        """The concept key of ``phrase``: its stems, space-separated."""
        return " ".join(self._stemmed.tokens(phrase))

    def runs(self, text: str) -> list[list[tuple[str, str]]]:
        """The content-word runs of ``text`` as ``(stem, surface)`` pairs, in order."""
        runs: list[list[tuple[str, str]]] = []
        for segment in _BOUNDARY.split(text):
            surfaces = self._surface.tokens(segment)
            if not surfaces:
                continue
            stems = self._stemmed.tokens(segment)
            run: list[tuple[str, str]] = []
            for stem, surface in zip(stems, surfaces, strict=True):
                if _is_ideographic(surface):
                    # Already a character bigram: a unit of its own, never part of a phrase.
                    if run:
                        runs.append(run)
                    runs.append([(stem, surface)])
                    run = []
                elif self._is_content(surface):
                    run.append((stem, surface))
                elif run:
                    runs.append(run)
                    run = []
            if run:
                runs.append(run)
        return runs

    def extract(self, text: str) -> list[Concept]:
        """The concepts of ``text`` with their counts (see the class docstring)."""
        counts: Counter[str] = Counter()
        labels: dict[str, str] = {}
        for run in self.runs(text):
            spans = (run[i:i + n] for n in range(1, min(len(run), self.max_words) + 1)
                     for i in range(len(run) - n + 1))
            for span in spans:
                key = " ".join(stem for stem, _ in span)
                counts[key] += 1
                labels.setdefault(key, " ".join(surface for _, surface in span))
        ranked = sorted(counts.items(), key=lambda item: (-item[1], -item[0].count(" "),
                                                          item[0]))
        return [Concept(key, labels[key], count) for key, count in ranked[:self.per_text]]

    def _is_content(self, word: str) -> bool:
        return (word not in self._stop and len(word) <= _MAX_WORD_CHARS
                and not word.replace("'", "").isdigit()
                and (len(word) > 1 or not word.isascii()))


def _is_ideographic(word: str) -> bool:
    return not word.isascii() and unicodedata.name(word[0], "").startswith(
        ("CJK", "HIRAGANA", "KATAKANA"))
