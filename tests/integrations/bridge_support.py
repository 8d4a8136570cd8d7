"""Helpers of the bridge tests: argv of the RCP servers the bridges are pointed at (ours,
the reference SDK's, a slow one), and loopback servers run as subprocesses."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from support.net import free_port, wait_listening

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]
HERE = Path(__file__).resolve().parent
REF_SERVER = [sys.executable, str(HERE.parent / "client" / "servers" / "ref_server.py"), "stdio"]
SLOW_ENGINE = HERE / "servers" / "slow_engine.py"
DYING_ENGINE = HERE / "servers" / "dying_engine.py"
# The deterministic hashing embedder: no model to load, so the engine starts fast.
HASHING_CONFIG = 'embedder = "hashing"\nhashing_dimension = 64\n'


def rcpkit(*args: str) -> list[str]:
    """argv of ``rcpkit ARGS`` run by the test interpreter (and so on this tree)."""
    return [*RCPKIT, *args]


@contextmanager
def listening(argv_for: Callable[[int], list[str]]) -> Iterator[int]:
    """Run ``argv_for(port)`` on a free loopback port until it accepts connections; yield
    the port; kill it on exit."""
    port = free_port()
    process = subprocess.Popen(argv_for(port), stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, process=process, timeout_s=60)
        yield port
    finally:
        process.kill()
        process.wait(10)
