"""The content-hash-keyed embedding cache: served vectors equal the model's, misses only once."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rcpkit.engine.models.embedcache import CachedEmbedder
from rcpkit.engine.models.embedding import HashingEmbedder


class CountingEmbedder(HashingEmbedder):
    """Counts the texts it is asked to embed."""

    def __init__(self, identity: str = "counting@1") -> None:
        super().__init__(dimension=16)
        self.calls: list[list[str]] = []
        self.identity = identity

    def embed(self, texts, kind="document"):  # type: ignore[no-untyped-def]
        self.calls.append(list(texts))
        return super().embed(texts, kind)


def test_vectors_equal_the_model_and_repeats_are_not_embedded(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, tmp_path / "cache.sqlite3")
    texts = ["bees make honey", "ants farm aphids", "bees make honey"]
    first = cached.embed(texts)
    np.testing.assert_array_equal(first, HashingEmbedder(dimension=16).embed(texts))
    assert inner.calls == [["bees make honey", "ants farm aphids"]]
    second = cached.embed(["ants farm aphids", "wasps sting"])
    np.testing.assert_array_equal(second[0], first[1])
    assert inner.calls[-1] == ["wasps sting"]
    assert (cached.hits, cached.misses) == (1, 3)  # hits: found stored; misses: texts embedded


def test_cache_survives_reopening_and_keys_on_kind_and_identity(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    CachedEmbedder(CountingEmbedder(), path).embed(["bees"], "document")
    again = CountingEmbedder()
    cached = CachedEmbedder(again, path)
    cached.embed(["bees"], "document")
    assert again.calls == []
    cached.embed(["bees"], "query")
    assert again.calls == [["bees"]]
    other_model = CountingEmbedder("another-model@1")
    CachedEmbedder(other_model, path).embed(["bees"], "document")
    assert other_model.calls == [["bees"]]


def test_an_unwritable_cache_still_embeds(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, tmp_path / "cache.sqlite3")
    cached._connection.execute("PRAGMA query_only = ON")
    vectors = cached.embed(["bees"])
    np.testing.assert_array_equal(vectors, HashingEmbedder(dimension=16).embed(["bees"]))
    assert cached.embed(["bees"]).shape == (1, 16) and len(inner.calls) == 2
