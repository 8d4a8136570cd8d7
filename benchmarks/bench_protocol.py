"""Server-side protocol throughput: rcpkit's server vs a server built on the reference SDK.

Both servers run the same handlers (the built-in ``ping`` plus the example keyword
``retrieve``) and are driven by the same neutral load driver written here on raw pipes
and raw sockets (neither rcpkit's client nor the reference client), in the same run:

- stdio sequential: one ``ping`` at a time (write a line, read a line);
- stdio pipelined: 64 requests kept in flight;
- HTTP sequential: one client, keep-alive when the server allows it;
- HTTP concurrent: 16 clients at once (asyncio sockets, keep-alive when allowed, spread
  over ``--drivers`` processes so that one driver loop does not cap the rate), with
  rcpkit served three ways: its lean HTTP server in one process (the default of
  ``serve_http``), the same in ``--workers`` processes (a read-only server declaring itself
  multi-process safe), and the same ASGI app under uvicorn (httptools + uvloop, tuned).

The reference HTTP server closes every connection after one response, so the driver
reconnects whenever a response carries ``Connection: close``. The two servers are measured
in alternating rounds. Printed per scenario: the best requests/s of each and their ratio,
the median of the per-round ratios (each round pairs two back-to-back runs, so it is the
figure least moved by background load), and the server's CPU time per request (user +
system of the server process and its workers, best round) with the reference/rcpkit
ratio — on a shared box, throughput follows the CPU share a process gets, while CPU per
request measures the server's own cost. Linux only (``/proc``). Not a test.

    python benchmarks/bench_protocol.py [--seconds 2] [--rounds 3] [--workers 2] [--drivers 2]
                                        [--only HTTP]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from _net import free_port, wait_listening

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
OURS_HTTP_UVICORN = """
import sys
import uvicorn
from rcpkit.server.example import build_server
from rcpkit.transports.http import create_app
uvicorn.run(create_app(build_server()), host="127.0.0.1", port=int(sys.argv[1]),
            log_level="warning", access_log=False, lifespan="off", proxy_headers=False,
            server_header=False, backlog=2048)
"""
OURS_HTTP_WORKERS = """
import sys
from rcpkit.server.example import SAMPLE_DOCUMENTS, build_server
from rcpkit.transports.http import serve_http

def read_only():
    server = build_server(SAMPLE_DOCUMENTS)
    for method in ("index/add", "index/delete"):  # nothing a request changes remains
        del server.handlers[method]
    del server.capabilities["index"]
    server.multiprocess_safe = True
    return server

sys.exit(serve_http(read_only, "127.0.0.1", int(sys.argv[1]), workers=int(sys.argv[2])))
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


class Measurement(NamedTuple):
    rate: float
    """Requests per second."""
    cpu_us: float
    """Server CPU time (user + system, workers included) per request, in µs."""


def _server_cpu(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` and its live children (Linux ``/proc``)."""
    total = 0
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if stat_file.parent.name == str(pid) or fields[1] == str(pid):
            total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


def stdio_sequential(code: str, seconds: float) -> Measurement:
    pipe = Pipe(code)
    line = PING + b"\n"
    cpu = _server_cpu(pipe.proc.pid)
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(100):
            pipe.send(line)
            pipe.read_lines(1)
        done += 100
    cpu = _server_cpu(pipe.proc.pid) - cpu
    pipe.close()
    return Measurement(done / elapsed, cpu / done * 1e6)


def stdio_pipelined(code: str, seconds: float, depth: int = 64) -> Measurement:
    pipe = Pipe(code)
    line = PING + b"\n"
    cpu = _server_cpu(pipe.proc.pid)
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
    cpu = _server_cpu(pipe.proc.pid) - cpu
    pipe.close()
    return Measurement(done / elapsed, cpu / done * 1e6)


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


async def _clients(port: int, clients: int, seconds: float) -> tuple[int, float]:
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
    return sum(counts), time.perf_counter() - start


def http_rate(code: str, seconds: float, clients: int, *args: str,
              drivers: int = 1) -> Measurement:
    """``clients`` keep-alive clients spread over ``drivers`` driver processes (so the
    driver's own event loop is not what limits a fast server)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", code, str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port)
        cpu = _server_cpu(proc.pid)
        shares = [clients // drivers + (i < clients % drivers) for i in range(drivers)]
        with multiprocessing.get_context("fork").Pool(drivers) as pool:
            results = pool.starmap(_drive, [(port, share, seconds) for share in shares])
        cpu = _server_cpu(proc.pid) - cpu
        done = sum(count for count, _ in results)
        return Measurement(done / max(elapsed for _, elapsed in results), cpu / done * 1e6)
    finally:
        proc.terminate()
        proc.wait(10)


def _drive(port: int, clients: int, seconds: float) -> tuple[int, float]:
    """One driver process: ``clients`` concurrent clients; (requests done, seconds)."""
    try:
        import uvloop
        return uvloop.run(_clients(port, clients, seconds))
    except ImportError:
        return asyncio.run(_clients(port, clients, seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per scenario")
    parser.add_argument("--workers", type=int, default=2, help="processes of the multi-worker row")
    parser.add_argument("--drivers", type=int, default=2,
                        help="driver processes sharing the 16 HTTP clients")
    parser.add_argument("--only", default="", help="run only scenarios whose name contains this")
    args = parser.parse_args()
    scenarios: list[tuple[str, Callable[[str], Measurement], str, str]] = [
        ("stdio sequential ping", lambda c: stdio_sequential(c, args.seconds), OURS_STDIO,
         REFERENCE),
        ("stdio pipelined ping (64)", lambda c: stdio_pipelined(c, args.seconds), OURS_STDIO,
         REFERENCE),
        ("HTTP sequential ping", lambda c: http_rate(c, args.seconds, 1), OURS_HTTP, REFERENCE),
        ("HTTP 16 clients ping", lambda c: http_rate(c, args.seconds, 16, drivers=args.drivers),
         OURS_HTTP, REFERENCE),
        (f"HTTP 16 clients, {args.workers} workers",
         lambda c: http_rate(c, args.seconds, 16, str(args.workers), drivers=args.drivers),
         OURS_HTTP_WORKERS, REFERENCE),
        ("HTTP 16 clients, uvicorn",
         lambda c: http_rate(c, args.seconds, 16, drivers=args.drivers), OURS_HTTP_UVICORN,
         REFERENCE),
    ]
    scenarios = [scenario for scenario in scenarios if args.only in scenario[0]]
    print(f"{'scenario':32} {'rcpkit req/s':>13} {'reference':>10} {'ratio':>6} "
          f"{'median':>7} {'rcpkit cpu':>11} {'reference':>10} {'ratio':>6}")
    for name, measure, ours_code, reference_code in scenarios:
        pairs = [(measure(ours_code), measure(reference_code)) for _ in range(args.rounds)]
        ours = max(pair[0].rate for pair in pairs)
        reference = max(pair[1].rate for pair in pairs)
        paired = statistics.median(o.rate / r.rate for o, r in pairs)
        ours_cpu = min(pair[0].cpu_us for pair in pairs)
        reference_cpu = min(pair[1].cpu_us for pair in pairs)
        print(f"{name:32} {ours:13,.0f} {reference:10,.0f} {ours / reference:5.2f}x "
              f"{paired:6.2f}x {ours_cpu:9.0f}µs {reference_cpu:8.0f}µs "
              f"{reference_cpu / ours_cpu:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
