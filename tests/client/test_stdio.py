"""The async client over real stdio children: a reference-SDK server and a scripted one."""

from __future__ import annotations

import asyncio
import logging
import shlex
from typing import Any

import numpy as np
import pytest

from rcpkit.client import AsyncClient, RetryPolicy, connect_stdio, filters
from rcpkit.client.transports import StdioTransport
from rcpkit.protocol.errors import (
    CapabilityMissing,
    RateLimited,
    RcpError,
    Timeout,
    TransportClosed,
    UsageError,
    VersionMismatch,
)
from support.waiting import until_async

# ── against the reference SDK (interop) ──────────────────────────────────────


async def test_reference_server_typed_round_trip(ref_stdio: list[str]) -> None:
    async with await connect_stdio(ref_stdio) as client:
        assert client.server.name == "ref-demo"
        assert client.protocol_version == 1
        assert client.conformance == "L1"
        assert client.capabilities.retrieve is not None
        assert client.capabilities.retrieve.max_k == 50
        assert client.capabilities.get("x-ref") == {"version": 1}  # unknown keys kept

        result = await client.retrieve("paris tower", k=2)
        assert [hit.id for hit in result.hits] == ["d1", "d3"]
        assert result.hits[0].score == 2.0
        assert result.hits[0].citation is not None
        assert result.hits[0].citation.uri == "demo://d1"
        assert result.usage is not None and result.usage.candidates == 4

        assert (await client.ping(nonce="n-1")).nonce == "n-1"
        assert (await client.info()).server.name == "ref-demo"


async def test_vectors_are_requested_compact_and_decoded_to_numpy(ref_stdio: list[str]) -> None:
    async with await connect_stdio(ref_stdio) as client:
        embedded = await client.embed(["abcd", "ab"])
        assert embedded.encoding == "f32-base64"  # asked for because it is advertised
        assert isinstance(embedded.vectors, np.ndarray)
        assert embedded.vectors.dtype == np.float32
        assert embedded.vectors.tolist() == [[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]]

        result = await client.retrieve("rome", k=1, include_vectors=True)
        vector = result.hits[0].vector
        assert isinstance(vector, np.ndarray) and vector.shape == (4,)

        explicit = await client.embed(["ab"], encoding="json")
        assert explicit.encoding is None and explicit.vectors.shape == (1, 4)


async def test_advertised_bounds_are_respected(ref_stdio: list[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    async with await connect_stdio(ref_stdio) as client:
        sent: list[tuple[str, dict[str, Any]]] = []
        request = client.session.request

        async def recording(method: str, params: dict[str, Any], **kwargs: Any) -> Any:
            sent.append((method, params))
            return await request(method, params, **kwargs)

        monkeypatch.setattr(client.session, "request", recording)
        texts = ["a", "bb", "ccc", "dddd", "eeeee"]
        batched = await client.embed(texts)  # batchLimit 2 → 3 requests
        assert [len(params["inputs"]) for _, params in sent] == [2, 2, 1]
        one_by_one = [(await client.embed([text])).vectors[0].tolist() for text in texts]
        assert batched.vectors.tolist() == one_by_one

        sent.clear()
        await client.retrieve("paris", k=500)
        assert sent[0][1]["k"] == 50  # pre-clamped to maxK (§4.7)


async def test_gating_fails_locally_before_any_io(ref_stdio: list[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    async with await connect_stdio(ref_stdio) as client:
        async def no_io(*args: object, **kwargs: object) -> None:
            raise AssertionError("gating must fail before any I/O")

        monkeypatch.setattr(client.session.transport, "send", no_io)
        misuses = [
            client.rerank("q", ["a"]),                               # method not advertised
            client.retrieve("q", mode="dense"),                      # option value not advertised
            client.retrieve("q", filter=filters.eq("year", 2020)),   # field not advertised
            client.retrieve("q", k=5, candidate_k=2),                # §3.3 funnel
            client.retrieve("q", k=0),                               # malformed params
            client.call("x-other/thing"),                            # vendor not advertised
            client.call("frobnicate"),                               # not an RCP method
        ]
        for misuse in misuses:
            with pytest.raises(UsageError):
                await misuse
        assert client.session.in_flight == 0


async def test_filter_builder_is_sent_in_wire_form(ref_stdio: list[str]) -> None:
    async with await connect_stdio(ref_stdio) as client:
        result = await client.retrieve("paris", k=3, filter=filters.eq("lang", "en"))
        assert result.hits  # the reference server ignores filters; the call is well-formed


async def test_strict_false_sends_unadvertised_calls(ref_stdio: list[str]) -> None:
    async with await connect_stdio(ref_stdio, strict=False) as client:
        with pytest.raises(CapabilityMissing):  # the server's -32003, not a local error
            await client.rerank("q", ["a"])


async def test_negotiated_version_below_minimum_aborts(ref_stdio: list[str]) -> None:
    with pytest.raises(VersionMismatch, match="minimum RCP/2"):
        await connect_stdio(ref_stdio, min_version=2)


@pytest.mark.wire
async def test_spawn_failure_is_a_clear_error() -> None:
    with pytest.raises(RcpError, match="cannot start the server"):
        await connect_stdio(["/nonexistent/rcp-server"])


# ── against the scripted server ──────────────────────────────────────────────


async def test_many_requests_in_flight_are_correlated_by_id(scripted: list[str]) -> None:
    async with await connect_stdio(scripted) as client:
        queries = [f"sleep:{0.02 * (10 - i)}" for i in range(10)]  # answers arrive reversed
        results = await asyncio.gather(*(client.retrieve(q, k=2) for q in queries))
        assert [result.hits[0].id for result in results] == queries


async def test_unknown_fields_notifications_and_error_codes_are_tolerated(
        scripted: list[str]) -> None:
    async with await connect_stdio(scripted) as client:
        assert client.capabilities.get("x-future-cap") == {"n": 1}
        events = []
        with pytest.raises(RcpError) as caught:
            await client.retrieve("weird", on_progress=events.append)
        assert caught.value.code == -31950
        assert caught.value.data == {"why": "x"}
        assert [event.progress for event in events] == [None]  # malformed frame tolerated
        assert (await client.retrieve("plain")).hits[0].id == "plain"


async def _cancels_seen(client: AsyncClient, request_id: int) -> bool:
    for _ in range(100):
        if request_id in (await client.call("x-test/cancels"))["ids"]:
            return True
        await asyncio.sleep(0.02)
    return False


async def test_cancelling_the_task_sends_notifications_cancel(scripted: list[str]) -> None:
    async with await connect_stdio(scripted) as client:
        task = asyncio.create_task(client.retrieve("sleep:30"))
        await until_async(lambda: client.session.in_flight, what="the call is in flight")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await _cancels_seen(client, 2)  # initialize was request 1
        assert client.session.in_flight == 0


async def test_late_result_after_cancel_is_discarded(scripted: list[str]) -> None:
    async with await connect_stdio(scripted) as client:
        task = asyncio.create_task(client.retrieve("stubborn:0.3"))
        await until_async(lambda: client.session.in_flight, what="the call is in flight")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until_async(lambda: client.session.late_responses, what="the late answer")
        assert client.session.late_responses == 1
        assert (await client.retrieve("still-usable")).hits[0].id == "still-usable"


async def test_deadline_propagates_and_expires_locally(scripted: list[str]) -> None:
    async with await connect_stdio(scripted) as client:
        fast = await client.retrieve("plain", deadline_ms=5000)
        received = (fast.meta or {})["received"]
        assert 0 < received["deadlineMs"] <= 5000

        with pytest.raises(Timeout, match="client side"):
            await client.retrieve("stubborn:0.4", deadline_ms=100)
        await until_async(lambda: client.session.late_responses, what="the late answer")
        assert client.session.late_responses == 1  # the late answer was correlated, dropped


async def test_server_death_fails_every_in_flight_request_at_once(scripted: list[str]) -> None:
    client = await connect_stdio(scripted)
    try:
        slow = [asyncio.create_task(client.retrieve("sleep:30")) for _ in range(3)]
        await until_async(lambda: client.session.in_flight == 3, what="3 calls in flight")
        outcomes = await asyncio.gather(*slow, client.retrieve("die"), return_exceptions=True)
        assert all(isinstance(outcome, TransportClosed) for outcome in outcomes)
        assert "exited with code 3" in str(outcomes[0])
        assert "scripted server starting" in str(outcomes[0])  # stderr tail
        with pytest.raises(TransportClosed):
            await client.ping()
    finally:
        await client.close()


async def test_rate_limited_calls_are_retried_with_the_hint(scripted: list[str]) -> None:
    async with await connect_stdio(scripted) as client:
        result = await client.retrieve("ratelimit:2")
        assert result.usage is not None and result.usage.notes == ["attempt 3"]
    async with await connect_stdio(scripted, retry=RetryPolicy(max_attempts=2)) as client:
        with pytest.raises(RateLimited) as caught:
            await client.retrieve("ratelimit:5")
        assert caught.value.retry_after_ms == 30


async def test_progress_callback_and_stream_over_stdio(scripted: list[str]) -> None:
    async with await connect_stdio(scripted) as client:
        events = []
        result = await client.retrieve("progress", on_progress=events.append)
        assert [event.progress for event in events] == [0.25, 0.5, 0.75]  # foreign token ignored
        assert [event.hits[0].id for event in events if event.hits] == ["p0", "p1", "p2"]
        assert result.hits[0].id == "progress"

        stream = client.retrieve_stream("progress", k=3)
        streamed = [event.stage async for event in stream]
        assert streamed == ["recall"] * 3
        assert stream.result.hits[0].id == "progress"


async def test_a_failing_stream_raises_from_iteration_and_result(scripted: list[str]) -> None:
    async with await connect_stdio(scripted) as client:
        stream = client.retrieve_stream("weird")
        with pytest.raises(RcpError, match="vendor failure"):
            async for _ in stream:
                pass
        with pytest.raises(RcpError, match="vendor failure"):
            _ = stream.result


async def test_log_notifications_reach_the_handler(scripted: list[str],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    received = []
    async with await connect_stdio(scripted, log_handler=received.append) as client:
        await client.retrieve("log")
    assert received[0]["message"] == "disk almost full"

    with caplog.at_level(logging.WARNING, logger="rcpkit.client.server"):
        async with await connect_stdio(scripted) as client:
            await client.retrieve("log")
    assert "store: disk almost full" in caplog.text


async def test_stderr_is_drained_so_the_child_never_blocks(scripted: list[str]) -> None:
    env = {"SCRIPTED_STDERR_BYTES": str(1 << 20)}  # 1 MiB: far more than a pipe buffer
    async with await connect_stdio(scripted, env=env, timeout=20) as client:
        assert (await client.ping()).nonce is None
        transport = client.session.transport
        assert isinstance(transport, StdioTransport)
        assert transport.stderr_tail[-1] == "x" * 99


async def test_close_terminates_a_child_that_ignores_eof(scripted: list[str]) -> None:
    transport = StdioTransport([*scripted], env={"SCRIPTED_IGNORE_EOF": "1"}, stop_grace_s=0.3)
    client = await AsyncClient.open(transport)
    assert transport.returncode is None
    await client.close()
    assert transport.returncode is not None  # stdin closed → wait → terminate → kill
    with pytest.raises(TransportClosed):
        await client.ping()


async def test_string_argv_is_split_like_a_shell(ref_stdio: list[str]) -> None:
    async with await connect_stdio(shlex.join(ref_stdio)) as client:
        assert client.server.name == "ref-demo"
