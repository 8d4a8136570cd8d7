"""The engine served over RCP, exactly as a user's own engine would be: a
:class:`~rcpkit.server.Server` whose capabilities (§6, §6.1) come from
:meth:`Engine.describe` — only what is configured is advertised — with one handler module
per §7 surface. The engine is synchronous, so every handler is a plain function the
framework runs in a worker thread.

The server is multi-process safe (``rcpkit serve --http --workers N``, or several servers on
one PostgreSQL database): the engine refreshes from the shared record before every request,
and the advertised ``filter`` fields follow each published version.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcpkit import __version__
from rcpkit.binding import (
    embed,
    feedback,
    graph,
    index,
    memory,
    rerank,
    retrieve,
    transform,
    units,
)
from rcpkit.binding.capabilities import capabilities, conformance, filter_capability
from rcpkit.engine.config import EngineConfig
from rcpkit.engine.core import Engine, open_engine
from rcpkit.engine.errors import EngineError, Unavailable
from rcpkit.engine.knowledge.llm import open_language_model
from rcpkit.engine.models.embedding import minilm_files
from rcpkit.engine.models.sparse import SparseEncoder
from rcpkit.engine.search.rewrite import Rewriter
from rcpkit.engine.types import SearchRequest
from rcpkit.protocol.errors import UsageError
from rcpkit.server import Server
from rcpkit.server.framework import Conformance

if TYPE_CHECKING:
    from rcpkit.engine.knowledge.graph import ConceptGraph

__all__ = ["SERVER_NAME", "bind", "build_server", "grant_trust", "served_engine"]

SERVER_NAME = "rcpkit-engine"


def build_server(config_or_data_dir: EngineConfig | str | Path | None = None,
                 **options: Any) -> Server:
    """Open the engine and serve it: ``rcpkit serve --data DIR`` calls ``build_server(DIR)``.

    ``options`` are tables of :class:`EngineConfig` settings overriding the data
    directory's ``rcpkit.toml`` (``store={"backend": "postgres"}``). The engine's indexes
    are saved when the process exits normally.
    """
    try:
        engine = open_engine(config_or_data_dir, **options)
    except EngineError as exc:
        raise UsageError(exc.message) from exc
    atexit.register(engine.close)
    return bind(engine)


def bind(engine: Engine, sparse: SparseEncoder | None = None) -> Server:
    """A :class:`Server` over an already open ``engine`` (its lifetime stays with the caller)."""
    encoder = sparse or _sparse_encoder()
    described = engine.describe()
    caps = capabilities(described, encoder.identity if encoder is not None else None)
    server = _EngineServer(engine, conformance(caps))
    for key, meta in caps.items():
        server.capability(key, meta)
    retrieve.register(server, engine, _bind_knowledge(server, engine))
    embed.register(server, engine, encoder)
    if "index" in caps:
        index.register(server, engine, server.trust_grant)
    feedback.register(server, engine)
    if described.rerank_methods:
        rerank.register(server, engine, described.rerank_methods[0])
    return server


def grant_trust(server: Server, grant: index.TrustGrant) -> None:
    """Let the operator's ``grant(caller)`` raise (or lower) the highest trust level each
    caller's ``index/add`` may name above the engine's ``trust`` setting (§15.2). Only the
    engine's own server has that setting: any other keeps its own rules."""
    if isinstance(server, _EngineServer):
        server.grant = grant


def served_engine(server: Server,
                  gauges: Callable[[], Mapping[str, float]] | None = None) -> Engine | None:
    """The engine ``server`` serves (None for any other server), for what runs beside it
    (``serve --watch``), whose ``gauges`` then join the server's metrics."""
    if not isinstance(server, _EngineServer):
        return None
    if gauges is not None:
        server.gauge_sources.append(gauges)
    return server.engine


def _bind_knowledge(server: Server, engine: Engine) -> retrieve.Knowledge | None:
    """Serve ``graph``, ``query/transform`` and memory (§7.17) and advertise the hierarchical
    ``retrieve`` units when the ``graph`` extra (scipy, igraph) is installed; returns what
    ``retrieve`` runs through for ``rewrite`` and those units. The graph opens beside the
    record (``graph.sqlite``, or tables in its PostgreSQL schema), follows every published
    version, and stays open for the engine's lifetime; a configured language model
    (``llm_url``) writes ``hyde`` passages and ``global`` summaries when asked."""
    try:
        from rcpkit.engine.knowledge.graph import ConceptGraph
        from rcpkit.engine.knowledge.transform import TRANSFORM_METHODS, QueryTransformer
    except ImportError:
        return None
    concepts: ConceptGraph = ConceptGraph.open(engine.config.data_dir, engine.store)
    engine.on_publish(concepts.sync)

    def top_texts(query: str, k: int) -> list[str]:
        found = engine.search(SearchRequest(query=query, k=k, mode="sparse"))
        return [hit.text for hit in found.hits if hit.text]

    model = open_language_model(engine.config)
    transformer = QueryTransformer(concepts, top_texts, model=model)
    graph.register(server, engine, concepts, model)
    transform.register(server, engine, transformer, TRANSFORM_METHODS)
    memory.register(server, engine, concepts)
    return retrieve.Knowledge(Rewriter(engine, transformer),
                              units.register(server, engine, concepts))


def _sparse_encoder() -> SparseEncoder | None:
    """``embed/sparse`` needs the bundled WordPiece vocabulary; without it, not advertised."""
    try:
        return SparseEncoder(minilm_files()[1])
    except Unavailable:
        return None


class _EngineServer(Server):
    """The engine's :class:`Server`, safe to run in several processes on one record.

    Before gating a stateless request (§8 filter fields included) the dispatcher calls
    :meth:`refresh`, which brings the engine up to date with the shared record (one small
    query when nothing changed); every published version re-advertises the ``filter``
    fields, so a field first written through another process is accepted by the very next
    request. A stateful session keeps the set it was initialized with (§13.2).
    """

    def __init__(self, engine: Engine, level: Conformance) -> None:
        self._engine = engine
        super().__init__(SERVER_NAME, __version__, level)
        self.multiprocess_safe = True
        self.grant: index.TrustGrant | None = None
        """The operator's trust grants (:func:`grant_trust`); None: nobody holds one."""
        self.gauge_sources: list[Callable[[], Mapping[str, float]]] = []
        """More gauges to report, e.g. a folder watcher's progress (``serve --watch``)."""
        engine.on_publish(self._advertise_filter_fields)

    @property
    def engine(self) -> Engine:
        return self._engine

    def trust_grant(self, caller: str | None) -> str | None:
        return None if self.grant is None else self.grant(caller)

    def refresh(self) -> None:
        self._engine.refresh()

    def gauges(self) -> dict[str, float]:
        """Corpus and index sizes, and whether a background index build is running."""
        sizes = {name: float(value) for name, value in self._engine.stats().items()
                 if isinstance(value, int | float) and not isinstance(value, bool)}
        sizes["index_build_running"] = 0.0 if self._engine.wait_for_indexes(0) else 1.0
        for source in self.gauge_sources:
            sizes.update(source())
        return sizes

    def _advertise_filter_fields(self) -> None:
        # Runs under the engine's write lock, on every published version.
        described = self._engine.describe()
        refreshed = filter_capability(described.filter_fields, described.filter_operators)
        if self.capabilities.get("filter") != refreshed:
            self.capability("filter", refreshed)
