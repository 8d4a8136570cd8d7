"""The binding's single engine-error → §12 mapping, and engine field names → wire paths."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rcpkit.binding import bind
from rcpkit.binding.errors import wire_error
from rcpkit.engine import errors
from rcpkit.engine.config import EmbedderConfig, EngineConfig, RequestsConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.types import DocumentIn
from rcpkit.server import Dispatcher


@pytest.mark.parametrize(("error", "code", "data"), [
    (errors.InvalidInput("bad", field="documents[3].meta.source"), -32602,
     {"field": "documents[3].meta.source"}),
    (errors.InvalidInput("bad", field="alpha"), -32602, {"field": "fusion.alpha"}),
    (errors.InvalidInput("bad", field="mmr_lambda"), -32602, {"field": "mmr.lambda"}),
    (errors.InvalidInput("bad", field="token_budget"), -32602, {"field": "tokenBudget"}),
    (errors.InvalidInput("bad", field="recency.half_life_days"), -32602,
     {"field": "recency.halfLifeDays"}),
    (errors.Unsupported("no", option="mode"), -32005, {"option": "mode"}),
    (errors.TooLarge("big"), -32013, None),
    (errors.UnknownCursor("gone"), -32015, None),
    (errors.SnapshotUnavailable("collected"), -32010, None),  # §7.7.1
    (errors.Unavailable("full", detail="disk full"), -32010, {"detail": "disk full"}),
    (errors.Cancelled("stop"), -32006, None),
    (errors.IndexUnavailable("no dense index saved"), -32603, None),  # ours, never -32015
])
def test_each_engine_error_has_its_section_12_error(error: errors.EngineError, code: int,
                                                    data: dict[str, Any] | None) -> None:
    wire = wire_error(error)
    assert (wire.code, wire.message, wire.data) == (code, error.message, data)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with Engine.open(EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                                  requests=RequestsConfig(max_documents_per_add=2))) as opened:
        opened.add([DocumentIn("honey bees", id="bees", meta={"year": 2020}),
                    DocumentIn("bees and wasps", id="wasps", meta={"year": 2021})])
        yield opened


async def _call(dispatcher: Dispatcher, method: str, params: dict[str, Any]) -> Any:
    reply = await dispatcher.handle(json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode())
    return json.loads(reply)


async def test_engine_errors_reach_the_wire_with_wire_paths(engine: Engine) -> None:
    dispatcher = Dispatcher(bind(engine))
    await _call(dispatcher, "initialize", {"protocolVersion": 1})
    mistyped = await _call(dispatcher, "index/add", {"documents": [
        {"id": "a", "text": "ok"}, {"id": "b", "text": "x", "meta": {"year": "soon"}}]})
    assert mistyped["error"]["code"] == -32602
    assert mistyped["error"]["data"] == {"field": "documents[1].meta.year"}
    too_many = await _call(dispatcher, "index/add", {"documents": [
        {"text": "one"}, {"text": "two"}, {"text": "three"}]})
    assert too_many["error"]["code"] == -32013
    first = await _call(dispatcher, "retrieve", {"query": "bees", "k": 1})
    foreign = await _call(dispatcher, "retrieve", {
        "query": "wasps", "k": 1, "cursor": first["result"]["nextCursor"]})
    assert foreign["error"]["code"] == -32015
    database_id = first["result"]["indexVersion"].rpartition(".")[0]
    pinned = await _call(dispatcher, "retrieve", {"query": "bees", "k": 1,
                                                  "indexVersion": f"{database_id}.999"})
    assert pinned["error"]["code"] == -32010
