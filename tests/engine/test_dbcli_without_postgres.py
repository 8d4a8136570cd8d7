"""``rcpkit db`` on an install without the ``postgres`` extra: one line naming it, no
traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.wire

# ``sys.modules[name] = None`` makes ``import name`` fail as if the package were absent.
_WITHOUT_PSYCOPG = ("import sys; sys.modules['psycopg'] = None; "
                    "from rcpkit.cli import main; main()")


@pytest.mark.parametrize("command", ["start", "stop", "status"])
def test_db_commands_name_the_missing_extra(command: str, tmp_path: object) -> None:
    done = subprocess.run([sys.executable, "-c", _WITHOUT_PSYCOPG, "db", command,
                           "--dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"rcpkit db {command}: error: psycopg is missing: "
                                   "pip install 'rcpkit[postgres]'")
