"""Engines sharing one record (scale-out, §7.7.1): ``Engine.refresh`` takes in what
another engine committed — rows, filter schema, feedback — before reads and writes, never
exposes a half-applied catch-up, and index saves on a shared data directory do not race.
Two engines on one SQLite data directory stand in for two processes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.test_pipeline import CORPUS, make_config
from rcpkit.engine.config import DSN_ENV, EngineConfig, load_config
from rcpkit.engine.core import Engine
from rcpkit.engine.types import DocumentIn, FeedbackSignal, SearchRequest


def doc_ids(engine: Engine, query: str, **options: object) -> list[str]:
    return [hit.doc_id for hit in engine.search(SearchRequest(query, k=50, **options)).hits]


def test_refresh_takes_in_another_engines_writes_schema_and_feedback(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path)) as first, Engine.open(make_config(tmp_path)) as second:
        assert second.refresh() is False
        published: list[str] = []
        second.on_publish(lambda: published.append(second.index_version))
        added = first.add(CORPUS)
        assert second.refresh() is True and second.refresh() is False
        assert published == [added.index_version] == [second.index_version]
        assert second.describe().filter_fields == first.describe().filter_fields
        assert "bees" in doc_ids(second, "honeybees dance", filter={
            "field": "tag", "op": "eq", "value": "bees"})
        # A search refreshes on its own: a delete through one is gone through the other.
        second.delete(["bees"])
        assert "bees" not in doc_ids(first, "honeybees dance")
        assert "bees" in doc_ids(first, "honeybees dance", index_version=added.index_version)
        # Feedback recorded through one engine drives the poison policy of the other (§7.16).
        baseline = {hit.doc_id: hit.score
                    for hit in second.search(SearchRequest("compost nitrogen", mode="sparse")).hits}
        first.feedback([FeedbackSignal(hit_id="compost#0", poison_suspected=True)] * 3)
        demoted = {hit.doc_id: hit.score
                   for hit in second.search(SearchRequest("compost nitrogen", mode="sparse")).hits}
        assert demoted["compost"] == pytest.approx(baseline["compost"] * 0.5)


def test_a_refresh_reads_the_change_marks_only_after_a_commit(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path)) as first, Engine.open(make_config(tmp_path)) as second:
        second.refresh()
        statements: list[str] = []
        second.store._reader().set_trace_callback(statements.append)  # type: ignore[attr-defined]
        assert second.refresh() is False and second.refresh() is False
        assert statements == ["PRAGMA data_version"] * 2
        first.feedback([FeedbackSignal(hit_id="x#0", helpful=True)])
        assert second.refresh() is True
        assert len(statements) > 3 and second.refresh() is False
        own = second.add(CORPUS[:1])  # a commit on its own writer connection counts too
        assert second.refresh() is False and second.index_version == own.index_version
        assert first.refresh() is True and first.index_version == own.index_version


def test_writes_refresh_first_so_their_schema_is_current(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path)) as first, Engine.open(make_config(tmp_path)) as second:
        first.add([DocumentIn("Rebar is tied at each crossing.", id="rebar", meta={"floor": 3})])
        # ``floor`` is an int field now, so a keyword value is refused by the other engine too.
        with pytest.raises(Exception, match="does not fit"):
            second.add([DocumentIn("Formwork is oiled.", id="form", meta={"floor": "ground"})])


def test_a_reader_never_sees_a_half_applied_catch_up(tmp_path: Path) -> None:
    batch, batches = 5, 12
    with Engine.open(make_config(tmp_path)) as writer, \
            Engine.open(make_config(tmp_path)) as reader:
        done = threading.Event()
        seen: list[tuple[str, int]] = []
        errors: list[BaseException] = []

        def read() -> None:
            try:
                while not done.is_set():
                    result = reader.search(SearchRequest("girder", k=200, mode="sparse"))
                    seen.append((result.index_version, len(result.hits)))
            except BaseException as exc:  # surfaced by the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=read) for _ in range(3)]
        for thread in threads:
            thread.start()
        for b in range(batches):
            writer.add([DocumentIn(f"Girder {b}-{i} was welded.", id=f"g{b}-{i}")
                        for i in range(batch)])
        done.set()
        for thread in threads:
            thread.join()
        assert not errors
        # Every answer is one whole version: its hit count is all of that version's rows.
        sizes = {int(version.rpartition(".")[2]): hits for version, hits in seen}
        assert all(hits == seq * batch for seq, hits in sizes.items())
        assert len(doc_ids(reader, "girder", mode="sparse")) == 50


def test_index_saves_on_a_shared_data_directory(tmp_path: Path) -> None:
    first = Engine.open(make_config(tmp_path))
    second = Engine.open(make_config(tmp_path))
    first.add(CORPUS)
    second.refresh()
    first.close()
    second.close()  # same position as the saved state: keeps it rather than racing to replace
    states = [path for path in (tmp_path / "indexes").iterdir() if path.is_dir()]
    assert len(states) == 1
    assert (tmp_path / "indexes" / "CURRENT").read_text() == states[0].name
    with Engine.open(make_config(tmp_path)) as reopened:
        assert reopened.stats()["lexical_rows"] == len(CORPUS)
        assert "bees" in doc_ids(reopened, "honeybees dance")


def test_backend_selection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="needs a DSN"):
        Engine.open(make_config(tmp_path, store={"backend": "postgres"}))
    with pytest.raises(ValueError, match="sqlite or postgres"):
        Engine.open(make_config(tmp_path, store={"backend": "mysql"}))
    (tmp_path / "rcpkit.toml").write_text('backend = "postgres"\n')
    monkeypatch.setenv(DSN_ENV, "postgresql://db.example/rcp")
    config = load_config(tmp_path)
    assert (config.store.backend, config.store.dsn) == ("postgres", "postgresql://db.example/rcp")
    assert load_config(tmp_path, store={"dsn": "postgresql://other/rcp"}).store.dsn == "postgresql://other/rcp"
    assert EngineConfig().store.backend == "sqlite" and EngineConfig().store.dsn is None
