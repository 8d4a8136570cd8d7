"""The derived indexes' readers/writer lock: many readers or one writer, writers first."""

from __future__ import annotations

import threading

from rcpkit.engine.indexes.derived import ReadWriteLock
from support.waiting import until


def _started(target: object) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def _waiting(lock: ReadWriteLock, threads: int) -> None:
    """Return once ``threads`` threads wait on the lock's condition (CPython keeps one
    waiter per waiting thread): no guessed pause that a loaded machine could outlast."""
    until(lambda: len(lock._cond._waiters) == threads,  # type: ignore[attr-defined]
          what=f"{threads} thread(s) waiting on the lock")


def test_readers_share_and_a_writer_waits_for_them_all() -> None:
    lock = ReadWriteLock()
    events: list[str] = []
    with lock.reading(), lock.reading():  # the same reusable object, entered twice
        writer = _started(lambda: lock.writing().__enter__() or events.append("writing"))
        _waiting(lock, 1)
        assert events == []
    writer.join(2)
    assert events == ["writing"]


def test_a_waiting_writer_goes_before_new_readers() -> None:
    lock = ReadWriteLock()
    events: list[str] = []

    def write() -> None:
        with lock.writing():
            events.append("write")

    def read() -> None:
        with lock.reading():
            events.append("read")

    with lock.reading():
        writer = _started(write)
        _waiting(lock, 1)
        reader = _started(read)
        _waiting(lock, 2)
        assert events == []  # the new reader waits behind the writer
    writer.join(2)
    reader.join(2)
    assert events == ["write", "read"]
