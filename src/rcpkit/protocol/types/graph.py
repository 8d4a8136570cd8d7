"""``graph`` (§7.9).

The result allows keys beyond the spec's (§4.6 forward compatibility; the schema's
``GraphResult`` objects are open). The ones rcpkit sends are typed here too, each
listed after the spec's fields under an "rcpkit extension" comment so the two never
mix; they keep their unprefixed names, which clients already read.
"""

from __future__ import annotations

from .base import (
    Id,
    MessageStruct,
    NonNegativeInt,
    PositiveInt,
    WireStruct,
)
from .common import Hit, Usage

__all__ = ["Community", "GraphEdge", "GraphNode", "GraphParams", "GraphResult"]


class GraphParams(MessageStruct, frozen=True, kw_only=True):
    """§7.9; ``cursor`` pages ``communities`` (§10); ``indexVersion`` pins the snapshot
    whose graph answers, as in ``retrieve`` (§7.7.1)."""

    op: str
    query: str | None = None
    k: PositiveInt | None = None
    seed_ids: list[str] | None = None
    hops: PositiveInt | None = None
    level: NonNegativeInt | None = None
    session_id: str | None = None
    cursor: str | None = None
    index_version: str | None = None


class Community(WireStruct, frozen=True, kw_only=True):
    id: Id
    summary: str | None = None
    score: float | None = None
    level: NonNegativeInt | None = None
    # rcpkit extension: member count, central concept labels, ids of quoted chunks.
    size: NonNegativeInt | None = None
    concepts: list[str] | None = None
    chunks: list[str] | None = None


class GraphNode(WireStruct, frozen=True, kw_only=True):
    id: Id
    score: float | None = None
    # rcpkit extension: ``"chunk"`` or ``"concept"``, and a concept's display label.
    kind: str | None = None
    label: str | None = None


class GraphEdge(WireStruct, frozen=True, kw_only=True):
    src: Id
    dst: Id
    weight: float | None = None


class GraphResult(MessageStruct, frozen=True, kw_only=True):
    """§7.9: the fields present depend on ``op``."""

    hits: list[Hit] | None = None
    followups: list[str] | None = None
    summary: str | None = None
    communities: list[Community] | None = None
    nodes: list[GraphNode] | None = None
    edges: list[GraphEdge] | None = None
    next_cursor: str | None = None
    usage: Usage | None = None
    # rcpkit extension: ``neighbors`` seeds that are no node of the graph.
    unknown_seed_ids: list[str] | None = None
