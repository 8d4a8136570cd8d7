"""``memory/build`` and ``memory/recall`` (§7.17) served from
:class:`~rcpkit.engine.knowledge.memory.KnowledgeMemory`, over the engine's concept graph.

Advertised as ``memory: {scopes, clues: true}`` with the bounds beside the spec's keys
(§15.5): ``maxN`` (``n`` above it is -32602), ``maxDocuments`` (inline documents per
build) and ``maxInlineBytes`` (UTF-8 bytes of inline text a memory keeps, an update's
included; past it -32602 naming ``documents``). A build stops at a cancel (-32006) or its
deadline (-32014) and then stores nothing. A ``scope`` outside ``scopes`` is refused by
gating (-32005). An unknown ``memoryId`` — or another caller's ``session`` memory — is -32015.
``memory/recall`` without a ``memoryId`` uses the caller's latest memory (its own session
memory first, then a global one); ``sessionId`` is accepted and does not change the answer
(a session memory belongs to the caller that built it). Recall answers ``clues`` and draft
``hits``; a memory of the live index names the
``indexVersion`` it was built at in ``_meta``, and its draft hits are the chunks of that
memory still visible now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rcpkit.binding.convert import reply, wire_hit
from rcpkit.binding.errors import answering
from rcpkit.engine.core import Engine
from rcpkit.engine.search.stages import record_hit
from rcpkit.protocol.errors import InvalidParams
from rcpkit.protocol.types import MemoryBuildParams, MemoryRecallParams
from rcpkit.server import Context, Server

if TYPE_CHECKING:
    from rcpkit.engine.knowledge.graph import ConceptGraph
    from rcpkit.engine.knowledge.graph.view import GraphView
    from rcpkit.engine.knowledge.memory import KnowledgeMemory, Recall

__all__ = ["register"]

MAX_CLUES = 20
_DEFAULT_CLUES = 5


def register(server: Server, engine: Engine, graph: ConceptGraph) -> None:
    """Serve §7.17 on ``server``; the memory file stays open for the engine's lifetime.
    Called only once the ``graph`` extra imported (the memory is built on the concept
    graph), so its engine module is imported here, not with this one."""
    from rcpkit.engine.knowledge.memory import MEMORY_SCOPES, KnowledgeMemory

    def live_view() -> tuple[GraphView, str]:
        seq = engine.snapshot()
        return graph.view(seq), engine.version_token(seq)

    config = engine.config
    memory = KnowledgeMemory.open(config.data_dir, engine.store, graph.extractor, live_view,
                                  max_inline_bytes=config.memory.max_inline_bytes,
                                  retention_seconds=config.memory.retention_seconds,
                                  max_count=config.memory.max_count, clock=engine.clock)
    handlers = _MemoryHandlers(engine, memory)
    server.capability("memory", {"scopes": list(MEMORY_SCOPES), "clues": True,
                                 "maxN": MAX_CLUES,
                                 "maxDocuments": config.requests.max_batch_inputs,
                                 "maxInlineBytes": config.memory.max_inline_bytes})
    server.add_method("memory/build", answering(handlers.build))
    server.add_method("memory/recall", answering(handlers.recall))


class _MemoryHandlers:
    def __init__(self, engine: Engine, memory: KnowledgeMemory) -> None:
        self.engine = engine
        self.memory = memory

    def build(self, params: MemoryBuildParams, ctx: Context) -> dict[str, Any]:
        documents = None
        if params.documents is not None:
            most = self.engine.config.requests.max_batch_inputs
            if len(params.documents) > most:
                raise InvalidParams(f"at most {most} documents per build", field="documents")
            for index, document in enumerate(params.documents):
                if not document.text.strip():
                    raise InvalidParams("a document needs text",
                                        field=f"documents[{index}].text")
            documents = [(d.id, d.text) for d in params.documents]
        memory_id, tokens = self.memory.build(documents, memory_id=params.memory_id,
                                              scope=params.scope, caller=ctx.caller)
        return {"memoryId": memory_id, "tokens": tokens}

    def recall(self, params: MemoryRecallParams, ctx: Context) -> dict[str, Any]:
        if not params.query.strip():
            raise InvalidParams("recall needs a non-empty query", field="query")
        if params.n is not None and params.n > MAX_CLUES:
            raise InvalidParams(f"n must be at most {MAX_CLUES}", field="n")
        recalled = self.memory.recall(params.query, memory_id=params.memory_id,
                                      caller=ctx.caller, n=params.n or _DEFAULT_CLUES)
        meta: dict[str, Any] = {"memoryId": recalled.memory_id}
        if recalled.version is not None:
            meta["indexVersion"] = recalled.version
        return {"clues": [{"query": c.query, "seedIds": c.seed_ids, "weight": c.weight}
                          for c in recalled.clues],
                "hits": self._hits(recalled), "_meta": meta}

    def _hits(self, recalled: Recall) -> list[dict[str, Any]]:
        rowids = [d.rowid for d in recalled.drafts if d.rowid is not None]
        visible = set(self.engine.store.visible_rowids(self.engine.snapshot()).tolist()) \
            if rowids else set()
        records = self.engine.store.chunks([r for r in rowids if r in visible])
        hits = []
        for draft in recalled.drafts:
            if draft.rowid is None:
                hits.append({"id": draft.id, "score": draft.score, "unit": "chunk",
                             "text": draft.text,
                             "meta": {"memoryId": recalled.memory_id}})
            elif draft.rowid in records:
                hits.append(reply(wire_hit(record_hit(records[draft.rowid], draft.score))))
        return hits
