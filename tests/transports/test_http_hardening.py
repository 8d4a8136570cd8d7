"""The lean HTTP/1.1 server against hostile clients, on loopback sockets (§5.2, §15.5):
long pipelines, oversized heads, trickling clients, connection floods, ``Upgrade`` offers."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rcpkit.transports.http import create_app
from support.example_server import build_test_server
from support.http import LoopbackServer

pytestmark = pytest.mark.wire


def lean_server(app: Any, **options: Any) -> LoopbackServer:
    """rcpkit's own HTTP server (the one these limits belong to) on a loopback port."""
    return LoopbackServer(app, kind="rcpkit", **options)


PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


def post(body: bytes, extra: bytes = b"", path: bytes = b"/rcp/ping") -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(body)
            + extra + b"\r\n" + body)


def read_until_closed(conn: socket.socket, timeout: float = 10.0) -> bytes:
    conn.settimeout(timeout)
    received = b""
    while chunk := conn.recv(65536):
        received += chunk
    return received


@pytest.fixture
def lean() -> Iterator[LoopbackServer]:
    with lean_server(create_app(build_test_server(), auth_tokens=["secret"])) as running:
        yield running


AUTH = b"Authorization: Bearer secret\r\n"


def test_ten_thousand_pipelined_pings_are_answered_in_order(lean: LoopbackServer) -> None:
    count = 10_000
    requests = b"".join(post(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % i, AUTH)
                        for i in range(count))
    with socket.create_connection(("127.0.0.1", lean.port), timeout=30) as conn:
        sender = threading.Thread(target=conn.sendall, args=(requests,))
        sender.start()
        received = b""
        while received.count(b"HTTP/1.1 200 OK") < count:
            chunk = conn.recv(1 << 20)
            assert chunk, f"closed after {received.count(b'HTTP/1.1 200 OK')} replies"
            received += chunk
        sender.join()
    ids = [int(found) for found in re.findall(rb'"id":(\d+)', received)]
    assert ids == list(range(count))


def test_an_oversized_header_is_431_before_auth_and_others_are_still_served(
        lean: LoopbackServer) -> None:
    huge = b"X-Junk: " + b"a" * (4 << 20) + b"\r\n"  # no credentials: 401 were it read
    with socket.create_connection(("127.0.0.1", lean.port), timeout=30) as conn:
        with pytest.raises(OSError):  # the server closes while we are still sending
            conn.sendall(post(PING, huge))
            conn.shutdown(socket.SHUT_WR)
        reply = read_until_closed(conn)
    assert reply.startswith(b"HTTP/1.1 431 ") or reply == b""
    with socket.create_connection(("127.0.0.1", lean.port), timeout=30) as conn:
        conn.sendall(post(PING, b"X-Junk: " + b"a" * 70_000 + b"\r\n"))
        assert read_until_closed(conn).startswith(b"HTTP/1.1 431 ")
    with socket.create_connection(("127.0.0.1", lean.port), timeout=30) as conn:
        many = b"".join(b"X-%d: %s\r\n" % (i, b"b" * 100) for i in range(1000))
        conn.sendall(post(PING, many))
        assert read_until_closed(conn).startswith(b"HTTP/1.1 431 ")
    with socket.create_connection(("127.0.0.1", lean.port), timeout=30) as conn:
        conn.sendall(post(PING, AUTH + b"X-Fine: " + b"c" * 32_000 + b"\r\n"))
        conn.settimeout(10)
        assert b'"result":{}' in conn.recv(65536)


def test_an_overlong_request_line_is_414(lean: LoopbackServer) -> None:
    with socket.create_connection(("127.0.0.1", lean.port), timeout=30) as conn:
        conn.sendall(post(PING, AUTH, path=b"/rcp/" + b"p" * 20_000))
        assert read_until_closed(conn).startswith(b"HTTP/1.1 414 ")


def test_head_limits_are_configurable() -> None:
    app = create_app(build_test_server())
    with lean_server(app, max_header_bytes=1024) as small, \
            socket.create_connection(("127.0.0.1", small.port), timeout=30) as conn:
        conn.sendall(post(PING, b"X-Junk: " + b"a" * 2000 + b"\r\n"))
        assert read_until_closed(conn).startswith(b"HTTP/1.1 431 ")


def test_only_the_head_counts_against_its_limit() -> None:
    """A small head with a body over the head limit, both in one packet (and a head that
    arrives in pieces), is served: the body's bytes are not the head's."""
    nonce = "n" * 3000
    body = b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"nonce":"%s"}}' % nonce.encode()
    with lean_server(create_app(build_test_server()), max_header_bytes=1024) as small, \
            socket.create_connection(("127.0.0.1", small.port), timeout=30) as conn:
        conn.sendall(post(body) + post(body))
        head = post(PING, b"X-Pad: " + b"p" * 600 + b"\r\n")
        for piece in (head[:300], head[300:700], head[700:]):
            time.sleep(0.05)  # separate packets: the head's count goes on across them
            conn.sendall(piece)
        conn.shutdown(socket.SHUT_WR)
        replies = read_until_closed(conn)
    assert replies.count(b"HTTP/1.1 200 OK") == 3
    assert replies.count(nonce.encode()) == 2 and b'"id":1,' in replies


def test_a_trickling_head_is_cut_off_while_idle_keep_alive_still_closes() -> None:
    app = create_app(build_test_server())
    with lean_server(app, header_timeout_s=0.5, keep_alive_s=1.0) as lean:
        trickler = socket.create_connection(("127.0.0.1", lean.port), timeout=30)
        started = time.monotonic()
        head = post(PING)
        reply = b""
        for byte in head[:-len(PING) - 2]:  # one byte at a time, never finishing the head
            try:
                trickler.sendall(bytes([byte]))
            except OSError:
                break
            trickler.settimeout(0.1)
            try:
                reply += trickler.recv(4096)
            except TimeoutError:
                continue
            if reply:
                break
        reply += read_until_closed(trickler)
        trickler.close()
        assert reply.startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - started < 5.0
        with socket.create_connection(("127.0.0.1", lean.port), timeout=30) as idle:
            idle.sendall(post(PING))
            assert b'"result":{}' in read_until_closed(idle)  # then closed for idleness


def test_a_head_left_unfinished_behind_a_pipelined_request_is_cut_off() -> None:
    """A request, then in the same packet the start of another whose head never ends: the
    first is answered, the second head's deadline runs from then (408 well before the
    keep-alive timeout would close the connection)."""
    app = create_app(build_test_server())
    with lean_server(app, header_timeout_s=0.5, keep_alive_s=30.0) as lean, \
            socket.create_connection(("127.0.0.1", lean.port), timeout=30) as conn:
        started = time.monotonic()
        conn.sendall(post(PING) + b"POST /rcp/ping HTTP/1.1\r\nHost: x\r\n")
        reply = read_until_closed(conn)
    assert reply.startswith(b"HTTP/1.1 200 ") and b"HTTP/1.1 408 " in reply
    assert time.monotonic() - started < 5.0


def test_a_trickling_body_is_cut_off() -> None:
    app = create_app(build_test_server())
    with lean_server(app, body_timeout_s=0.5) as lean, \
            socket.create_connection(("127.0.0.1", lean.port), timeout=30) as conn:
        conn.sendall(post(PING)[:-10])
        assert read_until_closed(conn).startswith(b"HTTP/1.1 408 ")


def test_connections_over_the_cap_evict_idle_then_trickling_ones() -> None:
    app = create_app(build_test_server())
    with lean_server(app, max_connections=3) as lean:
        idle = [socket.create_connection(("127.0.0.1", lean.port), timeout=30) for _ in range(3)]
        for conn in idle:
            conn.sendall(post(PING))
            assert b'"result":{}' in conn.recv(65536)
        trickling = []
        for _ in range(3):  # each takes the place of an idle one: a half-sent head
            conn = socket.create_connection(("127.0.0.1", lean.port), timeout=30)
            conn.sendall(b"POST /rcp/ping HTTP/1.1\r\n")
            trickling.append(conn)
        for conn in idle:
            assert read_until_closed(conn) == b""
        time.sleep(1.2)  # their heads are now overdue by the cap's standard (1 s)
        with socket.create_connection(("127.0.0.1", lean.port), timeout=30) as newcomer:
            newcomer.sendall(post(PING, b"Connection: close\r\n"))
            assert b'"result":{}' in read_until_closed(newcomer)
        refused = []
        for conn in trickling:  # one of the three (equally old) gave way with a 408
            conn.settimeout(0.5)
            try:
                refused.append(conn.recv(65536))
            except TimeoutError:
                conn.settimeout(30)
                conn.sendall(b"Host: x\r\nContent-Length: %d\r\n\r\n%s" % (len(PING), PING))
                assert b'"result":{}' in conn.recv(65536)  # the others still work
        assert len(refused) == 1 and refused[0].startswith(b"HTTP/1.1 408 ")
        for conn in trickling:
            conn.close()


def test_connections_over_the_cap_all_busy_shed_newcomers_with_503() -> None:
    app = create_app(build_test_server())
    sleep = b'{"jsonrpc":"2.0","id":1,"method":"x-test/sleep","params":{"seconds":3}}'
    with lean_server(app, max_connections=2) as lean:
        busy = [socket.create_connection(("127.0.0.1", lean.port), timeout=30) for _ in range(2)]
        for conn in busy:
            conn.sendall(post(sleep, path=b"/rcp/x-test/sleep"))
        lean.wait_in_flight(2)
        with socket.create_connection(("127.0.0.1", lean.port), timeout=30) as extra:
            assert read_until_closed(extra).startswith(b"HTTP/1.1 503 ")
        for conn in busy:  # the ones admitted finish their work
            assert b'"slept"' in conn.recv(65536)
            conn.close()


def test_an_h2c_upgrade_offer_is_ignored_and_the_body_kept(lean: LoopbackServer) -> None:
    upgrade = (AUTH + b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
               b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n")
    nonce = b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"nonce":"n"}}'
    with socket.create_connection(("127.0.0.1", lean.port), timeout=30) as conn:
        request = post(nonce, upgrade)
        conn.sendall(request[:-20])  # the body arrives in two pieces
        time.sleep(0.05)
        conn.sendall(request[-20:] + post(PING, AUTH + b"Connection: close\r\n"))
        reply = read_until_closed(conn)  # the connection goes on as HTTP/1.1
    first, second = reply.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200 ") and second.startswith(b"200 ")
    assert json.loads(first.split(b"\r\n\r\n", 1)[1]) == {
        "jsonrpc": "2.0", "id": 7, "result": {"nonce": "n"}}
