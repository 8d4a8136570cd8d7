"""``rcpkit backup`` / ``rcpkit restore`` (through the real Typer app): an online snapshot
taken while a writer adds and deletes holds every write acknowledged at or before its
version and none after, and the restored engine answers as the original did at that
§7.7.1 ``indexVersion``."""

from __future__ import annotations

import threading
from pathlib import Path

from typer.testing import CliRunner, Result

from rcpkit.cli import app
from rcpkit.engine import Engine, EngineConfig
from rcpkit.engine.backup import MANIFEST, read_manifest
from rcpkit.engine.types import DocumentIn, SearchRequest
from rcpkit.tenancy.collections import CollectionRegistry

CONFIG = 'embedder = "hashing"\nhashing_dimension = 64\nindex_save_every = 7\n'
WORDS = ("bees honey hive", "owls night hunt", "glacier valley ice", "tide moon sea",
         "forge iron anvil", "loom thread cloth")
QUERIES = ("honey hive", "night owls", "ice valley", "moon tide")


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def data_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "rcpkit.toml").write_text(CONFIG)
    return path


def open_engine(path: Path) -> Engine:
    return Engine.open(EngineConfig.load(path / "rcpkit.toml").with_overrides(data_dir=path))


def seq_of(index_version: str) -> int:
    return int(index_version.rpartition(".")[2])


def answers(engine: Engine, index_version: str | None = None) -> list[list[tuple[str, float]]]:
    return [[(hit.doc_id, round(hit.score, 6)) for hit in engine.search(SearchRequest(
        query=query, k=8, mode=mode, index_version=index_version)).hits]
        for query in QUERIES for mode in ("sparse", "dense", "hybrid")]


class Writer(threading.Thread):
    """Adds one document at a time and deletes every fourth one it added, recording each
    acknowledged write with the version it produced."""

    def __init__(self, engine: Engine, limit: int) -> None:
        super().__init__(daemon=True)
        self.engine = engine
        self.limit = limit
        self.acks: list[tuple[int, str, str]] = []
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            for i in range(self.limit):
                if self.stop.is_set():
                    return
                doc_id = f"doc-{i}"
                added = self.engine.add([DocumentIn(id=doc_id,
                                                    text=f"{WORDS[i % len(WORDS)]} number {i}")])
                self.acks.append((seq_of(added.index_version), "add", doc_id))
                if i % 4 == 3:
                    victim = f"doc-{i - 2}"
                    deleted = self.engine.delete([victim])
                    self.acks.append((seq_of(deleted.index_version), "delete", victim))
        except BaseException as exc:  # reported by the test
            self.failure = exc


def live_at(acks: list[tuple[int, str, str]], seq: int) -> set[str]:
    live: set[str] = set()
    for ack_seq, op, doc_id in sorted(acks):
        if ack_seq <= seq:
            (live.add if op == "add" else live.discard)(doc_id)
    return live


def test_a_backup_under_write_load_restores_exactly_its_version(tmp_path: Path) -> None:
    root = data_dir(tmp_path / "root")
    (root / "keys.json").write_text('{"keys": []}')
    engine = open_engine(root)
    writer = Writer(engine, limit=400)
    try:
        writer.start()
        while len(writer.acks) < 40 and writer.is_alive():
            writer.join(0.01)
        made = run("backup", str(tmp_path / "snap"), "--data", str(root))
        taken_while = len(writer.acks)
        while len(writer.acks) < taken_while + 30 and writer.is_alive():
            writer.join(0.01)
        writer.stop.set()
        writer.join()
        assert writer.failure is None, writer.failure
        assert made.exit_code == 0, made.output
        (copy,) = read_manifest(tmp_path / "snap").stores
        assert copy.index_version is not None and copy.seq is not None
        backup_seq = copy.seq
        # Writes were acknowledged on both sides of the snapshot.
        assert min(s for s, _, _ in writer.acks) <= backup_seq < max(s for s, _, _ in writer.acks)
        assert {"keys.json", "rcpkit.toml", "store.sqlite3"} <= set(
            read_manifest(tmp_path / "snap").files)
        original = answers(engine, copy.index_version)
    finally:
        writer.stop.set()
        engine.close()

    restored_root = tmp_path / "restored"
    done = run("restore", str(tmp_path / "snap"), "--data", str(restored_root))
    assert done.exit_code == 0, done.output
    assert (restored_root / "keys.json").read_text() == '{"keys": []}'
    every_id = sorted({doc_id for _, _, doc_id in writer.acks})
    with open_engine(restored_root) as restored:
        assert restored.index_version == copy.index_version
        assert set(restored.store.live_hashes(every_id)) == live_at(writer.acks, backup_seq)
        assert answers(restored) == original
        restored.add([DocumentIn(id="after-restore", text="bees again")])  # accepts writes


def test_restore_refuses_a_non_empty_target_unless_asked(tmp_path: Path) -> None:
    root = data_dir(tmp_path / "root")
    with open_engine(root) as engine:
        engine.add([DocumentIn(id="a", text="bees honey hive")])
    assert run("backup", str(tmp_path / "snap"), "--data", str(root)).exit_code == 0
    again = run("backup", str(tmp_path / "snap"), "--data", str(root))
    assert again.exit_code == 2 and "already exists" in again.output

    target = tmp_path / "other"
    target.mkdir()
    (target / "precious.txt").write_text("keep me")
    refused = run("restore", str(tmp_path / "snap"), "--data", str(target))
    assert refused.exit_code == 2 and "--overwrite" in refused.output
    assert (target / "precious.txt").read_text() == "keep me"
    replaced = run("restore", str(tmp_path / "snap"), "--data", str(target), "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert not (target / "precious.txt").exists()
    with open_engine(target) as engine:
        assert set(engine.store.live_hashes(["a"])) == {"a"}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_damaged_backup_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    root = data_dir(tmp_path / "root")
    with open_engine(root) as engine:
        engine.add([DocumentIn(id="a", text="bees honey hive")])
    assert run("backup", str(tmp_path / "snap"), "--data", str(root)).exit_code == 0
    record = tmp_path / "snap" / "store.sqlite3"
    damaged = bytearray(record.read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    record.write_bytes(bytes(damaged))
    refused = run("restore", str(tmp_path / "snap"), "--data", str(tmp_path / "new"))
    assert refused.exit_code == 2
    assert "store.sqlite3: checksum mismatch" in refused.output
    assert not (tmp_path / "new").exists()


def test_one_collection_is_backed_up_and_restored_into_another_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    registry = CollectionRegistry(root)
    for name in ("handbook", "tickets"):
        with open_engine(registry.create(name, CONFIG)) as engine:
            engine.add([DocumentIn(id=f"{name}-1", text=f"{name} bees honey")])
    (root / "keys.json").write_text('{"keys": []}')
    made = run("backup", str(tmp_path / "snap"), "--data", str(root), "--collection", "tickets")
    assert made.exit_code == 0, made.output
    files = read_manifest(tmp_path / "snap").files
    assert all(not name.startswith("collections/handbook") for name in files)
    assert MANIFEST not in files

    other = tmp_path / "other"
    assert run("restore", str(tmp_path / "snap"), "--data", str(other)).exit_code == 0
    assert CollectionRegistry(other).names() == ["tickets"]
    with open_engine(other / "collections" / "tickets") as engine:
        assert set(engine.store.live_hashes(["tickets-1"])) == {"tickets-1"}


def test_an_incremental_backup_links_the_saved_index_files_it_already_has(
        tmp_path: Path) -> None:
    root = data_dir(tmp_path / "root")
    with open_engine(root) as engine:
        engine.add([DocumentIn(id="a", text="bees honey hive")])
    assert run("backup", str(tmp_path / "one"), "--data", str(root)).exit_code == 0
    second = run("backup", str(tmp_path / "two"), "--data", str(root), "--since",
                 str(tmp_path / "one"))
    assert second.exit_code == 0, second.output
    one, two = read_manifest(tmp_path / "one"), read_manifest(tmp_path / "two")
    index_files = sorted(name for name in one.files
                         if name.startswith("indexes/state-"))
    assert index_files and two.linked == index_files
    for name in index_files:  # the same file, not a copy, with the checksum recorded before
        assert (tmp_path / "one" / name).stat().st_ino == (tmp_path / "two" / name).stat().st_ino
        assert two.files[name] == one.files[name]
    assert "store.sqlite3" not in two.linked
    with open_engine(root) as engine:  # a write and a save: a new state, nothing to link
        engine.add([DocumentIn(id="b", text="owls night hunt")])
    third = run("backup", str(tmp_path / "three"), "--data", str(root), "--since",
                str(tmp_path / "two"))
    assert third.exit_code == 0 and read_manifest(tmp_path / "three").linked == []
    assert run("restore", str(tmp_path / "two"), "--data", str(tmp_path / "back")).exit_code == 0
    with open_engine(tmp_path / "back") as engine:
        assert set(engine.store.live_hashes(["a", "b"])) == {"a"}
