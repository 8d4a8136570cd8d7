"""Bounded bookkeeping on the embedded store: idempotency keys expire (§7.10) and write-log
rows are pruned once the saved index state covers them, without any engine — running or
restarted — missing a change it had not taken in yet (§7.7.1). Two engines on one data
directory stand in for two processes; an injected clock replaces sleeping."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.test_pipeline import make_config
from rcpkit.engine.core import Engine
from rcpkit.engine.indexes.derived import DerivedIndexes
from rcpkit.engine.types import DocumentIn, SearchRequest
from support.clock import FakeClock

DAY = 86_400.0
HOUR = 3_600.0
QUERIES = ["girder welded", "concrete slab", "rebar tied crossing", "girder 7"]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def open_engine(path: Path, clock: FakeClock, **overrides: Any) -> Engine:
    return Engine.open(make_config(path, **overrides), clock=clock)


def log_positions(path: Path) -> list[int]:
    with sqlite3.connect(path / "store.sqlite3") as db:
        return [row[0] for row in db.execute("SELECT pos FROM write_log ORDER BY pos")]


def idempotency_keys(path: Path) -> list[str]:
    with sqlite3.connect(path / "store.sqlite3") as db:
        return [row[0] for row in db.execute("SELECT key FROM idempotency ORDER BY key")]


def girders(start: int, stop: int) -> list[DocumentIn]:
    return [DocumentIn(f"Girder {i} was welded on level {i % 4}.", id=f"g{i}")
            for i in range(start, stop)]


def results(engine: Engine) -> list[list[str]]:
    return [[hit.id for hit in engine.search(SearchRequest(query, k=50, mode=mode)).hits]
            for query in QUERIES for mode in ("sparse", "dense")]


def churn(engine: Engine, clock: FakeClock, rounds: int) -> None:
    """Adds, updates and deletes, one write each, an hour apart."""
    for round_no in range(rounds):
        engine.add(girders(4 * round_no, 4 * round_no + 4))
        clock.now += HOUR
        engine.add([DocumentIn(f"Girder {4 * round_no} was repainted, round {round_no}.",
                               id=f"g{4 * round_no}")])
        clock.now += HOUR
        engine.delete([f"g{4 * round_no + 1}"])
        clock.now += HOUR


# ── idempotency keys (§7.10) ────────────────────────────────────────────────

def test_a_key_replays_within_retention_and_is_new_after(tmp_path: Path,
                                                         clock: FakeClock) -> None:
    with open_engine(tmp_path, clock) as engine:
        first = engine.add([DocumentIn("Concrete slab poured.", id="slab")],
                           idempotency_key="k")
        clock.now += DAY - 60
        replay = engine.add([DocumentIn("Rebar tied.", id="rebar")], idempotency_key="k")
        assert (replay.ids, replay.index_version) == (["slab"], first.index_version)
        assert engine.stats()["documents"] == 1
        clock.now += 120  # now older than the 24 h default: the same key is a new write
        fresh = engine.add([DocumentIn("Rebar tied.", id="rebar")], idempotency_key="k")
        assert fresh.ids == ["rebar"] and fresh.index_version != first.index_version
        assert engine.stats()["documents"] == 2
        # ...and the new reply is what the key replays from now on.
        assert engine.add([DocumentIn("x", id="x")], idempotency_key="k").ids == ["rebar"]


def test_expired_keys_are_deleted_by_later_writes(tmp_path: Path, clock: FakeClock) -> None:
    with open_engine(tmp_path, clock, retention={"idempotency_seconds": HOUR}) as engine:
        engine.add([DocumentIn("Slab poured.", id="slab")], idempotency_key="old")
        clock.now += HOUR / 2
        engine.add([DocumentIn("Rebar tied.", id="rebar")], idempotency_key="young")
        assert idempotency_keys(tmp_path) == ["old", "young"]
        clock.now += HOUR * 0.75
        engine.delete(["nothing-here"])  # any write prunes
        assert idempotency_keys(tmp_path) == ["young"]


# ── write log ───────────────────────────────────────────────────────────────

def test_log_rows_go_only_at_or_below_the_saved_state_and_once_old(tmp_path: Path,
                                                                   clock: FakeClock) -> None:
    with open_engine(tmp_path, clock, index={"save_every": 3}) as engine:
        for i in range(5):
            engine.add(girders(i, i + 1))
        store = engine._store
        assert log_positions(tmp_path) == [1, 2, 3, 4, 5]  # saved at 3, but all rows young
        clock.now += HOUR + 1
        engine.add(girders(5, 6))  # saves at 6 and prunes what is both saved and old
        assert log_positions(tmp_path) == [6]
        assert store.log_floor() == 5 and store.log_position() == 6
        clock.now += HOUR + 1
        engine.add(girders(6, 7))  # 6 is old and saved; 7 is neither
        assert log_positions(tmp_path) == [7]
        clock.now += HOUR + 1
        engine.add(girders(7, 8))  # 8 is past the state saved at 6: 7 stays
        assert log_positions(tmp_path) == [7, 8]
        assert store.delta_since(5) is None and store.delta_since(6) is not None


def test_the_log_is_kept_for_the_snapshot_retention_too(tmp_path: Path,
                                                        clock: FakeClock) -> None:
    # write_log_retention_seconds below retain_seconds is raised to it: the §7.7.1 time
    # rule of garbage collection reads write times from the log.
    with open_engine(tmp_path, clock, index={"save_every": 1},
                     retention={"write_log_seconds": 1, "seconds": HOUR}) as engine:
        engine.add(girders(0, 1))
        clock.now += HOUR / 2
        engine.add(girders(1, 2))
        assert log_positions(tmp_path) == [1, 2]
        clock.now += HOUR + 1
        engine.add(girders(2, 3))
        assert log_positions(tmp_path) == [3]


def test_an_emptied_log_keeps_its_position_and_its_state(
        tmp_path: Path, clock: FakeClock, rebuilds: list[DerivedIndexes]) -> None:
    with open_engine(tmp_path, clock, index={"save_every": 1}) as engine:
        engine.add(girders(0, 2))
        engine.add(girders(2, 4))
        clock.now += HOUR + 1
        engine.delete(["absent"])  # changes nothing, so logs nothing, but prunes
        assert log_positions(tmp_path) == []
        store = engine._store
        assert store.log_position() == store.log_floor() == 2
        assert store.delta_since(1) is None
        delta = store.delta_since(2)
        assert delta is not None and (delta.position, delta.added, delta.removed) == (2, [], [])
    rebuilds.clear()
    with open_engine(tmp_path, clock) as reopened:
        assert rebuilds == []  # the saved state at 2 is still the log's position
        assert reopened.stats()["documents"] == 4


# ── engines behind the pruned log ───────────────────────────────────────────

@pytest.fixture
def rebuilds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[DerivedIndexes]]:
    """The index sets that were rebuilt from the rows (rather than load a state)."""
    seen: list[DerivedIndexes] = []
    original = DerivedIndexes._rebuild

    def counting(self: DerivedIndexes) -> None:
        seen.append(self)
        original(self)

    monkeypatch.setattr(DerivedIndexes, "_rebuild", counting)
    yield seen


def test_an_idle_engine_reloads_the_saved_state_across_a_pruned_range(
        tmp_path: Path, clock: FakeClock, rebuilds: list[DerivedIndexes],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with open_engine(tmp_path, clock, index={"save_every": 4}) as writer, \
            open_engine(tmp_path, clock, index={"save_every": 4}) as reader:
        writer.add(girders(100, 102))
        assert reader.refresh() and results(reader) == results(writer)
        behind = indexes_of(reader).position
        churn(writer, clock, rounds=5)  # adds, updates, deletes; saves; prunes
        writer.delete(["g100"])
        writer.add(girders(200, 201))  # two writes past the last saved state
        assert writer._store.log_floor() > behind  # what the reader needs is gone
        assert indexes_of(writer).saved_position == writer._store.log_position() - 2
        rebuilds.clear()
        installed: list[tuple[int, int]] = []
        install = DerivedIndexes._install

        def recording(self: DerivedIndexes, *args: Any) -> None:
            installed.append((args[-1], writer._store.log_position()))
            install(self, *args)

        monkeypatch.setattr(DerivedIndexes, "_install", recording)
        assert reader.refresh()
        assert rebuilds == []  # it loaded the saved state and caught up from there
        # ...before swapping it in: searches never ran on the older saved state (§7.7.1).
        assert installed == [(writer._store.log_position(),) * 2]
        assert results(reader) == results(writer)
        assert reader.stats()["documents"] == writer.stats()["documents"] == 2 + 5 * 3
        assert {hit.doc_id for hit in reader.search(SearchRequest("girder", k=50)).hits} \
            == {f"g{i}" for i in range(20) if i % 4 != 1} | {"g101", "g200"}


def test_a_restart_on_a_state_older_than_the_pruned_log_rebuilds(
        tmp_path: Path, clock: FakeClock, rebuilds: list[DerivedIndexes]) -> None:
    data = tmp_path / "data"
    with open_engine(data, clock, index={"save_every": 1000}) as engine:
        engine.add(girders(0, 6))
    shutil.copytree(data / "indexes", tmp_path / "old-indexes")  # a state at position 1
    with open_engine(data, clock, index={"save_every": 2}) as engine:
        churn(engine, clock, rounds=4)
        expected = results(engine)
        assert engine._store.log_floor() > 1
    shutil.rmtree(data / "indexes")
    shutil.copytree(tmp_path / "old-indexes", data / "indexes")
    rebuilds.clear()
    with open_engine(data, clock) as restarted:
        assert len(rebuilds) == 1  # the old state cannot be caught up: rebuilt from the rows
        assert results(restarted) == expected


def indexes_of(engine: Engine) -> DerivedIndexes:
    """The engine's derived indexes (always built on SQLite)."""
    assert engine.indexes is not None
    return engine.indexes
