"""The memory component's bounds and retention (§7.17, §15.5): inline text capped (an
update's included), a build that stops at its request's stop check (§7.14, §13.1) and then
stores nothing, memories forgotten after ``retention_seconds`` and past ``max_count``, and
the operator's delete."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rcpkit.engine.core import Engine
from rcpkit.engine.errors import Cancelled, InvalidInput, UnknownMemory
from rcpkit.engine.knowledge.graph import ConceptGraph
from rcpkit.engine.knowledge.memory import KnowledgeMemory
from rcpkit.interrupts import checked_by
from support.clock import FakeClock

DAY = 86_400.0
TEA = [("green", "Green tea leaves are steamed. Steamed green tea keeps its colour."),
       ("black", "Black tea leaves oxidise fully before drying. Black tea is strong.")]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_800_000_000.0)


@pytest.fixture
def open_memory(engine: Engine, graph: ConceptGraph,
                clock: FakeClock) -> Iterator[Callable[..., KnowledgeMemory]]:
    opened: list[KnowledgeMemory] = []

    def live_view() -> Any:
        seq = engine.snapshot()
        return graph.view(seq), engine.version_token(seq)

    def make(**options: Any) -> KnowledgeMemory:
        memory = KnowledgeMemory.open(engine.config.data_dir, engine.store, graph.extractor,
                                      live_view, clock=clock, **options)
        opened.append(memory)
        return memory

    yield make
    for memory in opened:
        memory.close()


def _stored(memory: KnowledgeMemory) -> list[str]:
    return [summary.id for summary in memory.summaries()]


def test_inline_text_past_the_bound_is_refused_an_update_included(
        open_memory: Callable[..., KnowledgeMemory]) -> None:
    memory = open_memory(max_inline_bytes=100)
    with pytest.raises(InvalidInput) as refused:
        memory.build(TEA, memory_id=None, scope=None, caller="a")
    assert refused.value.field == "documents"
    assert _stored(memory) == []
    memory_id, _ = memory.build(TEA[:1], memory_id=None, scope=None, caller="a")
    with pytest.raises(InvalidInput):  # 66 bytes kept + 67 new
        memory.build(TEA[1:], memory_id=memory_id, scope=None, caller="a")
    drafts = memory.recall("black tea", memory_id=memory_id, caller="a", n=3).drafts
    assert [draft.id for draft in drafts] == ["green#0"]


def test_a_build_stops_at_the_request_stop_check_and_stores_nothing(
        open_memory: Callable[..., KnowledgeMemory]) -> None:
    memory = open_memory()
    checks = 0

    def stop_at_the_third() -> None:
        nonlocal checks
        checks += 1
        if checks == 3:
            raise Cancelled("cancelled")

    documents = [(f"d{i}", f"Note {i}: honey bees, bread and weather.") for i in range(10)]
    with checked_by(stop_at_the_third), pytest.raises(Cancelled):
        memory.build(documents, memory_id=None, scope=None, caller="a")
    assert checks == 3 and _stored(memory) == []
    with checked_by(stop_at_the_third):  # the index's memory is checked between concepts
        checks = -10_000
        memory.build(None, memory_id=None, scope=None, caller="a")
    assert checks > -10_000 + 3


def test_a_memory_expires_after_the_retention_and_the_next_build_prunes_it(
        open_memory: Callable[..., KnowledgeMemory], clock: FakeClock) -> None:
    memory = open_memory(retention_seconds=30 * DAY)
    old, _ = memory.build(TEA, memory_id=None, scope=None, caller="a")
    clock.advance(29 * DAY)
    assert memory.recall("black tea", memory_id=old, caller="a", n=3).clues
    clock.advance(2 * DAY)
    with pytest.raises(UnknownMemory):
        memory.recall("black tea", memory_id=old, caller="a", n=3)
    with pytest.raises(UnknownMemory):  # nor is it the latest one any more
        memory.recall("black tea", memory_id=None, caller="a", n=3)
    fresh, _ = memory.build(TEA, memory_id=None, scope=None, caller="a")
    rows = memory._tables.read("SELECT id FROM memories")
    assert rows == [(fresh,)]
    assert memory._tables.read("SELECT DISTINCT memory FROM memory_documents") == [(fresh,)]


def test_only_the_most_recently_built_memories_are_kept(
        open_memory: Callable[..., KnowledgeMemory], clock: FakeClock) -> None:
    memory = open_memory(max_count=2)
    built = []
    for _ in range(3):
        built.append(memory.build(TEA, memory_id=None, scope=None, caller="a")[0])
        clock.advance(1)
    assert _stored(memory) == [built[2], built[1]]
    memory.build(TEA[:1], memory_id=built[1], scope=None, caller="a")  # rebuilt: newest
    memory.build(TEA, memory_id=None, scope=None, caller="a")
    assert built[1] in _stored(memory) and built[2] not in _stored(memory)


def test_the_operator_deletes_memories_of_any_scope(
        open_memory: Callable[..., KnowledgeMemory]) -> None:
    memory = open_memory()
    shared, _ = memory.build(TEA, memory_id=None, scope=None, caller="a")
    private, _ = memory.build(TEA, memory_id=None, scope="session", caller="b")
    assert memory.recall("green tea", memory_id=private, caller="b", n=2).clues  # cached
    assert memory.delete([private, shared, "mem-never"]) == 2
    for memory_id, caller in ((shared, "a"), (private, "b")):
        with pytest.raises(UnknownMemory):
            memory.recall("green tea", memory_id=memory_id, caller=caller, n=2)
    assert memory._tables.read("SELECT COUNT(*) FROM memory_documents") == [(0,)]
    assert memory.delete([shared]) == 0


def test_a_memory_deleted_by_another_process_is_not_served_from_the_cache(
        open_memory: Callable[..., KnowledgeMemory]) -> None:
    serving, other = open_memory(), open_memory()
    memory_id, _ = serving.build(TEA, memory_id=None, scope=None, caller="a")
    assert serving.recall("green tea", memory_id=memory_id, caller="a", n=2).clues
    assert other.delete([memory_id]) == 1
    with pytest.raises(UnknownMemory):
        serving.recall("green tea", memory_id=memory_id, caller="a", n=2)
