"""``rerank`` (§7.6)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from .base import (
    Input,
    MessageStruct,
    NonNegativeInt,
    PositiveInt,
    Query,
    WireStruct,
)
from .common import Usage

__all__ = ["RerankItem", "RerankParams", "RerankResult"]


class RerankParams(MessageStruct, frozen=True, kw_only=True):
    """§7.6; ``documents`` is a synonym of ``passages`` (peers use both)."""

    synonyms: ClassVar[dict[str, str]] = {"documents": "passages"}

    query: Query
    passages: list[Input]
    method: str | None = None
    top_n: PositiveInt | None = None
    model: str | None = None


class RerankItem(WireStruct, frozen=True, kw_only=True):
    index: NonNegativeInt
    score: float


class RerankResult(MessageStruct, frozen=True, kw_only=True):
    """§7.6 ``scores``/``order``, plus the reference-compatible ``results`` best first."""

    scores: list[float]
    order: list[NonNegativeInt] | None = None
    results: list[RerankItem] | None = None
    usage: Usage | None = None

    @classmethod
    def from_scores(cls, scores: Sequence[float], *, top_n: int | None = None) -> RerankResult:
        """Build a consistent result: ``order``/``results`` best first, cut at ``top_n``."""
        values = [float(score) for score in scores]
        order = sorted(range(len(values)), key=lambda i: (-_rank_key(values[i]), i))
        if top_n is not None:
            order = order[:top_n]
        return cls(scores=values, order=order,
                   results=[RerankItem(index=i, score=values[i]) for i in order])


def _rank_key(score: float) -> float:
    """Non-finite scores rank last (they are emitted as the 0.0 sentinel anyway)."""
    return score if math.isfinite(score) else -math.inf
