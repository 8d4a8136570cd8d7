"""``sessionId`` dedup state (§7.7.3), per process, expiring on the injected clock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

__all__ = ["SessionKey", "Sessions"]

SessionKey = tuple[str | None, str]
"""(caller, sessionId): callers cannot see or poison each other's sessions."""


class Sessions:
    """Hit ids returned so far per session; a session unused for ``ttl_seconds`` is gone."""

    def __init__(self, ttl_seconds: float, clock: Callable[[], float]) -> None:
        self._ttl = ttl_seconds
        self._clock = clock
        self._seen: dict[SessionKey, tuple[float, set[str]]] = {}
        self._lock = threading.Lock()

    def seen(self, session: SessionKey) -> set[str]:
        with self._lock:
            self._expire(self._clock())
            entry = self._seen.get(session)
            return set(entry[1]) if entry else set()

    def remember(self, session: SessionKey, hit_ids: Sequence[str]) -> None:
        now = self._clock()
        with self._lock:
            self._expire(now)
            _, seen = self._seen.get(session, (now, set()))
            seen.update(hit_ids)
            self._seen[session] = (now, seen)

    def _expire(self, now: float) -> None:
        for session in [s for s, (at, _) in self._seen.items() if now - at > self._ttl]:
            del self._seen[session]
