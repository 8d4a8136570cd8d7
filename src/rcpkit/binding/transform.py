"""``query/transform`` (§7.8) served from
:class:`~rcpkit.engine.knowledge.transform.QueryTransformer`; ``transform.maxN`` is
advertised (§15.5: ``n`` above it is -32602)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rcpkit.binding.convert import reply
from rcpkit.binding.errors import answering
from rcpkit.binding.graph import required_query
from rcpkit.engine.core import Engine
from rcpkit.protocol.errors import InvalidParams
from rcpkit.protocol.types import TransformParams, TransformResult
from rcpkit.server import Context, Server

if TYPE_CHECKING:
    from rcpkit.engine.knowledge.transform import QueryTransformer

__all__ = ["register"]


def register(server: Server, engine: Engine, transformer: QueryTransformer,
             methods: tuple[str, ...]) -> None:
    server.capability("transform", {"methods": list(methods), "maxN": transformer.max_n})

    def transform(params: TransformParams, ctx: Context) -> dict[str, Any]:
        query = required_query(params.query)
        if params.n is not None and params.n > transformer.max_n:
            raise InvalidParams(f"n must be at most {transformer.max_n}", field="n")
        done = transformer.transform(query, params.method, params.n, engine.snapshot())
        return reply(TransformResult(queries=done.queries, hypothetical=done.hypothetical))

    server.add_method("query/transform", answering(transform))
