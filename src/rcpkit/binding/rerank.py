"""``rerank`` (§7.6), as peers expect: ``scores`` aligned with the input, ``order`` and
``results`` best first (cut at ``topN``)."""

from __future__ import annotations

from typing import Any

from rcpkit.binding.convert import reply
from rcpkit.binding.embed import texts
from rcpkit.binding.errors import answering
from rcpkit.engine.core import Engine
from rcpkit.protocol.content import plain_text
from rcpkit.protocol.types import RerankParams, RerankResult
from rcpkit.server import Context, Server

__all__ = ["register"]


def register(server: Server, engine: Engine, default_method: str) -> None:
    def rerank(params: RerankParams, ctx: Context) -> dict[str, Any]:
        scores = engine.rerank(plain_text(params.query, "query"),
                               texts(params.passages, "passages"),
                               params.method or default_method)
        return reply(RerankResult.from_scores(scores.tolist(), top_n=params.top_n))

    server.add_method("rerank", answering(rerank))
