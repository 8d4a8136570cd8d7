"""Every frame the client writes is valid RCP/1 (normative JSON Schema, §4, §14.4)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from rcpkit.client import connect_stdio, filters
from rcpkit.client.transports import StdioTransport
from support.schema import assert_frame, requires_schema
from support.waiting import until_async


@requires_schema
async def test_client_frames_match_the_schema(scripted: list[str], ref_stdio: list[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []
    original = StdioTransport.send

    async def recording(self: StdioTransport, frame: dict[str, Any], **kwargs: Any) -> None:
        sent.append(orjson.loads(orjson.dumps(frame)))
        await original(self, frame, **kwargs)

    monkeypatch.setattr(StdioTransport, "send", recording)
    async with await connect_stdio(ref_stdio) as client:
        await client.retrieve("paris", k=2, filter=filters.eq("lang", "en"),
                              include_vectors=True, on_progress=lambda event: None)
        await client.embed(["a", "b"], kind="query")
        await client.ping(nonce=1)
        await client.info()
    async with await connect_stdio(scripted) as client:
        task = asyncio.create_task(client.retrieve("sleep:30", deadline_ms=10_000))
        await until_async(lambda: client.session.in_flight, what="the call is in flight")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await client.ping()
    methods = [frame["method"] for frame in sent]
    assert methods[:5] == ["initialize", "retrieve", "embed", "ping", "info"]
    assert "notifications/cancel" in methods
    for frame in sent:
        assert frame["jsonrpc"] == "2.0"
        assert_frame(frame)
