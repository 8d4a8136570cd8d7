"""Wait for a condition, boundedly, instead of sleeping a guessed time.

For state with no event to wait on (another thread's progress, a server's task set):
polls ``predicate`` until it holds and fails after ``timeout_s``, so a test neither passes
vacuously because a thread had not got there yet nor hangs when it never does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["until", "until_async"]

_POLL_S = 0.002


def until(predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "") -> None:
    """Return once ``predicate()`` is true; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not reached within {timeout_s} s: {what}"
        time.sleep(_POLL_S)


async def until_async(predicate: Callable[[], object], timeout_s: float = 10.0,
                      what: str = "") -> None:
    """:func:`until` for a coroutine: the event loop runs while it waits."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not reached within {timeout_s} s: {what}"
        await asyncio.sleep(_POLL_S)
