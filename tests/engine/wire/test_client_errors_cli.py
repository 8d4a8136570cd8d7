"""The README's ``except errors.RcpkitError`` catches the client's own refusals and the
server's errors alike, each with the §12 ``code`` it stands for: on a folder indexed with
``rcpkit index add`` (a subprocess) and served with ``rcpkit serve --stdio``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from engine_wire import make_data_dir, rcpkit_argv

from rcpkit.client import Client, errors
from rcpkit.client import filters as f


def test_one_base_class_catches_local_refusals_and_server_errors(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "bees.md").write_text("---\n# Bees\n\nBees swarm in spring.\n")
    (docs / "years.csv").write_text("text,year\nA note from one year,2021\n")
    indexed = subprocess.run(rcpkit_argv("index", "add", str(docs), "--data", str(data)),
                             capture_output=True, text=True, timeout=120)
    assert indexed.returncode == 0, indexed.stderr

    codes = {}
    with Client.connect_stdio(rcpkit_argv("serve", "--stdio", "--data", str(data))) as rcp:
        attempts = {
            "unadvertised method": lambda: rcp.catalog_list(),  # one corpus: no §7.13
            "not an RCP method": lambda: rcp.call("frobnicate"),
            "bad mode": lambda: rcp.retrieve("bees", mode="telepathy"),
            "unknown filter field": lambda: rcp.retrieve("bees", filter=f.eq("colour", "red")),
            "server refusal": lambda: rcp.retrieve("bees", recency={"field": "year",
                                                                   "halfLifeDays": 30}),
        }
        for name, attempt in attempts.items():
            try:
                attempt()
            except errors.RcpkitError as error:
                codes[name] = (type(error), error.code)
            else:
                raise AssertionError(f"{name}: no error")
        assert rcp.retrieve("bees", k=1).hits[0].id == "bees.md#0"  # the client still works
    assert codes == {
        "unadvertised method": (errors.UsageError, -32003),
        "not an RCP method": (errors.UsageError, -32004),
        "bad mode": (errors.UsageError, -32005),
        "unknown filter field": (errors.UsageError, -32602),
        "server refusal": (errors.InvalidParams, -32602),
    }
