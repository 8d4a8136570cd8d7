"""Per-stage latency of ``retrieve`` (§3 pipeline) reaches the operator's metrics, labelled by
stage and never by what was asked (§15.6)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rcpkit.binding import bind
from rcpkit.engine.config import DenseConfig, EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.search.searcher import TIMED_STAGES
from rcpkit.engine.types import DocumentIn, SearchRequest
from rcpkit.server import Dispatcher
from rcpkit.transports.http.metrics import Metrics


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with Engine.open(EngineConfig(data_dir=tmp_path,
                                  embedder=EmbedderConfig(name="hashing"))) as opened:
        opened.add([DocumentIn(f"honey bees and quokkas {n}", id=f"d{n}") for n in range(30)])
        yield opened


def test_a_search_times_every_stage_in_pipeline_order(engine: Engine) -> None:
    result = engine.search(SearchRequest(query="quokkas", k=3))
    assert [name for name, _, _ in result.stage_seconds] == list(TIMED_STAGES)
    assert all(seconds >= 0 for _, _, seconds in result.stage_seconds)
    assert sum(seconds for _, _, seconds in result.stage_seconds) \
        <= result.usage.latency_ms / 1000
    # consecutive stages tile the search: each starts where the one before it ended
    for (_, started, seconds), (_, following, _) in zip(result.stage_seconds,
                                                       result.stage_seconds[1:], strict=False):
        assert following == pytest.approx(started + seconds, abs=1e-9)


def test_a_sparse_search_has_no_dense_recall_stage(engine: Engine) -> None:
    result = engine.search(SearchRequest(query="quokkas", k=3, mode="sparse"))
    assert [name for name, _, _ in result.stage_seconds] == [
        stage for stage in TIMED_STAGES if stage != "dense_recall"]


def test_an_add_times_its_write_stages(engine: Engine) -> None:
    result = engine.add([DocumentIn("wombats dig burrows", id="w")])
    assert [name for name, _, _ in result.stage_seconds] == [
        "queue", "prepare", "embed", "commit", "publish"]


async def test_retrieve_stage_timings_reach_the_metrics(engine: Engine) -> None:
    server = bind(engine)
    metrics = Metrics()
    metrics.watch("kb", server)
    metrics.watch("kb", server)  # watching twice must not count twice
    dispatcher = Dispatcher(server)
    for n, (method, params) in enumerate([
            ("initialize", {"protocolVersion": 1}),
            ("retrieve", {"query": "secret quokkas", "k": 2}),
            ("retrieve", {"query": "secret quokkas", "k": 2, "mode": "sparse"})]):
        reply = json.loads(await dispatcher.handle(json.dumps(
            {"jsonrpc": "2.0", "id": n, "method": method, "params": params}).encode()))
        assert "result" in reply
    text = metrics.exposition().decode()
    counts = {stage: float(value) for stage, value in re.findall(
        r'rcpkit_stage_seconds_count\{collection="kb",method="retrieve",stage="(\w+)"\} (\S+)',
        text)}
    assert counts == {stage: 1.0 if stage == "dense_recall" else 2.0 for stage in TIMED_STAGES}
    assert "secret" not in text and "quokka" not in text


def test_background_graph_build_progress_is_a_gauge(tmp_path: Path) -> None:
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                          dense=DenseConfig(exact_threshold=10))
    with Engine.open(config) as engine:
        server = bind(engine)
        engine.add([DocumentIn(f"note number {n} about bees", id=f"n{n}") for n in range(40)])
        pending = server.gauges()["dense_graph_pending"]
        assert 0 <= pending <= 40
        assert engine.wait_for_indexes(60)
        assert server.gauges()["dense_graph_pending"] == 0
        assert server.gauges()["index_build_running"] == 0
