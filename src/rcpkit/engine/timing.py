"""Wall time of the stages of one engine call, for operators' latency metrics and trace
spans (the binding reports them; the engine never knows who listens)."""

from __future__ import annotations

import time

__all__ = ["Stage", "StageClock"]

Stage = tuple[str, float, float]
"""``(name, started, seconds)``: ``started`` on the :func:`time.perf_counter` clock."""


class StageClock:
    """Laps of one call: each :meth:`lap` closes the stage that began at the previous lap
    (or at creation), so consecutive stages tile the call without gaps."""

    __slots__ = ("_last", "stages")

    def __init__(self) -> None:
        self.stages: list[Stage] = []
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        """The stage ``name`` ended now."""
        now = time.perf_counter()
        self.stages.append((name, self._last, now - self._last))
        self._last = now
