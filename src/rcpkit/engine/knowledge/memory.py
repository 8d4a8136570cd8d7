"""The memory component (§7.17): a compact, durable concept memory of a corpus that turns a
query into clues (MemoRAG's "global memory → clues", HippoRAG's entry points), without an LLM.

:meth:`KnowledgeMemory.build` distils a concept graph — the engine's live one at the current
version, or one built over documents supplied inline — into a memory: its most salient
concepts (tf-idf mass), each with its strongest co-occurring concepts and the passages that
evidence it best. Memories live beside the record (``<data_dir>/memory.sqlite``, or tables in
the record's PostgreSQL schema, shared by every process on it; see ``sidecar``): one JSON body
per memory, so a recall reads one row, with the inline documents kept so that an update can
rebuild.

:meth:`KnowledgeMemory.recall` matches the query's concepts against a memory (weighted
by their idf, so the specific ones lead), spreads their activation one step over the stored
associations and returns clues — a short keyphrase query per entry concept (the concept
with its strongest associates the query did not name), the graph node ids to seed a
``graph`` walk with, and a weight — plus draft passages ranked by the activation they
evidence.

Scopes: a ``global`` memory is visible to every caller; a ``session`` memory only to the
caller that built it (§15.6): to anyone else it does not exist.

Bounds (§15.5): the inline documents a memory keeps (with an update's, those kept before)
total at most ``max_inline_bytes``; a build checks the request's stop (cancellation §7.14,
deadline §13.1) between passages and between concepts. Retention: a memory is forgotten
``retention_seconds`` after it was (re)built, and only the ``max_count`` most recently built
are kept; each build prunes, and an expired memory is unknown before then. §7.17 has no
method to delete a memory: :meth:`KnowledgeMemory.delete` serves the operator's
``rcpkit memory delete``.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rcpkit.engine.config import (
    MEMORY_MAX_COUNT,
    MEMORY_MAX_INLINE_BYTES,
    MEMORY_RETENTION_SECONDS,
)
from rcpkit.engine.documents.chunking import chunk_text
from rcpkit.engine.errors import InvalidInput, UnknownMemory
from rcpkit.engine.knowledge.graph.component import distinct_labels
from rcpkit.engine.knowledge.graph.concepts import ConceptExtractor
from rcpkit.engine.knowledge.graph.view import CONCEPT_PREFIX, GraphView, Vocabulary
from rcpkit.engine.sidecar import MEMORY_FILE, SideTables, open_side_tables
from rcpkit.engine.store import SideTableHost
from rcpkit.engine.text import count_tokens
from rcpkit.interrupts import checkpoint

__all__ = ["CONCEPTS", "MEMORY_FILE", "MEMORY_SCOPES", "Clue", "DraftPassage", "KnowledgeMemory",
           "MemoryConflict", "MemorySummary", "Recall"]

MEMORY_SCOPES = ("global", "session")
CONCEPTS = 4000
"""Concepts a memory keeps by default, most salient first: what bounds its size on a large
corpus."""
_LINKS = 8
_EVIDENCE = 3
_SPREAD = 0.5
"""Share of a concept's activation passed to each associate (one step)."""
_DRAFTS = 10
_CACHED = 8

_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (id TEXT PRIMARY KEY, scope TEXT NOT NULL, owner TEXT,
                                     source TEXT NOT NULL, version TEXT, tokens INTEGER NOT NULL,
                                     built INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memory_documents (memory TEXT NOT NULL, doc_id TEXT NOT NULL,
                                             text TEXT NOT NULL, PRIMARY KEY (memory, doc_id));
"""
# The same tables in the record's schema (whose own ``documents`` the prefix avoids);
# ``ordinal`` stands in for SQLite's rowid.
_POSTGRES_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (id text PRIMARY KEY, scope text NOT NULL, owner text,
                                     source text NOT NULL, version text, tokens integer NOT NULL,
                                     built bigint NOT NULL, body text NOT NULL,
                                     ordinal bigserial);
CREATE TABLE IF NOT EXISTS memory_documents (memory text NOT NULL, doc_id text NOT NULL,
                                             text text NOT NULL, ordinal bigserial,
                                             PRIMARY KEY (memory, doc_id));
"""


class MemoryConflict(InvalidInput):
    """An update that contradicts the memory: another scope, or documents for a memory of the
    live index; ``field`` names the offending parameter."""


@dataclass(frozen=True, slots=True)
class Clue:
    query: str
    seed_ids: list[str]
    weight: float


@dataclass(frozen=True, slots=True)
class DraftPassage:
    """A draft hit: a chunk of the index (``rowid``) or a passage of an inline document."""

    id: str
    score: float
    rowid: int | None
    text: str | None


@dataclass(frozen=True, slots=True)
class Recall:
    memory_id: str
    version: str | None
    """The ``indexVersion`` a memory of the live index was built at."""
    clues: list[Clue]
    drafts: list[DraftPassage]


@dataclass(frozen=True, slots=True)
class MemorySummary:
    """A stored memory as the operator sees it (``rcpkit memory list``)."""

    id: str
    scope: str
    owner: str | None
    source: str
    tokens: int
    built: int
    """Epoch seconds of its last build."""


@dataclass(frozen=True, slots=True)
class _Memory:
    id: str
    scope: str
    owner: str | None
    source: str
    """``"index"`` (built over the live index) or ``"documents"`` (inline)."""
    version: str | None
    built: int
    keys: list[str]
    labels: list[str]
    specificity: np.ndarray
    """Each concept's idf in the corpus: how much naming it says about where to look."""
    links: list[list[tuple[int, float]]]
    evidence: list[list[tuple[int, float]]]
    passages: list[tuple[str, int | None, str | None]]
    """``(id, rowid, text)``: a chunk of the index has a rowid, an inline passage its text."""

    def index(self) -> dict[str, int]:
        return {key: i for i, key in enumerate(self.keys)}


class KnowledgeMemory:
    """Build and recall memories; ``live_view`` gives the engine's concept graph at its latest
    version, with that version's ``indexVersion`` token."""

    def __init__(self, tables: SideTables, extractor: ConceptExtractor,
                 live_view: Callable[[], tuple[GraphView, str]], *,
                 concepts: int = CONCEPTS, max_inline_bytes: int = MEMORY_MAX_INLINE_BYTES,
                 retention_seconds: float = MEMORY_RETENTION_SECONDS,
                 max_count: int = MEMORY_MAX_COUNT, clock: Callable[[], float] = time.time) -> None:
        self._tables = tables
        self._lock = threading.Lock()
        self._extractor = extractor
        self._live_view = live_view
        self._concepts = concepts
        self.max_inline_bytes = max_inline_bytes
        self._retention_seconds = retention_seconds
        self._max_count = max_count
        self._clock = clock
        self._cache: OrderedDict[str, _Memory] = OrderedDict()

    @classmethod
    def open(cls, data_dir: Path, store: SideTableHost, extractor: ConceptExtractor,
             live_view: Callable[[], tuple[GraphView, str]], **options: Any) -> KnowledgeMemory:
        """The memories kept beside ``store`` (see the module docstring); ``options`` are
        the constructor's keywords."""
        tables = open_side_tables(store, Path(data_dir) / MEMORY_FILE, _SQLITE_SCHEMA,
                                  _POSTGRES_SCHEMA)
        return cls(tables, extractor, live_view, **options)

    def close(self) -> None:
        self._tables.close()

    # ── build ──────────────────────────────────────────────────────────────
    def build(self, documents: Sequence[tuple[str | None, str]] | None, *,
              memory_id: str | None, scope: str | None, caller: str) -> tuple[str, int]:
        """Create (``memory_id`` None) or update a memory; returns its id and size in
        tokens. ``documents`` are ``(id, text)`` pairs; None builds over the live index."""
        if memory_id is None:
            memory_id = "mem-" + secrets.token_hex(8)
            scope = scope or "global"
            source = "index" if documents is None else "documents"
            kept: dict[str, str] = {}
        else:
            existing = self._find(memory_id, caller)
            if scope is not None and scope != existing.scope:
                raise MemoryConflict(f"memory {memory_id} has scope {existing.scope!r}",
                                     field="scope")
            if documents is not None and existing.source == "index":
                raise MemoryConflict("this memory is built over the live index: update it "
                                     "without documents", field="documents")
            scope, source = existing.scope, existing.source
            kept = self._documents(memory_id)
        if source == "index":
            view, version = self._live_view()
            passages: list[tuple[str, int | None, str | None]] = [
                (hit_id, int(rowid), None) for hit_id, rowid in zip(view.hit_ids,
                                                                     view.rowids.tolist(),
                                                                     strict=True)]
        else:
            for doc_id, text in documents or []:
                kept[doc_id if doc_id is not None else f"doc-{len(kept)}"] = text
            self._check_inline_size(kept)
            view, passages = self._inline_view(kept)
            version = None
        built = int(self._clock())
        memory = _distil(memory_id, scope, caller if scope == "session" else None, source,
                         version, built, view, passages, self._concepts)
        tokens = sum(count_tokens(label) for label in memory.labels) + sum(
            count_tokens(text) for _, _, text in memory.passages if text)
        with self._tables.transaction() as db:
            db.execute("DELETE FROM memories WHERE id = ?", (memory.id,))
            db.execute("INSERT INTO memories (id, scope, owner, source, version, tokens, built, "
                       "body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (memory.id, memory.scope, memory.owner, memory.source, memory.version,
                        tokens, built, json.dumps(_body(memory), separators=(",", ":"))))
            db.execute("DELETE FROM memory_documents WHERE memory = ?", (memory_id,))
            db.execute_many("INSERT INTO memory_documents (memory, doc_id, text) "
                            "VALUES (?, ?, ?)",
                            [(memory_id, doc_id, text) for doc_id, text in kept.items()])
            self._prune(db, built)
        with self._lock:
            self._cache.pop(memory_id, None)
        return memory_id, tokens

    def _check_inline_size(self, documents: Mapping[str, str]) -> None:
        total = sum(len(text.encode("utf-8", "surrogatepass")) for text in documents.values())
        if total > self.max_inline_bytes:
            raise InvalidInput(f"the memory's inline documents would total {total} bytes, "
                               f"at most {self.max_inline_bytes}", field="documents")

    def _prune(self, db: SideTables, now: int) -> None:
        """The retention: memories built ``retention_seconds`` ago go, then all but the
        ``max_count`` most recently built, with their documents."""
        db.execute("DELETE FROM memories WHERE built < ?", (self._expired_before(now),))
        db.execute("DELETE FROM memories WHERE id NOT IN (SELECT id FROM memories "
                   f"ORDER BY built DESC, {self._tables.ordinal} DESC LIMIT ?)",
                   (self._max_count,))
        db.execute("DELETE FROM memory_documents WHERE memory NOT IN (SELECT id FROM memories)")

    def _expired_before(self, now: float) -> int:
        return int(now - self._retention_seconds)

    # ── the operator's (§7.17 has no delete) ───────────────────────────────
    def summaries(self) -> list[MemorySummary]:
        """Every memory not expired, most recently built first."""
        rows = self._tables.read(
            "SELECT id, scope, owner, source, tokens, built FROM memories WHERE built >= ? "
            f"ORDER BY built DESC, {self._tables.ordinal} DESC",
            (self._expired_before(self._clock()),))
        return [MemorySummary(str(i), str(scope), owner, str(source), int(tokens), int(built))
                for i, scope, owner, source, tokens, built in rows]

    def delete(self, memory_ids: Sequence[str]) -> int:
        """Delete memories by id, whatever their scope; returns how many existed."""
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return 0
        marks = ", ".join("?" * len(ids))
        existing = len(self._tables.read(f"SELECT id FROM memories WHERE id IN ({marks})", ids))
        with self._tables.transaction() as db:
            db.execute(f"DELETE FROM memories WHERE id IN ({marks})", ids)
            db.execute(f"DELETE FROM memory_documents WHERE memory IN ({marks})", ids)
        with self._lock:
            for memory_id in ids:
                self._cache.pop(memory_id, None)
        return existing

    def _inline_view(self, documents: Mapping[str, str]
                     ) -> tuple[GraphView, list[tuple[str, int | None, str | None]]]:
        vocabulary = Vocabulary()
        ids: dict[str, int] = {}
        passages: list[tuple[str, int | None, str | None]] = []
        mentions = []
        for doc_id, text in documents.items():
            for chunk in chunk_text(text):
                checkpoint()  # extraction is the costly step: stop when the caller did
                concepts = self._extractor.extract(chunk.text)
                fresh = [(ids.setdefault(c.key, len(ids)), c.key, c.label) for c in concepts
                         if c.key not in vocabulary.ids]
                vocabulary.add(fresh)
                mentions.append((np.array([ids[c.key] for c in concepts], dtype=np.int64),
                                 np.array([c.count for c in concepts], dtype=np.float64)))
                passages.append((f"{doc_id}#{chunk.index}", None, chunk.text))
        view = GraphView(0, list(range(len(passages))), [p[0] for p in passages], mentions,
                         vocabulary)
        return view, passages

    # ── recall ─────────────────────────────────────────────────────────────
    def recall(self, query: str, *, memory_id: str | None, caller: str, n: int) -> Recall:
        """Up to ``n`` clues and the draft passages for ``query``; without ``memory_id`` the
        caller's latest memory (its own session memory first, then a global one)."""
        memory = self._find(memory_id, caller) if memory_id else self._latest(caller)
        index = memory.index()
        activation = np.zeros(len(memory.keys))
        asked: set[str] = set()
        for concept in self._extractor.extract(query):
            asked.update(concept.key.split())
            found = index.get(concept.key)
            if found is not None:
                activation[found] += concept.count * memory.specificity[found]
        anchors = [int(i) for i in np.argsort(-activation, kind="stable") if activation[i] > 0]
        spread = activation.copy()
        for anchor in anchors:
            for associate, weight in memory.links[anchor]:
                spread[associate] += _SPREAD * weight * activation[anchor]
        clues = _clues(memory, anchors, activation, spread, asked, n)
        return Recall(memory.id, memory.version, clues, _drafts(memory, spread))

    # ── storage ────────────────────────────────────────────────────────────
    def _find(self, memory_id: str, caller: str) -> _Memory:
        """The memory, unless it is another caller's, expired, or deleted (by any process:
        a cached body is used only while its row still says the same build)."""
        built = self._tables.read("SELECT built, version FROM memories WHERE id = ?",
                                  (memory_id,))
        if not built or int(built[0][0]) < self._expired_before(self._clock()):
            raise UnknownMemory(f"unknown memoryId {memory_id!r}")
        with self._lock:
            memory = self._cache.get(memory_id)
            # Seconds alone miss a rebuild within the second (a watcher's, after a write):
            # a memory of the index is rebuilt at a new version.
            if memory is None or (memory.built, memory.version) != (int(built[0][0]),
                                                                    built[0][1]):
                rows = self._tables.read(
                    "SELECT id, scope, owner, source, version, built, body FROM memories "
                    "WHERE id = ?", (memory_id,))
                if not rows:
                    raise UnknownMemory(f"unknown memoryId {memory_id!r}")
                memory = _load(*rows[0])
                self._cache[memory_id] = memory
                while len(self._cache) > _CACHED:
                    self._cache.popitem(last=False)
            self._cache.move_to_end(memory_id)
        if memory.owner is not None and memory.owner != caller:
            raise UnknownMemory(f"unknown memoryId {memory_id!r}")
        return memory

    def _latest(self, caller: str) -> _Memory:
        rows = self._tables.read(
            "SELECT id FROM memories WHERE (owner = ? OR owner IS NULL) AND built >= ? "
            f"ORDER BY owner IS NULL, built DESC, {self._tables.ordinal} DESC LIMIT 1",
            (caller, self._expired_before(self._clock())))
        if not rows:
            raise UnknownMemory("no memory has been built yet")
        return self._find(str(rows[0][0]), caller)

    def _documents(self, memory_id: str) -> dict[str, str]:
        rows = self._tables.read("SELECT doc_id, text FROM memory_documents "
                                 f"WHERE memory = ? ORDER BY {self._tables.ordinal}",
                                 (memory_id,))
        return {str(doc_id): str(text) for doc_id, text in rows}


def _distil(memory_id: str, scope: str, owner: str | None, source: str, version: str | None,
            built: int, view: GraphView,
            passages: Sequence[tuple[str, int | None, str | None]], concepts: int) -> _Memory:
    """The ``concepts`` most salient concepts of ``view`` with their strongest associates
    and best evidence; only the passages some kept concept cites are stored."""
    salience_all = np.asarray(view.tfidf.sum(axis=0), dtype=np.float64).ravel()
    order = np.lexsort((np.arange(len(salience_all)), -salience_all))[:concepts]
    kept = {int(column): i for i, column in enumerate(order)}
    association = view.association.tocsr()
    by_concept = view.tfidf.tocsc()
    links: list[list[tuple[int, float]]] = []
    evidence: list[list[tuple[int, float]]] = []
    cited: dict[int, int] = {}
    for column in order.tolist():
        checkpoint()
        start, end = association.indptr[column], association.indptr[column + 1]
        pairs = [(kept[c], float(w)) for c, w in zip(association.indices[start:end].tolist(),
                                                      association.data[start:end].tolist(),
                                                      strict=True) if c in kept]
        links.append(sorted(pairs, key=lambda p: (-p[1], p[0]))[:_LINKS])
        start, end = by_concept.indptr[column], by_concept.indptr[column + 1]
        rows = sorted(zip(by_concept.indices[start:end].tolist(),
                          by_concept.data[start:end].tolist(), strict=True),
                      key=lambda p: (-p[1], p[0]))[:_EVIDENCE]
        evidence.append([(cited.setdefault(row, len(cited)), float(w)) for row, w in rows])
    stored = [passages[row] for row, _ in sorted(cited.items(), key=lambda item: item[1])]
    return _Memory(memory_id, scope, owner, source, version, built,
                   [view.keys[c] for c in order.tolist()],
                   [view.labels[c] for c in order.tolist()], view.idf[order], links,
                   evidence, stored)


def _clues(memory: _Memory, anchors: Sequence[int], activation: np.ndarray,
           spread: np.ndarray, asked: set[str], n: int) -> list[Clue]:
    """One clue per entry concept, the query's own concepts first, then the strongest
    associates reached; returned by weight (activation after spreading), strongest first.
    An entry whose words earlier entries already cover is skipped, and each clue expands
    with associates no earlier clue used, so that the clues steer retrieval to different
    places."""
    reached = [int(i) for i in np.argsort(-spread, kind="stable")
               if spread[i] > 0 and activation[i] == 0]
    entries: list[int] = []
    covered: set[str] = set()
    for candidate in [*anchors, *reached]:
        words = set(memory.keys[candidate].split())
        if words <= covered:
            continue
        entries.append(candidate)
        covered |= words
        if len(entries) == n:
            break
    if not entries:
        return []
    top = max(float(spread[entry]) for entry in entries)
    spent: set[str] = set()
    clues = []
    for entry in entries:
        associates = [a for a, _ in memory.links[entry]
                      if not set(memory.keys[a].split()) <= asked]
        fresh = distinct_labels((memory.labels[a] for a in associates), 2,
                                taken=[*memory.labels[entry].split(), *spent])
        spent.update(word for label in fresh for word in label.split())
        named = [entry, *(a for a in associates if memory.labels[a] in fresh)]
        seeds = [CONCEPT_PREFIX + memory.keys[c] for c in named]
        if memory.source == "index":
            seeds += [memory.passages[p][0] for p, _ in memory.evidence[entry][:2]]
        terms = " ".join([memory.labels[entry], *fresh]).split()
        clues.append(Clue(" ".join(dict.fromkeys(terms)), seeds,
                          round(float(spread[entry]) / top, 6)))
    return sorted(clues, key=lambda clue: -clue.weight)


def _drafts(memory: _Memory, spread: np.ndarray) -> list[DraftPassage]:
    scores: dict[int, float] = {}
    for concept in np.flatnonzero(spread).tolist():
        for passage, weight in memory.evidence[concept]:
            scores[passage] = scores.get(passage, 0.0) + float(spread[concept]) * weight
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:_DRAFTS]
    return [DraftPassage(memory.passages[p][0], score, memory.passages[p][1],
                         memory.passages[p][2]) for p, score in ranked]


def _body(memory: _Memory) -> dict[str, Any]:
    return {"keys": memory.keys, "labels": memory.labels,
            "specificity": memory.specificity.round(6).tolist(), "links": memory.links,
            "evidence": memory.evidence, "passages": memory.passages}


def _load(memory_id: str, scope: str, owner: str | None, source: str, version: str | None,
          built: int, body: str) -> _Memory:
    data = json.loads(body)
    return _Memory(memory_id, scope, owner, source, version, int(built), data["keys"],
                   data["labels"],
                   np.asarray(data["specificity"], dtype=np.float64),
                   [[(int(c), float(w)) for c, w in links] for links in data["links"]],
                   [[(int(p), float(w)) for p, w in ev] for ev in data["evidence"]],
                   [(str(i), None if r is None else int(r), t) for i, r, t in data["passages"]])
