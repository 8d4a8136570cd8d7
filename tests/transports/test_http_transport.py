"""HTTP transport on real loopback servers, uvicorn and the lean one (§5.2)."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from rcpkit.transports.http import create_app
from support.clock import FakeClock
from support.example_server import build_test_server
from support.schema import assert_frame
from support.waiting import until


def rpc(method: str, params: Any = None, id_: Any = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        message["id"] = id_
    if params is not None:
        message["params"] = params
    return message


def body(response: httpx.Response) -> Any:
    assert response.headers["content-type"].startswith("application/json")
    decoded = response.json()
    assert_frame(decoded)
    return decoded


@pytest.fixture
def serve(loopback: Any) -> Iterator[Any]:
    """``serve(**create_app_options)`` → an httpx client bound to a fresh loopback server."""
    stack: list[tuple[Any, httpx.Client]] = []

    def start(server: Any = None, **options: Any) -> httpx.Client:
        running = loopback(create_app(server or build_test_server(), **options))
        running.__enter__()
        client = httpx.Client(base_url=running.url, timeout=30)
        stack.append((running, client))
        return client

    yield start
    for running, client in stack:
        client.close()
        running.__exit__(None, None, None)


def post(client: httpx.Client, message: Any, path: str | None = None,
         **kw: Any) -> httpx.Response:
    if path is None:
        path = "/rcp/" + message["method"] if isinstance(message, dict) else "/rcp"
    return client.post(path, content=json.dumps(message).encode(),
                       headers={"content-type": "application/json", **kw.pop("headers", {})},
                       **kw)


def test_status_mapping(serve: Any) -> None:
    client = serve(max_body_bytes=2000)
    ok = post(client, rpc("ping", {"nonce": 4}))
    assert ok.status_code == 200 and body(ok)["result"] == {"nonce": 4}
    error = post(client, rpc("embed", {"inputs": ["a"]}))
    assert error.status_code == 200 and body(error)["error"]["code"] == -32003
    assert post(client, rpc("notifications/cancel", {"id": 1}, id_=None)).status_code == 204
    only_notes = post(client, [rpc("notifications/x", id_=None)] * 2)
    assert only_notes.status_code == 204 and only_notes.content == b""
    bad = client.post("/rcp", content=b"{oops")
    assert bad.status_code == 400 and body(bad)["error"]["code"] == -32700
    assert client.post("/elsewhere", content=b"{}").status_code == 404
    assert client.get("/rcp/ping").status_code == 405
    big = post(client, rpc("ping", {"pad": "x" * 5000}))
    assert big.status_code == 413 and body(big)["error"]["code"] == -32013
    mismatch = post(client, rpc("ping", id_="m"), path="/rcp/info")
    assert mismatch.status_code == 200 and body(mismatch)["error"]["code"] == -32600
    assert body(mismatch)["id"] == "m"
    unknown = post(client, rpc("bogus/thing"))
    assert unknown.status_code == 200 and body(unknown)["error"]["code"] == -32004


def test_batches_and_single_messages_at_base(serve: Any) -> None:
    client = serve()
    single = post(client, rpc("ping", id_="b"), path="/rcp")
    assert body(single)["id"] == "b"
    batch = post(client, [rpc("ping", id_=1), rpc("retrieve", {"query": "json", "k": 1}, id_=2),
                          rpc("notifications/x", id_=None), 5])
    replies = body(batch)
    assert sorted(str(r["id"]) for r in replies) == ["1", "2", "None"]
    empty = post(client, [])
    assert empty.status_code == 200 and body(empty)["error"]["code"] == -32600
    assert body(post(client, [rpc("ping")], path="/rcp/ping"))["error"]["code"] == -32600


def test_stateless_sessions(serve: Any) -> None:
    client = serve()
    assert "hits" in body(post(client, rpc("retrieve", {"query": "json", "k": 1})))["result"]
    for _ in range(2):
        init = body(post(client, rpc("initialize", {"protocolVersion": 1})))
        assert init["result"]["_meta"] == {"conformance": "L0"}
    assert body(post(client, rpc("initialize", {"protocolVersion": 0})))["error"]["code"] \
        == -32002


def test_token_sessions(serve: Any) -> None:
    clock = FakeClock()
    client = serve(sessions="token", session_ttl_s=0.5, clock=clock)
    assert body(post(client, rpc("retrieve", {"query": "a", "k": 1})))["error"]["code"] == -32001
    init = body(post(client, rpc("initialize", {"protocolVersion": 1})))
    token = init["result"]["_meta"]["session"]
    headers = {"RCP-Session": token}
    reply = body(post(client, rpc("retrieve", {"query": "json", "k": 1}), headers=headers))
    assert "hits" in reply["result"]
    again = body(post(client, rpc("initialize", {"protocolVersion": 1}), headers=headers))
    assert again["error"]["code"] == -32600
    stranger = body(post(client, rpc("retrieve", {"query": "a", "k": 1}),
                         headers={"RCP-Session": "forged"}))
    assert stranger["error"]["code"] == -32001 and "detail" in stranger["error"]["data"]
    assert body(post(client, rpc("ping"), headers={"RCP-Session": "forged"}))["result"] == {}
    # a second client gets its own session
    other = body(post(client, rpc("initialize", {"protocolVersion": 1})))
    assert other["result"]["_meta"]["session"] != token
    # shutdown ends the session
    assert body(post(client, rpc("shutdown"), headers=headers))["result"] == {}
    ended = body(post(client, rpc("retrieve", {"query": "a", "k": 1}), headers=headers))
    assert ended["error"]["code"] == -32001
    # idle sessions expire
    other_headers = {"RCP-Session": other["result"]["_meta"]["session"]}
    clock.advance(0.7)
    expired = body(post(client, rpc("retrieve", {"query": "a", "k": 1}), headers=other_headers))
    assert expired["error"]["code"] == -32001


def _session(client: Any) -> dict[str, str]:
    init = body(post(client, rpc("initialize", {"protocolVersion": 1})))
    return {"RCP-Session": init["result"]["_meta"]["session"]}


def test_an_initialize_flood_does_not_lock_out_sessions_in_use(serve: Any) -> None:
    client = serve(sessions="token", max_sessions=20)
    user = _session(client)
    assert "hits" in body(post(client, rpc("retrieve", {"query": "json", "k": 1}),
                               headers=user))["result"]
    flood = [post(client, rpc("initialize", {"protocolVersion": 1})) for _ in range(60)]
    assert [reply.status_code for reply in flood] == [200] * 60  # never-used ones make room
    assert "hits" in body(post(client, rpc("retrieve", {"query": "json", "k": 1}),
                               headers=user))["result"]
    newest = {"RCP-Session": body(flood[-1])["result"]["_meta"]["session"]}
    assert "hits" in body(post(client, rpc("retrieve", {"query": "json", "k": 1}),
                               headers=newest))["result"]
    evicted = {"RCP-Session": body(flood[0])["result"]["_meta"]["session"]}
    assert body(post(client, rpc("retrieve", {"query": "a", "k": 1}),
                     headers=evicted))["error"]["code"] == -32001


def test_session_cap_with_every_session_busy_sheds_newcomers_truthfully(serve: Any) -> None:
    clock = FakeClock()
    client = serve(sessions="token", max_sessions=1, clock=clock)
    member = _session(client)
    assert "hits" in body(post(client, rpc("retrieve", {"query": "json", "k": 1}),
                               headers=member))["result"]
    newcomer = post(client, rpc("initialize", {"protocolVersion": 1}))
    assert newcomer.status_code == 429 and body(newcomer)["error"]["code"] == -32011
    wait_ms = body(newcomer)["error"]["data"]["retryAfterMs"]
    assert 0 < wait_ms <= 5000
    assert newcomer.headers["retry-after"] == str(math.ceil(wait_ms / 1000))
    clock.advance(math.ceil(wait_ms / 1000))  # what the advice says; the member stayed idle
    later = post(client, rpc("initialize", {"protocolVersion": 1}))
    assert later.status_code == 200, later.headers


def test_single_session(serve: Any) -> None:
    client = serve(sessions="single")
    assert body(post(client, rpc("retrieve", {"query": "a", "k": 1})))["error"]["code"] == -32001
    assert "result" in body(post(client, rpc("initialize", {"protocolVersion": 1})))
    assert "hits" in body(post(client, rpc("retrieve", {"query": "json", "k": 1})))["result"]
    assert body(post(client, rpc("initialize", {"protocolVersion": 1})))["error"]["code"] \
        == -32600
    assert body(post(client, rpc("shutdown")))["result"] == {}
    assert body(post(client, rpc("retrieve", {"query": "a", "k": 1})))["error"]["code"] == -32001
    assert "result" in body(post(client, rpc("initialize", {"protocolVersion": 1})))


def test_auth_before_anything(serve: Any) -> None:
    client = serve(auth_tokens=["s3cret"], api_key_header="X-API-Key")
    for message in (rpc("info"), rpc("initialize", {"protocolVersion": 1}), rpc("ping")):
        refused = post(client, message)
        assert refused.status_code == 401
        assert body(refused)["error"]["code"] == -32012
        assert "capabilities" not in refused.text
    wrong = post(client, rpc("info"), headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    # even an unparseable body is refused by auth first
    assert client.post("/rcp", content=b"{").status_code == 401
    good = post(client, rpc("info"), headers={"Authorization": "Bearer s3cret"})
    assert good.status_code == 200 and "capabilities" in body(good)["result"]
    by_key = post(client, rpc("info"), headers={"X-API-Key": "s3cret"})
    assert by_key.status_code == 200


def test_sse_progress_then_one_final_frame(serve: Any) -> None:
    client = serve()
    message = rpc("x-test/busy", {"seconds": 0.1, "_meta": {"progressToken": "tok"}}, id_=8)
    response = post(client, message, headers={"Accept": "text/event-stream"})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = response.text.split("\n\n")
    assert events[-1] == ""
    frames = []
    for event in events[:-1]:
        assert event.startswith("data: ") and "\n" not in event
        frames.append(json.loads(event[len("data: "):]))
    for frame in frames:
        assert_frame(frame)
    assert all(f["method"] == "notifications/progress" for f in frames[:-1]) and len(frames) > 1
    assert frames[-1] == {"jsonrpc": "2.0", "id": 8, "result": {"done": True}}
    # without the Accept header: one buffered JSON response
    plain = post(client, message)
    assert body(plain) == {"jsonrpc": "2.0", "id": 8, "result": {"done": True}}


def test_a_stream_whose_client_left_is_cancelled(loopback: Any) -> None:
    """An SSE call keeps running only while someone reads it: a disconnect cancels the
    handler (here a 30 s sleep) instead of letting it finish for nobody."""
    cancelled: list[Any] = []
    with loopback(create_app(build_test_server(cancelled=cancelled))) as running:
        message = json.dumps(rpc("x-test/sleep", {"seconds": 30, "_meta": {"progressToken": "p"}},
                                 id_="gone")).encode()
        with httpx.Client(base_url=running.url, timeout=30) as client, client.stream(
                "POST", "/rcp/x-test/sleep", content=message,
                headers={"content-type": "application/json",
                         "accept": "text/event-stream"}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            first = next(response.iter_lines())
            assert json.loads(first.removeprefix("data: "))["method"] == "notifications/progress"
        until(lambda: cancelled == ["gone"], what="the abandoned stream kept running")


def test_no_sse_without_streaming_capability(serve: Any) -> None:
    client = serve(build_test_server(streaming=False))
    message = rpc("x-test/busy", {"seconds": 0.01, "_meta": {"progressToken": "tok"}})
    response = post(client, message, headers={"Accept": "text/event-stream"})
    assert body(response)["result"] == {"done": True}


def test_load_shedding_429(loopback: Any) -> None:
    with loopback(create_app(build_test_server(), max_pending=1)) as running, \
            httpx.Client(base_url=running.url, timeout=30) as client:
        slow = threading.Thread(target=post, args=(client, rpc("x-test/sleep", {"seconds": 1})))
        slow.start()
        running.wait_in_flight()
        with httpx.Client(base_url=running.url) as second:
            shed = post(second, rpc("ping"))
        slow.join()
    assert shed.status_code == 429 and shed.headers["retry-after"] == "1"
    assert body(shed)["error"]["code"] == -32011


def test_cors_preflight(serve: Any) -> None:
    client = serve(cors_origins=["https://app.example"])
    preflight = client.options("/rcp/ping", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,rcp-session"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    actual = post(client, rpc("ping"), headers={"Origin": "https://app.example"})
    assert actual.headers["access-control-allow-origin"] == "https://app.example"


def test_keep_alive_and_graceful_shutdown(loopback: Any) -> None:
    running = loopback(create_app(build_test_server()))
    outcome: list[httpx.Response] = []

    def slow_call() -> None:
        with httpx.Client(base_url=running.url, timeout=30) as own:
            outcome.append(post(own, rpc("x-test/sleep", {"seconds": 0.5})))

    with running:
        with httpx.Client(base_url=running.url) as client:
            for _ in range(3):
                assert post(client, rpc("ping")).headers.get("connection") != "close"
        slow = threading.Thread(target=slow_call)
        slow.start()
        running.wait_in_flight()
    # leaving the block asked the server to stop while the slow request was in flight
    slow.join()
    assert outcome and body(outcome[0])["result"] == {"slept": 0.5}
