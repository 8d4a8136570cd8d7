"""JSON-RPC batches from the client (§11): one frame, one outcome per member.

Against real servers: rcpkit's example server in memory (the stream semantics of stdio,
without a process) and over loopback HTTP, the reference SDK's server (which answers
batches on stdio and HTTP), and a raw stdio server that answers out of order or refuses a
batch whole.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from rcpkit.client import (
    AsyncClient,
    Client,
    ProgressEvent,
    connect_http,
    connect_memory,
    connect_stdio,
)
from rcpkit.client.http11 import HttpPool
from rcpkit.client.transports import HttpTransport
from rcpkit.protocol.errors import (
    InternalError,
    NotFound,
    PayloadTooLarge,
    RcpError,
    Timeout,
    UsageError,
)
from rcpkit.transports.http import create_app
from support.example_server import build_test_server
from support.http import LoopbackServer
from support.waiting import until_async

DOCUMENTS = [{"id": "eiffel", "text": "the eiffel tower stands in paris"},
             {"id": "colosseum", "text": "the colosseum stands in rome"}]
SERVER_MAX_BATCH = 1024  # the Dispatcher's default member cap

# Answers a batch with its replies in reverse order (x-raw/fail members with -32015), and a
# batch naming x-raw/refuse with one non-array error (id null, no data.limit).
RAW_SERVER = r"""
import json, sys

def answer(request):
    if request["method"] == "initialize":
        reply = {"result": {"protocolVersion": 1, "server": {"name": "raw"}, "capabilities": {}}}
    elif request["method"] == "x-raw/fail":
        reply = {"error": {"code": -32015, "message": "no such thing"}}
    else:
        reply = {"result": {**request.get("params", {}), "method": request["method"]}}
    return {"jsonrpc": "2.0", "id": request["id"], **reply}

for line in sys.stdin:
    frame = json.loads(line)
    if isinstance(frame, dict):
        reply = answer(frame) if "id" in frame else None
    elif any(member["method"] == "x-raw/refuse" for member in frame):
        refusal = {"code": -32013, "message": "batch refused"}
        reply = {"jsonrpc": "2.0", "id": None, "error": refusal}
    else:
        reply = [answer(member) for member in frame if "id" in member][::-1] or None
    if reply is not None:
        print(json.dumps(reply), flush=True)
"""


@pytest.fixture(params=["memory", *(pytest.param(kind, marks=pytest.mark.wire)
                                     for kind in ("http-stateless", "http-token"))])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[AsyncClient]:
    """rcpkit's example server, with the two documents indexed."""
    if request.param == "memory":
        async with await connect_memory(build_test_server()) as opened:
            await opened.index_add(DOCUMENTS)
            yield opened
        return
    sessions = request.param.removeprefix("http-")
    with LoopbackServer(create_app(build_test_server(), sessions=sessions)) as server:
        async with await connect_http(f"{server.url}/rcp") as opened:
            await opened.index_add(DOCUMENTS)
            yield opened


@pytest.fixture
async def raw() -> AsyncIterator[AsyncClient]:
    async with await connect_stdio([sys.executable, "-c", RAW_SERVER], strict=False) as opened:
        yield opened


def _count_batch_frames(client: AsyncClient, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The member count of each batch frame the client's transport sends."""
    sizes: list[int] = []
    transport = client.session.transport
    original = transport.send_batch

    async def counting(frames: list[dict[str, Any]], **kwargs: Any) -> None:
        sizes.append(len(frames))
        await original(frames, **kwargs)

    monkeypatch.setattr(transport, "send_batch", counting)
    return sizes


async def test_each_member_gets_its_own_result_or_error(
        client: AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    frames = _count_batch_frames(client, monkeypatch)
    events: list[ProgressEvent] = []
    async with client.batch() as batch:
        found = batch.retrieve("paris tower", k=1, on_progress=events.append)
        pong = batch.ping(nonce=7)
        missing = batch.call("x-test/notfound")
        boom = batch.call("x-test/boom")
        unadvertised = batch.embed(["not advertised"])  # refused before any I/O (§6)
        bad_option = batch.retrieve("paris", mode="dense")  # only "sparse" is advertised
        assert len(batch) == 4
    assert frames == [4]
    assert [hit.id for hit in (await found).hits] == ["eiffel"]
    assert (await pong).nonce == 7
    with pytest.raises(NotFound):
        await missing
    with pytest.raises(InternalError):
        await boom
    with pytest.raises(UsageError, match="embed"):
        await unadvertised
    with pytest.raises(UsageError, match="mode"):
        await bad_option
    # progress frames reach a batch member on a stream; HTTP answers a batch without SSE
    assert bool(events) is not isinstance(client.session.transport, HttpTransport)


@pytest.mark.wire
async def test_a_batch_is_one_post_to_the_base_path(monkeypatch: pytest.MonkeyPatch) -> None:
    paths: list[str | None] = []
    original = HttpPool.post

    def recording(pool: HttpPool, path: str | None, *args: Any) -> Any:
        paths.append(path)
        return original(pool, path, *args)

    with LoopbackServer(create_app(build_test_server())) as server:
        async with await connect_http(f"{server.url}/rcp") as client:
            monkeypatch.setattr(HttpPool, "post", recording)
            batch = client.batch()
            replies = [batch.ping(nonce=n) for n in range(3)]
            await batch.send()
            assert [(await reply).nonce for reply in replies] == [0, 1, 2]
            monkeypatch.undo()
    assert paths == [None]


async def test_empty_and_notification_only_batches(client: AsyncClient,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    frames = _count_batch_frames(client, monkeypatch)
    await client.batch().send()  # §11: an empty batch would be -32600, so nothing is sent
    async with client.batch() as batch:
        batch.notify("notifications/cancel", {"id": 424242})
        batch.notify("notifications/cancel", {"id": 424243})
    assert frames == [2]  # sent, and no reply awaited (no line over stdio, 204 over HTTP)
    assert client.session.in_flight == 0
    assert (await client.ping(nonce=1)).nonce == 1
    assert client.session.late_responses == 0


async def test_an_oversized_batch_fails_every_member_not_its_neighbours(
        client: AsyncClient) -> None:
    oversized, small = client.batch(), client.batch()
    refused = [oversized.ping(nonce=n) for n in range(SERVER_MAX_BATCH + 1)]
    answered = small.ping(nonce="ok")
    await asyncio.gather(oversized.send(), small.send())
    assert (await answered).nonce == "ok"
    for reply in (refused[0], refused[-1]):
        with pytest.raises(PayloadTooLarge) as caught:
            await reply
        assert caught.value.data == {"limit": SERVER_MAX_BATCH}
    assert all(isinstance(reply.exception(), PayloadTooLarge) for reply in refused)


async def test_the_batch_deadline_bounds_the_wait(client: AsyncClient) -> None:
    batch = client.batch(deadline_ms=200)
    slow = batch.call("x-test/sleep", {"seconds": 1}, deadline_ms=60_000)
    await batch.send()
    with pytest.raises(Timeout, match="client side"):
        await slow
    assert client.session.in_flight == 0
    assert (await client.ping(nonce=2)).nonce == 2


async def test_cancelling_send_cancels_the_members(client: AsyncClient) -> None:
    batch = client.batch()
    slow = batch.call("x-test/sleep", {"seconds": 1})
    sending = asyncio.create_task(batch.send())
    await until_async(lambda: client.session.in_flight, what="the batch is in flight")
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    assert slow.cancelled()
    assert (await client.ping(nonce=3)).nonce == 3


async def test_replies_are_matched_by_id_whatever_their_order(raw: AsyncClient) -> None:
    async with raw.batch() as batch:
        first = batch.call("x-raw/echo", {"n": 1})
        failed = batch.call("x-raw/fail")
        batch.notify("x-raw/note")
        pong = batch.ping(nonce=9)
        last = batch.call("x-raw/echo", {"n": 2})
    assert (await first) == {"n": 1, "method": "x-raw/echo"}
    assert (await last) == {"n": 2, "method": "x-raw/echo"}
    assert (await pong).nonce == 9
    with pytest.raises(NotFound):
        await failed


async def test_a_batch_refused_whole_fails_each_member(raw: AsyncClient) -> None:
    batch = raw.batch()
    replies = [batch.call("x-raw/refuse"), batch.ping()]
    await batch.send()
    for reply in replies:
        with pytest.raises(PayloadTooLarge, match="batch refused"):
            await reply
    assert (await raw.ping(nonce=4)).nonce == 4


async def test_a_batch_is_sent_once_and_not_after_an_exception(raw: AsyncClient) -> None:
    batch = raw.batch()
    batch.ping()
    await batch.send()
    with pytest.raises(UsageError, match="already sent"):
        await batch.send()
    with pytest.raises(UsageError, match="already sent"):
        batch.ping()
    with pytest.raises(ZeroDivisionError):
        async with raw.batch() as failing:
            queued = failing.ping()
            _ = 1 / 0
    assert queued.cancelled()
    assert raw.session.in_flight == 0


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_reference_server_answers_a_batch(
        transport: str, ref_stdio: list[str],
        ref_http: tuple[str, subprocess.Popen[bytes]]) -> None:
    opened = connect_stdio(ref_stdio) if transport == "stdio" else connect_http(ref_http[0])
    async with await opened as client:
        async with client.batch() as batch:
            hits = batch.retrieve("paris", k=2)
            vectors = batch.embed(["ab", "abc", "abcd"])  # batchLimit 2: two members
            pong = batch.ping(nonce="ref")
            unknown = batch.call("x-ref/absent")
            gated = batch.rerank("q", ["a"])
            assert len(batch) == 5
        assert [hit.id for hit in (await hits).hits] == ["d1", "d3"]
        embedded = await vectors
        assert embedded.vectors.dtype == np.float32 and embedded.vectors.shape == (3, 4)
        assert np.array_equal(embedded.vectors[2], [1, 1, 1, 1])
        assert (await pong).nonce == "ref"
        with pytest.raises(RcpError):
            await unknown
        with pytest.raises(UsageError):
            await gated


def test_sync_client_batch(ref_stdio: list[str]) -> None:
    with Client.connect_stdio(ref_stdio) as client:
        with client.batch() as batch:
            hits = batch.retrieve("paris", k=2)
            pong = batch.ping(nonce=5)
            gated = batch.rerank("q", ["a"])
            assert len(batch) == 2
        assert [hit.id for hit in hits.result().hits] == ["d1", "d3"]
        assert pong.result().nonce == 5
        with pytest.raises(UsageError):
            gated.result()
        with pytest.raises(UsageError, match="already sent"):
            batch.send()
        explicit = client.batch(deadline_ms=5000)
        answer = explicit.ping(nonce=6)
        explicit.send()
        assert answer.result().nonce == 6
