"""Federation over real engines: stdio and HTTP children, our framework and the reference SDK
(§16.2 partial failure, required engines, deadlines)."""

from __future__ import annotations

import json

import pytest

from rcpkit.federation import Federation, Registry
from rcpkit.protocol.errors import NotFound
from rcpkit.protocol.methods import decode_params
from rcpkit.protocol.types import RetrieveParams
from support.net import free_port

from .conftest import Processes, engine, http_entry, ref_engine, stdio_entry

GOOD_DOCS = json.dumps({"g1": "beta alpha", "g2": "beta"})
WEB_DOCS = json.dumps({"w1": "beta web page", "g2": "beta"})


def beta(k: int = 5) -> RetrieveParams:
    params: RetrieveParams = decode_params("retrieve", {"query": "beta", "k": k})
    return params


async def test_three_engines_one_fails_one_slow_one_required(processes: Processes) -> None:
    port = free_port()
    processes.http(engine("web", "--docs", WEB_DOCS, "--http", str(port)), port)
    registry = Registry.from_dict({"engines": [
        stdio_entry("good", engine("good", "--docs", GOOD_DOCS), required=True),
        stdio_entry("broken", engine("broken", "--fail", "-32015")),
        stdio_entry("slow", engine("slow", "--delay-ms", "20000")),
        http_entry("web", port),
        stdio_entry("ref", ref_engine()),
        stdio_entry("missing", ["/nonexistent/rcp-engine"])]})
    federation = Federation(registry)
    try:
        unreachable = await federation.connect()
        result = await federation.retrieve(beta(), deadline_ms=2000)
    finally:
        await federation.close()
    assert len(unreachable) == 1 and "'missing' is unreachable" in unreachable[0]
    assert result["_meta"] == {"degraded": ["broken", "slow", "missing"]}
    notes = result["usage"]["notes"]
    assert any("'broken' failed" in note and "-32015" in note for note in notes)
    assert any("'slow' failed" in note and "-32014" in note for note in notes)
    by_id = {str(hit["id"]): hit for hit in result["hits"]}
    assert set(by_id) == {"g1", "g2", "w1", "r1"}
    assert by_id["g2"]["meta"]["engine"] == "good"  # in both good and web: equal bodies
    assert by_id["r1"]["meta"] == {"source": "ref", "engine": "ref", "engineRank": 1,
                                   "engineScore": 1.0}
    # the downstream deadline is strictly smaller than ours, the hop budget is 3 (§16.2)
    forwarded = [note for note in notes if note.startswith("good: ")]
    assert 'federation={"depth": 3, "path": []}' in forwarded[0]
    deadline = int(float(forwarded[1].split("deadlineMs=")[1]))
    assert 0 < deadline < 2000


@pytest.mark.wire
async def test_failing_required_engine_fails_with_its_code() -> None:
    registry = Registry.from_dict({"engines": [
        stdio_entry("good", engine("good", "--docs", GOOD_DOCS)),
        stdio_entry("broken", engine("broken", "--fail", "-32015"), required=True)]})
    federation = Federation(registry)
    try:
        with pytest.raises(NotFound) as caught:
            await federation.retrieve(beta())
    finally:
        await federation.close()
    assert caught.value.code == -32015
