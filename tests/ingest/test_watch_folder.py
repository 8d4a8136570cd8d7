"""The folder watcher (:mod:`rcpkit.ingest.watch`) in this process, on real folders, with the
file-system events and the clock injected: ``note`` stands for the events watchfiles would
report and :class:`FakeClock` for time, so nothing sleeps. §7.10 upserts, §7.11 deletes.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rcpkit.engine.config import EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.errors import Unavailable
from rcpkit.engine.models.embedding import HashingEmbedder
from rcpkit.engine.types import SearchRequest
from rcpkit.ingest import folders
from rcpkit.ingest.folders import Selection, SkipKind, read_folder
from rcpkit.ingest.roots import Root
from rcpkit.ingest.watch import Batch, FolderWatcher, Pending
from support.clock import FakeClock

SETTLE = 0.5


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "docs"
    path.mkdir()
    return path.resolve()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    config = EngineConfig(data_dir=tmp_path / "data",
                          embedder=EmbedderConfig(name="hashing", hashing_dimension=32))
    with Engine.open(config) as opened:
        yield opened


def make_watcher(engine: Engine, folder: Path, clock: FakeClock,
                 selection: Selection = Selection()) -> FolderWatcher:
    return FolderWatcher(engine, Root(folder, "docs"), selection=selection, settle=SETTLE,
                         clock=clock)


def settle(watcher: FolderWatcher, clock: FakeClock, *paths: Path) -> Batch | None:
    """Events for ``paths``, then quiet for longer than the settle time."""
    watcher.note(paths)
    clock.advance(SETTLE + 0.1)
    return watcher.apply_due()


def ids(engine: Engine) -> set[str]:
    return set(engine.documents_where({"field": "source_root", "op": "eq", "value": "docs"}))


def lexical_ids(engine: Engine, query: str) -> set[str]:
    hits = engine.search(SearchRequest(query=query, k=10, mode="sparse")).hits
    return {hit.id.rpartition("#")[0] for hit in hits}


def test_a_path_is_due_once_quiet_and_its_file_stopped_changing(folder: Path,
                                                                 clock: FakeClock) -> None:
    pending = Pending(SETTLE, clock)
    path = folder / "a.md"
    path.write_text("first")
    pending.note(path)
    clock.advance(0.4)
    pending.note(path)  # a burst: the wait starts again
    clock.advance(0.4)
    assert pending.due() == {}
    clock.advance(0.2)
    assert list(pending.due()) == [path]
    # A file still growing after its last event (a writer pausing) keeps waiting.
    pending.note(path)
    path.write_text("first and more")
    clock.advance(1.0)
    assert pending.due() == {}
    assert len(pending) == 1
    clock.advance(1.0)
    assert list(pending.due()) == [path]


def test_created_edited_renamed_and_deleted_files_are_reflected(engine: Engine, folder: Path,
                                                                clock: FakeClock) -> None:
    watcher = make_watcher(engine, folder, clock)
    (folder / "a.md").write_text("# Bees\n\nHoneybees dance to show where flowers are.")
    (folder / "b.txt").write_text("Compost needs greens and browns.")
    batch = settle(watcher, clock, folder / "a.md", folder / "b.txt")
    assert batch is not None and batch.added == 2 and batch.indexed == ["a.md", "b.txt"]
    assert ids(engine) == {"a.md", "b.txt"}

    (folder / "a.md").write_text("# Bees\n\nHoneybees swarm in spring with their queen.")
    batch = settle(watcher, clock, folder / "a.md")
    assert batch is not None and batch.updated == 1
    assert lexical_ids(engine, "swarm queen") == {"a.md"}
    assert lexical_ids(engine, "dance flowers") == set()

    (folder / "b.txt").rename(folder / "c.txt")
    batch = settle(watcher, clock, folder / "b.txt", folder / "c.txt")
    assert batch is not None and batch.deleted == ["b.txt"] and batch.indexed == ["c.txt"]
    assert ids(engine) == {"a.md", "c.txt"}

    (folder / "a.md").unlink()
    batch = settle(watcher, clock, folder / "a.md")
    assert batch is not None and batch.deleted == ["a.md"] and batch.documents_deleted == 1
    assert ids(engine) == {"c.txt"}
    assert lexical_ids(engine, "swarm queen") == set()
    assert watcher.stats.files_deleted == 2 and watcher.stats.files_indexed == 4


def test_a_burst_of_edits_is_one_write_of_the_last_content(engine: Engine, folder: Path,
                                                            clock: FakeClock) -> None:
    watcher = make_watcher(engine, folder, clock)
    path = folder / "log.md"
    for version in range(50):
        path.write_text(f"draft number {version} of the note")
        watcher.note([path])
        clock.advance(0.01)
    assert watcher.apply_due() is None  # still inside the burst
    clock.advance(SETTLE)
    batch = watcher.apply_due()
    assert batch is not None and batch.added == 1 and watcher.stats.batches == 1
    hit = engine.search(SearchRequest(query="draft number", k=1, mode="sparse")).hits[0]
    assert hit.text == "draft number 49 of the note"


def test_an_add_then_a_delete_before_settling_leaves_nothing(engine: Engine, folder: Path,
                                                             clock: FakeClock) -> None:
    watcher = make_watcher(engine, folder, clock)
    path = folder / "tmp.md"
    path.write_text("a short-lived file")
    watcher.note([path])
    path.unlink()
    watcher.note([path])
    clock.advance(SETTLE + 0.1)
    batch = watcher.apply_due()
    assert batch is not None and batch.indexed == [] and batch.added == 0
    assert ids(engine) == set()


def test_a_folder_moved_in_is_indexed_and_moved_out_is_removed(engine: Engine, folder: Path,
                                                               clock: FakeClock,
                                                               tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / "guides"
    (outside / "deep").mkdir(parents=True)
    (outside / "one.md").write_text("Rain gauges measure rainfall.")
    (outside / "deep" / "two.md").write_text("Frost protection for tomatoes.")
    watcher = make_watcher(engine, folder, clock)
    outside.rename(folder / "guides")
    settle(watcher, clock, folder / "guides")  # one event: the folder
    assert ids(engine) == {"guides/one.md", "guides/deep/two.md"}
    (folder / "guides").rename(outside)
    batch = settle(watcher, clock, folder / "guides")
    assert batch is not None and sorted(batch.deleted) == ["guides/deep/two.md", "guides/one.md"]
    assert ids(engine) == set()


def test_the_selection_rules_are_those_of_index_add(engine: Engine, folder: Path,
                                                    clock: FakeClock) -> None:
    """Hidden files, ``.rcpkitignore``, ``--exclude`` and ``--include``: the watcher indexes
    exactly what ``read_folder`` (``index add|sync``) reads from the same folder."""
    selection = Selection(include=("*.md", "*.txt"), exclude=("drafts/",))
    (folder / "notes").mkdir()
    (folder / "drafts").mkdir()
    (folder / ".git").mkdir()
    files = {"keep.md": "kept note", "notes/inner.txt": "inner note", "debug.log": "noise",
             "drafts/wip.md": "draft", ".hidden.md": "hidden", "notes/skip.md": "ignored note",
             ".rcpkitignore": "notes/skip.md\n", "code.py": "print('not included')"}
    for name, text in files.items():
        (folder / name).write_text(text)
    watcher = make_watcher(engine, folder, clock, selection)
    watcher.note([folder / ".git" / "index", folder / ".hidden.md"])
    assert watcher.stats.queue_depth == 0  # never read: not even queued
    settle(watcher, clock, *(folder / name for name in files))
    expected = read_folder([folder], selection=selection,
                           locate=lambda directory, whole: Root(folder, "docs"))
    assert ids(engine) == {doc.id for f in expected.files for doc in f.documents} \
        == {"keep.md", "notes/inner.txt"}
    # An ignore file that changes re-decides its folder: what it now ignores goes.
    (folder / ".rcpkitignore").write_text("notes/\n")
    batch = settle(watcher, clock, folder / ".rcpkitignore")
    assert batch is not None and batch.deleted == ["notes/inner.txt"]
    assert ids(engine) == {"keep.md"}


def test_a_bad_file_is_skipped_and_reported_and_the_rest_goes_on(engine: Engine, folder: Path,
                                                                  clock: FakeClock) -> None:
    watcher = make_watcher(engine, folder, clock)
    (folder / "good.md").write_text("Sourdough starter needs daily feeding.")
    (folder / "blob.txt").write_bytes(b"\x00\x01\x02\x03binary")
    (folder / "table.jsonl").write_text(json.dumps({"id": "r1", "text": "row one",
                                                    "meta": {"year": 2020}}) + "\n")
    batch = settle(watcher, clock, folder / "good.md", folder / "blob.txt",
                   folder / "table.jsonl")
    assert batch is not None and batch.indexed == ["good.md", "table.jsonl"]
    assert [(s.source, s.kind) for s in batch.skipped] == [("blob.txt", SkipKind.BINARY)]
    # A value the engine refuses (against the filter schema) is left out, as by index add.
    (folder / "other.jsonl").write_text(json.dumps({"id": "r2", "text": "row two",
                                                    "meta": {"year": "not a year"}}) + "\n")
    (folder / "fine.md").write_text("Crop rotation keeps soil healthy.")
    batch = settle(watcher, clock, folder / "other.jsonl", folder / "fine.md")
    assert batch is not None and batch.indexed == ["fine.md", "other.jsonl"]
    assert [w.source for w in batch.warnings] == ["other.jsonl (id other.jsonl:r2)"]
    assert "indexed without 'year'" in batch.warnings[0].reason
    assert ids(engine) == {"good.md", "table.jsonl:r1", "other.jsonl:r2", "fine.md"}
    assert "year" not in engine.documents_where(
        {"field": "source", "op": "eq", "value": "other.jsonl"})["other.jsonl:r2"]
    assert watcher.stats.files_skipped == 1


def test_a_file_unreadable_for_now_keeps_its_documents(engine: Engine, folder: Path,
                                                       clock: FakeClock,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    watcher = make_watcher(engine, folder, clock)
    path = folder / "note.md"
    path.write_text("Worm bins turn scraps into compost.")
    settle(watcher, clock, path)

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    # A permission taken away (as root, chmod would not stop the read).
    monkeypatch.setattr(folders, "_read", denied)
    batch = settle(watcher, clock, path)
    assert batch is not None and batch.skipped[0].reason == "cannot read: Permission denied"
    assert ids(engine) == {"note.md"}


def test_an_emptied_file_loses_its_documents(engine: Engine, folder: Path,
                                             clock: FakeClock) -> None:
    watcher = make_watcher(engine, folder, clock)
    path = folder / "note.md"
    path.write_text("Moon phases follow a 29.5 day cycle.")
    settle(watcher, clock, path)
    path.write_text("")
    settle(watcher, clock, path)
    assert ids(engine) == set()


def test_rows_removed_from_a_table_are_deleted(engine: Engine, folder: Path,
                                               clock: FakeClock) -> None:
    watcher = make_watcher(engine, folder, clock)
    path = folder / "faq.csv"
    path.write_text("id,text\n1,first answer\n2,second answer\n")
    settle(watcher, clock, path)
    assert ids(engine) == {"faq.csv:1", "faq.csv:2"}
    path.write_text("id,text\n2,second answer\n")
    batch = settle(watcher, clock, path)
    assert batch is not None and batch.documents_deleted == 1 and batch.deleted == []
    assert ids(engine) == {"faq.csv:2"}


def test_the_root_synced_whole_catches_up_on_what_changed_unwatched(
        engine: Engine, folder: Path, clock: FakeClock) -> None:
    """What a restart or a recreated folder runs: the whole folder as one change."""
    watcher = make_watcher(engine, folder, clock)
    (folder / "a.md").write_text("alpha note")
    (folder / "b.md").write_text("beta note")
    settle(watcher, clock, folder)
    (folder / "a.md").unlink()
    (folder / "c.md").write_text("gamma note")
    batch = watcher.apply([folder])
    assert batch.deleted == ["a.md"] and batch.added == 1 and batch.unchanged == 1
    assert ids(engine) == {"b.md", "c.md"}
    shutil.rmtree(folder)
    folder.mkdir()
    (folder / "d.md").write_text("delta note")
    watcher.apply([folder])
    assert ids(engine) == {"d.md"}


def test_paths_outside_the_watched_folder_are_ignored(engine: Engine, folder: Path,
                                                      clock: FakeClock, tmp_path: Path) -> None:
    watcher = make_watcher(engine, folder, clock)
    outside = tmp_path / "other.md"
    outside.write_text("not ours")
    watcher.note([outside, tmp_path])
    assert watcher.stats.queue_depth == 0


def test_watch_gauges_name_every_counter(engine: Engine, folder: Path, clock: FakeClock) -> None:
    watcher = make_watcher(engine, folder, clock)
    (folder / "a.md").write_text("alpha note")
    watcher.note([folder / "a.md"])
    assert watcher.stats.gauges()["watch_queue_depth"] == 1.0
    clock.advance(2.0)
    watcher.apply_due()
    gauges = watcher.stats.gauges()
    assert gauges["watch_queue_depth"] == 0.0
    assert gauges["watch_files_indexed"] == 1.0
    assert gauges["watch_last_lag_seconds"] == pytest.approx(2.0)


def test_a_failed_write_is_retried_later_backing_off(engine: Engine, folder: Path,
                                                     clock: FakeClock,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    watcher = make_watcher(engine, folder, clock)
    path = folder / "note.md"
    path.write_text("Hot composting kills weed seeds.")
    real_add = engine.add
    failures = [Unavailable("database is locked"), Unavailable("database is locked")]

    def flaky_add(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop(0)
        return real_add(*args, **kwargs)

    monkeypatch.setattr(engine, "add", flaky_add)
    batch = settle(watcher, clock, path)
    assert batch is not None and batch.error == "database is locked" and batch.retry_in == 2.0
    assert watcher.stats.errors == 1 and watcher.stats.queue_depth == 1
    clock.advance(2.0)
    batch = watcher.apply_due()
    assert batch is not None and batch.retry_in == 4.0  # failed again: waits longer
    clock.advance(3.0)
    assert watcher.apply_due() is None
    clock.advance(2.0)
    batch = watcher.apply_due()
    assert batch is not None and batch.error is None and batch.indexed == ["note.md"]
    assert ids(engine) == {"note.md"}


class CountingEmbedder(HashingEmbedder):
    """Counts the document texts that reach the model (behind the embedding cache)."""

    def __init__(self) -> None:
        super().__init__(dimension=32)
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str], kind: str = "document") -> Any:
        if kind == "document":
            self.texts += texts
        return super().embed(texts, kind)


def test_an_edit_embeds_only_changed_chunks_and_a_rename_none(tmp_path: Path, folder: Path,
                                                             clock: FakeClock) -> None:
    """The watcher's engine has an embedding cache (``rcpkit watch`` gives it one): the
    content hash of a chunk's text finds its vector whatever the document's id."""
    model = CountingEmbedder()
    config = EngineConfig(data_dir=tmp_path / "cached",
                          embedder=EmbedderConfig(name="hashing", hashing_dimension=32,
                                                  cache=tmp_path / "cache.sqlite"))
    paragraphs = [" ".join(f"{word}{n}" for n in range(150)) for word in ("bee", "oven", "moon")]
    path = folder / "long.md"
    path.write_text("\n\n".join(paragraphs))
    with Engine.open(config, embedder=model) as cached:
        watcher = make_watcher(cached, folder, clock)
        settle(watcher, clock, path)
        chunks = len(model.texts)
        assert chunks >= 3
        model.texts.clear()
        path.write_text("\n\n".join([*paragraphs[:2], "rain gauge " * 100]))
        batch = settle(watcher, clock, path)
        assert batch is not None and batch.updated == 1
        assert len(model.texts) == 1 and "rain gauge" in model.texts[0]
        model.texts.clear()
        path.rename(folder / "renamed.md")
        batch = settle(watcher, clock, path, folder / "renamed.md")
        assert batch is not None and batch.indexed == ["renamed.md"]
        assert model.texts == []
