"""Typed params and results for every §7 method (msgspec Structs).

Server and client share these types, so both sides read and write the same
shapes. Decoding is liberal where the spec allows it and peers differ:

* an explicit JSON ``null`` counts as absent (§4.6), except inside free-form
  objects (``meta``, ``_meta``, ``filter``, ``capabilities``, log ``data``,
  progress ``partial``), which are passed through untouched;
* unknown fields and ``x-`` keys are ignored (§4.6, §6.2);
* synonyms: ``texts`` for ``inputs`` (embed, embed/sparse, embed/multi) and
  ``documents`` for ``passages`` (rerank);
* integers are JSON numbers without a fractional part (§4.6): ``3`` and ``3.0``
  (also ``1e2``) are accepted, ``3.5``, strings and booleans are not; every
  integer must lie within ±(2^53 − 1).

Option *values* (``mode``, ``rerank.method``, ``unit``, ``encoding``…) are typed
as plain strings: whether a value is acceptable depends on what the server
advertised, which is :mod:`rcpkit.protocol.gating`'s job (``-32005``), not a
structural error (``-32602``).

Every decoding failure is ``InvalidParams`` whose ``data.field`` is the dotted
params path (``"rerank.topN"``, ``"documents[2].text"``, §12.1).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, TypeVar

import msgspec
import numpy as np
from msgspec import Meta, field

from .content import ContentBlock
from .errors import InvalidParams, ProtocolViolation

__all__ = [
    "MAX_SAFE_INT",
    "PARAMS",
    "RESULTS",
    "CancelParams",
    "CatalogEngine",
    "CatalogListParams",
    "CatalogListResult",
    "ChunkRef",
    "Citation",
    "Clue",
    "Community",
    "EmbedParams",
    "EmbedResult",
    "Endpoint",
    "FeedbackParams",
    "FeedbackResult",
    "FeedbackSignal",
    "FusionOptions",
    "GraphEdge",
    "GraphNode",
    "GraphParams",
    "GraphResult",
    "Hit",
    "IndexAddParams",
    "IndexAddResult",
    "IndexDeleteParams",
    "IndexDeleteResult",
    "IndexDocument",
    "InfoParams",
    "InitializeParams",
    "InitializeResult",
    "LogParams",
    "MemoryBuildParams",
    "MemoryBuildResult",
    "MemoryRecallParams",
    "MemoryRecallResult",
    "MmrOptions",
    "MultiEmbedParams",
    "MultiEmbedResult",
    "PeerInfo",
    "PingParams",
    "PingResult",
    "ProgressParams",
    "Provenance",
    "ProvenanceEdge",
    "Recency",
    "RerankItem",
    "RerankOptions",
    "RerankParams",
    "RerankResult",
    "RetrieveParams",
    "RetrieveResult",
    "ShutdownParams",
    "ShutdownResult",
    "SparseEmbedParams",
    "SparseEmbedResult",
    "SparseVector",
    "TransformParams",
    "TransformResult",
    "Trust",
    "Usage",
    "check_funnel",
    "convert",
    "decode_params",
    "decode_result",
    "to_builtins",
]

T = TypeVar("T")

MAX_SAFE_INT = 2**53 - 1
_MAX_FLOAT = 1.7976931348623157e308

Int53 = Annotated[int, Meta(ge=-MAX_SAFE_INT, le=MAX_SAFE_INT)]
PositiveInt = Annotated[int, Meta(ge=1, le=MAX_SAFE_INT)]
NonNegativeInt = Annotated[int, Meta(ge=0, le=MAX_SAFE_INT)]
FiniteFloat = Annotated[float, Meta(ge=-_MAX_FLOAT, le=_MAX_FLOAT)]
NonNegativeFloat = Annotated[float, Meta(ge=0.0, le=_MAX_FLOAT)]
PositiveFloat = Annotated[float, Meta(gt=0.0, le=_MAX_FLOAT)]
UnitFloat = Annotated[float, Meta(ge=0.0, le=1.0)]
SignedUnitFloat = Annotated[float, Meta(ge=-1.0, le=1.0)]

Id = str | Int53
Query = str | ContentBlock | list[ContentBlock]
Input = ContentBlock | str
FreeForm = dict[str, Any]


class _Wire(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Base of every nested wire object: camelCase names, None/defaults omitted."""


class _Message(_Wire, frozen=True, kw_only=True):
    """Base of params and results: every one may carry ``_meta`` (§4.4)."""

    meta: FreeForm | None = field(name="_meta", default=None)


# ── shared pieces ────────────────────────────────────────────────────────────

class PeerInfo(_Wire, frozen=True, kw_only=True):
    """``client``/``server`` identity (§7.1)."""

    name: str
    version: str | None = None


class Usage(_Wire, frozen=True, kw_only=True):
    """What the pipeline actually did (§7.7, §17.2)."""

    candidates: NonNegativeInt | None = None
    reranked: NonNegativeInt | None = None
    latency_ms: NonNegativeFloat | None = None
    tokens: NonNegativeInt | None = None
    notes: list[str] | None = None


class Citation(_Wire, frozen=True, kw_only=True):
    source: str | None = None
    uri: str | None = None
    title: str | None = None
    start: NonNegativeInt | None = None
    end: NonNegativeInt | None = None
    page: NonNegativeInt | None = None


class ProvenanceEdge(_Wire, frozen=True, kw_only=True):
    src: str
    dst: str


class Provenance(_Wire, frozen=True, kw_only=True):
    """Graph/tree lineage behind a hit (§7.7.2)."""

    path: list[str] | None = None
    nodes: list[str] | None = None
    edges: list[ProvenanceEdge] | None = None
    leaves: list[str] | None = None


class Trust(_Wire, frozen=True, kw_only=True):
    """Provenance and safety signals (§7.7, §15)."""

    level: str
    score: UnitFloat | None = None
    injection_suspected: bool | None = None
    sanitized: bool | None = None


class ChunkRef(_Wire, frozen=True, kw_only=True):
    doc_id: str | None = None
    index: NonNegativeInt | None = None
    context: str | None = None


class Hit(_Wire, frozen=True, kw_only=True):
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


# ── lifecycle: initialize, info, ping, shutdown ──────────────────────────────

class InitializeParams(_Message, frozen=True, kw_only=True):
    """§7.1. ``capabilities`` stays a wire dict; see :class:`Capabilities`."""

    protocol_version: PositiveInt
    client: PeerInfo | None = None
    capabilities: FreeForm = field(default_factory=dict)


class InitializeResult(_Message, frozen=True, kw_only=True):
    """§7.1 result, also the ``info`` result (§7.2)."""

    protocol_version: PositiveInt
    server: PeerInfo
    capabilities: FreeForm


class InfoParams(_Message, frozen=True, kw_only=True):
    """§7.2: no params."""


class PingParams(_Message, frozen=True, kw_only=True):
    """§7.15: the server echoes ``nonce``."""

    nonce: str | Int53 | FiniteFloat | None = None


class PingResult(_Message, frozen=True, kw_only=True):
    nonce: str | Int53 | FiniteFloat | None = None


class ShutdownParams(_Message, frozen=True, kw_only=True):
    """§7.12: no params."""


class ShutdownResult(_Message, frozen=True, kw_only=True):
    """§7.12: an empty result."""


# ── embed family ─────────────────────────────────────────────────────────────

class EmbedParams(_Message, frozen=True, kw_only=True):
    """§7.3 (``texts`` is a synonym of ``inputs``); ``encoding`` per §7.3.1.

    ``strict`` applies the §7.7 rule to an unadvertised ``encoding``.
    """

    synonyms: ClassVar[dict[str, str]] = {"texts": "inputs"}

    inputs: list[Input]
    kind: str | None = None
    encoding: str | None = None
    strict: bool = True


class EmbedResult(_Message, frozen=True, kw_only=True):
    """§7.3: one vector per input; ``dimension`` required with a binary encoding."""

    vectors: list[list[float] | str]
    encoding: str | None = None
    dimension: PositiveInt | None = None


class SparseEmbedParams(_Message, frozen=True, kw_only=True):
    """§7.4; accepts ``texts`` or ``inputs`` (peers use both)."""

    synonyms: ClassVar[dict[str, str]] = {"texts": "inputs"}

    inputs: list[Input]
    kind: str | None = None


class SparseVector(_Wire, frozen=True, kw_only=True):
    indices: list[NonNegativeInt]
    values: list[FiniteFloat]

    def __post_init__(self) -> None:
        if len(self.indices) != len(self.values):
            raise ValueError("`indices` and `values` must have the same length")


class SparseEmbedResult(_Message, frozen=True, kw_only=True):
    sparse: list[SparseVector]


class MultiEmbedParams(_Message, frozen=True, kw_only=True):
    """§7.5; accepts ``texts`` or ``inputs``; ``encoding`` per §7.3.1."""

    synonyms: ClassVar[dict[str, str]] = {"texts": "inputs"}

    inputs: list[Input]
    kind: str | None = None
    encoding: str | None = None
    strict: bool = True


class MultiEmbedResult(_Message, frozen=True, kw_only=True):
    """§7.5: one matrix per input; each row a list, or a base64 string (§7.3.1)."""

    matrices: list[list[list[float] | str]]
    dimension: PositiveInt | None = None
    encoding: str | None = None


# ── rerank ───────────────────────────────────────────────────────────────────

class RerankParams(_Message, frozen=True, kw_only=True):
    """§7.6; ``documents`` is a synonym of ``passages`` (peers use both)."""

    synonyms: ClassVar[dict[str, str]] = {"documents": "passages"}

    query: Query
    passages: list[Input]
    method: str | None = None
    top_n: PositiveInt | None = None
    model: str | None = None


class RerankItem(_Wire, frozen=True, kw_only=True):
    index: NonNegativeInt
    score: float


class RerankResult(_Message, frozen=True, kw_only=True):
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


# ── retrieve ─────────────────────────────────────────────────────────────────

class FusionOptions(_Wire, frozen=True, kw_only=True):
    """``retrieve.fusion`` (§7.7, §16.3)."""

    method: str | None = None
    weights: dict[str, FiniteFloat] | None = None
    rrf_k: NonNegativeInt | None = None
    alpha: UnitFloat | None = None


class RerankOptions(_Wire, frozen=True, kw_only=True):
    """``retrieve.rerank`` when given as an object (§7.7)."""

    method: str | None = None
    model: str | None = None
    top_n: PositiveInt | None = None


class MmrOptions(_Wire, frozen=True, kw_only=True):
    """``retrieve.mmr``: 0 = most diverse, 1 = pure relevance."""

    lambda_: UnitFloat | None = field(name="lambda", default=None)


class Recency(_Wire, frozen=True, kw_only=True):
    field: str | None = None
    half_life_days: PositiveFloat | None = None


class RetrieveParams(_Message, frozen=True, kw_only=True):
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


class RetrieveResult(_Message, frozen=True, kw_only=True):
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


# ── transform, graph ─────────────────────────────────────────────────────────

class TransformParams(_Message, frozen=True, kw_only=True):
    """§7.8."""

    query: str
    method: str
    n: PositiveInt | None = None


class TransformResult(_Message, frozen=True, kw_only=True):
    queries: list[str]
    hypothetical: str | None = None


class GraphParams(_Message, frozen=True, kw_only=True):
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


class Community(_Wire, frozen=True, kw_only=True):
    id: Id
    summary: str | None = None
    score: float | None = None
    level: NonNegativeInt | None = None


class GraphNode(_Wire, frozen=True, kw_only=True):
    id: Id
    score: float | None = None


class GraphEdge(_Wire, frozen=True, kw_only=True):
    src: Id
    dst: Id
    weight: float | None = None


class GraphResult(_Message, frozen=True, kw_only=True):
    """§7.9: the fields present depend on ``op``."""

    hits: list[Hit] | None = None
    followups: list[str] | None = None
    summary: str | None = None
    communities: list[Community] | None = None
    nodes: list[GraphNode] | None = None
    edges: list[GraphEdge] | None = None
    next_cursor: str | None = None
    usage: Usage | None = None


# ── index, catalog ───────────────────────────────────────────────────────────

class IndexDocument(_Wire, frozen=True, kw_only=True):
    """A document to index (§7.10) or to build a memory over (§7.17)."""

    id: str | None = None
    text: str
    meta: FreeForm | None = None


class IndexAddParams(_Message, frozen=True, kw_only=True):
    """§7.10: ``chunk``/``contextual`` need ``index.chunking``/``index.contextual``."""

    documents: list[IndexDocument]
    chunk: bool = False
    contextual: bool = False


class IndexAddResult(_Message, frozen=True, kw_only=True):
    ids: list[str]
    chunks: NonNegativeInt | None = None


class IndexDeleteParams(_Message, frozen=True, kw_only=True):
    """§7.11."""

    ids: list[str]


class IndexDeleteResult(_Message, frozen=True, kw_only=True):
    deleted: NonNegativeInt


class CatalogListParams(_Message, frozen=True, kw_only=True):
    """§7.13: no params."""


class Endpoint(_Wire, frozen=True, kw_only=True):
    transport: str
    url: str | None = None
    command: list[str] | None = None


class CatalogEngine(_Wire, frozen=True, kw_only=True):
    id: str
    server: PeerInfo
    capabilities: FreeForm
    endpoint: Endpoint | None = None


class CatalogListResult(_Message, frozen=True, kw_only=True):
    engines: list[CatalogEngine]


# ── feedback, memory ─────────────────────────────────────────────────────────

class FeedbackSignal(_Wire, frozen=True, kw_only=True):
    hit_id: Id
    used: bool | None = None
    cited: bool | None = None
    helpful: bool | None = None
    reward: SignedUnitFloat | None = None
    poison_suspected: bool | None = None
    injection_suspected: bool | None = None


class FeedbackParams(_Message, frozen=True, kw_only=True):
    """§7.16."""

    signals: list[FeedbackSignal]
    session_id: str | None = None
    query: str | None = None


class FeedbackResult(_Message, frozen=True, kw_only=True):
    accepted: NonNegativeInt


class MemoryBuildParams(_Message, frozen=True, kw_only=True):
    """§7.17: without ``documents`` the memory is built over the live index."""

    documents: list[IndexDocument] | None = None
    memory_id: str | None = None
    scope: str | None = None


class MemoryBuildResult(_Message, frozen=True, kw_only=True):
    memory_id: str
    tokens: NonNegativeInt | None = None


class MemoryRecallParams(_Message, frozen=True, kw_only=True):
    query: str
    memory_id: str | None = None
    session_id: str | None = None
    n: PositiveInt | None = None


class Clue(_Wire, frozen=True, kw_only=True):
    query: str | None = None
    seed_ids: list[str] | None = None
    weight: float | None = None


class MemoryRecallResult(_Message, frozen=True, kw_only=True):
    clues: list[Clue]
    hits: list[Hit] | None = None


# ── notifications ────────────────────────────────────────────────────────────

class CancelParams(_Message, frozen=True, kw_only=True):
    """§7.14: ``id`` of the request to abandon."""

    id: Id
    reason: str | None = None


class ProgressParams(_Message, frozen=True, kw_only=True):
    """§9: ``progressToken`` is echoed verbatim; ``partial`` stays free-form."""

    progress_token: Id
    progress: UnitFloat | None = None
    stage: str | None = None
    message: str | None = None
    partial: FreeForm | None = None


class LogParams(_Message, frozen=True, kw_only=True):
    """§17.1."""

    level: str
    message: str
    logger: str | None = None
    data: Any = None


PARAMS: dict[str, type] = {
    "initialize": InitializeParams,
    "info": InfoParams,
    "ping": PingParams,
    "shutdown": ShutdownParams,
    "embed": EmbedParams,
    "embed/sparse": SparseEmbedParams,
    "embed/multi": MultiEmbedParams,
    "rerank": RerankParams,
    "retrieve": RetrieveParams,
    "query/transform": TransformParams,
    "graph": GraphParams,
    "index/add": IndexAddParams,
    "index/delete": IndexDeleteParams,
    "catalog/list": CatalogListParams,
    "feedback": FeedbackParams,
    "memory/build": MemoryBuildParams,
    "memory/recall": MemoryRecallParams,
    "notifications/cancel": CancelParams,
    "notifications/progress": ProgressParams,
    "notifications/log": LogParams,
}

RESULTS: dict[str, type] = {
    "initialize": InitializeResult,
    "info": InitializeResult,
    "ping": PingResult,
    "shutdown": ShutdownResult,
    "embed": EmbedResult,
    "embed/sparse": SparseEmbedResult,
    "embed/multi": MultiEmbedResult,
    "rerank": RerankResult,
    "retrieve": RetrieveResult,
    "query/transform": TransformResult,
    "graph": GraphResult,
    "index/add": IndexAddResult,
    "index/delete": IndexDeleteResult,
    "catalog/list": CatalogListResult,
    "feedback": FeedbackResult,
    "memory/build": MemoryBuildResult,
    "memory/recall": MemoryRecallResult,
}


# ── conversion ───────────────────────────────────────────────────────────────

#: Keys whose values are free-form JSON: never rewritten on the way in or out.
_FREE_FORM = frozenset({"_meta", "meta", "filter", "capabilities", "data", "partial"})

_AT_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]+)`")
_MAX_REASON = 160


def _prepare(value: Any) -> Any:
    """Drop ``null`` members (§4.6) and turn integral floats into ints, outside free-form."""
    if isinstance(value, dict):
        return {key: item if key in _FREE_FORM else _prepare(item)
                for key, item in value.items() if item is not None}
    if isinstance(value, list):
        # Numeric arrays (vectors, scores, indices) are homogeneous: leave them to msgspec.
        if value and isinstance(value[0], int | float):
            return value
        return [_prepare(item) for item in value]
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_SAFE_INT:
        return int(value)
    return value


def _join(prefix: str, location: str) -> str:
    """``prefix`` + a msgspec location (``.a[2].b``) → a dotted params path."""
    if not prefix:
        return location.lstrip(".")
    return prefix + location if location else prefix


def _error_location(exc: msgspec.ValidationError, prefix: str) -> tuple[str, str]:
    """(reason, field path) of a msgspec error; a missing field names that field."""
    text = str(exc)
    match = _AT_PATH.search(text)
    # msgspec shows a mapping value as ``[...]``: report the mapping itself.
    location = match.group("path").replace("[...]", "") if match else ""
    reason = text[: match.start()] if match else text
    missing = _MISSING.match(reason)
    if missing:
        location = f"{location}.{missing.group('name')}"
    if len(reason) > _MAX_REASON:
        reason = reason[:_MAX_REASON] + "…"
    return reason, _join(prefix, location)


def convert(obj: Any, typ: type[T], *, path: str = "") -> T:
    """Decode JSON builtins into ``typ``; errors become ``InvalidParams(field=…)``.

    ``path`` prefixes the reported field (e.g. ``"hits[0]"``). A type's
    ``synonyms`` (alias → canonical) fill the canonical field when it is absent.
    """
    prepared = _prepare(obj)
    synonyms: dict[str, str] = getattr(typ, "synonyms", {})
    if synonyms and isinstance(prepared, dict):
        for alias, canonical in synonyms.items():
            if canonical not in prepared and alias in prepared:
                prepared[canonical] = prepared[alias]
    try:
        return msgspec.convert(prepared, typ)
    except msgspec.ValidationError as exc:
        reason, location = _error_location(exc, path)
        where = f" at '{location}'" if location else ""
        raise InvalidParams(f"invalid params: {reason}{where}", field=location or None) from None


def decode_params(method: str, params: Any) -> Any:
    """Typed params for ``method`` (§7); absent params are ``{}`` (§4.1).

    Methods without a params type (vendor ``x-…/…``) get the dict unchanged.
    ``retrieve`` params are also checked against the §3.3 funnel.
    """
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidParams("params must be an object", field="params")
    typ = PARAMS.get(method)
    if typ is None:
        return params
    decoded: Any = convert(params, typ)
    if isinstance(decoded, RetrieveParams):
        check_funnel(decoded)
    return decoded


def decode_result(method: str, result: Any) -> Any:
    """Typed result of ``method`` as received by a client; a malformed one is the peer's fault.

    Raises :class:`ProtocolViolation` (data.field = the offending path).
    """
    typ = RESULTS.get(method)
    if typ is None:
        return result
    if not isinstance(result, dict):
        raise ProtocolViolation(f"{method} result is not an object", field="result")
    try:
        return convert(result, typ)
    except InvalidParams as exc:
        raise ProtocolViolation(f"malformed {method} result: {exc.message}",
                                data=exc.data) from None


# ── encoding ─────────────────────────────────────────────────────────────────

#: Keys that hold a required score: a non-finite value becomes this sentinel.
_REQUIRED_FLOAT_KEYS = frozenset({"score"})
_SENTINEL = 0.0


def to_builtins(obj: Any) -> Any:
    """Structs/dataclasses → JSON builtins: camelCase, ``_meta``, None/default fields omitted.

    numpy scalars/arrays become numbers/lists. Non-finite floats are never
    emitted (§4.6): an optional member is omitted, a required ``score`` and any
    array element (scores, vector components) become 0.0; inside free-form
    objects they become ``null``.
    """
    return _finite(msgspec.to_builtins(obj, enc_hook=_numpy_hook), free_form=False)


def _numpy_hook(value: Any) -> Any:
    """Engines hand over numpy scalars and arrays; they travel as plain numbers/lists."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def _finite(value: Any, *, free_form: bool) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            nested_free = free_form or key in _FREE_FORM
            if not free_form and item is None:
                continue
            if isinstance(item, float) and not math.isfinite(item):
                if free_form:
                    out[key] = None
                elif key in _REQUIRED_FLOAT_KEYS:
                    out[key] = _SENTINEL
                continue
            out[key] = _finite(item, free_form=nested_free)
        return out
    if isinstance(value, list):
        if value and isinstance(value[0], int | float) and _all_finite(value):
            return value
        replacement = None if free_form else _SENTINEL
        return [replacement if isinstance(item, float) and not math.isfinite(item)
                else _finite(item, free_form=free_form) for item in value]
    return value


def _all_finite(numbers: list[Any]) -> bool:
    """Fast check for a numeric array (a sum is finite only if every term is)."""
    try:
        return math.isfinite(sum(numbers))
    except (TypeError, OverflowError):
        return False
