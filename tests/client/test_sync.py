"""The blocking facade delegates to the async client (same behaviour, no duplicated bodies)."""

from __future__ import annotations

import pytest

from rcpkit.client import AsyncClient, Client
from rcpkit.protocol.errors import TransportClosed, UsageError


def test_sync_client_round_trip(ref_stdio: list[str]) -> None:
    with Client.connect_stdio(ref_stdio) as client:
        assert isinstance(client.aio, AsyncClient)
        assert client.server.name == "ref-demo"
        assert client.capabilities.has("retrieve")
        assert [hit.id for hit in client.retrieve("paris", k=2).hits] == ["d1", "d3"]
        assert client.ping(nonce=5).nonce == 5
        with pytest.raises(UsageError):
            client.rerank("q", ["a"])


def test_sync_stream_iterates_progress_then_result(scripted: list[str]) -> None:
    with Client.connect_stdio(scripted) as client:
        stream = client.retrieve_stream("progress")
        assert [event.progress for event in stream] == [0.25, 0.5, 0.75]
        assert stream.result.hits[0].id == "progress"


def test_sync_close_is_idempotent_and_final(scripted: list[str]) -> None:
    client = Client.connect_stdio(scripted)
    client.close()
    client.close()
    with pytest.raises(TransportClosed, match="closed"):
        client.ping()


def test_sync_connect_failure_raises_and_cleans_up(ref_stdio: list[str]) -> None:
    with pytest.raises(Exception, match="minimum RCP/2"):
        Client.connect_stdio(ref_stdio, min_version=2)
