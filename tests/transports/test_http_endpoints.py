"""The one table of which endpoint answers a POST (``Endpoints``, §5.2): which requests the
in-house server reads whole and hands to an endpoint (``claim``), which ones the ASGI
adapter hands it (``find``), and which are the framework's (None from both)."""

from __future__ import annotations

from typing import Any

from rcpkit.server.example import build_server
from rcpkit.transports.http.endpoint import _KEPT_PATHS, Endpoint, Endpoints, open_endpoint

SMALL = {b"content-length": b"40"}


def _table(max_body_bytes: int = 100, *, cors: bool = False) -> Endpoints:
    endpoints = Endpoints("/rcp", open_endpoint(build_server(), max_body_bytes=max_body_bytes))
    endpoints.cors = cors
    return endpoints


def _method(route: tuple[Endpoint, str] | None) -> str | None:
    return None if route is None else route[1]


def test_posts_under_the_base_are_direct_when_small_and_buffered() -> None:
    routing = _table()
    root = routing.root
    for _ in range(2):  # the second time from the kept routes
        assert routing.claim(b"POST", b"/rcp", SMALL) == (root, "")
        assert routing.claim(b"POST", b"/rcp/ping", SMALL) == (root, "ping")
        assert routing.claim(b"POST", b"/rcp/ping", {b"content-length": b"101"}) is None
        assert routing.claim(b"POST", b"/rcp/ping", {}) is None  # chunked
        assert routing.claim(b"POST", b"/rcp/ping",
                             {**SMALL, b"accept": b"text/event-stream"}) is None
        # what the server does not claim, the ASGI entry gives the endpoint
        assert routing.find("POST", "/rcp/ping") == (root, "ping")
        assert routing.find("POST", "/rcp") == (root, "")


def test_everything_else_is_the_framework() -> None:
    routing = _table()
    for verb, path in (("GET", "/rcp/ping"), ("POST", "/rcp/"), ("POST", "/rcpx"),
                       ("POST", "/other"), ("OPTIONS", "/rcp")):
        assert routing.find(verb, path) is None, (verb, path)
        assert routing.claim(verb.encode(), path.encode(), SMALL) is None, (verb, path)
    with_cors = _table(cors=True)
    assert with_cors.find("POST", "/rcp/ping") is None
    assert with_cors.claim(b"POST", b"/rcp/ping", SMALL) is None


def test_made_up_paths_are_decided_alike_once_no_more_are_kept() -> None:
    routing = _table()
    for index in range(_KEPT_PATHS + 10):
        assert _method(routing.claim(b"POST", b"/rcp/x-%d" % index, SMALL)) == f"x-{index}"
    assert len(routing._kept) == _KEPT_PATHS
    late = _KEPT_PATHS + 5  # decided afresh each time
    assert _method(routing.claim(b"POST", b"/rcp/x-%d" % late, SMALL)) == f"x-{late}"
    assert _method(routing.find("POST", f"/rcp/x-{late}")) == f"x-{late}"
    assert routing.claim(b"POST", b"/rcp/x-0", {b"content-length": b"500"}) is None


def test_a_raw_target_with_a_query_or_escape_is_left_to_the_asgi_entry() -> None:
    """The server's claim takes the request target as it came (bytes): one with a query or
    an escape is not claimed, and the ASGI entry decides it from the path decoded."""
    routing = _table()
    for _ in range(2):
        for target in (b"/rcp/ping?x=1", b"/rcp/p%69ng", b"/other", b"/rcp/"):
            assert routing.claim(b"POST", target, SMALL) is None, target
    assert _method(routing.find("POST", "/rcp/ping")) == "ping"


def test_a_length_is_compared_with_the_limit_whatever_its_digits() -> None:
    routing = _table(4096)
    for length, claimed in ((b"0", True), (b"999", True), (b"4096", True), (b"4097", False),
                            (b"00000040", True), (b"99999", False), (b"-1", False),
                            (b"4x", False)):
        method = _method(routing.claim(b"POST", b"/rcp/ping", {b"content-length": length}))
        assert (method == "ping") is claimed and (claimed or method is None), length


def test_each_endpoint_keeps_its_own_body_limit() -> None:
    """A table routing to several endpoints (collections) checks a declared length against
    the limit of the endpoint the path names."""
    class Two(Endpoints):
        def locate(self, path: str) -> Any:
            return (self.big, path) if path == "/big" else super().locate(path)

    table = Two("/rcp", open_endpoint(build_server(), max_body_bytes=100))
    table.big = open_endpoint(build_server(), max_body_bytes=10_000)  # type: ignore[attr-defined]
    assert table.claim(b"POST", b"/rcp/ping", {b"content-length": b"5000"}) is None
    assert _method(table.claim(b"POST", b"/big", {b"content-length": b"5000"})) == "/big"
