"""Smoke runs of the scale, stage and quality benchmarks (``--quick``) so they cannot rot.

Each script runs as a subprocess on tiny sizes; the test checks it exits cleanly and prints
the sections its documentation (docs/benchmarks.md) quotes. No timing is asserted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("bench_scale.py", ["ingest docs/s", "sparse", "dense", "hybrid", "50%", "x base"]),
        ("bench_stages.py", ["Engine.search at", "progress callback", "rerank",
                             "ColBERT rerank", "passages cached"]),
        ("bench_quality.py", ["FAQ en", "hybrid convex", "+ colbert top20", "ΔnDCG@10"]),
    ],
)
def test_quick_run_prints_its_report(script: str, expected: list[str]) -> None:
    completed = subprocess.run([sys.executable, str(BENCHMARKS / script), "--quick"],
                               capture_output=True, text=True, timeout=110, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for text in expected:
        assert text in completed.stdout, f"{text!r} missing from {script} output"
    assert "error:" not in completed.stdout
