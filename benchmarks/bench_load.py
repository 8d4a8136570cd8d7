"""Load test of the served engine (``rcpkit serve``), over HTTP and stdio. Not a test: it
prints figures, which docs/benchmarks.md ("Load") records.

For a bounded time it keeps a mix of ``ping`` (with a nonce), ``retrieve`` and ``index/add``
(one new document each) in flight against a fresh data directory with the hashing embedder:

- HTTP: ``--clients`` keep-alive connections, each with ``--depth`` pipelined requests in
  flight (so 16 × 64 = 1,024 by default), on raw asyncio sockets;
- stdio: one child with ``--stdio-depth`` requests in flight.

Before the HTTP load, ``--flood-mib`` (default 100) measures abuse the server must shrug off:
two clients each send a request whose one header grows to that many MiB while a third
pings; printed are how long until the server cut them off, the slowest ping meanwhile and the
server's RSS after.

``--slowloris`` (default 2,000) connections then each trickle one byte of a request head
every second: printed is how many the server still holds once its head deadline
(``--header-timeout``, 10 s) has passed — 15 s in — and the slowest ping meanwhile.

Every reply is checked against its request: ``lost`` (never answered: the run ends by
waiting for every outstanding reply up to ``--drain`` seconds), ``duplicated`` (an id
answered twice), ``mismatched`` (a reply to another request, or a ping echoing another
nonce), ``errors`` (any error reply, shedding included). Then every acknowledged
``index/add`` is deleted again by id: ``deleted`` must equal the acknowledged count (no
acknowledged write lost). Printed: those counts (all must be 0 but ``acked writes``),
requests/s, p50/p99 latency, and the server's RSS before and after the load.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_load.py [--seconds 10] [--clients 16]
        [--depth 64] [--stdio-depth 256] [--flood-mib 100] [--slowloris 2000]
        [--only http|stdio]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]
CONFIG = 'embedder = "hashing"\nhashing_dimension = 64\n'
WORDS = ["bees", "honey", "pollen", "nectar", "hive", "queen", "worker", "drone", "wax", "comb",
         "flower", "meadow", "clover", "summer", "swarm", "keeper", "smoke", "frame", "brood",
         "larva"]


@dataclass
class Tally:
    """What came back, checked against what was asked."""

    sent: dict[str, tuple[str, float, Any]] = field(default_factory=dict)
    """Outstanding request id → (method, send time, expected nonce or doc id)."""
    answered: set[str] = field(default_factory=set)
    latencies: list[float] = field(default_factory=list)
    duplicated: int = 0
    mismatched: int = 0
    errors: int = 0
    error_codes: dict[int, int] = field(default_factory=dict)
    acked_docs: list[str] = field(default_factory=list)

    def reply(self, frame: dict[str, Any], expected_id: str | None = None) -> None:
        rid = frame.get("id")
        if not isinstance(rid, str) or (expected_id is not None and rid != expected_id):
            self.mismatched += 1
            rid = expected_id if expected_id is not None else rid
        if rid in self.answered:
            self.duplicated += 1
            return
        entry = self.sent.pop(rid, None) if isinstance(rid, str) else None
        if entry is None:
            self.mismatched += 1
            return
        self.answered.add(rid)
        method, started, expected = entry
        self.latencies.append(time.perf_counter() - started)
        if "error" in frame:
            self.errors += 1
            code = frame["error"].get("code", 0)
            self.error_codes[code] = self.error_codes.get(code, 0) + 1
        elif method == "ping" and frame["result"].get("nonce") != expected:
            self.mismatched += 1
        elif method == "index/add":
            if frame["result"].get("ids") == [expected]:
                self.acked_docs.append(expected)
            else:
                self.mismatched += 1


_IDS = itertools.count(1)


def next_request(tally: Tally) -> dict[str, Any]:
    """The next request of the mix: 50% ping, 35% retrieve, 15% index/add."""
    number = next(_IDS)
    rid = f"r{number}"
    slot = number % 20
    words = " ".join(WORDS[(number + i) % len(WORDS)] for i in range(3))
    if slot < 10:
        method, params, expected = "ping", {"nonce": f"n{number}"}, f"n{number}"
    elif slot < 17:
        method, params, expected = "retrieve", {"query": words, "k": 5}, None
    else:
        doc = f"load-{number}"
        method, params, expected = ("index/add",
                                    {"documents": [{"id": doc, "text": f"{words} {number}"}]},
                                    doc)
    tally.sent[rid] = (method, time.perf_counter(), expected)
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ── HTTP ────────────────────────────────────────────────────────────────────

def http_request(frame: dict[str, Any]) -> bytes:
    body = json.dumps(frame).encode()
    return (b"POST /rcp HTTP/1.1\r\nHost: load\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def http_client(port: int, depth: int, until: float, drain_until: float,
                      tally: Tally, statuses: dict[int, int]) -> None:
    """One connection: ``depth`` pipelined requests in flight; replies come in order."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    order: list[str] = []
    try:
        for _ in range(depth):
            frame = next_request(tally)
            order.append(frame["id"])
            writer.write(http_request(frame))
        while order and time.perf_counter() < drain_until:
            status, body = await asyncio.wait_for(read_response(reader), drain_until -
                                                  time.perf_counter())
            statuses[status] = statuses.get(status, 0) + 1
            expected = order.pop(0)
            try:
                tally.reply(json.loads(body), expected)
            except ValueError:
                tally.sent.pop(expected, None)
                tally.answered.add(expected)
                tally.errors += 1
            if time.perf_counter() < until:
                frame = next_request(tally)
                order.append(frame["id"])
                writer.write(http_request(frame))
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        pass  # whatever is still outstanding counts as lost
    finally:
        writer.close()


def http_call(port: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    frame = {"jsonrpc": "2.0", "id": "x", "method": method, "params": params}
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(http_request(frame).replace(b"Host: load\r\n",
                                                 b"Host: load\r\nConnection: close\r\n"))
        data = b""
        while chunk := conn.recv(1 << 16):
            data += chunk
    reply: dict[str, Any] = json.loads(data.split(b"\r\n\r\n", 1)[1])
    return reply


def flood_head(port: int, mib: int) -> float:
    """Send a request whose one header grows to ``mib`` MiB; the seconds until the server
    stopped taking it (closed the connection) or took it all."""
    started = time.perf_counter()
    piece = b"a" * (1 << 20)
    with socket.create_connection(("127.0.0.1", port), timeout=120) as conn:
        try:
            conn.sendall(b"POST /rcp HTTP/1.1\r\nHost: flood\r\nX-Flood: ")
            for _ in range(mib):
                conn.sendall(piece)
            conn.sendall(b"\r\nContent-Length: 2\r\n\r\n{}")
            conn.recv(1024)
        except OSError:
            pass
    return time.perf_counter() - started


def measure_flood(port: int, pid: int, mib: int) -> None:
    took: list[float] = []
    floods = [threading.Thread(target=lambda: took.append(flood_head(port, mib)))
              for _ in range(2)]
    for flood in floods:
        flood.start()
    slowest = 0.0
    while any(flood.is_alive() for flood in floods):
        started = time.perf_counter()
        http_call(port, "ping", {})
        slowest = max(slowest, time.perf_counter() - started)
    for flood in floods:
        flood.join()
    print(f"\nHTTP head flood: 2 x {mib} MiB header, cut off after {max(took):.2f} s; "
          f"slowest ping meanwhile {slowest * 1000:.0f} ms; server RSS {rss_kb(pid) / 1024:.0f} "
          "MiB after")


async def _trickle(port: int, seconds: float, held: list[int]) -> None:
    """One slowloris connection: a byte of a request head each second for ``seconds``;
    counted in ``held`` if the server still had it open at the end."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return
    head = b"POST /rcp HTTP/1.1\r\nHost: slow\r\nX-Slow: " + b"s" * int(seconds + 5)
    try:
        for byte in head[:int(seconds)]:
            writer.write(bytes([byte]))
            await writer.drain()
            try:
                if await asyncio.wait_for(reader.read(1024), 1.0) == b"" or reader.at_eof():
                    return
            except TimeoutError:
                continue
            return  # the server answered (408) and closes
        held.append(1)
    except ConnectionError:
        return
    finally:
        writer.close()


def measure_slowloris(port: int, count: int, seconds: float) -> None:
    held: list[int] = []
    slowest: list[float] = [0.0]
    pings = {"answered": 0, "refused": 0}

    async def attack() -> None:
        async def pinger() -> None:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                started = time.perf_counter()
                try:
                    await asyncio.to_thread(http_call, port, "ping", {})
                except (OSError, ValueError, IndexError):
                    pings["refused"] += 1  # shed (503) or cut off
                else:
                    pings["answered"] += 1
                    slowest[0] = max(slowest[0], time.perf_counter() - started)
                await asyncio.sleep(0.2)

        await asyncio.gather(pinger(), *(_trickle(port, seconds, held) for _ in range(count)))

    asyncio.run(attack())
    print(f"\nHTTP slowloris: {count} connections trickling a head for {seconds:.0f} s: "
          f"{len(held)} still held at the end; pings meanwhile: {pings['answered']} answered "
          f"(slowest {slowest[0] * 1000:.0f} ms), {pings['refused']} refused")


def run_http(data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    server = subprocess.Popen([*RCPKIT, "serve", "--http", f"127.0.0.1:{port}", "--data",
                               str(data_dir)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                http_call(port, "ping", {})
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("rcpkit serve --http did not start") from None
                time.sleep(0.1)
        if args.flood_mib:
            measure_flood(port, server.pid, args.flood_mib)
        if args.slowloris:
            measure_slowloris(port, args.slowloris, 15.0)
        rss_before = rss_kb(server.pid)
        tally, statuses = Tally(), {}
        started = time.perf_counter()
        until = started + args.seconds

        async def load() -> None:
            await asyncio.gather(*(http_client(port, args.depth, until, until + args.drain,
                                               tally, statuses) for _ in range(args.clients)))

        asyncio.run(load())
        elapsed = time.perf_counter() - started
        rss_after = rss_kb(server.pid)
        deleted = http_call(port, "index/delete", {"ids": tally.acked_docs})["result"]["deleted"]
        return report("HTTP", f"{args.clients} clients x {args.depth} pipelined", tally,
                      elapsed, rss_before, rss_after, deleted, statuses)
    finally:
        server.terminate()
        server.wait(30)


# ── stdio ───────────────────────────────────────────────────────────────────

def run_stdio(data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    child = subprocess.Popen([*RCPKIT, "serve", "--stdio", "--data", str(data_dir)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert child.stdin is not None and child.stdout is not None
    out, inp = child.stdin, child.stdout
    non_frames = 0

    def send(frame: dict[str, Any]) -> None:
        out.write(json.dumps(frame).encode() + b"\n")

    def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
        send({"jsonrpc": "2.0", "id": "x", "method": method, "params": params})
        reply: dict[str, Any] = json.loads(inp.readline())
        return reply

    try:
        call("initialize", {"protocolVersion": 1})
        rss_before = rss_kb(child.pid)
        tally = Tally()
        started = time.perf_counter()
        until, drain_until = started + args.seconds, started + args.seconds + args.drain
        for _ in range(args.stdio_depth):
            send(next_request(tally))
        buffer = b""
        while tally.sent and time.perf_counter() < drain_until:
            chunk = os.read(inp.fileno(), 1 << 16)
            if not chunk:
                break
            *lines, buffer = (buffer + chunk).split(b"\n")
            for line in lines:
                try:
                    frame = json.loads(line)
                except ValueError:
                    non_frames += 1
                    continue
                tally.reply(frame)
                if time.perf_counter() < until:
                    send(next_request(tally))
        elapsed = time.perf_counter() - started
        rss_after = rss_kb(child.pid)
        deleted = call("index/delete", {"ids": tally.acked_docs})["result"]["deleted"]
        tally.mismatched += non_frames
        return report("stdio", f"{args.stdio_depth} in flight", tally, elapsed, rss_before,
                      rss_after, deleted, {})
    finally:
        out.close()
        child.wait(60)


# ── report ──────────────────────────────────────────────────────────────────

def report(transport: str, shape: str, tally: Tally, elapsed: float, rss_before: int,
           rss_after: int, deleted: int, statuses: dict[int, int]) -> dict[str, Any]:
    latencies = sorted(tally.latencies)
    p50 = statistics.median(latencies) * 1000 if latencies else 0.0
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000 if latencies else 0.0
    figures = {
        "lost": len(tally.sent), "duplicated": tally.duplicated,
        "mismatched": tally.mismatched, "errors": tally.errors,
        "acked writes": len(tally.acked_docs), "acked writes lost": len(tally.acked_docs) - deleted,
    }
    print(f"\n{transport}: {shape}, {len(latencies)} replies in {elapsed:.1f} s "
          f"({len(latencies) / elapsed:,.0f} req/s)")
    for name, value in figures.items():
        print(f"  {name:<18} {value}")
    if tally.error_codes:
        print(f"  error codes        {tally.error_codes}")
    if statuses:
        print(f"  HTTP statuses      {dict(sorted(statuses.items()))}")
    print(f"  latency p50/p99    {p50:.1f} / {p99:.1f} ms")
    print(f"  server RSS         {rss_before / 1024:.0f} MiB before, "
          f"{rss_after / 1024:.0f} MiB after")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--drain", type=float, default=60.0,
                        help="seconds to wait for outstanding replies after the load")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--depth", type=int, default=64)
    parser.add_argument("--stdio-depth", type=int, default=256)
    parser.add_argument("--only", choices=("http", "stdio"))
    parser.add_argument("--flood-mib", type=int, default=100,
                        help="header size of the head flood before the HTTP load (0: skip)")
    parser.add_argument("--slowloris", type=int, default=2000,
                        help="trickling connections before the HTTP load (0: skip)")
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="rcpkit-load-") as work:
        for name, run in (("http", run_http), ("stdio", run_stdio)):
            if args.only not in (None, name):
                continue
            data_dir = Path(work) / name
            data_dir.mkdir()
            (data_dir / "rcpkit.toml").write_text(CONFIG)
            figures = run(data_dir, args)
            failed |= any(value for key, value in figures.items() if key != "acked writes")
    print("\nall checks 0" if not failed else "\nSOME CHECKS ARE NOT 0")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
