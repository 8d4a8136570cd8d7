"""``rcpkit verify [--repair]`` (through the real Typer app): a flipped byte in each kind of
saved file is found; an index channel or the concept graph that lacks a row of the record
or holds one it does not is found; ``--repair`` rebuilds what is derived (after which the
engine answers as before the damage) and reports, without touching, damage to the record."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner, Result

from rcpkit.cli import app
from rcpkit.engine import Engine, EngineConfig
from rcpkit.engine.knowledge.graph import ConceptGraph
from rcpkit.engine.knowledge.memory import _SQLITE_SCHEMA as MEMORY_SCHEMA
from rcpkit.engine.knowledge.tree import SummaryTree
from rcpkit.engine.sidecar import SidecarDatabase
from rcpkit.engine.store import SqliteStore
from rcpkit.engine.types import DocumentIn, SearchRequest
from rcpkit.tenancy.collections import CollectionRegistry

CONFIG = ('embedder = "hashing"\nhashing_dimension = 64\ndense_sentence_windows = true\n'
          '[field_types]\ntopic = "keyword"\n')
TEXTS = ("Bees make honey in the hive. The queen lays eggs.", "Owls hunt at night in woods.",
         "Glaciers carve valleys of ice.", "The moon pulls the tide of the sea.",
         "Iron is shaped on the anvil at the forge.", "The loom weaves thread into cloth.")


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def open_engine(path: Path) -> Engine:
    return Engine.open(EngineConfig.load(path / "rcpkit.toml").with_overrides(data_dir=path))


def answers(path: Path) -> list[list[str]]:
    with open_engine(path) as engine:
        return [[hit.doc_id for hit in engine.search(SearchRequest(
            query=query, k=4, mode=mode, filter={"field": "topic", "op": "eq",
                                                  "value": "nature"})).hits]
                for query in ("honey bees", "night owls", "sea tide") for mode in
                ("sparse", "dense")]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A data directory with every kind of saved file: the record (with deleted rows), a
    saved index state with sentence windows, the concept graph, the memories and the tree."""
    data = tmp_path / "root"
    data.mkdir()
    (data / "rcpkit.toml").write_text(CONFIG)
    with open_engine(data) as engine:
        engine.add([DocumentIn(id=f"d{i}", text=text, meta={"topic": "nature" if i % 2 == 0
                                                              else "craft"})
                    for i, text in enumerate(TEXTS * 2)])
        engine.delete(["d1", "d2"])
        ConceptGraph.open(data, engine.store).close()
        SummaryTree(data, engine.store).at(engine.store.current_seq())
    memory = SidecarDatabase(data / "memory.sqlite", MEMORY_SCHEMA)
    memory.execute("INSERT INTO memories VALUES ('m', 'global', NULL, 'src', NULL, 3, 1, 'x')")
    memory.close()
    return data


def flip_byte(path: Path, offset: int | None = None) -> None:
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2 if offset is None else offset] ^= 0x01
    path.write_bytes(bytes(damaged))


def state_dir(root: Path) -> Path:
    return root / "indexes" / (root / "indexes" / "CURRENT").read_text().strip()


def saved_index_files(root: Path) -> list[str]:
    state = state_dir(root)
    return sorted(path.relative_to(state).as_posix() for path in state.rglob("*")
                  if path.is_file())


def test_a_sound_root_passes(root: Path) -> None:
    checked = run("verify", "--data", str(root))
    assert checked.exit_code == 0, checked.output
    assert checked.stdout.startswith(".: ok (")
    for part in ("record: 12 stored chunks", "memory", "indexes: saved state", "graph: 12 chunks",
                 "tree"):
        assert part in checked.stdout


def test_every_kind_of_index_file_is_saved(root: Path) -> None:
    names = saved_index_files(root)
    for part in ("lexical/lexical.json", "dense/dense.json", "dense/windows.json",
                 "dense/windows/dense.json", "columns/columns.json", "fields/fields.json",
                 "state.json"):
        assert part in names
    assert sum(name.endswith(".npz") or name.endswith(".npy") or name.endswith(".bin")
               for name in names) >= 5


def test_a_flipped_byte_in_any_saved_index_file_is_found_and_repaired(root: Path) -> None:
    before = answers(root)
    for position in range(len(saved_index_files(root))):
        name = saved_index_files(root)[position]  # a repair saves a new state each time
        flip_byte(state_dir(root) / name)
        found = run("verify", "--data", str(root))
        assert found.exit_code == 1, name
        assert "FAILED .: indexes" in found.stdout, (name, found.stdout)
        repaired = run("verify", "--data", str(root), "--repair")
        assert repaired.exit_code == 0, (name, repaired.output)
        assert "repaired indexes: rebuilt from the record" in repaired.stdout
        assert run("verify", "--data", str(root)).exit_code == 0, name
    assert answers(root) == before


@pytest.mark.parametrize("name", ["CURRENT", "tree"])
def test_a_flipped_byte_in_the_pointer_or_the_tree_is_found_and_repaired(root: Path,
                                                                         name: str) -> None:
    path = root / "indexes" / "CURRENT" if name == "CURRENT" else root / "tree.npz"
    flip_byte(path, 0 if name == "CURRENT" else None)
    found = run("verify", "--data", str(root))
    assert found.exit_code == 1 and ("indexes: unreadable" if name == "CURRENT"
                                     else "tree.npz: unreadable") in found.stdout
    assert run("verify", "--data", str(root), "--repair").exit_code == 0
    assert run("verify", "--data", str(root)).exit_code == 0


def first_btree_page_type(path: Path) -> int:
    """The offset of page 2's type byte (an SQLite b-tree page header)."""
    page_size = int.from_bytes(path.read_bytes()[16:18], "big")
    return page_size


def test_a_damaged_graph_file_is_found_and_rebuilt(root: Path) -> None:
    flip_byte(root / "graph.sqlite", first_btree_page_type(root / "graph.sqlite"))
    found = run("verify", "--data", str(root))
    assert found.exit_code == 1 and "graph.sqlite" in found.stdout
    repaired = run("verify", "--data", str(root), "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert "repaired graph.sqlite: rebuilt from the record" in repaired.stdout
    assert list(root.glob("graph.sqlite.damaged-*"))  # kept for inspection


@pytest.mark.parametrize("name", ["store.sqlite3", "memory.sqlite"])
def test_damage_to_what_is_not_derived_is_reported_never_repaired(root: Path,
                                                                  name: str) -> None:
    flip_byte(root / name, first_btree_page_type(root / name))
    damaged = (root / name).read_bytes()
    for args in ((), ("--repair",)):
        found = run("verify", "--data", str(root), *args)
        assert found.exit_code == 1
        assert f"{name}:" in found.stdout and "restore it from a backup" in found.stdout
    assert (root / name).read_bytes() == damaged


def test_a_missing_or_extra_index_row_is_found_and_repaired(root: Path) -> None:
    before = answers(root)
    with open_engine(root) as engine:
        victim = int(engine.indexes.lexical.held_rowids()[3])
        engine.indexes.lexical.remove(np.array([victim]))
        engine.indexes.columns.add([9999], [{"topic": "nature"}])
        engine.add([DocumentIn(id="later", text="A later write moves the saved position.")])
    found = run("verify", "--data", str(root))
    assert found.exit_code == 1
    assert f"lexical: lacks 1 rows ({victim}) of the record" in found.stdout
    assert "columns: holds 1 rows (9999) the record does not" in found.stdout
    assert run("verify", "--data", str(root), "--repair").exit_code == 0
    assert run("verify", "--data", str(root)).exit_code == 0
    with open_engine(root) as engine:
        engine.delete(["later"])
    assert answers(root) == before


def test_a_graph_row_missing_or_misnamed_is_found_and_repaired(root: Path) -> None:
    graph = SidecarDatabase(root / "graph.sqlite", "")
    graph.execute("DELETE FROM graph_chunks WHERE rowid_ = (SELECT MIN(rowid_) FROM graph_chunks)")
    graph.execute("UPDATE graph_chunks SET hit_id = 'forged#0' "
                  "WHERE rowid_ = (SELECT MAX(rowid_) FROM graph_chunks)")
    graph.close()
    found = run("verify", "--data", str(root))
    assert found.exit_code == 1
    assert "graph.sqlite: lacks 1 rows" in found.stdout
    assert "names 1 rows" in found.stdout
    assert run("verify", "--data", str(root), "--repair").exit_code == 0
    assert run("verify", "--data", str(root)).exit_code == 0


def test_verify_finds_nothing_on_a_root_written_and_saved_meanwhile(tmp_path: Path) -> None:
    """Verify beside an engine that writes, deletes and saves its indexes after every write
    reports nothing (it reads the derived stores before the record, whose positions only
    grow, so a state saved meanwhile is not taken for one ahead of the record)."""
    data = tmp_path / "live"
    data.mkdir()
    (data / "rcpkit.toml").write_text("index_save_every = 1\n" + CONFIG)
    stop = threading.Event()
    with open_engine(data) as engine:
        engine.add([DocumentIn(id="first", text=TEXTS[0], meta={"topic": "nature"})])
        ConceptGraph.open(data, engine.store).close()

        def write() -> None:
            for n in itertools.count():
                if stop.is_set() or n == 500:
                    return
                engine.add([DocumentIn(id=f"w{n}", text=TEXTS[n % len(TEXTS)],
                                       meta={"topic": "craft"})])
                if n % 3 == 2:
                    engine.delete([f"w{n - 1}"])

        writer = threading.Thread(target=write)
        writer.start()
        try:
            outcomes = [run("verify", "--data", str(data)) for _ in range(3)]
        finally:
            stop.set()
            writer.join()
    assert [o.exit_code for o in outcomes] == [0, 0, 0], [o.output for o in outcomes]
    assert SqliteStore.FILE_NAME in {p.name for p in data.iterdir()}


def test_a_root_of_collections_is_verified_one_by_one(tmp_path: Path) -> None:
    root = tmp_path / "root"
    registry = CollectionRegistry(root)
    for name in ("handbook", "tickets"):
        with open_engine(registry.create(name, CONFIG)) as engine:
            engine.add([DocumentIn(id=f"{name}-1", text=TEXTS[0], meta={"topic": "nature"})])
    (root / "keys.json").write_text("{not json")
    flip_byte(state_dir(root / "collections" / "tickets") / "state.json")
    whole = run("verify", "--data", str(root))
    assert whole.exit_code == 1
    assert "collections/handbook: ok (" in whole.stdout
    assert "FAILED collections/tickets: indexes" in whole.stdout
    assert "FAILED keys.json: unreadable" in whole.stdout
    (root / "keys.json").write_text('{"keys": []}')
    assert run("verify", "--data", str(root), "--collection", "handbook").exit_code == 0
    assert run("verify", "--data", str(root), "--collection", "nope").exit_code == 2


@pytest.mark.parametrize(("part", "original", "altered"), [
    ("lexical/lexical.json", '"k1": 1.2', '"k1": 2.5'),
    ("columns/columns.json", '"keys": ["nature", "craft"]', '"keys": ["craft", "nature"]')])
def test_an_altered_manifest_that_still_parses_is_not_served(
        root: Path, part: str, original: str, altered: str) -> None:
    """A saved part's JSON manifest changed into other valid JSON (BM25's ``k1``, the values
    of a filter column) passes its part's own checks; the listing in ``state.json`` catches
    it at open, and the engine rebuilds from the record instead of answering from it."""
    before = answers(root)
    with open_engine(root) as engine:
        scores = [round(hit.score, 6) for hit in engine.search(
            SearchRequest(query="bees honey hive", k=3, mode="sparse")).hits]
    manifest = state_dir(root) / part
    assert original in manifest.read_text()
    manifest.write_text(manifest.read_text().replace(original, altered))
    with open_engine(root) as engine:
        assert [round(hit.score, 6) for hit in engine.search(
            SearchRequest(query="bees honey hive", k=3, mode="sparse")).hits] == scores
    assert answers(root) == before
    assert run("verify", "--data", str(root)).exit_code == 0  # the open saved a sound state
