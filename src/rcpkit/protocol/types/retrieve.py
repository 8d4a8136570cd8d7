"""``retrieve`` (§7.7) and its §3.3 funnel."""

from __future__ import annotations

from msgspec import field

from ..errors import InvalidParams
from .base import (
    FiniteFloat,
    FreeForm,
    Int53,
    MessageStruct,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Query,
    UnitFloat,
    WireStruct,
)
from .common import Hit, Usage

__all__ = [
    "FusionOptions",
    "MmrOptions",
    "Recency",
    "RerankOptions",
    "RetrieveParams",
    "RetrieveResult",
    "check_funnel",
]


class FusionOptions(WireStruct, frozen=True, kw_only=True):
    """``retrieve.fusion`` (§7.7, §16.3)."""

    method: str | None = None
    weights: dict[str, FiniteFloat] | None = None
    rrf_k: NonNegativeInt | None = None
    alpha: UnitFloat | None = None


class RerankOptions(WireStruct, frozen=True, kw_only=True):
    """``retrieve.rerank`` when given as an object (§7.7)."""

    method: str | None = None
    model: str | None = None
    top_n: PositiveInt | None = None


class MmrOptions(WireStruct, frozen=True, kw_only=True):
    """``retrieve.mmr``: 0 = most diverse, 1 = pure relevance."""

    lambda_: UnitFloat | None = field(name="lambda", default=None)


class Recency(WireStruct, frozen=True, kw_only=True):
    field: str | None = None
    half_life_days: PositiveFloat | None = None


class RetrieveParams(MessageStruct, frozen=True, kw_only=True):
    """§7.7, every option. ``rerank``/``rewrite`` take ``false`` to switch a stage off.

    ``filter`` stays raw here; gating validates it against the advertised
    fields/operators (§8). ``encoding`` selects the ``hit.vector`` encoding.
    """

    query: Query
    k: PositiveInt
    mode: str | None = None
    modality: str | None = None
    candidate_k: PositiveInt | None = None
    fusion: FusionOptions | None = None
    rerank: RerankOptions | bool | None = None
    mmr: MmrOptions | None = None
    rewrite: str | bool | None = None
    filter: FreeForm | None = None
    min_score: FiniteFloat | None = None
    recency: Recency | None = None
    unit: str | None = None
    level: NonNegativeInt | None = None
    token_budget: PositiveInt | None = None
    session_id: str | None = None
    include_text: bool = True
    include_vectors: bool = False
    seed: Int53 | None = None
    index_version: str | None = None
    strict: bool = True
    cursor: str | None = None
    encoding: str | None = None

    def __post_init__(self) -> None:
        # Raised as InvalidParams directly: msgspec would report the root path.
        if self.rerank is True:
            raise InvalidParams("invalid params: `rerank` is an object or false",
                                field="rerank")
        if self.rewrite is True:
            raise InvalidParams("invalid params: `rewrite` is a method name or false",
                                field="rewrite")

    @property
    def rerank_options(self) -> RerankOptions | None:
        """The requested rerank stage, or None when absent or switched off."""
        return self.rerank if isinstance(self.rerank, RerankOptions) else None

    @property
    def rewrite_method(self) -> str | None:
        """The requested rewrite method, or None when absent or switched off."""
        return self.rewrite if isinstance(self.rewrite, str) else None


class RetrieveResult(MessageStruct, frozen=True, kw_only=True):
    hits: list[Hit]
    next_cursor: str | None = None
    index_version: str | None = None
    usage: Usage | None = None
    rewritten_query: str | None = None


def check_funnel(params: RetrieveParams) -> None:
    """§3.3 funnel ``candidateK ≥ rerank.topN ≥ k`` over the values actually given.

    Clamping to ``maxK``/``maxCandidates`` is the server's job, never an error.
    """
    top_n = params.rerank_options.top_n if params.rerank_options else None
    candidate_k = params.candidate_k
    if candidate_k is not None and candidate_k < params.k:
        raise InvalidParams("candidateK must be >= k (§3.3 funnel)", field="candidateK")
    if top_n is not None and top_n < params.k:
        raise InvalidParams("rerank.topN must be >= k (§3.3 funnel)", field="rerank.topN")
    if candidate_k is not None and top_n is not None and candidate_k < top_n:
        raise InvalidParams("candidateK must be >= rerank.topN (§3.3 funnel)",
                            field="candidateK")
