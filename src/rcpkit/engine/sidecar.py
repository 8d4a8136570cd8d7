"""A derived SQLite file beside the engine's data (the concept graph, the memories): WAL so
several processes can share it, one writer at a time per process, write transactions taken
up front (``BEGIN IMMEDIATE``) so two writers never deadlock on an upgrade."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["SidecarDatabase"]


class SidecarDatabase:
    """``db`` and its ``lock`` (hold it for every statement); :meth:`transaction` writes."""

    def __init__(self, path: Path, schema: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                                  timeout=30)
        self.lock = threading.Lock()
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(schema)

    def close(self) -> None:
        with self.lock:
            self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
