"""``memory/build`` and ``memory/recall`` (§7.17)."""

from __future__ import annotations

from .base import (
    MessageStruct,
    NonNegativeInt,
    PositiveInt,
    WireStruct,
)
from .common import Hit, IndexDocument

__all__ = [
    "Clue",
    "MemoryBuildParams",
    "MemoryBuildResult",
    "MemoryRecallParams",
    "MemoryRecallResult",
]


class MemoryBuildParams(MessageStruct, frozen=True, kw_only=True):
    """§7.17: without ``documents`` the memory is built over the live index."""

    documents: list[IndexDocument] | None = None
    memory_id: str | None = None
    scope: str | None = None


class MemoryBuildResult(MessageStruct, frozen=True, kw_only=True):
    memory_id: str
    tokens: NonNegativeInt | None = None


class MemoryRecallParams(MessageStruct, frozen=True, kw_only=True):
    query: str
    memory_id: str | None = None
    session_id: str | None = None
    n: PositiveInt | None = None


class Clue(WireStruct, frozen=True, kw_only=True):
    query: str | None = None
    seed_ids: list[str] | None = None
    weight: float | None = None


class MemoryRecallResult(MessageStruct, frozen=True, kw_only=True):
    clues: list[Clue]
    hits: list[Hit] | None = None
