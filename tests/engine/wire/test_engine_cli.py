"""``rcpkit index add|stats|delete`` and ``rcpkit query`` (run in-process through the real
Typer app), then the same data directory served over stdio: the CLI and ``rcpkit serve`` agree
on one index."""

from __future__ import annotations

import json
from pathlib import Path

from engine_wire import Engine, make_data_dir
from typer.testing import CliRunner, Result

from rcpkit.cli import app


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def _write_sources(root: Path) -> Path:
    docs = root / "docs"
    (docs / "nested").mkdir(parents=True)
    (docs / "plain.txt").write_text("Lighthouses guide ships along rocky coasts.\n")
    (docs / "nested" / "notes.md").write_text(
        "# Beekeeping notes\n\nSmoke calms the bees before the hive is opened.\n")
    beir = [{"_id": "beir-1", "title": "Glaciers", "text": "Glaciers carve valleys slowly.",
             "metadata": {"lang": "en"}},
            {"_id": "beir-2", "title": "Fjäll", "text": "Fjällen i Jämtland är vackra.",
             "metadata": {"lang": "sv"}}]
    (docs / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in beir))
    (docs / "table.csv").write_text("id,text,lang,year\n"
                                    "row-1,Tide tables predict high water.,en,2021\n"
                                    "row-2,\"Tidvatten, ebb och flod.\",sv,2023\n")
    (docs / "ignored.bin").write_bytes(b"\x00")
    return docs


def test_index_add_query_stats_delete_then_serve(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = _write_sources(tmp_path)
    added = _run("index", "add", str(docs), "--data", str(data))
    assert added.exit_code == 0, added.output
    assert any(line.split() == ["added", "6"] for line in added.stdout.splitlines())
    assert any("ignored.bin" in line and "unsupported file type" in line
               for line in added.stdout.splitlines()), added.stdout

    found = _run("query", "Jämtland fjällen", "--data", str(data), "-k", "2", "--mode", "sparse",
                 "--filter", '{"field": "lang", "op": "eq", "value": "sv"}')
    assert found.exit_code == 0, found.output
    assert "corpus.jsonl:beir-2#0" in found.stdout and "Fjäll" in found.stdout

    stats = _run("index", "stats", "--data", str(data))
    assert stats.exit_code == 0 and "lang:keyword" in stats.stdout and "year:int" in stats.stdout

    deleted = _run("index", "delete", "table.csv:row-1", "missing", "--data", str(data))
    assert "deleted 1 documents" in deleted.stdout

    engine = Engine(data)
    try:
        assert engine.ids("smoke calms bees", 1, mode="sparse") == ["nested/notes.md#0"]
        hit = engine.retrieve("glaciers valleys", 1, mode="sparse")["hits"][0]
        assert hit["citation"]["title"] == "Glaciers" and hit["meta"]["lang"] == "en"
        recent = {"field": "year", "op": "gte", "value": 2020}
        assert engine.ids("tide tables high water", 5, mode="dense", filter=recent) == \
            ["table.csv:row-2#0"]
    finally:
        engine.close()


def test_cli_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    bad = tmp_path / "doc.bin"
    bad.write_bytes(b"\x00")
    refused = _run("index", "add", str(bad), "--data", str(data))
    assert refused.exit_code == 1 and "unsupported file type" in refused.stdout
    assert refused.stderr == "rcpkit index add: error: nothing could be indexed\n"
    wrong = _run("query", "x", "--data", str(data), "--filter", '{"field": "nope", "op": "eq", '
                 '"value": 1}')
    assert wrong.exit_code == 2 and "-32602" in wrong.stderr and "'nope'" in wrong.stderr
    *phases, last = wrong.stderr.splitlines()
    assert last.startswith("rcpkit query: error: ") and all(p.endswith("…") for p in phases)
