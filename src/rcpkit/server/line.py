"""First come, first served: calls that must not overtake each other (writes, §7.10).

A lock lets whichever waiting thread the OS wakes first go next, so two pipelined
``index/add`` calls could commit in either order. A :class:`Line` gives each call its
:class:`Place` when the request is admitted — on the event loop, in the order the frames
arrived, across every connection of the process — and lets one call run at a time, in
that order. A call leaves the line when it ends (in its worker thread, for a synchronous
handler) or when it is cancelled or times out while waiting (§7.14, §13.1).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

__all__ = ["Line", "Place"]


class Place:
    """A call's place in a :class:`Line`; :attr:`turn` resolves when the call may run."""

    __slots__ = ("_loop", "turn")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.turn: asyncio.Future[None] = loop.create_future()

    def grant(self) -> None:
        """Resolve :attr:`turn` on its loop (callable from any thread)."""
        self._loop.call_soon_threadsafe(_resolve, self.turn)


def _resolve(turn: asyncio.Future[None]) -> None:
    if not turn.done():
        turn.set_result(None)


class Line:
    """Places in arrival order; the first one's call runs, the others wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._places: deque[Place] = deque()

    def join(self) -> Place:
        """A place at the end of the line (call on the running event loop)."""
        place = Place(asyncio.get_running_loop())
        with self._lock:
            self._places.append(place)
            first = len(self._places) == 1
        if first:
            place.grant()
        return place

    def leave(self, place: Place) -> None:
        """Give up ``place``, whether its call ran or is still waiting; the next one's turn
        comes when the first leaves. Leaving twice does nothing (any thread)."""
        with self._lock:
            if place not in self._places:
                return
            was_first = self._places[0] is place
            self._places.remove(place)
            following = self._places[0] if was_first and self._places else None
        if following is not None:
            following.grant()
