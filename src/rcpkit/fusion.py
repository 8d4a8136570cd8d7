"""Rank fusion (§16.3): merge ranked ``(key, score)`` lists into one ranking.

Pure functions, shared by the engine's hybrid mode (§7.7 ``fusion``) and client-side
federation. Each input list is best first; a key repeated inside one list keeps only its first
(best) entry, ranked at its position in that list. Every strategy returns :class:`Fused` items
in the §16.3 total order: higher fused score, then higher summed weight of the lists that
contained the key, then the lexicographically smaller key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Fused", "RankedList", "convex", "rrf", "weighted", "zscore"]

RankedList = Sequence[tuple[str, float]]


@dataclass(frozen=True)
class Fused:
    """One fused item: ``ranks``/``scores`` map a list index to the key's 1-based rank and raw
    score in that list; ``weight`` sums the weights of those lists."""

    key: str
    score: float
    weight: float
    ranks: dict[int, int]
    scores: dict[int, float]


def rrf(
    lists: Sequence[RankedList], weights: Sequence[float] | None = None, *, k: float = 60.0
) -> list[Fused]:
    """Reciprocal Rank Fusion: ``Σ weight / (k + rank)`` over the lists holding the key."""
    if k < 0:
        raise ValueError("the RRF constant k must be >= 0")

    def normaliser(_list_index: int, _scores: list[float]) -> Callable[[int, float], float]:
        return lambda rank, _score: 1.0 / (k + rank)

    return _fuse(lists, weights, normaliser)


def weighted(lists: Sequence[RankedList], weights: Sequence[float] | None = None) -> list[Fused]:
    """Weighted score fusion over per-list min-max normalised scores.

    A list whose scores are all equal (max == min) maps each of its members to 1.0.
    """

    def normaliser(_list_index: int, scores: list[float]) -> Callable[[int, float], float]:
        low, high = min(scores), max(scores)
        if high == low:
            return lambda _rank, _score: 1.0
        return lambda _rank, score: (score - low) / (high - low)

    return _fuse(lists, weights, normaliser)


def convex(
    lists: Sequence[RankedList],
    floors: Sequence[float],
    weights: Sequence[float] | None = None,
) -> list[Fused]:
    """Convex combination (TM2C2): min-max with each list's declared ``scoreFloor`` (§6.1) as
    the minimum, ``(score - floor) / (max - floor)``; a list whose max is not above its floor
    maps its members to 0.0. For two lists the engine passes ``weights=(alpha, 1 - alpha)``."""
    if len(floors) != len(lists):
        raise ValueError("need one floor per list")

    def normaliser(list_index: int, scores: list[float]) -> Callable[[int, float], float]:
        floor, high = floors[list_index], max(scores)
        if high <= floor:
            return lambda _rank, _score: 0.0
        return lambda _rank, score: (score - floor) / (high - floor)

    return _fuse(lists, weights, normaliser)


def zscore(lists: Sequence[RankedList], weights: Sequence[float] | None = None) -> list[Fused]:
    """Weighted score fusion over per-list standardised scores mapped into [0, 1].

    Each score becomes ``Φ((score - mean) / std)`` over its list's candidates (Φ the standard
    normal CDF): the list's spread, not its two extremes, sets the scale, and the contribution
    stays in [0, 1]. A list whose scores are all equal maps each member to 0.5.

    Not a §7.7 ``fusion.method`` the engine offers: it is measured beside the others by
    ``benchmarks/tune_quality.py`` (docs/benchmarks.md), where ``convex`` was chosen.
    """

    def normaliser(_list_index: int, scores: list[float]) -> Callable[[int, float], float]:
        mean = math.fsum(scores) / len(scores)
        spread = math.sqrt(math.fsum((score - mean) ** 2 for score in scores) / len(scores))
        if spread == 0.0:
            return lambda _rank, _score: 0.5
        scale = spread * math.sqrt(2.0)
        return lambda _rank, score: 0.5 * (1.0 + math.erf((score - mean) / scale))

    return _fuse(lists, weights, normaliser)


def _fuse(
    lists: Sequence[RankedList],
    weights: Sequence[float] | None,
    normaliser: Callable[[int, list[float]], Callable[[int, float], float]],
) -> list[Fused]:
    """Sum ``weight · normalise(rank, score)`` per key in list order and sort (§16.3).

    ``normaliser(list_index, scores)`` sees the list's deduplicated raw scores and returns the
    per-item contribution as a function of (1-based rank, raw score).
    """
    if weights is None:
        weights = [1.0] * len(lists)
    elif len(weights) != len(lists):
        raise ValueError("need one weight per list")
    totals: dict[str, float] = {}
    weight_sums: dict[str, float] = {}
    ranks: dict[str, dict[int, int]] = {}
    raw: dict[str, dict[int, float]] = {}
    for list_index, (ranked, weight) in enumerate(zip(lists, weights, strict=True)):
        first: dict[str, tuple[int, float]] = {}
        for rank, (key, score) in enumerate(ranked, start=1):
            first.setdefault(key, (rank, float(score)))
        if not first:
            continue
        normalise = normaliser(list_index, [score for _, score in first.values()])
        for key, (rank, score) in first.items():
            totals[key] = totals.get(key, 0.0) + weight * normalise(rank, score)
            weight_sums[key] = weight_sums.get(key, 0.0) + weight
            ranks.setdefault(key, {})[list_index] = rank
            raw.setdefault(key, {})[list_index] = score
    fused = [Fused(key, totals[key], weight_sums[key], ranks[key], raw[key]) for key in totals]
    fused.sort(key=lambda item: (-item.score, -item.weight, item.key))
    return fused
