"""Per-principal rate limits and quotas (§15.5), on an injected clock.

- ``requests_per_second`` with a ``burst``: a token bucket; a refused request learns exactly
  when the next token arrives.
- ``concurrent``: requests of one principal in flight at once.
- ``write_bytes_per_day``: encoded params of write methods per UTC day; a refusal waits
  until the day ends.
- ``transform_n`` / ``graph_hops``: a per-principal cap on the fan-out of one request, below
  the server-wide ``transform.maxN`` / ``graph.maxHops``.

Counters live in the process: behind a load balancer each of N processes grants the limits
on its own (see the operating guide).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

__all__ = ["CONCURRENCY_RETRY_S", "Limiter", "Limits", "QuotaExceeded"]

CONCURRENCY_RETRY_S = 1.0
"""Retry advice for a principal at its ``concurrent`` cap: requests take milliseconds, and
no clock says when one of its own will end."""

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


@dataclass
class _Bucket:
    tokens: float
    last: float


class Limiter:
    """The counters of every principal in this process. ``clock`` is monotonic seconds (the
    token bucket), ``wall`` is epoch seconds (the UTC day of the write quota)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._wall = wall
        self._buckets: dict[str, _Bucket] = {}
        self._in_flight: dict[str, int] = {}
        self._written: dict[str, tuple[int, int]] = {}
        """principal → (UTC day number, bytes written that day)."""

    def admit(self, principal: str, limits: Limits) -> float | None:
        """Count one request in; the seconds to wait instead when a limit refuses it (never
        sooner than the bucket holds a token). An admitted request must be given back to
        :meth:`release`."""
        busy = limits.concurrent is not None \
            and self._in_flight.get(principal, 0) >= limits.concurrent
        wait = self._token_wait(principal, limits)
        if busy or wait > 0.0:
            return max(wait, CONCURRENCY_RETRY_S if busy else 0.0)
        if limits.requests_per_second is not None:
            self._buckets[principal].tokens -= 1.0
        self._in_flight[principal] = self._in_flight.get(principal, 0) + 1
        return None

    def _token_wait(self, principal: str, limits: Limits) -> float:
        """The seconds until ``principal``'s bucket holds a token (0: it does), refilled to now."""
        rate = limits.requests_per_second
        if rate is None:
            return 0.0
        capacity = float(limits.burst or max(1, math.ceil(rate)))
        now = self._clock()
        bucket = self._buckets.setdefault(principal, _Bucket(capacity, now))
        bucket.tokens = min(capacity, bucket.tokens + (now - bucket.last) * rate)
        bucket.last = now
        return max(0.0, (1.0 - bucket.tokens) / rate)

    def release(self, principal: str) -> None:
        left = self._in_flight.get(principal, 0) - 1
        if left > 0:
            self._in_flight[principal] = left
        else:
            self._in_flight.pop(principal, None)

    def charge_writes(self, principal: str, limits: Limits, size: int) -> float | None:
        """Count ``size`` write bytes; the seconds until the quota renews instead when they
        do not fit today. Raises :class:`QuotaExceeded` when they never would."""
        quota = limits.write_bytes_per_day
        if quota is None:
            return None
        if size > quota:
            raise QuotaExceeded(f"a write of {size} bytes exceeds the daily quota of {quota}")
        now = self._wall()
        today = int(now // _DAY_S)
        day, used = self._written.get(principal, (today, 0))
        if day != today:
            used = 0
        if used + size > quota:
            return (today + 1) * _DAY_S - now
        self._written[principal] = (today, used + size)
        return None
