"""The table of a collections server (§5.2, §7.13): which endpoint answers each path, from
one ``dict[str, Endpoint]`` of the collections, for the in-house server's claim and the
ASGI entry alike."""

from __future__ import annotations

from rcpkit.server.example import build_server
from rcpkit.tenancy.app import CollectionEndpoints
from rcpkit.transports.http.endpoint import open_endpoint

SMALL = {b"content-length": b"40"}


def test_each_path_finds_its_collection_the_stand_in_or_the_servers_own_endpoint() -> None:
    root, alpha, missing = (open_endpoint(build_server()) for _ in range(3))
    table = CollectionEndpoints("/rcp", root, {"alpha": alpha}, missing)
    expected = {"/rcp": (root, ""), "/rcp/info": (root, "info"),
                "/rcp/catalog/list": (root, "catalog/list"), "/rcp/x-test/sleep":
                (root, "x-test/sleep"), "/rcp/alpha": (alpha, ""),
                "/rcp/alpha/retrieve": (alpha, "retrieve"), "/rcp/alpha/": (alpha, ""),
                "/rcp/gamma/retrieve": (missing, "retrieve"), "/rcp/-": (missing, "")}
    for path, route in expected.items():
        assert table.find("POST", path) == route, path
        assert table.claim(b"POST", path.encode(), SMALL) == route, path
    for verb, path in (("GET", "/rcp/alpha/retrieve"), ("POST", "/other"), ("POST", "/rcpx")):
        assert table.find(verb, path) is None, (verb, path)
        assert table.claim(verb.encode(), path.encode(), SMALL) is None, (verb, path)
