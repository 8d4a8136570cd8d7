"""A smoke run of ``benchmarks/bridge_overhead.py`` so it cannot rot (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.wire

pytest.importorskip("mcp")
pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bridge_overhead.py"


@pytest.mark.slow
def test_quick_run_prints_every_row() -> None:
    completed = subprocess.run([sys.executable, str(SCRIPT), "--queries", "2"],
                               capture_output=True, text=True, timeout=110, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for row in ("AsyncClient, in-process", "McpBridge alone (no MCP SDK)",
                "MCP tool, in-process SDK client",
                "LangChain ainvoke", "LlamaIndex aretrieve", "rcpkit mcp over stdio"):
        assert row in completed.stdout
    assert "(1.00x)" in completed.stdout
