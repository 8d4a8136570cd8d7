"""Writes (§7.10, §7.11): serialised, idempotent, and published only once their rows are in
every index, followed by the bookkeeping the store keeps bounded.

Bookkeeping retention: an ``idempotencyKey`` replays for ``idempotency_retention_seconds``
and is new afterwards; a write-log row goes once it is old enough and, with derived indexes,
at or below their saved state, so a restart loads that state and catches up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from rcpkit.engine.config import EngineConfig
from rcpkit.engine.documents.prepare import Preparer
from rcpkit.engine.errors import TooLarge
from rcpkit.engine.indexes.derived import DerivedIndexes
from rcpkit.engine.models.embedding import Embedder
from rcpkit.engine.snapshots import Snapshots, after_commit
from rcpkit.engine.store import DocumentWrite, RecordWrites
from rcpkit.engine.timing import StageClock
from rcpkit.engine.types import AddResult, DeleteResult, DocumentIn

__all__ = ["Writer"]

# Passages per embedding call when the caller follows progress: small enough to report
# every few seconds on a laptop CPU, large enough to keep length-sorted batching effective.
_EMBED_SLICE = 128


class Writer:
    """Adds and deletes documents under one write lock."""

    def __init__(self, config: EngineConfig, store: RecordWrites, embedder: Embedder,
                 snapshots: Snapshots, indexes: DerivedIndexes | None,
                 write_lock: threading.Lock, clock: Callable[[], float]) -> None:
        self._config = config
        self._store = store
        self._embedder = embedder
        self._snapshots = snapshots
        self._indexes = indexes
        self._lock = write_lock
        self._clock = clock
        self._preparer = Preparer(config, embedder.identity)
        self._slice = 1
        """Passages per embedding call when progress is followed: it grows from one over the
        first calls, so the first report comes as soon as one passage (and the model) is
        ready, and later slices keep length-sorted batching efficient."""

    def add(self, documents: Sequence[DocumentIn], *, chunk: bool, contextual: bool,
            idempotency_key: str | None,
            embedded: Callable[[int, int], None] | None,
            max_trust: str | None = None) -> AddResult:
        """Upsert; returns after the write is committed and published. Documents are
        labelled at most ``max_trust`` (None: the configured ``trust``, §15.2)."""
        ceiling = self._config.index.trust if max_trust is None else max_trust
        clock = StageClock()
        self._preparer.check(documents)
        self._snapshots.refresh()
        with self._lock:
            clock.lap("queue")
            if idempotency_key is not None:
                replay = self._store.idempotent_reply(
                    idempotency_key,
                    not_before=self._clock() - self._config.retention.idempotency_seconds)
                if replay is not None:
                    reply, seq = replay
                    return AddResult(ids=reply["ids"], chunks=reply["chunks"],
                                     index_version=self._snapshots.token(seq))
            schema = self._snapshots.schema
            new_fields: dict[str, str] = {}
            prepared = [self._preparer.prepare(position, document, schema, new_fields, chunk,
                                               contextual, ceiling)
                        for position, document in enumerate(documents)]
            live = self._store.live_hashes([p.doc_id for p in prepared])
            changed = [p for p in prepared if live.get(p.doc_id) != p.content_hash]
            clock.lap("prepare")
            vectors = self._embed_passages([text for p in changed for text in p.texts],
                                           embedded)
            clock.lap("embed")
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
            clock.lap("commit")
            self._after_write()
            clock.lap("publish")
            outcomes = tuple("unchanged" if live.get(p.doc_id) == p.content_hash
                             else "updated" if p.doc_id in live else "added" for p in prepared)
            return AddResult(ids=ids, chunks=chunks,
                             index_version=self._snapshots.token(outcome.seq),
                             outcomes=outcomes, stage_seconds=tuple(clock.stages))

    def _embed_passages(self, texts: Sequence[str],
                        embedded: Callable[[int, int], None] | None) -> npt.NDArray[np.float32]:
        """Document vectors for ``texts``, in slices when someone watches the progress."""
        if not texts:
            return np.zeros((0, self._embedder.dimension), dtype=np.float32)
        if embedded is None:
            return self._embedder.embed(texts, "document")
        parts = []
        start = 0
        while start < len(texts):
            size = self._slice
            parts.append(self._embedder.embed(texts[start:start + size], "document"))
            start += size
            embedded(min(start, len(texts)), len(texts))
            self._slice = min(size * 2, _EMBED_SLICE)
        return np.concatenate(parts)

    def delete(self, ids: Sequence[str]) -> DeleteResult:
        """Idempotent; counts only documents this call removed."""
        if len(ids) > self._config.requests.max_documents_per_add:
            raise TooLarge(f"at most {self._config.requests.max_documents_per_add} ids per delete")
        self._snapshots.refresh()
        with self._lock:
            outcome = self._store.write([], list(dict.fromkeys(ids)), now=self._clock())
            self._after_write()
            return DeleteResult(deleted=outcome.deleted,
                                index_version=self._snapshots.token(outcome.seq))

    def _after_write(self) -> None:
        """Collect old snapshots, publish the write, then prune the bookkeeping. The write is
        committed already: a housekeeping step that fails (a full disk) is logged and runs
        again after a later write, but never turns the acknowledged write into an error."""
        now = self._clock()
        config = self._config
        after_commit("collecting old versions", lambda: self._store.collect_garbage(
            config.retention.versions, config.retention.seconds, now))
        self._snapshots.publish()
        indexes = self._indexes
        if indexes is not None:
            indexes.writes_since_save += 1
            if indexes.writes_since_save >= config.index.save_every:
                after_commit("saving the indexes", indexes.save)
        after_commit("pruning bookkeeping", lambda: self.prune_bookkeeping(now))

    def prune_bookkeeping(self, now: float) -> None:
        """The retention policy the store executes (cheap: indexed deletes, usually none).

        Idempotency keys older than ``idempotency_retention_seconds`` go (§7.10: an expired
        key is new). A write-log row goes once it is older than
        ``write_log_retention_seconds`` — and than ``retain_seconds``, as the §7.7.1 time rule
        of :meth:`RecordWrites.collect_garbage` reads write times from the log — and, with derived
        indexes, at or below the saved state's position. With database recall nothing else
        reads the log: any position goes."""
        config = self._config
        log_age = max(config.retention.write_log_seconds, config.retention.seconds)
        self._store.prune_bookkeeping(
            log_up_to=None if self._indexes is None else self._indexes.saved_position,
            log_before=now - log_age, keys_before=now - config.retention.idempotency_seconds)
