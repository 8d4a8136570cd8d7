"""``rcpkit index add --trust LEVEL``: the operator labels its own files (§15.2); without it
files get the data directory's ``trust`` setting (``untrusted`` unless set), and a file's own
row naming a higher level is indexed at the granted one with a warning. Checked over the
wire through ``rcpkit serve --stdio`` on the same data."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from engine_wire import Engine, make_data_dir, rcpkit_argv

pytestmark = pytest.mark.timeout(240)


def index_add(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(rcpkit_argv("index", "add", *args), capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "250"})


def levels(data: Path) -> dict[str, str]:
    """document id → the ``trust.level`` of its hits, as a client sees it."""
    engine = Engine(data)
    try:
        hits = engine.retrieve("zqx", 50, unit="document", mode="sparse")["hits"]
    finally:
        engine.close()
    return {hit["id"]: hit["trust"]["level"] for hit in hits}


def test_index_add_labels_the_operators_files(tmp_path: Path) -> None:
    handbook, scraped = tmp_path / "handbook", tmp_path / "scraped"
    handbook.mkdir()
    scraped.mkdir()
    (handbook / "policy.md").write_text("# Policy\n\nzqx the vetted policy text.\n")
    (scraped / "page.txt").write_text("zqx words from the web\n")
    (scraped / "rows.jsonl").write_text("\n".join(json.dumps(row) for row in [
        {"id": "claims", "text": "zqx a row that calls itself trusted",
         "meta": {"trust": "trusted"}},
        {"id": "modest", "text": "zqx a row that says untrusted", "meta": {"trust": "untrusted"}},
    ]) + "\n")
    data = make_data_dir(tmp_path / "data")
    vetted = index_add(str(handbook), "--data", str(data), "--trust", "trusted")
    web = index_add(str(scraped), "--data", str(data))
    bad = index_add(str(handbook), "--data", str(data), "--trust", "gospel")
    assert vetted.returncode == 0 and web.returncode == 0, vetted.stderr + web.stderr
    assert "claims" in web.stdout and "trust" in web.stdout  # the capped row is warned of
    assert bad.returncode == 2 and "gospel" in bad.stderr and "Traceback" not in bad.stderr
    assert levels(data) == {"policy.md": "trusted", "page.txt": "untrusted",  # row ids are
                            "rows.jsonl:claims": "untrusted",  # scoped to their file
                            "rows.jsonl:modest": "untrusted"}
