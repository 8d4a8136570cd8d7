"""The system-of-record interface (§7.7.1, §7.10, §7.11, §15.4).

A :class:`Store` owns everything durable: documents and their chunks, dense
vectors, the write log, the filter field schema, idempotency keys, feedback and
settings. The in-memory lexical/dense indexes are derived from it and can be
rebuilt from :meth:`RowSource.iter_rows` at any time.

:class:`Store` is the sum of small protocols, and callers type against the ones they use:
:class:`Lifecycle` (identity, settings, close), :class:`RecordReads` (snapshots and their
rows), :class:`RecordWrites` (each write one transaction), :class:`RowSource` (rows and the
write log for the derived indexes), :class:`FeedbackLog` (§7.16) and
:class:`SideTableHost` (the knowledge components' tables); :class:`DatabaseSearch` is
offered by a backend that recalls in the database.

Versions (MVCC): every write bumps a global sequence ``seq``. A chunk row carries
``added_seq`` and ``deleted_seq`` (``None`` while live); the snapshot at version
``v`` sees the rows with ``added_seq <= v < deleted_seq``. Versions below
:meth:`RecordReads.gc_floor` have been garbage-collected and can no longer be served.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec
import numpy as np
import numpy.typing as npt

from rcpkit.engine.errors import Unavailable
from rcpkit.protocol.filters import All, AnyOf, Condition, FilterNode, Not

if TYPE_CHECKING:
    from .side import SideTables


class StoreVersionError(Unavailable, ValueError):
    """The store was written with a schema this rcpkit does not know (a newer release):
    opening it would misread or damage it, so it is refused before anything is written."""


def refuse_newer_schema(found: int, known: int, where: str) -> None:
    """Raise :class:`StoreVersionError` when the schema version ``found`` in the store at
    ``where`` is newer than the ``known`` one this code writes (every backend's rule)."""
    if found > known:
        raise StoreVersionError(
            f"the store {where} has schema version {found}, newer than the {known} this "
            "rcpkit knows: upgrade rcpkit to open it")

__all__ = [
    "ChunkRecord",
    "ChunkWrite",
    "DatabaseSearch",
    "DocumentWrite",
    "FeedbackLog",
    "FeedbackRecord",
    "IndexDelta",
    "IndexSource",
    "Lifecycle",
    "RecordReads",
    "RecordWrites",
    "RowBatch",
    "RowSource",
    "ScoredRows",
    "SideTableHost",
    "Store",
    "StoreCounts",
    "StoreVersionError",
    "WriteOutcome",
    "compile_filter",
    "indexed_text",
    "refuse_newer_schema",
]

RowIds = npt.NDArray[np.int64]
ScoredRows = tuple[RowIds, npt.NDArray[np.float32]]


def indexed_text(context: str, text: str) -> str:
    """What the lexical index and the embedder see for a chunk: its context first (§7.10)."""
    return f"{context}\n\n{text}" if context else text


@dataclass(frozen=True, slots=True)
class ChunkWrite:
    """One chunk of a document to persist; ``vector`` is float32 of the configured dimension."""

    index: int
    start: int
    end: int
    text: str
    context: str
    headings: tuple[str, ...]
    vector: npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class DocumentWrite:
    """A document upsert (§7.10). ``meta`` is shown to clients, ``filter_meta`` is what
    filters compare (dates as epoch-ms). ``content_hash`` decides "unchanged"."""

    doc_id: str
    text: str
    meta: Mapping[str, Any]
    filter_meta: Mapping[str, Any]
    content_hash: str
    chunks: Sequence[ChunkWrite]


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """What a committed write did. ``seq`` is the version it produced (unchanged if none)."""

    seq: int
    added_rowids: list[int]
    changed_ids: list[str]
    deleted: int


class ChunkRecord(msgspec.Struct, frozen=True):
    """A stored chunk with its document's metadata, as visible at some version (a frozen
    ``msgspec`` struct: made for every row a page reads, at a tenth of a frozen
    dataclass's cost)."""

    rowid: int
    doc_id: str
    index: int
    start: int
    end: int
    text: str
    context: str
    headings: tuple[str, ...]
    meta: Mapping[str, Any]
    filter_meta: Mapping[str, Any]

    @property
    def indexed_text(self) -> str:
        """The text the indexes were built from."""
        return indexed_text(self.context, self.text)


@dataclass(frozen=True, slots=True)
class RowBatch:
    """Rows for (re)building the derived indexes."""

    rowids: list[int]
    texts: list[str]
    vectors: npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class IndexDelta:
    """Net change to the physical row set since a write-log position."""

    position: int
    added: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FeedbackRecord:
    """One §7.16 signal, stored verbatim as untrusted advisory input (§15.2)."""

    hit_id: str
    doc_id: str
    session_id: str | None = None
    query: str | None = None
    used: bool | None = None
    cited: bool | None = None
    helpful: bool | None = None
    reward: float | None = None
    poison_suspected: bool | None = None
    injection_suspected: bool | None = None


@dataclass(frozen=True, slots=True)
class StoreCounts:
    """Live documents and chunks at the current version, plus physically stored rows."""

    documents: int
    chunks: int
    stored_rows: int
    bytes_on_disk: int


class Lifecycle(Protocol):
    """Opening and closing the record, its identity and the engine's own settings."""

    @property
    @abc.abstractmethod
    def database_id(self) -> str:
        """A random id minted with the database, so foreign version tokens are rejected."""

    @property
    @abc.abstractmethod
    def secret(self) -> bytes:
        """A per-database key for signing cursors (§10)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the data stays on disk."""

    @abc.abstractmethod
    def setting(self, key: str) -> str | None:
        """A persisted engine setting (e.g. the embedder identity), if set."""

    @abc.abstractmethod
    def set_setting(self, key: str, value: str) -> None:
        """Durably store an engine setting."""


class RecordReads(Protocol):
    """The record at a version (§7.7.1): which rows a snapshot shows, and what they hold."""

    @property
    @abc.abstractmethod
    def database_id(self) -> str:
        """A random id minted with the database, so foreign version tokens are rejected."""

    @abc.abstractmethod
    def current_seq(self) -> int:
        """The latest committed version."""

    @abc.abstractmethod
    def gc_floor(self) -> int:
        """The oldest version still servable (§7.7.1)."""

    @abc.abstractmethod
    def change_marks(self) -> tuple[int, int]:
        """``(current_seq(), feedback_position())``: what any process sharing the record
        advances. Polled before every engine request, so backends answer it in one query."""

    @abc.abstractmethod
    def visible_rowids(self, seq: int) -> RowIds:
        """Rowids of the snapshot at ``seq``."""

    @abc.abstractmethod
    def hidden_rowids(self, seq: int) -> RowIds:
        """Stored rowids the snapshot at ``seq`` does not show: added after it, or deleted at
        or before it, in no particular order (a row may appear twice). Few at the latest
        version (old versions awaiting collection), and found through the ``added_seq`` and
        ``deleted_seq`` indexes: no ``UNION``/``ORDER BY``, which would scan the table."""

    @abc.abstractmethod
    def filter_rowids(self, node: FilterNode, seq: int) -> RowIds:
        """Rowids visible at ``seq`` whose document matches a validated §8 tree.

        Compiled with bound parameters only; field names come from the stored schema."""

    @abc.abstractmethod
    def chunks(self, rowids: Sequence[int]) -> dict[int, ChunkRecord]:
        """Chunk records by rowid (rows that no longer exist are absent)."""

    @abc.abstractmethod
    def field_types(self) -> dict[str, str]:
        """The persisted filter schema: field name → §8 type."""

    @abc.abstractmethod
    def live_meta(self, doc_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Metadata of each live document among ``doc_ids``."""

    @abc.abstractmethod
    def counts(self) -> StoreCounts:
        """Sizes for ``stats``."""


class RecordWrites(Protocol):
    """Changes to the record, each one durable transaction (§7.10, §7.11); writes are
    serialised by the caller."""

    @abc.abstractmethod
    def live_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """Content hash of each live document among ``doc_ids``."""

    @abc.abstractmethod
    def write(self, upserts: Sequence[DocumentWrite], deletes: Sequence[str], *,
              new_fields: Mapping[str, str] | None = None,
              idempotency_key: str | None = None,
              reply: Mapping[str, Any] | None = None,
              now: float | None = None) -> WriteOutcome:
        """Apply upserts and deletes in one committed transaction at a new version.

        A document whose live ``content_hash`` is unchanged is left alone; a write that
        changes nothing does not create a version. ``reply`` is remembered under
        ``idempotency_key`` together with the resulting version. ``now`` (epoch seconds,
        default the wall clock) stamps the log row and the key for the retention windows.
        """

    @abc.abstractmethod
    def idempotent_reply(self, key: str, *,
                         not_before: float = 0.0) -> tuple[dict[str, Any], int] | None:
        """The reply and version stored for an idempotency key at or after ``not_before``
        (epoch seconds), if any (§7.10); an older key has expired and counts as new."""

    @abc.abstractmethod
    def collect_garbage(self, keep_versions: int, keep_seconds: float, now: float) -> list[int]:
        """Advance the floor per the retention window, physically drop rows invisible at
        every retained version and return their rowids (logged for the indexes)."""

    @abc.abstractmethod
    def prune_bookkeeping(self, *, log_up_to: int | None, log_before: float,
                          keys_before: float) -> tuple[int, int]:
        """Execute the engine's retention policy in one transaction, through indexes: drop
        write-log rows at or below ``log_up_to`` (``None``: any position) written before
        ``log_before``, raising the log floor to the highest dropped, and idempotency keys
        stored before ``keys_before``. Returns ``(log rows, keys)`` dropped."""


class RowSource(Protocol):
    """What the derived indexes are built and caught up from: the stored rows and the
    write log of their changes."""

    @abc.abstractmethod
    def log_position(self) -> int:
        """The write-log position the current row set corresponds to."""

    @abc.abstractmethod
    def delta_since(self, position: int) -> IndexDelta | None:
        """Net rows added/removed after ``position`` (catch-up of persisted indexes), or
        ``None`` when the log was pruned past ``position`` (below :meth:`log_floor`): the
        caller must start again from a saved state that is not, or from the rows."""

    @abc.abstractmethod
    def log_floor(self) -> int:
        """The highest pruned write-log position (0: none); the log is complete above it."""

    @abc.abstractmethod
    def iter_rows(self, rowids: Sequence[int] | None = None,
                  batch_size: int = 512) -> Iterator[RowBatch]:
        """All physically stored rows (or the given ones) with indexed text and vectors."""

    def stored_vectors(self, rowids: RowIds) -> tuple[RowIds, npt.NDArray[np.float32]]:
        """``(rowids, vectors)``, ascending, of those of ``rowids`` still stored (a saved
        dense index reads its vectors from the record)."""
        batches = list(self.iter_rows(sorted({int(r) for r in rowids})))
        if not batches:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        return (np.concatenate([np.asarray(b.rowids, dtype=np.int64) for b in batches]),
                np.concatenate([b.vectors for b in batches]))


class FeedbackLog(Protocol):
    """§7.16 signals, kept verbatim as untrusted advisory input (§15.2)."""

    @abc.abstractmethod
    def record_feedback(self, records: Sequence[FeedbackRecord]) -> int:
        """Store signals durably; returns how many were recorded."""

    @abc.abstractmethod
    def feedback_position(self) -> int:
        """A mark that grows with every recorded signal."""

    @abc.abstractmethod
    def poison_counts(self, up_to: int) -> dict[str, int]:
        """Document id → ``poisonSuspected`` signals recorded up to the mark ``up_to``."""

    @abc.abstractmethod
    def poison_clears(self, up_to: int) -> dict[str, int]:
        """Source label → mark of its latest operator clear up to ``up_to``: a feedback row
        with an empty ``doc_id`` whose ``hit_id`` is the label (§15.3)."""


class SideTableHost(Protocol):
    """Where the knowledge components keep their derived tables."""

    @abc.abstractmethod
    def side_tables(self, schema: str) -> SideTables | None:
        """Derived tables in the record's own database, created from ``schema`` (idempotent
        DDL) when missing; None where they belong in a file beside it (the embedded store)."""


class IndexSource(RecordReads, RowSource, Protocol):
    """What a derived index or knowledge component reads: snapshots and the rows behind
    them."""


class Store(Lifecycle, RecordReads, RecordWrites, RowSource, FeedbackLog, SideTableHost,
            Protocol):
    """The whole system of record, as the engine facade holds it; every other caller types
    against the one or two small protocols it uses. Reads may run concurrently from any
    thread."""


@runtime_checkable
class DatabaseSearch(Protocol):
    """Recall computed by the database itself, at a snapshot and under a §8 filter (§7.7).

    A store offering it lets the engine recall without in-memory indexes."""

    def dense_search(self, query: npt.NDArray[np.float32], k: int, seq: int,
                     node: FilterNode | None = None, *, exact: bool = False) -> ScoredRows:
        """Top ``k`` rows by cosine similarity to ``query``, best first; ``exact`` forbids
        approximate search, so the result depends on the snapshot only (§7.7.1)."""

    def lexical_search(self, query: str, k: int, seq: int,
                       node: FilterNode | None = None) -> ScoredRows:
        """Top ``k`` rows by lexical relevance (only scores > 0), best first."""

    def vectors(self, rowids: Sequence[int]) -> npt.NDArray[np.float32]:
        """Stored vectors of ``rowids`` in that order (for MMR and ``includeVectors``)."""


def compile_filter(node: FilterNode, leaf: Callable[[Condition], str]) -> str:
    """A §8 tree as one SQL boolean expression: the combinators are the same in every SQL
    backend, ``leaf`` writes one condition in the backend's dialect and appends its values
    to the query's bound parameters — never into the text (§15.4)."""
    if isinstance(node, All):
        return " AND ".join(f"({compile_filter(c, leaf)})" for c in node.children)
    if isinstance(node, AnyOf):
        return " OR ".join(f"({compile_filter(c, leaf)})" for c in node.children)
    if isinstance(node, Not):
        return f"NOT ({compile_filter(node.child, leaf)})"
    return leaf(node)
