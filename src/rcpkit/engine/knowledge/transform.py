"""``query/transform`` without an LLM (§7.8): every method works from the corpus itself —
its vocabulary, its concept graph and its top hits.

- ``rewrite`` — NFKC, whitespace and filler removal (request phrasing such as "could you
  tell me"), then spelling fixed against the corpus vocabulary: a word the corpus does not
  know becomes the most frequent corpus word one edit away (two from eight letters on;
  Damerau), found through a delete index (the SymSpell idea); words under five letters are
  left alone, as too many real ones are an edit away from some corpus word.
- ``multi-query`` — the rewrite, then variants adding pseudo-relevance-feedback concepts
  (the strongest concepts of the top lexical hits) interleaved with the concepts the graph
  walk from the query's concepts reaches.
- ``decompose`` — one query per clause of a conjunctive question, and one per entity of a
  coordinated list sharing the question's frame ("effects of A and B on C" → "effects of A
  on C", "effects of B on C").
- ``step-back`` — the communities that contain the query's main concept, from the nearest
  to the most general level of the hierarchy (§7.9), each as its central concepts.
- ``hyde`` — an extractive hypothetical passage: the sentences of the top hits that share
  the most (idf-weighted) concepts with the query; with a configured language model
  (:mod:`rcpkit.engine.knowledge.llm`) a passage generated from that one, which stays the answer
  when the model fails.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rcpkit.engine.knowledge.graph.component import ConceptGraph, distinct_labels
from rcpkit.engine.knowledge.graph.view import GraphView
from rcpkit.engine.knowledge.llm import LanguageModel, hypothetical_passage

__all__ = ["TRANSFORM_METHODS", "QueryTransformer", "Transformed", "default_n"]

TRANSFORM_METHODS = ("rewrite", "multi-query", "decompose", "step-back", "hyde")
_DEFAULT_N = {"multi-query": 3, "decompose": 3, "step-back": 1}


def default_n(method: str) -> int:
    """How many queries ``method`` returns for a request without ``n``."""
    return _DEFAULT_N.get(method, 1)


_PRF_HITS = 5
_HYDE_SENTENCES = 3

# Written for this module: request phrasing around an English question that carries no
# topical signal; removed only when something is left.
_FILLER = re.compile(
    r"\b(?:please|kindly|hey|hi|hello|um+|uh+|basically|actually|just|"
    r"(?:can|could|would|will) you(?: please)?(?: tell me| explain| show me| find| help me"
    r"(?: understand| find)?)?|tell me(?: about)?|i (?:want|would like|'d like|need) to "
    r"(?:know|understand|learn|find out)(?: about)?|i (?:am|'m) (?:looking for|wondering)"
    r"(?: about| if| whether)?|help me (?:understand|find))\b[,]?\s*", re.IGNORECASE)
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")
_CLAUSE = re.compile(r"[?;]+|\.\s+")
_COORDINATION = re.compile(r"\s*(?:,\s*)?\b(?:and|or|as well as|versus|vs\.?)\b\s*|\s*,\s*",
                           re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")


@dataclass(frozen=True, slots=True)
class Transformed:
    queries: list[str]
    hypothetical: str | None = None


class QueryTransformer:
    """The §7.8 methods over a corpus: ``graph`` for vocabulary and concepts, ``search(query,
    k)`` for the texts of the top lexical hits at the latest version."""

    def __init__(self, graph: ConceptGraph, search: Callable[[str, int], Sequence[str]], *,
                 max_n: int = 8, model: LanguageModel | None = None) -> None:
        self.graph = graph
        self.max_n = max_n
        self.model = model
        self._search = search
        self._spelling: dict[int, _Speller] = {}

    def transform(self, query: str, method: str, n: int | None, seq: int) -> Transformed:
        """Apply ``method`` (one of :data:`TRANSFORM_METHODS`) at version ``seq``; ``n``
        (at most :attr:`max_n`) bounds the queries returned."""
        count = min(n or default_n(method), self.max_n)
        view = self.graph.view(seq)
        base = self.rewrite(query, view)
        if method == "rewrite":
            return Transformed([base])
        if method == "multi-query":
            return Transformed(self._multi_query(base, view, count))
        if method == "decompose":
            return Transformed(self._decompose(base, count))
        if method == "step-back":
            return Transformed(self._step_back(base, seq, count))
        if method == "hyde":
            passage = self._hypothetical(base, view)
            generated = (hypothetical_passage(self.model, base, passage)
                         if self.model is not None else None)
            return Transformed([base], generated or passage)
        raise ValueError(f"unknown transform method {method!r}")

    # ── rewrite ────────────────────────────────────────────────────────────
    def rewrite(self, query: str, view: GraphView) -> str:
        text = " ".join(unicodedata.normalize("NFKC", query).split())
        stripped = _FILLER.sub("", text).strip(" ,")
        if _WORD.search(stripped):
            text = stripped[:1].upper() + stripped[1:] if text[:1].isupper() else stripped
        speller = self._speller(view)
        return _WORD.sub(lambda match: speller.fix(match.group()), text)

    def _speller(self, view: GraphView) -> _Speller:
        speller = self._spelling.get(view.seq)
        if speller is None:
            self._spelling = {view.seq: _Speller(view, self.graph)}
            speller = self._spelling[view.seq]
        return speller

    # ── multi-query ────────────────────────────────────────────────────────
    def _multi_query(self, base: str, view: GraphView, n: int) -> list[str]:
        asked = {c.key for c in self.graph.extractor.extract(base)}
        asked_words = {word for key in asked for word in key.split()}
        feedback: dict[str, float] = defaultdict(float)
        labels: dict[str, str] = {}
        for text in self._search(base, _PRF_HITS):
            for concept in self.graph.extractor.extract(text):
                node = view.concept_node(concept.key)
                if node is not None:
                    feedback[concept.key] += concept.count * float(view.idf[node - view.chunks])
                    labels[concept.key] = view.labels[node - view.chunks]
        seeds = self.graph.query_seeds(view, base)
        walk = view.pagerank(seeds)[view.chunks:] if seeds else None
        walked = ([int(i) for i in walk.argsort()[::-1][:4 * n] if walk[i] > 0]
                  if walk is not None else [])
        from_feedback = [labels[key] for key, _ in sorted(feedback.items(),
                                                          key=lambda kv: (-kv[1], kv[0]))]
        from_graph = [view.labels[i] for i in walked]
        expansions: list[str] = []
        for label in _interleave(from_feedback, from_graph):
            key = self.graph.extractor.key(label)
            if key in asked or set(key.split()) <= asked_words or label in expansions:
                continue
            expansions.append(label)
        queries = [base]
        stem = base.rstrip(" ?!.")
        for start in range(0, len(expansions), 2):
            if len(queries) == n:
                break
            queries.append(" ".join([stem, *expansions[start:start + 2]]))
        return queries

    # ── decompose ──────────────────────────────────────────────────────────
    def _decompose(self, base: str, n: int) -> list[str]:
        parts: list[str] = []
        for clause in (c.strip(" ,") for c in _CLAUSE.split(base)):
            if clause:
                parts.extend(self._split_clause(clause))
        unique = list(dict.fromkeys(parts)) or [base]
        return unique[:n]

    def _split_clause(self, clause: str) -> list[str]:
        pieces = [p for p in _COORDINATION.split(clause) if p.strip()]
        if len(pieces) < 2:
            return [clause]
        extractor = self.graph.extractor
        # A coordinated list of short entities shares the frame around it.
        first_words = pieces[0].split()
        last_words = pieces[-1].split()
        head_runs = extractor.runs(pieces[0])
        tail_runs = extractor.runs(pieces[-1])
        middle_short = all(len(p.split()) <= 3 for p in pieces[1:-1])
        if head_runs and tail_runs and middle_short:
            lead = len(head_runs[-1])
            trail = len(tail_runs[0])
            bounded = (extractor.runs(first_words[-1]) and extractor.runs(last_words[0])
                       and lead <= min(3, len(first_words))
                       and trail <= min(3, len(last_words)))
            if bounded:
                prefix = " ".join(first_words[:-lead])
                suffix = " ".join(last_words[trail:])
                entities = [" ".join(first_words[-lead:]), *pieces[1:-1],
                            " ".join(last_words[:trail])]
                if prefix or suffix:
                    return [" ".join(part for part in (prefix, entity, suffix) if part)
                            for entity in entities]
        # Otherwise clauses: each piece stands alone when it has concepts of its own.
        if all(extractor.runs(p) for p in pieces):
            return pieces
        return [clause]

    # ── step-back ──────────────────────────────────────────────────────────
    def _step_back(self, base: str, seq: int, n: int) -> list[str]:
        hierarchy = self.graph.hierarchy(seq)
        view = hierarchy.view
        seeds = self.graph.query_seeds(view, base)
        queries: list[str] = []
        grouped = {concept for c in hierarchy.at_level(0) for concept in c.concepts}
        placed = {node: weight for node, weight in seeds.items()
                  if node - view.chunks in grouped}
        if placed:
            main = max(placed, key=lambda node: (placed[node], -node)) - view.chunks
            containing = [c for c in hierarchy.communities if main in c.concepts]
            for community in sorted(containing, key=lambda c: -c.level):
                queries.append(" ".join(distinct_labels(
                    (view.labels[c] for c in community.concepts), 3)))
        if not queries:  # no hierarchy reaches it: the head words of the query's phrases
            runs = self.graph.extractor.runs(base)
            queries.append(" ".join(run[-1][1] for run in runs) or base)
        return list(dict.fromkeys(queries))[:n]

    # ── hyde ───────────────────────────────────────────────────────────────
    def _hypothetical(self, base: str, view: GraphView) -> str:
        extractor = self.graph.extractor
        wanted = {c.key for c in extractor.extract(base)}
        scored: list[tuple[float, int, int, str]] = []
        for rank, text in enumerate(self._search(base, _PRF_HITS)):
            for position, sentence in enumerate(_SENTENCE_END.split(text)):
                keys = {c.key for c in extractor.extract(sentence)} & wanted
                weight = sum(float(view.idf[node - view.chunks])
                             for node in (view.concept_node(key) for key in keys)
                             if node is not None)
                if weight > 0:
                    scored.append((weight, rank, position, sentence.strip()))
        best = sorted(scored, key=lambda s: (-s[0], s[1], s[2]))[:_HYDE_SENTENCES]
        best.sort(key=lambda s: (s[1], s[2]))
        return " ".join(sentence for *_, sentence in best) or base


class _Speller:
    """Spelling correction against the unigram concepts of one snapshot."""

    def __init__(self, view: GraphView, graph: ConceptGraph) -> None:
        self._extractor = graph.extractor
        self._known = {key for key in view.keys if " " not in key}
        self._frequency: dict[str, float] = {}
        for key, label, df in zip(view.keys, view.labels, view.df.tolist(), strict=True):
            if " " not in key and label.isalpha():
                self._frequency[label] = max(self._frequency.get(label, 0.0), df)
        self._deletes: defaultdict[str, set[str]] = defaultdict(set)
        for word in self._frequency:
            for variant in {word, *_deletions(word)}:
                self._deletes[variant].add(word)

    def fix(self, word: str) -> str:
        folded = word.casefold()
        if not folded.isalpha() or self._is_known(folded):
            return word
        candidates = set(self._deletes.get(folded, ()))
        for variant in _deletions(folded):
            candidates |= self._deletes.get(variant, set())
        if len(folded) < 5:  # too many real short words are one edit from a corpus word
            return word
        limit = 1 if len(folded) < 8 else 2
        close = [(c, d) for c in candidates if (d := _osa_distance(folded, c)) <= limit]
        if not close:
            return word
        best = min(close, key=lambda cd: (cd[1], -self._frequency[cd[0]], cd[0]))[0]
        return best.capitalize() if word[:1].isupper() else best

    def _is_known(self, word: str) -> bool:
        return word in self._frequency or self._extractor.key(word) in self._known


def _deletions(word: str) -> set[str]:
    return {word[:i] + word[i + 1:] for i in range(len(word))}


def _osa_distance(a: str, b: str) -> int:
    """Optimal-string-alignment edit distance (insert, delete, substitute, transpose)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def _interleave(first: Sequence[str], second: Sequence[str]) -> list[str]:
    merged: list[str] = []
    for i in range(max(len(first), len(second))):
        merged.extend(items[i] for items in (first, second) if i < len(items))
    return merged
