"""LlamaIndex retriever over any RCP engine (``pip install 'rcpkit[llama-index]'``).

::

    from rcpkit.client import Client
    from rcpkit.integrations.llama_index import RcpRetriever

    retriever = RcpRetriever(client=Client.connect_stdio(["rcpkit", "serve", "--stdio"]),
                             k=4, mode="hybrid")
    nodes = retriever.retrieve("why do bees swarm?")       # or: await retriever.aretrieve(...)

Each hit (§7.7) becomes a ``NodeWithScore``: a ``TextNode`` with the hit's id and text,
``metadata`` carrying ``id``, ``score``, ``citation``, ``trust``, ``meta``… (wire names),
a ``SOURCE`` relationship to the document of a chunk hit, and the hit's score.
``similarity_top_k`` and ``filters=MetadataFilters(...)`` work as on LlamaIndex's own
retrievers (mapped to ``k`` and a §8 filter; what §8 cannot express is refused). Only
``citation`` and ``trust`` are shown to the LLM, so a prompt built from the nodes says
which passages are untrusted (§15.2). A failed call raises :class:`RcpRetrieverError`.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from ..client import AsyncClient, Client
from ..protocol.types import Hit
from . import retriever as core
from .hits import hit_metadata, hit_text

__all__ = ["RcpRetriever", "RcpRetrieverError", "aindex_documents", "index_documents",
           "metadata_filter"]

_DEFAULT_K = 4
_OPERATORS = {FilterOperator.EQ: "eq", FilterOperator.NE: "ne", FilterOperator.GT: "gt",
              FilterOperator.GTE: "gte", FilterOperator.LT: "lt", FilterOperator.LTE: "lte",
              FilterOperator.IN: "in", FilterOperator.NIN: "nin",
              FilterOperator.CONTAINS: "contains"}
# Metadata an LLM should see beside the passage: where it comes from and how far to trust it.
_LLM_KEYS = ("citation", "trust")


class RcpRetrieverError(core.RetrievalError, RuntimeError):
    """An RCP retrieve or index call failed; ``code``/``data`` are the §12 error's.
    (LlamaIndex has no exception hierarchy of its own to join.)"""


class RcpRetriever(BaseRetriever):
    """``retrieve`` (§7.7) of an RCP engine as a LlamaIndex retriever, sync and async."""

    def __init__(self, client: Client | AsyncClient, *, k: int | None = None,
                 similarity_top_k: int | None = None, mode: str | None = None,
                 filter: Any = None, filters: MetadataFilters | None = None,
                 rerank: Any = None, options: dict[str, Any] | None = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False) -> None:
        """``similarity_top_k`` is LlamaIndex's name for ``k``; ``filters`` its
        ``MetadataFilters``, translated to a §8 filter (an operator §8 cannot express
        is refused). Give each setting once."""
        core.check_client(client)
        if k is not None and similarity_top_k is not None:
            raise ValueError("give k or similarity_top_k, not both")
        if filter is not None and filters is not None:
            raise ValueError("give filter (§8) or filters (MetadataFilters), not both")
        self.client = client
        wire_filter = metadata_filter(filters) if filters is not None else \
            core.operator_filter(filter)
        top_k = next((n for n in (k, similarity_top_k) if n is not None), _DEFAULT_K)
        self.settings = core.RetrieveSettings(top_k, mode, wire_filter, rerank,
                                              dict(options or {}))
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = core.retrieve_hits(self.client, query_bundle.query_str,
                                  self.settings.kwargs({}), RcpRetrieverError)
        return [_node(hit) for hit in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = await core.aretrieve_hits(self.client, query_bundle.query_str,
                                         self.settings.kwargs({}), RcpRetrieverError)
        return [_node(hit) for hit in hits]


def metadata_filter(filters: MetadataFilters) -> dict[str, Any]:
    """``MetadataFilters`` as a §8 filter tree. ``any``/``all`` become ``contains`` under
    ``or``/``and``; ``not`` matches when none of its filters does (LlamaIndex's meaning).
    ``text_match``, ``text_match_insensitive`` and ``is_empty`` have no §8 equivalent
    (§8 compares case-sensitively; ``exists`` is not emptiness) and are refused."""
    if not filters.filters:
        raise ValueError("MetadataFilters with no filters")
    children = [metadata_filter(child) if isinstance(child, MetadataFilters)
                else _condition(child) for child in filters.filters]
    either = children[0] if len(children) == 1 else {"or": children}
    if filters.condition == FilterCondition.NOT:
        return {"not": either}
    if len(children) == 1:
        return children[0]
    return {"and" if filters.condition in (FilterCondition.AND, None) else "or": children}


def _condition(condition: MetadataFilter) -> dict[str, Any]:
    operator, key, value = condition.operator, condition.key, condition.value
    if operator in (FilterOperator.ANY, FilterOperator.ALL):
        if not isinstance(value, list) or not value:
            raise ValueError(f"{operator.value!r} on {key!r} takes a non-empty list")
        every = [{"field": key, "op": "contains", "value": item} for item in value]
        return {"or" if operator == FilterOperator.ANY else "and": every}
    if operator not in _OPERATORS:
        raise core.unexpressible(f"the MetadataFilter operator {operator.value!r} on {key!r}")
    return {"field": key, "op": _OPERATORS[operator], "value": value}


def _node(hit: Hit) -> NodeWithScore:
    metadata = hit_metadata(hit)
    relationships = {}
    if hit.chunk is not None and hit.chunk.doc_id is not None:
        relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=hit.chunk.doc_id)
    node = TextNode(id_=str(hit.id), text=hit_text(hit), metadata=metadata,
                    relationships=relationships,
                    excluded_llm_metadata_keys=[key for key in metadata if key not in _LLM_KEYS],
                    excluded_embed_metadata_keys=list(metadata))
    return NodeWithScore(node=node, score=hit.score)


def _wire(node: BaseNode) -> dict[str, Any]:
    """A LlamaIndex node or Document as a §7.10 document, keeping its id (an upsert)."""
    wire: dict[str, Any] = {"id": node.node_id,
                            "text": node.get_content(metadata_mode=MetadataMode.NONE)}
    if node.metadata:
        wire["meta"] = core.json_safe(node.metadata)
    return wire


_INDEXER = core.DocumentIndexer(_wire, RcpRetrieverError)
index_documents = _INDEXER.add
"""``index_documents(client, documents, chunk=True)``: LlamaIndex Documents or nodes into the
engine (``index/add``, §7.10) under their ids (re-adding one replaces it); the ids back."""
aindex_documents = _INDEXER.aadd
""":func:`index_documents` for async callers."""
