"""The async client over real loopback HTTP: the reference SDK's server and a scripted app."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rcpkit.client import RetryPolicy, connect_http
from rcpkit.protocol.errors import (
    BackendUnavailable,
    ProtocolViolation,
    TransportClosed,
    Unauthorized,
)
from support.http import LoopbackServer

# ── against the reference SDK ────────────────────────────────────────────────


async def test_reference_server_over_http(ref_http: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, _ = ref_http
    async with await connect_http(url) as client:
        assert client.server.name == "ref-demo"
        assert client.conformance == "L1"
        result = await client.retrieve("paris", k=2)
        assert [hit.id for hit in result.hits] == ["d1", "d3"]
        embedded = await client.embed(["abcd"])
        assert isinstance(embedded.vectors, np.ndarray)
        assert embedded.vectors.tolist() == [[1.0, 1.0, 1.0, 1.0]]


async def test_progress_over_sse(ref_http: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, _ = ref_http
    async with await connect_http(url) as client:
        events = []
        result = await client.retrieve("paris tower", k=2, on_progress=events.append)
        assert [(event.progress, event.stage) for event in events] == [(0.5, "recall")]
        assert events[0].hits is not None and events[0].hits[0].id == "d1"
        assert [hit.id for hit in result.hits] == ["d1", "d3"]


async def test_server_killed_mid_request_over_http(
        ref_http: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, process = ref_http
    async with await connect_http(url) as client:
        slow = asyncio.create_task(client.retrieve("slow", meta={"x-sleep": 30}))
        await asyncio.sleep(0.3)
        process.kill()
        with pytest.raises(TransportClosed, match="may or may not have taken effect"):
            await slow


# ── against a scripted app ───────────────────────────────────────────────────


class Scripted:
    """A Starlette app with token sessions, 429/503/401 answers and SSE (§5.2)."""

    def __init__(self) -> None:
        self.token: str | None = None
        self.minted = 0
        self.calls: dict[str, int] = {}
        self.session_headers: list[str | None] = []
        self.authorization: list[str | None] = []
        self.shutdowns = 0
        self.app = Starlette(routes=[Route("/rcp/{method:path}", self.handle, methods=["POST"])])

    async def handle(self, request: Request) -> Response:
        frame = json.loads(await request.body())
        self.authorization.append(request.headers.get("authorization"))
        method, id_, params = frame["method"], frame.get("id"), frame.get("params") or {}
        if method == "initialize":
            self.minted += 1
            self.token = f"tok-{self.minted}"
            return _ok(id_, {"protocolVersion": 1, "server": {"name": "scripted-http"},
                             "capabilities": {"retrieve": {}, "streaming": {},
                                              "index": {"writable": True}},
                             "_meta": {"session": self.token}})
        header = request.headers.get("rcp-session")
        self.session_headers.append(header)
        if header is None or header != self.token:
            return _err(id_, -32001, "unknown or expired session")
        if method == "shutdown":
            self.shutdowns += 1
            return _ok(id_, {})
        key = params.get("query") or method
        self.calls[key] = self.calls.get(key, 0) + 1
        return self.behave(key, id_, params)

    def behave(self, key: str, id_: Any, params: dict[str, Any]) -> Response:
        count = self.calls[key]
        if key == "busy" and count <= 2:
            return Response(status_code=429, headers={"Retry-After": "0.05"})
        if key in ("down", "index/add"):
            return Response("overloaded", status_code=503)
        if key == "denied":
            return JSONResponse({"jsonrpc": "2.0", "id": None,
                                 "error": {"code": -32012, "message": "bad token"}},
                                status_code=401)
        if key == "empty":
            return Response(status_code=200)
        if key == "sse":
            return StreamingResponse(_sse(id_, params), media_type="text/event-stream")
        return _ok(id_, {"hits": [{"id": key, "score": 1.0}]})


def _ok(id_: Any, result: dict[str, Any]) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": id_, "result": result})


def _err(id_: Any, code: int, message: str) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": id_, "error": {"code": code,
                                                                "message": message}})


async def _sse(id_: Any, params: dict[str, Any]) -> AsyncIterator[bytes]:
    token = params["_meta"]["progressToken"]
    for step in (1, 2):
        frame = {"jsonrpc": "2.0", "method": "notifications/progress",
                 "params": {"progressToken": token, "progress": step / 3, "stage": "rerank"}}
        yield f"data: {json.dumps(frame)}\n\n".encode()
        await asyncio.sleep(0.01)
    final = {"jsonrpc": "2.0", "id": id_, "result": {"hits": [{"id": "sse", "score": 1}]}}
    yield f"data: {json.dumps(final)}\n\n".encode()


@pytest.fixture
def scripted_http() -> Iterator[tuple[str, Scripted]]:
    scripted = Scripted()
    with LoopbackServer(scripted.app) as server:
        yield f"{server.url}/rcp", scripted


FAST = RetryPolicy(max_attempts=3, base_delay_s=0.01)


@pytest.mark.wire
async def test_session_token_is_sent_and_released(scripted_http: tuple[str, Scripted]) -> None:
    url, app = scripted_http
    async with await connect_http(url, retry=FAST) as client:
        assert (await client.retrieve("plain")).hits[0].id == "plain"
    assert app.session_headers[0] == "tok-1"
    assert app.shutdowns == 1  # close() ends the server-side session


@pytest.mark.wire
async def test_expired_session_is_renegotiated(scripted_http: tuple[str, Scripted]) -> None:
    url, app = scripted_http
    async with await connect_http(url, retry=FAST) as client:
        app.token = "rotated-by-server"
        assert (await client.retrieve("again")).hits[0].id == "again"
        assert app.minted == 2


@pytest.mark.wire
async def test_429_retry_after_is_honoured(scripted_http: tuple[str, Scripted]) -> None:
    url, app = scripted_http
    async with await connect_http(url, retry=FAST) as client:
        assert (await client.retrieve("busy")).hits[0].id == "busy"
        assert app.calls["busy"] == 3


@pytest.mark.wire
async def test_status_codes_map_to_rcp_errors(scripted_http: tuple[str, Scripted]) -> None:
    url, app = scripted_http
    async with await connect_http(url, retry=FAST) as client:
        with pytest.raises(BackendUnavailable, match="HTTP 503"):
            await client.retrieve("down")
        assert app.calls["down"] == 3  # retried up to the policy's bound
        with pytest.raises(Unauthorized, match="bad token"):
            await client.retrieve("denied")
        assert app.calls["denied"] == 1  # never retried
        with pytest.raises(ProtocolViolation):
            await client.retrieve("empty")


@pytest.mark.wire
async def test_writes_are_retried_only_with_explicit_ids(
        scripted_http: tuple[str, Scripted]) -> None:
    url, app = scripted_http
    async with await connect_http(url, retry=FAST) as client:
        with pytest.raises(BackendUnavailable):
            await client.index_add([{"text": "no id"}])
        assert app.calls["index/add"] == 1
        with pytest.raises(BackendUnavailable):
            await client.index_add([{"id": "a", "text": "with id"}])
        assert app.calls["index/add"] == 1 + 3


@pytest.mark.wire
async def test_progress_over_sse_from_a_streaming_app(
        scripted_http: tuple[str, Scripted]) -> None:
    url, _ = scripted_http
    async with await connect_http(url) as client:
        stream = client.retrieve_stream("sse")
        progress = [event.progress async for event in stream]
        assert progress == pytest.approx([1 / 3, 2 / 3])
        assert stream.result.hits[0].id == "sse"


@pytest.mark.wire
async def test_unreachable_server_is_transport_closed() -> None:
    with pytest.raises(TransportClosed):
        await connect_http("http://127.0.0.1:9/rcp", retry=RetryPolicy(max_attempts=1))


@pytest.mark.wire
async def test_auth_and_headers_are_sent(scripted_http: tuple[str, Scripted]) -> None:
    url, app = scripted_http
    async with await connect_http(url, auth="s3cret"):
        pass
    async with await connect_http(url, auth=("ann", "pw")):
        pass
    assert app.authorization[0] == "Bearer s3cret"
    assert app.authorization[-1] == "Basic " + base64.b64encode(b"ann:pw").decode()


@pytest.mark.wire
async def test_keep_alive_reuses_one_connection(scripted_http: tuple[str, Scripted],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    url, _ = scripted_http
    opened = []
    original = asyncio.open_connection

    async def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return await original(*args, **kwargs)

    monkeypatch.setattr(asyncio, "open_connection", counting)
    async with await connect_http(url) as client:
        for _ in range(5):
            await client.retrieve("plain")
    assert len(opened) == 1
