"""Helpers for the federation tests: engine argv, registry files, gateway processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from support.net import wait_listening

SERVERS = Path(__file__).parent / "servers"
RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]


def engine(name: str, *flags: str) -> list[str]:
    """argv of the flag-configured test engine (servers/engine.py) over stdio."""
    return [sys.executable, str(SERVERS / "engine.py"), name, *flags]


def ref_engine() -> list[str]:
    """argv of the reference-SDK engine over stdio."""
    return [sys.executable, str(SERVERS / "ref_engine.py")]


def stdio_entry(engine_id: str, argv: list[str], **settings: Any) -> dict[str, Any]:
    return {"id": engine_id, "transport": "stdio", "command": argv, **settings}


def http_entry(engine_id: str, port: int, **settings: Any) -> dict[str, Any]:
    return {"id": engine_id, "transport": "http", "url": f"http://127.0.0.1:{port}/rcp",
            **settings}


def write_registry(path: Path, entries: Sequence[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"engines": list(entries)}))
    return path


class Processes:
    """Background processes stopped at the end of a test (SIGTERM, then SIGKILL)."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def http(self, argv: list[str], port: int) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.started.append(process)
        wait_listening(port, process=process)
        return process

    def stop(self) -> None:
        for process in self.started:
            process.terminate()
        for process in self.started:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def processes() -> Iterator[Processes]:
    running = Processes()
    try:
        yield running
    finally:
        running.stop()
