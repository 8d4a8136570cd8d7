"""The RCP/1 method table (§7): one :class:`Method` row per method, read by everything else.

A row holds every fact the package keeps about a method: the capability that gates it
(§6, the §7 roster), any further condition (``index (writable)``), its typed params and
result, whether it writes (§15.3 ``write`` scope, §13.1 retry safety), whether it reports
progress (§9), its options check (:mod:`.gating`) and which params take their values from
the capabilities (§6.1). The lifecycle, the dispatcher's decoding and gating, the client's
pre-flight and retries, tenancy scopes, the MCP tools, the inspector's forms and the
OpenRPC document (:mod:`.openrpc`) all read these rows; adding a method is adding a row.

The conformance suite keeps its own list on purpose (:mod:`rcpkit.conformance.model`): it
certifies other servers against the spec, not against this table; a test checks they agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import msgspec

from .capabilities import Capabilities
from .codec import convert
from .errors import InvalidParams, ProtocolViolation
from .gating import (
    Gated,
    OptionGate,
    embed_options,
    graph_options,
    index_add_options,
    index_writable,
    memory_build_options,
    multi_embed_options,
    rerank_options,
    retrieve_options,
    sparse_embed_options,
    transform_options,
)
from .types import (
    CancelParams,
    CatalogListParams,
    CatalogListResult,
    EmbedParams,
    EmbedResult,
    FeedbackParams,
    FeedbackResult,
    GraphParams,
    GraphResult,
    IndexAddParams,
    IndexAddResult,
    IndexDeleteParams,
    IndexDeleteResult,
    InfoParams,
    InitializeParams,
    InitializeResult,
    LogParams,
    MemoryBuildParams,
    MemoryBuildResult,
    MemoryRecallParams,
    MemoryRecallResult,
    MultiEmbedParams,
    MultiEmbedResult,
    PingParams,
    PingResult,
    ProgressParams,
    RerankParams,
    RerankResult,
    RetrieveParams,
    RetrieveResult,
    ShutdownParams,
    ShutdownResult,
    SparseEmbedParams,
    SparseEmbedResult,
    TransformParams,
    TransformResult,
    check_funnel,
)

__all__ = [
    "ALWAYS_ALLOWED",
    "CANCEL",
    "LOG",
    "METHODS",
    "NOTIFICATIONS",
    "PARAMS",
    "PROGRESS",
    "RESULTS",
    "WRITE_METHODS",
    "Method",
    "Notification",
    "capability_for",
    "check_options",
    "decode_params",
    "decode_result",
    "gate_options",
    "is_core",
    "is_vendor",
    "vendor_capability",
]

OptionsCheck = Callable[[Any, Capabilities, OptionGate], None]
"""Checks a request's options against the capabilities (:mod:`.gating`)."""


@dataclass(frozen=True, slots=True)
class Method:
    """One §7 method and everything the package knows about it."""

    name: str
    section: str
    """Where the spec defines it (``§7.7``)."""
    summary: str
    """One line in our words (the OpenRPC ``summary``)."""
    params: type[msgspec.Struct]
    result: type[msgspec.Struct]
    capability: str | None = None
    """The capability key that gates it; None: ungated, callable before ``initialize``."""
    requires: Callable[[Capabilities], bool] | None = None
    """A condition on the capabilities beyond the key (``index/add``: ``writable``)."""
    writes: bool = False
    """Changes what later callers see: needs the ``write`` scope (§15.3) and is retried
    only when repeating it is harmless (§13.1)."""
    idempotent: bool = False
    """A write that may always be repeated (§7.11)."""
    progress: bool = False
    """May send ``notifications/progress`` while it runs (§9)."""
    options: OptionsCheck | None = None
    """Its options check (§7.7 ``strict``); None: no option depends on capabilities."""
    choices: Mapping[str, str] = field(default_factory=dict)
    """Param path → the capability path that lists its acceptable values (§6.1)."""

    def offered(self, caps: Capabilities) -> bool:
        """Whether a server advertising ``caps`` offers this method (§6, the §7 roster)."""
        if self.capability is not None and not caps.has(self.capability):
            return False
        return self.requires is None or self.requires(caps)


_ROWS = (
    Method("initialize", "§7.1", "Negotiate the protocol version and exchange capabilities.",
           InitializeParams, InitializeResult),
    Method("info", "§7.2", "The server's identity and capabilities; changes nothing.",
           InfoParams, InitializeResult),
    Method("ping", "§7.15", "Check that the server answers.", PingParams, PingResult),
    Method("shutdown", "§7.12", "End the session in order.", ShutdownParams, ShutdownResult),
    Method("embed", "§7.3", "One dense vector per input.", EmbedParams, EmbedResult,
           "embed", progress=True, options=embed_options,
           choices={"encoding": "embed.encodings"}),
    Method("embed/sparse", "§7.4", "One learned-sparse term weight vector per input.",
           SparseEmbedParams, SparseEmbedResult, "sparseEmbed", progress=True,
           options=sparse_embed_options),
    Method("embed/multi", "§7.5", "Per-token or per-patch vectors per input, for late "
           "interaction.", MultiEmbedParams, MultiEmbedResult, "multiVector", progress=True,
           options=multi_embed_options, choices={"encoding": "multiVector.encodings"}),
    Method("rerank", "§7.6", "Score candidate passages against a query.", RerankParams,
           RerankResult, "rerank", progress=True, options=rerank_options,
           choices={"method": "rerank.methods"}),
    Method("retrieve", "§7.7", "Run the retrieval pipeline for a query and return the best "
           "passages.", RetrieveParams, RetrieveResult, "retrieve", progress=True,
           options=retrieve_options,
           choices={"mode": "retrieve.modes", "fusion.method": "retrieve.fusion",
                    "unit": "retrieve.units", "modality": "retrieve.modalities",
                    "rerank.method": "rerank.methods", "encoding": "embed.encodings"}),
    Method("query/transform", "§7.8", "Rewrite, expand or decompose a query.",
           TransformParams, TransformResult, "transform", options=transform_options,
           choices={"method": "transform.methods"}),
    Method("graph", "§7.9", "Retrieve over the knowledge graph: entities, communities, "
           "neighbours.", GraphParams, GraphResult, "graph", progress=True,
           options=graph_options, choices={"op": "graph.ops"}),
    Method("index/add", "§7.10", "Add documents, or replace those with the same id.",
           IndexAddParams, IndexAddResult, "index", requires=index_writable, writes=True,
           progress=True, options=index_add_options),
    Method("index/delete", "§7.11", "Delete documents by id.", IndexDeleteParams,
           IndexDeleteResult, "index", writes=True, idempotent=True),
    Method("catalog/list", "§7.13", "The engines this server federates.", CatalogListParams,
           CatalogListResult, "catalog"),
    Method("feedback", "§7.16", "Relevance, reward or integrity signals about results.",
           FeedbackParams, FeedbackResult, "feedback", writes=True),
    Method("memory/build", "§7.17", "Build or update a memory over documents or the corpus.",
           MemoryBuildParams, MemoryBuildResult, "memory", writes=True, progress=True,
           options=memory_build_options, choices={"scope": "memory.scopes"}),
    Method("memory/recall", "§7.17", "Recall clues and entry points from a memory.",
           MemoryRecallParams, MemoryRecallResult, "memory"),
)

METHODS: Mapping[str, Method] = {row.name: row for row in _ROWS}
"""The §7 requests by name."""

CANCEL = "notifications/cancel"
PROGRESS = "notifications/progress"
LOG = "notifications/log"


class Notification(NamedTuple):
    """One RCP notification (no response): who sends it and its typed params."""

    name: str
    section: str
    summary: str
    params: type[msgspec.Struct]
    sender: Literal["client", "server"]


NOTIFICATIONS: Mapping[str, Notification] = {row.name: row for row in (
    Notification(CANCEL, "§7.14", "Abandon a request still in flight.", CancelParams,
                 "client"),
    Notification(PROGRESS, "§9", "Progress of a request that asked for it.", ProgressParams,
                 "server"),
    Notification(LOG, "§17.1", "A log record, for clients that opted in.", LogParams,
                 "server"),
)}

#: Callable before a successful ``initialize`` (§13, §14.1): the ungated methods.
ALWAYS_ALLOWED = frozenset(name for name, row in METHODS.items() if row.capability is None)
#: The methods that change what later callers see (§15.3, §13.1).
WRITE_METHODS = frozenset(name for name, row in METHODS.items() if row.writes)
PARAMS: Mapping[str, type[msgspec.Struct]] = {
    **{name: row.params for name, row in METHODS.items()},
    **{name: row.params for name, row in NOTIFICATIONS.items()}}
RESULTS: Mapping[str, type[msgspec.Struct]] = {name: row.result
                                               for name, row in METHODS.items()}

_VENDOR = re.compile(r"^(x-[a-z0-9][a-z0-9-]*)/[^/\s].*$")


def is_core(method: str) -> bool:
    return method in METHODS


def vendor_capability(method: str) -> str | None:
    """``x-acme/rerank-v2`` → ``x-acme`` (§6.2); None for non-vendor names."""
    match = _VENDOR.match(method)
    return match.group(1) if match else None


def is_vendor(method: str) -> bool:
    return vendor_capability(method) is not None


def capability_for(method: str) -> str | None:
    """The capability key that gates ``method`` (None when ungated or undefined)."""
    row = METHODS.get(method)
    if row is not None:
        return row.capability
    return vendor_capability(method)


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


def gate_options(method: str, params: Any, caps: Capabilities) -> Gated:
    """Gate the options of typed ``params`` against ``caps`` (:mod:`.gating`).

    Raises ``OptionUnsupported`` (or ``CapabilityMissing`` for a read-only
    ``index/add``, ``InvalidParams`` for a malformed filter). A ``retrieve`` filter is
    validated here once, and the tree handed on, so no later stage validates it again.
    """
    row = METHODS.get(method)
    if row is None or row.options is None:
        return Gated([], None)
    gate = OptionGate(strict=getattr(params, "strict", True))
    row.options(params, caps, gate)
    return Gated(gate.notes, gate.filter)


def check_options(method: str, params: Any, caps: Capabilities) -> list[str]:
    """The degrade notes of :func:`gate_options` (methods without options: ``[]``)."""
    return gate_options(method, params, caps).notes
