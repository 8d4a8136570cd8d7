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

from rcpkit.engine.config import EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.errors import Unavailable
from rcpkit.engine.store.sqlite import SqliteStore
from rcpkit.engine.types import DocumentIn, SearchRequest


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    opened = Engine.open(EngineConfig(data_dir=tmp_path, embedder="hashing", index_save_every=1))
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
