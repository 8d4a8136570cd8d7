"""DenseIndex: exact and HNSW top-k, filters by row-id mask, background graph builds,
determinism (§7.7.1), persistence (§7.7, §8)."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rcpkit.engine.errors import IndexUnavailable
from rcpkit.engine.indexes.dense import DenseIndex, exact, hnsw, usearch_format
from rcpkit.engine.indexes.dense import index as dense

DIM = 16


def unit_vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def brute_force(rowids: np.ndarray, vectors: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    scores = vectors @ (query / np.linalg.norm(query))
    order = sorted(range(len(rowids)), key=lambda i: (-scores[i], rowids[i]))
    return [int(rowids[i]) for i in order[:k]]


@pytest.fixture
def small_index() -> tuple[DenseIndex, np.ndarray]:
    vectors = unit_vectors(500)
    index = DenseIndex(DIM)
    index.add(np.arange(10, 510), vectors)
    return index, vectors


def test_exact_search_matches_brute_force(small_index: tuple[DenseIndex, np.ndarray]) -> None:
    index, vectors = small_index
    query = unit_vectors(1, seed=7)[0]
    rowids, scores = index.search(query, 10)
    assert rowids.dtype == np.int64
    assert rowids.tolist() == brute_force(np.arange(10, 510), vectors, query, 10)
    np.testing.assert_allclose(scores, index.get(rowids) @ query, rtol=1e-5)
    assert np.all(np.diff(scores) <= 0)


def test_cosine_normalises_inputs_and_queries() -> None:
    index = DenseIndex(3)
    index.add(np.array([1, 2]), np.array([[10.0, 0, 0], [0, 3.0, 0]]))
    rowids, scores = index.search(np.array([0.0, 5.0, 0.0]), 2)
    assert rowids.tolist() == [2, 1]
    np.testing.assert_allclose(scores, [1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(index.get(np.array([1, 2])), axis=1), 1.0)


def test_dot_metric_keeps_magnitudes() -> None:
    index = DenseIndex(2, metric="dot")
    index.add(np.array([0, 1]), np.array([[1.0, 0.0], [3.0, 0.0]]))
    rowids, scores = index.search(np.array([2.0, 0.0]), 2)
    assert rowids.tolist() == [1, 0]
    np.testing.assert_allclose(scores, [6.0, 2.0])


def test_ties_break_by_smaller_rowid() -> None:
    index = DenseIndex(2)
    index.add(np.array([9, 3, 7, 5]), np.tile([1.0, 0.0], (4, 1)))
    rowids, _ = index.search(np.array([1.0, 0.0]), 3)
    assert rowids.tolist() == [3, 5, 7]


def test_ties_at_the_cut_keep_smallest_rowids() -> None:
    index = DenseIndex(2)
    vectors = np.array([[1.0, 0.0]] + [[0.0, 1.0]] * 200)
    index.add(np.arange(201)[::-1].copy(), vectors)
    rowids, _ = index.search(np.array([0.6, 0.8]), 4)
    assert rowids.tolist() == [0, 1, 2, 3]


def test_allow_mask_by_rowid(small_index: tuple[DenseIndex, np.ndarray]) -> None:
    index, vectors = small_index
    allow = np.zeros(300, dtype=bool)  # rowids >= 300 are implicitly disallowed
    allow[[12, 40, 41, 299]] = True
    rowids, _ = index.search(unit_vectors(1, seed=3)[0], 10, allow=allow)
    assert sorted(rowids.tolist()) == [12, 40, 41, 299]
    nothing, scores = index.search(vectors[0], 5, allow=np.zeros(1000, dtype=bool))
    assert len(nothing) == 0 and len(scores) == 0


def test_a_mask_over_gapless_rowids_is_read_in_place() -> None:
    rowids = np.arange(5, 25)
    allow = np.arange(40) % 3 == 0
    view = exact.allowed_rows(rowids, allow)
    assert np.shares_memory(view, allow) and view.tolist() == allow[5:25].tolist()
    # With a gap, or past the mask's end, each row id is looked up.
    for ids in (np.delete(rowids, 4), np.arange(30, 50)):
        looked_up = exact.allowed_rows(ids, allow)
        assert not np.shares_memory(looked_up, allow)
        assert looked_up.tolist() == [bool(i < 40 and allow[i]) for i in ids]


def test_broad_filter_in_exact_mode_matches_brute_force(
    small_index: tuple[DenseIndex, np.ndarray],
) -> None:
    index, vectors = small_index
    allow = np.zeros(600, dtype=bool)
    allow[::2] = True
    query = unit_vectors(1, seed=11)[0]
    rowids, _ = index.search(query, 10, allow=allow)
    even = np.arange(10, 510)[np.arange(10, 510) % 2 == 0]
    assert rowids.tolist() == brute_force(even, vectors[(even - 10)], query, 10)


def test_remove_get_and_count(small_index: tuple[DenseIndex, np.ndarray]) -> None:
    index, vectors = small_index
    index.remove(np.array([10, 11, 12, 99_999]))  # unknown ids are ignored
    assert index.count == 497
    rowids, _ = index.search(vectors[0], 500)
    assert 10 not in rowids.tolist() and len(rowids) == 497
    np.testing.assert_allclose(index.get(np.array([20, 13])), vectors[[10, 3]], rtol=1e-6)
    with pytest.raises(IndexUnavailable):
        index.get(np.array([10]))


def test_add_rejects_duplicates_and_bad_shapes(
    small_index: tuple[DenseIndex, np.ndarray],
) -> None:
    index, _ = small_index
    with pytest.raises(ValueError):
        index.add(np.array([10]), unit_vectors(1))
    with pytest.raises(ValueError):
        index.add(np.array([1000, 1000]), unit_vectors(2))
    with pytest.raises(ValueError):
        index.add(np.array([1000]), np.zeros((1, DIM + 1)))
    with pytest.raises(ValueError):
        index.search(np.zeros(DIM - 1), 3)
    with pytest.raises(ValueError):
        index.search(np.full(DIM, np.nan), 3)


def test_out_of_order_adds_stay_searchable() -> None:
    vectors = unit_vectors(40)
    index = DenseIndex(DIM)
    index.add(np.arange(20, 40), vectors[20:])
    index.add(np.arange(0, 20)[::-1].copy(), vectors[:20][::-1])
    np.testing.assert_allclose(index.get(np.arange(40)), vectors, rtol=1e-6)
    rowids, _ = index.search(vectors[5], 1)
    assert rowids.tolist() == [5]


def test_growth_over_many_small_appends() -> None:
    vectors = unit_vectors(3000)
    index = DenseIndex(DIM)
    for start in range(0, 3000, 7):
        end = min(start + 7, 3000)
        index.add(np.arange(start, end), vectors[start:end])
    assert index.count == 3000
    np.testing.assert_allclose(index.get(np.arange(3000)), vectors, rtol=1e-6)


def test_search_batch_equals_single_searches(
    small_index: tuple[DenseIndex, np.ndarray],
) -> None:
    index, _ = small_index
    queries = unit_vectors(5, seed=4)
    batch = index.search_batch(queries, 7)
    for query, (rowids, scores) in zip(queries, batch, strict=True):
        single_ids, single_scores = index.search(query, 7)
        assert rowids.tolist() == single_ids.tolist()
        np.testing.assert_allclose(scores, single_scores, rtol=1e-6)


def test_empty_index_and_k_larger_than_count() -> None:
    index = DenseIndex(DIM)
    rowids, scores = index.search(unit_vectors(1)[0], 5)
    assert len(rowids) == 0 and len(scores) == 0
    index.add(np.array([1, 2]), unit_vectors(2))
    assert len(index.search(unit_vectors(1)[0], 50)[0]) == 2


@pytest.fixture
def graph_index() -> Iterator[tuple[DenseIndex, np.ndarray]]:
    """3000 rows above a 1000-row threshold: searches go through the HNSW graph."""
    vectors = unit_vectors(3000, seed=1)
    index = DenseIndex(DIM, exact_threshold=1000)
    index.add(np.arange(1000), vectors[:1000])
    assert not index.uses_graph
    index.add(np.arange(1000, 3000), vectors[1000:])
    assert index.wait_for_graph(60)
    assert index.uses_graph and index.graph_tail == 0
    yield index, vectors
    index.close()


def recall(found: list[int], truth: list[int]) -> float:
    return len(set(found) & set(truth)) / len(truth)


def test_graph_search_recall_and_exact_scores(graph_index: tuple[DenseIndex, np.ndarray]) -> None:
    index, vectors = graph_index
    queries = unit_vectors(20, seed=9)
    recalls = []
    for query in queries:
        rowids, scores = index.search(query, 10)
        recalls.append(recall(rowids.tolist(), brute_force(np.arange(3000), vectors, query, 10)))
        np.testing.assert_allclose(scores, vectors[rowids] @ query, rtol=1e-5)
    assert np.mean(recalls) >= 0.95


def test_a_query_for_many_results_searches_the_graph_wider() -> None:
    """usearch's ef is max(ef_search, results asked): asking for ``SEARCH_WIDTH`` × k lets
    a large k keep its recall under a narrow ef_search (0.90 here asking for k alone)."""
    vectors = unit_vectors(3000, seed=1, dim=32)
    index = DenseIndex(32, exact_threshold=1000, expansion_search=1)
    index.add(np.arange(3000), vectors)
    assert index.wait_for_graph(60) and index.uses_graph
    recalls = [recall(index.search(query, 30)[0].tolist(),
                      index.search(query, 30, exact=True)[0].tolist())
               for query in unit_vectors(30, seed=2, dim=32)]
    index.close()
    assert np.mean(recalls) >= 0.98


def test_graph_search_with_broad_filter_uses_graph_and_respects_mask(
    graph_index: tuple[DenseIndex, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    index, vectors = graph_index
    monkeypatch.setattr(dense, "SELECTIVE_ROWS", 100)  # 1500 allowed rows: oversampled graph
    allow = np.zeros(3000, dtype=bool)
    allow[1::2] = True
    odd = np.arange(1, 3000, 2)
    recalls = []
    for query in unit_vectors(20, seed=5):
        rowids, _ = index.search(query, 10, allow=allow)
        assert len(rowids) == 10 and np.all(rowids % 2 == 1)
        recalls.append(recall(rowids.tolist(), brute_force(odd, vectors[odd], query, 10)))
    assert np.mean(recalls) >= 0.95


class _CountingGraph:
    """A usearch index that records how many candidates each search asked for."""

    def __init__(self, index: object) -> None:
        self.index, self.asked = index, []

    def search(self, query: np.ndarray, count: int) -> object:
        self.asked.append(count)
        return self.index.search(query, count)  # type: ignore[attr-defined]


def test_how_wide_a_graph_search_looks(
    graph_index: tuple[DenseIndex, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """usearch searches max(ef_search, candidates asked) wide: a query asks for
    ``SEARCH_WIDTH`` candidates per result, and a filtered one 1/fraction times more (at
    least ef_search's worth), since only that fraction of what it visits is allowed."""
    index, _ = graph_index
    monkeypatch.setattr(dense, "SELECTIVE_ROWS", 100)
    graph = index._view.graph
    assert graph is not None and index.expansion_search == dense.EXPANSION_SEARCH
    counting = _CountingGraph(graph.index)
    monkeypatch.setattr(index, "_view", dataclasses.replace(
        index._view, graph=dataclasses.replace(graph, index=counting)))
    query = unit_vectors(1, seed=5)[0]
    quarter = np.arange(3000) % 4 == 0
    index.search(query, 10)
    index.search(query, 50)
    index.search(query, 10, allow=quarter)
    index.search(query, 200, allow=quarter)
    assert counting.asked == [dense.SEARCH_WIDTH * 10, dense.SEARCH_WIDTH * 50,
                              4 * dense.EXPANSION_SEARCH, 3000]  # at most every row


def test_selective_filter_on_graph_index_is_exact(
    graph_index: tuple[DenseIndex, np.ndarray],
) -> None:
    index, vectors = graph_index
    allowed_ids = np.array([5, 77, 1500, 2999, 2048])
    allow = np.zeros(3000, dtype=bool)
    allow[allowed_ids] = True
    query = unit_vectors(1, seed=8)[0]
    rowids, _ = index.search(query, 3, allow=allow)
    assert rowids.tolist() == brute_force(allowed_ids, vectors[allowed_ids], query, 3)


def test_graph_results_fall_back_to_exact_when_filter_defeats_oversampling(
    graph_index: tuple[DenseIndex, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    index, vectors = graph_index
    monkeypatch.setattr(dense, "SELECTIVE_ROWS", 10)
    monkeypatch.setattr(dense, "SELECTIVE_FRACTION", 0.0)
    # Allow the rows *least* similar to the query: the graph's neighbourhood holds none.
    query = vectors[0]
    worst = np.argsort(vectors @ query)[:300]
    allow = np.zeros(3000, dtype=bool)
    allow[worst] = True
    rowids, _ = index.search(query, 10, allow=allow)
    assert rowids.tolist() == brute_force(np.sort(worst), vectors[np.sort(worst)], query, 10)


def test_graph_follows_removals(graph_index: tuple[DenseIndex, np.ndarray]) -> None:
    index, vectors = graph_index
    rowids, _ = index.search(vectors[42], 1)
    assert rowids.tolist() == [42]
    index.remove(np.array([42]))
    rowids, _ = index.search(vectors[42], 5)
    assert 42 not in rowids.tolist()


def test_graph_search_is_repeatable(graph_index: tuple[DenseIndex, np.ndarray]) -> None:
    index, vectors = graph_index
    rebuilt = DenseIndex(DIM, exact_threshold=1000)
    rebuilt.add(np.arange(3000), vectors)
    assert rebuilt.wait_for_graph(60)
    for query in unit_vectors(10, seed=12):
        first = index.search(query, 10)[0].tolist()
        assert index.search(query, 10)[0].tolist() == first
        assert rebuilt.search(query, 10)[0].tolist() == first
    rebuilt.close()


def test_every_row_is_reachable_in_the_graph(graph_index: tuple[DenseIndex, np.ndarray]) -> None:
    index, vectors = graph_index
    found = [rowids[0] for rowids, _ in index.search_batch(vectors, 1)]
    assert found == list(range(3000))


def test_a_bulk_build_inserts_a_random_skeleton_then_neighbours_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hnsw, "PIVOTS", 8)
    vectors = unit_vectors(400, seed=3)
    positions = np.arange(400)
    order = hnsw.insertion_order(vectors, positions)
    assert sorted(order.tolist()) == positions.tolist()
    assert order.tolist() == hnsw.insertion_order(vectors, positions).tolist()  # seeded
    head, rest = order[:40], order[40:]  # SKELETON_FRACTION of 400
    assert not np.all(np.diff(head) > 0)  # shuffled, not the rows' own order
    nearest = np.argmax(vectors[rest] @ vectors[head[:8]].T, axis=1)
    assert np.all(np.diff(nearest) >= 0)  # grouped by nearest pivot
    assert len(set(nearest.tolist())) > 1


def test_an_ordered_bulk_build_reaches_every_row_and_finds_neighbours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh build past ``ORDERED_BUILD_ROWS`` goes in :func:`_insertion_order`, with two
    threads (so through the repair): every row finds itself, and recall holds."""
    monkeypatch.setattr(hnsw, "ORDERED_BUILD_ROWS", 1000)
    monkeypatch.setattr(hnsw, "PIVOTS", 16)
    ordered: list[int] = []
    original = hnsw.insertion_order

    def spy(vectors: np.ndarray, positions: np.ndarray) -> np.ndarray:
        result = original(vectors, positions)
        ordered.append(len(result))
        return result

    monkeypatch.setattr(hnsw, "insertion_order", spy)
    vectors = unit_vectors(3000, seed=1)
    index = DenseIndex(DIM, exact_threshold=1000, build_threads=2)
    index.add(np.arange(3000), vectors)
    assert index.wait_for_graph(60) and index.uses_graph
    graph = index._view.graph
    assert graph is not None and index.graph_tail == graph.orphans  # those the repair left
    assert ordered == [3000]
    found = [rowids[0] for rowids, _ in index.search_batch(vectors, 1)]
    assert found == list(range(3000))
    recalls = [recall(index.search(query, 10)[0].tolist(),
                      brute_force(np.arange(3000), vectors, query, 10))
               for query in unit_vectors(20, seed=9)]
    index.close()
    assert np.mean(recalls) >= 0.95


def test_save_and_load_round_trip(
    tmp_path: Path, graph_index: tuple[DenseIndex, np.ndarray]
) -> None:
    index, _ = graph_index
    index.remove(np.array([3, 4]))
    index.save(tmp_path)
    index.save(tmp_path)  # a second save replaces the first generation of files
    meta = json.loads((tmp_path / "dense.json").read_text())
    assert set(meta["files"]) == {"vectors", "rowids", "graph", "graph_rowids"}
    assert len(list(tmp_path.iterdir())) == 5
    loaded = DenseIndex.load(tmp_path)
    # The saved graph is restored (its vectors rebuilt in the background), not rebuilt.
    assert loaded.wait_for_graph(60)
    assert loaded.count == index.count and loaded.uses_graph and loaded.graph_tail == 0
    assert saved_bytes(loaded) == saved_bytes(index)
    for query in unit_vectors(5, seed=13):
        assert loaded.search(query, 10)[0].tolist() == index.search(query, 10)[0].tolist()
    loaded.add(np.array([5000]), unit_vectors(1, seed=99))
    assert loaded.search(unit_vectors(1, seed=99)[0], 1)[0].tolist() == [5000]


def test_a_search_width_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="expansion_search must be at least 1"):
        DenseIndex(DIM, expansion_search=0)


def test_a_loaded_graph_searches_as_wide_as_the_loader_asks(
    tmp_path: Path, graph_index: tuple[DenseIndex, np.ndarray]
) -> None:
    """ef_search belongs to the queries, not to the saved index: a store saved at one
    value and opened with another searches with the new one."""
    index, _ = graph_index
    assert index.expansion_search == dense.EXPANSION_SEARCH
    index.save(tmp_path)
    loaded = DenseIndex.load(tmp_path, expansion_search=40)
    assert loaded.wait_for_graph(60)
    graph = loaded._view.graph
    assert graph is not None and graph.index.expansion_search == 40
    loaded.close()


def test_save_exact_index_has_no_graph(
    tmp_path: Path, small_index: tuple[DenseIndex, np.ndarray]
) -> None:
    index, _ = small_index
    index.save(tmp_path)
    loaded = DenseIndex.load(tmp_path)
    assert not loaded.uses_graph
    np.testing.assert_array_equal(loaded.get(np.arange(10, 510)), index.get(np.arange(10, 510)))
    with pytest.raises(IndexUnavailable):
        DenseIndex.load(tmp_path / "missing")


def test_readers_see_consistent_state_during_writes() -> None:
    index = DenseIndex(DIM)
    vectors = unit_vectors(4000, seed=2)
    index.add(np.arange(100), vectors[:100])
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                rowids, scores = index.search(vectors[0], 20)
                assert len(rowids) == 20 and rowids[0] == 0
                np.testing.assert_allclose(scores, vectors[rowids] @ vectors[0], rtol=1e-5)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    for start in range(100, 4000, 50):
        index.add(np.arange(start, start + 50), vectors[start : start + 50])
        index.remove(np.array([start + 1]))
    stop.set()
    thread.join()
    assert not errors


def test_broad_filter_with_k_above_allowed_count() -> None:
    index = DenseIndex(DIM)
    index.add(np.arange(10), unit_vectors(10))
    allow = np.zeros(10, dtype=bool)
    allow[[0, 2, 3, 5, 7, 9]] = True  # 60%: scored in place with the others masked out
    rowids, scores = index.search(unit_vectors(1, seed=1)[0], 50, allow=allow)
    assert sorted(rowids.tolist()) == [0, 2, 3, 5, 7, 9]
    assert np.isfinite(scores).all()


# -- background graph builds ------------------------------------------------------------


@pytest.fixture
def held_builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Graph builds wait for the returned event before they start."""
    release = threading.Event()
    build = DenseIndex._graph_for

    def held(self: DenseIndex, view: object) -> object:
        assert release.wait(60)
        return build(self, view)  # type: ignore[arg-type]

    monkeypatch.setattr(DenseIndex, "_graph_for", held)
    yield release
    release.set()


def test_crossing_the_threshold_does_not_wait_for_the_graph(
    held_builds: threading.Event,
) -> None:
    vectors = unit_vectors(1500, seed=3)
    index = DenseIndex(DIM, exact_threshold=1000)
    index.add(np.arange(1500), vectors)  # returns although the build cannot start yet
    assert not index.uses_graph
    query = unit_vectors(1, seed=4)[0]
    assert index.search(query, 10)[0].tolist() == brute_force(np.arange(1500), vectors, query, 10)
    held_builds.set()
    assert index.wait_for_graph(60) and index.uses_graph
    index.close()


def test_exact_results_do_not_change_when_a_build_finishes(held_builds: threading.Event) -> None:
    """§7.7.1: ``exact=True`` (seeded or pinned requests) ignores which graph is published."""
    vectors = unit_vectors(2000, seed=6)
    index = DenseIndex(DIM, exact_threshold=1000)
    index.add(np.arange(2000), vectors)
    queries = unit_vectors(10, seed=7)
    before = [index.search(q, 10, exact=True)[0].tolist() for q in queries]
    held_builds.set()
    assert index.wait_for_graph(60) and index.uses_graph
    after = [index.search(q, 10, exact=True)[0].tolist() for q in queries]
    assert after == before
    assert before == [brute_force(np.arange(2000), vectors, q, 10) for q in queries]
    index.close()


def test_rows_added_after_the_build_are_searched_in_the_tail(
    graph_index: tuple[DenseIndex, np.ndarray],
) -> None:
    index, _ = graph_index
    fresh = unit_vectors(50, seed=20)
    index.add(np.arange(5000, 5050), fresh)
    assert index.graph_tail == 50 and index.uses_graph
    for offset, vector in enumerate(fresh):
        rowids, scores = index.search(vector, 3)
        assert rowids[0] == 5000 + offset
        assert scores[0] == pytest.approx(1.0, abs=1e-5)


def test_graph_plus_long_tail_scores_like_exact_search(
        held_builds: threading.Event, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk load can outrun the background build, leaving most rows in the tail: the
    graph's candidates plus the tail (scored in place when contiguous, gathered when
    scattered by a filter) must rank as exact search does."""
    monkeypatch.setattr(dense, "SELECTIVE_ROWS", 100)  # let a 1-in-3 filter use the graph
    vectors = unit_vectors(4000, seed=31)
    index = DenseIndex(DIM, exact_threshold=500)
    index.add(np.arange(1000), vectors[:1000])
    held_builds.set()
    assert index.wait_for_graph(60) and index.uses_graph
    held_builds.clear()  # the next build waits: rows 1000..3999 stay in the tail
    index.add(np.arange(1000, 4000), vectors[1000:])
    assert index.uses_graph and index.graph_tail == 3000
    every_third = np.zeros(4000, dtype=bool)
    every_third[::3] = True
    for query in unit_vectors(20, seed=32):
        assert index.search(query, 10)[0].tolist() == \
            index.search(query, 10, exact=True)[0].tolist()
        assert index.search(query, 10, allow=every_third)[0].tolist() == \
            index.search(query, 10, allow=every_third, exact=True)[0].tolist()
    held_builds.set()
    index.close()


def test_a_long_tail_is_folded_into_the_graph(
    graph_index: tuple[DenseIndex, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    index, vectors = graph_index
    monkeypatch.setattr(dense, "TAIL_MIN_ROWS", 40)
    index.remove(np.arange(0, 20))
    fresh = unit_vectors(60, seed=21)
    index.add(np.arange(5000, 5060), fresh)
    assert index.wait_for_graph(60)
    assert index.graph_tail == 0 and index.uses_graph
    assert index.search(fresh[7], 1)[0].tolist() == [5007]
    assert index.search(vectors[3], 5)[0].tolist()[0] != 3  # removed rows stay gone


def test_graph_with_many_removed_rows_is_rebuilt(
    graph_index: tuple[DenseIndex, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    index, vectors = graph_index
    monkeypatch.setattr(dense, "TAIL_MIN_ROWS", 100)
    index.remove(np.arange(0, 1500))
    assert index.wait_for_graph(60)
    query = unit_vectors(1, seed=22)[0]
    survivors = np.arange(1500, 3000)
    truth = brute_force(survivors, vectors[survivors], query, 10)
    assert recall(index.search(query, 10)[0].tolist(), truth) >= 0.9


def test_save_keeps_the_tail_and_load_catches_up_in_the_background(
    tmp_path: Path, graph_index: tuple[DenseIndex, np.ndarray]
) -> None:
    index, _ = graph_index
    fresh = unit_vectors(30, seed=23)
    index.add(np.arange(4000, 4030), fresh)
    index.save(tmp_path)
    loaded = DenseIndex.load(tmp_path)
    assert loaded.wait_for_graph(60)
    assert loaded.uses_graph and loaded.graph_tail == 30
    assert loaded.search(fresh[4], 1)[0].tolist() == [4004]
    loaded.close()


def test_close_stops_a_running_build(held_builds: threading.Event) -> None:
    index = DenseIndex(DIM, exact_threshold=100)
    index.add(np.arange(500), unit_vectors(500, seed=24))
    closer = threading.Thread(target=index.close)
    closer.start()  # close() waits for the builder, which is held until released
    held_builds.set()
    closer.join(60)
    assert not closer.is_alive() and index.wait_for_graph(60)
    assert not index.uses_graph
    index.add(np.arange(500, 600), unit_vectors(100, seed=25))
    assert index.wait_for_graph(60) and not index.uses_graph  # closed: no new builds


def test_usearch_is_imported_only_through_the_guarded_loader() -> None:
    """Importing usearch before onnxruntime crashes the process; only usearch_format.py may
    import it."""
    source_root = Path(dense.__file__).parents[3]
    importers = []
    for path in source_root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] == "usearch" for name in names):
                importers.append(path.relative_to(source_root).as_posix())
    assert sorted(set(importers)) == ["engine/indexes/dense/usearch_format.py"]


def clustered_vectors(n: int, seed: int, dim: int = 64) -> np.ndarray:
    """Tight clusters: many close pairs, the case parallel HNSW insertion gets wrong."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n // 100, dim)).astype(np.float32)
    vectors = centres[rng.integers(0, len(centres), n)]
    vectors += 0.3 * rng.standard_normal(vectors.shape).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def lost_rows(index: DenseIndex, vectors: np.ndarray) -> list[int]:
    found = index.search_batch(vectors, 1)
    return [row for row, (rowids, _) in enumerate(found) if rowids[0] != row]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_parallel_graph_build_reaches_every_row(seed: int) -> None:
    vectors = clustered_vectors(4000, seed)
    index = DenseIndex(64, exact_threshold=100, build_threads=2)
    index.add(np.arange(len(vectors)), vectors)
    assert index.wait_for_graph(120)
    assert index.uses_graph and index.graph_tail == 0
    assert lost_rows(index, vectors) == []
    index.close()


def test_the_self_check_reports_only_nodes_a_wide_search_cannot_find() -> None:
    """Reachable nodes that a narrow search misses (many, on hard data) must not be taken for
    lost: re-inserting them one at a time would cost more than the build."""
    vectors = unit_vectors(4000, seed=3, dim=32)
    keys = np.arange(len(vectors))
    index = DenseIndex(32, connectivity=6, expansion_add=32)
    graph = index._new_graph()
    graph.add(keys, vectors, threads=1)  # sequential: every node is linked
    graph.expansion_search = 32
    found = np.asarray(graph.search(vectors, hnsw.CHECK_K, threads=1).keys)
    assert (~(found == keys[:, None]).any(axis=1)).sum() > 0  # ef 32 misses some of them
    assert not hnsw.unreachable(graph, keys, vectors, 1).any()


def unknown_layout(serialised: np.ndarray) -> usearch_format.Layout:
    """What :func:`usearch_format.parse` does with the layout of another usearch."""
    raise usearch_format.FormatError("a layout this reader does not know")


def serialised_graph(index: DenseIndex, vectors: np.ndarray, threads: int
                     ) -> tuple[np.ndarray, usearch_format.Layout]:
    """A usearch graph of ``vectors`` inserted with ``threads`` and no repair, serialised."""
    graph = index._new_graph()
    graph.add(np.arange(len(vectors)), vectors, threads=threads)
    saved = np.frombuffer(graph.save(), dtype=np.uint8)
    layout = usearch_format.parse(saved)
    assert layout is not None
    return saved, layout


def test_the_links_read_are_those_usearch_counts_on_every_level() -> None:
    index = DenseIndex(16, connectivity=4, expansion_add=16)  # small M: several levels
    saved, layout = serialised_graph(index, unit_vectors(3000, seed=4), 1)
    graph = index._new_graph()
    graph.load(saved.tobytes())
    links = usearch_format.links(saved, layout)
    assert len(links) == len(graph.levels_stats) > 2
    for level, (read, stats) in enumerate(zip(links, graph.levels_stats, strict=True)):
        assert len(read.nodes) == stats.nodes and len(read.neighbours) == stats.edges
        assert (layout.levels[read.neighbours] >= level).all()  # links stay on their level
        assert (read.neighbours != np.repeat(read.nodes, np.diff(read.offsets))).all()
    # a node no link leads to is one no search finds, however wide
    unlinked = np.flatnonzero(usearch_format.unlinked(saved, layout))
    not_found = hnsw.unreachable(graph, np.arange(3000), unit_vectors(3000, seed=4), 1)
    assert not_found[layout.keys[unlinked].astype(np.int64)].all()


def sparse_graph() -> tuple[DenseIndex, exact.Snapshot, object]:
    """3000 random rows in a graph of connectivity 4, inserted on one thread (the same graph
    every time): pruning that small leaves some nodes with no incoming link."""
    index = DenseIndex(16, connectivity=4, expansion_add=16)
    index.add(np.arange(3000), unit_vectors(3000, seed=4))
    snapshot = index._view.snapshot
    graph = index._new_graph()
    graph.add(snapshot.rowids, snapshot.vectors, threads=1)
    return index, snapshot, graph


def walked(graph: object) -> tuple[np.ndarray, usearch_format.Layout, np.ndarray]:
    saved = np.frombuffer(graph.save(), dtype=np.uint8)  # type: ignore[attr-defined]
    layout = usearch_format.parse(saved)
    assert layout is not None
    return saved, layout, usearch_format.unlinked(saved, layout)


def test_the_walk_finds_the_nodes_nothing_links_to() -> None:
    """Nodes with no incoming link are found, and so is a node cut off by hand: every list
    that holds it is shortened past it in the serialised graph."""
    _, _, graph = sparse_graph()
    saved, layout, unlinked = walked(graph)
    links = usearch_format.links(saved, layout)
    linked_to = np.zeros(len(layout.keys), dtype=bool)
    for level in links:
        linked_to[level.neighbours] = True
    linked_to[layout.entry] = True
    assert (~linked_to).sum() > 0
    assert set(np.flatnonzero(~linked_to)) <= set(np.flatnonzero(unlinked))
    victim = int(np.flatnonzero(linked_to & ~unlinked)[1])
    edited = saved.copy()
    for level, read in enumerate(links):
        count_at = usearch_format.count_at(layout, level)
        for row, node in enumerate(read.nodes):
            listed = read.neighbours[read.offsets[row]:read.offsets[row + 1]]
            if victim in listed:
                kept = listed[listed != victim].astype("<u4")
                at = int(layout.starts[node]) + count_at
                edited[at:at + 4] = np.array([len(kept)], "<u4").view(np.uint8)
                edited[at + 4:at + 4 + 4 * len(kept)] = kept.view(np.uint8)
    assert not unlinked[victim] and usearch_format.unlinked(edited, layout)[victim]


def test_the_repair_links_nodes_the_walk_finds() -> None:
    index, snapshot, graph = sparse_graph()
    before = int(walked(graph)[2].sum())
    hnsw.repair(graph, snapshot, np.arange(3000), index.build_threads)  # type: ignore[arg-type]
    after = walked(graph)[2]
    assert before > 0 and after.sum() < before / 2
    assert graph.size == 3000  # type: ignore[attr-defined]


def test_rows_the_repair_cannot_link_are_searched_exactly_beside_the_graph(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes the check still reports unlinked after the repair (here three, reported every
    time, with no repair round) leave the graph for the tail: each still finds itself, the
    build settles (no endless rebuild for them, after a reopen too), and nothing counts as
    pending."""
    monkeypatch.setattr(hnsw, "REPAIR_ROUNDS", 0)
    unlinked = np.array([5, 77, 1234])
    monkeypatch.setattr(hnsw, "lost", lambda graph, snapshot, inserted, threads: unlinked)
    vectors = unit_vectors(3000, seed=4)
    index = DenseIndex(DIM, exact_threshold=100, build_threads=2)
    index.add(np.arange(3000), vectors)
    assert index.wait_for_graph(60)
    graph = index._view.graph
    assert graph is not None and graph.orphans == 3
    assert np.setdiff1d(np.arange(3000), graph.rowids).tolist() == unlinked.tolist()
    assert not any(graph.index.contains(unlinked))  # type: ignore[attr-defined]
    assert index.graph_tail == 3 and index.graph_pending == 0
    found = [rowids[0] for rowids, _ in index.search_batch(vectors[unlinked], 1)]
    assert found == unlinked.tolist()
    index.remove(unlinked[:1])  # an orphan removed leaves a shorter tail, nothing pending
    assert index.graph_tail == 2 and index.graph_pending == 0
    index.save(tmp_path)
    index.close()
    loaded = DenseIndex.load(tmp_path, build_threads=2)
    assert loaded.wait_for_graph(60)
    reloaded = loaded._view.graph
    assert reloaded is not None and reloaded.orphans == 3
    assert loaded.graph_pending == 0 and loaded.graph_tail == 2
    loaded.close()


def test_a_layout_this_code_cannot_read_falls_back_to_the_search_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(usearch_format, "parse", unknown_layout)
    vectors = clustered_vectors(4000, 1)
    index = DenseIndex(64, exact_threshold=100, build_threads=2)
    index.add(np.arange(len(vectors)), vectors)
    assert index.wait_for_graph(120)
    assert lost_rows(index, vectors) == []
    index.close()


def test_a_loaded_index_maps_its_vectors_and_never_writes_the_saved_file(
    tmp_path: Path, small_index: tuple[DenseIndex, np.ndarray]
) -> None:
    index, _ = small_index
    index.save(tmp_path)
    saved = next(tmp_path.glob("vectors.*.npy"))
    before = saved.read_bytes()
    loaded = DenseIndex.load(tmp_path)
    # Opening reads no vector: they are mapped from the saved file, read-only.
    mapped = loaded._view.snapshot.vectors
    assert isinstance(mapped, np.memmap) and not mapped.flags.writeable
    query = unit_vectors(1, seed=5)[0]
    assert loaded.search(query, 10)[0].tolist() == index.search(query, 10)[0].tolist()
    loaded.add(np.array([7000, 7001]), unit_vectors(2, seed=77))
    loaded.remove(np.array([10, 11]))
    assert loaded.search(unit_vectors(2, seed=77)[1], 1)[0].tolist() == [7001]
    assert loaded.count == index.count
    assert saved.read_bytes() == before


def test_graph_pending_counts_down_during_a_first_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before its first graph is published every row is pending; the count then falls batch
    by batch as the builder inserts (a long bulk build shows progress), and ends at 0."""
    monkeypatch.setattr(hnsw, "BUILD_BATCH", 500)
    seen: list[int] = []
    new_graph = DenseIndex._new_graph

    def recording(self: DenseIndex) -> object:
        graph = new_graph(self)
        add = graph.add

        def counted_add(*args: object, **kwargs: object) -> object:
            seen.append(self.graph_pending)
            return add(*args, **kwargs)  # type: ignore[arg-type]

        graph.add = counted_add  # type: ignore[method-assign]
        return graph

    monkeypatch.setattr(DenseIndex, "_new_graph", recording)
    index = DenseIndex(DIM, exact_threshold=1000)
    index.add(np.arange(900), unit_vectors(900, seed=41))
    assert index.graph_pending == 0  # under the exact threshold no graph is wanted
    index.add(np.arange(900, 3000), unit_vectors(2100, seed=42))
    assert index.wait_for_graph(60) and index.uses_graph
    assert seen == [3000, 2500, 2000, 1500, 1000, 500]
    assert index.graph_pending == 0
    index.close()


def test_a_save_without_vectors_loads_them_from_the_record(
    tmp_path: Path, small_index: tuple[DenseIndex, np.ndarray]
) -> None:
    index, vectors = small_index
    index.save(tmp_path, vectors=False)
    assert not list(tmp_path.glob("vectors.*.npy"))
    record = dict(zip(range(10, 510), vectors, strict=True))
    del record[11]  # collected since the save

    def stored(rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        kept = np.array([r for r in rowids.tolist() if r in record], dtype=np.int64)
        return kept, np.stack([record[r] for r in kept.tolist()])

    loaded = DenseIndex.load(tmp_path, vectors=stored)
    assert loaded.count == index.count - 1
    index.remove(np.array([11]))
    for query in unit_vectors(5, seed=21):
        expected, scores = index.search(query, 10)
        found, loaded_scores = loaded.search(query, 10)
        assert found.tolist() == expected.tolist()
        np.testing.assert_array_equal(loaded_scores, scores)
    with pytest.raises(IndexUnavailable, match="saved without vectors"):
        DenseIndex.load(tmp_path)


def test_an_int8_graph_finds_the_exact_top_10_after_rescoring(tmp_path: Path) -> None:
    vectors = unit_vectors(3000, seed=1)
    index = DenseIndex(DIM, exact_threshold=1000, graph_dtype="i8")
    index.add(np.arange(3000), vectors)
    assert index.wait_for_graph(60) and index.uses_graph
    queries = unit_vectors(20, seed=9)
    for query in queries:
        rowids, scores = index.search(query, 10)
        assert rowids.tolist() == brute_force(np.arange(3000), vectors, query, 10)
        np.testing.assert_allclose(scores, vectors[rowids] @ query, rtol=1e-5)
    index.save(tmp_path)
    as_f16 = DenseIndex.load(tmp_path)  # the i8 graph is left unread, an f16 one built
    assert as_f16.saved_graph_unused and as_f16.wait_for_graph(60) and as_f16.uses_graph
    assert as_f16._view.graph is not None and as_f16._view.graph.index.dtype.name == "F16"
    as_f16.close()
    loaded = DenseIndex.load(tmp_path, graph_dtype="i8")
    assert not loaded.saved_graph_unused
    assert loaded.wait_for_graph(60)
    assert loaded.uses_graph and loaded.graph_tail == 0
    assert loaded.search(queries[0], 10)[0].tolist() == index.search(queries[0], 10)[0].tolist()
    index.close()
    loaded.close()


def saved_bytes(index: DenseIndex) -> bytes | None:
    """The published graph as usearch serialises it."""
    graph = index._view.graph
    assert graph is not None
    return graph.index.save()


def saved_graph(directory: Path) -> tuple[dict[str, object], int]:
    """The saved manifest and the size of its graph file."""
    meta = json.loads((directory / "dense.json").read_text())
    return meta, (directory / meta["files"]["graph"]).stat().st_size


def record_of(rowids: np.ndarray, vectors: np.ndarray) -> dict[int, np.ndarray]:
    """A record holding the vectors the index was given."""
    return dict(zip(rowids.tolist(), vectors, strict=True))


def reader(record: dict[int, np.ndarray]) -> dense.StoredVectors:
    def stored(rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        kept = np.array([r for r in rowids.tolist() if r in record], dtype=np.int64)
        return kept, np.stack([record[r] for r in kept.tolist()])
    return stored


@pytest.fixture(params=["f16", "bf16", "i8"])
def wide_graph(request: pytest.FixtureRequest) -> Iterator[tuple[DenseIndex, np.ndarray]]:
    """1500 rows of 64 dimensions past a 500-row threshold, two of them removed since the
    graph was built (the graph still holds them)."""
    vectors = clustered_vectors(1500, seed=7)
    index = DenseIndex(64, exact_threshold=500, graph_dtype=request.param)
    index.add(np.arange(1500), vectors)
    assert index.wait_for_graph(60) and index.uses_graph
    index.remove(np.array([3, 4]))
    yield index, vectors
    index.close()


@pytest.mark.parametrize("save_vectors", [False, True])
def test_a_saved_graph_leaves_out_the_vectors_the_index_holds(
    tmp_path: Path, wide_graph: tuple[DenseIndex, np.ndarray], save_vectors: bool
) -> None:
    """Only the removed rows' codes are kept: every other slot's bytes are rebuilt from the
    index's own vectors (usearch's f16, bf16 and i8 conversions reproduced exactly), and the graph
    loaded back is the one saved, byte for byte."""
    index, vectors = wide_graph
    graph = index._view.graph
    assert graph is not None
    bytes_per_vector = 64 if index.graph_dtype == "i8" else 128
    index.save(tmp_path, vectors=save_vectors)
    meta, size = saved_graph(tmp_path)
    lean = meta["graph_vectors"]
    assert isinstance(lean, dict)
    assert lean["rows"] == 1500 and lean["kept"] == 2
    assert lean["bytes_per_vector"] == bytes_per_vector
    assert size <= graph.index.serialized_length - 1498 * bytes_per_vector + 2 * 4
    record = record_of(np.arange(1500), vectors)
    loaded = DenseIndex.load(tmp_path, vectors=None if save_vectors else reader(record),
                             graph_dtype=index.graph_dtype)
    assert loaded.wait_for_graph(60)
    assert loaded.uses_graph and loaded.graph_tail == 0
    assert saved_bytes(loaded) == graph.index.save()
    for query in unit_vectors(10, seed=31, dim=64):
        found, scores = loaded.search(query, 10)
        expected, expected_scores = index.search(query, 10)
        assert found.tolist() == expected.tolist()
        np.testing.assert_array_equal(scores, expected_scores)
    loaded.close()


def test_codes_that_do_not_match_are_kept_verbatim(
    tmp_path: Path, wide_graph: tuple[DenseIndex, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot whose rebuilt codes differ from usearch's (here: every tenth row's, forced) is
    kept in the file as usearch wrote it, so the loaded graph is still the saved one."""
    index, vectors = wide_graph
    graph = index._view.graph
    assert graph is not None
    codes = usearch_format.vector_codes

    def tenth_row_differs(rows: np.ndarray, dtype: str) -> np.ndarray:
        changed = codes(rows, dtype).copy()
        changed[::10, 0] ^= 1
        return changed

    monkeypatch.setattr(usearch_format, "vector_codes", tenth_row_differs)
    index.save(tmp_path, vectors=False)
    monkeypatch.setattr(usearch_format, "vector_codes", codes)
    lean = saved_graph(tmp_path)[0]["graph_vectors"]
    assert isinstance(lean, dict) and 150 <= lean["kept"] <= 155
    loaded = DenseIndex.load(tmp_path, vectors=reader(record_of(np.arange(1500), vectors)),
                             graph_dtype=index.graph_dtype)
    assert loaded.wait_for_graph(60) and saved_bytes(loaded) == graph.index.save()
    loaded.close()


@pytest.mark.parametrize("unrecognised", ["codes", "layout"])
def test_a_graph_this_code_cannot_rebuild_is_saved_whole(
    tmp_path: Path, wide_graph: tuple[DenseIndex, np.ndarray], monkeypatch: pytest.MonkeyPatch,
    unrecognised: str,
) -> None:
    """Another conversion or file layout (a future usearch) costs disk, never answers: the
    graph file is written exactly as usearch saves it, and loads as before."""
    index, vectors = wide_graph
    graph = index._view.graph
    assert graph is not None
    if unrecognised == "codes":
        monkeypatch.setattr(usearch_format, "vector_codes",
                            lambda rows, dtype: np.zeros((len(rows), 1), dtype=np.uint8))
    else:
        monkeypatch.setattr(usearch_format, "parse", unknown_layout)
    index.save(tmp_path, vectors=False)
    meta, size = saved_graph(tmp_path)
    assert meta["format"] == 2 and "graph_vectors" not in meta
    assert size == graph.index.serialized_length
    loaded = DenseIndex.load(tmp_path, vectors=reader(record_of(np.arange(1500), vectors)),
                             graph_dtype=index.graph_dtype)
    assert loaded.uses_graph and loaded.graph_tail == 0  # a whole file is loaded at once
    for query in unit_vectors(5, seed=32, dim=64):
        assert loaded.search(query, 10)[0].tolist() == index.search(query, 10)[0].tolist()
    loaded.close()


@pytest.mark.parametrize("damage", ["missing", "changed"])
def test_a_graph_whose_rows_the_record_cannot_give_back_is_rebuilt(
    tmp_path: Path, wide_graph: tuple[DenseIndex, np.ndarray], held_builds: threading.Event,
    caplog: pytest.LogCaptureFixture, damage: str,
) -> None:
    """A row collected since the save, or one the record returns with other values, leaves
    the graph's vectors unrebuildable: the graph is dropped and built again in the
    background, exact search answering meanwhile, never a wrong graph."""
    index, vectors = wide_graph
    index.save(tmp_path, vectors=False)
    record = record_of(np.arange(1500), vectors)
    if damage == "missing":
        del record[11]
        index.remove(np.array([11]))
    else:
        record[11] = record[12]
    loaded = DenseIndex.load(tmp_path, vectors=reader(record), graph_dtype=index.graph_dtype)
    assert loaded._restored.wait(60) and "it is rebuilt" in caplog.text
    assert not loaded.uses_graph
    rowids = np.array(sorted(record))
    matrix = np.stack([record[r] for r in rowids.tolist()])
    queries = matrix[100:1500:140]
    for query in queries:
        assert loaded.search(query, 10)[0].tolist() == brute_force(rowids, matrix, query, 10)
    held_builds.set()
    assert loaded.wait_for_graph(60) and loaded.uses_graph and loaded.graph_tail == 0
    recalls = [recall(loaded.search(query, 10)[0].tolist(),
                      brute_force(rowids, matrix, query, 10)) for query in queries]
    assert np.mean(recalls) >= 0.95
    loaded.close()


def test_a_load_serves_exact_search_while_the_graph_is_restored(
    tmp_path: Path, wide_graph: tuple[DenseIndex, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rebuilding the left-out vectors does not hold up the open: exact search answers until
    the saved graph is published; a save waits for it (it would otherwise drop the graph)
    and so does a close, so that the save at close keeps it."""
    index, vectors = wide_graph
    index.save(tmp_path, vectors=False)
    release = threading.Event()
    restored = hnsw.restored_graph

    def held(*args: object) -> object:
        assert release.wait(60)
        return restored(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(hnsw, "restored_graph", held)
    record = record_of(np.arange(1500), vectors)
    loaded = DenseIndex.load(tmp_path, vectors=reader(record), graph_dtype=index.graph_dtype)
    assert not loaded.uses_graph
    rowids = np.array([r for r in range(1500) if r not in (3, 4)])
    query = vectors[700]
    assert loaded.search(query, 10)[0].tolist() == brute_force(rowids, vectors[rowids], query,
                                                                10)
    again = tmp_path / "again"
    saver = threading.Thread(target=loaded.save, args=(again,), kwargs={"vectors": False})
    saver.start()
    saver.join(0.2)
    assert saver.is_alive()  # waiting for the restore
    closer = threading.Thread(target=loaded.close)
    closer.start()
    release.set()
    saver.join(60)
    closer.join(60)
    assert not saver.is_alive() and not closer.is_alive()
    assert loaded.uses_graph and saved_bytes(loaded) == saved_bytes(index)
    meta, _ = saved_graph(again)
    assert meta["format"] == 3 and "graph" in meta["files"]  # type: ignore[operator]


EXIT_DURING_A_BUILD = """
import time
import numpy as np
from rcpkit.engine.indexes.dense import DenseIndex
vectors = np.random.default_rng(0).standard_normal((60_000, 64)).astype(np.float32)
index = DenseIndex(64, exact_threshold=1000)
index.add(np.arange(len(vectors)), vectors)
time.sleep(0.5)
assert index.graph_pending > 0, "the build finished before the exit"
"""


@pytest.mark.wire
def test_a_program_may_exit_during_a_graph_build_without_closing(tmp_path: Path) -> None:
    """The builder stops at exit (its next batch): the interpreter's teardown no longer
    finds it inside usearch's native insertion, which aborted the process (status 134)."""
    script = tmp_path / "exit_during_build.py"
    script.write_text(EXIT_DURING_A_BUILD)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "terminate called" not in done.stderr
