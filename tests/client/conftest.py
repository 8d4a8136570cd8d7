"""Fixtures for the client tests: real stdio children and real loopback HTTP servers."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVERS = Path(__file__).parent / "servers"


@pytest.fixture
def ref_stdio() -> list[str]:
    """argv of the reference-SDK server over stdio."""
    return [sys.executable, str(SERVERS / "ref_server.py"), "stdio"]


@pytest.fixture
def scripted() -> list[str]:
    """argv of the scripted raw server (see servers/scripted_server.py)."""
    return [sys.executable, str(SERVERS / "scripted_server.py")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on port {port}")


@pytest.fixture
def ref_http() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A reference-SDK server on loopback HTTP: (base URL, process)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SERVERS / "ref_server.py"), "http",
                                str(port)], stderr=subprocess.DEVNULL)
    try:
        wait_listening(port)
        yield f"http://127.0.0.1:{port}/rcp", process
    finally:
        process.kill()
        process.wait()
