"""Who wrote what, and when (§15.3): provenance kept in each document's metadata.

Every ``index/add`` through a collection is stamped with ``written_by`` (the principal) and
``written_at`` (epoch seconds); ``source`` is the writer's own (a feed, a file: folder
indexing sets it). Metadata is chosen over a table of its own because it is the one place
both stores (SQLite and PostgreSQL) already keep per document, reindexing rebuilds the
indexes *from* it, a document's provenance goes with it when it is replaced or deleted,
and the §8 filters select by it — ``provenance list|purge`` is a filter and a delete. The
server overwrites any ``written_by``/``written_at`` a caller sends, so they cannot be forged.
The engine leaves them out of a document's content hash: re-adding unchanged content
writes nothing (nor embeds it again, as ``index sync`` relies on) and keeps its first stamp.

The poison policy (§7.16, §15.3) counts ``poisonSuspected`` reports per document and, with
thresholds the operator sets, quarantines a whole source (engine.feedback). The operator
sees every source's standing (``Engine.poison_state``), clears a vetted one
(:func:`source_label`, ``Engine.clear_poison``) or revokes a tainted one with one purge.
Reports stay advisory: nothing is deleted on a reporter's word.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ..engine import Engine
from ..engine.types import WRITE_STAMP
from ..protocol.errors import UsageError
from ..protocol.types import IndexAddParams
from ..server.context import Context
from ..server.framework import Server

__all__ = ["SOURCE", "WRITTEN_AT", "WRITTEN_BY", "Written", "purge", "source_label", "stamp",
           "stamp_writes", "written"]

WRITTEN_BY, WRITTEN_AT = WRITE_STAMP
SOURCE = "source"


def stamp(meta: Mapping[str, Any] | None, principal: str, now: float) -> dict[str, Any]:
    """``meta`` with the writer and the time of the write."""
    return {**(meta or {}), WRITTEN_BY: principal, WRITTEN_AT: int(now)}


def stamp_writes(server: Server, principal_of: Callable[[str | None], str],
                 clock: Callable[[], float] = time.time) -> None:
    """Make ``server``'s ``index/add`` stamp every document with the caller's principal
    (``principal_of(ctx.caller)``) before the engine sees it."""
    handler = server.handlers.get("index/add")
    if handler is None:
        return
    if handler.is_async:
        raise UsageError("stamp_writes wraps a synchronous index/add handler")
    write = handler.fn

    def index_add(params: IndexAddParams, ctx: Context) -> Any:
        principal, now = principal_of(ctx.caller), clock()
        documents = [msgspec.structs.replace(d, meta=stamp(d.meta, principal, now))
                     for d in params.documents]
        return write(msgspec.structs.replace(params, documents=documents), ctx)

    server.add_method("index/add", index_add)


@dataclass(frozen=True)
class Written:
    """One live document and its provenance."""

    doc_id: str
    written_by: str | None
    written_at: int | None
    source: str | None


def _selection(principal: str | None, source: str | None) -> dict[str, Any]:
    conditions = [{"field": field, "op": "eq", "value": value}
                  for field, value in ((WRITTEN_BY, principal), (SOURCE, source))
                  if value is not None]
    if not conditions:
        raise UsageError("name a principal, a source or both")
    return conditions[0] if len(conditions) == 1 else {"and": conditions}


def written(engine: Engine, *, principal: str | None = None,
            source: str | None = None) -> list[Written]:
    """The live documents ``principal`` and/or ``source`` wrote, by id."""
    found = engine.documents_where(_selection(principal, source))
    return [Written(doc_id, _text(meta.get(WRITTEN_BY)), _number(meta.get(WRITTEN_AT)),
                    _text(meta.get(SOURCE)))
            for doc_id, meta in sorted(found.items())]


def purge(engine: Engine, documents: Sequence[Written]) -> int:
    """Delete ``documents`` (in batches the engine accepts); the number deleted."""
    ids = [document.doc_id for document in documents]
    step = engine.config.requests.max_documents_per_add
    return sum(engine.delete(ids[start:start + step]).deleted
               for start in range(0, len(ids), step))


def source_label(*, principal: str | None, source: str | None) -> str:
    """The poison policy's label of one source (engine.feedback): ``source:<meta.source>``
    or ``written_by:<principal>``."""
    if (principal is None) == (source is None):
        raise UsageError("name a principal or a source")
    return f"{SOURCE}:{source}" if source is not None else f"{WRITTEN_BY}:{principal}"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
