"""Fail a test that starts a process or opens a socket without the ``wire`` mark.

While an unmarked test sets up and runs, the ways to start a process (``subprocess.Popen``,
which ``asyncio``'s subprocesses use too, ``os.fork``, ``os.posix_spawn``) and to open a
socket (``bind``, ``connect``) raise :class:`UnmarkedWire`, an ``OSError`` as the real
call could raise, so that event loops and servers wind down as they would on a refused
socket. Every attempt is also recorded, and the phase then fails with the guard's message
whatever the code did with the error (swallowed it, retried, failed on another thread).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

__all__ = ["UnmarkedWire", "unless_wire"]

# (owner, attribute, what it does): every entry point the guard closes.
GUARDED: tuple[tuple[Any, str, str], ...] = (
    (subprocess.Popen, "__init__", "starts a process"),
    (os, "fork", "forks a process"),
    (os, "posix_spawn", "spawns a process"),
    (os, "posix_spawnp", "spawns a process"),
    (socket.socket, "bind", "binds a socket"),
    (socket.socket, "connect", "connects a socket"),
    (socket.socket, "connect_ex", "connects a socket"),
)


class UnmarkedWire(PermissionError):
    """A test without the ``wire`` mark started a process or opened a socket."""


def _refusal(what: str, attempts: list[str]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        message = (f"this test {what} but is not marked wire: add pytest.mark.wire, move it "
                   "under a wire/ directory, or use a fixture in WIRE_FIXTURES (tests/conftest.py)")
        attempts.append(message)
        raise UnmarkedWire(message)

    return refuse


@contextlib.contextmanager
def unless_wire(item: pytest.Item) -> Iterator[None]:
    """Close the process and socket entry points while ``item`` runs, unless it is wire."""
    if item.get_closest_marker("wire") is not None:
        yield
        return
    attempts: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        for owner, name, what in GUARDED:
            if hasattr(owner, name):
                patch.setattr(owner, name, _refusal(what, attempts))
        try:
            yield
        finally:
            if attempts:
                pytest.fail(attempts[0], pytrace=False)
