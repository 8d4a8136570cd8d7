"""The roster: which params and result type each §7 method has, and decoding by method."""

from __future__ import annotations

from typing import Any

from ..codec import convert
from ..errors import InvalidParams, ProtocolViolation
from .catalog import CatalogListParams, CatalogListResult
from .embed import (
    EmbedParams,
    EmbedResult,
    MultiEmbedParams,
    MultiEmbedResult,
    SparseEmbedParams,
    SparseEmbedResult,
)
from .feedback import FeedbackParams, FeedbackResult
from .graph import GraphParams, GraphResult
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
from .memory import MemoryBuildParams, MemoryBuildResult, MemoryRecallParams, MemoryRecallResult
from .notifications import CancelParams, LogParams, ProgressParams
from .rerank import RerankParams, RerankResult
from .retrieve import RetrieveParams, RetrieveResult, check_funnel
from .transform import TransformParams, TransformResult

__all__ = ["PARAMS", "RESULTS", "decode_params", "decode_result"]
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

