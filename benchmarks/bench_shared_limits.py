"""What counting a key's limits in the root's shared ``limits.sqlite3`` costs per request,
next to counting them in the process's memory. Not a test: it prints microseconds per
admitted request (one admission and its release, with both a rate limit and a concurrency
cap, so a bucket charge and a lease) for the in-memory counters, the shared store used by
one process, and the shared store used by ``--processes`` processes at once (each its own
principal, all on one file: the cost of waiting for each other's transactions). With
``--dsn``, the same for PostgreSQL (:class:`PostgresCounters`, its tables in that database).

    python benchmarks/bench_shared_limits.py [--requests 3000] [--processes 2] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

from rcpkit.tenancy.limits import CounterStore, Limiter, Limits, ProcessCounters
from rcpkit.tenancy.shared_limits import LIMITS_FILE, PostgresCounters, SharedCounters

LIMITS = Limits(requests_per_second=1e9, burst=10**9, concurrent=1000)
"""Limits a request is counted against but never refused by."""


def _per_request_us(store: CounterStore, principal: str, count: int) -> float:
    limiter = Limiter(time.time, time.time, store)
    start = time.perf_counter()
    for _ in range(count):
        assert limiter.admit(principal, LIMITS) is None
        limiter.release(principal)
    return (time.perf_counter() - start) / count * 1e6


def _open(where: str) -> CounterStore:
    """The shared store at ``where``: a DSN, or the path of a limits file."""
    return PostgresCounters(where) if where.startswith("postgres") \
        else SharedCounters(Path(where))


def _shared_worker(where: str, principal: str, count: int, results: multiprocessing.Queue
                   ) -> None:
    results.put(_per_request_us(_open(where), principal, count))


def _contended_us(where: str, processes: int, count: int) -> float:
    """The slowest of ``processes`` processes counting at once in the store at ``where``."""
    results: multiprocessing.Queue = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_shared_worker,
                                       args=(where, f"bench{n}", count, results))
               for n in range(processes)]
    for worker in workers:
        worker.start()
    contended = [results.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join(60)
    return max(contended)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--dsn", help="also measure PostgreSQL at this DSN")
    options = parser.parse_args()
    rows = [("in memory, one process", _per_request_us(ProcessCounters(), "bench",
                                                        options.requests))]
    with tempfile.TemporaryDirectory() as scratch:
        stores = [("limits.sqlite3", str(Path(scratch) / LIMITS_FILE))]
        if options.dsn:
            stores.append(("PostgreSQL", options.dsn))
        for name, where in stores:
            rows.append((f"{name}, one process",
                         _per_request_us(_open(where), "bench", options.requests)))
            rows.append((f"{name}, {options.processes} processes at once (slowest)",
                         _contended_us(where, options.processes, options.requests)))
    print(f"load average {os.getloadavg()[0]:.2f} (1 min)")
    for name, microseconds in rows:
        print(f"{name:45} {microseconds:8.1f} us/request")


if __name__ == "__main__":
    main()
