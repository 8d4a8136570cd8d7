"""The runner against an in-process target: indexing rule, §7.7.1 pins, errors, chunk hits."""

from __future__ import annotations

from typing import Any

import pytest
from eval_bm25 import TinyBm25

from rcpkit.eval.datasets import CorpusDocument, Dataset
from rcpkit.eval.runner import EvalConfig, corpus_is_loaded, open_target, run_eval
from rcpkit.protocol.errors import (
    BackendUnavailable,
    OptionUnsupported,
    PayloadTooLarge,
    UsageError,
)

TOPICS = ["apples", "bridges", "comets", "dragons", "engines", "forests", "glaciers", "harbors"]


def make_dataset() -> Dataset:
    corpus = [CorpusDocument(id=f"d{i}", title=topic.title(),
                             text=f"All about {topic}. More words on {topic}.",
                             metadata={"n": i}) for i, topic in enumerate(TOPICS)]
    queries = {f"q{i}": f"tell me about {topic}" for i, topic in enumerate(TOPICS)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(len(TOPICS))}
    qrels["q-unjudged"] = {"d0": 0}
    queries["q-unjudged"] = "nothing relevant"
    return Dataset(name="topics", corpus=corpus, queries=queries, qrels=qrels)


class FakeTarget:
    """A RetrievalTarget over TinyBm25 that records every call.

    ``chunked`` stores each document as two chunks ``<id>#0``/``<id>#1`` (one per
    sentence) and answers with chunk hits; ``max_batch`` answers -32013 above it.
    """

    def __init__(self, capabilities: dict[str, Any], *, chunked: bool = False,
                 max_batch: int = 1000) -> None:
        self.capabilities = capabilities
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.index = TinyBm25()
        self.chunked = chunked
        self.max_batch = max_batch

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((method, params))
        if method == "index/add":
            documents = params["documents"]
            if len(documents) > self.max_batch:
                raise PayloadTooLarge()
            for document in documents:
                parts = document["text"].split(".") if self.chunked else [document["text"]]
                for n, part in enumerate(parts):
                    chunk_id = f"{document['id']}#{n}" if self.chunked else document["id"]
                    self.index.upsert(chunk_id, part, document.get("meta"))
            return {"ids": [document["id"] for document in documents]}
        if params.get("mode", "sparse") != "sparse":
            raise OptionUnsupported(option="mode")
        hits = [{"id": doc_id, "score": score}
                for doc_id, score in self.index.search(params["query"], params["k"])]
        return {"hits": hits, "indexVersion": "v1"}

    def params_of(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == method]


WRITABLE = {"retrieve": {"maxK": 50, "deterministic": True, "snapshots": True},
            "index": {"writable": True}}


async def test_indexes_once_then_probe_skips() -> None:
    target, dataset = FakeTarget(WRITABLE), make_dataset()
    first = await run_eval(target, dataset, [EvalConfig("bm25", {})], engine="fake",
                           batch_size=3)
    assert first.indexing == "added 8 documents"
    adds = target.params_of("index/add")
    assert [len(p["documents"]) for p in adds] == [3, 3, 2]
    assert adds[0]["documents"][0] == {"id": "d0", "text": "Apples\n\nAll about apples. "
                                       "More words on apples.", "meta": {"n": 0}}
    second = await run_eval(target, dataset, [EvalConfig("bm25", {})], engine="fake")
    assert second.indexing == "skipped (probe found the corpus already loaded)"
    assert len(target.params_of("index/add")) == 3
    result = second.results[0]
    assert (result.evaluated, result.excluded) == (8, 1)
    assert result.metrics["MRR@10"] == pytest.approx(1.0)
    assert result.metrics["nDCG@10"] == pytest.approx(1.0)
    assert set(result.latency_ms) == {"p50", "p95", "p99", "mean"}


async def test_seed_and_pinned_index_version_are_sent_and_recorded() -> None:
    target = FakeTarget(WRITABLE)
    report = await run_eval(target, make_dataset(),
                            [EvalConfig("a", {}), EvalConfig("b", {"k": 5})], engine="fake",
                            seed=7)
    retrieves = [p for p in target.params_of("retrieve") if p.get("includeText") is False
                 and "seed" in p]
    assert len(retrieves) == 20  # per configuration: one untimed warm-up, then 9 timed
    assert all(p["seed"] == 7 for p in retrieves)
    unpinned = [i for i, p in enumerate(retrieves) if "indexVersion" not in p]
    assert unpinned == [0]  # the first warm-up: the version it was served pins the rest
    assert all(p["indexVersion"] == "v1" for i, p in enumerate(retrieves) if i not in unpinned)
    assert retrieves[0]["k"] == 50  # DEFAULT_K clamped to retrieve.maxK
    assert retrieves[-1]["k"] == 5
    assert (report.seed, report.index_version, report.notes) == (7, "v1", [])
    assert report.to_json()["configs"][1]["params"] == {"k": 5}


async def test_without_determinism_capabilities_nothing_is_pinned() -> None:
    target = FakeTarget({"retrieve": {}, "index": {"writable": False}})
    report = await run_eval(target, make_dataset(), [EvalConfig("a", {})], engine="fake")
    assert report.indexing.startswith("skipped (engine not writable")
    assert not target.params_of("index/add")
    assert all("seed" not in p and "indexVersion" not in p for p in target.params_of("retrieve"))
    assert (report.seed, report.index_version) == (None, None)
    assert len(report.notes) == 2


async def test_no_index_flag_skips_everything() -> None:
    target = FakeTarget(WRITABLE)
    report = await run_eval(target, make_dataset(), [EvalConfig("a", {})], engine="fake",
                            index=False)
    assert report.indexing == "skipped (--no-index)"
    assert not target.params_of("index/add")
    assert report.results[0].metrics["Recall@100"] == 0.0


async def test_oversized_batches_are_split() -> None:
    target = FakeTarget(WRITABLE, max_batch=2)
    await run_eval(target, make_dataset(), [], engine="fake", batch_size=8)
    accepted = [len(p["documents"]) for p in target.params_of("index/add")
                if len(p["documents"]) <= 2]
    assert sum(accepted) == 8
    assert len(target.index.documents) == 8


async def test_rejected_config_is_reported_and_others_still_run() -> None:
    target = FakeTarget(WRITABLE)
    report = await run_eval(target, make_dataset(),
                            [EvalConfig("dense", {"mode": "dense"}), EvalConfig("bm25", {})],
                            engine="fake")
    dense, bm25 = report.results
    assert dense.error is not None and "-32005" in dense.error
    assert dense.metrics == {}
    assert bm25.error is None and bm25.metrics["MRR@10"] == pytest.approx(1.0)


async def test_chunk_hits_are_scored_per_document() -> None:
    target = FakeTarget(WRITABLE, chunked=True)
    report = await run_eval(target, make_dataset(), [EvalConfig("chunks", {})], engine="fake")
    assert report.indexing == "added 8 documents"
    ranking = report.results[0].run["q3"]
    assert ranking[0][0] == "d3"
    assert len({doc for doc, _ in ranking}) == len(ranking)  # "d3#0", "d3#1" → one "d3"
    assert report.results[0].metrics["MAP"] == pytest.approx(1.0)


async def test_probe_on_empty_corpus_and_missing_document() -> None:
    target = FakeTarget(WRITABLE)
    assert await corpus_is_loaded(target, [])
    assert not await corpus_is_loaded(target, make_dataset().corpus)


async def test_engine_without_retrieve_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="retrieve"):
        await run_eval(FakeTarget({}), make_dataset(), [], engine="fake")


def test_config_parsing() -> None:
    assert EvalConfig.parse('hy={"mode": "hybrid"}') == EvalConfig("hy", {"mode": "hybrid"})
    assert EvalConfig.parse("plain=") == EvalConfig("plain", {})
    for bad in ("nameonly", "=x", "a={", "a=[1]", 'a={"query": "x"}'):
        with pytest.raises(UsageError):
            EvalConfig.parse(bad)


@pytest.mark.wire
async def test_open_target_arguments() -> None:
    with pytest.raises(UsageError):
        async with open_target(None, None):
            pass
    with pytest.raises(BackendUnavailable):
        async with open_target("/nonexistent/engine --flag", None):
            pass
