"""The guard behind the ``wire`` mark (tests/conftest.py, support/wire_guard.py): a test
without the mark that starts a process or opens a socket fails, even when the code under
test swallows the error or does it on another thread; a marked test is left alone."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest

from support.wire_guard import GUARDED, UnmarkedWire, unless_wire


def _start_a_process() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def _start_a_process_from_asyncio() -> None:
    async def start() -> None:
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")

    asyncio.run(start())


def _bind_a_socket() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))


def _connect_a_socket() -> None:
    socket.create_connection(("127.0.0.1", 9), timeout=1).close()


ATTEMPTS = {"process": _start_a_process, "asyncio process": _start_a_process_from_asyncio,
            "bind": _bind_a_socket, "connect": _connect_a_socket}


@pytest.mark.parametrize("attempt", ATTEMPTS.values(), ids=ATTEMPTS.keys())
def test_an_unmarked_test_that_reaches_the_wire_fails(request: pytest.FixtureRequest,
                                                      attempt: Callable[[], None]) -> None:
    with pytest.raises(pytest.fail.Exception, match="not marked wire"), \
            unless_wire(request.node), pytest.raises(UnmarkedWire):
        attempt()


def test_the_failure_holds_when_the_error_is_swallowed_on_another_thread(
        request: pytest.FixtureRequest) -> None:
    def swallowing() -> None:
        with contextlib.suppress(OSError):
            _bind_a_socket()

    with pytest.raises(pytest.fail.Exception, match="binds a socket"), \
            unless_wire(request.node):
        worker = threading.Thread(target=swallowing)
        worker.start()
        worker.join()


def test_every_entry_point_is_closed_while_an_unmarked_test_runs_and_reopened_after(
        request: pytest.FixtureRequest) -> None:
    before = [getattr(owner, name) for owner, name, _ in GUARDED]
    with unless_wire(request.node):
        during = [getattr(owner, name) for owner, name, _ in GUARDED]
    assert all(now is not then for now, then in zip(during, before, strict=True))
    assert [getattr(owner, name) for owner, name, _ in GUARDED] == before


@pytest.mark.wire
def test_a_marked_test_may_start_processes_and_open_sockets(
        request: pytest.FixtureRequest) -> None:
    with unless_wire(request.node):
        _start_a_process()
        _bind_a_socket()

