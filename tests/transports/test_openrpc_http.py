"""``GET <base>/openrpc.json`` over loopback HTTP (:mod:`rcpkit.transports.http.discovery`):
behind the endpoint's credentials (§5.2, §15.6), the methods the server advertises and
serves, and the RCP method set unchanged (``rpc.discover`` stays unknown, -32004)."""

from __future__ import annotations

import httpx

from rcpkit.server.example import build_server
from rcpkit.transports.http import create_app
from transports.conftest import Loopback

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_the_document_needs_the_endpoints_credentials(loopback: Loopback) -> None:
    with loopback(create_app(build_server(), auth_tokens=[TOKEN])) as srv:
        refused = httpx.get(f"{srv.url}/rcp/openrpc.json")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == -32012
        wrong = httpx.get(f"{srv.url}/rcp/openrpc.json", headers={"Authorization": "Bearer x"})
        assert wrong.status_code == 401
        served = httpx.get(f"{srv.url}/rcp/openrpc.json", headers=AUTH)
        assert served.status_code == 200
        assert served.headers["content-type"] == "application/json"
        document = served.json()
        assert document["info"]["title"] == "rcpkit-keyword-example"
        assert document["servers"] == [{"name": "rcpkit-keyword-example",
                                        "url": f"{srv.url}/rcp"}]
        assert {method["name"] for method in document["methods"]} == {
            "initialize", "info", "ping", "shutdown", "notifications/cancel",
            "retrieve", "index/add", "index/delete"}


def test_only_advertised_and_served_methods_are_listed(loopback: Loopback) -> None:
    server = build_server()
    server.capability("rerank", {"methods": ["x"]})  # advertised, but no handler
    server.capability("index", {"writable": False})  # index/add is unavailable (§7 roster)
    server.capability("x-acme", {})
    server.add_method("x-acme/echo", lambda params, ctx: params)
    with loopback(create_app(server, base="/api/rcp")) as srv:
        document = httpx.get(f"{srv.url}/api/rcp/openrpc.json").json()
        names = {method["name"] for method in document["methods"]}
        assert "retrieve" in names and "index/delete" in names and "x-acme/echo" in names
        assert "rerank" not in names and "index/add" not in names
        # a POST there is still an RCP request (§5.2), naming no RCP method
        frame = {"jsonrpc": "2.0", "id": 1, "method": "openrpc.json"}
        posted = httpx.post(f"{srv.url}/api/rcp/openrpc.json", json=frame)
        assert posted.json()["error"]["code"] == -32004
        assert httpx.get(f"{srv.url}/api/rcp/retrieve").status_code == 405


def test_rpc_discover_stays_an_unknown_method(loopback: Loopback) -> None:
    frame = {"jsonrpc": "2.0", "id": 1, "method": "rpc.discover"}
    with loopback(create_app(build_server())) as srv:
        reply = httpx.post(f"{srv.url}/rcp", json=frame)
        assert reply.status_code == 200 and reply.json()["error"]["code"] == -32004


def test_a_browser_page_of_an_allowed_origin_may_fetch_it(loopback: Loopback) -> None:
    """CORS: the preflight of a GET with credentials passes, and the answer names the origin
    (an API explorer in a page fetches the document)."""
    origin = {"Origin": "https://app.example"}
    app = create_app(build_server(), auth_tokens=[TOKEN], cors_origins=["https://app.example"])
    with loopback(app) as srv:
        preflight = httpx.options(f"{srv.url}/rcp/openrpc.json", headers={
            **origin, "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization"})
        assert preflight.status_code == 200
        assert "GET" in preflight.headers["access-control-allow-methods"]
        fetched = httpx.get(f"{srv.url}/rcp/openrpc.json", headers={**origin, **AUTH})
        assert fetched.status_code == 200 and fetched.json()["methods"]
        assert fetched.headers["access-control-allow-origin"] == "https://app.example"
