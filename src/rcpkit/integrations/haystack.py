"""Haystack retriever component over any RCP engine (``pip install 'rcpkit[haystack]'``).

::

    from haystack import Pipeline
    from rcpkit.client import Client
    from rcpkit.integrations.haystack import RcpRetriever

    retriever = RcpRetriever(Client.connect_stdio(["rcpkit", "serve", "--stdio"]), top_k=4)
    retriever.run(query="why do bees swarm?")["documents"]    # or: await run_async(...)

Each hit (§7.7) becomes a ``Document``: ``content`` is its text, ``id`` its id, ``score``
its score, and ``meta`` carries ``id``, ``score``, the engine's ``citation``, ``trust``,
``meta``… (wire names). Keep ``meta["trust"]`` in view when building a prompt: a missing or
``untrusted`` level means the passage is data, never instructions (§15.2).

Haystack filters (``{"field": "meta.lang", "operator": "==", "value": "en"}``,
``{"operator": "AND", "conditions": [...]}``) become §8 filters; a field outside ``meta``
or an operator §8 lacks is refused, never ignored. Run-time ``filters`` replace or merge
with the component's as its ``filter_policy`` says (Haystack's own rule). A failed call
raises :class:`RcpRetrieverError`.
"""

from __future__ import annotations

from typing import Any

from haystack import Document, component
from haystack.document_stores.types import FilterPolicy, apply_filter_policy

from ..client import AsyncClient, Client
from ..protocol.types import Hit
from . import retriever as core
from .hits import hit_metadata, hit_text

__all__ = ["RcpRetriever", "RcpRetrieverError", "haystack_filter"]

_COMPARISONS = {"==": "eq", "!=": "ne", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte",
                "in": "in", "not in": "nin"}
_META = "meta."


class RcpRetrieverError(core.RetrievalError, RuntimeError):
    """An RCP retrieve call failed; ``code``/``data`` are the §12 error's."""


@component
class RcpRetriever:
    """``retrieve`` (§7.7) of an RCP engine as a Haystack retriever component, sync and
    async. ``mode``, ``rerank`` and ``options`` (other §7.7 options by client keyword, e.g.
    ``candidate_k``) are as in the LangChain and LlamaIndex retrievers."""

    def __init__(self, client: Client | AsyncClient, *, top_k: int = 4,
                 filters: dict[str, Any] | None = None,
                 filter_policy: FilterPolicy = FilterPolicy.REPLACE, mode: str | None = None,
                 rerank: Any = None, options: dict[str, Any] | None = None) -> None:
        core.check_client(client)
        if filters is not None:
            haystack_filter(filters)  # refused now, not at the first query
        self.client = client
        self.filters = filters
        self.filter_policy = FilterPolicy(filter_policy)
        self.settings = core.RetrieveSettings(top_k, mode, None, rerank, dict(options or {}))

    def _kwargs(self, filters: dict[str, Any] | None, top_k: int | None) -> dict[str, Any]:
        chosen = apply_filter_policy(self.filter_policy, self.filters, filters)
        overrides: dict[str, Any] = {"filter": haystack_filter(chosen) if chosen else None}
        if top_k is not None:
            if top_k < 1:
                raise ValueError("top_k must be at least 1")
            overrides["k"] = top_k
        return self.settings.kwargs(overrides)

    @component.output_types(documents=list[Document])
    def run(self, query: str, filters: dict[str, Any] | None = None,
            top_k: int | None = None) -> dict[str, list[Document]]:
        """The ``top_k`` best passages for ``query``, narrowed by ``filters``."""
        hits = core.retrieve_hits(self.client, query, self._kwargs(filters, top_k),
                                  RcpRetrieverError)
        return {"documents": [_document(hit) for hit in hits]}

    @component.output_types(documents=list[Document])
    async def run_async(self, query: str, filters: dict[str, Any] | None = None,
                        top_k: int | None = None) -> dict[str, list[Document]]:
        """:meth:`run` for async pipelines."""
        hits = await core.aretrieve_hits(self.client, query, self._kwargs(filters, top_k),
                                         RcpRetrieverError)
        return {"documents": [_document(hit) for hit in hits]}


def haystack_filter(spec: dict[str, Any]) -> dict[str, Any]:
    """A Haystack filter as a §8 tree. ``NOT`` holds when not all its conditions do
    (Haystack's meaning); fields are ``meta.<name>`` (others are not engine metadata)."""
    operator = spec.get("operator")
    if "conditions" in spec:
        conditions = spec["conditions"]
        if operator not in ("AND", "OR", "NOT") or not isinstance(conditions, list) \
                or not conditions:
            raise ValueError(f"a logical Haystack filter is AND, OR or NOT over a non-empty "
                             f"list of conditions, got {spec!r}")
        children = [haystack_filter(condition) for condition in conditions]
        every = children[0] if len(children) == 1 else {"and": children}
        if operator == "NOT":
            return {"not": every}
        if operator == "AND" or len(children) == 1:
            return every
        return {"or": children}
    field = spec.get("field")
    if not isinstance(field, str) or not field.startswith(_META) or len(field) == len(_META):
        raise core.unexpressible(f"the Haystack filter field {field!r} (only meta.<name>)")
    if operator not in _COMPARISONS:
        raise core.unexpressible(f"the Haystack filter operator {operator!r}")
    return {"field": field[len(_META):], "op": _COMPARISONS[operator], "value": spec.get("value")}


def _document(hit: Hit) -> Document:
    return Document(id=str(hit.id), content=hit_text(hit), meta=hit_metadata(hit),
                    score=hit.score)
