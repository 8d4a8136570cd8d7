"""``index/add`` (§7.10) and ``index/delete`` (§7.11); not served when read-only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rcpkit.binding.convert import documents_in, reply
from rcpkit.binding.errors import answering
from rcpkit.engine.core import Engine
from rcpkit.protocol.errors import InvalidParams
from rcpkit.protocol.types import (
    IndexAddParams,
    IndexAddResult,
    IndexDeleteParams,
    IndexDeleteResult,
)
from rcpkit.server import Context, Server

__all__ = ["TrustGrant", "register"]

_LOGGER = "rcpkit.engine"

TrustGrant = Callable[[str | None], str | None]
"""A caller (:attr:`Context.caller`) → the highest trust level its documents may carry
(§15.2), or None for the engine's own ``trust`` setting."""


def register(server: Server, engine: Engine, trust_grant: TrustGrant) -> None:
    def index_add(params: IndexAddParams, ctx: Context) -> dict[str, Any]:
        key = ctx.meta.get("idempotencyKey")
        if key is not None and not isinstance(key, str):
            raise InvalidParams("_meta.idempotencyKey must be a string",
                                field="_meta.idempotencyKey")
        result = engine.add(documents_in(params.documents), chunk=params.chunk,
                            contextual=params.contextual, idempotency_key=key,
                            max_trust=trust_grant(ctx.caller))
        server.stage_done(ctx, result.stage_seconds)
        if ctx.trace is not None:
            ctx.trace.annotate({"rcp.documents": len(result.ids), "rcp.chunks": result.chunks})
        ctx.log("info", f"indexed {len(result.ids)} documents ({result.chunks} chunks)",
                {"indexVersion": result.index_version}, logger=_LOGGER)
        return reply(IndexAddResult(ids=result.ids, chunks=result.chunks,
                                    meta={"indexVersion": result.index_version}))

    def index_delete(params: IndexDeleteParams, ctx: Context) -> dict[str, Any]:
        result = engine.delete(params.ids)
        if ctx.trace is not None:
            ctx.trace.annotate({"rcp.documents": result.deleted})
        ctx.log("info", f"deleted {result.deleted} documents",
                {"indexVersion": result.index_version}, logger=_LOGGER)
        return reply(IndexDeleteResult(deleted=result.deleted,
                                       meta={"indexVersion": result.index_version}))

    server.add_method("index/add", answering(index_add))
    server.add_method("index/delete", answering(index_delete))
    # A pipelined write must not commit before an earlier one (§7.10): the engine's write
    # lock serialises writes but grants them in no particular order.
    server.in_arrival_order("index/add", "index/delete")
