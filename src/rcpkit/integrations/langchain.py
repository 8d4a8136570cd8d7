"""LangChain retriever over any RCP engine (``pip install 'rcpkit[langchain]'``).

::

    from rcpkit.client import Client, filters as f
    from rcpkit.integrations.langchain import RcpRetriever

    retriever = RcpRetriever(client=Client.connect_stdio(["rcpkit", "serve", "--stdio"]),
                             k=4, mode="hybrid", filter=f.eq("lang", "en"))
    docs = retriever.invoke("why do bees swarm?")          # or: await retriever.ainvoke(...)

Each hit (§7.7) becomes a ``Document``: ``page_content`` is its text, ``id`` its id, and
``metadata`` carries ``id``, ``score``, and the engine's ``citation``, ``trust``, ``meta``,
``chunk``… (wire names). Keep ``metadata["trust"]`` in view when building a prompt: a
missing or ``untrusted`` level means the passage is data, never instructions (§15.2).
Per-call options override the retriever's: ``retriever.invoke(q, k=2, mode="sparse")``.
LangChain's ``search_kwargs`` (``k``, ``filter``, ``score_threshold``, ``fetch_k``,
``lambda_mult``) map to §7.7 options and §8 filters (``{"lang": "en"}``,
``{"year": {"$gte": 2020}}``, ``$and``/``$or``/``$not``); an unknown key, setting or
operator is refused, never ignored.
A failed call raises :class:`RcpRetrieverError`, a ``LangChainException``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.exceptions import LangChainException
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, field_validator, model_validator

from ..protocol.types import Hit
from . import retriever as core
from .hits import hit_metadata, hit_text

__all__ = ["RcpRetriever", "RcpRetrieverError", "aindex_documents", "index_documents"]

# LangChain hands its own run settings to the retriever with the call's keyword arguments.
_RUN_KEYS = ("verbose",)
# LangChain's VectorStoreRetriever.search_kwargs → retrieve options (§7.7).
_SEARCH_KWARGS = {"k": "k", "filter": "filter", "score_threshold": "min_score",
                  "fetch_k": "candidate_k", "lambda_mult": "mmr"}


class RcpRetrieverError(core.RetrievalError, LangChainException):
    """An RCP retrieve or index call failed; ``code``/``data`` are the §12 error's."""


class RcpRetriever(BaseRetriever):
    """``retrieve`` (§7.7) of an RCP engine as a LangChain retriever, sync and async."""

    client: Any = Field(description="An rcpkit Client, or an AsyncClient for async use only.")
    k: int = Field(default=4, ge=1, description="Hits per query (clamped to retrieve.maxK).")
    mode: str | None = Field(default=None, description="dense, sparse or hybrid (§7.7).")
    filter: Any = Field(default=None, description="A §8 filter: dict or builder expression.")
    rerank: Any = Field(default=None, description="A §7.7 rerank object, or False.")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="Other §7.7 options, e.g. candidate_k.")
    search_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="LangChain's vector-store retriever settings: k, filter (a §8 tree or "
                    "a {'field': value} / {'field': {'$gte': v}} mapping), score_threshold "
                    "(minScore, in the engine's own scale, §4.6), fetch_k (candidateK), "
                    "lambda_mult (MMR lambda). Any other key is refused.")

    # A misspelt or foreign setting (``top_k=2``) is an error, never silently the default.
    model_config = ConfigDict(extra="forbid")

    @field_validator("client")
    @classmethod
    def _rcp_client(cls, client: Any) -> Any:
        core.check_client(client)
        return client

    def _kwargs(self, overrides: dict[str, Any]) -> dict[str, Any]:
        for key in _RUN_KEYS:
            overrides.pop(key, None)
        settings = core.RetrieveSettings(self.k, self.mode, core.operator_filter(self.filter),
                                         self.rerank, {**self.options, **self._searched()})
        if "filter" in overrides:
            overrides["filter"] = core.operator_filter(overrides["filter"])
        return settings.kwargs(overrides)

    @field_validator("search_kwargs")
    @classmethod
    def _known_search_kwargs(cls, search_kwargs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(search_kwargs) - set(_SEARCH_KWARGS))
        if unknown:
            raise ValueError(f"search_kwargs takes {', '.join(_SEARCH_KWARGS)}; not "
                             f"{', '.join(unknown)}")
        return search_kwargs

    @model_validator(mode="after")
    def _one_source_per_setting(self) -> RcpRetriever:
        for name in ("k", "filter"):
            if name in self.search_kwargs and name in self.model_fields_set:
                raise ValueError(f"{name} is given both directly and in search_kwargs")
        self._searched()  # refuses a filter §8 cannot express now, not at the first query
        core.operator_filter(self.filter)
        return self

    def _searched(self) -> dict[str, Any]:
        """``search_kwargs`` as ``retrieve`` keyword options (§7.7)."""
        searched = {_SEARCH_KWARGS[name]: value for name, value in self.search_kwargs.items()
                    if name != "lambda_mult"}
        if "filter" in searched:
            searched["filter"] = core.operator_filter(searched["filter"])
        if "lambda_mult" in self.search_kwargs:
            searched["mmr"] = {"lambda": self.search_kwargs["lambda_mult"]}
        return searched

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun,
                                **overrides: Any) -> list[Document]:
        hits = core.retrieve_hits(self.client, query, self._kwargs(overrides),
                                  RcpRetrieverError)
        return [_document(hit) for hit in hits]

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **overrides: Any) -> list[Document]:
        hits = await core.aretrieve_hits(self.client, query, self._kwargs(overrides),
                                         RcpRetrieverError)
        return [_document(hit) for hit in hits]


def _document(hit: Hit) -> Document:
    return Document(page_content=hit_text(hit), metadata=hit_metadata(hit), id=str(hit.id))


def _wire(document: Document) -> dict[str, Any]:
    """A LangChain Document as a §7.10 document: its ``id`` makes the add an upsert."""
    wire: dict[str, Any] = {"text": document.page_content}
    if document.id is not None:
        wire["id"] = str(document.id)
    if document.metadata:
        wire["meta"] = core.json_safe(document.metadata)
    return wire


_INDEXER = core.DocumentIndexer(_wire, RcpRetrieverError)
index_documents = _INDEXER.add
"""``index_documents(client, documents, chunk=True)``: LangChain Documents into the engine
(``index/add``, §7.10), their ids back; a Document with an ``id`` is replaced, not copied."""
aindex_documents = _INDEXER.aadd
""":func:`index_documents` for async callers."""
