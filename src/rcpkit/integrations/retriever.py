"""The part of the LangChain and LlamaIndex retrievers that is about RCP, written once.

Both take the same constructor arguments (``client``, ``k``, ``mode``, ``filter``,
``rerank``, ``options``) and call ``retrieve`` (§7.7) through our client, so its
capability gating, ``maxK`` clamping and retries (§12.2) apply unchanged. ``client`` is
the blocking :class:`~rcpkit.client.Client` (sync and async calls) or an
:class:`~rcpkit.client.AsyncClient` (async calls only: it lives on its own event loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec

from ..client import AsyncClient, Client
from ..protocol import filters
from ..protocol.errors import RcpError, UsageError
from ..protocol.types import Hit, RetrieveParams

__all__ = ["DocumentIndexer", "RetrievalError", "RetrieveSettings", "aretrieve_hits",
           "check_client", "json_safe", "operator_filter", "rcp_error", "retrieve_hits",
           "unexpressible"]

_CLIENTS = (Client, AsyncClient)
# Vectors and their encoding mean nothing to a framework Document; ``_meta`` is the client's.
_RETRIEVE_OPTIONS = frozenset(field.name for field in msgspec.structs.fields(RetrieveParams)
                              ) - {"query", "meta", "encoding", "include_vectors"}
_INDEX_BATCH = 64
D = TypeVar("D")


class RetrievalError(Exception):
    """An RCP call of a retriever failed. ``code`` and ``data`` are the §12 error's
    (``None`` when the client refused the call before sending it, e.g. an option the
    engine does not advertise); the original exception is ``__cause__``."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        wire = rcp_error(error)
        self.code: int | None = wire.code if wire is not None else None
        self.data: dict[str, Any] | None = wire.data if wire is not None else None

    @property
    def is_invalid_request(self) -> bool:
        """True when the request itself was at fault (``-32602``, ``-32005``, ``-32003``,
        or refused locally), so retrying it unchanged cannot help."""
        return self.code in (None, -32602, -32005, -32003)


def rcp_error(error: BaseException) -> RcpError | None:
    """The §12 error behind ``error``: itself, or what made the client refuse a call
    locally (its gating raises :class:`UsageError` from the ``-32602``/``-32005`` the
    server would have sent); ``None`` for a refusal with no wire equivalent."""
    if isinstance(error, RcpError):
        return error
    cause = error.__cause__
    return cause if isinstance(cause, RcpError) else None


def check_client(client: Any) -> None:
    if not isinstance(client, _CLIENTS):
        raise TypeError("client must be an rcpkit Client or AsyncClient, e.g. "
                        "Client.connect_stdio(['rcpkit', 'serve', '--stdio'])")


@dataclass(frozen=True, slots=True)
class RetrieveSettings:
    """A retriever's ``retrieve`` settings (§7.7): ``options`` holds any other option by
    its client keyword (``candidate_k``, ``unit``…)."""

    k: int = 4
    mode: str | None = None
    filter: Any = None
    rerank: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError("k must be at least 1")
        _check_names(self.options)

    def kwargs(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments of ``client.retrieve``: these settings, then per-call overrides."""
        _check_names(overrides)
        merged: dict[str, Any] = {"k": self.k, "mode": self.mode, "filter": self.filter,
                                  "rerank": self.rerank, **self.options, **overrides}
        return {name: value for name, value in merged.items() if value is not None}


def _check_names(options: Mapping[str, Any]) -> None:
    unknown = sorted(set(options) - _RETRIEVE_OPTIONS)
    if unknown:
        raise TypeError(f"not a retrieve option (§7.7): {', '.join(unknown)}")


def unexpressible(what: str) -> ValueError:
    """The refusal for a framework setting §7.7/§8 cannot express: never silently dropped."""
    return ValueError(f"{what} cannot be expressed as an RCP retrieve (§7.7) or filter (§8) "
                      "option, so it is refused rather than ignored")


_MONGO_OPERATORS = {"$eq": "eq", "$ne": "ne", "$gt": "gt", "$gte": "gte", "$lt": "lt",
                    "$lte": "lte", "$in": "in", "$nin": "nin", "$exists": "exists",
                    "$contains": "contains"}


def operator_filter(spec: Any) -> dict[str, Any] | None:
    """A framework's filter as a §8 wire tree: a builder expression or §8 tree as given;
    a LangChain-style mapping (``{"lang": "en"}``, ``{"year": {"$gte": 2020}}``,
    ``{"$and": [...]}``, ``{"$or": [...]}``, ``{"$not": {...}}``) translated. Operators
    §8 lacks (``$like``, ``$regex``…) are refused."""
    if spec is None:
        return None
    if isinstance(spec, filters.Condition | filters.All | filters.AnyOf | filters.Not):
        return filters.to_wire(spec)
    if not isinstance(spec, Mapping) or not spec:
        raise ValueError(f"a filter is a non-empty mapping, got {spec!r}")
    if set(spec) <= {"field", "op", "value"} or (len(spec) == 1 and set(spec) <= {
            "and", "or", "not"}):
        return dict(spec)  # already §8
    nodes: list[dict[str, Any]] = []
    for key, value in spec.items():
        if key in ("$and", "$or"):
            if not isinstance(value, list) or not value:
                raise ValueError(f"{key} takes a non-empty list of filters")
            nodes.append({key[1:]: [operator_filter(item) for item in value]})
        elif key == "$not":
            nodes.append({"not": operator_filter(value)})
        elif key.startswith("$"):
            raise unexpressible(f"filter operator {key!r}")
        elif isinstance(value, Mapping):
            for operator, operand in value.items():
                if operator not in _MONGO_OPERATORS:
                    raise unexpressible(f"filter operator {operator!r} on {key!r}")
                nodes.append({"field": key, "op": _MONGO_OPERATORS[operator], "value": operand})
        else:
            nodes.append({"field": key, "op": "eq", "value": value})
    return nodes[0] if len(nodes) == 1 else {"and": nodes}


def retrieve_hits(client: Client | AsyncClient, query: str, kwargs: Mapping[str, Any],
                  error_type: type[RetrievalError]) -> list[Hit]:
    """A blocking ``retrieve``; RCP failures become ``error_type``."""
    if not isinstance(client, Client):
        raise TypeError("an AsyncClient serves the async API only (ainvoke / aretrieve); "
                        "pass a blocking rcpkit Client for blocking calls")
    try:
        return list(client.retrieve(query, **kwargs).hits)
    except (RcpError, UsageError) as exc:
        raise error_type(exc) from exc


async def aretrieve_hits(client: Client | AsyncClient, query: str, kwargs: Mapping[str, Any],
                         error_type: type[RetrievalError]) -> list[Hit]:
    """An async ``retrieve``: awaited on an AsyncClient (cancelling it cancels the request,
    §7.14); run in a worker thread with a blocking Client."""
    if isinstance(client, Client):
        return await asyncio.to_thread(retrieve_hits, client, query, kwargs, error_type)
    try:
        return list((await client.retrieve(query, **kwargs)).hits)
    except (RcpError, UsageError) as exc:
        raise error_type(exc) from exc


class DocumentIndexer(Generic[D]):
    """``index/add`` (§7.10) for one framework's documents, in batches; ``to_wire`` makes
    each a §7.10 document (keep its id: re-adding an id replaces, never duplicates)."""

    def __init__(self, to_wire: Callable[[D], Mapping[str, Any]],
                 error_type: type[RetrievalError]) -> None:
        self._to_wire = to_wire
        self._error_type = error_type

    def add(self, client: Client | AsyncClient, documents: Sequence[D], *,
            batch_size: int = _INDEX_BATCH, **options: Any) -> list[str]:
        """Add ``documents`` through a blocking Client; the engine's ids in input order.
        ``options`` go to ``index_add`` (``chunk=True``, ``contextual=True``)."""
        if not isinstance(client, Client):
            raise TypeError("an AsyncClient serves the async API only; use the async helper")
        ids: list[str] = []
        try:
            for batch in self._batches(documents, batch_size):
                ids += client.index_add(batch, **options).ids
        except (RcpError, UsageError) as exc:
            raise self._error_type(exc) from exc
        return ids

    async def aadd(self, client: Client | AsyncClient, documents: Sequence[D], *,
                   batch_size: int = _INDEX_BATCH, **options: Any) -> list[str]:
        """:meth:`add` for async callers (either client)."""
        if isinstance(client, Client):
            return await asyncio.to_thread(self.add, client, documents, batch_size=batch_size,
                                           **options)
        ids: list[str] = []
        try:
            for batch in self._batches(documents, batch_size):
                ids += (await client.index_add(batch, **options)).ids
        except (RcpError, UsageError) as exc:
            raise self._error_type(exc) from exc
        return ids

    def _batches(self, documents: Sequence[D], size: int) -> list[list[Mapping[str, Any]]]:
        if size < 1:
            raise ValueError("batch_size must be at least 1")
        wire = [self._to_wire(document) for document in documents]
        return [wire[start:start + size] for start in range(0, len(wire), size)]


def json_safe(value: Any) -> Any:
    """Framework metadata as JSON: containers kept, anything else (dates, paths, objects)
    as its string form. Non-finite floats stay: the frame encoder turns them into ``null``
    inside ``meta`` (§4.6)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(item) for item in value]
    return str(value)
