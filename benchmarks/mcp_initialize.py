"""How long an MCP host waits for ``rcpkit mcp`` to answer ``initialize``: from launching
the bridge (stdio) to the answer, bridging an engine already served over HTTP (the
sample notes, hashing embedder), median of several launches::

    python benchmarks/mcp_initialize.py [--runs 5] [--baseline SRC] [--data]

``--data`` launches ``rcpkit mcp --data DIR`` instead (the bridge opens the engine in its own
process) on the same notes.

``--baseline SRC`` also launches the bridge with another tree's ``src`` first on the path
(e.g. ``git archive main src | tar -x -C /tmp/main``) and prints this tree's time over it,
each run alternating the two so machine load weighs on both alike. The time is Python's
start, the imports, connecting to the engine and the MCP handshake; ``import mcp.server``
alone (the SDK, a floor the bridge cannot go under) is printed for scale.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rcpkit.engine.core import open_engine
from rcpkit.ingest.sample import sample_documents

HERE_SRC = Path(__file__).resolve().parents[1] / "src"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"}}}


async def answered_after(argv: list[str], src: Path) -> float:
    """Seconds from launching ``argv`` (with ``src`` first on the path) to its answer."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=env)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    await process.stdin.drain()
    line = await asyncio.wait_for(process.stdout.readline(), 120)
    elapsed = time.perf_counter() - started
    process.stdin.close()
    await asyncio.wait_for(process.wait(), 60)
    assert json.loads(line)["result"]["serverInfo"]["name"] == "rcpkit-mcp", line
    return elapsed


def sdk_import_seconds() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import mcp.server, mcp.server.stdio"], check=True)
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another tree's src directory")
    parser.add_argument("--data", action="store_true",
                        help="bridge the engine in-process (rcpkit mcp --data DIR)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        data = Path(directory)
        (data / "rcpkit.toml").write_text('embedder = "hashing"\nhashing_dimension = 64\n')
        engine = open_engine(data)
        engine.add(sample_documents(), max_trust="trusted")  # the operator's curated notes
        engine.close()
        rcpkit = [sys.executable, "-c", "from rcpkit.cli import main; main()"]
        served = subprocess.Popen([*rcpkit, "serve", "--data", str(data), "--http",
                                   "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
        try:
            assert served.stderr is not None
            # The engine announces its address (with the port it bound) on stderr.
            announced = re.search(r"at (http://\S+/rcp)", served.stderr.readline())
            assert announced, "the engine did not announce its address"
            bridge = [*rcpkit, "mcp", *(["--data", str(data)] if options.data
                                        else ["--http", announced.group(1)])]
            trees = {"this tree": HERE_SRC, **({"baseline": options.baseline}
                                               if options.baseline else {})}
            times: dict[str, list[float]] = {name: [] for name in trees}
            for _ in range(options.runs):
                for name, src in trees.items():
                    times[name].append(await answered_after(bridge, src))
        finally:
            served.kill()
            served.wait()
    floor = statistics.median(sdk_import_seconds() for _ in range(options.runs))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        print(f"{name}: initialize answered after {median:.2f} s (median of {options.runs}; "
              f"{median / floor:.2f}x the SDK's own import)")
    print(f"import mcp.server alone: {floor:.2f} s")
    if options.baseline:
        print(f"this tree / baseline: {medians['this tree'] / medians['baseline']:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
