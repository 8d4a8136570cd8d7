"""Typed capability metadata (§6, §6.1) and a lossless container.

Presence ⇒ supported: a capability key that is present (its value an object,
possibly ``{}``) means the feature is offered. :class:`Capabilities` keeps the
wire dict as received — unknown keys, ``x-`` keys and unknown fields inside
known capabilities all survive a round trip — and offers typed, tolerant views
of the known ones: a field of the wrong type reads as absent, never raises.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Generic, TypeVar, cast

import msgspec

__all__ = [
    "CAPABILITY_TYPES",
    "Capabilities",
    "CatalogCap",
    "CitationsCap",
    "EmbedCap",
    "FeedbackCap",
    "FilterCap",
    "GraphCap",
    "IndexCap",
    "LogCap",
    "MemoryCap",
    "MultiVectorCap",
    "PaginationCap",
    "RerankCap",
    "RetrieveCap",
    "SessionCap",
    "SparseEmbedCap",
    "StreamingCap",
    "TransformCap",
]


class _Cap(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Base of capability metadata objects (§6)."""


class EmbedCap(_Cap, frozen=True, kw_only=True):
    """``embed`` (§6, §7.3, §7.3.1); ``json`` is always an accepted encoding."""

    dimension: int | None = None
    identity: str | None = None
    batch_limit: int | None = None
    normalized: bool | None = None
    modalities: list[str] | None = None
    encodings: list[str] | None = None


class SparseEmbedCap(_Cap, frozen=True, kw_only=True):
    identity: str | None = None
    vocabulary: int | None = None


class MultiVectorCap(_Cap, frozen=True, kw_only=True):
    dimension: int | None = None
    identity: str | None = None
    similarity: str | None = None
    modalities: list[str] | None = None
    encodings: list[str] | None = None


class RerankCap(_Cap, frozen=True, kw_only=True):
    methods: list[str] | None = None
    max_candidates: int | None = None
    models: list[str] | None = None


class RetrieveCap(_Cap, frozen=True, kw_only=True):
    """``retrieve`` (§6.1)."""

    max_k: int | None = None
    modes: list[str] | None = None
    fusion: list[str] | None = None
    mmr: bool | None = None
    rerank_builtin: bool | None = None
    units: list[str] | None = None
    levels: int | None = None
    token_budget: bool | None = None
    confidence: bool | None = None
    score_scale: str | None = None
    score_floor: float | None = None
    default_mode: str | None = None
    deterministic: bool | None = None
    snapshots: bool | None = None
    modalities: list[str] | None = None


class TransformCap(_Cap, frozen=True, kw_only=True):
    methods: list[str] | None = None


class GraphCap(_Cap, frozen=True, kw_only=True):
    ops: list[str] | None = None


class IndexCap(_Cap, frozen=True, kw_only=True):
    """``index``: ``index/add`` needs ``writable: true`` (absent reads as false)."""

    writable: bool | None = None
    chunking: bool | None = None
    contextual: bool | None = None


class SessionCap(_Cap, frozen=True, kw_only=True):
    dedup: bool | None = None
    ttl_seconds: int | None = None


class FeedbackCap(_Cap, frozen=True, kw_only=True):
    pass


class MemoryCap(_Cap, frozen=True, kw_only=True):
    scopes: list[str] | None = None
    clues: bool | None = None


class FilterCap(_Cap, frozen=True, kw_only=True):
    """``filter`` (§8): ``fields`` is a list of names or a name → type mapping."""

    fields: list[str] | dict[str, str] | None = None
    operators: list[str] | None = None


class StreamingCap(_Cap, frozen=True, kw_only=True):
    pass


class PaginationCap(_Cap, frozen=True, kw_only=True):
    pass


class CitationsCap(_Cap, frozen=True, kw_only=True):
    pass


class LogCap(_Cap, frozen=True, kw_only=True):
    levels: list[str] | None = None


class CatalogCap(_Cap, frozen=True, kw_only=True):
    engines: int | None = None


CAPABILITY_TYPES: dict[str, type[_Cap]] = {
    "embed": EmbedCap,
    "sparseEmbed": SparseEmbedCap,
    "multiVector": MultiVectorCap,
    "rerank": RerankCap,
    "retrieve": RetrieveCap,
    "transform": TransformCap,
    "graph": GraphCap,
    "index": IndexCap,
    "session": SessionCap,
    "feedback": FeedbackCap,
    "memory": MemoryCap,
    "filter": FilterCap,
    "streaming": StreamingCap,
    "pagination": PaginationCap,
    "citations": CitationsCap,
    "log": LogCap,
    "catalog": CatalogCap,
}

C = TypeVar("C", bound=_Cap)


def _tolerant(typ: type[C], value: Any) -> C:
    """Decode capability metadata, dropping any field whose value has the wrong type."""
    if not isinstance(value, dict):
        return typ()  # e.g. ``"citations": true``: present, no metadata
    try:
        return msgspec.convert(value, typ)
    except msgspec.ValidationError:
        valid: dict[str, Any] = {}
        for info in msgspec.structs.fields(typ):
            if info.encode_name not in value:
                continue
            candidate = {info.encode_name: value[info.encode_name]}
            try:
                msgspec.convert(candidate, typ)
            except msgspec.ValidationError:
                continue
            valid.update(candidate)
        return msgspec.convert(valid, typ)


class _Typed(Generic[C]):
    """Descriptor: ``caps.retrieve`` → the typed view of that key, or None."""

    def __init__(self, key: str, typ: type[C]) -> None:
        self.key = key
        self.typ = typ

    def __get__(self, owner: Capabilities, objtype: type | None = None) -> C | None:
        return cast("C | None", owner.get(self.key))


class Capabilities:
    """A capability set (§6) that round-trips to the wire without loss.

    Build it from the wire (:meth:`from_wire`) or from typed metadata:
    ``Capabilities({"retrieve": RetrieveCap(max_k=100), "x-acme": {...}})``.
    """

    __slots__ = ("_typed_cache", "_wire")

    def __init__(self, caps: Mapping[str, Any] | None = None) -> None:
        self._wire: dict[str, Any] = {
            key: msgspec.to_builtins(value) if isinstance(value, msgspec.Struct)
            else copy.deepcopy(value)
            for key, value in (caps or {}).items()
        }
        self._typed_cache: dict[str, Any] = {}

    @classmethod
    def from_wire(cls, wire: Any) -> Capabilities:
        """Tolerant: a non-object reads as no capabilities; nothing inside ever raises."""
        return cls(wire if isinstance(wire, dict) else None)

    def to_wire(self) -> dict[str, Any]:
        """The wire object, unknown and ``x-`` keys included (a deep copy)."""
        return copy.deepcopy(self._wire)

    def has(self, key: str) -> bool:
        """Presence ⇒ supported (§6); ``null`` and ``false`` read as absent."""
        return self._wire.get(key) not in (None, False)

    def get(self, key: str) -> Any:
        """Typed metadata for a known key, the raw value for any other, None when absent."""
        if not self.has(key):
            return None
        typ = CAPABILITY_TYPES.get(key)
        if typ is None:
            return self._wire[key]
        if key not in self._typed_cache:
            self._typed_cache[key] = _tolerant(typ, self._wire[key])
        return self._typed_cache[key]

    @property
    def extra(self) -> dict[str, Any]:
        """Keys this module does not know (vendor ``x-…`` and future core keys)."""
        return {key: value for key, value in self._wire.items()
                if key not in CAPABILITY_TYPES}

    def keys(self) -> list[str]:
        """The advertised keys."""
        return [key for key in self._wire if self.has(key)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Capabilities) and self._wire == other._wire

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Capabilities({self._wire!r})"

    embed = _Typed("embed", EmbedCap)
    sparse_embed = _Typed("sparseEmbed", SparseEmbedCap)
    multi_vector = _Typed("multiVector", MultiVectorCap)
    rerank = _Typed("rerank", RerankCap)
    retrieve = _Typed("retrieve", RetrieveCap)
    transform = _Typed("transform", TransformCap)
    graph = _Typed("graph", GraphCap)
    index = _Typed("index", IndexCap)
    session = _Typed("session", SessionCap)
    feedback = _Typed("feedback", FeedbackCap)
    memory = _Typed("memory", MemoryCap)
    filter = _Typed("filter", FilterCap)
    streaming = _Typed("streaming", StreamingCap)
    pagination = _Typed("pagination", PaginationCap)
    citations = _Typed("citations", CitationsCap)
    log = _Typed("log", LogCap)
    catalog = _Typed("catalog", CatalogCap)
