"""A clock that only moves when a test says so, for code that takes ``clock=`` (epoch
seconds): expiry, retention and recency become deterministic, with no sleeping."""

from __future__ import annotations

import time

__all__ = ["FakeClock"]


class FakeClock:
    """``clock()`` returns :attr:`now`; :meth:`advance` (or assigning ``now``) moves it."""

    def __init__(self, now: float | None = None) -> None:
        self.now = time.time() if now is None else now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds``; returns the new time."""
        self.now += seconds
        return self.now
