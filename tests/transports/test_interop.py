"""Interop: the reference SDK's client (rcp-protocol, a test dependency) against our server
over stdio and HTTP — initialize, info, ping, a gated call, shutdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rcpkit.transports.http import create_app
from support.example_server import build_test_server
from support.stdio import python_argv

rcp = pytest.importorskip("rcp")

EXAMPLE = str(Path(__file__).resolve().parents[1] / "support" / "example_server.py")


def exercise(client: Any) -> None:
    assert client.server == {"name": "rcpkit-keyword-example", "version": "1.0"}
    assert client.protocol_version == 1
    assert client.supports("retrieve") and not client.supports("embed")
    info = client.info()
    assert info["_meta"]["conformance"] == "L0"
    assert client.ping(nonce="n-1") == {"nonce": "n-1"}
    hits = client.retrieve("json line", k=2)
    assert [hit["id"] for hit in hits] == ["stdio", "rcp"]
    with pytest.raises(rcp.RcpError) as refused:
        client.call("embed", {"inputs": ["x"]})
    assert refused.value.code == -32003
    with pytest.raises(rcp.RcpError) as bad:
        client.call("retrieve", {"query": "x", "k": 0})
    assert bad.value.code == -32602
    client.shutdown()


@pytest.mark.wire
def test_reference_client_over_stdio() -> None:
    exercise(rcp.connect_stdio(python_argv(EXAMPLE)))


@pytest.mark.parametrize("sessions", ["stateless", "single"])
def test_reference_client_over_http(sessions: str, loopback: Any) -> None:
    with loopback(create_app(build_test_server(), sessions=sessions)) as running:
        exercise(rcp.connect_http(running.url + "/rcp"))
