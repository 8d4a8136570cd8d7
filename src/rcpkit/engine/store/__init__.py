"""The engine's system of record: the backend-neutral :class:`Store` and its SQLite backend."""

from .base import (
    ChunkRecord,
    ChunkWrite,
    DatabaseSearch,
    DocumentWrite,
    FeedbackRecord,
    IndexDelta,
    RowBatch,
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
    "FeedbackRecord",
    "IndexDelta",
    "RowBatch",
    "SqliteStore",
    "Store",
    "StoreCounts",
    "StoreVersionError",
    "WriteOutcome",
    "indexed_text",
]
