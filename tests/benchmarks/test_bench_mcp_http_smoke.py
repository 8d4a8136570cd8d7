"""A tiny run of ``benchmarks/bench_mcp_http.py`` so it cannot rot: it starts ``rcpkit mcp``
over stdio and over HTTP with 1 and 2 workers, and checks every call's answer. No timing is
asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.wire

pytest.importorskip("mcp")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_mcp_http.py"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_short_run_prints_every_row() -> None:
    completed = subprocess.run([sys.executable, str(SCRIPT), "--calls", "16",
                                "--concurrency", "2"],
                               capture_output=True, text=True, timeout=230, check=False)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "stdio: launch to initialize answered" in completed.stdout
    for workers in ("1 worker(s)", "2 worker(s)"):
        assert workers in completed.stdout
    assert "(1.00x)" in completed.stdout
