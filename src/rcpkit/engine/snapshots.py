"""Published versions (§7.7.1): the opaque ``indexVersion`` tokens, the version readers see,
and bringing this process up to the shared record.

Several processes may share one record (N HTTP workers on one data directory, or engines on
one PostgreSQL database): :meth:`Snapshots.refresh` runs before every search and write, polls
the store's change marks (one small query) and, when another process moved them, catches the
indexes, schema and poison state up before publishing the newer version.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from rcpkit.engine.errors import SnapshotUnavailable
from rcpkit.engine.feedback import Feedback
from rcpkit.engine.indexes.derived import DerivedIndexes
from rcpkit.engine.store import RecordReads

__all__ = ["Snapshots", "after_commit"]

logger = logging.getLogger(__name__)


def after_commit(what: str, step: Callable[[], object]) -> None:
    """Run ``step``, a follow-up of a committed write; if it fails (a full disk), log it: it
    runs again after a later write, and never turns the committed write into an error."""
    try:
        step()
    except Exception as exc:  # whatever it is, the committed write stands
        logger.warning("%s after a committed write failed (%s: %s); it is retried after "
                       "a later write", what, type(exc).__name__, exc)


class Snapshots:
    """The latest published version, the §8 schema at it, and the publish listeners."""

    def __init__(self, store: RecordReads, indexes: DerivedIndexes | None, feedback: Feedback,
                 write_lock: threading.Lock) -> None:
        self._store = store
        self._indexes = indexes
        """None when the store searches by itself: there is nothing to catch up."""
        self._feedback = feedback
        self._write_lock = write_lock
        self.published = store.current_seq()
        self.schema: Mapping[str, str] = store.field_types()
        self._listeners: list[Callable[[], None]] = []

    def token(self, seq: int) -> str:
        """The opaque §7.7.1 ``indexVersion`` for a sequence number of this database."""
        return f"{self._store.database_id}.{seq}"

    def resolve(self, token: str | None) -> int:
        """The version a read pinned to ``token`` (default: the latest) sees."""
        if not token:
            return self.published
        database_id, _, seq_text = token.rpartition(".")
        if database_id != self._store.database_id or not seq_text.isdigit():
            raise SnapshotUnavailable("unknown indexVersion for this index")
        seq = int(seq_text)
        if seq > self.published or seq < self._store.gc_floor():
            raise SnapshotUnavailable("indexVersion is not available (garbage-collected or "
                                      "never existed)")
        return seq

    def publish(self) -> None:
        """Bring indexes and schema up to the record, then publish its latest version (the
        caller holds the write lock). The version is read first, so the indexes caught up
        afterwards hold all of it: no reader sees a half-applied catch-up (§7.7.1). The
        listeners follow the record by themselves (the concept graph syncs from the write
        log), so one that fails (a full disk) catches up on a later publish."""
        seq = self._store.current_seq()
        if self._indexes is not None:
            self._indexes.catch_up()
        self.schema = self._store.field_types()
        self.published = seq
        for listener in self._listeners:
            after_commit("following the published version", listener)

    def refresh(self) -> bool:
        """Take in writes and feedback committed by other processes sharing the record. One
        small store query when nothing changed; True when something was taken in."""
        seq, feedback_mark = self._store.change_marks()
        changed = self._feedback.follow(feedback_mark)
        if seq != self.published:
            with self._write_lock:
                self.publish()
            changed = True
        return changed

    def on_publish(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever a new version is published (own write or refresh)."""
        self._listeners.append(listener)
