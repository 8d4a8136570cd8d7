"""A full disk (ENOSPC / SQLITE_FULL): a write that did not commit is ``-32010`` with a
"disk full" detail; a write that did commit is acknowledged even if the housekeeping after
it (index saves, garbage collection, pruning) hits the full disk (§7.10, §12)."""

from __future__ import annotations

import errno
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from rcpkit.engine.config import EmbedderConfig, EngineConfig, IndexConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.errors import Unavailable
from rcpkit.engine.sidecar import SidecarDatabase
from rcpkit.engine.store.sqlite import SqliteStore
from rcpkit.engine.types import DocumentIn, SearchRequest


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    opened = Engine.open(EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                                      index=IndexConfig(save_every=1)))
    yield opened
    opened.close()


def _found(engine: Engine, query: str) -> list[str]:
    result = engine.search(SearchRequest(query=query, k=10, unit="document"))
    return [hit.id for hit in result.hits]


@pytest.mark.parametrize("failure", [
    OSError(errno.ENOSPC, "No space left on device"),
    sqlite3.OperationalError("database or disk is full"),
])
def test_a_write_that_hits_a_full_disk_is_backend_unavailable(
        engine: Engine, monkeypatch: pytest.MonkeyPatch, failure: Exception) -> None:
    def full(*args: object) -> list[int]:
        raise failure

    with monkeypatch.context() as patched:
        patched.setattr(SqliteStore, "_insert", staticmethod(full))
        with pytest.raises(Unavailable) as refused:
            engine.add([DocumentIn(text="honey bees", id="lost")])
    assert refused.value.detail == "disk full"
    assert _found(engine, "honey bees") == []
    engine.add([DocumentIn(text="honey bees", id="kept")])  # space again: writes go on
    assert _found(engine, "honey bees") == ["kept"]


def test_housekeeping_on_a_full_disk_never_fails_a_committed_write(
        engine: Engine, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(engine.indexes, "save", full)
    monkeypatch.setattr(engine._store, "collect_garbage", full)
    monkeypatch.setattr(engine._store, "prune_bookkeeping", full)
    with caplog.at_level(logging.WARNING):
        result = engine.add([DocumentIn(text="honey bees", id="acknowledged")])
    assert result.ids == ["acknowledged"]
    assert _found(engine, "honey bees") == ["acknowledged"]
    assert sum("after a committed write failed" in r.message for r in caplog.records) == 3


def _cap_pages(db: sqlite3.Connection, spare: int) -> None:
    """Make ``db`` full after ``spare`` more pages: a real ``SQLITE_FULL``, without a small
    disk to fill."""
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages + spare}")


def test_a_full_record_refuses_the_write_and_takes_the_next_one(engine: Engine) -> None:
    writer = engine._store._writer  # type: ignore[attr-defined]
    _cap_pages(writer, 2)
    with pytest.raises(Unavailable) as refused:
        engine.add([DocumentIn(text="honey bees " * 4000, id="lost")])
    assert refused.value.detail == "disk full"
    assert not writer.in_transaction
    _cap_pages(writer, 100_000)
    engine.add([DocumentIn(text="honey bees", id="kept")])
    assert _found(engine, "honey bees") == ["kept"]


def test_a_full_side_table_refuses_the_write_and_takes_the_next_one(tmp_path: Path) -> None:
    tables = SidecarDatabase(tmp_path / "side.sqlite", "CREATE TABLE notes (body TEXT);")
    _cap_pages(tables.db, 2)
    with pytest.raises(Unavailable) as refused, tables.transaction() as db:
        db.execute_many("INSERT INTO notes VALUES (?)", [("x" * 100_000,)] * 20)
    assert refused.value.detail == "disk full"
    _cap_pages(tables.db, 100_000)
    with tables.transaction() as db:
        db.execute("INSERT INTO notes VALUES ('kept')")
    assert tables.read("SELECT body FROM notes") == [("kept",)]
    tables.close()


def test_a_publish_listener_on_a_full_disk_never_fails_a_committed_write(
        engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    def graph_sync() -> None:  # what the concept graph's sync raises on a full disk
        raise Unavailable("the disk is full: nothing was written", detail="disk full")

    engine.on_publish(graph_sync)
    with caplog.at_level(logging.WARNING):
        result = engine.add([DocumentIn(text="honey bees", id="acknowledged")])
    assert result.ids == ["acknowledged"]
    assert _found(engine, "honey bees") == ["acknowledged"]
    assert any("following the published version" in r.message for r in caplog.records)


def test_an_index_save_the_disk_stops_leaves_no_half_written_state(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    assert engine.indexes is not None
    engine.add([DocumentIn(text="honey bees", id="saved")])  # index_save_every=1: saved
    root = engine.config.data_dir / "indexes"
    saved = {path.name for path in root.iterdir() if path.is_dir()}

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(engine.indexes.dense, "save", full)  # after lexical wrote its files
    engine.add([DocumentIn(text="bumble bees", id="acknowledged")])
    assert {path.name for path in root.iterdir() if path.is_dir()} == saved
