"""Option gating (§6, §7, §12): one rule set for the server and the client pre-flight.

:class:`OptionGate` and one options check per method, which the method table
(:mod:`.methods`, ``Method.options``) names and runs: typed params against the advertised
capabilities.
An option value outside what was advertised is ``-32005`` (``data.option``
names the option, ``data.value`` the requested value) unless the request set
``strict: false``, in which case the server may fall back and the returned
notes say what was ignored (§7.7, for ``usage.notes``). Methods without a
``strict`` param behave strictly.

Some checks reject whatever ``strict`` says, because the spec makes them MUST:
a Content block outside the advertised modalities (§4.8), ``rerank.method``
not in ``rerank.methods`` (§7.6), ``graph.op`` not in ``graph.ops`` (§7.9), a
``query/transform`` method not advertised (§7.8), and ``filter`` without the
``filter`` capability (ignoring a filter would widen what a caller sees).
``seed`` on a non-deterministic server never errors (§7.7.1), it only adds a note.
Lists that are absent mean "nothing advertised" (``fusion``, ``units`` → chunk/passage,
``rerank.methods``…), except ``retrieve.modes``: a server that advertises neither
``modes`` nor ``defaultMode`` has not restricted ``mode``.

``index/add`` against an index advertised with ``writable`` not true is
``-32003`` (``CapabilityMissing``): the §7 roster gates the *method* on
``index (writable)``, so the method itself is unavailable — ``-32005`` is
reserved for option values of an available method (§12).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from .capabilities import (
    Capabilities,
    EmbedCap,
    FilterCap,
    RerankCap,
    RetrieveCap,
)
from .content import accepted_modalities, check_modalities, normalize_content
from .errors import CapabilityMissing, InvalidParams, OptionUnsupported
from .filters import FilterError, FilterNode, UnadvertisedOperator, validate
from .types import (
    EmbedParams,
    GraphParams,
    IndexAddParams,
    MemoryBuildParams,
    MultiEmbedParams,
    RerankParams,
    RetrieveParams,
    SparseEmbedParams,
    TransformParams,
)

__all__ = [
    "EMBED_KINDS",
    "Gated",
    "OptionGate",
    "embed_options",
    "graph_options",
    "index_add_options",
    "index_writable",
    "memory_build_options",
    "multi_embed_options",
    "rerank_options",
    "retrieve_options",
    "sparse_embed_options",
    "transform_options",
    "validate_filter",
]

EMBED_KINDS: tuple[str, ...] = ("query", "document")
_DEFAULT_UNITS: tuple[str, ...] = ("chunk", "passage")


def _refusal(option: str, value: Any, message: str) -> OptionUnsupported:
    """§12.1: ``data.option`` names the unsupported mode/method value itself
    (``"hybrid"``, ``"cross-encoder"``) when the request named one, else the
    requested feature (``"mmr"``); ``data.param`` is always the params path."""
    named = value if isinstance(value, str) and value else option
    return OptionUnsupported(message, option=named, param=option)


class OptionGate:
    """Collects degrade notes, or raises, for one request (``strict``: §7.7)."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.notes: list[str] = []
        self.filter: FilterNode | None = None
        """The validated §8 filter of a ``retrieve`` (None without one)."""

    def unsupported(self, option: str, value: Any, message: str) -> None:
        """An unadvertised option under the §7.7 ``strict`` rule."""
        if self.strict:
            raise _refusal(option, value, message)
        self.notes.append(f"{message}; ignored ({option})")

    @staticmethod
    def reject(option: str, value: Any, message: str) -> None:
        """An unadvertised value the spec rejects regardless of ``strict``."""
        raise _refusal(option, value, message)


class Gated(NamedTuple):
    """What gating one request found: degrade notes and the validated §8 filter."""

    notes: list[str]
    filter: FilterNode | None


def validate_filter(params: RetrieveParams, caps: Capabilities) -> FilterNode | None:
    """The normalised §8 filter tree of ``params``, or None without a filter.

    A filter without the ``filter`` capability is ``-32005`` (option ``filter``).
    Structural and field errors (``-32602``) take precedence over an
    unadvertised operator (``-32005``): the tree is first checked with every
    operator allowed, then against ``filter.operators``.
    """
    if params.filter is None:
        return None
    if not caps.has("filter"):
        raise _refusal("filter", None, "metadata filtering is not advertised")
    filter_cap = caps.filter or FilterCap()
    try:
        return validate(params.filter, filter_cap.fields or [], filter_cap.operators)
    except UnadvertisedOperator as exc:
        raise OptionUnsupported(exc.message, option=exc.operator, param=exc.field) from None
    except FilterError as exc:
        raise InvalidParams(exc.message, field=exc.field,
                            data=None if exc.limit is None else {"limit": exc.limit}) from None


def _check_encoding(encoding: str | None, advertised: Sequence[str] | None,
                    gate: OptionGate) -> None:
    """§7.3.1: ``json`` is always allowed; anything else must be advertised."""
    if encoding is not None and encoding != "json" and encoding not in (advertised or ()):
        gate.unsupported("encoding", encoding, f"vector encoding {encoding!r} is not advertised")


def _check_kind(kind: str | None, gate: OptionGate) -> None:
    if kind is not None and kind not in EMBED_KINDS:
        gate.unsupported("kind", kind, f"embedding kind {kind!r} is not supported")


def _check_inputs(inputs: Sequence[Any], modalities: Sequence[str] | None, path: str) -> None:
    """§4.8: every input (a string or one block) must be of an advertised modality."""
    text_ok = "text" in accepted_modalities(modalities)
    for index, item in enumerate(inputs):
        if isinstance(item, str) and text_ok:
            continue
        item_path = f"{path}[{index}]"
        check_modalities(normalize_content(item, item_path), modalities, item_path)


def embed_options(params: EmbedParams, caps: Capabilities, gate: OptionGate) -> None:
    embed = caps.embed or EmbedCap()
    _check_inputs(params.inputs, embed.modalities, "inputs")
    _check_kind(params.kind, gate)
    _check_encoding(params.encoding, embed.encodings, gate)


def sparse_embed_options(params: SparseEmbedParams, caps: Capabilities,
                         gate: OptionGate) -> None:
    _check_inputs(params.inputs, None, "inputs")
    _check_kind(params.kind, gate)


def multi_embed_options(params: MultiEmbedParams, caps: Capabilities,
                        gate: OptionGate) -> None:
    multi = caps.multi_vector
    _check_inputs(params.inputs, multi.modalities if multi else None, "inputs")
    _check_kind(params.kind, gate)
    _check_encoding(params.encoding, multi.encodings if multi else None, gate)


def rerank_options(params: RerankParams, caps: Capabilities, gate: OptionGate) -> None:
    query = normalize_content(params.query, "query")
    check_modalities(query, None, "query")
    _check_inputs(params.passages, None, "passages")
    methods = (caps.rerank or RerankCap()).methods or []
    if params.method is not None and params.method not in methods:
        gate.reject("method", params.method, f"rerank method {params.method!r} is not advertised")


def retrieve_options(params: RetrieveParams, caps: Capabilities,
                     gate: OptionGate) -> None:
    retrieve = caps.retrieve or RetrieveCap()
    check_modalities(normalize_content(params.query, "query"), retrieve.modalities, "query")
    if (params.modality is not None
            and params.modality not in accepted_modalities(retrieve.modalities)):
        gate.unsupported("modality", params.modality,
                         f"modality {params.modality!r} is not advertised")
    _retrieve_pipeline(params, caps, retrieve, gate)
    _retrieve_granularity(params, caps, retrieve, gate)
    gate.filter = validate_filter(params, caps)
    _check_encoding(params.encoding, (caps.embed or EmbedCap()).encodings, gate)
    if params.seed is not None and not retrieve.deterministic:
        gate.notes.append("seed ignored: retrieval is not deterministic (seed)")


def _retrieve_pipeline(params: RetrieveParams, caps: Capabilities, retrieve: RetrieveCap,
                       gate: OptionGate) -> None:
    """Mode, fusion, rerank, mmr and rewrite stages (§3.1, §7.7)."""
    modes = retrieve.modes or ([retrieve.default_mode] if retrieve.default_mode else None)
    if params.mode is not None and modes is not None and params.mode not in modes:
        gate.unsupported("mode", params.mode, f"retrieval mode {params.mode!r} is not advertised")
    fusion = retrieve.fusion or []
    if params.fusion is not None:
        if not fusion:
            gate.unsupported("fusion", params.fusion.method, "fusion is not advertised")
        elif params.fusion.method is not None and params.fusion.method not in fusion:
            gate.unsupported("fusion.method", params.fusion.method,
                             f"fusion method {params.fusion.method!r} is not advertised")
    rerank = params.rerank_options
    if rerank is not None:
        if not (retrieve.rerank_builtin or caps.has("rerank")):
            gate.unsupported("rerank", rerank.method, "reranking is not advertised")
        elif (rerank.method is not None and caps.rerank is not None
              and rerank.method not in (caps.rerank.methods or [])):
            gate.unsupported("rerank.method", rerank.method,
                             f"rerank method {rerank.method!r} is not advertised")
    if params.mmr is not None and not retrieve.mmr:
        gate.unsupported("mmr", params.mmr.lambda_, "MMR diversification is not advertised")
    rewrite = params.rewrite_method
    if rewrite is not None:
        transform = caps.transform
        if transform is None or rewrite not in (transform.methods or []):
            gate.unsupported("rewrite", rewrite, f"query rewrite {rewrite!r} is not advertised")


def _retrieve_granularity(params: RetrieveParams, caps: Capabilities, retrieve: RetrieveCap,
                          gate: OptionGate) -> None:
    """Unit, level, token budget and pagination (§7.7.2, §10)."""
    if params.unit is not None and params.unit not in (retrieve.units or _DEFAULT_UNITS):
        gate.unsupported("unit", params.unit, f"retrieval unit {params.unit!r} is not advertised")
    if params.level and (retrieve.levels is None or params.level >= retrieve.levels):
        gate.unsupported("level", params.level, f"abstraction level {params.level} is not "
                         "advertised")
    if params.token_budget is not None and not retrieve.token_budget:
        gate.unsupported("tokenBudget", params.token_budget, "token budgeting is not advertised")
    if params.cursor is not None and not caps.has("pagination"):
        gate.unsupported("cursor", params.cursor, "pagination is not advertised")


def transform_options(params: TransformParams, caps: Capabilities,
                      gate: OptionGate) -> None:
    methods = caps.transform.methods if caps.transform else None
    if params.method not in (methods or []):
        gate.reject("method", params.method, f"transform method {params.method!r} is not "
                    "advertised")


def graph_options(params: GraphParams, caps: Capabilities, gate: OptionGate) -> None:
    ops = caps.graph.ops if caps.graph else None
    if params.op not in (ops or []):
        gate.reject("op", params.op, f"graph op {params.op!r} is not advertised")
    if params.cursor is not None and not caps.has("pagination"):
        gate.unsupported("cursor", params.cursor, "pagination is not advertised")


def index_writable(caps: Capabilities) -> bool:
    """§7 roster: ``index/add`` needs ``index`` advertised with ``writable: true``."""
    index = caps.index
    return index is not None and index.writable is True


def index_add_options(params: IndexAddParams, caps: Capabilities,
                      gate: OptionGate) -> None:
    index = caps.index
    if index is None or not index_writable(caps):
        raise CapabilityMissing("the index is not writable (index.writable)")
    if params.chunk and not index.chunking:
        gate.unsupported("chunk", True, "server-side chunking is not advertised")
    if params.contextual and not index.contextual:
        gate.unsupported("contextual", True, "contextual chunking is not advertised")


def memory_build_options(params: MemoryBuildParams, caps: Capabilities,
                         gate: OptionGate) -> None:
    scopes = caps.memory.scopes if caps.memory else None
    if params.scope is not None and scopes is not None and params.scope not in scopes:
        gate.unsupported("scope", params.scope, f"memory scope {params.scope!r} is not "
                         "advertised")
