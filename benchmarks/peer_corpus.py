"""The text corpus of bench_peers.py (not a benchmark): real chunks with MiniLM vectors, cached.

Chunks are windows of one to four consecutive sentences of the SciFact abstracts
(``../shared/data/scifact-train``, 5,183 abstracts, about 48k sentences), plus the English and
Swedish answers of the Zaragoza construction FAQ; queries are the SciFact claims and the FAQ
questions. The first ``size`` chunks of one fixed shuffle make a corpus of that size, so the
10k corpus is part of the 100k one.

Vectors come from the bundled all-MiniLM-L6-v2 and are computed once, then read from
``$TMPDIR/rcpkit-bench-cache/``. Sentences, FAQ answers and queries are embedded as they are;
a chunk of several sentences gets the normalised mean of its sentences' vectors. That is not
what MiniLM would give for the whole window (attention crosses sentences), but it keeps the
vectors real and clustered by topic while the model runs ~50k times instead of ~190k, which a
shared 2-core host cannot afford. Every engine gets exactly the same vectors.

    python benchmarks/peer_corpus.py          # compute (or check) the cache, print its size
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "scifact-train"
CACHE = Path(tempfile.gettempdir()) / "rcpkit-bench-cache"
MAX_WINDOW = 4
GROUPS = 100
"""Chunk ``i`` has ``group = i % GROUPS`` (``group == 0`` is a 1 % filter) and
``half = i % 2`` (``half == 1`` is a 50 % filter)."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")


@dataclass(frozen=True)
class PeerCorpus:
    """``texts[i]`` with unit vector ``vectors[i]``; queries likewise."""

    texts: list[str]
    vectors: np.ndarray
    queries: list[str]
    query_vectors: np.ndarray

    def metas(self) -> list[dict[str, int]]:
        return [{"group": i % GROUPS, "half": i % 2} for i in range(len(self.texts))]


def _sources() -> tuple[list[list[str]], list[str], list[str]]:
    """Sentences of each abstract, FAQ answers, queries (claims then FAQ questions)."""
    import zaragoza_construction_faq as faq

    abstracts = []
    with (DATA / "corpus.jsonl").open(encoding="utf-8") as stream:
        for line in stream:
            text = json.loads(line)["text"].strip()
            sentences = [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
            if sentences:
                abstracts.append(sentences)
    with (DATA / "queries.jsonl").open(encoding="utf-8") as stream:
        claims = [json.loads(line)["text"] for line in stream]
    answers, questions = [], []
    for language in ("en", "sv"):
        for item in faq.load(lang=language):
            answers.append(item["a"])
            if language == "en":
                questions.append(item["q"])
    return abstracts, answers, claims + questions


def _embed_cached(texts: list[str], kind: str, name: str) -> np.ndarray:
    """MiniLM vectors of ``texts``, from the cache when it matches them."""
    from rcpkit.engine.models.embedding import MINILM_IDENTITY, minilm

    digest = hashlib.sha256("\n".join([MINILM_IDENTITY, kind, *texts]).encode()).hexdigest()
    path = CACHE / f"peers-{name}-{digest[:16]}.npy"
    if path.is_file():
        return np.load(path, allow_pickle=False)
    CACHE.mkdir(parents=True, exist_ok=True)
    embedder = minilm()
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        if done % 2048 < embedder.model.batch_size or done == total:
            rate = done / (time.perf_counter() - started)
            print(f"… {name}: {done}/{total} embedded ({rate:.0f}/s)", file=sys.stderr,
                  flush=True)

    vectors = embedder.embed(texts, kind, progress=report).astype(np.float32)
    partial = path.with_suffix(".partial.npy")
    np.save(partial, vectors, allow_pickle=False)
    partial.replace(path)
    return vectors


def _windows(abstracts: list[list[str]]) -> list[tuple[int, int]]:
    """Every window of 1..MAX_WINDOW sentences as ``(first sentence, length)``, flat indices."""
    windows, base = [], 0
    for sentences in abstracts:
        for length in range(1, MAX_WINDOW + 1):
            windows.extend((base + start, length)
                           for start in range(len(sentences) - length + 1))
        base += len(sentences)
    return windows


def query_set() -> tuple[list[str], np.ndarray]:
    """The queries and their vectors alone (a child process measuring memory needs no more)."""
    _, _, queries = _sources()
    return queries, _embed_cached(queries, "query", "queries")


def load(size: int, seed: int = 19) -> PeerCorpus:
    """The first ``size`` chunks of the shuffled pool, with vectors and all queries."""
    abstracts, answers, queries = _sources()
    sentences = [s for abstract in abstracts for s in abstract]
    sentence_vectors = _embed_cached(sentences, "document", "sentences")
    answer_vectors = _embed_cached(answers, "document", "faq")
    query_vectors = _embed_cached(queries, "query", "queries")
    windows = _windows(abstracts)
    pool = len(answers) + len(windows)
    if size > pool:
        raise ValueError(f"the pool holds {pool} chunks, fewer than {size}")
    order = np.random.default_rng(seed).permutation(pool)[:size]
    texts: list[str] = []
    vectors = np.empty((size, sentence_vectors.shape[1]), dtype=np.float32)
    for row, item in enumerate(order.tolist()):
        if item < len(answers):
            texts.append(answers[item])
            vectors[row] = answer_vectors[item]
            continue
        first, length = windows[item - len(answers)]
        texts.append(" ".join(sentences[first:first + length]))
        vectors[row] = sentence_vectors[first:first + length].mean(axis=0)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return PeerCorpus(texts, vectors, queries, query_vectors)


if __name__ == "__main__":
    corpus = load(100_000)
    print(f"{len(corpus.texts)} chunks, {len(corpus.queries)} queries, cache in {CACHE}")
