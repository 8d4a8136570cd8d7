"""Limits counted once for every process serving one root (§15.5): two limiters on one
``limits.sqlite3`` stand for two ``rcpkit serve`` processes, on a fake clock. The scenarios
(``Pair`` → checks) run on PostgreSQL too (tests/engine/postgres/test_pg_shared_limits.py)."""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rcpkit.tenancy.limits import (
    CONCURRENCY_RETRY_S,
    UNAVAILABLE_RETRY_S,
    CounterStore,
    Limiter,
    Limits,
)
from rcpkit.tenancy.serving import limit_counters
from rcpkit.tenancy.shared_limits import LEASE_TTL_S, LIMITS_FILE, SharedCounters
from support.clock import FakeClock

DAY = 86_400.0
Pair = tuple[Limiter, Limiter]
"""Two limiters on one store: two processes serving one root."""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(DAY * 20_000 + 3_600.0)


@pytest.fixture
def two(tmp_path: Path, clock: FakeClock) -> Iterator[Pair]:
    stores = [SharedCounters(tmp_path / LIMITS_FILE) for _ in range(2)]
    yield Limiter(clock, clock, stores[0]), Limiter(clock, clock, stores[1])
    for store in stores:
        store.close()


RACE_BURST = 40


def _race(open_store: Callable[[], CounterStore], start: Any, admitted: Any) -> None:
    """One process of :func:`admitted_in_race`: twice the burst, as fast as it can."""
    limiter = Limiter(time.time, time.time, open_store())
    limits = Limits(requests_per_second=0.001, burst=RACE_BURST)
    start.wait(60)
    admitted.put(sum(limiter.admit("racer", limits) is None for _ in range(2 * RACE_BURST)))


def admitted_in_race(open_store: Callable[[], CounterStore], processes: int = 3) -> int:
    """Requests of one key admitted by ``processes`` processes racing on one store."""
    context = multiprocessing.get_context("fork")
    start, admitted = context.Event(), context.Queue()
    racers = [context.Process(target=_race, args=(open_store, start, admitted))
              for _ in range(processes)]
    for racer in racers:
        racer.start()
    start.set()
    total = sum(admitted.get(timeout=120) for _ in racers)
    for racer in racers:
        racer.join(60)
    return total


class SharedStoreScenarios:
    """What any shared store must do, given the fixtures ``two`` (:data:`Pair`), ``clock``
    and ``open_store`` (a fresh handle on the store, for another process)."""

    def test_two_limiters_spend_one_bucket_and_agree_on_the_wait(
            self, two: Pair, clock: FakeClock) -> None:
        first, second = two
        limits = Limits(requests_per_second=2, burst=3)
        assert [first.admit("a", limits), second.admit("a", limits),
                first.admit("a", limits)] == [None, None, None]
        # The burst is spent across both: each is told when the shared bucket next holds one.
        assert second.admit("a", limits) == pytest.approx(0.5)
        clock.advance(0.2)
        assert first.admit("a", limits) == pytest.approx(0.3)
        assert second.admit("b", limits) is None  # another principal has its own bucket
        clock.advance(0.3)
        assert second.admit("a", limits) is None
        assert first.admit("a", limits) == pytest.approx(0.5)

    def test_concurrency_slots_are_shared_and_given_back(self, two: Pair) -> None:
        first, second = two
        limits = Limits(concurrent=2)
        assert first.admit("a", limits) is None and second.admit("a", limits) is None
        assert first.admit("a", limits) == CONCURRENCY_RETRY_S
        assert second.admit("a", limits) == CONCURRENCY_RETRY_S
        first.release("a")
        assert second.admit("a", limits) is None
        assert first.admit("a", limits) == CONCURRENCY_RETRY_S

    def test_the_daily_write_quota_is_shared(self, two: Pair, clock: FakeClock) -> None:
        first, second = two
        limits = Limits(write_bytes_per_day=100)
        assert first.charge_writes("a", limits, 60) is None
        assert second.charge_writes("a", limits, 60) == pytest.approx(DAY - 3_600.0)
        assert second.charge_writes("a", limits, 40) is None
        clock.advance(DAY - 3_600.0)
        assert first.charge_writes("a", limits, 100) is None

    def test_a_lease_past_its_expiry_holds_no_slot_though_its_holder_lives(
            self, two: Pair, clock: FakeClock) -> None:
        first, second = two
        limits = Limits(concurrent=1)
        assert first.admit("a", limits) is None
        clock.advance(LEASE_TTL_S - 1)
        assert second.admit("a", limits) == CONCURRENCY_RETRY_S
        clock.advance(1)
        assert second.admit("a", limits) is None

    @pytest.mark.wire
    def test_processes_racing_on_one_store_admit_the_burst_once(
            self, open_store: Callable[[], CounterStore]) -> None:
        assert admitted_in_race(open_store) == RACE_BURST


class TestLimitsFile(SharedStoreScenarios):
    """The scenarios on ``limits.sqlite3``."""


@pytest.fixture
def open_store(tmp_path: Path) -> Callable[[], CounterStore]:
    return functools.partial(SharedCounters, tmp_path / LIMITS_FILE)


def test_the_limits_file_is_the_owner_s_alone(two: Pair, tmp_path: Path) -> None:
    assert stat.S_IMODE((tmp_path / LIMITS_FILE).stat().st_mode) == 0o600


HOLD_A_SLOT = """
import sys, time
from pathlib import Path
from rcpkit.tenancy.limits import Limiter, Limits
from rcpkit.tenancy.shared_limits import SharedCounters
limiter = Limiter(time.time, time.time, SharedCounters(Path(sys.argv[1])))
assert limiter.admit("a", Limits(concurrent=1)) is None
print("holding", flush=True)
time.sleep(600)
"""


@pytest.mark.wire
def test_a_killed_process_s_lease_is_reclaimed_and_a_live_one_s_is_not(tmp_path: Path) -> None:
    path = tmp_path / LIMITS_FILE
    holder = subprocess.Popen([sys.executable, "-c", HOLD_A_SLOT, str(path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        store = SharedCounters(path)
        limiter = Limiter(time.time, time.time, store)
        limits = Limits(concurrent=1)
        assert limiter.admit("a", limits) == CONCURRENCY_RETRY_S  # alive: its slot holds
        os.kill(holder.pid, signal.SIGKILL)
        # Killed but not reaped yet (a zombie): it holds nothing any more.
        os.waitid(os.P_PID, holder.pid, os.WEXITED | os.WNOWAIT)
        assert limiter.admit("a", limits) is None
        assert limiter.admit("a", limits) == CONCURRENCY_RETRY_S
    finally:
        holder.kill()
        holder.wait(30)
    store.close()


def test_a_reused_pid_holds_no_slot_and_another_host_s_lease_holds_until_it_lapses(
        tmp_path: Path, clock: FakeClock) -> None:
    store = SharedCounters(tmp_path / LIMITS_FILE)
    limiter = Limiter(clock, clock, store)
    limits = Limits(concurrent=1)
    # A lease of this very pid, but of a process that started at another time.
    store.run("INSERT INTO rcpkit_leases VALUES ('old', 'a', ?, ?)",
              (f"{store.host}|{os.getpid()}|1", clock() + LEASE_TTL_S))
    assert limiter.admit("a", limits) is None
    limiter.release("a")
    store.run("INSERT INTO rcpkit_leases VALUES ('far', 'a', 'elsewhere|pid:[1]|7|1', ?)",
              (clock() + 60,))
    assert limiter.admit("a", limits) == CONCURRENCY_RETRY_S  # cannot be checked: it holds
    clock.advance(60)
    assert limiter.admit("a", limits) is None
    store.close()


def test_a_store_locked_past_its_busy_timeout_refuses_rather_than_lets_through(
        tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / LIMITS_FILE
    limiter = Limiter(clock, clock, SharedCounters(path, busy_timeout_s=0.01))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        assert limiter.admit("a", Limits(requests_per_second=5)) == UNAVAILABLE_RETRY_S
        assert limiter.charge_writes("a", Limits(write_bytes_per_day=10), 5) \
            == UNAVAILABLE_RETRY_S
        assert limiter.admit("a", Limits()) is None  # nothing to count: no store needed
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert limiter.admit("a", Limits(requests_per_second=5)) is None


def test_a_store_of_a_newer_rcpkit_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / LIMITS_FILE
    SharedCounters(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE rcpkit_limits_schema SET version = 99")
    with pytest.raises(ValueError, match="newer rcpkit"):
        SharedCounters(path)


def test_the_root_s_config_chooses_the_store_and_typos_are_refused(tmp_path: Path) -> None:
    store = limit_counters(tmp_path)
    assert isinstance(store, SharedCounters) and (tmp_path / LIMITS_FILE).exists()
    store.close()
    config = tmp_path / "rcpkit.toml"
    config.write_text("[limits_store]\nurl = 'postgresql://db/rcp'\n")
    with pytest.raises(ValueError, match=r"unknown setting\(s\) url"):
        limit_counters(tmp_path)
    config.write_text("[limits_store]\ndsn = 5\n")
    with pytest.raises(ValueError, match="dsn must be a PostgreSQL connection string"):
        limit_counters(tmp_path)
