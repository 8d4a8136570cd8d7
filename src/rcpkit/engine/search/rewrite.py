"""``retrieve`` with ``rewrite`` (§7.7, §7.8): the query goes through the same transform as
``query/transform`` first. One resulting query (``rewrite``; ``hyde``, whose passage is the
query) is searched as usual; several (``multi-query``, ``decompose``, ``step-back``) are
searched at one snapshot and fused by RRF, without a cursor (§10: the fused ranking has no
single query to page through)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import msgspec

from rcpkit import fusion
from rcpkit.engine.errors import InvalidInput
from rcpkit.engine.search.searcher import Progress
from rcpkit.engine.types import SearchRequest, SearchResult

if TYPE_CHECKING:
    from rcpkit.engine.core import Engine
    from rcpkit.engine.knowledge.transform import QueryTransformer

__all__ = ["Rewriter"]


class Rewriter:
    """Searches through a query transform (see the module docstring)."""

    def __init__(self, engine: Engine, transformer: QueryTransformer) -> None:
        self._engine = engine
        self._transformer = transformer

    def search(self, request: SearchRequest, method: str, *, progress: Progress | None = None,
               cancelled: Callable[[], bool] | None = None) -> SearchResult:
        done = self._transformer.transform(request.query, method, None,
                                           self._engine.snapshot(request.index_version))
        queries = [done.hypothetical] if done.hypothetical else done.queries
        if len(queries) == 1:
            return self._engine.search(replace(request, query=queries[0]), progress=progress,
                                       cancelled=cancelled)
        if request.cursor is not None:
            raise InvalidInput(f"rewrite {method!r} fuses several queries and has no pages",
                               field="cursor")
        first = self._engine.search(replace(request, query=queries[0]), cancelled=cancelled)
        pinned = replace(request, index_version=first.index_version)
        results = [first, *(self._engine.search(replace(pinned, query=query),
                                                cancelled=cancelled) for query in queries[1:])]
        hits = {hit.id: hit for result in reversed(results) for hit in result.hits}
        fused = fusion.rrf([[(hit.id, hit.score) for hit in result.hits] for result in results])
        note = f"rewrite {method}: {len(queries)} queries fused by RRF"
        return SearchResult(
            hits=[msgspec.structs.replace(hits[item.key], score=item.score)
                  for item in fused[:request.k]],
            index_version=first.index_version,
            usage=replace(first.usage, notes=(*first.usage.notes, note)),
            stage_seconds=tuple(stage for result in results for stage in result.stage_seconds))
