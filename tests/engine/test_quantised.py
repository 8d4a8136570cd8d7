"""The int8 first pass of exact dense search (``engine/indexes/dense/quantised.py``): the rows it
keeps always hold the exact top k and every row tied with its last (§16.3), it keeps few of
them, and DenseIndex answers with it exactly as a scan of every row would (§7.7)."""

from __future__ import annotations

import numpy as np
import pytest

from rcpkit.engine.indexes.dense import DenseIndex, exact, quantised

DIM = 64


def clustered(n: int, seed: int, *, spread: float = 0.3, dim: int = DIM) -> np.ndarray:
    """Unit vectors around 20 centres: close neighbours, as text embeddings have."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, dim))
    matrix = centres[rng.integers(0, 20, n)] + spread * rng.standard_normal((n, dim))
    matrix = matrix.astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def exact_top(vectors: np.ndarray, query: np.ndarray, keep: int,
              allowed: np.ndarray | None = None) -> tuple[list[int], float]:
    """Positions of the exact top ``keep`` (score, then position) and the score at the cut."""
    scores = np.vecdot(vectors, query)
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    order = np.lexsort((np.arange(len(scores)), -scores))[:keep]
    return order.tolist(), float(scores[order[-1]])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("keep", [1, 10, 50])
def test_the_candidates_hold_the_exact_top_k_and_its_ties(seed: int, keep: int) -> None:
    vectors = clustered(3000, seed)
    rng = np.random.default_rng(100 + seed)
    vectors[rng.integers(0, 3000, 40)] = vectors[7]  # duplicates: ties at any cut
    codes = quantised.encode(vectors)
    for query in (vectors[7], clustered(1, 1000 + seed)[0], vectors[rng.integers(0, 3000)]):
        kept = quantised.candidates(codes, query, keep)
        top, cut = exact_top(vectors, query, keep)
        assert set(top) <= set(kept.tolist())
        tied = np.flatnonzero(np.vecdot(vectors, query) == cut)
        assert set(tied.tolist()) <= set(kept.tolist())
        assert np.all(np.diff(kept) > 0)


@pytest.mark.parametrize("seed", range(4))
def test_a_mask_keeps_only_allowed_rows_and_their_top_k(seed: int) -> None:
    vectors = clustered(2000, seed)
    allowed = np.random.default_rng(seed).random(2000) < 0.5
    codes = quantised.encode(vectors)
    query = clustered(1, 50 + seed)[0]
    kept = quantised.candidates(codes, query, 10, allowed)
    assert allowed[kept].all()
    assert set(exact_top(vectors, query, 10, allowed)[0]) <= set(kept.tolist())
    few = np.zeros(2000, dtype=bool)
    few[[3, 99]] = True
    assert quantised.candidates(codes, query, 10, few).tolist() == [3, 99]
    assert len(quantised.candidates(codes, query, 10, np.zeros(2000, dtype=bool))) == 0


def test_unnormalised_vectors_and_queries_are_bounded_too() -> None:
    """The dot metric keeps magnitudes: the bound scales with the norms."""
    rng = np.random.default_rng(5)
    vectors = clustered(2000, 5) * rng.uniform(0.1, 40.0, (2000, 1)).astype(np.float32)
    codes = quantised.encode(vectors)
    for scale in (0.01, 1.0, 250.0):
        query = clustered(1, 9)[0] * np.float32(scale)
        assert set(exact_top(vectors, query, 10)[0]) <= set(
            quantised.candidates(codes, query, 10).tolist())


def adversarial(n: int, dim: int = DIM) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose int8 codes lose everything but one large component, and a query along what
    they lose: the first pass then misses by nearly the whole bound."""
    rng = np.random.default_rng(3)
    small = np.zeros((n, dim))
    small[:, 1:] = rng.uniform(0.5, 1.0, (n, dim - 1)) * 0.9 / 254  # just under half a step
    vectors = small.copy()
    vectors[:, 0] = 0.9
    query = np.zeros(dim)
    query[1:] = 1.0
    return vectors.astype(np.float32), (query / np.linalg.norm(query)).astype(np.float32)


def test_every_row_is_within_the_bound_which_is_nearly_reached() -> None:
    vectors, query = adversarial(500)
    first, bound = quantised.first_pass(quantised.encode(vectors), query)
    error = np.abs(np.vecdot(vectors, query).astype(np.float64) - first)
    assert error.max() <= bound
    assert error.max() > 0.5 * bound  # a bound half as large would be wrong here


def test_the_candidates_hold_the_top_k_where_the_first_pass_ranks_wrongly() -> None:
    """Decoys whose small components round up to a whole step score highest in the first
    pass; the rows that win exactly round theirs down to nothing and score 0 there."""
    vectors, query = adversarial(500)
    vectors[:250, 0] = 0.5
    vectors[:250, 1:] = 0.5 / 254 * 1.02  # just over half a step: coded as one step
    vectors[250:, 1:] = 0.9 / 254 * 0.99  # just under half a step: coded as zero
    codes = quantised.encode(vectors)
    first = quantised.first_pass(codes, query)[0]
    exact = np.vecdot(vectors, query)
    assert first[:250].min() > first[250:].max() and exact[250:].min() > exact[:250].max()
    kept = quantised.candidates(codes, query, 10)
    assert set(exact_top(vectors, query, 10)[0]) <= set(kept.tolist())


def test_the_first_pass_keeps_a_small_share_of_the_rows() -> None:
    """What makes it pay: on clustered vectors a query keeps far fewer rows than it scans."""
    vectors = clustered(20_000, 3, spread=0.6, dim=384)
    codes = quantised.encode(vectors)
    kept = [len(quantised.candidates(codes, clustered(1, 70 + i, dim=384)[0], 10))
            for i in range(20)]
    assert np.median(kept) < 0.05 * len(vectors)


def test_a_zero_query_ties_every_allowed_row() -> None:
    vectors = clustered(500, 2)
    codes = quantised.encode(vectors)
    assert len(quantised.candidates(codes, np.zeros(DIM, np.float32), 10)) == 500


def test_the_index_codes_its_rows_past_the_minimum_and_answers_exactly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exact, "CODE_MIN_ROWS", 1000)
    monkeypatch.setattr(exact, "CODE_TAIL_MIN", 300)
    vectors = clustered(3000, 11)
    index = DenseIndex(DIM)
    index.add(np.arange(900), vectors[:900])
    assert index._view.snapshot.codes is None
    index.add(np.arange(900, 2000), vectors[900:2000])
    codes = index._view.snapshot.codes
    assert codes is not None and codes.rows == 2000
    index.add(np.arange(2000, 2250), vectors[2000:2250])  # a tail within the allowance
    assert index._view.snapshot.codes is codes
    scored: list[int] = []
    scores_of = exact.scores

    def counting(matrix: np.ndarray, positions: np.ndarray | slice, query: np.ndarray
                 ) -> np.ndarray:
        scored.append(len(matrix) if isinstance(positions, slice) else len(positions))
        return scores_of(matrix, positions, query)

    monkeypatch.setattr(exact, "scores", counting)
    for probe in (7, 1500, 2100, 2249):  # coded rows and tail rows alike
        query = vectors[probe] + np.float32(0.01)
        rowids, scores = index.search(query, 10)
        top, _ = exact_top(vectors[:2250], query / np.linalg.norm(query), 10)
        assert rowids.tolist() == top
        unit = index._as_matrix(query)[0]
        np.testing.assert_array_equal(scores, np.vecdot(index.get(rowids), unit))
    assert max(scored) < 2250 // 2  # candidates plus the tail, not every row
    index.add(np.arange(2250, 3000), vectors[2250:])  # past the allowance: coded again
    assert index._view.snapshot.codes.rows == 3000
    index.remove(np.arange(0, 3000, 2))  # positions move: coded again
    remaining = index._view.snapshot
    assert remaining.codes is not None and remaining.codes.rows == 1500
    query = vectors[1001]
    assert index.search(query, 5)[0].tolist() == (
        np.arange(1, 3000, 2)[exact_top(vectors[1::2], query, 5)[0]].tolist())


def test_a_row_scores_the_same_whichever_rows_are_scored_with_it() -> None:
    """One kernel for every exact score: BLAS gemv moves the last bit of a row's score with
    the rows around it, so duplicates found by different paths could fail to tie."""
    vectors = clustered(1001, 4, dim=384)
    query = clustered(1, 8, dim=384)[0]
    whole = exact.scores(vectors, slice(None), query)
    for positions in (np.arange(0, 1001, 37), np.array([5, 3, 1000]), np.arange(990, 1001)):
        np.testing.assert_array_equal(exact.scores(vectors, positions, query),
                                      whole[positions])


def test_duplicates_tie_across_the_codes_and_the_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exact, "CODE_MIN_ROWS", 500)
    monkeypatch.setattr(exact, "CODE_TAIL_MIN", 100)
    vectors = clustered(700, 6)
    vectors[650] = vectors[650 - 600] = vectors[10]  # one coded twin, one in the tail
    index = DenseIndex(DIM)
    index.add(np.arange(600), vectors[:600])
    index.add(np.arange(600, 700), vectors[600:])
    assert index._view.snapshot.codes.rows == 600
    rowids, scores = index.search(vectors[10], 3)
    assert rowids.tolist() == [10, 50, 650] and scores[0] == scores[1] == scores[2]
