"""The in-memory connection (``rcpkit.client.memory``): a client on a Server's dispatcher in
this process, with the stdio stream semantics (§5.1) and no pipes or sockets."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rcpkit.client import Client, MemoryTransport, connect_memory
from rcpkit.client.client import AsyncClient
from rcpkit.protocol.errors import InternalError, Timeout, TransportClosed, UsageError
from support.example_server import build_test_server

DOCUMENTS = [{"id": "eiffel", "text": "the eiffel tower stands in paris"},
             {"id": "colosseum", "text": "the colosseum stands in rome"}]


async def test_a_deadline_cancels_the_handler_server_side() -> None:
    cancelled: list[Any] = []
    async with await connect_memory(build_test_server(cancelled=cancelled)) as client:
        with pytest.raises(Timeout):
            await client.call("x-test/sleep", {"seconds": 30}, deadline_ms=50)
        transport = client.session.transport
        assert isinstance(transport, MemoryTransport)
        await transport.dispatcher.drain()  # the §7.14 cancel reached the running handler
    assert len(cancelled) == 1


async def test_a_batch_is_one_frame_with_one_outcome_per_member() -> None:
    async with await connect_memory(build_test_server()) as client:
        async with client.batch() as batch:
            added = batch.index_add(DOCUMENTS)
            missing = batch.call("x-test/notfound")
            pong = batch.ping(nonce="n")
        assert (await added).ids == ["eiffel", "colosseum"]
        assert (await pong).nonce == "n"
        with pytest.raises(Exception, match="no such thing"):
            await missing


async def test_results_go_through_the_wire_codec() -> None:
    async with await connect_memory(build_test_server()) as client:
        assert await client.call("x-test/nan") == {"score": 0.0, "inf": [0.0]}  # §4.6
        with pytest.raises(InternalError):  # what cannot be encoded never reaches the client
            await client.call("x-test/unserialisable")


async def test_shutdown_ends_the_connection_after_answering() -> None:
    async with await connect_memory(build_test_server()) as client:
        assert await client.shutdown() is not None
        while not client.is_closed:  # the server stops reading once shutdown is answered
            await asyncio.sleep(0)
        with pytest.raises(TransportClosed):
            await client.ping()


async def test_closing_answers_the_requests_in_flight_first() -> None:
    client = await connect_memory(build_test_server())
    slow = asyncio.create_task(client.call("x-test/sleep", {"seconds": 0.05}))
    while client.session.in_flight == 0:
        await asyncio.sleep(0)
    await client.close()  # EOF (§5.1): answered, not dropped
    assert (await slow) == {"slept": 0.05}


async def test_log_and_progress_notifications_are_routed() -> None:
    logged: list[dict[str, Any]] = []
    async with await connect_memory(build_test_server(), log_handler=logged.append) as client:
        await client.call("x-test/log")
        await client.index_add(DOCUMENTS)
        events = []
        result = await client.retrieve("paris tower", k=1, on_progress=events.append)
    assert [entry["level"] for entry in logged] == ["info", "warning"]
    assert [hit.id for hit in result.hits] == ["eiffel"]
    assert events and events[-1].progress == 1.0


async def test_the_client_gates_on_the_servers_capabilities() -> None:
    async with await connect_memory(build_test_server()) as client:
        assert isinstance(client, AsyncClient)
        with pytest.raises(UsageError, match="does not advertise"):
            await client.rerank("q", ["a"])


def test_the_blocking_client_connects_in_memory() -> None:
    with Client.connect_memory(build_test_server()) as client:
        client.index_add(DOCUMENTS)
        assert [hit.id for hit in client.retrieve("rome", k=1).hits] == ["colosseum"]
        stream = client.retrieve_stream("paris", k=1)
        assert [event.progress for event in stream][-1] == 1.0
        assert stream.result.hits[0].id == "eiffel"
        with client.batch() as batch:
            pong = batch.ping(nonce=3)
        assert pong.result().nonce == 3


async def test_extra_params_are_sent_as_given_and_named_options_win() -> None:
    async with await connect_memory(build_test_server()) as client:
        sent: list[dict[str, Any]] = []
        transport = client.session.transport
        original = transport.send

        async def recording(frame: dict[str, Any], **kwargs: Any) -> None:
            sent.append(frame)
            await original(frame, **kwargs)

        transport.send = recording  # type: ignore[method-assign]
        await client.retrieve("paris", k=1, candidate_k=5, meta={"idempotencyKey": "k"},
                              extra={"x-acme/boost": 2, "candidateK": 9})
    params = sent[0]["params"]
    assert params["x-acme/boost"] == 2 and params["candidateK"] == 5
    assert params["_meta"] == {"idempotencyKey": "k"} and "extra" not in params
