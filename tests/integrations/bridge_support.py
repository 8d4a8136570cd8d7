"""Helpers of the bridge tests: argv of the RCP servers the bridges are pointed at (ours,
the reference SDK's, a slow one), loopback servers run as subprocesses, and the parts of
the MCP bridge's passage rendering."""

from __future__ import annotations

import re
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


LINE_BREAKS = ("\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028",
               "\u2029")
"""Every line break ``str.splitlines`` knows."""


def _fence(text: str) -> str:
    """The rendering's boundary marker, as a regular expression."""
    boundary = re.search(r"lines marked (rcp-[0-9a-f]{16})", text)
    assert boundary, text
    return re.escape(boundary.group(1))


def passages(text: str) -> list[str]:
    """The bodies between the rendering's passage markers, below each trust note (§15.2)."""
    marker = _fence(text)
    return re.findall(rf"<<<passage \d+ {marker}>>>[^\n]*\n\[[^\n]*\]\n(.*?)\n"
                      rf"<<<end of passage \d+ {marker}>>>", text, flags=re.S)


def outside_passages(text: str) -> list[str]:
    """The lines of a rendering an LLM reads as the bridge's own: everything but the fenced
    passage bodies, split at every line break (§15.2)."""
    marker = _fence(text)
    unfenced = re.sub(rf"(<<<passage \d+ {marker}>>>[^\n]*\n\[[^\n]*\]\n).*?\n"
                      rf"(<<<end of passage \d+ {marker}>>>)", r"\1\2", text, flags=re.S)
    return unfenced.splitlines()
