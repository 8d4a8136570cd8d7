"""Smoke run of benchmarks/bench_shards.py (``--quick``: 40 FAQ pairs, hashing embedder).

The script must exit cleanly and print the table docs/benchmarks.md quotes (sharded
gateway): a W reference row and one gateway row per fusion for every mode, with a top-10
overlap in [0, 1]. Dense search is exact at this size and cosines are comparable across shards,
so merging the two shards' dense rankings by raw score must reproduce W's top 10 exactly. The
shard split itself is checked in-process. No timing is asserted.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from support.benchmarks import BENCHMARKS, load_benchmark

SCRIPT = BENCHMARKS / "bench_shards.py"
pytestmark = pytest.mark.slow
ROW = re.compile(r"^(sparse|dense|hybrid)\s+gateway (rrf|weighted|convex)\s+"
                 r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([+-][\d.]+)$")


def test_split_is_deterministic_disjoint_and_covers_the_corpus() -> None:
    bench = load_benchmark("bench_shards")
    corpus = bench.faq_to_beir("en").corpus
    half_a, half_b = bench.split(corpus)
    ids_a, ids_b = {d.id for d in half_a}, {d.id for d in half_b}
    assert not ids_a & ids_b
    assert ids_a | ids_b == {d.id for d in corpus}
    assert 0.4 < len(half_a) / len(corpus) < 0.6
    assert [d.id for d in bench.split(corpus)[0]] == [d.id for d in half_a]


@pytest.mark.wire
def test_quick_run_prints_every_mode_and_fusion() -> None:
    completed = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                               text=True, timeout=110, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "error:" not in completed.stdout
    rows = [ROW.match(line) for line in completed.stdout.splitlines()]
    found = {(m.group(1), m.group(2)): m for m in rows if m is not None}
    assert set(found) == {(mode, method) for mode in ("sparse", "dense", "hybrid")
                          for method in ("rrf", "weighted", "convex")}
    for match in found.values():
        ndcg, recall, overlap = float(match.group(3)), float(match.group(4)), float(match.group(6))
        assert 0.0 < ndcg <= 1.0 and 0.0 < recall <= 1.0
        assert 0.0 < overlap <= 1.0
    for mode in ("sparse", "dense", "hybrid"):
        assert re.search(rf"^{mode}\s+W \(whole\)\s+[\d.]+", completed.stdout, re.MULTILINE)
    dense_merge = re.search(r"^dense\s+raw-score merge(\s+[\d.]+){3}\s+([\d.]+)",
                            completed.stdout, re.MULTILINE)
    assert dense_merge is not None and dense_merge.group(2) == "1.000"
