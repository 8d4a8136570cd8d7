"""HTTP ping/s of rcpkit's server against the reference SDK's, driven by ``wrk`` (issue 19).

bench_protocol.py drives both servers with its own Python client; this one uses a neutral,
C load generator (``wrk``, Debian package ``wrk``), so the driver is never what caps the
faster server. Same servers and handlers as bench_protocol.py (``OURS_HTTP`` and
``REFERENCE``: built-in ``ping``), a ``POST /rcp/ping`` JSON-RPC body (``--method retrieve``:
a keyword ``retrieve`` over the same sample documents, a handler that runs), keep-alive
connections (the reference closes each connection after its response, so wrk reconnects for
it, as any HTTP/1.1 client would). Each round runs rcpkit then the reference back to back;
the median of the per-round ratios is printed next to the best rates.

Where the CPU goes is printed too (Linux ``/proc``): the server's CPU per request (every
worker process included) and wrk's own, since wrk shares the machine's cores with the
server. ``--floor`` adds a ceiling for any Python server on this machine: ``FLOOR``, the
same event loop and HTTP parser as rcpkit (uvloop + httptools) answering every request
with a fixed ping reply, with no routing, JSON or dispatch at all.

``--baseline DIR`` adds rcpkit from another checkout to each round (for instance ``git
worktree add /tmp/base <commit>``), and prints this tree's rate over its, round by round.

    python benchmarks/bench_http_wrk.py --seconds 3 --rounds 3 [--workers 2] [--floor]
                                        [--baseline DIR] [--method retrieve]
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from _net import free_port, wait_listening
from bench_protocol import INITIALIZE, OURS_HTTP, OURS_HTTP_WORKERS, PING, REFERENCE

BODIES = {"ping": PING.decode(),
          "retrieve": '{"jsonrpc":"2.0","id":1,"method":"retrieve",'
                      '"params":{"query":"request over HTTP","k":3}}'}
LUA = """
wrk.method = "POST"
wrk.path = "/rcp/%s"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '%s'
"""
FLOOR = """
import asyncio, socket, sys
import httptools, uvloop
REPLY = (b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\ncontent-length: 36\\r\\n\\r\\n"
         b'{"jsonrpc":"2.0","id":1,"result":{}}')
class Ping(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.parser = transport, httptools.HttpRequestParser(self)
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def data_received(self, data):
        self.parser.feed_data(data)
    def on_message_complete(self):
        self.transport.write(REPLY)
async def main():
    await asyncio.get_running_loop().create_server(Ping, "127.0.0.1", int(sys.argv[1]))
    await asyncio.Event().wait()
uvloop.run(main())
"""
SCENARIOS = (("1 connection", 1, 1), ("16 connections", 16, 2))
_RATE = re.compile(r"Requests/sec:\s+([0-9.]+)")
_TOTAL = re.compile(r"(\d+) requests in")
_TICK = os.sysconf("SC_CLK_TCK")


class Run:
    """One wrk run: requests/s, and CPU µs per request of the server and of wrk."""

    def __init__(self, rate: float, server_us: float, wrk_us: float) -> None:
        self.rate, self.server_us, self.wrk_us = rate, server_us, wrk_us


def process_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its child processes (the workers) so far."""
    total = 0
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    for each in (pid, *map(int, children)):
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


def wrk_rate(code: str, args: list[str], connections: int, threads: int, seconds: float,
             script: Path, source: Path | None = None) -> Run:
    """What wrk gets from a server started from ``code`` on a free loopback port; with
    ``source``, importing rcpkit from that tree (a ``src`` folder) instead of this one."""
    port = free_port()
    env = None if source is None else {**os.environ, "PYTHONPATH": str(source)}
    server = subprocess.Popen([sys.executable, "-c", code, str(port), *args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_listening(port)
        # The reference keeps one session for the process: initialized once, it retrieves.
        urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port}/rcp/initialize", INITIALIZE,
            {"content-type": "application/json"}), timeout=10).read()
        subprocess.run(  # a warm-up, which also lets every worker start before CPU is counted
            ["wrk", "-t1", f"-c{connections}", "-d1s", "-s", str(script),
             f"http://127.0.0.1:{port}/rcp/"], check=True, capture_output=True)
        server_before = process_cpu(server.pid)
        wrk_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(
            ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", "-s", str(script),
             f"http://127.0.0.1:{port}/rcp/"],
            check=True, capture_output=True, text=True, timeout=seconds + 30).stdout
        wrk_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        server_cpu = process_cpu(server.pid) - server_before
    finally:
        server.terminate()
        server.wait(10)
    found, total = _RATE.search(out), _TOTAL.search(out)
    if found is None or total is None:
        raise RuntimeError(f"no rate in wrk's output:\n{out}")
    requests = int(total.group(1))
    wrk_cpu = (wrk_after.ru_utime + wrk_after.ru_stime
               - wrk_before.ru_utime - wrk_before.ru_stime)
    return Run(float(found.group(1)), 1e6 * server_cpu / requests, 1e6 * wrk_cpu / requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0,
                        help="also run rcpkit with --workers N (16 connections)")
    parser.add_argument("--floor", action="store_true",
                        help="also run FLOOR, a fixed-reply uvloop + httptools server")
    parser.add_argument("--baseline", type=Path,
                        help="also run rcpkit from another checkout (e.g. a git worktree of an "
                             "earlier commit), in the same rounds: this tree's rate over its")
    parser.add_argument("--method", choices=sorted(BODIES), default="ping",
                        help="the call every request makes")
    options = parser.parse_args()
    baseline = None if options.baseline is None else options.baseline.resolve() / "src"
    if baseline is not None and not (baseline / "rcpkit").is_dir():
        sys.exit(f"error: no rcpkit package under {baseline}")
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian: apt-get install wrk)")
    ours = [(name, OURS_HTTP, [], c, t) for name, c, t in SCENARIOS]
    if options.workers:
        ours.append((f"16 connections, --workers {options.workers}", OURS_HTTP_WORKERS,
                     [str(options.workers)], 16, 2))
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "ping.lua"
        script.write_text(LUA % (options.method, BODIES[options.method]))
        scenario = f"scenario ({options.method})"
        print(f"{scenario:34} {'rcpkit/s':>10} {'reference/s':>12} {'best ratio':>11} "
              f"{'median ratio':>13}  CPU µs/request: {'rcpkit':>6} {'wrk':>4} | "
              f"{'reference':>9} {'wrk':>4}" + ("  | floor/s  µs  wrk" if options.floor else "")
              + ("  | baseline/s  median rcpkit/baseline" if baseline else ""))
        for name, code, args, connections, threads in ours:
            measure = functools.partial(wrk_rate, connections=connections, threads=threads,
                                        seconds=options.seconds, script=script)
            rounds = [(measure(code, args), measure(REFERENCE, []),
                       measure(FLOOR, []) if options.floor and not args else None,
                       measure(code, args, source=baseline) if baseline else None)
                      for _ in range(options.rounds)]
            mine, theirs = [r[0] for r in rounds], [r[1] for r in rounds]
            best_ours, best_reference = max(r.rate for r in mine), max(r.rate for r in theirs)
            median = statistics.median(o.rate / r.rate for o, r, _, _ in rounds)
            line = (f"{name:34} {best_ours:10,.0f} {best_reference:12,.0f} "
                    f"{best_ours / best_reference:10.2f}x {median:12.2f}x  "
                    f"{'':16}{_median(mine, 'server_us'):6.1f} {_median(mine, 'wrk_us'):4.1f} | "
                    f"{_median(theirs, 'server_us'):9.1f} {_median(theirs, 'wrk_us'):4.1f}")
            floors = [r[2] for r in rounds if r[2] is not None]
            if floors:
                line += (f"  | {max(r.rate for r in floors):7,.0f} "
                         f"{_median(floors, 'server_us'):4.1f} {_median(floors, 'wrk_us'):4.1f}")
            earlier = [(r[0], r[3]) for r in rounds if r[3] is not None]
            if earlier:
                line += (f"  | {max(b.rate for _, b in earlier):10,.0f} "
                         f"{statistics.median(o.rate / b.rate for o, b in earlier):8.3f}x")
            print(line, flush=True)


def _median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(run, field) for run in runs)


if __name__ == "__main__":
    main()
