"""Per-principal rate limits and quotas (§15.5), on an injected clock.

- ``requests_per_second`` with a ``burst``: a token bucket; a refused request learns exactly
  when the next token arrives.
- ``concurrent``: requests of one principal in flight at once.
- ``write_bytes_per_day``: encoded params of write methods per UTC day; a refusal waits
  until the day ends.
- ``transform_n`` / ``graph_hops``: a per-principal cap on the fan-out of one request, below
  the server-wide ``transform.maxN`` / ``graph.maxHops``.

The counters live in a :class:`CounterStore`: this process's memory by default, or a store
shared by every process serving one root (:mod:`.shared_limits`), so that N processes behind a
load balancer grant a key its limits once, not N times.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Protocol

__all__ = ["CONCURRENCY_RETRY_S", "UNAVAILABLE_RETRY_S", "CounterStore", "Counters", "Limiter",
           "Limits", "LimitsUnavailable", "ProcessCounters", "QuotaExceeded"]

logger = logging.getLogger("rcpkit.server")

CONCURRENCY_RETRY_S = 1.0
"""Retry advice for a principal at its ``concurrent`` cap: requests take milliseconds, and
no clock says when one of its own will end."""

UNAVAILABLE_RETRY_S = 1.0
"""Retry advice when the counters cannot be read (a shared store locked past its busy
timeout): the request is refused rather than let through uncounted."""

_DAY_S = 86_400


@dataclass(frozen=True)
class Limits:
    """What one principal may do; None is unlimited."""

    requests_per_second: float | None = None
    burst: int | None = None
    """Requests a quiet principal may send at once (default: one second's worth)."""
    concurrent: int | None = None
    write_bytes_per_day: int | None = None
    transform_n: int | None = None
    graph_hops: int | None = None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str) -> Limits:
        """From ``rcpkit.toml`` ``[limits]`` or a key's record; ValueError names the key."""
        known = {field.name for field in fields(cls)}
        for name, value in values.items():
            if name not in known:
                raise ValueError(f"{where}: unknown limit {name!r} "
                                 f"(known: {', '.join(sorted(known))})")
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0 \
                    or (name != "requests_per_second" and not float(value).is_integer()):
                raise ValueError(f"{where}: {name} must be a positive "
                                 f"{'number' if name == 'requests_per_second' else 'integer'}")
        return cls(**{name: value if name == "requests_per_second" else int(value)
                      for name, value in values.items()})

    def over(self, defaults: Limits) -> Limits:
        """These limits, with ``defaults`` where none is set."""
        return replace(defaults, **{k: v for k, v in asdict(self).items() if v is not None})

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


class QuotaExceeded(Exception):
    """A write larger than the whole daily quota: it can never be accepted."""


class LimitsUnavailable(Exception):
    """The counters cannot be read or changed now (a shared store busy or broken)."""


class Counters(Protocol):
    """The counters, read and changed inside one :meth:`CounterStore.transaction`."""

    def bucket(self, principal: str) -> tuple[float, float] | None:
        """``(tokens, last refill time)`` of the principal's token bucket, None before any."""

    def set_bucket(self, principal: str, tokens: float, last: float) -> None: ...

    def in_flight(self, principal: str, now: float) -> int:
        """Requests of the principal holding a concurrency slot now."""

    def take_slot(self, principal: str, now: float) -> object:
        """Count one more request in flight; the handle :meth:`CounterStore.give_back` takes."""

    def written(self, principal: str) -> tuple[int, int] | None:
        """``(UTC day number, bytes written that day)``, None before any write."""

    def set_written(self, principal: str, day: int, used: int) -> None: ...


class CounterStore(Protocol):
    """Where the counters live: this process (:class:`ProcessCounters`) or a store every
    process serving one root shares (:class:`.shared_limits.SharedCounters`)."""

    def transaction(self, principal: str) -> AbstractContextManager[Counters]:
        """``principal``'s counters, changed atomically (the transactions of one principal
        follow one another); :class:`LimitsUnavailable` when they cannot be."""

    def give_back(self, slot: object) -> None:
        """Free a slot :meth:`Counters.take_slot` handed out."""


class ProcessCounters:
    """The counters of one process, in memory."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        self._in_flight: dict[str, int] = {}
        self._written: dict[str, tuple[int, int]] = {}

    @contextlib.contextmanager
    def transaction(self, principal: str) -> Iterator[Counters]:
        yield self

    def bucket(self, principal: str) -> tuple[float, float] | None:
        return self._buckets.get(principal)

    def set_bucket(self, principal: str, tokens: float, last: float) -> None:
        self._buckets[principal] = (tokens, last)

    def in_flight(self, principal: str, now: float) -> int:
        return self._in_flight.get(principal, 0)

    def take_slot(self, principal: str, now: float) -> object:
        self._in_flight[principal] = self._in_flight.get(principal, 0) + 1
        return principal

    def give_back(self, slot: object) -> None:
        principal = str(slot)
        left = self._in_flight.get(principal, 0) - 1
        if left > 0:
            self._in_flight[principal] = left
        else:
            self._in_flight.pop(principal, None)

    def written(self, principal: str) -> tuple[int, int] | None:
        return self._written.get(principal)

    def set_written(self, principal: str, day: int, used: int) -> None:
        self._written[principal] = (day, used)


class Limiter:
    """The limits of every principal, counted in ``store`` (default: this process alone).
    ``clock`` is seconds for the token buckets and concurrency leases (monotonic in one
    process; a shared store needs epoch seconds, which every process reads alike), ``wall``
    is epoch seconds (the UTC day of the write quota). When the store cannot count, the
    request is refused (fail closed) with :data:`UNAVAILABLE_RETRY_S`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 store: CounterStore | None = None) -> None:
        self._clock = clock
        self._wall = wall
        self.store: CounterStore = store or ProcessCounters()
        self._held: dict[str, list[object]] = {}
        """principal → the slots its requests in flight in this process hold (None: a
        request admitted without a concurrency limit, which holds none)."""

    def admit(self, principal: str, limits: Limits) -> float | None:
        """Count one request in; the seconds to wait instead when a limit refuses it (never
        sooner than the bucket holds a token). An admitted request must be given back to
        :meth:`release`."""
        slot: object = None
        if limits.requests_per_second is not None or limits.concurrent is not None:
            try:
                with self.store.transaction(principal) as counters:
                    now = self._clock()
                    busy = limits.concurrent is not None \
                        and counters.in_flight(principal, now) >= limits.concurrent
                    tokens, last, wait = (0.0, 0.0, 0.0) if limits.requests_per_second \
                        is None else _refilled(counters, principal, limits, now)
                    if busy or wait > 0.0:
                        return max(wait, CONCURRENCY_RETRY_S if busy else 0.0)
                    if limits.requests_per_second is not None:
                        counters.set_bucket(principal, tokens - 1.0, last)
                    if limits.concurrent is not None:
                        slot = counters.take_slot(principal, now)
            except LimitsUnavailable as exc:
                logger.error("refusing a request of %s: %s", principal, exc)
                return UNAVAILABLE_RETRY_S
        self._held.setdefault(principal, []).append(slot)
        return None

    def release(self, principal: str) -> None:
        held = self._held.get(principal)
        if not held:
            return
        slot = held.pop()
        if not held:
            del self._held[principal]
        if slot is not None:
            self.store.give_back(slot)

    def charge_writes(self, principal: str, limits: Limits, size: int) -> float | None:
        """Count ``size`` write bytes; the seconds until the quota renews instead when they
        do not fit today. Raises :class:`QuotaExceeded` when they never would."""
        quota = limits.write_bytes_per_day
        if quota is None:
            return None
        if size > quota:
            raise QuotaExceeded(f"a write of {size} bytes exceeds the daily quota of {quota}")
        try:
            with self.store.transaction(principal) as counters:
                now = self._wall()
                today = int(now // _DAY_S)
                day, used = counters.written(principal) or (today, 0)
                if day != today:
                    used = 0
                if used + size > quota:
                    return (today + 1) * _DAY_S - now
                counters.set_written(principal, today, used + size)
        except LimitsUnavailable as exc:
            logger.error("refusing a write of %s: %s", principal, exc)
            return UNAVAILABLE_RETRY_S
        return None


def _refilled(counters: Counters, principal: str, limits: Limits, now: float
              ) -> tuple[float, float, float]:
    """``principal``'s bucket refilled to ``now``: (tokens, refill time, seconds until it
    holds a token). Time never runs backwards for a bucket: a clock behind its last refill
    (another process's, or stepped back) adds nothing and waits for that refill time."""
    rate = limits.requests_per_second
    assert rate is not None
    capacity = float(limits.burst or max(1, math.ceil(rate)))
    tokens, last = counters.bucket(principal) or (capacity, now)
    tokens = min(capacity, tokens + max(0.0, now - last) * rate)
    last = max(last, now)
    return tokens, last, 0.0 if tokens >= 1.0 else (1.0 - tokens) / rate + (last - now)
