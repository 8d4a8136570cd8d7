"""The OpenRPC documents of a collections server over loopback HTTP: each collection's at
``<base>/<name>/openrpc.json`` behind that collection's gate, a hidden collection's answering
exactly like a missing one's (§15.6), and the server's own endpoint's at ``<base>``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.http import LOOPBACK_KINDS
from tenancy.test_http_collections import Deployment, Tenant


@pytest.fixture(params=LOOPBACK_KINDS)
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path, request.param)
    yield made
    made.close()


def _names(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {method["name"] for method in response.json()["methods"]}


def test_each_collection_documents_its_methods_to_who_may_see_it(
        deployment: Deployment) -> None:
    alice = deployment.key("alice", "alpha:read")
    bob = deployment.key("bob", "beta:read,write")
    for _app, client in deployment.serve():
        reader, other = Tenant(client, alice), Tenant(client, bob)
        names = _names(client.get("/rcp/alpha/openrpc.json", headers=reader.headers))
        advertised = reader.ok("/rcp/alpha", "info")["capabilities"]
        assert "retrieve" in names and ("index/add" in names) == ("index" in advertised)
        assert "catalog/list" not in names
        hidden = client.get("/rcp/alpha/openrpc.json", headers=other.headers)
        missing = client.get("/rcp/gamma/openrpc.json", headers=other.headers)
        assert hidden.status_code == missing.status_code == 403
        assert hidden.content == missing.content
        anonymous = [client.get(f"/rcp/{name}/openrpc.json") for name in ("alpha", "gamma")]
        assert [answer.status_code for answer in anonymous] == [401, 401]
        assert anonymous[0].content == anonymous[1].content
        own = _names(client.get("/rcp/openrpc.json", headers=reader.headers))
        assert own == {"initialize", "info", "ping", "shutdown", "notifications/cancel",
                       "catalog/list"}
        assert client.get("/rcp/openrpc.json").status_code == 401
