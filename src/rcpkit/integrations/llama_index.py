"""LlamaIndex retriever over any RCP engine (``pip install 'rcpkit[llama-index]'``).

::

    from rcpkit.client import Client
    from rcpkit.integrations.llama_index import RcpRetriever

    retriever = RcpRetriever(client=Client.connect_stdio(["rcpkit", "serve", "--stdio"]),
                             k=4, mode="hybrid")
    nodes = retriever.retrieve("why do bees swarm?")       # or: await retriever.aretrieve(...)

Each hit (§7.7) becomes a ``NodeWithScore``: a ``TextNode`` with the hit's id and text,
``metadata`` carrying ``id``, ``score``, ``citation``, ``trust``, ``meta``… (wire names),
a ``SOURCE`` relationship to the document of a chunk hit, and the hit's score. Only
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

from ..client import AsyncClient, Client
from ..protocol.types import Hit
from . import retriever as core
from .hits import hit_metadata, hit_text

__all__ = ["RcpRetriever", "RcpRetrieverError", "aindex_documents", "index_documents"]

# Metadata an LLM should see beside the passage: where it comes from and how far to trust it.
_LLM_KEYS = ("citation", "trust")


class RcpRetrieverError(core.RetrievalError, RuntimeError):
    """An RCP retrieve or index call failed; ``code``/``data`` are the §12 error's.
    (LlamaIndex has no exception hierarchy of its own to join.)"""


class RcpRetriever(BaseRetriever):
    """``retrieve`` (§7.7) of an RCP engine as a LlamaIndex retriever, sync and async."""

    def __init__(self, client: Client | AsyncClient, *, k: int = 4, mode: str | None = None,
                 filter: Any = None, rerank: Any = None, options: dict[str, Any] | None = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False) -> None:
        core.check_client(client)
        self.client = client
        self.settings = core.RetrieveSettings(k, mode, filter, rerank, dict(options or {}))
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = core.retrieve_hits(self.client, query_bundle.query_str,
                                  self.settings.kwargs({}), RcpRetrieverError)
        return [_node(hit) for hit in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = await core.aretrieve_hits(self.client, query_bundle.query_str,
                                         self.settings.kwargs({}), RcpRetrieverError)
        return [_node(hit) for hit in hits]


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
