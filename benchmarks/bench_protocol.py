"""Server-side protocol throughput: rcpkit's server vs a server built on the reference SDK.

Both servers run the same handlers (the built-in ``ping`` plus the example keyword
``retrieve``) and are driven by the same neutral load driver written here on raw pipes
and raw sockets (neither rcpkit's client nor the reference client), in the same run:

- stdio sequential: one ``ping`` at a time (write a line, read a line);
- stdio pipelined: 64 requests kept in flight;
- HTTP sequential: one client, keep-alive when the server allows it;
- HTTP concurrent: 16 clients at once (asyncio sockets, keep-alive when allowed).

The reference HTTP server closes every connection after one response, so the driver
reconnects whenever a response carries ``Connection: close``. Prints requests/s and the
rcpkit/reference ratio. The two servers are measured in alternating rounds and the best
round of each is kept, so background load hits both alike. Not a test.

    python benchmarks/bench_protocol.py [--seconds 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

OURS_STDIO = """
from rcpkit.server.example import build_server
from rcpkit.transports.stdio import serve_stdio
serve_stdio(build_server())
"""
OURS_HTTP = """
import sys
from rcpkit.server.example import build_server
from rcpkit.transports.http import serve_http
serve_http(build_server(), "127.0.0.1", int(sys.argv[1]))
"""
REFERENCE = """
import sys
import rcp
from rcpkit.server.example import KeywordIndex, SAMPLE_DOCUMENTS
index = KeywordIndex(SAMPLE_DOCUMENTS)
server = rcp.Server()
server.set_info("reference-keyword-example", "1.0")
server.set_conformance("L0")
server.advertise("retrieve", {"maxK": 50, "modes": ["sparse"]})

@server.on("retrieve")
def retrieve(params):
    hits = index.search(str(params.get("query", "")), int(params.get("k", 10)))
    return {"hits": [{"id": i, "score": s, "text": t} for i, s, t in hits]}

if len(sys.argv) > 1:
    server.serve_http(int(sys.argv[1]))
else:
    server.serve_stdio()
"""
INITIALIZE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n'
PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


# ── stdio driver ────────────────────────────────────────────────────────────

class Pipe:
    """A server child on raw pipes; counts reply lines."""

    def __init__(self, code: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.rfd = self.proc.stdout.fileno()
        self.send(INITIALIZE)
        self.read_lines(1)

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.wfd, view):]

    def read_lines(self, count: int) -> None:
        seen = 0
        while seen < count:
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                raise RuntimeError("server closed stdout")
            seen += chunk.count(b"\n")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


def stdio_sequential(code: str, seconds: float) -> float:
    pipe = Pipe(code)
    line = PING + b"\n"
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(100):
            pipe.send(line)
            pipe.read_lines(1)
        done += 100
    pipe.close()
    return done / elapsed


def stdio_pipelined(code: str, seconds: float, depth: int = 64) -> float:
    pipe = Pipe(code)
    line = PING + b"\n"
    pipe.send(line * depth)
    in_flight, done, start = depth, 0, time.perf_counter()
    stop = start + seconds
    while in_flight:
        chunk = os.read(pipe.rfd, 1 << 16)
        answered = chunk.count(b"\n")
        done += answered
        in_flight -= answered
        if time.perf_counter() < stop and answered:
            pipe.send(line * answered)
            in_flight += answered
    elapsed = time.perf_counter() - start
    pipe.close()
    return done / elapsed


# ── HTTP driver ─────────────────────────────────────────────────────────────

REQUEST = (b"POST /rcp/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: " + str(len(PING)).encode() + b"\r\n\r\n" + PING)


async def _exchange(port: int, conn: list[Any]) -> None:
    """One request on ``conn`` ([reader, writer] or empty); reconnects when the server closes."""
    if not conn:
        conn.extend(await asyncio.open_connection("127.0.0.1", port))
    reader, writer = conn
    writer.write(REQUEST)
    head = await reader.readuntil(b"\r\n\r\n")
    length, close = 0, False
    for header in head.split(b"\r\n")[1:]:
        name, _, value = header.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
    await reader.readexactly(length)
    if close:
        writer.close()
        conn.clear()


async def _clients(port: int, clients: int, seconds: float) -> float:
    stop = time.perf_counter() + seconds
    counts = [0] * clients

    async def client(slot: int) -> None:
        conn: list[Any] = []
        while time.perf_counter() < stop:
            await _exchange(port, conn)
            counts[slot] += 1
        if conn:
            conn[1].close()

    start = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return sum(counts) / (time.perf_counter() - start)


def http_rate(code: str, seconds: float, clients: int) -> float:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", code, str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        run: Callable[[], Any] = lambda: _clients(port, clients, seconds)  # noqa: E731
        try:
            import uvloop
            return float(uvloop.run(run()))
        except ImportError:
            return asyncio.run(run())
    finally:
        proc.terminate()
        proc.wait(10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per scenario")
    args = parser.parse_args()
    scenarios: list[tuple[str, Callable[[str], float], str, str]] = [
        ("stdio sequential ping", lambda c: stdio_sequential(c, args.seconds), OURS_STDIO,
         REFERENCE),
        ("stdio pipelined ping (64)", lambda c: stdio_pipelined(c, args.seconds), OURS_STDIO,
         REFERENCE),
        ("HTTP sequential ping", lambda c: http_rate(c, args.seconds, 1), OURS_HTTP, REFERENCE),
        ("HTTP 16 clients ping", lambda c: http_rate(c, args.seconds, 16), OURS_HTTP, REFERENCE),
    ]
    print(f"{'scenario':28} {'rcpkit req/s':>14} {'reference req/s':>16} {'ratio':>7}")
    for name, measure, ours_code, reference_code in scenarios:
        ours = reference = 0.0
        for _ in range(args.rounds):
            ours = max(ours, measure(ours_code))
            reference = max(reference, measure(reference_code))
        print(f"{name:28} {ours:14,.0f} {reference:16,.0f} {ours / reference:6.2f}x", flush=True)


if __name__ == "__main__":
    main()
