"""``query/transform`` (§7.8)."""

from __future__ import annotations

from .base import (
    MessageStruct,
    PositiveInt,
)

__all__ = ["TransformParams", "TransformResult"]


class TransformParams(MessageStruct, frozen=True, kw_only=True):
    """§7.8."""

    query: str
    method: str
    n: PositiveInt | None = None


class TransformResult(MessageStruct, frozen=True, kw_only=True):
    queries: list[str]
    hypothetical: str | None = None
