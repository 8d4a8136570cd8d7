"""Engine-level values (snake_case, protocol-independent) exchanged with the Engine.

A binding maps its params onto these and these onto its replies (the RCP binding:
:mod:`rcpkit.binding.convert`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from rcpkit.engine.timing import Stage

__all__ = [
    "TRUST_LEVELS",
    "WRITE_STAMP",
    "AddResult",
    "Citation",
    "DeleteResult",
    "DocumentIn",
    "EngineDescription",
    "FeedbackSignal",
    "Hit",
    "Recency",
    "RerankOptions",
    "SearchRequest",
    "SearchResult",
    "Usage",
    "less_trusted",
]

TRUST_LEVELS = ("trusted", "community", "untrusted")
"""§7.7 ``trust.level`` values, most trusted first; a document without one is ``untrusted``
(§15.2)."""


def less_trusted(level: str, other: str) -> str:
    """The lower of two :data:`TRUST_LEVELS`."""
    return max(level, other, key=TRUST_LEVELS.index)

WRITE_STAMP = ("written_by", "written_at")
"""Metadata a server stamps on each write (who, when: §15.3 provenance). Not content: a
re-add of an unchanged document stays unchanged, and keeps the stamp of its first write."""


@dataclass(frozen=True, slots=True)
class DocumentIn:
    """One ``index/add`` document (§7.10); ``id`` absent ⇒ minted, present ⇒ upsert."""

    text: str
    id: str | None = None
    meta: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AddResult:
    """``ids`` are positional with the input (§7.10); ``chunks`` counts their chunks;
    ``outcomes`` says, positionally, whether each document was ``added``, ``updated`` or
    ``unchanged`` by this call (a report, not part of the result's identity; empty for a
    replayed idempotent write)."""

    ids: list[str]
    chunks: int
    index_version: str
    outcomes: tuple[str, ...] = field(default=(), compare=False)
    stage_seconds: tuple[Stage, ...] = field(default=(), compare=False)
    """The write's timed stages: ``queue`` (the write lock), ``prepare``, ``embed``,
    ``commit``, ``publish`` (a report, like ``outcomes``)."""


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """``deleted`` counts only documents this call removed (§7.11)."""

    deleted: int
    index_version: str


@dataclass(frozen=True, slots=True)
class RerankOptions:
    """§7.7 ``rerank``: a method the engine advertises and the funnel's ``topN``."""

    method: str
    top_n: int | None = None


@dataclass(frozen=True, slots=True)
class Recency:
    """§7.7 ``recency``: a half-life decay on a ``date`` field, blended with relevance."""

    field: str
    half_life_days: float


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """§7.7 ``retrieve`` params. ``filter`` is a wire §8 tree or an already validated one.

    Paging (§10) walks the ranking of the first page's snapshot, so at most ``candidate_k``
    hits are reachable; session dedup (§7.7.3) filters first pages only, since a cursor
    already guarantees each hit once. ``token_budget`` stops before the first hit that would
    exceed it (§7.7.2). ``caller`` scopes the ``session_id`` dedup state and the cursors to
    whoever asks (the transport's session or principal), so callers cannot see or poison
    each other's.
    """

    query: str
    k: int = 10
    mode: str = "hybrid"
    candidate_k: int | None = None
    fusion: str | None = None
    """§7.7 ``fusion.method``; None: the engine's default (``[retrieve] fusion``)."""
    rrf_k: int = 60
    weights: Mapping[str, float] | None = None
    alpha: float | None = None
    rerank: RerankOptions | None = None
    mmr_lambda: float | None = None
    filter: Any = None
    filter_validated: bool = False
    """``filter`` is a tree already validated against this engine's schema (by the caller's
    gating), so the engine does not again."""
    min_score: float | None = None
    recency: Recency | None = None
    unit: str = "chunk"
    token_budget: int | None = None
    session_id: str | None = None
    include_text: bool = True
    include_vectors: bool = False
    seed: int | None = None
    index_version: str | None = None
    cursor: str | None = None
    caller: str | None = None


class Citation(msgspec.Struct, frozen=True):
    """§7.7 ``citation``: where a hit comes from; offsets are character offsets in the document,
    ``page`` the 1-based page of a paged source (a PDF's page). A frozen ``msgspec`` struct,
    like :class:`Hit`: made for every hit of every request, in a tenth of a frozen
    dataclass's time."""

    source: str
    uri: str | None = None
    title: str | None = None
    start: int | None = None
    end: int | None = None
    page: int | None = None


class Hit(msgspec.Struct, frozen=True):
    """One ranked result. ``id`` is ``"doc#index"`` for chunks and ``"doc"`` for documents.

    ``confidence`` (§7.7.2) is the cosine of the query and chunk embeddings clipped to
    [0, 1]: independent of mode, fusion and rerank, so it is comparable across calls. A
    frozen ``msgspec`` struct (``msgspec.structs.replace`` makes a changed copy): one is
    made per hit on every request, which as a frozen dataclass cost ~5 µs.
    """

    id: str
    score: float
    unit: str
    doc_id: str
    chunk_index: int
    confidence: float | None = None
    text: str | None = None
    meta: Mapping[str, Any] = msgspec.field(default_factory=dict)
    vector: Sequence[float] | None = None
    scores: Mapping[str, float] = msgspec.field(default_factory=dict)
    citation: Citation | None = None
    trust_level: str = "untrusted"
    context: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    """§7.7 ``usage``: effective funnel sizes, packed tokens and notes."""

    candidates: int
    reranked: int
    k: int
    latency_ms: float
    tokens: int | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SearchResult:
    """§7.7 result: hits, the snapshot served, an optional next-page cursor (§10)."""

    hits: list[Hit]
    index_version: str
    usage: Usage
    next_cursor: str | None = None
    stage_seconds: tuple[Stage, ...] = ()
    """Each timed pipeline stage, in order (operators' latency metrics and trace spans)."""


@dataclass(frozen=True, slots=True)
class FeedbackSignal:
    """One §7.16 signal; every field is untrusted advice (§15.2)."""

    hit_id: str
    used: bool | None = None
    cited: bool | None = None
    helpful: bool | None = None
    reward: float | None = None
    poison_suspected: bool | None = None
    injection_suspected: bool | None = None


@dataclass(frozen=True, slots=True)
class EngineDescription:
    """What this engine can honestly advertise (§6.1, §8, §7.3)."""

    modes: tuple[str, ...]
    default_mode: str
    fusion_methods: tuple[str, ...]
    rerank_methods: tuple[str, ...]
    units: tuple[str, ...]
    filter_fields: Mapping[str, str]
    filter_operators: tuple[str, ...]
    max_k: int
    default_candidate_k: int
    max_batch_inputs: int
    max_documents_per_add: int
    max_text_bytes: int
    embed_identity: str
    embed_dimension: int
    session_ttl_seconds: int
    default_fusion: str = "rrf"
    read_only: bool = False
    """Writes (§7.10, §7.11) are not offered."""
    mmr: bool = True
    token_budget: bool = True
    confidence: bool = True
    snapshots: bool = True
    deterministic: bool = True
    pagination: bool = True
    chunking: bool = True
    contextual: bool = True
