"""Wire objects shared by several §7 surfaces: hits and their parts, peers, usage, documents."""

from __future__ import annotations

from ..content import ContentBlock
from .base import (
    FreeForm,
    Id,
    NonNegativeFloat,
    NonNegativeInt,
    UnitFloat,
    WireStruct,
)

__all__ = [
    "ChunkRef",
    "Citation",
    "Hit",
    "IndexDocument",
    "PeerInfo",
    "Provenance",
    "ProvenanceEdge",
    "Trust",
    "Usage",
]


class PeerInfo(WireStruct, frozen=True, kw_only=True):
    """``client``/``server`` identity (§7.1)."""

    name: str
    version: str | None = None


class Usage(WireStruct, frozen=True, kw_only=True):
    """What the pipeline actually did (§7.7, §17.2)."""

    candidates: NonNegativeInt | None = None
    reranked: NonNegativeInt | None = None
    latency_ms: NonNegativeFloat | None = None
    tokens: NonNegativeInt | None = None
    notes: list[str] | None = None


class Citation(WireStruct, frozen=True, kw_only=True):
    source: str | None = None
    uri: str | None = None
    title: str | None = None
    start: NonNegativeInt | None = None
    end: NonNegativeInt | None = None
    page: NonNegativeInt | None = None


class ProvenanceEdge(WireStruct, frozen=True, kw_only=True):
    src: str
    dst: str


class Provenance(WireStruct, frozen=True, kw_only=True):
    """Graph/tree lineage behind a hit (§7.7.2)."""

    path: list[str] | None = None
    nodes: list[str] | None = None
    edges: list[ProvenanceEdge] | None = None
    leaves: list[str] | None = None


class Trust(WireStruct, frozen=True, kw_only=True):
    """Provenance and safety signals (§7.7, §15)."""

    level: str
    score: UnitFloat | None = None
    injection_suspected: bool | None = None
    sanitized: bool | None = None


class ChunkRef(WireStruct, frozen=True, kw_only=True):
    doc_id: str | None = None
    index: NonNegativeInt | None = None
    context: str | None = None


class Hit(WireStruct, frozen=True, kw_only=True):
    """One ranked hit (§7.7). ``vector`` is a list, or a base64 string under ``f32-base64``.

    ``meta`` here is the document metadata (wire ``meta``), not ``_meta``.
    """

    id: Id
    score: float
    confidence: UnitFloat | None = None
    text: str | None = None
    content: list[ContentBlock] | None = None
    modality: str | None = None
    unit: str | None = None
    level: NonNegativeInt | None = None
    meta: FreeForm | None = None
    vector: list[float] | str | None = None
    scores: dict[str, float] | None = None
    citation: Citation | None = None
    provenance: Provenance | None = None
    trust: Trust | None = None
    chunk: ChunkRef | None = None


class IndexDocument(WireStruct, frozen=True, kw_only=True):
    """A document to index (§7.10) or to build a memory over (§7.17)."""

    id: str | None = None
    text: str
    meta: FreeForm | None = None
