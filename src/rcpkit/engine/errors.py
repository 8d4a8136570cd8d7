"""The engine's own errors: what went wrong, in the engine's words, with no wire codes.

A binding decides what each one means to its callers; the RCP binding's table is
:mod:`rcpkit.binding.errors` (§12). Field names are the engine's (``documents[3].meta.source``,
``recency.half_life_days``), never a wire path.
"""

from __future__ import annotations

import errno
import sqlite3

__all__ = [
    "DISK_FULL",
    "Cancelled",
    "ConfigError",
    "EngineError",
    "IndexUnavailable",
    "InvalidInput",
    "SnapshotUnavailable",
    "TooLarge",
    "Unavailable",
    "UnknownCursor",
    "UnknownMemory",
    "Unsupported",
    "disk_full",
    "is_disk_full",
]

DISK_FULL = "disk full"
"""The ``detail`` of an :class:`Unavailable` for a write the full disk refused."""


class EngineError(Exception):
    """Base of every error the engine reports on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(EngineError):
    """An argument the engine cannot take; ``field`` names it (engine field names)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class Unsupported(EngineError):
    """A choice (a mode, a fusion method, a reranker) this engine does not offer."""

    def __init__(self, message: str, *, option: str) -> None:
        super().__init__(message)
        self.option = option


class TooLarge(EngineError):
    """A request over one of the engine's configured size limits."""


class SnapshotUnavailable(EngineError):
    """A pinned version that cannot be served: unknown, never published, or collected."""


class UnknownCursor(EngineError):
    """A paging cursor the engine did not issue, for another query, or past its snapshot."""


class UnknownMemory(EngineError):
    """No memory (§7.17) of that id is visible to the caller: never built, or another
    caller's session memory."""


class Unavailable(EngineError):
    """The record or a model cannot be used (unreachable, unreadable, full, mismatched);
    ``detail`` is a short machine-readable reason when there is one."""

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class IndexUnavailable(EngineError):
    """A derived index is missing or unreadable on disk; the engine rebuilds it from the
    record, so this never reaches a caller."""


class Cancelled(EngineError):
    """The caller's cancellation check said stop between two pipeline stages."""


class ConfigError(EngineError, ValueError):
    """An engine configuration that cannot be used (an unknown backend, a missing DSN)."""


def is_disk_full(exc: BaseException) -> bool:
    """SQLite's ``SQLITE_FULL``, or ``ENOSPC`` from the file system."""
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL \
            or "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


def disk_full() -> Unavailable:
    """What a write the full disk refused raises: it wrote nothing, and may be retried."""
    return Unavailable("the disk is full: nothing was written", detail=DISK_FULL)
