"""The retrieval engine (§3, §7.7), independent of any protocol binding.

:class:`Engine` owns a :class:`~rcpkit.engine.store.Store` (the system of record)
and two derived in-memory indexes (lexical BM25 and dense vectors) keyed by the
store's chunk rowids. ``search`` runs recall → fuse → rerank → diversify → pack
at one pinned snapshot (§7.7.1); writes are serialised and only *published*
once their rows are in both indexes, so a read never sees half a write. A store that
searches by itself (:class:`~rcpkit.engine.store.DatabaseSearch`: PostgreSQL with
``pg_recall = "database"``) replaces both indexes: recall then runs in the database at the
snapshot, and the engine builds, catches up and saves no index.

Thread safety: any number of concurrent reads; writes serialise on a lock and
mutate the indexes under the exclusive side of a readers/writer lock.

Scores (§4.6): cosine in ``dense`` mode, BM25 in ``sparse``, the fused score in
``hybrid``, the reranker's score after ``rerank``; recency (blended with relevance) and
the feedback poison policy scale them down, and MMR caps them so they never increase down the list.

The indexes are saved under ``<data_dir>/indexes`` with the write-log position they
reflect (the ``CURRENT`` pointer flips last) and reconciled with the record on open.
Writes also prune the store's bookkeeping (:meth:`Engine._prune_bookkeeping`): expired
idempotency keys, and write-log rows the saved state covers once they are old enough; a
process whose position falls below the pruned log reloads the saved state, or rebuilds.

Several processes may share one record (N HTTP workers on one data directory, or engines on
one PostgreSQL database): :meth:`Engine.refresh` runs before every search and write,
polls the store's change marks (one small query) and, when another process moved them, catches
the indexes, schema and poison state up before publishing the newer version. Index saves take
an exclusive ``flock`` on ``indexes/LOCK`` and loads a shared one, so one process saves at a
time and none deletes a state another is loading. ``sessionId`` dedup state (§7.7.3) is kept
per process: a shared table would cost a durable write per retrieve, and the Store interface
has none; so with several workers a session's dedup covers the requests its worker answered.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import logging
import math
import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from rcpkit import fusion
from rcpkit.engine.chunking import Chunk, chunk_text, contextualize
from rcpkit.engine.columns import FilterColumns
from rcpkit.engine.config import EngineConfig
from rcpkit.engine.embedcache import CachedEmbedder
from rcpkit.engine.embedding import Embedder, HashingEmbedder, OnnxEmbedder, check_kind, minilm
from rcpkit.engine.lexical import LexicalIndex
from rcpkit.engine.mmr import mmr
from rcpkit.engine.rerank import CrossEncoderReranker, LateInteractionReranker, Reranker
from rcpkit.engine.store import (
    ChunkRecord,
    ChunkWrite,
    DatabaseSearch,
    DocumentWrite,
    FeedbackRecord,
    IndexDelta,
    RowBatch,
    SqliteStore,
    Store,
    indexed_text,
)
from rcpkit.engine.text import Analyzer, count_tokens
from rcpkit.engine.types import (
    TRUST_LEVELS,
    AddResult,
    Citation,
    DeleteResult,
    DocumentIn,
    EngineDescription,
    FeedbackSignal,
    Hit,
    SearchRequest,
    SearchResult,
    Usage,
)
from rcpkit.engine.windows import SentenceWindowIndex, WindowVectors, embed_windows
from rcpkit.protocol.errors import (
    BackendUnavailable,
    Cancelled,
    InvalidParams,
    NotFound,
    OptionUnsupported,
    PayloadTooLarge,
)
from rcpkit.protocol.filters import OPERATORS, FilterNode, parse_date, validate
from rcpkit.protocol.messages import require_scalar

K = TypeVar("K")
V = TypeVar("V")

__all__ = ["MODES", "STAGES", "Engine", "Progress", "record_hit"]

logger = logging.getLogger(__name__)

MODES = ("dense", "sparse", "hybrid")
FUSION_METHODS = ("rrf", "weighted", "convex")
UNITS = ("chunk", "document")
STAGES = ("recall", "fuse", "rerank", "diversify", "pack")
# Theoretical score minima for convex fusion (§6.1 scoreFloor, §16.3): cosine, BM25.
_FLOORS = {"dense": -1.0, "sparse": 0.0}
_FIELD_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_MS_PER_DAY = 86_400_000
# Passages per embedding call when the caller follows progress: small enough to report
# every few seconds on a laptop CPU, large enough to keep length-sorted batching effective.
_EMBED_SLICE = 128

Progress = Callable[[str, float, list[Hit] | None], None]
"""``progress(stage, fraction, partial_hits)`` — called after each pipeline stage (§9)."""

IntArray = npt.NDArray[np.int64]
BoolMask = npt.NDArray[np.bool_]


class _ReadWriteLock:
    """Many readers or one writer; writers do not starve (new readers wait for them)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writing and not self._writers_waiting)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            self._cond.wait_for(lambda: not self._writing and self._readers == 0)
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


@dataclass(slots=True)
class _Candidate:
    """A chunk moving through the pipeline with its per-stage scores.

    Recall and fusion need only row ids and scores, so the stored record and vector are
    read later (:meth:`Engine._load`) for just the candidates a later stage looks at: most
    requests read the ``k`` chunks of one page, not all ``candidateK`` of them.
    """

    rowid: int
    score: float
    scores: dict[str, float]
    loaded: tuple[ChunkRecord, npt.NDArray[np.float32]] | None = None

    @property
    def record(self) -> ChunkRecord:
        assert self.loaded is not None, "candidate read before Engine._load"
        return self.loaded[0]

    @property
    def vector(self) -> npt.NDArray[np.float32]:
        assert self.loaded is not None, "candidate read before Engine._load"
        return self.loaded[1]


def _demote(score: float, factor: float) -> float:
    """Scale a score towards "less relevant" by ``factor`` ∈ (0, 1], whatever its sign."""
    return score * factor if score >= 0 else score / factor


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


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
        if config.pg_recall not in ("database", "memory"):
            raise ValueError(f"pg_recall must be database or memory, not {config.pg_recall!r}")
        # A store that searches by itself (PostgreSQL) may replace the in-memory indexes.
        self._database = (store if config.pg_recall == "database"
                          and isinstance(store, DatabaseSearch) else None)
        self._embedder = embedder
        self._rerankers = dict(rerankers)
        self._write_lock = threading.Lock()
        self._index_lock = _ReadWriteLock()
        self._lexical = LexicalIndex(Analyzer())
        self._dense = self._new_dense_index()
        self._columns = FilterColumns()
        self._log_position = 0
        self._saved_position = 0
        """Log position of the newest index state known to be saved in ``data_dir``."""
        self._saved_state_partial = False
        """The saved state at this process's position lacked a part (rebuilt here from the
        record): the next save rewrites it even though no write moved the position."""
        self._published = store.current_seq()
        self._schema = store.field_types()
        self._poisoned = self._poisoned_documents(store.feedback_position())
        self._writes_since_save = 0
        self._masks: _Recent[int, BoolMask] = _Recent(8)
        self._query_vectors: _Recent[str, npt.NDArray[np.float32]] = _Recent(
            config.query_cache_size)
        self._recalled: _Recent[tuple[str, str], tuple[list[_Candidate], int]] = _Recent(64)
        """First pages recalled approximately (HNSW), kept so their cursor pages replay the
        very same candidates instead of an exact recall that could differ (§10)."""
        self._sessions: dict[tuple[str | None, str], tuple[float, set[str]]] = {}
        """(caller, sessionId) → (last use, hit ids returned so far), §7.7.3."""
        self._sessions_lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._check_embedder()
        self._load_indexes()

    def _check_embedder(self) -> None:
        """Stored vectors are only meaningful for the embedder that made them."""
        recorded = self._store.setting("embedder")
        if recorded is None:
            self._store.set_setting("embedder", self._embedder.identity)
        elif recorded != self._embedder.identity:
            self._store.close()
            raise BackendUnavailable(f"this data directory was indexed with embedder "
                                     f"{recorded!r}, not {self._embedder.identity!r}")

    # ── lifecycle ──────────────────────────────────────────────────────────

    @classmethod
    def open(cls, config: EngineConfig, *, embedder: Embedder | None = None,
             store: Store | None = None, clock: Callable[[], float] = time.time) -> Engine:
        """Open (or create) the engine and reconcile its indexes with the record.

        The record is ``store`` when given (e.g. a PostgreSQL backend), else the embedded
        SQLite store in ``config.data_dir``; derived indexes always live in ``data_dir``.
        ``clock`` (epoch seconds) drives the retention windows, recency and session expiry.
        """
        chosen = embedder or _make_embedder(config)
        if config.embedding_cache is not None:
            chosen = CachedEmbedder(chosen, config.embedding_cache)
        store = store or _open_store(config)
        rerankers: dict[str, Reranker] = {}
        colbert = LateInteractionReranker(chosen, passage_tokens=config.rerank_passage_tokens,
                                          cache_bytes=config.rerank_cache_bytes)
        rerankers[colbert.method] = colbert
        if config.cross_encoder_model_path and config.cross_encoder_tokenizer_path:
            # Advertised only when a real model is configured (no registry ships one).
            cross = CrossEncoderReranker(
                config.cross_encoder_model_path, config.cross_encoder_tokenizer_path,
                identity=f"onnx:{Path(config.cross_encoder_model_path).name}")
            rerankers[cross.method] = cross
        return cls(config, store, chosen, rerankers, clock=clock)

    def wait_for_indexes(self, timeout: float | None = None) -> bool:
        """Block until background index work (the dense graph build) is done, or ``timeout``
        seconds pass; True when none is left. Searches never need this — exact search serves
        meanwhile — but a bulk load that waits before :meth:`close` saves the graph with the
        rows, so the next process starts on it instead of building it again."""
        return self._dense.wait_for_graph(timeout)

    def close(self) -> None:
        """Stop background index work, persist the derived indexes and close the store."""
        with self._write_lock:
            self._dense.close()
            self._save_indexes()
            self._store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ── versions ───────────────────────────────────────────────────────────

    def version_token(self, seq: int) -> str:
        """The opaque §7.7.1 ``indexVersion`` for a sequence number of this database."""
        return f"{self._store.database_id}.{seq}"

    def _parse_version(self, token: str) -> int:
        # §7.7.1 requires -32010 for a snapshot that cannot be served; the §12 table also
        # lists -32016 for it, but §7.7.1 is the specific MUST so we follow it.
        database_id, _, seq_text = token.rpartition(".")
        if database_id != self._store.database_id or not seq_text.isdigit():
            raise BackendUnavailable("unknown indexVersion for this index")
        seq = int(seq_text)
        if seq > self._published or seq < self._store.gc_floor():
            raise BackendUnavailable("indexVersion is not available (garbage-collected or never "
                                     "existed)")
        return seq

    @property
    def index_version(self) -> str:
        """The latest published snapshot."""
        return self.version_token(self._published)

    def snapshot(self, index_version: str | None = None) -> int:
        """The version a read pinned to ``index_version`` (default: the latest) sees; -32010
        when it cannot be served (§7.7.1)."""
        return self._parse_version(index_version) if index_version else self._published

    @property
    def store(self) -> Store:
        """The system of record, for components deriving their own indexes from it."""
        return self._store

    # ── writes ─────────────────────────────────────────────────────────────

    def add(self, documents: Sequence[DocumentIn], *, chunk: bool = False,
            contextual: bool = False, idempotency_key: str | None = None,
            embedded: Callable[[int, int], None] | None = None) -> AddResult:
        """§7.10 upsert; returns after the write is committed and published.

        A document whose text is empty or only whitespace is refused (``-32602`` on
        ``documents[i].text``): it has nothing to match, yet would rank and fill a
        ``tokenBudget``. ``embedded(done, total)`` reports passages embedded so far."""
        if len(documents) > self.config.max_documents_per_add:
            raise PayloadTooLarge(f"at most {self.config.max_documents_per_add} documents "
                                  "per add")
        self.refresh()
        for position, document in enumerate(documents):
            if not isinstance(document.text, str):
                raise InvalidParams("text must be a string", field=f"documents[{position}].text")
            # Before anything is written: the store could not read such a row back (§4.6).
            require_scalar({"id": document.id, "text": document.text, "meta": document.meta},
                           f"documents[{position}]")
            if not document.text.strip():
                raise InvalidParams("text must not be empty or whitespace only",
                                    field=f"documents[{position}].text")
            if len(document.text.encode()) > self.config.max_text_bytes:
                raise PayloadTooLarge(f"documents[{position}].text exceeds "
                                      f"{self.config.max_text_bytes} bytes")
        with self._write_lock:
            if idempotency_key is not None:
                replay = self._store.idempotent_reply(
                    idempotency_key,
                    not_before=self._clock() - self.config.idempotency_retention_seconds)
                if replay is not None:
                    reply, seq = replay
                    return AddResult(ids=reply["ids"], chunks=reply["chunks"],
                                     index_version=self.version_token(seq))
            schema = self._schema
            new_fields: dict[str, str] = {}
            prepared = [self._prepare(position, document, schema, new_fields, chunk, contextual)
                        for position, document in enumerate(documents)]
            live = self._store.live_hashes([p.doc_id for p in prepared])
            changed = [p for p in prepared if live.get(p.doc_id) != p.content_hash]
            texts = [piece.indexed for p in changed for piece in p.pieces]
            vectors = self._embed_passages(texts, embedded)
            upserts: list[DocumentWrite] = []
            offset = 0
            for p in changed:
                upserts.append(p.to_write(vectors[offset:offset + len(p.pieces)]))
                offset += len(p.pieces)
            ids = [p.doc_id for p in prepared]
            chunks = sum(len(p.pieces) for p in prepared)
            outcome = self._store.write(upserts, [], new_fields=new_fields,
                                        idempotency_key=idempotency_key,
                                        reply={"ids": ids, "chunks": chunks},
                                        now=self._clock())
            self._after_write()
            outcomes = tuple("unchanged" if live.get(p.doc_id) == p.content_hash
                             else "updated" if p.doc_id in live else "added" for p in prepared)
            return AddResult(ids=ids, chunks=chunks, index_version=self.version_token(outcome.seq),
                             outcomes=outcomes)

    def _embed_passages(self, texts: Sequence[str],
                        embedded: Callable[[int, int], None] | None) -> npt.NDArray[np.float32]:
        """Document vectors for ``texts``, in slices when someone watches the progress."""
        if not texts:
            return np.zeros((0, self._embedder.dimension), dtype=np.float32)
        if embedded is None:
            return self._embedder.embed(texts, "document")
        parts = []
        for start in range(0, len(texts), _EMBED_SLICE):
            parts.append(self._embedder.embed(texts[start:start + _EMBED_SLICE], "document"))
            embedded(min(start + _EMBED_SLICE, len(texts)), len(texts))
        return np.concatenate(parts)

    def documents_where(self, tree: Any) -> dict[str, Mapping[str, Any]]:
        """The live documents matching the §8 filter ``tree`` (id → metadata) at the latest
        version; none when the tree names a field no document has."""
        self.refresh()
        schema = self._schema
        try:
            node = validate(tree, schema, OPERATORS)
        except InvalidParams:
            return {}
        records = self._store.chunks(self._store.filter_rowids(node, self._published).tolist())
        return {record.doc_id: record.meta for record in records.values()}

    def delete(self, ids: Sequence[str]) -> DeleteResult:
        """§7.11: idempotent; counts only documents this call removed."""
        if len(ids) > self.config.max_documents_per_add:
            raise PayloadTooLarge(f"at most {self.config.max_documents_per_add} ids per delete")
        self.refresh()
        with self._write_lock:
            outcome = self._store.write([], list(dict.fromkeys(ids)), now=self._clock())
            self._after_write()
            return DeleteResult(deleted=outcome.deleted,
                                index_version=self.version_token(outcome.seq))

    def _after_write(self) -> None:
        """Collect old snapshots, publish the write, then prune the bookkeeping. The write is
        committed already: a housekeeping step that fails (a full disk) is logged and runs
        again after a later write, but never turns the acknowledged write into an error."""
        now = self._clock()
        self._housekeep("collecting old versions", lambda: self._store.collect_garbage(
            self.config.retain_versions, self.config.retain_seconds, now))
        self._publish()
        self._writes_since_save += 1
        if self._writes_since_save >= self.config.index_save_every:
            self._housekeep("saving the indexes", self._save_indexes)
        self._housekeep("pruning bookkeeping", lambda: self._prune_bookkeeping(now))

    @staticmethod
    def _housekeep(what: str, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception as exc:  # whatever it is, the committed write stands
            logger.warning("%s after a committed write failed (%s: %s); it is retried after "
                           "a later write", what, type(exc).__name__, exc)

    def _prune_bookkeeping(self, now: float) -> None:
        """The retention policy the store executes (cheap: indexed deletes, usually none).

        Idempotency keys older than ``idempotency_retention_seconds`` go (§7.10: an expired
        key is new). A write-log row goes once it is older than
        ``write_log_retention_seconds`` — and than ``retain_seconds``, as the §7.7.1 time rule
        of :meth:`Store.collect_garbage` reads write times from the log — and, with derived
        indexes, at or below the saved state's position, so a restart loads that state and
        catches up. With database recall nothing else reads the log: any position goes."""
        config = self.config
        log_age = max(config.write_log_retention_seconds, config.retain_seconds)
        self._store.prune_bookkeeping(
            log_up_to=None if self._database is not None else self._saved_position,
            log_before=now - log_age, keys_before=now - config.idempotency_retention_seconds)

    def _publish(self) -> None:
        """Bring indexes and schema up to the record, then publish its latest version (the
        caller holds the write lock). The version is read first, so the indexes caught up
        afterwards hold all of it: no reader sees a half-applied catch-up (§7.7.1)."""
        seq = self._store.current_seq()
        self._catch_up()
        self._schema = self._store.field_types()
        self._published = seq
        for listener in self._listeners:
            listener()

    def refresh(self) -> bool:
        """Take in writes and feedback committed by other processes sharing the record (issue
        8). One small store query when nothing changed; True when something was taken in."""
        seq, feedback_mark = self._store.change_marks()
        changed = feedback_mark != self._poisoned.mark
        if changed:
            self._poisoned = self._poisoned_documents(feedback_mark)
        if seq != self._published:
            with self._write_lock:
                self._publish()
            changed = True
        return changed

    def on_publish(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever a new version is published (own write or refresh)."""
        self._listeners.append(listener)

    def _prepare(self, position: int, document: DocumentIn, schema: Mapping[str, str],
                 new_fields: dict[str, str], chunk: bool, contextual: bool) -> _Prepared:
        where = f"documents[{position}]"
        if document.id is not None and (not isinstance(document.id, str) or not document.id):
            raise InvalidParams("id must be a non-empty string", field=f"{where}.id")
        if document.meta is not None and not isinstance(document.meta, Mapping):
            raise InvalidParams("meta must be an object", field=f"{where}.meta")
        meta = dict(document.meta or {})
        filter_meta = self._filter_meta(meta, schema, new_fields, f"{where}.meta")
        title = meta.get("title") if isinstance(meta.get("title"), str) else None
        pieces: list[Chunk] = (chunk_text(document.text, max_chars=self.config.chunk_max_chars,
                                          overlap_chars=self.config.chunk_overlap_chars,
                                          title=title)
                               if chunk else [])
        if not pieces:
            pieces = [Chunk(index=0, start=0, end=len(document.text), text=document.text,
                            headings=())]
        parts = [_Piece(c, contextualize(c, title or "") if contextual else "") for c in pieces]
        fingerprint = json.dumps([document.text, meta, chunk, contextual, self._embedder.identity,
                                  self.config.chunk_max_chars, self.config.chunk_overlap_chars],
                                 sort_keys=True, default=str)
        return _Prepared(doc_id=document.id or uuid.uuid4().hex, text=document.text, meta=meta,
                         filter_meta=filter_meta, pieces=parts,
                         content_hash=hashlib.sha256(fingerprint.encode()).hexdigest())

    def _filter_meta(self, meta: Mapping[str, Any], schema: Mapping[str, str],
                     new_fields: dict[str, str], where: str) -> dict[str, Any]:
        """Type-check metadata against the §8 schema, inferring types for new keys."""
        trust = meta.get("trust", "untrusted")
        if trust not in TRUST_LEVELS:
            raise InvalidParams(f"trust must be one of {', '.join(TRUST_LEVELS)}",
                                field=f"{where}.trust")
        normalised: dict[str, Any] = {}
        for name, value in meta.items():
            if value is None or not name or not set(name) <= _FIELD_NAME_CHARS:
                continue  # kept for display; not a filterable field
            ftype = (self.config.field_types.get(name) or schema.get(name)
                     or new_fields.get(name) or _infer_type(value))
            if ftype is None:
                continue
            coerced = _coerce(ftype, value)
            if coerced is None:
                raise InvalidParams(f"metadata {name!r} does not fit field type {ftype!r}",
                                    field=f"{where}.{name}")
            if name not in schema:
                new_fields[name] = ftype
            normalised[name] = coerced
        return normalised

    # ── derived indexes ────────────────────────────────────────────────────

    def _new_dense_index(self) -> SentenceWindowIndex:
        return SentenceWindowIndex.create(self._embedder.dimension,
                                          enabled=self.config.dense_sentence_windows,
                                          mix=self.config.dense_window_mix,
                                          exact_threshold=self.config.dense_exact_threshold,
                                          build_threads=self.config.dense_build_threads)

    def _window_vectors(self, batch: RowBatch) -> WindowVectors | None:
        """The sentence-window vectors of ``batch`` when the dense index keeps them (runs the
        encoder: call without holding the index lock)."""
        if not self.config.dense_sentence_windows:
            return None
        return embed_windows(batch.rowids, batch.texts,
                             lambda texts: self._embedder.embed(texts, "document"),
                             self._embedder.dimension)

    def _index_dir(self) -> Path:
        return Path(self.config.data_dir) / "indexes"

    def _load_indexes(self) -> None:
        """Load persisted indexes and catch up from the write log; rebuild when they cannot
        be trusted (missing, corrupt, foreign, ahead of the record, or below its pruned
        log). Also how a process that fell below the pruned log starts over."""
        if self._database is not None:
            return
        try:
            with self._indexes_locked(exclusive=False):
                saved = self._saved_state()
                if saved is not None:  # else none yet, or another record's / embedder's
                    if saved[1] > self._store.log_position():
                        raise ValueError("persisted indexes do not belong to this record")
                    if saved[1] < self._store.log_floor():
                        raise ValueError("the write log no longer reaches the saved indexes")
                    state_dir, position = saved
                    lexical = LexicalIndex.load(state_dir / "lexical")
                    dense = SentenceWindowIndex.load(
                        state_dir / "dense", enabled=self.config.dense_sentence_windows,
                        mix=self.config.dense_window_mix,
                        build_threads=self.config.dense_build_threads)
                    columns = _saved_columns(state_dir / "columns")
        except Exception as exc:  # any unreadable state means: rebuild from the record
            logger.warning("saved indexes are unusable (%s: %s); rebuilding them from the "
                           "store", type(exc).__name__, exc)
            saved = None
        if saved is None:
            self._rebuild()
            return
        self._saved_position = position
        if columns is None:
            columns = self._columns_from_store()
            self._saved_state_partial = True
        # Caught up before the swap: a running process must not serve the older state.
        delta = self._store.delta_since(position)
        if delta is None:  # pruned past the state while it was loading
            self._rebuild()
            return
        self._delta_applier(delta)(lexical, dense, columns)
        self._install(lexical, dense, columns, delta.position)

    @contextmanager
    def _indexes_locked(self, *, exclusive: bool) -> Iterator[None]:
        """``flock`` on ``indexes/LOCK`` across processes: saves exclusive, loads shared."""
        root = self._index_dir()
        root.mkdir(parents=True, exist_ok=True)
        with open(root / "LOCK", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield

    def _saved_state(self) -> tuple[Path, int] | None:
        """The persisted state directory and its log position, if it is one of this record's
        and embedder's (call with the index lock held)."""
        root = self._index_dir()
        try:
            state_dir = root / (root / "CURRENT").read_text().strip()
            state = json.loads((state_dir / "state.json").read_text())
        except (OSError, ValueError):
            return None
        if (state.get("database_id") != self._store.database_id
                or state.get("embedder") != self._embedder.identity):
            return None
        return state_dir, int(state["position"])

    def _columns_from_store(self) -> FilterColumns:
        """Filter columns over every stored row: they already hold what a catch-up adds (a
        re-added row is a no-op), and removing a row they never held is one too."""
        columns = FilterColumns()
        for batch in self._store.iter_rows():
            columns.add(*self._filter_rows(batch.rowids))
        return columns

    def _rebuild(self) -> None:
        lexical = LexicalIndex(Analyzer())
        dense = self._new_dense_index()
        columns = FilterColumns()
        position = self._store.log_position()
        self._saved_state_partial = True
        for batch in self._store.iter_rows():
            rowids = np.asarray(batch.rowids, dtype=np.int64)
            lexical.add(rowids, batch.texts)
            dense.add(rowids, batch.vectors, self._window_vectors(batch))
            columns.add(*self._filter_rows(batch.rowids))
        self._install(lexical, dense, columns, position)

    def _install(self, lexical: LexicalIndex, dense: SentenceWindowIndex, columns: FilterColumns,
                 position: int) -> None:
        """Swap in a whole set of derived indexes at ``position``: a read sees the old set or
        the new one, never a mix; the replaced dense index stops its background build."""
        with self._index_lock.writing():
            replaced = self._dense
            self._lexical, self._dense, self._columns = lexical, dense, columns
            self._log_position = position
        replaced.close()
        self._masks.clear()

    def _catch_up(self) -> None:
        """Apply the write log after this process's position to the live indexes; below the
        pruned log, start over from the saved state (or the rows)."""
        if self._database is not None:
            return
        delta = self._store.delta_since(self._log_position)
        if delta is None:
            self._load_indexes()
            return
        apply = self._delta_applier(delta)
        with self._index_lock.writing():
            apply(self._lexical, self._dense, self._columns)
            self._log_position = delta.position
        self._masks.clear()

    def _delta_applier(self, delta: IndexDelta
                       ) -> Callable[[LexicalIndex, SentenceWindowIndex, FilterColumns], None]:
        """Read the rows ``delta`` adds now (no lock held) and return what applies the whole
        delta to a set of indexes (quickly, under the caller's lock if they are live)."""
        batches = list(self._store.iter_rows(delta.added)) if delta.added else []
        filter_rows = [self._filter_rows(batch.rowids) for batch in batches]
        windows = [self._window_vectors(batch) for batch in batches]
        removed = np.asarray(delta.removed, dtype=np.int64)

        def apply(lexical: LexicalIndex, dense: SentenceWindowIndex,
                  columns: FilterColumns) -> None:
            if len(removed):
                lexical.remove(removed)
                dense.remove(removed)
                columns.remove(removed)
            for batch, (filtered, metas), extra in zip(batches, filter_rows, windows,
                                                       strict=True):
                rowids = np.asarray(batch.rowids, dtype=np.int64)
                lexical.add(rowids, batch.texts)
                dense.add(rowids, batch.vectors, extra)
                columns.add(filtered, metas)

        return apply

    def _filter_rows(self, rowids: Sequence[int]
                     ) -> tuple[list[int], list[Mapping[str, Any]]]:
        """The §8 filter metadata of ``rowids`` for the filter columns (rows collected in the
        meantime are left out)."""
        records = self._store.chunks(rowids)
        kept = [rowid for rowid in rowids if rowid in records]
        return kept, [records[rowid].filter_meta for rowid in kept]

    def _save_indexes(self) -> None:
        """Persist the derived indexes (lexical, dense, filter columns) with the log position
        they reflect; ``CURRENT`` flips last. Skipped when another process already saved a
        state at least as recent, unless the one at this position was partial."""
        if self._database is not None:
            return
        with self._indexes_locked(exclusive=True):
            saved = self._saved_state()
            if (saved is None or saved[1] < self._log_position
                    or (self._saved_state_partial and saved[1] == self._log_position)):
                self._write_state(self._index_dir())
                self._saved_position = self._log_position
            else:
                self._saved_position = saved[1]
        self._writes_since_save = 0
        self._saved_state_partial = False

    def _write_state(self, root: Path) -> None:
        name = f"state-{self._log_position}-{uuid.uuid4().hex[:8]}"
        target = root / name
        target.mkdir(parents=True)
        self._lexical.save(target / "lexical")
        self._dense.save(target / "dense")
        self._columns.save(target / "columns")
        (target / "state.json").write_text(json.dumps({
            "database_id": self._store.database_id, "embedder": self._embedder.identity,
            "position": self._log_position}))
        pointer = root / "CURRENT.tmp"
        with open(pointer, "w") as handle:
            handle.write(name)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(pointer, root / "CURRENT")
        for stale in root.iterdir():
            if stale.is_dir() and stale.name != name:
                shutil.rmtree(stale, ignore_errors=True)

    # ── search (§7.7) ──────────────────────────────────────────────────────

    def search(self, request: SearchRequest, *, progress: Progress | None = None,
               cancelled: Callable[[], bool] | None = None) -> SearchResult:
        """Run the §3 pipeline at one snapshot and return at most ``k`` hits."""
        started = time.perf_counter()
        self.refresh()
        plan = self._plan(request)

        def stage(name: str, fraction: float, partial: list[Hit] | None = None) -> None:
            if cancelled is not None and cancelled():
                raise Cancelled()
            if progress is not None:
                progress(name, fraction, partial)

        query_vector = self._query_vector(request.query)
        replayed = (self._recalled.get((plan.fingerprint, plan.pinned))
                    if plan.fingerprint is not None and plan.pinned is not None else None)
        candidates, seq = replayed or self._recall(request, plan, query_vector)
        if progress is not None:
            leading = self._load(sorted(candidates, key=lambda c: -c.score)[:plan.k], seq)
            stage("recall", 0.3, [self._hit(c, request, query_vector) for c in leading])
        else:
            stage("recall", 0.3)
        ranked = self._fuse(request, candidates)
        stage("fuse", 0.5)
        if _reads_every_candidate(request, plan):
            ranked = self._load(ranked, seq)
        ranked, reranked = self._rerank(request, plan, ranked, seq)
        stage("rerank", 0.7)
        ranked = self._adjust(request, plan, ranked)
        ranked = self._diversify(request, plan, ranked, query_vector)
        stage("diversify", 0.85)
        if request.min_score is not None:
            ranked = [c for c in ranked if c.score >= request.min_score]
        if request.unit == "document":
            ranked = _best_per_document(ranked)
        if request.session_id is not None and request.cursor is None:
            seen = self._session_seen((request.caller, request.session_id))
            ranked = [c for c in ranked if _hit_id(c.record, request.unit) not in seen]
        page = [self._hit(c, request, query_vector)
                for c in self._load(ranked[plan.offset:plan.offset + plan.k], seq)]
        tokens: int | None = None
        if request.token_budget is not None:
            page, tokens = _pack(page, request.token_budget)
        end = plan.offset + len(page)
        if not request.include_text:
            page = [replace(hit, text=None) for hit in page]
        next_cursor = None
        if page and end < len(ranked):
            fingerprint = plan.fingerprint or _fingerprint(request, self._store.secret)
            next_cursor = self._cursor(_CursorState(seq, end, plan.now_ms, plan.poisoned.mark),
                                       fingerprint)
            if (request.cursor is None and request.mode != "sparse"
                    and not _exact_dense(request, plan)):
                self._recalled.put((fingerprint, self.version_token(seq)), (candidates, seq))
        if request.session_id is not None:
            self._remember((request.caller, request.session_id), [hit.id for hit in page])
        stage("pack", 1.0)
        usage = Usage(candidates=plan.candidate_k, reranked=reranked, k=plan.k,
                      latency_ms=(time.perf_counter() - started) * 1000, tokens=tokens,
                      notes=plan.notes)
        return SearchResult(hits=page, index_version=self.version_token(seq), usage=usage,
                            next_cursor=next_cursor)

    def _query_vector(self, query: str) -> npt.NDArray[np.float32]:
        """The query's embedding (§7.3 ``kind: query``), from the cache when recently seen."""
        cached = self._query_vectors.get(query)
        if cached is None:
            cached = np.asarray(self._embedder.embed([query], "query")[0], dtype=np.float32)
            cached.flags.writeable = False  # shared by every request with this query
            self._query_vectors.put(query, cached)
        return cached

    def _plan(self, request: SearchRequest) -> _Plan:
        """Validate options and clamp the funnel ``candidateK ≥ topN ≥ k`` to ``maxK`` (§3.3)."""
        if not isinstance(request.query, str) or not request.query.strip():
            raise InvalidParams("query must be a non-empty string", field="query")
        if request.mode not in MODES:
            raise OptionUnsupported(f"mode {request.mode!r} is not supported", option="mode")
        method = request.fusion or self.config.default_fusion
        if request.mode == "hybrid" and method not in FUSION_METHODS:
            raise OptionUnsupported(f"fusion {method!r} is not supported", option="fusion")
        if request.alpha is not None and not 0.0 <= request.alpha <= 1.0:
            raise InvalidParams("fusion.alpha must be in [0, 1]", field="fusion.alpha")
        if request.unit not in UNITS:
            raise OptionUnsupported(f"unit {request.unit!r} is not supported", option="unit")
        if request.rerank is not None and request.rerank.method not in self._rerankers:
            raise OptionUnsupported(f"rerank method {request.rerank.method!r} is not "
                                    "available", option=request.rerank.method)
        if request.k < 1:
            raise InvalidParams("k must be at least 1", field="k")
        if request.mmr_lambda is not None and not 0.0 <= request.mmr_lambda <= 1.0:
            raise InvalidParams("mmr.lambda must be in [0, 1]", field="mmr.lambda")
        if request.token_budget is not None and request.token_budget < 1:
            raise InvalidParams("tokenBudget must be positive", field="tokenBudget")
        if request.recency is not None and request.recency.half_life_days <= 0:
            raise InvalidParams("recency.halfLifeDays must be positive",
                                field="recency.halfLifeDays")
        max_k = self.config.max_k
        notes: list[str] = []
        k = min(request.k, max_k)
        if k < request.k:
            notes.append(f"k clamped to maxK={max_k}")
        wanted = request.candidate_k or max(k, self.config.default_candidate_k)
        candidate_k = min(max(wanted, k), max_k)
        top_n = 0
        if request.rerank is not None:
            wanted_top_n = request.rerank.top_n or self.config.default_rerank_top_n
            top_n = min(max(wanted_top_n, k), candidate_k)
        plan = _Plan(k=k, candidate_k=candidate_k, top_n=top_n, offset=0,
                     fingerprint=None, pinned=request.index_version, notes=tuple(notes),
                     schema=self._schema, poisoned=self._poisoned, now_ms=self._clock() * 1000)
        if request.cursor is None:
            return plan
        # A continuation page replays the first page's ranking inputs exactly (§10): the
        # snapshot, the clock used for recency and the feedback seen by the poison policy.
        fingerprint = _fingerprint(request, self._store.secret)
        state = self._open_cursor(request.cursor, fingerprint)
        poisoned = (plan.poisoned if state.feedback_mark == plan.poisoned.mark
                    else self._poisoned_documents(state.feedback_mark))
        return replace(plan, fingerprint=fingerprint, offset=state.offset,
                       pinned=self.version_token(state.seq), now_ms=state.now_ms,
                       poisoned=poisoned)

    def _recall(self, request: SearchRequest, plan: _Plan,
                query_vector: npt.NDArray[np.float32]) -> tuple[list[_Candidate], int]:
        """Dense and/or lexical recall at the snapshot, under the filter (§8)."""
        tree = (request.filter if request.filter is None or request.filter_validated
                else validate(request.filter, plan.schema, OPERATORS))
        with self._index_lock.reading():
            seq = self._parse_version(plan.pinned) if plan.pinned else self._published
            dense_hits, sparse_hits = (self._memory_recall(request, plan, query_vector, tree, seq)
                                       if self._database is None else
                                       self._database_recall(self._database, request, plan,
                                                             query_vector, tree, seq))
        candidates = []
        for rowid in dict.fromkeys([*dense_hits, *sparse_hits]):
            scores_of = {}
            if rowid in dense_hits:
                scores_of["dense"] = dense_hits[rowid]
            if rowid in sparse_hits:
                scores_of["sparse"] = sparse_hits[rowid]
            first = dense_hits.get(rowid, sparse_hits.get(rowid, 0.0))
            candidates.append(_Candidate(rowid, first, scores_of))
        return candidates, seq

    def _load(self, candidates: list[_Candidate], seq: int) -> list[_Candidate]:
        """``candidates`` with their stored records and vectors read (once per candidate);
        rows the store no longer holds drop out."""
        missing = [c.rowid for c in candidates if c.loaded is None]
        if missing:
            with self._index_lock.reading():
                records = self._store.chunks(missing)
                order = [rowid for rowid in missing if rowid in records]
                try:
                    vectors = (self._database.vectors(order) if self._database is not None
                               else self._dense.get(np.asarray(order, dtype=np.int64)))
                except NotFound as exc:  # indexes disagree with the record: ours, not -32015
                    raise RuntimeError(
                        f"derived indexes are inconsistent: {exc.message}") from exc
                if seq < self._store.gc_floor():
                    # Collected while we read: serve that snapshot whole or not at all
                    # (§7.7.1).
                    raise BackendUnavailable(
                        "indexVersion was garbage-collected during the read")
            found = dict(zip(order, vectors, strict=True))
            for candidate in candidates:
                if candidate.loaded is None and candidate.rowid in found:
                    candidate.loaded = (records[candidate.rowid], found[candidate.rowid])
        return [c for c in candidates if c.loaded is not None]

    def _memory_recall(self, request: SearchRequest, plan: _Plan,
                       query_vector: npt.NDArray[np.float32], tree: FilterNode | None,
                       seq: int) -> tuple[dict[int, float], dict[int, float]]:
        """Recall from the in-memory indexes; snapshot and filter become rowid masks."""
        mask = self._visible_mask(seq)
        # When the snapshot shows every indexed row (no hidden versions), the visibility mask
        # is a no-op the indexes skip when given None, using their precomputed statistics.
        visible = None if int(np.count_nonzero(mask)) == self._dense.count else mask
        allow = visible if tree is None else mask & self._columns.mask(tree, len(mask),
                                                                        plan.schema)
        dense_hits: dict[int, float] = {}
        sparse_hits: dict[int, float] = {}
        if request.mode in ("dense", "hybrid"):
            rowids, scores = self._dense.search(query_vector, plan.candidate_k, allow=allow,
                                                exact=_exact_dense(request, plan))
            dense_hits = dict(zip(rowids.tolist(), scores.tolist(), strict=True))
        if request.mode in ("sparse", "hybrid"):
            rowids, scores = self._lexical.search(request.query, plan.candidate_k,
                                                  visible=visible, allow=allow)
            sparse_hits = dict(zip(rowids.tolist(), scores.tolist(), strict=True))
        return dense_hits, sparse_hits

    @staticmethod
    def _database_recall(database: DatabaseSearch, request: SearchRequest, plan: _Plan,
                         query_vector: npt.NDArray[np.float32], tree: FilterNode | None,
                         seq: int) -> tuple[dict[int, float], dict[int, float]]:
        """Recall computed by the store's database at the snapshot, under the filter compiled
        to SQL (§7.7, §8); no in-memory index is involved."""
        dense_hits: dict[int, float] = {}
        sparse_hits: dict[int, float] = {}
        if request.mode in ("dense", "hybrid"):
            rowids, scores = database.dense_search(query_vector, plan.candidate_k, seq, tree,
                                                   exact=_exact_dense(request, plan))
            dense_hits = dict(zip(rowids.tolist(), scores.tolist(), strict=True))
        if request.mode in ("sparse", "hybrid"):
            rowids, scores = database.lexical_search(request.query, plan.candidate_k, seq, tree)
            sparse_hits = dict(zip(rowids.tolist(), scores.tolist(), strict=True))
        return dense_hits, sparse_hits

    def _visible_mask(self, seq: int) -> BoolMask:
        cached = self._masks.get(seq)
        if cached is not None:
            return cached
        rowids = self._store.visible_rowids(seq)
        mask = _mask(rowids, int(rowids.max()) + 1 if len(rowids) else 0)
        self._masks.put(seq, mask)
        return mask

    def _fuse(self, request: SearchRequest, candidates: list[_Candidate]) -> list[_Candidate]:
        """One ranked list: dense or sparse alone, or the two fused (§16.3).

        Every fusion but ``rrf`` is a weighted sum of per-list scores normalised into [0, 1]
        with weights summing to 1, so the fused score is a relevance in [0, 1]: explicit
        ``fusion.weights`` win, else ``(alpha, 1 - alpha)`` (dense, sparse), the request's
        ``fusion.alpha`` or the engine's tuned default (docs/benchmarks.md).
        """
        if request.mode != "hybrid":
            return sorted(candidates, key=lambda c: (-c.score, c.rowid))
        by_key = {str(c.rowid): c for c in candidates}
        lists = [sorted(((str(c.rowid), c.scores[name]) for c in candidates
                         if name in c.scores), key=lambda item: (-item[1], int(item[0])))
                 for name in ("dense", "sparse")]
        weights = None
        if request.weights is not None:
            weights = [float(request.weights.get("dense", 0.5)),
                       float(request.weights.get("sparse", 0.5))]
        alpha = self.config.default_fusion_alpha if request.alpha is None else request.alpha
        method = request.fusion or self.config.default_fusion
        if method == "rrf":
            fused = fusion.rrf(lists, weights, k=request.rrf_k)
        elif method == "convex":
            fused = fusion.convex(lists, [_FLOORS["dense"], _FLOORS["sparse"]],
                                  [alpha, 1.0 - alpha])
        else:
            fused = fusion.weighted(lists, weights or [alpha, 1.0 - alpha])
        ranked = []
        for item in fused:
            candidate = by_key[item.key]
            candidate.score = float(item.score)
            candidate.scores["fused"] = float(item.score)
            ranked.append(candidate)
        return ranked

    def _rerank(self, request: SearchRequest, plan: _Plan, ranked: list[_Candidate],
                seq: int) -> tuple[list[_Candidate], int]:
        """Rescore the top ``topN`` with the requested reranker; the rest drop out (§3.3)."""
        if request.rerank is None or not ranked:
            return ranked, 0
        head = self._load(ranked[:plan.top_n], seq)
        scores = self._rerankers[request.rerank.method].score(
            request.query, [c.record.indexed_text for c in head])
        for candidate, score in zip(head, np.asarray(scores).tolist(), strict=True):
            candidate.score = float(score)
            candidate.scores["rerank"] = float(score)
        return sorted(head, key=lambda c: -c.score), len(head)

    def _adjust(self, request: SearchRequest, plan: _Plan,
                ranked: list[_Candidate]) -> list[_Candidate]:
        """Recency (§7.7; no decay without a date value) blended with relevance by
        ``recency_weight``, and the feedback poison policy (§7.16, §15.3)."""
        poisoned = plan.poisoned.documents
        recency = request.recency
        if recency is not None and plan.schema.get(recency.field) != "date":
            raise InvalidParams("recency.field must be a date field", field="recency.field")
        if recency is None and not poisoned:
            return ranked
        floor = min((c.score for c in ranked), default=0.0)
        weight = self.config.recency_weight
        freshness: dict[int, float] = {}
        for candidate in ranked:
            if recency is not None:
                stamp = candidate.record.filter_meta.get(recency.field)
                if isinstance(stamp, int | float):
                    age_days = max(0.0, (plan.now_ms - stamp) / _MS_PER_DAY)
                    decay = 0.5 ** (age_days / recency.half_life_days)
                    freshness[candidate.record.rowid] = decay
                    # A blend, not a product: relevance above the candidates' floor keeps
                    # (1 - weight) of its size however old the hit is, so an old on-topic
                    # document still beats a new off-topic one.
                    candidate.score = floor + (candidate.score - floor) * (
                        1.0 - weight + weight * decay)
            if candidate.record.doc_id in poisoned:
                candidate.score = _demote(candidate.score, self.config.poison_penalty)
        # Equal relevance (at the floor, or duplicates): the newer hit first.
        return sorted(ranked, key=lambda c: (-c.score, -freshness.get(c.record.rowid, 1.0)))

    def _diversify(self, request: SearchRequest, plan: _Plan, ranked: list[_Candidate],
                   query_vector: npt.NDArray[np.float32]) -> list[_Candidate]:
        """MMR over the dense vectors; scores are capped to stay non-increasing (§4.6)."""
        if request.mmr_lambda is None or len(ranked) < 2:
            return ranked
        vectors = np.stack([c.vector for c in ranked])
        relevance = np.asarray([c.score for c in ranked], dtype=np.float32)
        order = mmr(query_vector, vectors, relevance, len(ranked), request.mmr_lambda)
        diversified = [ranked[int(i)] for i in order]
        ceiling = math.inf
        for candidate in diversified:
            candidate.score = min(candidate.score, ceiling)
            ceiling = candidate.score
        return diversified

    def _hit(self, candidate: _Candidate, request: SearchRequest,
             query_vector: npt.NDArray[np.float32]) -> Hit:
        cosine = float(np.dot(candidate.vector, query_vector))
        return replace(
            record_hit(candidate.record, candidate.score, request.unit),
            confidence=min(1.0, max(0.0, cosine)),
            vector=candidate.vector.tolist() if request.include_vectors else None,
            scores=dict(candidate.scores))

    # ── pagination (§10) and sessions (§7.7.3) ─────────────────────────────

    def _cursor(self, state: _CursorState, fingerprint: str) -> str:
        """An opaque §10 cursor: base64url JSON of the page state, signed with HMAC."""
        body = json.dumps({"f": fingerprint, "v": state.seq, "o": state.offset,
                           "t": state.now_ms, "p": state.feedback_mark}, separators=(",", ":"))
        tag = hmac.new(self._store.secret, body.encode(), hashlib.sha256).digest()[:16]
        return f"{_b64(body.encode())}.{_b64(tag)}"

    def _open_cursor(self, cursor: str, fingerprint: str) -> _CursorState:
        """Verify a cursor; a forged, foreign, mismatched or expired one is -32015."""
        try:
            body_text, _, tag_text = cursor.partition(".")
            body = _unb64(body_text)
            expected = hmac.new(self._store.secret, body, hashlib.sha256).digest()[:16]
            if not hmac.compare_digest(expected, _unb64(tag_text)):
                raise ValueError("bad signature")
            fields = json.loads(body)
            state = _CursorState(seq=int(fields["v"]), offset=int(fields["o"]),
                                 now_ms=float(fields["t"]), feedback_mark=int(fields["p"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise NotFound("unknown cursor") from exc
        if fields["f"] != fingerprint:
            raise NotFound("cursor does not belong to this query")
        if state.seq < self._store.gc_floor():
            raise NotFound("cursor expired: its snapshot was garbage-collected")
        return state

    def _session_seen(self, session_id: tuple[str | None, str]) -> set[str]:
        now = self._clock()
        with self._sessions_lock:
            self._expire_sessions(now)
            entry = self._sessions.get(session_id)
            return set(entry[1]) if entry else set()

    def _remember(self, session_id: tuple[str | None, str], hit_ids: Sequence[str]) -> None:
        now = self._clock()
        with self._sessions_lock:
            self._expire_sessions(now)
            _, seen = self._sessions.get(session_id, (now, set()))
            seen.update(hit_ids)
            self._sessions[session_id] = (now, seen)

    def _expire_sessions(self, now: float) -> None:
        ttl = self.config.session_ttl_seconds
        for session_id in [s for s, (at, _) in self._sessions.items() if now - at > ttl]:
            del self._sessions[session_id]

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
            raise OptionUnsupported(f"rerank method {method!r} is not available", option=method)
        self._check_batch(passages, "passages")
        return np.asarray(self._rerankers[method].score(query, list(passages)), dtype=np.float32)

    def _check_batch(self, items: Sequence[str], field: str) -> None:
        if len(items) > self.config.max_batch_inputs:
            raise InvalidParams(f"at most {self.config.max_batch_inputs} inputs per call",
                                field=field)
        for position, item in enumerate(items):
            if not isinstance(item, str):
                raise InvalidParams("expected a string", field=f"{field}[{position}]")

    def feedback(self, signals: Sequence[FeedbackSignal], session_id: str | None = None,
                 query: str | None = None) -> int:
        """§7.16: record signals durably; they only affect later retrieves (poison policy)."""
        if len(signals) > self.config.max_batch_inputs:
            raise InvalidParams(f"at most {self.config.max_batch_inputs} signals per call",
                                field="signals")
        records = [FeedbackRecord(hit_id=s.hit_id, doc_id=_doc_id_of(s.hit_id),
                                  session_id=session_id, query=query, used=s.used,
                                  cited=s.cited, helpful=s.helpful, reward=s.reward,
                                  poison_suspected=s.poison_suspected,
                                  injection_suspected=s.injection_suspected)
                   for s in signals]
        accepted = self._store.record_feedback(records)
        # Swapped in whole: only retrieves that start later see the new policy state.
        self._poisoned = self._poisoned_documents(self._store.feedback_position())
        return accepted

    def _poisoned_documents(self, mark: int) -> _Poisoned:
        counts = self._store.poison_counts(mark)
        return _Poisoned(mark, frozenset(doc for doc, n in counts.items()
                                         if n >= self.config.poison_threshold))

    def stats(self) -> dict[str, Any]:
        """Corpus sizes at the latest snapshot."""
        counts = self._store.counts()
        return {**asdict(counts), "index_version": self.index_version,
                "lexical_rows": self._lexical.count, "dense_rows": self._dense.count,
                "dense_windows": self._dense.window_count}

    def describe(self) -> EngineDescription:
        """The engine's real abilities, for building honest capabilities (§6.1)."""
        return EngineDescription(
            modes=MODES, default_mode="hybrid", fusion_methods=FUSION_METHODS,
            rerank_methods=tuple(self._rerankers), units=UNITS,
            filter_fields=dict(self._schema), filter_operators=OPERATORS,
            max_k=self.config.max_k, default_candidate_k=self.config.default_candidate_k,
            max_batch_inputs=self.config.max_batch_inputs,
            max_documents_per_add=self.config.max_documents_per_add,
            max_text_bytes=self.config.max_text_bytes,
            embed_identity=self._embedder.identity, embed_dimension=self._embedder.dimension,
            session_ttl_seconds=self.config.session_ttl_seconds,
            default_fusion=self.config.default_fusion)


# ── helpers ─────────────────────────────────────────────────────────────────

@dataclass(frozen=True, slots=True)
class _CursorState:
    """What a continuation page needs to rebuild the first page's ranking."""

    seq: int
    offset: int
    now_ms: float
    feedback_mark: int


@dataclass(frozen=True, slots=True)
class _Poisoned:
    """Documents demoted by the poison policy, as of a feedback mark."""

    mark: int
    documents: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Plan:
    k: int
    candidate_k: int
    top_n: int
    offset: int
    fingerprint: str | None
    """Of a continuation page's query (§10); a first page computes it only for its cursor."""
    pinned: str | None
    notes: tuple[str, ...]
    schema: Mapping[str, str]
    poisoned: _Poisoned
    now_ms: float


@dataclass(frozen=True, slots=True)
class _Piece:
    chunk: Chunk
    context: str

    @property
    def indexed(self) -> str:
        return indexed_text(self.context, self.chunk.text)


@dataclass(frozen=True, slots=True)
class _Prepared:
    doc_id: str
    text: str
    meta: dict[str, Any]
    filter_meta: dict[str, Any]
    pieces: list[_Piece]
    content_hash: str

    def to_write(self, vectors: npt.NDArray[np.float32]) -> DocumentWrite:
        return DocumentWrite(
            doc_id=self.doc_id, text=self.text, meta=self.meta, filter_meta=self.filter_meta,
            content_hash=self.content_hash,
            chunks=[ChunkWrite(index=p.chunk.index, start=p.chunk.start, end=p.chunk.end,
                               text=p.chunk.text, context=p.context,
                               headings=tuple(p.chunk.headings), vector=vector)
                    for p, vector in zip(self.pieces, vectors, strict=True)])


class _Recent(Generic[K, V]):
    """A thread-safe map keeping the ``size`` most recently used entries."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _reads_every_candidate(request: SearchRequest, plan: _Plan) -> bool:
    """Whether a stage before paging looks at the record or vector of every candidate:
    recency (date), the poison policy and ``unit: document`` (document id), MMR (vectors)
    and session dedup (hit ids). Rerank reads only its ``topN`` head."""
    return (request.recency is not None
            or bool(plan.poisoned.documents) or request.unit == "document"
            or request.mmr_lambda is not None or request.session_id is not None)


def _exact_dense(request: SearchRequest, plan: _Plan) -> bool:
    """§7.7.1: a seeded or pinned request must not depend on which HNSW graph a background
    build has published (or later inserts have reshaped), so it takes the exact path."""
    return request.seed is not None or plan.pinned is not None


def _doc_id_of(hit_id: str) -> str:
    """The document of a hit id: ``"doc#3"`` → ``"doc"``; a document-unit id is itself."""
    prefix, separator, suffix = hit_id.rpartition("#")
    return prefix if separator and suffix.isdigit() else hit_id


def _saved_columns(directory: Path) -> FilterColumns | None:
    """The filter columns of a saved state, or ``None`` (logged) when they cannot be read —
    a state saved before they were persisted, or a damaged file: the caller rebuilds them."""
    try:
        return FilterColumns.load(directory)
    except Exception as exc:  # whatever is unreadable is rebuilt from the record
        logger.warning("saved filter columns in %s are unusable (%s: %s); rebuilding them "
                       "from the store", directory, type(exc).__name__, exc)
        return None


def _open_store(config: EngineConfig) -> Store:
    """The configured system of record: SQLite in ``data_dir`` or PostgreSQL."""
    if config.backend == "sqlite":
        return SqliteStore.open(config.data_dir)
    if config.backend != "postgres":
        raise ValueError(f"backend must be sqlite or postgres, not {config.backend!r}")
    if not config.dsn:
        raise ValueError("backend postgres needs a DSN (--dsn, dsn in rcpkit.toml, or "
                         "RCPKIT_DSN)")
    try:
        from rcpkit.engine.store.postgres import PostgresStore
    except ImportError as exc:
        raise ValueError(f"backend postgres needs psycopg (pip install 'psycopg[binary]'): "
                         f"{exc}") from None
    return PostgresStore.open(config.dsn)


def _make_embedder(config: EngineConfig) -> Embedder:
    if config.embedder == "hashing":
        return HashingEmbedder(dimension=config.hashing_dimension)
    if config.embedder == "onnx":
        if config.onnx_model_path is None or config.onnx_tokenizer_path is None:
            raise ValueError("embedder 'onnx' needs onnx_model_path and onnx_tokenizer_path")
        return OnnxEmbedder(config.onnx_model_path, config.onnx_tokenizer_path,
                            identity=f"onnx:{Path(config.onnx_model_path).name}")
    return minilm()


def _infer_type(value: Any) -> str | None:
    """§8 type for a metadata value never seen before (``None``: not filterable)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        # An ISO-8601 date ("2024-05-01", "2024-05-01T12:00:00Z") becomes a date field.
        is_date = (len(value) >= 10 and value[4:5] == "-" and value[7:8] == "-"
                   and parse_date(value) is not None)
        return "date" if is_date else "keyword"
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "keyword"
    return None


def _coerce(ftype: str, value: Any) -> Any:
    """``value`` in the stored filter form for ``ftype``; ``None`` if it does not fit."""
    if isinstance(value, list):
        items = [_coerce(ftype, v) for v in value]
        return None if any(item is None for item in items) else items
    if ftype in ("keyword", "text"):
        return value if isinstance(value, str) else None
    if ftype == "bool":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return None
    if ftype == "int":
        return int(value) if isinstance(value, int | float) and float(value).is_integer() \
            else None
    if ftype == "float":
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None
    if ftype == "date":
        return parse_date(value)
    return None


def _mask(rowids: IntArray, length: int) -> BoolMask:
    mask = np.zeros(length, dtype=bool)
    inside = rowids[rowids < length]
    mask[inside] = True
    return mask


def _fingerprint(request: SearchRequest, secret: bytes) -> str:
    """Identifies a query and its ranking parameters across pages (cursor, §10)."""
    fixed = replace(request, cursor=None, index_version=None, session_id=None)
    body = msgspec.json.encode(fixed, order="sorted", enc_hook=repr)
    return hmac.new(secret, body, hashlib.sha256).hexdigest()[:32]


def record_hit(record: ChunkRecord, score: float, unit: str = "chunk") -> Hit:
    """The §7.7 hit of a stored chunk (text, metadata, citation, trust) with ``score``."""
    meta = record.meta
    uri = meta.get("uri") or meta.get("url")
    page = meta.get("page")
    citation = Citation(source=str(meta.get("source") or record.doc_id),
                        uri=uri if isinstance(uri, str) else None,
                        title=meta["title"] if isinstance(meta.get("title"), str) else None,
                        start=record.start, end=record.end,
                        page=page if isinstance(page, int) and not isinstance(page, bool)
                        else None)
    return Hit(id=_hit_id(record, unit), score=score, unit=unit, doc_id=record.doc_id,
               chunk_index=record.index, text=record.text, meta=meta, citation=citation,
               trust_level=str(meta.get("trust", "untrusted")), context=record.context)


def _hit_id(record: ChunkRecord, unit: str) -> str:
    """``"doc#index"`` for a chunk hit, the document id for ``unit: document``."""
    return record.doc_id if unit == "document" else f"{record.doc_id}#{record.index}"


def _best_per_document(ranked: list[_Candidate]) -> list[_Candidate]:
    """``unit: document`` (§7.7.2): one entry per document, its best-ranked chunk."""
    best: dict[str, _Candidate] = {}
    for candidate in ranked:
        best.setdefault(candidate.record.doc_id, candidate)
    return list(best.values())


def _pack(hits: list[Hit], budget: int) -> tuple[list[Hit], int]:
    """Keep top hits while their bodies fit in ``budget`` tokens (§7.7.2)."""
    packed: list[Hit] = []
    used = 0
    for hit in hits:
        cost = count_tokens(hit.text or "")
        if used + cost > budget:
            break
        packed.append(hit)
        used += cost
    return packed, used
