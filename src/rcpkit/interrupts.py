"""Stop points for long synchronous work: cancellation (§7.14) and deadlines (§13.1).

The dispatcher runs each handler with the check of its request installed
(:func:`checked_by`); long stages — every embedding batch, hence rerank, ``embed``
and ingest — call :func:`checkpoint` between batches, which raises ``-32006`` once the
request was cancelled or ``-32014`` once its deadline passed. Without it a cancelled
request's worker thread would run to the end. A context variable, so the engine needs
no protocol object: code running outside a request checks nothing.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["checked_by", "checkpoint"]

_check: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "rcpkit_stop_check", default=None)


def checkpoint() -> None:
    """Raise if the request this code serves was cancelled or ran out of time."""
    check = _check.get()
    if check is not None:
        check()


@contextmanager
def checked_by(check: Callable[[], None]) -> Iterator[None]:
    """Install ``check`` (which raises to stop) for :func:`checkpoint` in this context."""
    token = _check.set(check)
    try:
        yield
    finally:
        _check.reset(token)
