"""The one route decision of the RCP app (``Routing``, §5.2): which requests the server
answers directly (``claim``), and which go to the endpoint over ASGI or to the full
framework (``decide``)."""

from __future__ import annotations

from rcpkit.transports.http.direct import _KEPT_PATHS, Route, Routing

SMALL = {b"content-length": b"40"}


def test_posts_under_the_base_are_direct_when_small_and_buffered() -> None:
    routing = Routing("/rcp", max_body_bytes=100, cors=False)
    for _ in range(2):  # the second time from the kept routes
        assert routing.claim(b"POST", b"/rcp", SMALL) == ""
        assert routing.claim(b"POST", b"/rcp/ping", SMALL) == "ping"
        assert routing.claim(b"POST", b"/rcp/ping", {b"content-length": b"101"}) is None
        assert routing.claim(b"POST", b"/rcp/ping", {}) is None  # chunked
        assert routing.claim(b"POST", b"/rcp/ping",
                             {**SMALL, b"accept": b"text/event-stream"}) is None
        # what the server does not claim, the ASGI entry gives the endpoint
        assert routing.decide(b"POST", "/rcp/ping") == Route("endpoint", "ping")
        assert routing.decide(b"POST", "/rcp") == Route("endpoint", "")


def test_everything_else_is_the_framework() -> None:
    routing = Routing("/rcp", max_body_bytes=100, cors=False)
    for verb, path in ((b"GET", "/rcp/ping"), (b"POST", "/rcp/"), (b"POST", "/rcpx"),
                       (b"POST", "/other"), (b"OPTIONS", "/rcp")):
        assert routing.decide(verb, path) == Route("framework"), (verb, path)
        assert routing.claim(verb, path.encode(), SMALL) is None, (verb, path)
    with_cors = Routing("/rcp", max_body_bytes=100, cors=True)
    assert with_cors.decide(b"POST", "/rcp/ping") == Route("framework")
    assert with_cors.claim(b"POST", b"/rcp/ping", SMALL) is None


def test_made_up_paths_are_decided_alike_once_no_more_are_kept() -> None:
    routing = Routing("/rcp", max_body_bytes=100, cors=False)
    for index in range(_KEPT_PATHS + 10):
        assert routing.claim(b"POST", b"/rcp/x-%d" % index, SMALL) == f"x-{index}"
    assert len(routing._kept) == _KEPT_PATHS
    late = _KEPT_PATHS + 5  # decided afresh each time
    assert routing.claim(b"POST", b"/rcp/x-%d" % late, SMALL) == f"x-{late}"
    assert routing.decide(b"POST", f"/rcp/x-{late}") == Route("endpoint", f"x-{late}")
    assert routing.claim(b"POST", b"/rcp/x-0", {b"content-length": b"500"}) is None


def test_a_raw_target_with_a_query_or_escape_is_left_to_the_asgi_entry() -> None:
    """The server's claim takes the request target as it came (bytes): one with a query or
    an escape is not claimed, and the ASGI entry decides it from the path decoded."""
    routing = Routing("/rcp", max_body_bytes=100, cors=False)
    for _ in range(2):
        for target in (b"/rcp/ping?x=1", b"/rcp/p%69ng", b"/other", b"/rcp/"):
            assert routing.claim(b"POST", target, SMALL) is None, target
    assert routing.decide(b"POST", "/rcp/ping") == Route("endpoint", "ping")


def test_a_length_is_compared_with_the_limit_whatever_its_digits() -> None:
    routing = Routing("/rcp", max_body_bytes=4096, cors=False)
    for length, claimed in ((b"0", True), (b"999", True), (b"4096", True), (b"4097", False),
                            (b"00000040", True), (b"99999", False), (b"-1", False),
                            (b"4x", False)):
        method = routing.claim(b"POST", b"/rcp/ping", {b"content-length": length})
        assert (method == "ping") is claimed and (claimed or method is None), length
