"""What counting a key's limits in the root's shared ``limits.sqlite3`` costs per request,
next to counting them in the process's memory. Not a test: it prints microseconds per
admitted request (one admission and its release, with both a rate limit and a concurrency
cap, so a bucket charge and a lease) for the in-memory counters, the shared store used by
one process, and the shared store used by ``--processes`` processes at once (each its own
principal, all on one file: the cost of waiting for each other's transactions).

    python benchmarks/bench_shared_limits.py [--requests 3000] [--processes 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

from rcpkit.tenancy.limits import CounterStore, Limiter, Limits, ProcessCounters
from rcpkit.tenancy.shared_limits import LIMITS_FILE, SharedCounters

LIMITS = Limits(requests_per_second=1e9, burst=10**9, concurrent=1000)
"""Limits a request is counted against but never refused by."""


def _per_request_us(store: CounterStore, principal: str, count: int) -> float:
    limiter = Limiter(time.time, time.time, store)
    start = time.perf_counter()
    for _ in range(count):
        assert limiter.admit(principal, LIMITS) is None
        limiter.release(principal)
    return (time.perf_counter() - start) / count * 1e6


def _shared_worker(path: str, principal: str, count: int, results: multiprocessing.Queue
                   ) -> None:
    results.put(_per_request_us(SharedCounters(Path(path)), principal, count))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--processes", type=int, default=2)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / LIMITS_FILE
        memory = _per_request_us(ProcessCounters(), "bench", options.requests)
        shared = _per_request_us(SharedCounters(path), "bench", options.requests)
        results: multiprocessing.Queue = multiprocessing.Queue()
        workers = [multiprocessing.Process(target=_shared_worker,
                                           args=(str(path), f"bench{n}", options.requests,
                                                 results))
                   for n in range(options.processes)]
        for worker in workers:
            worker.start()
        contended = [results.get(timeout=600) for _ in workers]
        for worker in workers:
            worker.join(60)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min)")
    print(f"in memory, one process          {memory:8.1f} us/request")
    print(f"shared file, one process        {shared:8.1f} us/request")
    print(f"shared file, {options.processes} processes at once "
          f"{max(contended):8.1f} us/request (slowest)")


if __name__ == "__main__":
    main()
