"""Where one HTTP ping's time goes in rcpkit's server, layer by layer, without sockets (issue 19).

bench_http_wrk.py measures whole requests over loopback; this one feeds the same keep-alive
``POST /rcp/ping`` bytes straight into the server's connection protocol (a transport that
only counts writes), then times each layer on its own: the HTTP side alone (an endpoint
answering a fixed reply), the bare httptools parser, the route claim, the endpoint, the
dispatcher and the JSON codec. Thread CPU time, best of ``--rounds`` rounds of ``--requests``
(the best filters out a busy machine's noise); the rows nest, so the differences are the
costs of the layers between them.

    python benchmarks/bench_http_path.py --requests 2000 --rounds 25
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import httptools
import uvloop

from rcpkit.protocol import messages
from rcpkit.server.example import build_server
from rcpkit.transports.http import create_app
from rcpkit.transports.http.server import HttpServer, Reply, _Connection

BODY = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
REQUEST = (b"POST /rcp/ping HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
HEADERS = {b"host": b"127.0.0.1:8080", b"content-type": b"application/json",
           b"content-length": b"%d" % len(BODY)}
REPLY = b'{"jsonrpc":"2.0","id":1,"result":{}}'


class CountingTransport:
    """Takes the server's writes and counts them; never closes."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str) -> Any:
        return None

    def close(self) -> None:
        raise RuntimeError("the server closed a keep-alive connection")

    def pause_reading(self) -> None:
        """Never paused: each request is answered before the next is fed."""

    def resume_reading(self) -> None:
        """See :meth:`pause_reading`."""


class FixedApp:
    """An app whose endpoint claims every request and answers a fixed ping reply."""

    def __init__(self) -> None:
        self.endpoints = self

    def claim(self, verb: bytes, target: bytes, headers: dict[bytes, bytes]
              ) -> tuple[FixedApp, str]:
        return self, "ping"

    async def answer(self, method: str, headers: dict[bytes, bytes], body: bytes) -> Reply:
        return 200, [(b"content-type", b"application/json")], REPLY


class Callbacks:
    """What the bare parser calls back: the same callbacks as the server's, doing nothing."""

    def on_url(self, url: bytes) -> None: ...
    def on_header(self, name: bytes, value: bytes) -> None: ...
    def on_headers_complete(self) -> None: ...
    def on_body(self, body: bytes) -> None: ...
    def on_message_complete(self) -> None: ...


def finish(coro: Any) -> Any:
    """Run a coroutine that never waits (a ping) to its end; a reply given at once is kept."""
    if not isinstance(coro, Coroutine):
        return coro
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the ping waited for something")


def connection(app: Any, loop: asyncio.AbstractEventLoop) -> tuple[_Connection, CountingTransport]:
    server = HttpServer(app)
    server._loop = loop  # serving without a listening socket
    conn, transport = _Connection(server), CountingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


async def layers(requests: int, rounds: int) -> None:
    loop = asyncio.get_running_loop()
    app = create_app(build_server())
    endpoint = app.endpoints.root
    dispatcher = endpoint.sessions.dispatcher_for(None)
    parsed = messages.parse(BODY)
    whole, whole_transport = connection(app, loop)
    http_only, _ = connection(FixedApp(), loop)
    parser = httptools.HttpRequestParser(Callbacks())
    rows: list[tuple[str, Callable[[], Any]]] = [
        ("whole request (server + app)", lambda: whole.data_received(REQUEST)),
        ("server alone (fixed direct reply)", lambda: http_only.data_received(REQUEST)),
        ("  of which httptools parsing", lambda: parser.feed_data(REQUEST)),
        ("route claim (Endpoints.claim)", lambda: app.endpoints.claim(b"POST", b"/rcp/ping",
                                                                      HEADERS)),
        ("endpoint (gate, sessions, dispatch)", lambda: finish(endpoint.answer(
            "ping", HEADERS, BODY))),
        ("  dispatcher, parsed frame in", lambda: finish(dispatcher.handle_message(
            parsed, path_method="ping"))),
        ("  JSON-RPC parse (messages.parse)", lambda: messages.parse(BODY)),
        ("  JSON-RPC encode (messages.encode)", lambda: messages.encode(
            messages.success_response(1, {}))),
    ]
    best = dict.fromkeys((name for name, _ in rows), float("inf"))
    for _, call in rows:  # warm-up
        for _ in range(requests):
            call()
    for _ in range(rounds):
        for name, call in rows:
            started = time.thread_time()
            for _ in range(requests):
                call()
            best[name] = min(best[name], (time.thread_time() - started) / requests)
    if whole_transport.writes != requests * (rounds + 1):
        raise RuntimeError("a request went unanswered")
    print(f"{'layer (one keep-alive ping)':38} {'µs':>6}")
    for name, seconds in best.items():
        print(f"{name:38} {seconds * 1e6:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=25)
    options = parser.parse_args()
    uvloop.run(layers(options.requests, options.rounds))


if __name__ == "__main__":
    main()
