"""``rcpkit check`` certifies the engine as a user runs it: on a data directory that already
holds their corpus (built with ``rcpkit index add`` from a folder), writable or read-only.

The harness probes a writable server with its own ``rcpcheck-seed-`` documents and removes
them afterwards; a read-only one with words from its own hits (§14).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from engine_wire import HASHING_CONFIG, make_data_dir, rcpkit_argv

# Each test is a full certification run (two hundred checks) against a subprocess engine.
pytestmark = pytest.mark.timeout(300)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(rcpkit_argv(*args), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})


def _corpus(root: Path) -> Path:
    """Notes sharing no word with the harness's seed texts or probe words, and a CSV whose
    ``trust`` column makes that key an enumerated field (§7.7 trust levels)."""
    docs = root / "docs"
    docs.mkdir()
    for i in range(6):
        (docs / f"kayak-{i}.txt").write_text(f"Kayaks glide over fjords near glaciers, trip {i}")
    (docs / "guides.csv").write_text("id,text,trust\ng1,Guides paddle beside seals,trusted\n")
    return docs


def _certify(data: Path) -> dict[str, Any]:
    checked = _run("check", "--json", "--", *rcpkit_argv("serve", "--stdio", "--data",
                                                         str(data)))
    assert "Traceback" not in checked.stderr, checked.stderr
    report: dict[str, Any] = json.loads(checked.stdout)
    failed = [c for c in report["checks"] if c.get("outcome") == "FAIL"]
    assert failed == [], failed
    return report


def _documents(data: Path) -> int:
    stats = _run("index", "stats", "--data", str(data))
    return int(next(line.split()[1] for line in stats.stdout.splitlines()
                    if line.split()[:1] == ["documents"]))


def test_check_certifies_a_writable_engine_that_holds_a_corpus(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    assert _run("index", "add", str(_corpus(tmp_path)), "--data", str(data)).returncode == 0
    before = _documents(data)
    report = _certify(data)
    assert report["certifiedLevel"] == report["declaredLevel"] == "L2"
    assert report["declarationHonest"] is True
    assert _documents(data) == before == 7  # the probe documents are gone


def test_check_certifies_a_read_only_engine_with_read_only_probes(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data", "read_only = true\n" + HASHING_CONFIG)
    assert _run("index", "add", str(_corpus(tmp_path)), "--data", str(data)).returncode == 0
    report = _certify(data)
    assert report["certifiedLevel"] == "L2" and report["declarationHonest"] is True
    assert _documents(data) == 7
