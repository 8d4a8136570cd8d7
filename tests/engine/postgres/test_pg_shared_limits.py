"""Limits counted once for every machine sharing one PostgreSQL database (§15.5): the
scenarios of tests/tenancy/test_shared_limits.py on :class:`PostgresCounters`, and a lease
whose database session ended (its process killed, on any machine) reclaimed."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import psycopg
import pytest

from rcpkit.tenancy.limits import CONCURRENCY_RETRY_S, CounterStore, Limiter, Limits
from rcpkit.tenancy.shared_limits import PostgresCounters
from support.clock import FakeClock
from tenancy.test_shared_limits import DAY, Pair, SharedStoreScenarios


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(DAY * 20_000 + 3_600.0)


@pytest.fixture
def stores(pg_dsn: str) -> Iterator[list[PostgresCounters]]:
    made = [PostgresCounters(pg_dsn) for _ in range(2)]
    yield made
    for store in made:
        store.close()


@pytest.fixture
def two(stores: list[PostgresCounters], clock: FakeClock) -> Pair:
    return Limiter(clock, clock, stores[0]), Limiter(clock, clock, stores[1])


@pytest.fixture
def open_store(stores: list[PostgresCounters], pg_dsn: str) -> Callable[[], CounterStore]:
    return functools.partial(PostgresCounters, pg_dsn)  # the tables are made by ``stores``


class TestLimitsTables(SharedStoreScenarios):
    """The scenarios on PostgreSQL."""


def test_a_lease_of_an_ended_session_is_reclaimed_and_its_store_reconnects(
        stores: list[PostgresCounters], two: Pair, pg_dsn: str) -> None:
    first, second = two
    limits = Limits(concurrent=1)
    assert first.admit("a", limits) is None
    assert second.admit("a", limits) == CONCURRENCY_RETRY_S  # its holder's session is live
    # The process holding the slot dies: the server ends its session.
    pid = int(stores[0].holder.split("|")[1])
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        for _ in range(100):
            gone = admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                                 (pid,)).fetchone() is None
            if gone:
                break
            admin.execute("SELECT pg_sleep(0.05)")
    assert second.admit("a", limits) is None
    # The first store opens a new session at its next admission, whose lease counts.
    second.release("a")
    assert first.admit("a", limits) is None
    assert stores[0].holder.split("|")[1] != str(pid)
    assert second.admit("a", limits) == CONCURRENCY_RETRY_S
