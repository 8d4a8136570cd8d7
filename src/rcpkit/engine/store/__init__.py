"""The engine's system of record: the backend-neutral protocols of :class:`Store`, the
shared SQL write path and its SQLite backend (PostgreSQL: ``rcpkit.engine.store.postgres``,
with the ``postgres`` extra).

The package imports nothing else of the engine but its errors, text analysis and files: the
components (graph, memory, side files) depend on it, never the reverse."""

from .base import (
    ChunkRecord,
    ChunkWrite,
    DatabaseSearch,
    DocumentWrite,
    FeedbackLog,
    FeedbackRecord,
    IndexDelta,
    IndexSource,
    Lifecycle,
    RecordReads,
    RecordWrites,
    RowBatch,
    RowSource,
    SideTableHost,
    Store,
    StoreCounts,
    StoreVersionError,
    WriteOutcome,
    indexed_text,
)
from .sqlite import SqliteStore

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
    "SideTableHost",
    "SqliteStore",
    "Store",
    "StoreCounts",
    "StoreVersionError",
    "WriteOutcome",
    "indexed_text",
]
