"""The dispatcher in process: admission order, built-ins, batches, cancel, deadlines,
notifications and error hygiene (§7.1, §7.14, §9, §11, §12, §13, §17.1)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from typing import Any

import msgspec
import pytest

from rcpkit.protocol import messages
from rcpkit.protocol.errors import UsageError
from rcpkit.protocol.types import Hit, RetrieveResult, Usage
from rcpkit.server import Context, Dispatcher, Server
from support.example_server import build_test_server
from support.schema import assert_frame, assert_result
from support.waiting import until_async


def frame(method: str, params: Any = None, id_: Any = 1) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        message["id"] = id_
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


async def call(d: Dispatcher, data: bytes, *, validate: bool = True, **kw: Any) -> Any:
    reply = await d.handle(data, **kw)
    if reply is None:
        return None
    decoded = json.loads(reply)
    if validate:
        assert_frame(decoded)
    return decoded


def code(reply: dict[str, Any]) -> int:
    return int(reply["error"]["code"])


async def ready(**kw: Any) -> Dispatcher:
    d = Dispatcher(build_test_server(), **kw)
    reply = await call(d, frame("initialize", {"protocolVersion": 1}))
    assert "result" in reply
    return d


# ── lifecycle and precedence (§12, §13) ─────────────────────────────────────

async def test_lifecycle_precedence_before_initialize() -> None:
    d = Dispatcher(build_test_server())
    assert code(await call(d, frame("retrieve", {"query": "x", "k": 1}))) == -32001
    assert code(await call(d, frame("embed", {"inputs": ["x"]}))) == -32001
    # unknown methods are also refused before initialize (-32001 comes first)
    assert code(await call(d, frame("bogus"))) == -32001
    for method in ("info", "ping"):
        assert "result" in await call(d, frame(method))


async def test_initialize_result_and_version_negotiation() -> None:
    d = Dispatcher(build_test_server())
    assert code(await call(d, frame("initialize", {"protocolVersion": 0}))) == -32002
    assert code(await call(d, frame("retrieve", {"query": "x", "k": 1}))) == -32001
    assert code(await call(d, frame("initialize", {}))) == -32602
    reply = await call(d, frame("initialize", {"protocolVersion": 7}))
    result = reply["result"]
    assert_result("initialize", result)
    assert result["protocolVersion"] == 1
    assert result["server"] == {"name": "rcpkit-keyword-example", "version": "1.0"}
    assert result["_meta"] == {"conformance": "L0"}
    assert "retrieve" in result["capabilities"]
    assert code(await call(d, frame("initialize", {"protocolVersion": 1}))) == -32600
    info = (await call(d, frame("info")))["result"]
    assert info["capabilities"] == result["capabilities"]


async def test_precedence_after_initialize() -> None:
    d = await ready()
    assert code(await call(d, frame("bogus"))) == -32004
    assert code(await call(d, frame("x-other/thing"))) == -32004
    assert code(await call(d, frame("embed", {"inputs": 3}))) == -32003  # gating before params
    assert code(await call(d, frame("retrieve", {"query": "x", "k": "many"}))) == -32602
    reply = await call(d, frame("retrieve", {"query": "x", "k": 1, "mode": "dense"}))
    assert code(reply) == -32005 and "option" in reply["error"]["data"]
    reply = await call(d, frame("retrieve", {"query": "x", "k": 5, "candidateK": 2}))
    assert code(reply) == -32602 and reply["error"]["data"]["field"] == "candidateK"


async def test_capabilities_frozen_for_the_session() -> None:
    server = build_test_server()
    d = Dispatcher(server)
    await call(d, frame("initialize", {"protocolVersion": 1}))
    server.capability("embed", {"dimension": 3, "identity": "late"})
    info = (await call(d, frame("info")))["result"]
    assert "embed" not in info["capabilities"]
    assert code(await call(d, frame("embed", {"inputs": ["a"]}))) == -32003


async def test_ping_echoes_nonce_and_ids_keep_their_type() -> None:
    d = Dispatcher(build_test_server())
    for id_ in (7, "7", 2**53 - 1, -3, 1.0, "x" * 50):
        reply = await call(d, frame("ping", {"nonce": [1, {"a": None}]}, id_=id_))
        assert reply["id"] == id_ and type(reply["id"]) is type(id_)
        assert reply["result"] == {"nonce": [1, {"a": None}]}
    assert (await call(d, frame("ping", id_=5)))["result"] == {}


async def test_malformed_requests() -> None:
    d = Dispatcher(build_test_server())
    assert code(await call(d, b"{not json")) == -32700
    assert code(await call(d, b"\xff\xfe")) == -32700
    assert code(await call(d, b"[]")) == -32600
    bad_id = await call(d, b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}')
    assert code(bad_id) == -32600 and bad_id["id"] is None
    assert code(await call(d, b'{"jsonrpc":"2.0","id":2,"method":"ping","params":[1]}')) == -32600
    assert code(await call(d, b'{"jsonrpc":"1.0","id":2,"method":"ping"}')) == -32600
    assert code(await call(d, frame("notifications/cancel", {"id": 1}, id_=9))) == -32600


async def test_compact_envelope_is_accepted() -> None:
    """§5.3: ``{method, params}`` without ``jsonrpc`` is a call when it has an id and,
    like any id-less frame, an unanswered notification otherwise (§4.5)."""
    d = await ready()
    reply = await call(d, b'{"id":5,"method":"ping","params":{"nonce":1}}')
    assert reply == {"jsonrpc": "2.0", "id": 5, "result": {"nonce": 1}}
    assert await call(d, b'{"method":"ping","params":{"nonce":1}}') is None


async def test_notifications_are_never_answered() -> None:
    d = await ready()
    for method in ("notifications/unknown", "notifications/cancel", "retrieve", "bogus", "ping"):
        assert await call(d, frame(method, {"id": 1}, id_=None)) is None


# ── handlers, results and errors ────────────────────────────────────────────

async def test_retrieve_returns_typed_hits() -> None:
    d = await ready()
    reply = await call(d, frame("retrieve", {"query": "json line", "k": 2}))
    assert_result("retrieve", reply["result"])
    assert [hit["id"] for hit in reply["result"]["hits"]] == ["stdio", "rcp"]


async def test_handler_exception_is_generic_internal_error(caplog: Any) -> None:
    d = await ready()
    with caplog.at_level(logging.ERROR, logger="rcpkit.server"):
        reply = await call(d, frame("x-test/boom"))
    assert code(reply) == -32603
    assert "secret" not in json.dumps(reply)
    assert "secret internal detail" in caplog.text  # the details went to the server log


@pytest.mark.parametrize("log_bodies", [False, True])
async def test_failure_logs_withhold_queries_and_documents(caplog: Any,
                                                           log_bodies: bool) -> None:
    """§15.6: a failure quoting the request's query or documents is logged with those texts
    replaced by their length, at every level, unless bodies are let into the log."""
    server = Server("s", "1")
    server.capability("x-acme", {})

    @server.method("x-acme/fail")
    def fail(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        texts = [doc["text"] for doc in params["documents"]]
        raise ValueError(f"cannot rank {params['query']!r} against {texts} (disk /var/x)")

    d = Dispatcher(server, log_bodies=log_bodies)
    await call(d, frame("initialize", {"protocolVersion": 1}))
    query, document = "quokka lagoon\nüber", "the zanzibar contract"
    with caplog.at_level(logging.DEBUG):
        reply = await call(d, frame("x-acme/fail", {"query": query, "mode": "dense",
                                                    "documents": [{"text": document}]}))
    assert code(reply) == -32603
    assert "ValueError" in caplog.text and "/var/x" in caplog.text  # the rest is kept
    for body in ("quokka", "zanzibar"):
        assert (body in caplog.text) is log_bodies
    if not log_bodies:
        assert "<18 characters withheld>" in caplog.text


async def test_rcp_errors_pass_through_and_nan_is_never_emitted() -> None:
    d = await ready()
    reply = await call(d, frame("x-test/notfound"))
    assert reply["error"] == {"code": -32015, "message": "no such thing", "data": {"field": "id"}}
    reply = await call(d, frame("x-test/nan"))
    assert reply["result"] == {"score": 0.0, "inf": [0.0]}


async def test_unserialisable_result_is_internal_error() -> None:
    d = await ready()
    assert code(await call(d, frame("x-test/unserialisable", id_="u"))) == -32603
    batch = b"[" + frame("x-test/unserialisable", id_="u") + b"," + frame("ping", id_="p") + b"]"
    replies = {r["id"]: r for r in await call(d, batch)}
    assert code(replies["u"]) == -32603 and replies["p"]["result"] == {}
    sink = Sink()
    d.start(sink)
    d.feed(frame("x-test/unserialisable", id_="s"))
    await asyncio.wait_for(d.drain(), 5)
    assert code(sink.replies()["s"]) == -32603


async def test_vendor_params_struct_and_gating() -> None:
    class Echo(msgspec.Struct):
        text: str

    server = Server("s", "1")
    server.capability("retrieve", {})

    @server.method("x-acme/echo", params=Echo)
    async def echo(params: Echo, ctx: Context) -> Echo:
        return params

    d = Dispatcher(server)
    await call(d, frame("initialize", {"protocolVersion": 1}))
    assert code(await call(d, frame("x-acme/echo", {"text": "hi"}))) == -32003
    server2 = Server("s", "1")
    server2.capability("x-acme", {})
    server2.add_method("x-acme/echo", echo, params=Echo)
    d2 = Dispatcher(server2)
    await call(d2, frame("initialize", {"protocolVersion": 1}))
    assert (await call(d2, frame("x-acme/echo", {"text": "hi"})))["result"] == {"text": "hi"}
    reply = await call(d2, frame("x-acme/echo", {"text": 3}))
    assert code(reply) == -32602 and reply["error"]["data"]["field"] == "text"


async def test_struct_results_follow_the_non_finite_float_rule() -> None:
    """§4.6: a returned Struct is encoded like any result: optional NaN/inf omitted,
    a required score and array members become 0.0, free-form members become null."""
    nan, inf = float("nan"), float("inf")
    server = Server("s", "1")
    server.capability("x-acme", {})

    @server.method("x-acme/hits")
    def hits(params: dict[str, Any], ctx: Context) -> RetrieveResult:
        return RetrieveResult(hits=[Hit(id="a", score=nan, confidence=inf, vector=[1.0, -inf],
                                        meta={"x": nan})], usage=Usage(latency_ms=inf))

    d = Dispatcher(server)
    await call(d, frame("initialize", {"protocolVersion": 1}))
    result = (await call(d, frame("x-acme/hits")))["result"]
    assert result == {"hits": [{"id": "a", "score": 0.0, "vector": [1.0, 0.0],
                                "meta": {"x": None}}], "usage": {}}


def test_registration_rules() -> None:
    server = Server("s", "1")
    for name in ("ping", "initialize", "not-a-method", "x-/bad", "notifications/progress"):
        with pytest.raises(UsageError):
            server.add_method(name, lambda p, c: None)
    with pytest.raises(UsageError):
        Server("s", "1", conformance="L9")  # type: ignore[arg-type]


# ── concurrency, cancellation, deadlines (§7.14, §13.1) ─────────────────────

class Sink:
    """Collects what a stream-mode dispatcher emits."""

    def __init__(self) -> None:
        self.frames: list[Any] = []
        self.arrived = asyncio.Event()

    def __call__(self, data: bytes) -> None:
        decoded = json.loads(data)
        assert_frame(decoded)
        self.frames.append(decoded)
        self.arrived.set()

    def replies(self) -> dict[Any, Any]:
        return {f["id"]: f for f in self.frames if isinstance(f, dict) and "id" in f}


async def streaming_dispatcher(**kw: Any) -> tuple[Dispatcher, Sink]:
    d = Dispatcher(build_test_server(), **kw)
    sink = Sink()
    d.start(sink)
    d.feed(frame("initialize", {"protocolVersion": 1}, id_=0))
    return d, sink


async def test_slow_handler_does_not_block_and_pings_are_inline() -> None:
    d, sink = await streaming_dispatcher()
    d.feed(frame("x-test/sleep", {"seconds": 5}, id_="slow"))
    d.feed(frame("ping", id_="p"))
    # the inline fast path answers synchronously, before any task ran
    assert "p" in sink.replies()
    d.feed(frame("retrieve", {"query": "json", "k": 1}, id_="r"))
    await until_async(lambda: "r" in sink.replies(), 5)
    assert "slow" not in sink.replies()
    d.feed(frame("notifications/cancel", {"id": "slow", "reason": "test"}, id_=None))
    await asyncio.wait_for(d.drain(), 5)
    assert code(sink.replies()["slow"]) == -32006


async def test_handle_now_answers_inline_requests_at_once() -> None:
    d = await ready()
    pinged = d.handle_now(messages.parse(frame("ping", {"nonce": "n"}, id_=7)),
                          path_method="ping")
    assert isinstance(pinged, bytes)
    assert json.loads(pinged) == {"jsonrpc": "2.0", "id": 7, "result": {"nonce": "n"}}
    mismatch = d.handle_now(messages.parse(frame("ping")), path_method="info")
    assert isinstance(mismatch, bytes) and code(json.loads(mismatch)) == -32600
    assert d.handle_now(messages.parse(frame("notifications/x", id_=None))) is None
    # a handler runs in a task: its reply is awaited, and is the one handle() gives
    pending = d.handle_now(messages.parse(frame("retrieve", {"query": "json", "k": 1})))
    assert not isinstance(pending, bytes) and pending is not None
    retrieved = json.loads(await pending)
    assert retrieved == await call(d, frame("retrieve", {"query": "json", "k": 1}))


async def test_a_body_naming_another_method_than_its_path_is_refused() -> None:
    """§5.2: under ``<base>/<method>`` a request or notification naming another method gets
    -32600 (a request keeps its id); a frame without a method is judged as it is."""
    d = await ready()

    def answer(data: bytes, path_method: str) -> Any:
        reply = d.handle_now(messages.parse(data), path_method=path_method)
        assert reply is None or isinstance(reply, bytes)
        return None if reply is None else json.loads(reply)

    assert answer(frame("ping", id_="p"), "info") == {
        "jsonrpc": "2.0", "id": "p", "error": {
            "code": -32600, "message": "the method in the body does not match the URL path"}}
    told = answer(frame("notifications/x", id_=None), "info")
    assert told["id"] is None and code(told) == -32600
    assert answer(frame("ping", id_=1), "ping")["result"] == {}
    assert answer(frame("notifications/x", id_=None), "notifications/x") is None
    invalid = answer(b'{"jsonrpc":"2.0","id":2}', "ping")  # no method: -32600 of its own
    assert invalid["id"] == 2 and "method" in invalid["error"]["message"]
    assert answer(b'{"jsonrpc":"2.0","id":3,"result":{}}', "ping") is None  # stray response


async def test_cancel_sync_handler_and_unknown_ids() -> None:
    d, sink = await streaming_dispatcher()
    d.feed(frame("notifications/cancel", {"id": 12345}, id_=None))  # unknown: a no-op
    d.feed(frame("x-test/busy", {"seconds": 5, "_meta": {"progressToken": "busy"}}, id_=3))
    d.feed(frame("notifications/cancel", {"id": "3"}, id_=None))  # "3" is not 3
    # progress comes only after the handler's first cancellation check passed
    await until_async(lambda: any(
        f.get("method") == "notifications/progress" for f in sink.frames), 5)
    assert 3 not in sink.replies()
    d.feed(frame("notifications/cancel", {"id": 3}, id_=None))
    d.feed(frame("notifications/cancel", {"id": 3}, id_=None))  # twice: still one reply
    await asyncio.wait_for(d.drain(), 5)
    assert [f.get("id") for f in sink.frames].count(3) == 1
    assert code(sink.replies()[3]) == -32006


async def test_cancel_before_the_task_starts_still_answers_once() -> None:
    d, sink = await streaming_dispatcher()
    d.feed(frame("x-test/sleep", {"seconds": 5}, id_=21))
    d.feed(frame("notifications/cancel", {"id": 21}, id_=None))  # same loop turn
    await asyncio.wait_for(d.drain(), 5)
    assert [f.get("id") for f in sink.frames].count(21) == 1
    assert code(sink.replies()[21]) == -32006


async def test_cancel_after_completion_keeps_the_result() -> None:
    d, sink = await streaming_dispatcher()
    d.feed(frame("x-test/sleep", {"seconds": 0}, id_=4))
    await asyncio.wait_for(d.drain(), 5)
    d.feed(frame("notifications/cancel", {"id": 4}, id_=None))
    assert sink.replies()[4]["result"] == {"slept": 0}


async def test_deadlines() -> None:
    d = await ready()
    reply = await call(d, frame("x-test/sleep", {"seconds": 5, "_meta": {"deadlineMs": 50}}))
    assert code(reply) == -32014
    reply = await call(d, frame("x-test/deadline", {"_meta": {"deadlineMs": 60000}}))
    assert 0 < reply["result"]["remainingMs"] <= 60000
    assert (await call(d, frame("x-test/deadline")))["result"]["remainingMs"] is None
    d2 = await ready(request_timeout_ms=50)
    assert code(await call(d2, frame("x-test/sleep", {"seconds": 5}))) == -32014
    # the earlier of the two budgets wins
    reply = await call(d2, frame("x-test/deadline", {"_meta": {"deadlineMs": 60000}}))
    assert reply["result"]["remainingMs"] <= 50


def _ordered_server(first_waits_for: threading.Event) -> tuple[Server, list[int]]:
    """A server whose ``x-test/write`` runs in arrival order and records the calls it ran;
    call 0 waits (at most a few seconds) for ``first_waits_for``."""
    server = build_test_server()
    ran: list[int] = []

    def write(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        if params["n"] == 0:
            first_waits_for.wait(3)
        ran.append(params["n"])
        first_waits_for.set()
        return {"n": params["n"]}

    server.add_method("x-test/write", write)
    server.in_arrival_order("x-test/write")
    return server, ran


async def test_ordered_calls_run_one_at_a_time_in_arrival_order() -> None:
    """§7.10: call 1 would finish first (it releases call 0), were it not in line behind it."""
    released = threading.Event()
    server, ran = _ordered_server(released)
    d = Dispatcher(server)
    await call(d, frame("initialize", {"protocolVersion": 1}, id_=0))
    replies = await asyncio.gather(*(call(d, frame("x-test/write", {"n": n}, id_=n))
                                     for n in range(6)))
    assert [reply["result"]["n"] for reply in replies] == list(range(6))
    assert ran == list(range(6))


async def test_a_call_cancelled_or_out_of_time_in_line_leaves_it() -> None:
    released = threading.Event()
    server, ran = _ordered_server(released)
    d = Dispatcher(server)
    sink = Sink()
    d.start(sink)
    d.feed(frame("initialize", {"protocolVersion": 1}, id_="init"))
    d.feed(frame("x-test/write", {"n": 0}, id_=0))
    d.feed(frame("x-test/write", {"n": 1, "_meta": {"deadlineMs": 50}}, id_=1))
    d.feed(frame("x-test/write", {"n": 2}, id_=2))
    d.feed(frame("x-test/write", {"n": 3}, id_=3))
    d.feed(frame("notifications/cancel", {"id": 2}, id_=None))
    await until_async(lambda: 1 in sink.replies(), 5)
    assert code(sink.replies()[1]) == -32014
    released.set()
    await asyncio.wait_for(d.drain(), 5)
    assert code(sink.replies()[2]) == -32006
    assert ran == [0, 3]


async def test_a_call_cancelled_while_its_work_waits_for_a_thread_leaves_the_line() -> None:
    """§7.14: cancelled after its turn came but before a pool thread picked its work up, a
    call must still leave the line; if the cancel withdrew the queued work, nothing would,
    and every later write would wait forever."""
    released, blocker_running = threading.Event(), threading.Event()
    server, ran = _ordered_server(released)
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(pool)

    def block() -> None:
        blocker_running.set()
        released.wait(5)

    try:
        d = Dispatcher(server)
        sink = Sink()
        d.start(sink)
        d.feed(frame("initialize", {"protocolVersion": 1}, id_="init"))
        blocker = loop.run_in_executor(pool, block)  # the pool's one thread is busy
        await until_async(blocker_running.is_set, 5)
        d.feed(frame("x-test/write", {"n": 1}, id_=1))  # its work queues behind the blocker
        await until_async(lambda: pool._work_queue.qsize() == 1, 5)
        d.feed(frame("notifications/cancel", {"id": 1}, id_=None))
        await until_async(lambda: 1 in sink.replies(), 5)
        assert code(sink.replies()[1]) == -32006
        released.set()
        await blocker
        d.feed(frame("x-test/write", {"n": 2}, id_=2))
        await until_async(lambda: 2 in sink.replies(), 5)
        assert sink.replies()[2]["result"] == {"n": 2}
        assert ran == [2]
    finally:
        released.set()
        pool.shutdown(wait=False)


async def test_concurrency_is_bounded() -> None:
    d, sink = await streaming_dispatcher(max_concurrency=2)
    for i in range(3):
        d.feed(frame("x-test/sleep", {"seconds": 0.3, "_meta": {"progressToken": i + 10}},
                     id_=i + 10))
    # the first two report progress as they start; the third waits for a place
    await until_async(lambda: {f["params"]["progressToken"] for f in sink.frames
                               if f.get("method") == "notifications/progress"} == {10, 11}, 5)
    d.feed(frame("notifications/cancel", {"id": 12}, id_=None))  # still queued: never runs
    await asyncio.wait_for(d.drain(), 5)
    replies = sink.replies()
    assert replies[10]["result"] and replies[11]["result"]
    assert code(replies[12]) == -32006


async def test_shutdown_closes_the_stream() -> None:
    d, sink = await streaming_dispatcher()
    d.feed(frame("x-test/sleep", {"seconds": 0.05}, id_="inflight"))
    d.feed(frame("shutdown", id_="bye"))
    assert d.closed
    d.feed(frame("ping", id_="late"))
    await asyncio.wait_for(d.drain(), 5)
    replies = sink.replies()
    assert replies["bye"]["result"] == {}
    assert replies["inflight"]["result"] == {"slept": 0.05}
    assert "late" not in replies


# ── batches (§11) ───────────────────────────────────────────────────────────

async def test_batches() -> None:
    d = Dispatcher(build_test_server(), max_batch=4)
    batch = [json.loads(frame("initialize", {"protocolVersion": 1}, id_=1)),
             json.loads(frame("retrieve", {"query": "json", "k": 1}, id_=2)),
             json.loads(frame("notifications/whatever", id_=None)),
             {"jsonrpc": "2.0", "id": 3}]
    replies = await call(d, json.dumps(batch).encode())
    assert isinstance(replies, list) and len(replies) == 3
    by_id = {r["id"]: r for r in replies}
    assert "result" in by_id[1] and "hits" in by_id[2]["result"]
    assert code(by_id[None]) == -32600  # the malformed member, id null
    only_notifications = [json.loads(frame("notifications/x", id_=None))] * 3
    assert await call(d, json.dumps(only_notifications).encode()) is None
    too_big = [json.loads(frame("ping", id_=i)) for i in range(5)]
    reply = await call(d, json.dumps(too_big).encode())
    assert isinstance(reply, dict) and code(reply) == -32013 and reply["id"] is None


# ── progress and log (§9, §17.1) ────────────────────────────────────────────

async def test_progress_only_with_token_and_streaming() -> None:
    d = await ready()
    seen: list[Any] = []
    await call(d, frame("x-test/sleep", {"seconds": 0}), notify=seen.append)
    assert seen == []
    await call(d, frame("x-test/sleep", {"seconds": 0, "_meta": {"progressToken": "t"}}),
               notify=seen.append)
    progress = [json.loads(f) for f in seen]
    assert [p["params"]["progressToken"] for p in progress] == ["t"]
    for p in progress:
        assert_frame(p)
    seen.clear()
    quiet = Dispatcher(build_test_server(streaming=False))
    await call(quiet, frame("initialize", {"protocolVersion": 1}))
    await call(quiet, frame("x-test/busy", {"seconds": 0.02, "_meta": {"progressToken": 1}}),
               notify=seen.append)
    assert seen == []


async def test_progress_from_a_worker_thread() -> None:
    d = await ready()
    seen: list[bytes] = []
    await call(d, frame("x-test/busy", {"seconds": 0.05, "_meta": {"progressToken": 9}}),
               notify=seen.append)
    assert seen and all(json.loads(f)["params"]["progressToken"] == 9 for f in seen)


async def test_log_only_for_clients_that_opted_in() -> None:
    seen: list[bytes] = []
    d = await ready()
    await call(d, frame("x-test/log"), notify=seen.append)
    assert seen == []
    # per-request opt-in
    await call(d, frame("x-test/log", {"_meta": {"logLevel": "info"}}), notify=seen.append)
    assert [json.loads(f)["params"]["level"] for f in seen] == ["info", "warning"]
    seen.clear()
    # session-wide opt-in at initialize
    d2 = Dispatcher(build_test_server())
    await call(d2, frame("initialize", {"protocolVersion": 1, "capabilities": {"log": {}},
                                        "_meta": {"logLevel": "warning"}}))
    await call(d2, frame("x-test/log"), notify=seen.append)
    logs = [json.loads(f) for f in seen]
    assert [entry["params"]["level"] for entry in logs] == ["warning"]
    for entry in logs:
        assert_frame(entry)
    seen.clear()
    # a server that does not advertise `log` never emits it
    d3 = Dispatcher(build_test_server(log=False))
    await call(d3, frame("initialize", {"protocolVersion": 1, "capabilities": {"log": {}}}))
    await call(d3, frame("x-test/log", {"_meta": {"logLevel": "debug"}}), notify=seen.append)
    assert seen == []


# ── HTTP-facing options ─────────────────────────────────────────────────────

async def test_stateless_policy_and_path_method() -> None:
    d = Dispatcher(build_test_server(), stateless=True)
    assert "hits" in (await call(d, frame("retrieve", {"query": "json", "k": 1})))["result"]
    for _ in range(2):  # idempotent initialize
        assert (await call(d, frame("initialize", {"protocolVersion": 1})))["result"]
    assert code(await call(d, frame("initialize", {"protocolVersion": 0}))) == -32002
    assert code(await call(d, frame("embed", {"inputs": ["a"]}))) == -32003
    assert (await call(d, frame("shutdown")))["result"] == {}
    assert "hits" in (await call(d, frame("retrieve", {"query": "json", "k": 1})))["result"]
    reply = await call(d, frame("ping", id_=5), path_method="info")
    assert code(reply) == -32600 and reply["id"] == 5
    reply = await call(d, b"[" + frame("ping") + b"]", path_method="ping")
    assert code(reply) == -32600


async def test_feeding_before_start_is_a_usage_error_not_an_assert() -> None:
    dispatcher = Dispatcher(build_test_server())
    with pytest.raises(UsageError, match="start"):
        dispatcher.feed(frame("ping"))
