"""The SQLite store records its schema version; a store written by a newer rcpkit (an unknown,
higher version) is refused with a clear message before anything in it changes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from rcpkit.engine.store import ChunkWrite, DocumentWrite, SqliteStore, StoreVersionError
from rcpkit.engine.store.sqlite import SCHEMA_VERSION
from rcpkit.transports.cli import ConfigError, _engine_server


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def one_document() -> DocumentWrite:
    chunk = ChunkWrite(index=0, start=0, end=4, text="body", context="", headings=(),
                       vector=np.ones(4, dtype=np.float32))
    return DocumentWrite(doc_id="a", text="body", meta={}, filter_meta={}, content_hash="h",
                         chunks=[chunk])


def newer_store(data_dir: Path) -> Path:
    path = data_dir / "store.sqlite3"
    data_dir.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE future_layout (x)")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    return path


def test_a_new_store_records_the_schema_version(tmp_path: Path) -> None:
    SqliteStore.open(tmp_path).close()
    assert user_version(tmp_path / "store.sqlite3") == SCHEMA_VERSION


def test_a_store_from_before_versions_opens_with_its_data_and_is_marked(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path)
    store.write([one_document()], [])
    store.close()
    path = tmp_path / "store.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 0")
    reopened = SqliteStore.open(tmp_path)
    try:
        assert reopened.current_seq() == 1 and len(reopened.visible_rowids(1)) == 1
    finally:
        reopened.close()
    assert user_version(path) == SCHEMA_VERSION


def test_a_newer_store_is_refused_untouched(tmp_path: Path) -> None:
    path = newer_store(tmp_path)
    with pytest.raises(StoreVersionError, match=rf"schema version {SCHEMA_VERSION + 1}, newer "
                                                rf"than the {SCHEMA_VERSION} this rcpkit knows"):
        SqliteStore.open(tmp_path)
    assert tables(path) == {"future_layout"}  # none of our tables was created in it
    assert user_version(path) == SCHEMA_VERSION + 1


def test_serving_a_newer_store_fails_with_the_reason(tmp_path: Path) -> None:
    newer_store(tmp_path)
    with pytest.raises(ConfigError, match=r"cannot open the engine: the store .* upgrade rcpkit"):
        _engine_server(tmp_path, {"embedder": "hashing"})
