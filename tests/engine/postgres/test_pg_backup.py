"""``rcpkit backup`` / ``rcpkit restore`` of a collection whose record is in PostgreSQL: the
schema is dumped (``pg_dump``) at one snapshot whose version the manifest records, and
restored (``pg_restore``) into the database its ``rcpkit.toml`` names, refusing a schema
that holds a record unless ``--overwrite``; the restored engine holds exactly the writes made
before the backup."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner, Result

from rcpkit.cli import app
from rcpkit.engine.backup import PG_DUMP, read_manifest
from rcpkit.engine.core import open_engine
from rcpkit.engine.types import DocumentIn, SearchRequest


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def live(data: Path, ids: list[str]) -> set[str]:
    with open_engine(data) as engine:
        return set(engine.store.live_hashes(ids))


def test_a_postgres_record_is_dumped_and_restored_at_the_backup_version(
        pg_dsn: str, tmp_path: Path) -> None:
    data = tmp_path / "root"
    data.mkdir()
    (data / "rcpkit.toml").write_text('embedder = "hashing"\nhashing_dimension = 64\n'
                                      f'backend = "postgres"\ndsn = {json.dumps(pg_dsn)}\n')
    with open_engine(data) as engine:
        engine.add([DocumentIn(id="before", text="Tide tables predict high water.")])
        version = engine.index_version
    made = run("backup", str(tmp_path / "snap"), "--data", str(data))
    assert made.exit_code == 0, made.output
    (copy,) = read_manifest(tmp_path / "snap").stores
    assert (copy.backend, copy.index_version) == ("postgres", version)
    assert PG_DUMP in read_manifest(tmp_path / "snap").files
    with open_engine(data) as engine:
        engine.add([DocumentIn(id="after", text="Written after the backup.")])
        engine.delete(["before"])
    assert live(data, ["before", "after"]) == {"after"}

    target = tmp_path / "restored"
    refused = run("restore", str(tmp_path / "snap"), "--data", str(target))
    assert refused.exit_code == 2 and "holds a record" in refused.output
    assert not target.exists() and live(data, ["before", "after"]) == {"after"}

    replaced = run("restore", str(tmp_path / "snap"), "--data", str(target), "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert not (target / PG_DUMP).exists()
    with open_engine(target) as engine:
        assert engine.index_version == version
        assert set(engine.store.live_hashes(["before", "after"])) == {"before"}
        hits = engine.search(SearchRequest(query="tide tables", k=1, mode="sparse")).hits
        assert [hit.doc_id for hit in hits] == ["before"]
