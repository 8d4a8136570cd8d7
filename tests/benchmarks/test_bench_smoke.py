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
pytestmark = [pytest.mark.slow, pytest.mark.wire]


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("bench_scale.py", ["ingest docs/s", "sparse", "dense", "hybrid", "50%", "x base"]),
        ("bench_stages.py", ["Engine.search at", "progress callback", "rerank",
                             "ColBERT rerank", "passages cached"]),
        ("bench_quality.py", ["FAQ en", "hybrid convex", "+ colbert top20", "ΔnDCG@10"]),
        ("bench_fusion.py", ["1000 chunks ingested", "before p50", "default p50", "p50 ratio"]),
    ],
)
def test_quick_run_prints_its_report(script: str, expected: list[str]) -> None:
    completed = subprocess.run([sys.executable, str(BENCHMARKS / script), "--quick"],
                               capture_output=True, text=True, timeout=110, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for text in expected:
        assert text in completed.stdout, f"{text!r} missing from {script} output"
    assert "error:" not in completed.stdout


def test_the_build_order_bench_runs() -> None:
    """``bench_dense.py --build-order`` (docs/benchmarks.md, "HNSW build order") on a few
    thousand clustered vectors: both orders build and report their recall."""
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_dense.py"), "--corpus", "clustered",
         "--sizes", "--skip-embed", "--build-order", "3000", "--build-threads", "2"],
        capture_output=True, text=True, timeout=110, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    assert any(line.startswith("== build order, clustered n=3,000") for line in lines)
    for order in ("random", "ordered"):
        runs = [line for line in lines if line.strip().startswith(f"{order}:")]
        assert len(runs) == 2 and all("recall@10 at ef 128" in line for line in runs)


@pytest.mark.parametrize("kind", ["floor", "server", "whole"])
def test_the_cold_cache_bench_drives_each_layer(kind: str) -> None:
    """``bench_http_cold.py`` runs its driver under valgrind; here it runs bare (no valgrind
    in CI): every ping of each layer is answered, between its cache-emptying passes."""
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_http_cold.py"), "--drive", kind,
         "--requests", "3", "--passes", "5"],
        capture_output=True, text=True, timeout=110, check=False, cwd=BENCHMARKS)
    assert completed.returncode == 0, completed.stderr[-3000:]


def test_the_tracing_overhead_bench_runs() -> None:
    """``tracing_overhead.py`` (docs/benchmarks.md, "Tracing overhead") on a tiny corpus:
    the three configurations answer and are reported."""
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "tracing_overhead.py"), "--docs", "50",
         "--requests", "5", "--blocks", "2"],
        capture_output=True, text=True, timeout=110, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for configuration in ("off", "on, no exporter", "on, exporter"):
        assert f"\n{configuration} " in completed.stdout, completed.stdout


def test_the_shared_limits_bench_runs() -> None:
    completed = subprocess.run([sys.executable, str(BENCHMARKS / "bench_shared_limits.py"),
                                "--requests", "20"],
                               capture_output=True, text=True, timeout=110, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for text in ("in memory, one process", "limits.sqlite3, one process",
                 "limits.sqlite3, 2 processes at once (slowest)"):
        assert text in completed.stdout
