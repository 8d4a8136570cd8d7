"""Rank fusion (§16.3) against hand-computed examples, including every tie-break level."""

from __future__ import annotations

import math

import pytest

from rcpkit.fusion import Fused, convex, rrf, weighted, zscore


def keys(fused: list[Fused]) -> list[str]:
    return [item.key for item in fused]


def test_rrf_hand_computed() -> None:
    lexical = [("a", 10.0), ("b", 9.0), ("c", 8.0)]
    dense = [("b", 0.9), ("d", 0.8), ("a", 0.7)]
    fused = rrf([lexical, dense])
    # b = 1/61 + 1/62, a = 1/61 + 1/63, d = 1/62, c = 1/63
    assert keys(fused) == ["b", "a", "d", "c"]
    assert [item.score for item in fused] == pytest.approx(
        [1 / 61 + 1 / 62, 1 / 61 + 1 / 63, 1 / 62, 1 / 63]
    )
    b = fused[0]
    assert (b.weight, b.ranks, b.scores) == (2.0, {0: 2, 1: 1}, {0: 9.0, 1: 0.9})
    assert fused[2].ranks == {1: 2} and fused[2].weight == 1.0


def test_rrf_weights_and_constant() -> None:
    fused = rrf([[("a", 1.0), ("b", 0.5)], [("b", 1.0)]], weights=[3.0, 1.0], k=0)
    # a = 3/1 = 3, b = 3/2 + 1/1 = 2.5
    assert [(item.key, item.score, item.weight) for item in fused] == [
        ("a", 3.0, 3.0),
        ("b", 2.5, 4.0),
    ]


def test_rrf_ties_break_on_summed_weight_then_key() -> None:
    # k=0: a = 1 (weight 1), c = 1 (weight 1), b = 1/2 + 1/2 = 1 (weight 2)
    fused = rrf([[("a", 5.0), ("b", 4.0)], [("c", 5.0), ("b", 4.0)]], k=0)
    assert keys(fused) == ["b", "a", "c"]
    assert [item.score for item in fused] == [1.0, 1.0, 1.0]
    # Identical score and weight: the lexicographically smaller key wins, whatever the order.
    assert keys(rrf([[("y", 1.0), ("x", 0.5)], [("x", 1.0), ("y", 0.5)]])) == ["x", "y"]
    assert keys(rrf([[("x", 1.0), ("y", 0.5)], [("y", 1.0), ("x", 0.5)]])) == ["x", "y"]


def test_weighted_hand_computed_with_tie() -> None:
    lexical = [("a", 10.0), ("b", 6.0), ("c", 2.0)]  # normalised a=1, b=0.5, c=0
    dense = [("c", 9.0), ("a", 5.0), ("d", 1.0)]  # normalised c=1, a=0.5, d=0
    fused = weighted([lexical, dense], weights=[2.0, 1.0])
    # a = 2·1 + 0.5 = 2.5; c = 2·0 + 1 = 1.0 (weight 3); b = 2·0.5 = 1.0 (weight 2); d = 0
    assert [(item.key, item.score, item.weight) for item in fused] == [
        ("a", 2.5, 3.0),
        ("c", 1.0, 3.0),
        ("b", 1.0, 2.0),
        ("d", 0.0, 1.0),
    ]
    assert fused[1].scores == {0: 2.0, 1: 9.0} and fused[1].ranks == {0: 3, 1: 1}


def test_weighted_flat_list_maps_to_one() -> None:
    fused = weighted([[("x", 3.0), ("y", 3.0)], [("y", 7.0), ("z", 1.0)]])
    # x = 1; y = 1 + 1 = 2; z = 0
    assert [(item.key, item.score) for item in fused] == [("y", 2.0), ("x", 1.0), ("z", 0.0)]


def test_convex_hand_computed() -> None:
    lexical = [("a", 8.0), ("b", 4.0)]  # floor 0: a = 1, b = 0.5
    dense = [("b", 0.5), ("c", 0.0)]  # floor -1, max 0.5: b = 1, c = 1/1.5
    alpha = 0.25
    fused = convex([dense, lexical], floors=[-1.0, 0.0], weights=[alpha, 1 - alpha])
    # b = 0.25·1 + 0.75·0.5 = 0.625; a = 0.75·1 = 0.75; c = 0.25·(2/3)
    assert keys(fused) == ["a", "b", "c"]
    assert [item.score for item in fused] == pytest.approx([0.75, 0.625, 0.25 * 2 / 3])


def test_convex_max_at_floor_maps_to_zero_and_ties() -> None:
    fused = convex([[("z", 0.0)], [("q", 2.0), ("p", 1.0)]], floors=[0.0, 1.0])
    # z: max 0 <= floor 0 -> 0; q = (2-1)/(2-1) = 1; p = 0 -> tie with z broken by key
    assert [(item.key, item.score) for item in fused] == [("q", 1.0), ("p", 0.0), ("z", 0.0)]


def test_duplicates_inside_a_list_keep_the_first_entry() -> None:
    fused = rrf([[("a", 3.0), ("b", 2.0), ("a", 1.0)]], k=0)
    assert [(item.key, item.score, item.ranks, item.scores) for item in fused] == [
        ("a", 1.0, {0: 1}, {0: 3.0}),
        ("b", 0.5, {0: 2}, {0: 2.0}),
    ]


def test_empty_inputs_and_validation() -> None:
    assert rrf([]) == []
    assert weighted([[], [("a", 1.0)]]) == [Fused("a", 1.0, 1.0, {1: 1}, {1: 1.0})]
    with pytest.raises(ValueError):
        rrf([[("a", 1.0)]], weights=[1.0, 2.0])
    with pytest.raises(ValueError):
        rrf([[("a", 1.0)]], k=-1)
    with pytest.raises(ValueError):
        convex([[("a", 1.0)]], floors=[])


def test_zscore_hand_computed() -> None:
    # list 0: mean 2, std sqrt(2/3); list 1: mean 0.5, std 0.5
    fused = zscore([[("a", 3.0), ("b", 2.0), ("c", 1.0)], [("c", 1.0), ("b", 0.0)]],
                   weights=[0.5, 0.5])

    def phi(z: float) -> float:
        return 0.5 * (1 + math.erf(z / math.sqrt(2)))

    spread = math.sqrt(2 / 3)
    expected = {"a": 0.5 * phi(1 / spread), "b": 0.5 * phi(0.0) + 0.5 * phi(-1.0),
                "c": 0.5 * phi(-1 / spread) + 0.5 * phi(1.0)}
    assert {item.key: item.score for item in fused} == pytest.approx(expected)
    assert keys(fused) == sorted(expected, key=lambda key: -expected[key])
    assert all(0.0 <= item.score <= 1.0 for item in fused)


def test_zscore_flat_list_maps_to_half() -> None:
    assert [item.score for item in zscore([[("a", 2.0), ("b", 2.0)]])] == [0.5, 0.5]
