"""A write that cannot get the SQLite record's write lock within the busy timeout (another
process holds it) is :class:`Unavailable` with ``detail="busy"`` (the §12 backend-unavailable
error a caller may retry), never a bare ``database is locked`` that a server can only
report as an internal error; the next write after the lock is released commits."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from rcpkit.engine.errors import Unavailable
from rcpkit.engine.store import DocumentWrite, SqliteStore
from rcpkit.engine.store import sqlite as sqlite_store


def document(doc_id: str) -> DocumentWrite:
    return DocumentWrite(doc_id=doc_id, text="body", meta={}, filter_meta={},
                         content_hash=doc_id, chunks=[])


def test_a_write_blocked_past_the_busy_timeout_is_unavailable_and_retry_works(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_S", 0.05)
    store = SqliteStore.open(tmp_path)
    other = sqlite3.connect(tmp_path / SqliteStore.FILE_NAME, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
        with pytest.raises(Unavailable) as refused:
            store.write([document("a")], [])
        assert refused.value.detail == "busy" and "retry" in str(refused.value)
        other.execute("COMMIT")
        assert store.write([document("a")], []).changed_ids == ["a"]
    finally:
        other.close()
        store.close()
