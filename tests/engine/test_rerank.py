"""Rerankers (§7.6): MaxSim late interaction (§7.5) with its passage cache and token window,
and the ONNX cross-encoder plumbing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from rcpkit.engine.errors import Unavailable
from rcpkit.engine.models.embedding import HashingEmbedder, minilm, minilm_files
from rcpkit.engine.models.rerank import (
    CrossEncoderReranker,
    LateInteractionReranker,
    Reranker,
    maxsim,
    maxsim_many,
)


def test_maxsim_sums_best_matches() -> None:
    query = np.array([[1.0, 0.0], [0.0, 1.0]])
    doc = np.array([[1.0, 0.0], [0.6, 0.8], [-1.0, 0.0]])
    assert maxsim(query, doc) == pytest.approx(1.0 + 0.8)
    assert maxsim(query, np.zeros((0, 2))) == 0.0
    assert maxsim(np.zeros((0, 2)), doc) == 0.0


def test_late_interaction_with_hashing_embedder() -> None:
    reranker: Reranker = LateInteractionReranker(HashingEmbedder(dimension=256))
    passages = ["bananas are yellow fruit", "green apples and red apples", "apples"]
    scores = reranker.score("green apples", passages)
    assert scores.dtype == np.float64 and scores.shape == (3,)
    assert scores[1] == pytest.approx(1.0)  # same tokens with the same left neighbours
    assert scores[1] > scores[2] > scores[0]
    assert reranker.method == "colbert"
    assert reranker.identity == "maxsim-mean:rcpkit/hashing-256@1"
    assert LateInteractionReranker(HashingEmbedder(dimension=256), passage_tokens=128).identity \
        == "maxsim-mean-128tok:rcpkit/hashing-256@1"
    assert reranker.score("anything", []).shape == (0,)


def test_sum_variant_scales_by_query_length() -> None:
    embedder = HashingEmbedder()
    mean = LateInteractionReranker(embedder).score("green apples", ["green apples"])
    total = LateInteractionReranker(embedder, normalise=False).score("green apples",
                                                                    ["green apples"])
    assert total[0] == pytest.approx(2 * mean[0])


def test_late_interaction_with_minilm_ranks_the_answer_first() -> None:
    reranker = LateInteractionReranker(minilm())
    passages = [
        "The stock market closed higher on Friday.",
        "Concrete reaches most of its strength after curing for 28 days.",
        "Penguins live in the southern hemisphere.",
    ]
    scores = reranker.score("how long does concrete take to cure?", passages)
    assert int(np.argmax(scores)) == 1
    assert np.all(scores <= 1.0 + 1e-6)


def tiny_cross_encoder(path: Path) -> None:
    """An ONNX graph scoring a pair by how many times token id ``cat`` appears (ReduceSum)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    tokenizer = minilm_files()[1]
    import tokenizers

    cat = tokenizers.Tokenizer.from_file(str(tokenizer)).token_to_id("cat")
    assert cat is not None
    graph = helper.make_graph(
        [
            helper.make_node("Equal", ["input_ids", "cat_id"], ["is_cat"]),
            helper.make_node("Cast", ["is_cat"], ["is_cat_f"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["token_type_ids"], ["segment_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["is_cat_f", "segment_f"], ["passage_cat"]),
            helper.make_node("ReduceSum", ["passage_cat", "axes"], ["logits"], keepdims=1),
        ],
        "tiny_cross_encoder",
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
            for name in ("input_ids", "attention_mask", "token_type_ids")
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])],
        [
            helper.make_tensor("cat_id", TensorProto.INT64, [], [cat]),
            helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_cross_encoder_scores_pairs_in_input_order(tmp_path: Path) -> None:
    model_path = tmp_path / "cross.onnx"
    tiny_cross_encoder(model_path)
    reranker = CrossEncoderReranker(model_path, minilm_files()[1], identity="tiny", batch_size=2)
    passages = ["a dog", "cat cat cat and a much longer passage than the others", "cat", "none"]
    scores = reranker.score("cat", passages)  # the query's own "cat" is segment 0: not counted
    assert scores.dtype == np.float64
    assert scores.tolist() == [0.0, 3.0, 1.0, 0.0]
    assert reranker.method == "cross-encoder" and reranker.identity == "tiny"
    assert reranker.score("cat", []).shape == (0,)


def test_cross_encoder_missing_files(tmp_path: Path) -> None:
    reranker = CrossEncoderReranker(tmp_path / "m.onnx", tmp_path / "t.json", identity="x")
    with pytest.raises(Unavailable):
        reranker.score("q", ["p"])


class CountingEmbedder(HashingEmbedder):
    """Records every text whose token vectors were computed."""

    def __init__(self) -> None:
        super().__init__(dimension=128)
        self.encoded: list[str] = []

    def token_embeddings(self, texts: Sequence[str], kind: str = "document") -> list[np.ndarray]:
        self.encoded.extend(texts)
        return super().token_embeddings(texts, kind)


def test_maxsim_many_matches_pairwise_maxsim_including_empty_passages() -> None:
    rng = np.random.default_rng(0)
    query = rng.standard_normal((5, 8)).astype(np.float32)
    passages = [rng.standard_normal((n, 8)).astype(np.float32) for n in (3, 0, 1, 7)]
    expected = [maxsim(query, passage) for passage in passages]
    np.testing.assert_allclose(maxsim_many(query, passages), expected, rtol=1e-5)
    assert maxsim_many(np.zeros((0, 8)), passages).tolist() == [0.0] * 4


def test_passage_and_query_token_matrices_are_cached() -> None:
    embedder = CountingEmbedder()
    reranker = LateInteractionReranker(embedder)
    passages = ["red apples", "green pears", "red apples", "blue plums"]
    first = reranker.score("red fruit", passages)
    assert sorted(embedder.encoded) == ["blue plums", "green pears", "red apples", "red fruit"]
    assert first[0] == first[2]
    embedder.encoded.clear()
    second = reranker.score("red fruit", ["green pears", "yellow figs", *passages])
    assert embedder.encoded == ["yellow figs"]  # query and known passages come from the cache
    np.testing.assert_array_equal(second[2:], first)


def test_passage_cache_is_bounded_by_bytes() -> None:
    embedder = CountingEmbedder()
    one_word = 128 * 4  # one token vector of float32
    reranker = LateInteractionReranker(embedder, cache_bytes=2 * one_word)
    reranker.score("q", ["alpha", "beta", "gamma"])  # only the last two fit
    embedder.encoded.clear()
    reranker.score("q", ["gamma", "beta", "alpha"])
    assert embedder.encoded == ["alpha"]
    uncached = LateInteractionReranker(embedder, cache_bytes=0)
    embedder.encoded.clear()
    uncached.score("q", ["alpha"])
    uncached.score("q", ["alpha"])
    assert embedder.encoded == ["q", "alpha", "alpha"]


def test_passages_are_cut_to_the_token_window() -> None:
    reranker = LateInteractionReranker(HashingEmbedder(), passage_tokens=2)
    scores = reranker.score("zebra stripes", ["green apples zebra stripes", "green apples"])
    assert scores[0] == pytest.approx(scores[1])
    with pytest.raises(ValueError):
        LateInteractionReranker(HashingEmbedder(), passage_tokens=0)


def test_minilm_token_window_equals_encoding_the_prefix() -> None:
    """An ONNX embedder runs passages with the window, so a long passage scores exactly as
    its first ``passage_tokens`` tokens would alone (same model input)."""
    reranker = LateInteractionReranker(minilm(), passage_tokens=8)
    prefix = "the cat sat on the mat and then"
    scores = reranker.score("where did the cat sit?", [prefix + " the dog ran far away", prefix])
    assert scores[0] == pytest.approx(scores[1], rel=1e-5)
