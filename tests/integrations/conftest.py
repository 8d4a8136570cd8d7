"""Fixtures for the bridge tests: a small engine on the bundled sample notes, and argv of
the RCP servers the bridges are pointed at (ours, the reference SDK's, a gateway)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rcpkit.engine.sample import sample_documents
from rcpkit.engine.service import open_engine

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]
TESTS = Path(__file__).resolve().parent.parent
REF_SERVER = [sys.executable, str(TESTS / "client" / "servers" / "ref_server.py"), "stdio"]
SLOW_ENGINE = Path(__file__).resolve().parent / "servers" / "slow_engine.py"
# The deterministic hashing embedder: no model to load, so the engine starts fast.
HASHING_CONFIG = 'embedder = "hashing"\nhashing_dimension = 64\n'


def rcpkit(*args: str) -> list[str]:
    """argv of ``rcpkit ARGS`` run by the test interpreter (and so on this tree)."""
    return [*RCPKIT, *args]


@pytest.fixture(scope="session")
def sample_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory holding the 20 bundled sample notes (read-only: copy to write)."""
    data = tmp_path_factory.mktemp("sample-kb")
    (data / "rcpkit.toml").write_text(HASHING_CONFIG)
    engine = open_engine(data)
    try:
        engine.add(sample_documents())
    finally:
        engine.close()
    return data


@pytest.fixture
def kb(sample_kb: Path, tmp_path: Path) -> Path:
    """A private, writable copy of :func:`sample_kb`."""
    return Path(shutil.copytree(sample_kb, tmp_path / "kb"))


@pytest.fixture
def gateway_argv(tmp_path: Path) -> list[str]:
    """argv of ``rcpkit gateway --stdio`` federating the reference-SDK server."""
    registry = tmp_path / "rcp.json"
    registry.write_text(json.dumps({"engines": [
        {"id": "ref", "transport": "stdio", "command": REF_SERVER}]}))
    return rcpkit("gateway", "--registry", str(registry), "--stdio")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")
