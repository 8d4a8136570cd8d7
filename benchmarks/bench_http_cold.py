"""Memory one HTTP ping touches from cold caches, layer by layer (issue 19).

On one keep-alive connection every request starts on a CPU just woken from halt, its caches
emptied by whatever ran meanwhile; what it costs then follows the memory it touches more than
the instructions it runs (docs/benchmarks.md, "The HTTP path, shortened"). Timing that is
noisy here (±10 % between runs), so this counts it: under valgrind's cachegrind (Debian
package ``valgrind``), a pass over a 4 MB buffer empties the simulated caches (32 KB L1, 2 MB
last level) before each request, and the last-level misses of the request are the 64-byte
lines it pulls from memory: code (``I``) and data (``D``). Each figure is the difference
between a run of ``--requests`` requests and a run of none, with the same passes, per
request. ``PYTHONHASHSEED`` is fixed; the address layout still varies, by ~15 lines.

The rows nest as bench_http_path.py's: the bare parser answering a fixed reply (the floor of
any server on uvloop + httptools), rcpkit's HTTP server with a fixed direct reply, and the
whole request (server, endpoint, dispatcher, JSON-RPC).

    python benchmarks/bench_http_cold.py [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httptools
import numpy as np
import uvloop
from bench_http_path import REPLY, REQUEST, CountingTransport, FixedApp, connection

from rcpkit.server.example import build_server
from rcpkit.transports.http import create_app

KINDS = {"floor": "bare parser, fixed reply", "server": "rcpkit server, fixed direct reply",
         "whole": "whole request (server + app)"}
CACHES = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=2097152,16,64"]
_FLUSH_BYTES = 4 * 1024 * 1024
"""Twice the simulated last level: one pass over it leaves none of the request's lines."""
_WARM_UP = 200


class Floor:
    """httptools and a fixed reply, no Python beyond the parser's callback."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport = CountingTransport()
        self.reply = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(REPLY), REPLY)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.transport.write(self.reply)


async def drive(kind: str, requests: int, passes: int) -> None:
    """``passes`` cache-emptying passes, the first ``requests`` of them each followed by one
    ping; warmed up first, and without collections (serving pings makes none)."""
    if kind == "floor":
        target: Any = Floor()
        transport = target.transport
    else:
        app = create_app(build_server()) if kind == "whole" else FixedApp()
        target, transport = connection(app, asyncio.get_running_loop())
    for _ in range(_WARM_UP):
        target.data_received(REQUEST)
    buffer = np.zeros(_FLUSH_BYTES // 8)
    gc.collect()
    gc.disable()
    for done in range(passes):
        np.add(buffer, 1.0, out=buffer)
        if done < requests:
            target.data_received(REQUEST)
    if transport.writes != _WARM_UP + min(requests, passes):
        raise RuntimeError("a request went unanswered")


def counts(kind: str, requests: int, passes: int, folder: Path) -> dict[str, int]:
    """cachegrind's totals for one driven run."""
    out = folder / f"{kind}.{requests}"
    env = {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1"}
    subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=yes", *CACHES,
                    f"--cachegrind-out-file={out}", sys.executable, __file__, "--drive", kind,
                    "--requests", str(requests), "--passes", str(passes)],
                   env=env, check=True, capture_output=True)
    text = out.read_text()
    events = text.split("events:", 1)[1].split("\n", 1)[0].split()
    summary = next(line for line in text.splitlines() if line.startswith("summary:"))
    return dict(zip(events, map(int, summary.split()[1:]), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--drive", choices=sorted(KINDS), help=argparse.SUPPRESS)
    parser.add_argument("--passes", type=int, default=0, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.drive:
        uvloop.run(drive(options.drive, options.requests, options.passes))
        return
    if shutil.which("valgrind") is None:
        sys.exit("error: this benchmark runs under valgrind: apt-get install valgrind")
    print(f"{'one keep-alive ping, caches emptied first':42} {'instructions':>12} "
          f"{'lines from memory':>18} {'code':>6} {'data':>6} {'x floor':>8}")
    floor = 0.0
    with tempfile.TemporaryDirectory() as folder:
        for kind, label in KINDS.items():
            none = counts(kind, 0, options.requests, Path(folder))
            some = counts(kind, options.requests, options.requests, Path(folder))
            per = {event: (some[event] - none[event]) / options.requests for event in some}
            code, data = per["ILmr"], per["DLmr"] + per["DLmw"]
            floor = floor or code + data
            print(f"{label:42} {per['Ir']:12,.0f} {code + data:18,.0f} {code:6,.0f} "
                  f"{data:6,.0f} {(code + data) / floor:7.2f}x", flush=True)


if __name__ == "__main__":
    main()
