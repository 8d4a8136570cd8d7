"""The engine certifies L2 with ``rcpkit check`` over stdio and over
HTTP (every session policy), every received frame validated against the normative schema."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from engine_wire import HttpEngine, make_data_dir, rcpkit_argv

from support.schema import schema_cli_args


def certify(*target: str) -> dict:
    argv = rcpkit_argv("check", "--json", "--timeout", "30", *schema_cli_args(), *target)
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    report = json.loads(run.stdout)
    failed = [c for c in report["checks"] if c["outcome"] == "FAIL"]
    assert not failed, json.dumps(failed, indent=1)[:4000]
    assert run.returncode == 0, run.stderr[-2000:]
    return report


def test_engine_certifies_l2_over_stdio(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "kb")
    report = certify("--", *rcpkit_argv("serve", "--stdio", "--data", str(data)))
    assert report["certifiedLevel"] == "L2"
    assert report["declaredLevel"] == "L2" and report["declarationHonest"] is True
    assert report["counts"]["pass"] >= 120


@pytest.mark.parametrize("sessions", ["stateless", "token", "single"])
def test_engine_certifies_l2_over_http(tmp_path: Path, sessions: str) -> None:
    data = make_data_dir(tmp_path / "kb")
    engine = HttpEngine(data, "--sessions", sessions)
    try:
        report = certify("--http", engine.base)
    finally:
        engine.close()
    assert report["certifiedLevel"] == "L2" and report["declarationHonest"] is True
    assert report["counts"]["pass"] >= 120
