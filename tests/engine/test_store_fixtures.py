"""Stores written by earlier commits of main open, answer as the code that wrote them did,
and accept writes, without their existing rows being rewritten; a store whose schema the
open changes is first copied aside.

Each fixture in ``store_fixtures/`` is a data directory (record, saved indexes, ``rcpkit.toml``)
and the answers that commit gave on it, made by ``store_fixtures/make_fixture.py``:

- ``v0.1.0``: the 0.1.0 release (d31bc57): no schema version recorded, layout-1 tables,
  saved indexes without sentence windows or chunk fields.
- ``layout1``: layout 1 with its version recorded (cf96032~1), float32 vectors.
- ``layout2``: layout 2 (390ca86~1): float16 vectors, chunk text kept once.
- ``layout3-unsealed``: layout 3 before saved index states listed their files' checksums
  (c865768).
"""

from __future__ import annotations

import json
import sqlite3
import tarfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rcpkit.cli import app
from rcpkit.engine import Engine
from rcpkit.engine.core import open_engine
from rcpkit.engine.types import DocumentIn, SearchRequest

FIXTURES = Path(__file__).with_name("store_fixtures")
LAYOUTS = {"v0.1.0": 1, "layout1": 1, "layout2": 2, "layout3-unsealed": 3}
"""The layout each store has, and keeps, once opened (0.1.0 recorded none: it reads 1)."""
RECORD_TABLES = ("documents", "chunks", "vectors", "settings", "field_schema")


def extract(name: str, tmp_path: Path) -> tuple[Path, list[Any]]:
    with tarfile.open(FIXTURES / f"{name}.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "data", json.loads((tmp_path / "answers.json").read_text())


def rows(data: Path, name: str = "store.sqlite3") -> dict[str, list[tuple[Any, ...]]]:
    with sqlite3.connect(data / name) as db:
        found = {table: db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
                 for table in RECORD_TABLES}
        found["user_version"] = [db.execute("PRAGMA user_version").fetchone()]
    db.close()
    return found


def comparable(answer: list[Any]) -> list[Any]:
    """A recorded answer without the scores of hybrid hits: the default fusion changed since
    0.1.0 (the ranking did not); a channel's own scores are compared exactly."""
    query, mode, hits = answer
    return [query, mode, [[doc_id, score if mode != "hybrid" else None]
                          for doc_id, score in hits]]


RECORDED_WITH = {"lexical": {"idf_exponent": 1.0}}
"""The BM25 of the commits that wrote the fixtures: a term weighed its idf."""


def answers(engine: Engine, expected: list[Any]) -> list[Any]:
    return [comparable([query, mode, [[hit.doc_id, round(hit.score, 5)] for hit in
                                      engine.search(SearchRequest(query=query, k=5,
                                                                  mode=mode)).hits]])
            for query, mode, _ in expected]


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_an_earlier_store_opens_answers_as_before_and_accepts_writes(tmp_path: Path,
                                                                   name: str) -> None:
    data, expected = extract(name, tmp_path)
    before = rows(data)
    with open_engine(data, **RECORDED_WITH) as engine:
        assert answers(engine, expected) == [comparable(answer) for answer in expected]
        engine.add([DocumentIn(id="kiln", text="The kiln fires clay pots.",
                               meta={"topic": "craft"})])
        engine.delete(["owl"])
    after = rows(data)
    assert after["user_version"] == [(LAYOUTS[name],)]
    kept = sorted(path.name for path in data.glob("store.sqlite3.pre-upgrade-*"))
    if before["user_version"] == after["user_version"]:
        assert kept == []  # opened as it was: nothing to keep
    else:  # the version mark was written: the store as it was is kept beside it
        assert kept == ["store.sqlite3.pre-upgrade-v0"]
        assert rows(data, kept[0]) == before
    for table in ("documents", "chunks", "vectors"):
        # The rows written before are kept byte for byte; only the delete marked one.
        unchanged = [row for row in before[table] if "owl" not in row]
        assert set(unchanged) <= set(after[table]), table
    with open_engine(data) as engine:
        hits = engine.search(SearchRequest(query="kiln clay", k=1, mode="sparse")).hits
        assert [hit.doc_id for hit in hits] == ["kiln"]
        assert "owl" not in {hit.doc_id for hit in engine.search(
            SearchRequest(query="owls night woods", k=5, mode="hybrid")).hits}
    checked = CliRunner().invoke(app, ["verify", "--data", str(data)])
    assert checked.exit_code == 0, checked.output
