"""The lean HTTP/1.1 server (rcpkit.transports.http.server) at the byte level, and
``rcpkit serve --workers`` (§5.2): framing, pipelining, back-pressure, multi-process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rcpkit.transports.http import create_app
from rcpkit.transports.http.server import HttpServer, _Connection
from support.example_server import build_test_server
from support.http import LoopbackServer
from support.net import free_port
from support.stdio import python_argv
from support.waiting import until

PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
RCPKIT = python_argv("-c", "from rcpkit.cli import main; main()")
APPS = str(Path(__file__).resolve().parent / "apps")


@pytest.fixture
def lean() -> Iterator[LoopbackServer]:
    with LoopbackServer(create_app(build_test_server(), max_body_bytes=4096),
                        kind="rcpkit") as running:
        yield running


def exchange(port: int, data: bytes, *, until_close: bool = False) -> bytes:
    """Send raw bytes, return what comes back (until close, or a short quiet spell)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        received = b""
        conn.settimeout(10 if until_close else 0.5)
        while True:
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                return received
            if not chunk:
                return received
            received += chunk


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)


@pytest.mark.wire
def test_pipelined_requests_answered_in_order(lean: LoopbackServer) -> None:
    requests = b"".join(post("/rcp/ping", b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % i)
                        for i in range(20))
    reply = exchange(lean.port, requests)
    assert reply.count(b"HTTP/1.1 200 OK") == 20
    ids = [json.loads(part.split(b"HTTP/1.1")[0])["id"]
           for part in reply.split(b"\r\n\r\n")[1:]]
    assert ids == list(range(20))


@pytest.mark.wire
def test_chunked_request_body_and_expect_continue(lean: LoopbackServer) -> None:
    chunked = (b"POST /rcp/ping HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"%x\r\n%s\r\n0\r\n\r\n" % (len(PING), PING))
    assert b'"result":{}' in exchange(lean.port, chunked)
    with socket.create_connection(("127.0.0.1", lean.port), timeout=10) as conn:
        conn.sendall(post("/rcp/ping", PING, b"Expect: 100-continue\r\n")[:-len(PING)])
        assert conn.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        conn.sendall(PING)
        assert b'"result":{}' in conn.recv(4096)


@pytest.mark.wire
def test_malformed_http_is_400_and_closed(lean: LoopbackServer) -> None:
    reply = exchange(lean.port, b"NONSENSE\x00\r\n\r\n", until_close=True)
    assert reply.startswith(b"HTTP/1.1 400 ")


@pytest.mark.wire
def test_http10_and_oversized_bodies_close_the_connection(lean: LoopbackServer) -> None:
    reply = exchange(lean.port, post("/rcp/ping", PING).replace(b"HTTP/1.1", b"HTTP/1.0"),
                     until_close=True)
    assert reply.startswith(b"HTTP/1.1 200 ") and b"connection: close" in reply
    # 413 from the declared length while the body is still arriving: what follows cannot
    # be told apart from a next request, so the connection closes after the answer
    partial = post("/rcp/ping", b"x" * 10_000)[:-9_000]
    reply = exchange(lean.port, partial, until_close=True)
    assert reply.startswith(b"HTTP/1.1 413 ") and reply.count(b"HTTP/1.1") == 1
    # a complete oversized body was consumed, so the connection stays usable
    reply = exchange(lean.port, post("/rcp/ping", b"x" * 10_000) + post("/rcp/ping", PING))
    assert reply.startswith(b"HTTP/1.1 413 ") and reply.count(b"HTTP/1.1 200 ") == 1


@pytest.mark.wire
def test_head_and_no_body_statuses(lean: LoopbackServer) -> None:
    note = b'{"jsonrpc":"2.0","method":"notifications/x"}'
    reply = exchange(lean.port, post("/rcp/notifications/x", note))
    head, _, rest = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 204 ") and b"content-length" not in head.lower()
    assert rest == b""
    reply = exchange(lean.port, b"HEAD /rcp HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, rest = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405 ") and rest == b""


def _split(reply: bytes) -> list[tuple[bytes, bytes]]:
    """Consecutive responses (each with a content-length, or a bodiless 204/404 head)."""
    responses = []
    while reply:
        head, _, rest = reply.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        responses.append((head, rest[:length]))
        reply = rest[length:]
    return responses


def _without_date(head: bytes) -> list[bytes]:
    return sorted(line for line in head.split(b"\r\n") if not line.startswith(b"date:"))


def _method(route: tuple[Any, str] | None) -> str | None:
    """The path method of a claimed request's route; None when it is not claimed."""
    return None if route is None else route[1]


@pytest.mark.wire
def test_direct_route_and_asgi_answer_alike(lean: LoopbackServer) -> None:
    """A POST under the base is read whole and handed to its endpoint unless it carries a
    query, an escape, ``Expect`` or SSE in ``Accept`` (then ASGI): both must give the same
    bytes."""
    bodies = [PING, b'{"jsonrpc":"2.0","method":"notifications/x"}', b"{oops",
              b'[{"jsonrpc":"2.0","id":"a","method":"ping"}]', b"x" * 5000]
    route = lean.server.endpoints
    assert route is not None
    assert _method(route.claim(b"POST", b"/rcp/ping", {b"content-length": b"40"})) == "ping"
    assert _method(route.claim(b"POST", b"/rcp", {b"content-length": b"40"})) == ""
    for _ in range(2):  # the second time from the routes kept per target
        assert _method(route.claim(b"POST", b"/rcp/ping", {b"content-length": b"40"})) == "ping"
        for method, target, headers in [
                (b"POST", b"/rcp/ping?via=asgi", {b"content-length": b"40"}),
                (b"POST", b"/rcp/p%69ng", {b"content-length": b"40"}),
                (b"POST", b"/rcp/ping", {}),
                (b"POST", b"/rcp/ping", {b"content-length": b"5000"}),  # over max_body_bytes
                (b"POST", b"/rcp/ping", {b"content-length": b"40",
                                         b"accept": b"text/event-stream"}),
                (b"GET", b"/rcp/ping", {b"content-length": b"40"}), (b"POST", b"/other", {})]:
            assert route.claim(method, target, headers) is None
    for body in bodies:
        path = "/rcp" if body.startswith((b"[", b"x")) else "/rcp/ping"
        direct = _split(exchange(lean.port, post(path, body)))
        through_asgi = _split(exchange(lean.port, post(path + "?via=asgi", body)))
        assert len(direct) == len(through_asgi) == 1
        assert _without_date(direct[0][0]) == _without_date(through_asgi[0][0])
        assert direct[0][1] == through_asgi[0][1]


class _Goodbye:
    """An app whose endpoint answers every POST with one shared header tuple that closes."""

    HEADERS = ((b"content-type", b"text/plain"), (b"Connection", b"close"))

    def __init__(self) -> None:
        self.endpoints = self

    def claim(self, verb: bytes, target: bytes, headers: dict[bytes, bytes]
              ) -> tuple[Any, str] | None:
        return (self, "bye") if verb == b"POST" else None

    async def answer(self, method: str, headers: dict[bytes, bytes], body: bytes
                     ) -> tuple[int, Any, bytes]:
        return 200, self.HEADERS, b"bye"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("every request here is claimed")


@pytest.mark.wire
def test_reply_headers_shared_by_replies_are_encoded_alike_each_time() -> None:
    """A reply's header tuple is encoded once and kept: a ``Connection: close`` in it still
    closes every connection it answers, and it is sent once (the server's own line)."""
    with LoopbackServer(_Goodbye(), kind="rcpkit") as srv:
        for _ in range(3):
            reply = exchange(srv.port, post("/x", b"hi") + post("/x", b"unread"),
                             until_close=True)
            head, _, body = reply.partition(b"\r\n\r\n")
            assert body == b"bye" and reply.count(b"HTTP/1.1 ") == 1
            assert _without_date(head) == [b"HTTP/1.1 200 OK", b"connection: close",
                                           b"content-length: 3", b"content-type: text/plain"]


class _Echo(_Goodbye):
    """An app whose endpoint answers every POST with its own body."""

    async def answer(self, method: str, headers: dict[bytes, bytes], body: bytes
                     ) -> tuple[int, Any, bytes]:
        return 200, (), body


class _Counting(_Echo):
    """An app echoing each body, that of ``/wait`` after a pause, counting calls."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: list[bytes] = []

    def claim(self, verb: bytes, target: bytes, headers: dict[bytes, bytes]
              ) -> tuple[Any, str] | None:
        return self, target.decode()

    async def answer(self, method: str, headers: dict[bytes, bytes], body: bytes
                     ) -> tuple[int, Any, bytes]:
        self.answered.append(body)
        if method == "/wait":
            await asyncio.sleep(0.05)
        return 200, (), body


@pytest.mark.wire
@pytest.mark.parametrize("first", [[], ["/wait"]], ids=["answered-at-once", "behind-a-wait"])
def test_requests_pipelined_behind_a_closing_one_are_not_run(first: list[str]) -> None:
    """RFC 9112 §9.6: after answering a request that closes the connection, the server
    reads no further requests from it (it neither runs nor answers them)."""
    app = _Counting()
    requests = [post(path, b"first") for path in first] + [
        post("/x", b"closing", b"Connection: close\r\n"), post("/x", b"after")]
    with LoopbackServer(app, kind="rcpkit") as srv:
        replies = _split(exchange(srv.port, b"".join(requests), until_close=True))
    assert [body for _, body in replies] == [b"first"] * len(first) + [b"closing"]
    assert app.answered == [b"first"] * len(first) + [b"closing"]


class _Recording:
    """A transport that keeps what is written to it and whether it was closed."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return None


def test_replies_made_in_one_round_of_the_loop_go_out_first_at_once_then_together() -> None:
    """Requests on two connections answered in one round: the first reply is sent at once,
    the other when the round ends. A reply that closes its connection sends what is held
    before it, and the next round starts afresh."""
    async def scenario() -> None:
        server = HttpServer(_Counting())
        server._loop = asyncio.get_running_loop()
        transports = [_Recording() for _ in range(3)]
        conns = [_Connection(server) for _ in transports]
        for conn, transport in zip(conns, transports, strict=True):
            conn.connection_made(transport)  # type: ignore[arg-type]
        conns[0].data_received(post("/x", b"hi"))
        conns[1].data_received(post("/x", b"hi"))
        assert [len(t.written) for t in transports] == [1, 0, 0]
        await asyncio.sleep(0)  # the round ends
        assert [len(t.written) for t in transports] == [1, 1, 0]
        conns[1].data_received(post("/x", b"hi"))
        conns[2].data_received(post("/x", b"hi", b"Connection: close\r\n"))
        assert [len(t.written) for t in transports] == [1, 2, 1]  # held ones go before a close
        assert transports[2].closed and not transports[1].closed
        assert all(t.written[-1].endswith(b"\r\n\r\nhi") for t in transports)
        await asyncio.sleep(0)
        conn = _Connection(server)  # a new round: its first reply goes out at once again
        conn.connection_made(transports[0])  # type: ignore[arg-type]
        conn.data_received(post("/x", b"again"))
        assert transports[0].written[-1].endswith(b"again")

    asyncio.run(scenario())


def test_a_lone_connections_replies_are_never_held() -> None:
    """With one connection open nothing can share its round: each reply goes out at once,
    and no round is scheduled for it."""
    async def scenario() -> None:
        server = HttpServer(_Counting())
        server._loop = asyncio.get_running_loop()
        transport = _Recording()
        conn = _Connection(server)
        conn.connection_made(transport)  # type: ignore[arg-type]
        for n in range(3):
            conn.data_received(post("/x", b"%d" % n))
            assert len(transport.written) == n + 1 and server.held is None

    asyncio.run(scenario())


@pytest.mark.wire
def test_every_reply_length_is_framed_right() -> None:
    """Small bodies take a ``content-length`` line made once, larger ones one formatted per
    reply: both frame the body exactly, at the boundary (1024) too."""
    lengths = [0, 1, 9, 10, 1023, 1024, 1025, 70_000]
    with LoopbackServer(_Echo(), kind="rcpkit") as srv:
        bodies = [bytes([65 + n % 26]) * n for n in lengths]
        replies = _split(exchange(srv.port, b"".join(post("/x", body) for body in bodies)))
    assert [body for _, body in replies] == bodies
    for (head, _), length in zip(replies, lengths, strict=True):
        assert f"content-length: {length}".encode() in head.split(b"\r\n")


@pytest.mark.wire
def test_pipelined_direct_suspended_and_asgi_requests_keep_their_order(
        lean: LoopbackServer) -> None:
    """Requests answered at once, one that waits (a task) and ones left to ASGI (a query,
    an unknown path) on one connection: answered in the order sent."""
    def call(i: int, method: str, params: bytes = b"{}") -> bytes:
        return b'{"jsonrpc":"2.0","id":%d,"method":"%s","params":%s}' % (i, method.encode(),
                                                                          params)
    requests = [post("/rcp/ping", call(0, "ping")),
                post("/rcp/x-test/sleep", call(1, "x-test/sleep", b'{"seconds":0.2}')),
                post("/rcp/ping?q=1", call(2, "ping")),
                post("/elsewhere", call(3, "ping")),
                post("/rcp/ping", call(4, "ping"))]
    replies = _split(exchange(lean.port, b"".join(requests), until_close=False))
    assert [head.split(b" ")[1] for head, _ in replies] == [b"200", b"200", b"200", b"404",
                                                           b"200"]
    assert [json.loads(body)["id"] for head, body in replies if b" 200 " in head] == [0, 1, 2, 4]


@pytest.mark.wire
def test_idle_connections_close_but_slow_requests_finish() -> None:
    app = create_app(build_test_server())
    with LoopbackServer(app, kind="rcpkit", keep_alive_s=0.3) as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as conn:
            started = time.monotonic()
            assert conn.recv(100) == b""  # closed by the server for idleness
            assert 0.25 < time.monotonic() - started < 5
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as conn:
            conn.sendall(post("/rcp/x-test/sleep", b'{"jsonrpc":"2.0","id":7,'
                              b'"method":"x-test/sleep","params":{"seconds":0.8}}'))
            reply = b""
            while b'"id":7' not in reply:
                chunk = conn.recv(4096)
                assert chunk, "closed while the request was in flight"
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 200 ")
            assert conn.recv(100) == b""  # and then idle again


@pytest.mark.wire
def test_a_request_whose_client_left_is_cancelled(lean: LoopbackServer) -> None:
    with socket.create_connection(("127.0.0.1", lean.port), timeout=10) as conn:
        conn.sendall(post("/rcp/x-test/sleep", b'{"jsonrpc":"2.0","id":1,'
                          b'"method":"x-test/sleep","params":{"seconds":30}}'))
        until(lambda: lean.server.tasks, what="the request waits in the handler")
    until(lambda: not lean.server.tasks, what="the abandoned request kept running")  # not 30 s


def _serve(*args: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([APPS, os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([*RCPKIT, "serve", "--http", f"127.0.0.1:{port}", *args],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return child, port


def _call(port: int, method: str, params: dict[str, object] | None = None) -> dict[str, Any]:
    """One call, retried while the server is still starting."""
    deadline = time.monotonic() + 60
    while True:
        try:
            reply = httpx.post(f"http://127.0.0.1:{port}/rcp/{method}", timeout=10, json={
                "jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}})
            result: dict[str, Any] = reply.json()["result"]
            return result
        except httpx.TransportError:
            assert time.monotonic() < deadline
            time.sleep(0.1)


@pytest.mark.wire
def test_workers_serve_a_declared_safe_app_and_stop_gracefully() -> None:
    child, port = _serve("--app", "readonly:build", "--workers", "2")
    try:
        hits = _call(port, "retrieve", {"query": "json line", "k": 2})["hits"]
        assert [hit["id"] for hit in hits] == ["stdio", "rcp"]
        assert _call(port, "x-test/pid")["pid"] != child.pid  # the supervisor serves nothing
    finally:
        child.send_signal(signal.SIGTERM)
        assert child.wait(30) == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


@pytest.mark.wire
def test_a_worker_dying_ends_the_service_with_an_error() -> None:
    child, port = _serve("--app", "readonly:build", "--workers", "2")
    try:
        os.kill(_call(port, "x-test/pid")["pid"], signal.SIGKILL)
        assert child.wait(30) == 1  # the other worker was stopped; a supervisor restarts all
    finally:
        if child.poll() is None:
            child.kill()


@pytest.mark.wire
def test_workers_refused_for_a_server_not_declared_safe() -> None:
    # the example keeps a writable in-memory index: workers would silently disagree
    child, _ = _serve("--app", "rcpkit.server.example:server", "--workers", "2")
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 2
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "multi-process safe" in lines[0], stderr
