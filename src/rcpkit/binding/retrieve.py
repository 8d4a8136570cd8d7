"""``retrieve`` (§7.7) with progress (§9), paging (§10) and ``rewrite`` (§7.8)."""

from __future__ import annotations

from typing import Any

from rcpkit.binding.convert import reply, search_request, wire_hit, wire_usage
from rcpkit.binding.errors import answering
from rcpkit.engine.core import Engine
from rcpkit.engine.search.rewrite import Rewriter
from rcpkit.engine.types import Hit
from rcpkit.protocol.types import RetrieveParams, RetrieveResult
from rcpkit.server import Context, Server

__all__ = ["register"]

_LOGGER = "rcpkit.engine"


def register(server: Server, engine: Engine, rewriter: Rewriter | None) -> None:
    server.add_method("retrieve", answering(_Retrieve(engine, rewriter)))


class _Retrieve:
    def __init__(self, engine: Engine, rewriter: Rewriter | None) -> None:
        self._engine = engine
        self._rewriter = rewriter
        self._default_rerank = next(iter(engine.describe().rerank_methods), None)

    def __call__(self, params: RetrieveParams, ctx: Context) -> dict[str, Any]:
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
        result = (self._rewriter.search(request, method, progress=listener, cancelled=stopped)
                  if method is not None and self._rewriter is not None
                  else self._engine.search(request, progress=listener, cancelled=stopped))
        usage = wire_usage(result.usage, ctx.notes)
        ctx.log("debug", f"retrieve returned {len(result.hits)} hits",
                {"mode": request.mode, "candidates": result.usage.candidates,
                 "latencyMs": usage.latency_ms}, logger=_LOGGER)
        return reply(RetrieveResult(hits=[wire_hit(hit, encoding) for hit in result.hits],
                                    index_version=result.index_version, usage=usage,
                                    next_cursor=result.next_cursor))
