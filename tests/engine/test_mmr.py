"""MMR diversification (§7.7 diversify): selection order, λ extremes, ties, validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcpkit.engine.search.mmr import mmr

QUERY = np.array([1.0, 0.0, 0.0])
# 0 and 1 are near-duplicates; 2 is less relevant but points elsewhere; 3 is weakest.
CANDIDATES = np.array([
    [1.0, 0.10, 0.0],
    [1.0, 0.11, 0.0],
    [0.6, 0.0, 0.8],
    [0.2, 0.9, 0.0],
])
RELEVANCE = np.array([0.95, 0.94, 0.70, 0.20])


def test_lambda_one_is_relevance_order() -> None:
    assert mmr(QUERY, CANDIDATES, RELEVANCE, 4, 1.0).tolist() == [0, 1, 2, 3]


def test_diversity_skips_the_near_duplicate() -> None:
    assert mmr(QUERY, CANDIDATES, RELEVANCE, 2, 0.5).tolist() == [0, 2]


def test_lambda_zero_first_pick_is_lowest_index_then_most_novel() -> None:
    order = mmr(QUERY, CANDIDATES, RELEVANCE, 3, 0.0).tolist()
    assert order[0] == 0  # all values tie at 0 on the first step: lowest index
    assert order[1] == 3  # the candidate least similar to candidate 0


def test_ties_go_to_lower_index() -> None:
    vectors = np.eye(4)
    assert mmr(QUERY[:2], vectors, np.ones(4), 4, 0.7).tolist() == [0, 1, 2, 3]


def test_relevance_scale_does_not_matter() -> None:
    plain = mmr(QUERY, CANDIDATES, RELEVANCE, 4, 0.6)
    rescaled = mmr(QUERY, CANDIDATES, RELEVANCE * 40.0 - 7.0, 4, 0.6)
    assert plain.tolist() == rescaled.tolist()


def test_k_bounds_and_empty_input() -> None:
    assert mmr(QUERY, CANDIDATES, RELEVANCE, 10, 0.5).shape == (4,)
    assert mmr(QUERY, CANDIDATES, RELEVANCE, 0, 0.5).tolist() == []
    assert mmr(QUERY, np.zeros((0, 3)), np.zeros(0), 3, 0.5).tolist() == []


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        mmr(QUERY, CANDIDATES, RELEVANCE, 2, 1.5)
    with pytest.raises(ValueError):
        mmr(QUERY, CANDIDATES, RELEVANCE[:2], 2, 0.5)


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(1, 30),
    k=st.integers(1, 40),
    lam=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_selection_is_a_permutation_prefix(n: int, k: int, lam: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, 5))
    relevance = rng.random(n)
    order = mmr(vectors[0], vectors, relevance, k, lam)
    assert len(order) == min(n, k) and len(set(order.tolist())) == len(order)
    assert order[0] == int(np.argmax(relevance)) or lam < 1.0
    assert order.tolist() == mmr(vectors[0], vectors, relevance, k, lam).tolist()
