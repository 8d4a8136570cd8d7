"""The client against rcpkit's own server (tests/support/example_server.py): in memory,
over stdio and over HTTP; the same assertions hold on every connection."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rcpkit.client import AsyncClient, RetryPolicy, connect_http, connect_memory, connect_stdio
from rcpkit.protocol.errors import InternalError, NotFound
from rcpkit.transports.http import create_app
from support.example_server import build_test_server
from support.http import LoopbackServer
from support.waiting import until_async

EXAMPLE = Path(__file__).parents[1] / "support" / "example_server.py"
DOCUMENTS = [{"id": "eiffel", "text": "the eiffel tower stands in paris"},
             {"id": "colosseum", "text": "the colosseum stands in rome"}]


@pytest.fixture(params=["memory", *(pytest.param(kind, marks=pytest.mark.wire) for kind in
                                     ("stdio", "http-stateless", "http-token", "http-single"))])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[AsyncClient]:
    retry = RetryPolicy(max_attempts=2, base_delay_s=0.01)
    if request.param == "memory":
        async with await connect_memory(build_test_server(), retry=retry) as opened:
            yield opened
        return
    if request.param == "stdio":
        async with await connect_stdio([sys.executable, str(EXAMPLE)], retry=retry) as opened:
            yield opened
        return
    sessions = request.param.removeprefix("http-")
    with LoopbackServer(create_app(build_test_server(), sessions=sessions)) as server:
        async with await connect_http(f"{server.url}/rcp", retry=retry) as opened:
            yield opened


async def test_index_then_retrieve_with_progress(client: AsyncClient) -> None:
    added = await client.index_add(DOCUMENTS)
    assert added.ids == ["eiffel", "colosseum"]
    events = []
    result = await client.retrieve("paris tower", k=1, on_progress=events.append)
    assert [hit.id for hit in result.hits] == ["eiffel"]
    assert events and events[-1].progress == 1.0
    assert (await client.index_delete(["eiffel", "eiffel"])).deleted == 1


async def test_deadline_reaches_the_handler(client: AsyncClient) -> None:
    result = await client.call("x-test/deadline", deadline_ms=4000)
    assert 0 < result["remainingMs"] <= 4000


async def test_cancelling_a_slow_call_frees_the_connection(client: AsyncClient) -> None:
    # bounded: a stateless HTTP server cannot tie the cancel to the running handler
    task = asyncio.create_task(client.call("x-test/busy", {"seconds": 2}))
    await until_async(lambda: client.session.in_flight, what="the call is in flight")
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await client.ping(nonce=7)).nonce == 7


async def test_server_errors_arrive_as_typed_exceptions(client: AsyncClient) -> None:
    with pytest.raises(NotFound):
        await client.call("x-test/notfound")
    with pytest.raises(InternalError) as caught:
        await client.call("x-test/boom")
    assert "passwd" not in caught.value.message  # the server never leaks internals


@pytest.mark.wire
async def test_log_notifications_are_routed_over_stdio() -> None:
    received: list[dict[str, object]] = []
    async with await connect_stdio([sys.executable, str(EXAMPLE)],
                                   log_handler=received.append) as client:
        await client.call("x-test/log")
    assert [entry["level"] for entry in received] == ["info", "warning"]  # opted in at info
