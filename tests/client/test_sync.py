"""The blocking facade delegates to the async client (same behaviour, no duplicated bodies)."""

from __future__ import annotations

import asyncio
import inspect
import pydoc
import typing

import pytest

from rcpkit.client import AsyncClient, BlockingBatch, Client
from rcpkit.protocol.errors import TransportClosed, UsageError
from rcpkit.protocol.types import GraphResult, IndexAddResult, PingResult, RetrieveResult


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


@pytest.mark.parametrize(("name", "result"), [("retrieve", RetrieveResult),
                                              ("graph", GraphResult),
                                              ("index_add", IndexAddResult),
                                              ("ping", PingResult), ("notify", type(None))])
def test_blocking_signatures_show_what_the_call_returns(name: str, result: type) -> None:
    method = getattr(Client, name)
    assert inspect.signature(method).return_annotation is result
    assert typing.get_type_hints(method)["return"] is result
    shown = pydoc.render_doc(method, renderer=pydoc.plaintext)
    assert "Awaitable" not in shown
    # Same parameters as the async method it runs.
    assert inspect.signature(method).parameters == \
        inspect.signature(getattr(AsyncClient, name)).parameters
    # A queued batch call gives back a future of the same result.
    if hasattr(BlockingBatch, name) and name != "notify":
        assert typing.get_type_hints(getattr(BlockingBatch, name))["return"] == \
            asyncio.Future[result]


def test_blocking_connectors_return_a_client() -> None:
    for connect in (Client.connect_stdio, Client.connect_http, Client.connect_memory):
        assert typing.get_type_hints(connect)["return"] is Client
        assert "Coroutine" not in pydoc.render_doc(connect, renderer=pydoc.plaintext)
