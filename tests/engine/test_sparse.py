"""embed/sparse (§7.4): log-tf WordPiece weights over the MiniLM vocabulary."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rcpkit.engine.errors import InvalidInput, Unavailable
from rcpkit.engine.models.embedding import minilm_files
from rcpkit.engine.models.sparse import SparseEncoder


@pytest.fixture(scope="module")
def encoder() -> SparseEncoder:
    return SparseEncoder()


def token_ids(encoder: SparseEncoder, *tokens: str) -> list[int]:
    tokenizer = encoder._load()[0]
    ids = [tokenizer.token_to_id(token) for token in tokens]
    assert all(isinstance(token_id, int) for token_id in ids)
    return sorted(int(token_id or 0) for token_id in ids)


def test_log_tf_weights_without_stopwords_or_punctuation(encoder: SparseEncoder) -> None:
    [(indices, values)] = encoder.encode(["The cat sat on the mat, the CAT!!"])
    assert indices.dtype == np.int64 and values.dtype == np.float32
    assert indices.tolist() == token_ids(encoder, "cat", "sat", "mat")
    weights = dict(zip(indices.tolist(), values.tolist(), strict=True))
    assert weights[token_ids(encoder, "cat")[0]] == pytest.approx(math.log(3))
    assert weights[token_ids(encoder, "mat")[0]] == pytest.approx(math.log(2))


def test_indices_sorted_positive_and_inside_vocabulary(encoder: SparseEncoder) -> None:
    texts = ["Tokenization of unbelievably long words", "", "!!! ...", "naïve café déjà vu"]
    vectors = encoder.encode(texts, kind="query")
    assert len(vectors) == 4
    for indices, values in vectors:
        assert np.all(np.diff(indices) > 0)
        assert np.all(values > 0)
        assert np.all(indices < encoder.vocabulary)
    assert len(vectors[1][0]) == 0 and len(vectors[2][0]) == 0
    assert encoder.vocabulary == 30522


def test_ids_are_stable_and_kind_independent(encoder: SparseEncoder) -> None:
    text = ["retrieval augmented generation"]
    fresh = SparseEncoder(minilm_files()[1])
    first, second = encoder.encode(text)[0], fresh.encode(text, kind="query")[0]
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])
    assert first[0].tolist() == token_ids(encoder, "retrieval", "augmented", "generation")


def test_no_truncation_for_long_texts(encoder: SparseEncoder) -> None:
    text = "filler " * 600 + "zeppelin"
    indices, _ = encoder.encode([text])[0]
    assert token_ids(encoder, "zeppelin")[0] in indices.tolist()


def test_errors(tmp_path: Path, encoder: SparseEncoder) -> None:
    with pytest.raises(InvalidInput):
        encoder.encode(["x"], kind="passage")
    with pytest.raises(Unavailable):
        SparseEncoder(tmp_path / "missing.json").encode(["x"])
