"""OpenTelemetry traces (the ``otel`` extra, :mod:`rcpkit.tracing`) seen through the SDK's
in-memory exporter: one span per request, child of the caller's W3C trace context (HTTP
headers, or ``_meta["x-tracecontext"]`` over stdio, §4.4), with a child span per pipeline
stage and the operator's attributes but never the query text (§15.6); the gateway carries
one trace to every engine it asks (§16)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rcpkit import tracing
from rcpkit.binding import bind
from rcpkit.engine.config import EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.search.searcher import TIMED_STAGES
from rcpkit.engine.types import DocumentIn
from rcpkit.federation import build_gateway, load_registry
from rcpkit.transports.http import create_app
from rcpkit.transports.stdio import _serve
from support.http import LoopbackServer

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
SECRET = "quokkas"
"""A word of the query: no span attribute may hold it."""

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into the in-memory exporter; off again afterwards."""
    _EXPORTER.clear()
    tracing.enable(_PROVIDER)
    yield _EXPORTER
    tracing.disable()


def _engine(path: Path, words: str) -> Engine:
    engine = Engine.open(EngineConfig(data_dir=path, embedder=EmbedderConfig(name="hashing")))
    engine.add([DocumentIn(f"{words} note {n}", id=f"{path.name}-{n}") for n in range(12)])
    return engine


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    opened = _engine(tmp_path / "kb", f"honey bees and {SECRET}")
    yield opened
    opened.close()


def _hex(number: int, width: int) -> str:
    return format(number, f"0{width}x")


def _by_name(finished: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in finished:
        named.setdefault(span.name, []).append(span)
    return named


def _assert_retrieve_tree(finished: list[ReadableSpan], *, collection: str) -> ReadableSpan:
    """The one ``retrieve`` span, child of the caller's context, with its stages as
    children inside it, in pipeline order."""
    (request,) = [span for span in finished if span.name == "retrieve"]
    assert request.kind is trace.SpanKind.SERVER
    assert _hex(request.context.trace_id, 32) == TRACE_ID
    assert request.parent is not None and _hex(request.parent.span_id, 16) == PARENT_ID
    assert request.attributes is not None
    assert request.attributes["rcp.collection"] == collection
    assert request.attributes["rcp.mode"] == "hybrid"
    assert request.attributes["rcp.k"] == 3
    assert request.attributes["rcp.hits"] == 3
    children = sorted((span for span in finished
                       if span.parent is not None and span.parent.span_id
                       == request.context.span_id), key=lambda span: span.start_time or 0)
    assert [span.name for span in children] == ["admit", "decode", *TIMED_STAGES]
    assert request.start_time is not None and request.end_time is not None
    for child in children:
        assert child.start_time is not None and child.end_time is not None
        assert request.start_time <= child.start_time <= child.end_time <= request.end_time
    return request


def _assert_no_text(finished: list[ReadableSpan]) -> None:
    for span in finished:
        for value in (span.attributes or {}).values():
            assert SECRET not in str(value), (span.name, value)


@pytest.mark.wire
def test_a_hybrid_retrieve_over_http_is_one_span_per_stage(
        spans: InMemorySpanExporter, engine: Engine) -> None:
    with LoopbackServer(create_app(bind(engine), collection="kb"), kind="rcpkit") as srv:
        reply = httpx.post(f"{srv.url}/rcp/retrieve", headers={"traceparent": TRACEPARENT},
                           json={"jsonrpc": "2.0", "id": 1, "method": "retrieve",
                                 "params": {"query": f"{SECRET} honey", "k": 3}})
    assert len(reply.json()["result"]["hits"]) == 3
    finished = list(spans.get_finished_spans())
    request = _assert_retrieve_tree(finished, collection="kb")
    _assert_no_text(finished)
    # back: the result names the span that answered it (§17.2)
    assert reply.json()["result"]["_meta"][tracing.TRACE_META_KEY] == {
        "traceparent": f"00-{TRACE_ID}-{_hex(request.context.span_id, 16)}-01"}


@pytest.mark.wire
def test_a_refused_request_is_a_span_marked_as_an_error(
        spans: InMemorySpanExporter, engine: Engine) -> None:
    with LoopbackServer(create_app(bind(engine)), kind="rcpkit") as srv:
        httpx.post(f"{srv.url}/rcp/retrieve", headers={"traceparent": TRACEPARENT},
                   json={"jsonrpc": "2.0", "id": 1, "method": "retrieve",
                         "params": {"query": "bees", "k": -1}})
    (request,) = _by_name(list(spans.get_finished_spans()))["retrieve"]
    assert request.attributes is not None
    assert request.attributes["rpc.jsonrpc.error_code"] == -32602
    assert request.status.status_code is trace.StatusCode.ERROR


def _stdio_exchange(engine: Engine, frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``frames`` through the stdio transport's serving loop on real pipes (NDJSON, §5.1),
    in this process so its spans reach the in-memory exporter; the replies read back."""
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    server = bind(engine)
    done = threading.Thread(target=asyncio.run, args=(_serve(
        server, request_read, reply_write, 1 << 20, {"tracing": None}),))
    done.start()
    with os.fdopen(request_write, "wb") as requests:
        requests.write(b"".join(json.dumps(frame).encode() + b"\n" for frame in frames))
    with os.fdopen(reply_read, "rb") as replies:
        answered = [json.loads(line) for line in replies]
    done.join(30)
    os.close(request_read)
    return answered


def test_a_hybrid_retrieve_over_stdio_continues_the_meta_trace_context(
        spans: InMemorySpanExporter, engine: Engine) -> None:
    replies = _stdio_exchange(engine, [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "retrieve", "params": {
            "query": f"{SECRET} honey", "k": 3,
            "_meta": {tracing.TRACE_META_KEY: {"traceparent": TRACEPARENT,
                                               "tracestate": "vendor=1"}}}}])
    assert len(next(r for r in replies if r["id"] == 2)["result"]["hits"]) == 3
    finished = list(spans.get_finished_spans())
    request = _assert_retrieve_tree(finished, collection=bind(engine).name)
    assert request.parent is not None and request.parent.trace_state.get("vendor") == "1"
    _assert_no_text(finished)


def test_a_malformed_trace_context_starts_a_new_trace(
        spans: InMemorySpanExporter, engine: Engine) -> None:
    replies = _stdio_exchange(engine, [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        *({"jsonrpc": "2.0", "id": n, "method": "retrieve", "params": {
            "query": "bees", "k": 1, "_meta": {tracing.TRACE_META_KEY: carrier}}}
          for n, carrier in enumerate([{"traceparent": "00-nonsense"}, {"traceparent": 7},
                                       "00-not-an-object", ["a"]], start=2))])
    assert all("result" in reply for reply in replies)
    requests = _by_name(list(spans.get_finished_spans()))["retrieve"]
    assert len(requests) == 4
    assert all(span.parent is None for span in requests)


@pytest.mark.wire
def test_the_gateway_carries_one_trace_to_every_engine(
        spans: InMemorySpanExporter, tmp_path: Path) -> None:
    engines = [_engine(tmp_path / name, f"honey bees and {SECRET} from {name}")
               for name in ("north", "south")]
    try:
        with LoopbackServer(create_app(bind(engines[0]), collection="north"),
                            kind="rcpkit") as north, \
                LoopbackServer(create_app(bind(engines[1]), collection="south"),
                               kind="rcpkit") as south:
            registry = tmp_path / "rcp.json"
            registry.write_text(json.dumps({"engines": [
                {"id": "north", "transport": "http", "url": f"{north.url}/rcp"},
                {"id": "south", "transport": "http", "url": f"{south.url}/rcp"}]}))
            gateway = build_gateway(load_registry(registry), identity="gw")
            try:
                with LoopbackServer(create_app(gateway), kind="rcpkit") as front:
                    spans.clear()  # the gateway's own initialize calls are not this trace
                    reply = httpx.post(
                        f"{front.url}/rcp/retrieve", headers={"traceparent": TRACEPARENT},
                        json={"jsonrpc": "2.0", "id": 1, "method": "retrieve",
                              "params": {"query": f"{SECRET} honey", "k": 4}}, timeout=60)
            finally:
                gateway.close()
    finally:
        for opened in engines:
            opened.close()
    hits = reply.json()["result"]["hits"]
    assert {hit["id"].split("-")[0] for hit in hits} == {"north", "south"}
    returned = reply.json()["result"]["_meta"][tracing.TRACE_META_KEY]["traceparent"]
    finished = list(spans.get_finished_spans())
    retrieves = _by_name(finished)["retrieve"]
    assert {_hex(span.context.trace_id, 32) for span in retrieves} == {TRACE_ID}
    (front_span,) = [span for span in retrieves if span.attributes
                     and span.attributes["rcp.collection"] == "gw"]
    assert front_span.parent is not None and _hex(front_span.parent.span_id, 16) == PARENT_ID
    assert returned == f"00-{TRACE_ID}-{_hex(front_span.context.span_id, 16)}-01"
    backends = {span.attributes["rcp.collection"]: span for span in retrieves
                if span is not front_span and span.attributes}
    assert set(backends) == {"north", "south"}
    for span in backends.values():
        assert span.parent is not None
        assert span.parent.span_id == front_span.context.span_id
        stages = [child.name for child in finished if child.parent is not None
                  and child.parent.span_id == span.context.span_id]
        assert "dense_recall" in stages and "lexical_recall" in stages
    _assert_no_text(finished)


@pytest.mark.wire
def test_the_query_is_recorded_only_with_log_bodies(engine: Engine) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(bind(engine), log_bodies=True, tracing=tracing.Tracing(provider))
    with LoopbackServer(app, kind="rcpkit") as srv:
        httpx.post(f"{srv.url}/rcp/retrieve", json={
            "jsonrpc": "2.0", "id": 1, "method": "retrieve",
            "params": {"query": f"{SECRET} honey", "k": 3}})
    (request,) = _by_name(list(exporter.get_finished_spans()))["retrieve"]
    assert request.attributes is not None
    assert request.attributes["rcp.query"] == f"{SECRET} honey"


async def test_the_mcp_bridge_continues_the_hosts_trace_to_the_engine(
        spans: InMemorySpanExporter, tmp_path: Path) -> None:
    from mcp.client import Client

    from rcpkit.client.memory import connect_memory
    from rcpkit.integrations.mcp import McpBridge

    engine = _engine(tmp_path / "kb", f"honey bees and {SECRET}")
    try:
        rcp = await connect_memory(bind(engine))
        try:
            async with Client(McpBridge(rcp).server()) as host:
                called = await host.call_tool("retrieve", {"query": f"{SECRET} honey", "k": 2},
                                              meta={"traceparent": TRACEPARENT})
        finally:
            await rcp.close()
    finally:
        engine.close()
    assert not called.is_error
    (request,) = _by_name(list(spans.get_finished_spans()))["retrieve"]
    assert _hex(request.context.trace_id, 32) == TRACE_ID
    _assert_no_text(list(spans.get_finished_spans()))


@pytest.mark.wire
def test_an_index_add_is_one_span_per_write_stage(
        spans: InMemorySpanExporter, engine: Engine) -> None:
    with LoopbackServer(create_app(bind(engine), collection="kb"), kind="rcpkit") as srv:
        reply = httpx.post(f"{srv.url}/rcp/index/add", headers={"traceparent": TRACEPARENT},
                           json={"jsonrpc": "2.0", "id": 1, "method": "index/add", "params": {
                               "documents": [{"id": "w", "text": f"wombats and {SECRET}"}]}})
    assert reply.json()["result"]["ids"] == ["w"]
    finished = list(spans.get_finished_spans())
    (request,) = _by_name(finished)["index/add"]
    assert request.attributes is not None and request.attributes["rcp.documents"] == 1
    assert [span.name for span in sorted(
        (span for span in finished if span.parent is not None
         and span.parent.span_id == request.context.span_id),
        key=lambda span: span.start_time or 0)] == [
        "admit", "decode", "queue", "prepare", "embed", "commit", "publish"]
    _assert_no_text(finished)


async def test_the_client_continues_its_callers_span(
        spans: InMemorySpanExporter, engine: Engine) -> None:
    from rcpkit.client.memory import connect_memory

    client = await connect_memory(bind(engine))
    on = tracing.active()
    assert on is not None
    try:
        with on.tracer.start_as_current_span("agent step") as caller:
            await client.retrieve("honey", k=1)
        await client.retrieve("honey", k=1)  # no current span: a trace of its own
    finally:
        await client.close()
    first, second = _by_name(list(spans.get_finished_spans()))["retrieve"]
    assert first.parent is not None
    assert first.parent.span_id == caller.get_span_context().span_id
    assert first.context.trace_id == caller.get_span_context().trace_id
    assert second.parent is None


async def test_graph_and_memory_ops_are_request_spans(
        spans: InMemorySpanExporter, engine: Engine) -> None:
    pytest.importorskip("igraph")
    from rcpkit.server import Dispatcher

    dispatcher = Dispatcher(bind(engine), stateless=True, trace_attributes={
        "rcp.collection": "kb"})
    for method, params in (("memory/build", {}),
                           ("graph", {"op": "neighbors", "query": f"{SECRET} honey"})):
        reply = json.loads(await dispatcher.handle(json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode(),
            caller="key-k1") or b"{}")
        assert "result" in reply, reply
    named = _by_name(list(spans.get_finished_spans()))
    for method in ("memory/build", "graph"):
        (span,) = named[method]
        assert span.attributes is not None
        assert (span.attributes["rcp.collection"], span.attributes["rcp.principal"]) \
            == ("kb", "key-k1")
    _assert_no_text(list(spans.get_finished_spans()))
