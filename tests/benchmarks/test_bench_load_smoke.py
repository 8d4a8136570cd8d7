"""A tiny run of the load benchmark (benchmarks/bench_load.py) so it cannot rot: every
request answered once, by the right reply, without errors, and no acknowledged write lost.
No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.wire

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_load.py"


def test_a_short_load_run_checks_out() -> None:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--seconds", "1", "--clients", "2", "--depth", "8",
         "--stdio-depth", "16", "--flood-mib", "4", "--slowloris", "20"],
        capture_output=True, text=True, timeout=110, check=False)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    for text in ("head flood", "slowloris", "HTTP: 2 clients x 8 pipelined",
                 "stdio: 16 in flight", "latency p50/p99",
                 "server RSS", "all checks 0"):
        assert text in completed.stdout
