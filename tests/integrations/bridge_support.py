"""Helpers of the bridge tests: argv of the RCP servers the bridges are pointed at (ours,
the reference SDK's, a slow one), and loopback servers run as subprocesses."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]
HERE = Path(__file__).resolve().parent
REF_SERVER = [sys.executable, str(HERE.parent / "client" / "servers" / "ref_server.py"), "stdio"]
SLOW_ENGINE = HERE / "servers" / "slow_engine.py"
# The deterministic hashing embedder: no model to load, so the engine starts fast.
HASHING_CONFIG = 'embedder = "hashing"\nhashing_dimension = 64\n'


def rcpkit(*args: str) -> list[str]:
    """argv of ``rcpkit ARGS`` run by the test interpreter (and so on this tree)."""
    return [*RCPKIT, *args]


@contextmanager
def listening(argv_for: Callable[[int], list[str]], timeout_s: float = 60.0) -> Iterator[int]:
    """Run ``argv_for(port)`` on a free loopback port until it accepts connections; yield
    the port; kill it on exit."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    process = subprocess.Popen(argv_for(port), stderr=subprocess.DEVNULL)
    try:
        give_up = time.monotonic() + timeout_s
        while not _accepts(port):
            if process.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"no server on port {port} (exit status {process.poll()})")
            time.sleep(0.05)
        yield port
    finally:
        process.kill()
        process.wait(10)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True
