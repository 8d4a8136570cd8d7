"""Fixtures for the client tests: real stdio children and real loopback HTTP servers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.net import free_port, wait_listening

SERVERS = Path(__file__).parent / "servers"


@pytest.fixture
def ref_stdio() -> list[str]:
    """argv of the reference-SDK server over stdio."""
    return [sys.executable, str(SERVERS / "ref_server.py"), "stdio"]


@pytest.fixture
def scripted() -> list[str]:
    """argv of the scripted raw server (see servers/scripted_server.py)."""
    return [sys.executable, str(SERVERS / "scripted_server.py")]


@pytest.fixture
def ref_http() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A reference-SDK server on loopback HTTP: (base URL, process)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SERVERS / "ref_server.py"), "http",
                                str(port)], stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, process=process)
        yield f"http://127.0.0.1:{port}/rcp", process
    finally:
        process.kill()
        process.wait()
