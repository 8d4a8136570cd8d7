"""``retrieve`` (§7.7) with progress (§9), paging (§10), ``rewrite`` (§7.8) and the
hierarchical units (§7.7.2, served by :mod:`rcpkit.binding.units`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rcpkit.binding.convert import reply, search_request, wire_hit, wire_usage
from rcpkit.binding.errors import answering
from rcpkit.binding.units import HIERARCHICAL_UNITS, UnitRetriever
from rcpkit.engine.core import Engine
from rcpkit.engine.search.rewrite import Rewriter
from rcpkit.engine.types import Hit
from rcpkit.protocol.types import RetrieveParams, RetrieveResult
from rcpkit.server import Context, Server

__all__ = ["Knowledge", "register"]

_LOGGER = "rcpkit.engine"


@dataclass(frozen=True, slots=True)
class Knowledge:
    """What ``retrieve`` runs through for ``rewrite`` and for the hierarchical units."""

    rewriter: Rewriter
    units: UnitRetriever


def register(server: Server, engine: Engine, knowledge: Knowledge | None) -> None:
    server.add_method("retrieve", answering(_Retrieve(server, engine, knowledge)))


class _Retrieve:
    def __init__(self, server: Server, engine: Engine, knowledge: Knowledge | None) -> None:
        self._server = server
        self._engine = engine
        self._knowledge = knowledge
        self._default_rerank = next(iter(engine.describe().rerank_methods), None)

    def __call__(self, params: RetrieveParams, ctx: Context) -> dict[str, Any]:
        # Gating admits these units only when advertised, i.e. with the knowledge components.
        if self._knowledge is not None and params.unit in HIERARCHICAL_UNITS:
            return self._knowledge.units.retrieve(params, ctx)
        request = search_request(params, ctx.caller, ctx.filter, self._default_rerank)
        encoding = params.encoding or "json"

        def progress(stage: str, fraction: float, partial: list[Hit] | None) -> None:
            ctx.progress(fraction, stage=stage, partial={
                "hits": [reply(wire_hit(h, encoding)) for h in partial]}
                if partial else None)

        def stopped() -> bool:
            return ctx.cancelled or ctx.remaining_ms == 0.0

        method = params.rewrite_method
        # Partial hits cost a record read and hit construction: only when someone listens.
        listener = progress if ctx.reports_progress else None
        # Gating admits a rewrite only when ``transform`` is advertised, i.e. with a rewriter.
        result = (self._knowledge.rewriter.search(request, method, progress=listener,
                                                  cancelled=stopped)
                  if method is not None and self._knowledge is not None
                  else self._engine.search(request, progress=listener, cancelled=stopped))
        self._server.stage_done(ctx, result.stage_seconds)
        if ctx.trace is not None:
            ctx.trace.annotate({"rcp.mode": request.mode, "rcp.k": request.k,
                                "rcp.hits": len(result.hits), "rcp.rewrite": method,
                                "rcp.rerank": request.rerank and request.rerank.method,
                                "rcp.query": request.query if ctx.trace.bodies else None})
        usage = wire_usage(result.usage, ctx.notes)
        ctx.log("debug", f"retrieve returned {len(result.hits)} hits",
                {"mode": request.mode, "candidates": result.usage.candidates,
                 "latencyMs": usage.latency_ms}, logger=_LOGGER)
        return reply(RetrieveResult(hits=[wire_hit(hit, encoding) for hit in result.hits],
                                    index_version=result.index_version, usage=usage,
                                    next_cursor=result.next_cursor))
