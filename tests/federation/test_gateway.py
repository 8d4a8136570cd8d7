"""The aggregator gateway (§16, §7.13): the ``rcpkit gateway`` CLI over stdio and HTTP,
driven by our client; catalog/list; hop budget and cycles across two gateways."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcpkit.cli import app
from rcpkit.client.client import connect_http, connect_stdio
from rcpkit.protocol.errors import Timeout
from rcpkit.protocol.types import Hit, RetrieveResult
from support.net import free_port

from .conftest import (
    RCPKIT,
    Processes,
    engine,
    http_entry,
    ref_engine,
    stdio_entry,
    write_registry,
)

DOCS_A = json.dumps({"a1": "beta from a", "a2": "gamma"})
DOCS_B = json.dumps({"b1": "beta from b"})


def notes_of(result: RetrieveResult) -> list[str]:
    return list(result.usage.notes or []) if result.usage else []


def engine_of(hit: Hit) -> str:
    return str((hit.meta or {})["engine"])


@pytest.mark.wire
async def test_gateway_over_stdio(tmp_path: Path) -> None:
    registry = write_registry(tmp_path / "rcp.json", [
        stdio_entry("one", engine("one", "--docs", DOCS_A, "--floor", "0"), expose=True),
        stdio_entry("two", engine("two", "--docs", DOCS_B, "--embed")),
        stdio_entry("ref", ref_engine())])
    async with await connect_stdio([*RCPKIT, "gateway", "--registry", str(registry),
                                    "--stdio", "--identity", "gw"]) as client:
        assert client.server.name == "gw"
        assert client.capabilities.to_wire() == {
            "catalog": {"engines": 3},
            "retrieve": {"maxK": 50, "modes": ["sparse"], "fusion": ["rrf", "weighted", "convex"],
                         "scoreScale": "unbounded", "scoreFloor": 0.0},
            "filter": {"fields": ["lang", "topic"]},
            "embed": {"dimension": 2, "identity": "two-len"}}
        embedded = await client.embed(["abc", "de"])  # forwarded to "two"
        assert [list(vector) for vector in embedded.vectors] == [[3.0, 1.0], [2.0, 1.0]]

        catalog = await client.catalog_list()
        assert [entry.id for entry in catalog.engines] == ["one", "two", "ref"]
        assert catalog.engines[2].server.name == "ref-engine"
        assert catalog.engines[0].endpoint is not None
        assert catalog.engines[0].endpoint.command == engine("one", "--docs", DOCS_A,
                                                             "--floor", "0")
        assert [entry.endpoint for entry in catalog.engines[1:]] == [None, None]

        result = await client.retrieve("beta", 5, deadline_ms=5000)
        assert {(str(hit.id), engine_of(hit)) for hit in result.hits} == {
            ("a1", "one"), ("b1", "two"), ("r1", "ref")}
        notes = notes_of(result)
        assert 'one: federation={"depth": 2, "path": ["gw"]}' in notes
        deadline = next(note for note in notes if note.startswith("one: deadlineMs="))
        assert 0 < float(deadline.split("=")[1]) < 5000

        # convex needs every engine's scoreFloor: "two" has none, so RRF and a note
        result = await client.retrieve("beta", 5, fusion={"method": "convex"})
        assert any("fused with rrf" in note for note in notes_of(result))

        # a filter field only "ref" knows: the others are skipped, not failed
        topic = {"field": "topic", "op": "eq", "value": "x"}
        result = await client.retrieve("beta", 5, filter=topic)
        assert [hit.id for hit in result.hits] == ["r1"]
        assert result.meta is None

        # the hop budget is spent: answer without forwarding (§16.2)
        result = await client.retrieve("beta", 5, meta={"federation": {"depth": 0,
                                                                       "path": ["x"]}})
        assert result.hits == [] and "hop budget exhausted" in notes_of(result)[0]
        result = await client.retrieve("beta", 5, meta={"federation": {"depth": 2,
                                                                       "path": ["gw"]}})
        assert result.hits == [] and "cycle" in notes_of(result)[0]

        # too little time left to ask anyone: -32014 from the gateway, not a late answer
        with pytest.raises(Timeout) as caught:
            await client.call("retrieve", {"query": "beta", "k": 5, "_meta": {"deadlineMs": 20}})
        assert "no time to ask any engine" in caught.value.message


async def test_two_gateways_listing_each_other(tmp_path: Path, processes: Processes) -> None:
    port_a, port_b = free_port(), free_port()
    write_registry(tmp_path / "a.json", [stdio_entry("docs-a", engine("docs-a", "--docs", DOCS_A)),
                                         http_entry("peer", port_b)])
    write_registry(tmp_path / "b.json", [stdio_entry("docs-b", engine("docs-b", "--docs", DOCS_B)),
                                         http_entry("peer", port_a)])
    # gw-a starts while gw-b is still down: it reaches it later, when a query needs it
    processes.http([*RCPKIT, "gateway", "--registry", str(tmp_path / "a.json"), "--identity",
                    "gw-a", "--http", f"127.0.0.1:{port_a}"], port_a)
    processes.http([*RCPKIT, "gateway", "--registry", str(tmp_path / "b.json"), "--identity",
                    "gw-b", "--http", f"127.0.0.1:{port_b}"], port_b)
    async with await connect_http(f"http://127.0.0.1:{port_a}/rcp") as client:
        result = await client.retrieve("beta", 5, deadline_ms=10_000)
    assert {(str(hit.id), engine_of(hit)) for hit in result.hits} == {
        ("a1", "docs-a"), ("b1", "peer")}
    notes = notes_of(result)
    # gw-b recognised gw-a (its "peer") on the path by server name and did not call it back
    assert any(note.startswith("peer: cycle: engine 'peer' (gw-a)") for note in notes)
    assert 'peer: docs-b: federation={"depth": 1, "path": ["gw-a", "gw-b"]}' in notes
    assert result.meta is None


def test_gateway_cli_rejects_bad_input(tmp_path: Path) -> None:
    registry = write_registry(tmp_path / "rcp.json", [{"id": "x", "transport": "stdio"}])
    runner = CliRunner()
    done = runner.invoke(app, ["gateway", "--registry", str(registry), "--stdio"])
    assert done.exit_code == 2
    assert done.stderr.startswith("rcpkit gateway: error: engines[0] ('x'): a stdio engine needs")
    done = runner.invoke(app, ["gateway", "--registry", str(registry)])
    assert done.exit_code == 2 and "exactly one of --stdio" in done.stderr
    done = runner.invoke(app, ["gateway", "--registry", str(registry), "--http", "nope"])
    assert done.exit_code == 2 and "HOST:PORT" in done.stderr
