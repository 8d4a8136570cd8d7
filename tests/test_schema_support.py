"""Schema checks never pass vacuously: without the schema, CI (``CI=true``) fails them and a
bare clone skips them visibly (``support.schema``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.schema import assert_frame, requires_schema

TESTS = Path(__file__).parent
PROBE = textwrap.dedent('''
    from support.schema import assert_frame, load_schema, requires_schema, schema_cli_args

    @requires_schema
    def test_frame():
        assert_frame({"jsonrpc": "2.0", "id": 1, "result": {}})

    def test_schema():
        load_schema()

    def test_cli_args():
        assert schema_cli_args() == []
''')


def run_probe(tmp_path: Path, **env: str) -> str:
    (tmp_path / "test_probe.py").write_text(PROBE)
    environment = {key: value for key, value in os.environ.items() if key != "CI"}
    environment.update(env, RCP_SCHEMA=str(tmp_path / "absent.json"),
                       PYTHONPATH=os.pathsep.join([str(TESTS), environment.get("PYTHONPATH",
                                                                               "")]))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-rs", str(tmp_path)], capture_output=True, text=True,
                         cwd=tmp_path, env=environment, timeout=120)
    return run.stdout


@pytest.mark.wire
def test_a_missing_schema_fails_every_check_under_ci(tmp_path: Path) -> None:
    summary = run_probe(tmp_path, CI="true").strip().splitlines()[-1]
    assert summary.startswith("3 failed"), summary


@pytest.mark.wire
def test_a_missing_schema_skips_visibly_outside_ci(tmp_path: Path) -> None:
    output = run_probe(tmp_path)
    assert "1 passed, 2 skipped" in output, output
    assert "the RCP/1 schema is not at" in output


@requires_schema
def test_an_invalid_frame_fails_when_the_schema_is_present() -> None:
    with pytest.raises(AssertionError, match="not a valid RCP/1 frame"):
        assert_frame({"jsonrpc": "2.0", "id": 1})
