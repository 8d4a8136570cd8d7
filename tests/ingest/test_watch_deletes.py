"""A file deleted from a watched folder leaves every channel (§7.11): the index after
``add(x); delete(x)`` is compared, channel by channel, with one built without ``x`` —
records, lexical, dense, the concept graph, a memory built over the index (§7.17) and the
summary tree (§7.7.2 ``tree-node``) — while a snapshot pinned before the delete still
serves ``x`` (§7.7.1). Events and the clock are injected (see ``test_watch_folder``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("scipy")
pytest.importorskip("igraph")

from rcpkit.engine.config import EmbedderConfig, EngineConfig, RetentionConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.knowledge.graph import ConceptGraph
from rcpkit.engine.knowledge.memory import KnowledgeMemory
from rcpkit.engine.knowledge.tree import SummaryTree
from rcpkit.engine.types import SearchRequest
from rcpkit.ingest.roots import Root
from rcpkit.ingest.watch import FolderWatcher, IndexMemories
from support.clock import FakeClock

FILES = {
    "bees.md": "Honey bees pollinate flowering plants. A worker bee visits hundreds of "
               "flowers a day. The honey bee colony stores nectar as honey.",
    "hive.md": "A beekeeper inspects the colony for the queen bee. The queen bee lays the "
               "eggs. Worker bees fan the nectar to dry it.",
    "bread.md": "Sourdough starter is wild yeast in flour and water. Bread dough rises when "
                "yeast ferments the flour. Knead the dough for elasticity.",
    "loaf.md": "A sourdough loaf needs a long fermentation. Bake the bread dough in a hot "
               "oven. Steam gives the loaf a crisp crust.",
}
DOOMED = ("comets.md", "Comet tails glow when sunlight heats cometary ice. Astronomers track "
          "comet orbits with a telescope; the comet nucleus sheds dust and the comet "
          "tail points away from the sun.")
SETTLE = 0.5
QUERIES = ("comet telescope", "honey bee colony", "sourdough yeast flour")


@dataclass
class Kept:
    engine: Engine
    graph: ConceptGraph
    memory: KnowledgeMemory
    memory_id: str
    watcher: FolderWatcher
    folder: Path


def kept_index(stack: ExitStack, base: Path, files: dict[str, str],
               **config: RetentionConfig) -> Kept:
    """A watched folder holding ``files``, indexed with its graph and a global memory of the
    live index; memories are rebuilt on change as ``rcpkit watch`` does."""
    folder = (base / "docs")
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    # One frozen clock: the rebuild lands in the same second as the build it replaces.
    engine = stack.enter_context(Engine.open(EngineConfig(
        data_dir=base / "data", embedder=EmbedderConfig(name="hashing", hashing_dimension=32),
        **config), clock=FakeClock()))
    graph = ConceptGraph.open(engine.config.data_dir, engine.store)
    stack.callback(graph.close)
    engine.on_publish(graph.sync)

    def live_view() -> tuple[object, str]:
        seq = engine.snapshot()
        return graph.view(seq), engine.version_token(seq)

    memories = IndexMemories(engine)
    stack.callback(memories.close)
    clock = FakeClock()
    watcher = FolderWatcher(engine, Root(folder.resolve(), "docs"), settle=SETTLE, clock=clock,
                            changed=lambda batch: memories.rebuild())
    watcher.apply([folder.resolve()])
    memory = KnowledgeMemory.open(engine.config.data_dir, engine.store, graph.extractor,
                                  live_view, clock=engine.clock)  # type: ignore[arg-type]
    stack.callback(memory.close)
    memory_id, _ = memory.build(None, memory_id=None, scope="global", caller="tester")
    return Kept(engine, graph, memory, memory_id, watcher, folder.resolve())


@pytest.fixture
def indexes(tmp_path: Path) -> Iterator[tuple[Kept, Kept]]:
    """``(with_x, without_x)``: the first then loses ``x`` through the watcher."""
    with ExitStack() as stack:
        yield (kept_index(stack, tmp_path / "with", {**FILES, DOOMED[0]: DOOMED[1]}),
               kept_index(stack, tmp_path / "without", FILES))


def documents(engine: Engine) -> dict[str, dict[str, object]]:
    found = engine.documents_where({"field": "source_root", "op": "eq", "value": "docs"})
    return {doc_id: dict(meta) for doc_id, meta in found.items()}


def hit_ids(engine: Engine, query: str, mode: str, index_version: str | None = None) -> list[str]:
    request = SearchRequest(query=query, k=10, mode=mode, index_version=index_version)
    return [hit.id for hit in engine.search(request).hits]


def recalled(kept: Kept, query: str) -> tuple[list[tuple[str, list[str], float]], list[str]]:
    recall = kept.memory.recall(query, memory_id=kept.memory_id, caller="tester", n=5)
    return ([(clue.query, clue.seed_ids, clue.weight) for clue in recall.clues],
            [draft.id for draft in recall.drafts])


def tree_leaves(kept: Kept) -> list[set[str]]:
    tree = SummaryTree(kept.engine.config.data_dir, kept.engine.store).at(kept.engine.snapshot())
    return [{leaf for node in level for leaf in node} for level in tree.leaves]


def test_a_deleted_file_leaves_every_channel(indexes: tuple[Kept, Kept]) -> None:
    with_x, without_x = indexes
    engine = with_x.engine
    before = engine.index_version
    assert "comets.md#0" in hit_ids(engine, "comet telescope", "sparse")
    assert any("comets.md#0" in level for level in tree_leaves(with_x))
    assert any(draft.startswith("comets.md#") for draft in recalled(with_x, "comet")[1])

    (with_x.folder / DOOMED[0]).unlink()
    batch = with_x.watcher.apply([with_x.folder / DOOMED[0]])
    assert batch.deleted == [DOOMED[0]]

    # Records and filter columns.
    assert documents(engine) == documents(without_x.engine)
    # Lexical and dense: the same live rows (x's stay for the retained snapshot only) and
    # the same answers.
    stats, expected_stats = engine.stats(), without_x.engine.stats()
    assert (stats["documents"], stats["chunks"]) == (expected_stats["documents"],
                                                     expected_stats["chunks"])
    for query in QUERIES:
        for mode in ("sparse", "dense", "hybrid"):
            assert hit_ids(engine, query, mode) == hit_ids(without_x.engine, query, mode)
    # The concept graph at the latest version: the same chunks, concepts and edges.
    view = with_x.graph.view(engine.snapshot())
    expected = without_x.graph.view(without_x.engine.snapshot())
    assert view.hit_ids == expected.hit_ids
    assert sorted(view.keys) == sorted(expected.keys)
    assert not any("comet" in key for key in view.keys)
    # The memory built over the index was rebuilt: it recalls what one built without x does.
    for query in (*QUERIES, "comet"):
        assert recalled(with_x, query) == recalled(without_x, query)
    # The summary tree of the new version holds no unit of x.
    assert tree_leaves(with_x) == tree_leaves(without_x)
    # Snapshots untouched: a read pinned before the delete still sees x (§7.7.1).
    assert "comets.md#0" in hit_ids(engine, "comet telescope", "sparse", index_version=before)


def test_once_no_snapshot_holds_x_the_stored_graph_drops_it(tmp_path: Path) -> None:
    """The graph keeps x's rows while a retained snapshot may be read (§7.7.1); with no
    older version retained, the delete removes them from the stored graph too."""
    with ExitStack() as stack:
        kept = kept_index(stack, tmp_path, {**FILES, DOOMED[0]: DOOMED[1]},
                          retention=RetentionConfig(versions=1, seconds=0))
        (kept.folder / DOOMED[0]).unlink()
        kept.watcher.apply([kept.folder / DOOMED[0]])
        kept.engine.clock.advance(1.0)  # type: ignore[attr-defined]
        (kept.folder / "later.md").write_text("A later note on crop rotation.")
        kept.watcher.apply([kept.folder / "later.md"])  # the write after collects x's rows
        stored = {hit_id for _, hit_id, _ in kept.graph.storage.load()}
        assert stored == {f"{name}#0" for name in [*FILES, "later.md"]}
