"""The one route decision of the RCP app (``Routing.decide``, §5.2): which requests are
answered directly, through the endpoint over ASGI, or by the full framework."""

from __future__ import annotations

from rcpkit.transports.http.direct import _KEPT_PATHS, Route, Routing

SMALL = {b"content-length": b"40"}


def test_posts_under_the_base_are_direct_when_small_and_buffered() -> None:
    routing = Routing("/rcp", max_body_bytes=100, cors=False)
    assert routing.decide(b"POST", "/rcp", SMALL) == Route("direct", "")
    assert routing.decide(b"POST", "/rcp/ping", SMALL) == Route("direct", "ping")
    assert routing.decide(b"POST", "/rcp/ping", {b"content-length": b"101"}) \
        == Route("endpoint", "ping")
    assert routing.decide(b"POST", "/rcp/ping", {}) == Route("endpoint", "ping")  # chunked
    assert routing.decide(b"POST", "/rcp/ping", {**SMALL, b"accept": b"text/event-stream"}) \
        == Route("endpoint", "ping")
    assert routing.decide(b"POST", "/rcp/ping") == Route("endpoint", "ping")  # any ASGI server


def test_everything_else_is_the_framework() -> None:
    routing = Routing("/rcp", max_body_bytes=100, cors=False)
    for verb, path in ((b"GET", "/rcp/ping"), (b"POST", "/rcp/"), (b"POST", "/rcpx"),
                       (b"POST", "/other"), (b"OPTIONS", "/rcp")):
        assert routing.decide(verb, path, SMALL) == Route("framework"), (verb, path)
    with_cors = Routing("/rcp", max_body_bytes=100, cors=True)
    assert with_cors.decide(b"POST", "/rcp/ping", SMALL) == Route("framework")


def test_made_up_paths_are_decided_alike_once_no_more_are_kept() -> None:
    routing = Routing("/rcp", max_body_bytes=100, cors=False)
    for index in range(_KEPT_PATHS + 10):
        assert routing.decide(b"POST", f"/rcp/x-{index}", SMALL) == Route("direct", f"x-{index}")
    assert len(routing._kept) == _KEPT_PATHS
    late = f"/rcp/x-{_KEPT_PATHS + 5}"  # decided afresh each time
    assert routing.decide(b"POST", late, {b"content-length": b"500"}) \
        == Route("endpoint", late.removeprefix("/rcp/"))
    assert routing.decide(b"POST", "/rcp/x-0", {b"content-length": b"500"}) \
        == Route("endpoint", "x-0")


def test_a_raw_target_is_decided_as_its_path_unless_it_has_a_query_or_escape() -> None:
    """The server's direct claim passes the request target as it came (bytes): a plain one
    gets its path's routes; one with a query or an escape is the framework's here, and the
    ASGI entry decides it from the path decoded."""
    routing = Routing("/rcp", max_body_bytes=100, cors=False)
    for _ in range(2):  # the second time from the kept routes
        assert routing.decide(b"POST", b"/rcp/ping", SMALL) == Route("direct", "ping")
        assert routing.decide(b"POST", b"/rcp", SMALL) == Route("direct", "")
        assert routing.decide(b"POST", b"/rcp/ping", {b"content-length": b"101"}) \
            == Route("endpoint", "ping")
        for target in (b"/rcp/ping?x=1", b"/rcp/p%69ng", b"/other", b"/rcp/"):
            assert routing.decide(b"POST", target, SMALL) == Route("framework"), target


def test_a_length_is_compared_with_the_limit_whatever_its_digits() -> None:
    routing = Routing("/rcp", max_body_bytes=4096, cors=False)
    for length, kind in ((b"0", "direct"), (b"999", "direct"), (b"4096", "direct"),
                         (b"4097", "endpoint"), (b"00000040", "direct"),
                         (b"99999", "endpoint"), (b"-1", "endpoint"), (b"4x", "endpoint")):
        assert routing.decide(b"POST", "/rcp/ping", {b"content-length": length}).kind == kind, \
            length
