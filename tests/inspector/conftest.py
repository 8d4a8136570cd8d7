"""Shared fixtures: the built-in engine on the bundled sample notes (hashing embedder: no
model to load), and helpers to read the inspector's SSE answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]


def engine_dir(path: Path, *, with_sample: bool) -> Path:
    """A data directory for the engine (hashing embedder), with the sample notes or empty."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "rcpkit.toml").write_text('embedder = "hashing"\n', encoding="utf-8")
    if with_sample:
        subprocess.run([*RCPKIT, "demo", "--data", str(path)], check=True,
                       capture_output=True, timeout=120)
    return path


@pytest.fixture(scope="session")
def sample_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample notes indexed as ``rcpkit demo`` does. Tests must not write to it."""
    return engine_dir(tmp_path_factory.mktemp("sample") / "kb", with_sample=True)


def sse_events(body: bytes) -> list[dict[str, Any]]:
    """The JSON events of an SSE body (one ``data:`` line each)."""
    return [json.loads(line[len(b"data: "):]) for line in body.split(b"\n")
            if line.startswith(b"data: ")]
