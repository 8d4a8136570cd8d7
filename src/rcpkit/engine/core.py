"""The retrieval engine (§3, §7.7), independent of any protocol binding.

:class:`Engine` is a facade over small components sharing one
:class:`~rcpkit.engine.store.Store` (the system of record):

- :class:`~rcpkit.engine.writer.Writer` — serialised, idempotent writes (§7.10, §7.11),
  published only once their rows are in every index, and the bookkeeping retention;
- :class:`~rcpkit.engine.snapshots.Snapshots` — published versions (§7.7.1) and the refresh
  that takes in what other processes sharing the record wrote;
- :class:`~rcpkit.engine.indexes.derived.DerivedIndexes` — lexical, dense and filter-column
  indexes keyed by the store's chunk rowids, saved and reconciled with the record; a store
  that searches by itself (PostgreSQL with ``pg_recall = "database"``) replaces them;
- :class:`~rcpkit.engine.search.searcher.Searcher` — the pipeline over one
  :class:`~rcpkit.engine.search.recall.Recall`, with cursors (§10) and sessions (§7.7.3);
- :class:`~rcpkit.engine.feedback.Feedback` — signals and the poison policy (§7.16).

Thread safety: any number of concurrent reads; writes serialise on a lock and mutate the
indexes under the exclusive side of a readers/writer lock. ``sessionId`` dedup state is kept
per process: a shared table would cost a durable write per retrieve, so with several workers
a session's dedup covers the requests its worker answered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rcpkit.engine.config import EmbedderConfig, EngineConfig, load_config
from rcpkit.engine.errors import ConfigError, InvalidInput, Unavailable, Unsupported
from rcpkit.engine.feedback import Feedback, Poisoned
from rcpkit.engine.indexes.derived import DerivedIndexes
from rcpkit.engine.models.embedcache import CachedEmbedder
from rcpkit.engine.models.embedding import (
    MINILM_HEAD_IDENTITY,
    Embedder,
    HashingEmbedder,
    OnnxEmbedder,
    check_kind,
    minilm,
)
from rcpkit.engine.models.rerank import CrossEncoderReranker, LateInteractionReranker, Reranker
from rcpkit.engine.search.cursors import Cursors
from rcpkit.engine.search.planner import FUSION_METHODS, MODES, UNITS, Planner, checked_filter
from rcpkit.engine.search.recall import DatabaseRecall, MemoryRecall, Recall
from rcpkit.engine.search.searcher import Progress, Searcher
from rcpkit.engine.search.sessions import Sessions
from rcpkit.engine.snapshots import Snapshots
from rcpkit.engine.store import DatabaseSearch, SqliteStore, Store
from rcpkit.engine.types import (
    AddResult,
    DeleteResult,
    DocumentIn,
    EngineDescription,
    FeedbackSignal,
    SearchRequest,
    SearchResult,
)
from rcpkit.engine.writer import Writer
from rcpkit.protocol.filters import OPERATORS

__all__ = ["Engine", "open_engine"]

logger = logging.getLogger(__name__)


class Engine:
    """Hybrid retrieval over a durable store; see the module docstring."""

    def __init__(self, config: EngineConfig, store: Store, embedder: Embedder,
                 rerankers: Mapping[str, Reranker], *,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._clock = clock
        """Epoch seconds for retention (snapshots, keys, log), recency decay and session
        expiry; tests inject one."""
        self._store = store
        self._embedder = embedder
        self._rerankers = dict(rerankers)
        write_lock = threading.Lock()
        self._write_lock = write_lock
        database = (store if config.store.pg_recall == "database"
                    and isinstance(store, DatabaseSearch) else None)
        indexes = None
        recall: Recall
        if database is not None:
            recall = DatabaseRecall(database)
        else:
            indexes = DerivedIndexes(config, store, embedder)
            recall = MemoryRecall(indexes)
        self.indexes = indexes
        """None when the store searches by itself: no index is built, caught up or saved."""
        self._feedback = Feedback(store, threshold=config.poison.threshold,
                                  max_signals=config.requests.max_batch_inputs,
                                  source_threshold=config.poison.source_threshold,
                                  source_thresholds=config.poison.source_thresholds)
        self.snapshots = Snapshots(store, indexes, self._feedback, write_lock)
        self.writer = Writer(config, store, embedder, self.snapshots, indexes, write_lock, clock)
        cursors = Cursors(store.secret)
        self.searcher = Searcher(
            config, store, embedder, self._rerankers, recall, self.snapshots,
            Planner(config, self._rerankers, cursors, self._feedback, clock), cursors,
            Sessions(config.retention.session_ttl_seconds, clock))
        self._check_embedder()
        if self.indexes is not None:
            self.indexes.load()

    def _check_embedder(self) -> None:
        """Stored vectors are only meaningful for the embedder that made them."""
        recorded = self._store.setting("embedder")
        if recorded is None:
            self._store.set_setting("embedder", self._embedder.identity)
        elif recorded != self._embedder.identity:
            self._store.close()
            raise Unavailable(f"this data directory was indexed with embedder "
                              f"{recorded!r}, not {self._embedder.identity!r}")

    # ── lifecycle ──────────────────────────────────────────────────────────

    @classmethod
    def open(cls, config: EngineConfig, *, embedder: Embedder | None = None,
             store: Store | None = None, clock: Callable[[], float] = time.time) -> Engine:
        """Open (or create) the engine and reconcile its indexes with the record.

        The record is ``store`` when given (e.g. a PostgreSQL backend), else the one
        ``config`` names; derived indexes always live in ``data_dir``. ``clock`` (epoch
        seconds) drives the retention windows, recency and session expiry.
        """
        chosen = embedder or _make_embedder(config.embedder)
        store = store or _open_store(config)
        if embedder is None and config.embedder.name == "minilm":
            chosen = _minilm_of_record(chosen, store)
        if config.embedder.cache is not None:
            chosen = CachedEmbedder(chosen, config.embedder.cache)
        rerank = config.rerank
        rerankers: dict[str, Reranker] = {}
        colbert = LateInteractionReranker(chosen, passage_tokens=rerank.passage_tokens,
                                          cache_bytes=rerank.cache_bytes)
        rerankers[colbert.method] = colbert
        if rerank.cross_encoder_model_path and rerank.cross_encoder_tokenizer_path:
            # Advertised only when a real model is configured (no registry ships one).
            cross = CrossEncoderReranker(
                rerank.cross_encoder_model_path, rerank.cross_encoder_tokenizer_path,
                identity=f"onnx:{Path(rerank.cross_encoder_model_path).name}")
            rerankers[cross.method] = cross
        return cls(config, store, chosen, rerankers, clock=clock)

    def wait_for_indexes(self, timeout: float | None = None) -> bool:
        """Block until background index work (the dense graph build) is done, or ``timeout``
        seconds pass; True when none is left. Searches never need this — exact search serves
        meanwhile — but a bulk load that waits before :meth:`close` saves the graph with the
        rows, so the next process starts on it instead of building it again."""
        return self.indexes is None or self.indexes.dense.wait_for_graph(timeout)

    def close(self, *, save: bool = True) -> None:
        """Stop background index work, persist the derived indexes (unless ``save`` is off:
        a read-only command writes nothing; and if the disk takes them) and close the store."""
        with self._write_lock:
            if self.indexes is not None:
                self.indexes.close()
                try:
                    if save:
                        self.indexes.save()
                except OSError as exc:  # a full disk: the record still holds every write
                    logger.warning("the indexes were not saved (%s); the next start catches "
                                   "them up from the record", exc)
            self._store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ── versions ───────────────────────────────────────────────────────────

    def version_token(self, seq: int) -> str:
        """The opaque §7.7.1 ``indexVersion`` for a sequence number of this database."""
        return self.snapshots.token(seq)

    @property
    def index_version(self) -> str:
        """The latest published snapshot."""
        return self.snapshots.token(self.snapshots.published)

    def snapshot(self, index_version: str | None = None) -> int:
        """The version a read pinned to ``index_version`` (default: the latest) sees;
        :class:`~rcpkit.engine.errors.SnapshotUnavailable` when it cannot be served."""
        return self.snapshots.resolve(index_version)

    @property
    def clock(self) -> Callable[[], float]:
        """The engine's clock (epoch seconds), for components keeping their own retention."""
        return self._clock

    @property
    def store(self) -> Store:
        """The system of record, for components deriving their own indexes from it."""
        return self._store

    def refresh(self) -> bool:
        """Take in writes and feedback committed by other processes sharing the record."""
        return self.snapshots.refresh()

    def on_publish(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever a new version is published (own write or refresh)."""
        self.snapshots.on_publish(listener)

    # ── writes ─────────────────────────────────────────────────────────────

    def add(self, documents: Sequence[DocumentIn], *, chunk: bool = False,
            contextual: bool = False, idempotency_key: str | None = None,
            embedded: Callable[[int, int], None] | None = None,
            max_trust: str | None = None) -> AddResult:
        """§7.10 upsert; returns after the write is committed and published.
        ``embedded(done, total)`` reports passages embedded so far. ``max_trust`` is the
        writer's grant: the highest ``trust`` its documents may name (None: the configured
        ``trust``; a higher one is refused, §15.2)."""
        return self.writer.add(documents, chunk=chunk, contextual=contextual,
                               idempotency_key=idempotency_key, embedded=embedded,
                               max_trust=max_trust)

    def delete(self, ids: Sequence[str]) -> DeleteResult:
        """§7.11: idempotent; counts only documents this call removed."""
        return self.writer.delete(ids)

    def documents_where(self, tree: Any) -> dict[str, Mapping[str, Any]]:
        """The live documents matching the §8 filter ``tree`` (id → metadata) at the latest
        version; none when the tree names a field no document has."""
        self.refresh()
        try:
            node = checked_filter(tree, self.snapshots.schema)
        except InvalidInput:
            return {}
        records = self._store.chunks(
            self._store.filter_rowids(node, self.snapshots.published).tolist())
        return {record.doc_id: record.meta for record in records.values()}

    # ── search (§7.7) ──────────────────────────────────────────────────────

    def search(self, request: SearchRequest, *, progress: Progress | None = None,
               cancelled: Callable[[], bool] | None = None) -> SearchResult:
        """Run the §3 pipeline at one snapshot and return at most ``k`` hits."""
        return self.searcher.search(request, progress=progress, cancelled=cancelled)

    # ── adjacent surfaces ──────────────────────────────────────────────────

    def embed(self, texts: Sequence[str], kind: str = "document") -> npt.NDArray[np.float32]:
        """§7.3 dense vectors from the engine's own embedder."""
        check_kind(kind)
        self._check_batch(texts, "inputs")
        return np.asarray(self._embedder.embed(list(texts), kind), dtype=np.float32)

    def token_embeddings(self, texts: Sequence[str],
                         kind: str = "document") -> list[npt.NDArray[np.float32]]:
        """§7.5 per-token vectors."""
        check_kind(kind)
        self._check_batch(texts, "inputs")
        return self._embedder.token_embeddings(list(texts), kind)

    def rerank(self, query: str, passages: Sequence[str], method: str) -> npt.NDArray[np.float32]:
        """§7.6 scores aligned with ``passages`` (higher = more relevant)."""
        if method not in self._rerankers:
            raise Unsupported(f"rerank method {method!r} is not available", option=method)
        self._check_batch(passages, "passages")
        return np.asarray(self._rerankers[method].score(query, list(passages)), dtype=np.float32)

    def _check_batch(self, items: Sequence[str], field: str) -> None:
        if len(items) > self.config.requests.max_batch_inputs:
            raise InvalidInput(f"at most {self.config.requests.max_batch_inputs} inputs per call",
                               field=field)
        for position, item in enumerate(items):
            if not isinstance(item, str):
                raise InvalidInput("expected a string", field=f"{field}[{position}]")

    def feedback(self, signals: Sequence[FeedbackSignal], session_id: str | None = None,
                 query: str | None = None) -> int:
        """§7.16: record signals durably; they only affect later retrieves (poison policy)."""
        return self._feedback.record(signals, session_id, query)

    def poison_state(self) -> Poisoned:
        """The poison policy's current state: demoted documents, sources (§15.3)."""
        self.refresh()
        return self._feedback.poisoned

    def clear_poison(self, label: str) -> Poisoned:
        """An operator's §15.3 decision: source ``label`` is vetted; reports so far on its
        documents no longer count."""
        self.refresh()
        return self._feedback.clear(label)

    def stats(self) -> dict[str, Any]:
        """Corpus sizes at the latest snapshot, and the rows the background graph build has
        still to insert (``dense_graph_pending``: its progress)."""
        counts = self._store.counts()
        indexes = self.indexes
        return {**asdict(counts), "index_version": self.index_version,
                "lexical_rows": indexes.lexical.count if indexes is not None else 0,
                "dense_rows": indexes.dense.count if indexes is not None else 0,
                "dense_windows": indexes.dense.window_count if indexes is not None else 0,
                "dense_graph_pending":
                    indexes.dense.whole.graph_pending if indexes is not None else 0}

    def describe(self) -> EngineDescription:
        """The engine's real abilities, for building honest capabilities (§6.1)."""
        requests = self.config.requests
        return EngineDescription(
            modes=MODES, default_mode="hybrid", fusion_methods=FUSION_METHODS,
            rerank_methods=tuple(self._rerankers), units=UNITS,
            filter_fields=dict(self.snapshots.schema), filter_operators=OPERATORS,
            max_k=requests.max_k, default_candidate_k=requests.default_candidate_k,
            max_batch_inputs=requests.max_batch_inputs,
            max_documents_per_add=requests.max_documents_per_add,
            max_text_bytes=requests.max_text_bytes,
            embed_identity=self._embedder.identity, embed_dimension=self._embedder.dimension,
            session_ttl_seconds=self.config.retention.session_ttl_seconds,
            default_fusion=self.config.retrieve.fusion, read_only=self.config.index.read_only)


def open_engine(config_or_data_dir: EngineConfig | str | Path | None = None,
                **options: Any) -> Engine:
    """Open (creating if absent) the engine :func:`~rcpkit.engine.config.load_config`
    describes."""
    return Engine.open(load_config(config_or_data_dir, **options))


def _open_store(config: EngineConfig) -> Store:
    """The configured system of record: SQLite in ``data_dir`` or PostgreSQL."""
    if config.store.backend == "sqlite":
        return SqliteStore.open(config.data_dir)
    if not config.store.dsn:
        raise ConfigError("backend postgres needs a DSN (--dsn, [store] dsn in rcpkit.toml, "
                          "or RCPKIT_DSN)")
    try:
        from rcpkit.engine.store.postgres import PostgresStore
    except ImportError as exc:
        raise ConfigError(f"backend postgres needs psycopg (pip install 'psycopg[binary]'): "
                          f"{exc}") from None
    return PostgresStore.open(config.store.dsn, idf_exponent=config.lexical.idf_exponent)


def _minilm_of_record(chosen: Embedder, store: Store) -> Embedder:
    """The MiniLM a store was indexed with: one indexed before the encoder read the end of
    long texts keeps reading their start, so its old and new vectors come from one input
    rule (and one §7.3 identity)."""
    if store.setting("embedder") == MINILM_HEAD_IDENTITY:
        return minilm(tail_tokens=0)
    return chosen


def _make_embedder(config: EmbedderConfig) -> Embedder:
    """The ``[embedder]`` model (an ``onnx`` one's paths checked present where it was built)."""
    if config.name == "hashing":
        return HashingEmbedder(dimension=config.hashing_dimension)
    if config.name == "onnx":
        assert config.onnx_model_path is not None and config.onnx_tokenizer_path is not None
        return OnnxEmbedder(config.onnx_model_path, config.onnx_tokenizer_path,
                            identity=f"onnx:{config.onnx_model_path.name}")
    return minilm()
