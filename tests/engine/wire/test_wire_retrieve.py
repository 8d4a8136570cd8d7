"""``retrieve`` and the adjacent methods as served: fusion math (§16.3), Unicode, ``embed``
encodings (§7.3.1), ``rerank`` (§7.6), pagination (§10), pinned ``indexVersion`` and
determinism (§7.7.1) in memory (the engine and its binding, every frame encoded and
schema-checked); streaming (§9), log opt-in (§17.1) and cancel (§7.14) over real stdio and
SSE."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from engine_wire import Engine, HttpEngine, MemoryEngine, make_data_dir
from typer.testing import CliRunner

from rcpkit.cli import app

CORPUS = [
    ("bees", "Honey bees dance to tell their sisters where the flowers are."),
    ("hive", "A hive of bees keeps its honey in wax comb through the winter."),
    ("bread", "Sourdough bread rises slowly because wild yeast is patient."),
    ("rain", "A rain gauge measures how much water falls in a day."),
    ("stars", "Sailors found north by the stars long before compasses."),
    ("compost", "Compost heaps turn kitchen scraps into dark, crumbly soil."),
    ("sv", "Räksmörgås med ägg på Österlen är en svensk klassiker."),
    ("fr", "La crème brûlée se mange froide, avec une croûte caramélisée."),
    ("ja", "東京の天気は晴れです。"),
    ("zh", "北京烤鸭很好吃。"),
    ("emoji", "🐝 bees make 🍯 honey in summer ☀️"),
    ("mixed", "Bees, bread and rain: a garden diary of honey, flour and water."),
]
DOCUMENTS = [{"id": doc_id, "text": text, "meta": {"title": doc_id.title()}}
             for doc_id, text in CORPUS]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryEngine]:
    data = make_data_dir(tmp_path_factory.mktemp("retrieve") / "data")
    served = MemoryEngine(data)
    served.add(DOCUMENTS)
    yield served
    served.close()


def _ranks(hits: list[dict[str, Any]], stage: str) -> dict[str, int]:
    scored = sorted((h for h in hits if stage in h["scores"]), key=lambda h: -h["scores"][stage])
    return {hit["id"]: rank for rank, hit in enumerate(scored, 1)}


@pytest.mark.parametrize("fusion", [
    {"method": "rrf"}, {"method": "rrf", "rrfK": 10, "weights": {"dense": 2.0, "sparse": 1.0}},
    {"method": "weighted", "weights": {"dense": 0.3, "sparse": 0.7}},
    {"method": "convex", "alpha": 0.8},
])
def test_hybrid_fusion_math(engine: MemoryEngine, fusion: dict[str, Any]) -> None:
    """With every candidate returned, each fused score is recomputed from the per-stage
    scores on the hits themselves (§16.3)."""
    hits = engine.retrieve("bees honey flowers", len(CORPUS), candidateK=50,
                           fusion=fusion)["hits"]
    assert len(hits) == len(CORPUS)
    dense = {h["id"]: h["scores"]["dense"] for h in hits if "dense" in h["scores"]}
    sparse = {h["id"]: h["scores"]["sparse"] for h in hits if "sparse" in h["scores"]}
    assert dense and sparse
    weights = fusion.get("weights", {"dense": 1.0, "sparse": 1.0})
    for hit in hits:
        if fusion["method"] == "rrf":
            k = fusion.get("rrfK", 60)
            expected = sum(weights[stage] / (k + ranks[hit["id"]]) for stage, ranks in
                           (("dense", _ranks(hits, "dense")), ("sparse", _ranks(hits, "sparse")))
                           if hit["id"] in ranks)
        elif fusion["method"] == "weighted":
            expected = sum(weights[stage] * (scores[hit["id"]] - min(scores.values()))
                           / (max(scores.values()) - min(scores.values()))
                           for stage, scores in (("dense", dense), ("sparse", sparse))
                           if hit["id"] in scores)
        else:
            alpha, expected = fusion["alpha"], 0.0
            if hit["id"] in dense:
                expected += alpha * (dense[hit["id"]] + 1.0) / (max(dense.values()) + 1.0)
            if hit["id"] in sparse:
                expected += (1 - alpha) * sparse[hit["id"]] / max(sparse.values())
        assert hit["score"] == pytest.approx(expected, rel=1e-5, abs=1e-9)
        assert hit["scores"]["fused"] == pytest.approx(hit["score"])
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


@pytest.mark.parametrize(("query", "expected"), [
    ("räksmörgås Österlen", "sv#0"), ("RÄKSMÖRGÅS", "sv#0"), ("crème brûlée", "fr#0"),
    ("東京の天気", "ja#0"), ("北京烤鸭", "zh#0"), ("🍯 bees honey summer", "emoji#0"),
])
def test_unicode_queries_find_unicode_documents(engine: MemoryEngine, query: str,
                                                expected: str) -> None:
    hits = engine.retrieve(query, 3, mode="sparse")["hits"]
    assert hits[0]["id"] == expected
    assert hits[0]["text"] == dict(CORPUS)[expected.removesuffix("#0")]


def test_hits_carry_citations_trust_and_confidence(engine: MemoryEngine) -> None:
    hit = engine.retrieve("sourdough bread yeast", 1)["hits"][0]
    assert hit["id"] == "bread#0"
    text = dict(CORPUS)["bread"]
    assert hit["citation"] == {"source": "bread", "title": "Bread", "start": 0,
                               "end": len(text)}
    assert hit["trust"] == {"level": "untrusted"}
    assert 0.0 <= hit["confidence"] <= 1.0
    assert hit["chunk"] == {"docId": "bread", "index": 0}


def _f32(blob: str) -> list[float]:
    return np.frombuffer(base64.b64decode(blob), dtype="<f4").tolist()


def test_embed_encodings_agree(engine: MemoryEngine) -> None:
    as_json = engine.ok("embed", {"inputs": ["bees", "Räksmörgås 🐝"], "kind": "query"})
    as_f32 = engine.ok("embed", {"texts": ["bees", "Räksmörgås 🐝"], "kind": "query",
                                 "encoding": "f32-base64"})
    assert as_f32["encoding"] == "f32-base64" and as_f32["dimension"] == 64
    for plain, blob in zip(as_json["vectors"], as_f32["vectors"], strict=True):
        assert len(plain) == 64
        assert _f32(blob) == pytest.approx(plain, abs=1e-6)
        assert np.linalg.norm(plain) == pytest.approx(1.0, abs=1e-5)
    hit = engine.retrieve("bees", 1, includeVectors=True, encoding="f32-base64")["hits"][0]
    plain_hit = engine.retrieve("bees", 1, includeVectors=True)["hits"][0]
    assert _f32(hit["vector"]) == pytest.approx(plain_hit["vector"], abs=1e-6)


def test_embed_refusals(engine: MemoryEngine) -> None:
    error = engine.error("embed", {"inputs": ["x"], "encoding": "f16-base64"})
    assert (error["code"], error["data"]["option"]) == (-32005, "f16-base64")
    limit = engine.info["capabilities"]["embed"]["batchLimit"]
    assert engine.error("embed", {"inputs": ["x"] * (limit + 1)})["code"] == -32602


def test_embed_multi_and_sparse(engine: MemoryEngine) -> None:
    multi = engine.ok("embed/multi", {"texts": ["honey bees dance"], "encoding": "f32-base64"})
    assert len(multi["matrices"][0]) == 3
    assert all(len(base64.b64decode(row)) == 64 * 4 for row in multi["matrices"][0])
    sparse = engine.ok("embed/sparse", {"inputs": ["bees bees honey", "the"]})["sparse"]
    assert len(sparse[0]["indices"]) == 2 and sparse[1] == {"indices": [], "values": []}


def test_rerank_scores_order_and_results(engine: MemoryEngine) -> None:
    passages = ["Sourdough bread.", "Honey bees dance.", "Rain gauges.", "Bees and honey."]
    result = engine.ok("rerank", {"query": "honey bees", "documents": passages, "topN": 2})
    scores = result["scores"]
    assert len(scores) == len(passages)
    best = sorted(range(len(passages)), key=lambda i: -scores[i])[:2]
    assert result["order"] == best and set(best) == {1, 3}
    assert result["results"] == [{"index": i, "score": scores[i]} for i in best]
    error = engine.error("rerank", {"query": "q", "passages": ["p"], "method": "cross-encoder"})
    assert (error["code"], error["data"]["option"]) == (-32005, "cross-encoder")


def test_builtin_rerank_and_mmr_in_retrieve(engine: MemoryEngine) -> None:
    result = engine.retrieve("honey bees", 3, rerank={"method": "colbert", "topN": 6},
                             mmr={"lambda": 0.5})
    assert result["usage"]["reranked"] == 6
    assert all("rerank" in hit["scores"] for hit in result["hits"])
    scores = [hit["score"] for hit in result["hits"]]
    assert scores == sorted(scores, reverse=True)


def test_session_dedups_hits_and_feedback_is_accepted(engine: MemoryEngine) -> None:
    first = engine.ids("bees honey", 3, sessionId="trajectory-1")
    second = engine.ids("bees honey", 3, sessionId="trajectory-1")
    assert len(first) == len(second) == 3 and not set(first) & set(second)
    assert engine.ids("bees honey", 3, sessionId="trajectory-2") == first
    signals = [{"hitId": first[0], "helpful": True, "cited": True},
               {"hitId": first[1], "poisonSuspected": True}]
    assert engine.ok("feedback", {"signals": signals, "sessionId": "trajectory-1"}) == {
        "accepted": 2}


def test_streaming_progress_with_partial_hits_over_stdio(serve: Any) -> None:
    engine = serve()
    engine.add(DOCUMENTS)
    peer = engine.peer
    before = len(peer.notifications)
    result = engine.retrieve("bees honey", 3, _meta={"progressToken": "p-1"})
    frames = [n["params"] for n in peer.notifications[before:]
              if n["method"] == "notifications/progress"]
    assert [f["stage"] for f in frames] == ["recall", "fuse", "rerank", "diversify", "pack"]
    assert all(f["progressToken"] == "p-1" for f in frames)
    progress = [f["progress"] for f in frames]
    assert progress == sorted(progress) and progress[-1] == 1.0
    partial = frames[0]["partial"]["hits"]
    assert partial and {h["id"] for h in partial} <= {h["id"] for h in
                                                      engine.retrieve("bees honey", 50)["hits"]}
    assert result["hits"]
    engine.retrieve("bees honey", 3)
    assert not [n for n in peer.notifications[before + len(frames):]
                if n["method"] == "notifications/progress"]


def test_streaming_progress_over_sse(tmp_path: Any) -> None:
    http = HttpEngine(make_data_dir(tmp_path / "data"))
    try:
        http.ok("index/add", {"documents": [{"id": i, "text": t} for i, t in CORPUS]})
        response = http.post("retrieve", {"query": "bees", "k": 2,
                                          "_meta": {"progressToken": 7}},
                             accept="text/event-stream")
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = [json.loads(line[5:]) for line in response.text.splitlines()
                  if line.startswith("data:")]
        progress = [f["params"] for f in frames if f.get("method") == "notifications/progress"]
        assert progress and progress[0]["stage"] == "recall" and progress[0]["partial"]["hits"]
        assert frames[-1]["id"] == 1 and frames[-1]["result"]["hits"][0]["id"] == "bees#0"
    finally:
        http.close()


def test_log_notifications_only_when_opted_in(data_dir: Any, serve: Any) -> None:
    silent = serve()
    silent.add([{"id": "x", "text": "bees"}])
    silent.retrieve("bees", 1)
    silent.retrieve("bees", 1, _meta={"logLevel": "info"})  # debug-level line: below info
    assert not [n for n in silent.peer.notifications if n["method"] == "notifications/log"]
    silent.retrieve("bees", 1, _meta={"logLevel": "debug"})
    assert [n["params"]["level"] for n in silent.peer.notifications
            if n["method"] == "notifications/log"] == ["debug"]
    silent.close()
    chatty = serve(capabilities={"log": {}}, _meta={"logLevel": "info"})
    chatty.add([{"id": "y", "text": "honey"}])
    chatty.retrieve("honey", 1)
    logs = [n["params"] for n in chatty.peer.notifications if n["method"] == "notifications/log"]
    assert [(log["level"], log["logger"]) for log in logs] == [("info", "rcpkit.engine")]


def test_pagination_visits_each_hit_once_while_writes_happen(serve_in_memory: Any) -> None:
    engine = serve_in_memory()
    engine.add([{"id": f"n{i:02d}", "text": f"garden note {i} about soil and seeds"}
                for i in range(30)])
    first = engine.retrieve("garden soil seeds", 4)
    everything = engine.ids("garden soil seeds", 30, indexVersion=first["indexVersion"])
    seen = [hit["id"] for hit in first["hits"]]
    cursor = first.get("nextCursor")
    pages = 1
    while cursor:
        engine.add([{"id": f"late{pages}", "text": "garden soil seeds garden soil seeds"}])
        page = engine.retrieve("garden soil seeds", 4, cursor=cursor)
        assert page["indexVersion"] == first["indexVersion"]
        seen += [hit["id"] for hit in page["hits"]]
        cursor = page.get("nextCursor")
        pages += 1
    assert len(seen) == len(set(seen)) == 30
    assert seen == everything
    error = engine.error("retrieve", {"query": "garden soil seeds", "k": 4, "cursor": "bogus"})
    assert error["code"] == -32015
    other = engine.error("retrieve", {"query": "another query", "k": 4,
                                      "cursor": first["nextCursor"]})
    assert other["code"] == -32015


def test_pinned_index_version_is_served_exactly(serve_in_memory: Any) -> None:
    engine = serve_in_memory()
    engine.add([{"id": "old", "text": "lighthouse keepers"}])
    pinned = engine.retrieve("lighthouse keepers", 5)["indexVersion"]
    engine.add([{"id": "new", "text": "lighthouse keepers lighthouse"}])
    engine.ok("index/delete", {"ids": ["old"]})
    assert engine.ids("lighthouse keepers", indexVersion=pinned) == ["old#0"]
    latest = engine.retrieve("lighthouse keepers", 5)
    assert [h["id"] for h in latest["hits"]] == ["new#0"] and latest["indexVersion"] != pinned
    error = engine.error("retrieve", {"query": "x", "k": 1, "indexVersion": "elsewhere.3"})
    assert error["code"] == -32010


def test_identical_requests_give_identical_results(engine: MemoryEngine) -> None:
    params: dict[str, Any] = {"seed": 7, "mmr": {"lambda": 0.3}, "rerank": {"method": "colbert"}}
    first = engine.retrieve("bees bread rain", 5, **params)
    second = engine.retrieve("bees bread rain", 5, indexVersion=first["indexVersion"], **params)
    assert first["hits"] == second["hits"]


_QUEUED = {"jsonrpc": "2.0", "id": "queued", "method": "index/add",
           "params": {"documents": [{"id": "q", "text": "waits for the write lock"}]}}
_CANCEL = {"jsonrpc": "2.0", "method": "notifications/cancel",
           "params": {"id": "queued", "reason": "test"}}


def _start_slow_write(engine: MemoryEngine) -> None:
    """A large ``index/add``: a later write waits for the write lock behind it."""
    big = [{"id": f"big{i}", "text": "long slow text about many things. " * 200}
           for i in range(120)]
    engine.peer.send({"jsonrpc": "2.0", "id": "slow", "method": "index/add",
                      "params": {"documents": big, "chunk": True}})


def _expect_cancelled(engine: MemoryEngine, wait: float = 15.0) -> None:
    assert engine.peer.reply("queued", timeout=wait)["error"]["code"] == -32006
    assert "result" in engine.peer.reply("slow", timeout=90)
    assert engine.ok("ping", {"nonce": "alive"}) == {"nonce": "alive"}


def test_cancel_answers_minus_32006_and_the_server_carries_on(serve: Any) -> None:
    engine = serve()
    _start_slow_write(engine)
    engine.peer.send(_QUEUED)
    assert engine.ok("ping", {}) == {}  # both requests have been read and started
    engine.peer.send(_CANCEL)
    _expect_cancelled(engine)


def test_cancel_in_the_same_write_as_the_request_still_gets_one_response(serve: Any) -> None:
    """Cancelled before its task ever ran: still exactly one response (§7.14)."""
    engine = serve()
    _start_slow_write(engine)
    engine.peer.send_raw(json.dumps(_QUEUED).encode() + b"\n" + json.dumps(_CANCEL).encode()
                         + b"\n")
    _expect_cancelled(engine)


@pytest.mark.slow
def test_demo_then_serve_with_the_real_minilm(tmp_path: Any) -> None:
    """The README's first command, then the same (real MiniLM) index served over stdio."""
    data = tmp_path / "demo"
    demo = CliRunner().invoke(app, ["demo", "--data", str(data)], env={"COLUMNS": "200"})
    assert demo.exit_code == 0, demo.output
    assert "waggle-dance#0" in demo.stdout and f"serve --stdio --data {data}" in demo.stdout
    engine = Engine(data)
    try:
        caps = engine.info["capabilities"]
        assert caps["embed"]["dimension"] == 384 and "MiniLM" in caps["embed"]["identity"]
        assert engine.info["_meta"]["conformance"] == "L2"
        hits = engine.ids("how do honeybees tell each other where flowers are", 3, mode="dense")
        assert "waggle-dance#0" in hits
    finally:
        engine.close()
