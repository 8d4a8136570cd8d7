"""A smoke run of ``benchmarks/mcp_initialize.py`` so it cannot rot (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.wire

pytest.importorskip("mcp")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mcp_initialize.py"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.slow
def test_quick_run_prints_both_trees() -> None:
    completed = subprocess.run([sys.executable, str(SCRIPT), "--runs", "1", "--baseline",
                                str(SRC)], capture_output=True, text=True, timeout=110,
                               check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for row in ("this tree: initialize answered after", "baseline: initialize answered after",
                "import mcp.server alone", "this tree / baseline"):
        assert row in completed.stdout
