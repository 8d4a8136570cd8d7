"""Typed params and results for every §7 method, one module per surface (msgspec Structs).

Server and client share these types, so both sides read and write the same shapes;
:mod:`rcpkit.protocol.codec` converts them from and to JSON builtins.
"""

from __future__ import annotations

from .base import FreeForm, Id, Input, Query
from .catalog import CatalogEngine, CatalogListParams, CatalogListResult, Endpoint
from .common import (
    ChunkRef,
    Citation,
    Hit,
    IndexDocument,
    PeerInfo,
    Provenance,
    ProvenanceEdge,
    Trust,
    Usage,
)
from .embed import (
    EmbedParams,
    EmbedResult,
    MultiEmbedParams,
    MultiEmbedResult,
    SparseEmbedParams,
    SparseEmbedResult,
    SparseVector,
)
from .feedback import FeedbackParams, FeedbackResult, FeedbackSignal
from .graph import Community, GraphEdge, GraphNode, GraphParams, GraphResult
from .index import IndexAddParams, IndexAddResult, IndexDeleteParams, IndexDeleteResult
from .lifecycle import (
    InfoParams,
    InitializeParams,
    InitializeResult,
    PingParams,
    PingResult,
    ShutdownParams,
    ShutdownResult,
)
from .memory import (
    Clue,
    MemoryBuildParams,
    MemoryBuildResult,
    MemoryRecallParams,
    MemoryRecallResult,
)
from .notifications import CancelParams, LogParams, ProgressParams
from .rerank import RerankItem, RerankParams, RerankResult
from .retrieve import (
    FusionOptions,
    MmrOptions,
    Recency,
    RerankOptions,
    RetrieveParams,
    RetrieveResult,
    check_funnel,
)
from .transform import TransformParams, TransformResult

__all__ = [
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
    "FreeForm",
    "FusionOptions",
    "GraphEdge",
    "GraphNode",
    "GraphParams",
    "GraphResult",
    "Hit",
    "Id",
    "IndexAddParams",
    "IndexAddResult",
    "IndexDeleteParams",
    "IndexDeleteResult",
    "IndexDocument",
    "InfoParams",
    "InitializeParams",
    "InitializeResult",
    "Input",
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
    "Query",
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
]
