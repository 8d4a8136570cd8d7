"""HTTP ping/s of rcpkit's server against the reference SDK's, driven by ``wrk`` (issue 19).

bench_protocol.py drives both servers with its own Python client; this one uses a neutral,
C load generator (``wrk``, Debian package ``wrk``), so the driver is never what caps the
faster server. Same servers and handlers as bench_protocol.py (``OURS_HTTP`` and
``REFERENCE``: built-in ``ping``), a ``POST /rcp/ping`` JSON-RPC body, keep-alive
connections (the reference closes each connection after its response, so wrk reconnects for
it, as any HTTP/1.1 client would). Each round runs rcpkit then the reference back to back;
the median of the per-round ratios is printed next to the best rates.

    python benchmarks/bench_http_wrk.py --seconds 3 --rounds 3 [--workers 2]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _net import free_port, wait_listening
from bench_protocol import OURS_HTTP, OURS_HTTP_WORKERS, PING, REFERENCE

LUA = f"""
wrk.method = "POST"
wrk.path = "/rcp/ping"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{PING.decode()}'
"""
SCENARIOS = (("1 connection", 1, 1), ("16 connections", 16, 2))
_RATE = re.compile(r"Requests/sec:\s+([0-9.]+)")


def wrk_rate(code: str, args: list[str], connections: int, threads: int, seconds: float,
             script: Path) -> float:
    """Requests/s wrk gets from a server started from ``code`` on a free loopback port."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", code, str(port), *args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port)
        out = subprocess.run(
            ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", "-s", str(script),
             f"http://127.0.0.1:{port}/rcp/ping"],
            check=True, capture_output=True, text=True, timeout=seconds + 30).stdout
    finally:
        server.terminate()
        server.wait(10)
    found = _RATE.search(out)
    if found is None:
        raise RuntimeError(f"no rate in wrk's output:\n{out}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0,
                        help="also run rcpkit with --workers N (16 connections)")
    options = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian: apt-get install wrk)")
    ours = [(name, OURS_HTTP, [], c, t) for name, c, t in SCENARIOS]
    if options.workers:
        ours.append((f"16 connections, --workers {options.workers}", OURS_HTTP_WORKERS,
                     [str(options.workers)], 16, 2))
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "ping.lua"
        script.write_text(LUA)
        print(f"{'scenario (ping)':34} {'rcpkit/s':>10} {'reference/s':>12} {'best ratio':>11} "
              f"{'median ratio':>13}")
        for name, code, args, connections, threads in ours:
            pairs = [(wrk_rate(code, args, connections, threads, options.seconds, script),
                      wrk_rate(REFERENCE, [], connections, threads, options.seconds, script))
                     for _ in range(options.rounds)]
            best_ours, best_reference = max(p[0] for p in pairs), max(p[1] for p in pairs)
            median = statistics.median(p[0] / p[1] for p in pairs)
            print(f"{name:34} {best_ours:10,.0f} {best_reference:12,.0f} "
                  f"{best_ours / best_reference:10.2f}x {median:12.2f}x", flush=True)


if __name__ == "__main__":
    main()
