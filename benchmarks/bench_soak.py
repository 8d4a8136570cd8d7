"""Soak: several ``rcpkit serve --http`` processes on one SQLite root under a mixed load of
retrieves, adds and deletes, with random processes killed by SIGKILL and restarted, then an
audit of the record; and the time and size of ``rcpkit backup`` / ``rcpkit restore``.

Phase 1 (bounded by ``--seconds``): ``--processes`` servers share one data root; each has
``--clients`` callers that add their own documents, delete ones they added and retrieve
(``--mix`` retrieve:add:delete). Every ``--kill-every`` seconds a random server is killed
with SIGKILL and started again on its port. A request whose connection a kill cut has an
unknown outcome: its document is left out of the audit (reported as "uncertain"). Then the
audit, on the record itself and through every server:

- lost: acknowledged adds (not deleted since) absent;
- resurrected: acknowledged deletes (not added again) present;
- errors: JSON-RPC errors from a live server (a refused connection to a killed one is not);
- ``rcpkit verify`` of the root (indexes against the record) and the p50/p99 of each method;
- a backup taken halfway through the load and the kills, restored: every write acknowledged
  at or before its version is in it, none after (missing, extra).

Phase 2: a root of ``--backup-chunks`` one-chunk documents (hashing embedder, 384-d, so the
record holds what MiniLM's vectors would take) is backed up and restored with the library
calls the commands make; time and size of each, and the restored root verified.

Phase 3 (with ``--collections N``): a root of N collections of 100 documents each, backed
up whole and restored, every restored collection verified.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_soak.py --seconds 180 --kill-every 8 \\
        --backup-chunks 100000 --collections 100
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
from _common import percentiles, stamp
from _net import free_port, wait_listening

from rcpkit.engine.backup import backup, restore
from rcpkit.engine.config import EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.store import SqliteStore
from rcpkit.engine.types import DocumentIn
from rcpkit.engine.verify import verify_data_dir
from rcpkit.tenancy.collections import CollectionRegistry

CONFIG = 'embedder = "hashing"\nhashing_dimension = 384\nindex_save_every = 50\n'
WORDS = ("harbour", "crane", "shift", "tide", "quay", "rope", "anchor", "hull", "deck", "cargo",
         "pilot", "buoy", "lantern", "ledger", "manifest", "berth", "winch", "tug", "ballast",
         "keel")


class Server:
    """One ``rcpkit serve --http`` process on a fixed port, which a kill leaves free."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/rcp"
        self.proc: subprocess.Popen[bytes] | None = None
        self.up = threading.Event()
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from rcpkit.cli import main; main()", "serve", "--http",
             f"127.0.0.1:{self.port}", "--data", str(self.data)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.port, 120)
        self.up.set()

    def kill(self) -> None:
        assert self.proc is not None
        self.up.clear()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)


def version_of(result: dict[str, Any] | bool) -> int:
    """The version a write's ``_meta.indexVersion`` names."""
    assert isinstance(result, dict)
    return int(str(result["_meta"]["indexVersion"]).rpartition(".")[2])


def live_at(acks: list[tuple[int, str, str]], seq: int) -> set[str]:
    """Documents the acknowledged writes at or below ``seq`` leave live."""
    live: set[str] = set()
    for version, op, doc_id in sorted(acks):
        if version <= seq:
            (live.add if op == "add" else live.discard)(doc_id)
    return live


class Caller(threading.Thread):
    """Adds, deletes and retrieves against one server until ``deadline``."""

    def __init__(self, name: str, server: Server, deadline: float, mix: tuple[int, int, int],
                 seed: int) -> None:
        super().__init__(daemon=True)
        self.name_prefix = name
        self.server = server
        self.deadline = deadline
        self.mix = mix
        self.random = random.Random(seed)
        self.live: list[str] = []
        self.deleted: set[str] = set()
        self.uncertain: set[str] = set()
        self.acks: list[tuple[int, str, str]] = []
        """``(version, "add" | "delete", id)`` of every acknowledged write."""
        self.errors: list[str] = []
        self.refused = 0
        self.latency: dict[str, list[float]] = defaultdict(list)

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any] | bool | None:
        """The result; ``None`` on a JSON-RPC error; ``False`` when the connection failed."""
        frame = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        started = time.perf_counter()
        try:
            body = httpx.post(f"{self.server.base}/{method}", json=frame, timeout=60).json()
        except httpx.HTTPError:
            return False
        self.latency[method].append((time.perf_counter() - started) * 1000)
        if "result" not in body:
            self.errors.append(f"{method}: {body.get('error')}")
            return None
        result: dict[str, Any] = body["result"]
        return result

    def run(self) -> None:
        turn = 0
        while time.monotonic() < self.deadline:
            if not self.server.up.wait(1):
                continue
            turn += 1
            pick = self.random.randrange(sum(self.mix))
            if pick < self.mix[0] or (pick >= self.mix[0] + self.mix[1] and not self.live):
                words = " ".join(self.random.choices(WORDS, k=3))
                if self.call("retrieve", {"query": words, "k": 10}) is False:
                    self.refused += 1
            elif pick < self.mix[0] + self.mix[1]:
                doc_id = f"{self.name_prefix}-{turn}"
                text = " ".join(self.random.choices(WORDS, k=12)) + f" entry {doc_id}"
                if self.write("add", doc_id, {"documents": [{"id": doc_id, "text": text}]}):
                    self.live.append(doc_id)
            else:
                doc_id = self.live.pop(self.random.randrange(len(self.live)))
                if self.write("delete", doc_id, {"ids": [doc_id]}):
                    self.deleted.add(doc_id)
                elif doc_id not in self.uncertain:  # refused: still live
                    self.live.append(doc_id)

    def write(self, op: str, doc_id: str, params: dict[str, Any]) -> bool:
        """Send ``index/<op>``; True when acknowledged (recorded with its version). A cut
        connection leaves ``doc_id`` uncertain."""
        outcome = self.call(f"index/{op}", params)
        if outcome is False:
            self.refused += 1
            self.uncertain.add(doc_id)
            return False
        if outcome is None:
            return False
        self.acks.append((version_of(outcome), op, doc_id))
        return True


def killer(servers: list[Server], deadline: float, every: float, seed: int,
           kills: list[float]) -> None:
    """Every ``every`` seconds SIGKILL a random running server and start it again in the
    background, so the next kill does not wait for the restart (a slow one under load)."""
    chooser = random.Random(seed)
    restarts: list[threading.Thread] = []

    def restart(server: Server) -> None:
        started = time.monotonic()
        server.start()
        kills.append(time.monotonic() - started)

    while time.monotonic() + every < deadline:
        time.sleep(every)
        running = [server for server in servers if server.up.is_set()]
        if not running:
            continue
        server = chooser.choice(running)
        server.kill()
        restarts.append(threading.Thread(target=restart, args=(server,)))
        restarts[-1].start()
    for thread in restarts:
        thread.join()


def soak(args: argparse.Namespace, work: Path) -> None:
    data = work / "soak"
    data.mkdir()
    (data / "rcpkit.toml").write_text(CONFIG)
    servers = [Server(data) for _ in range(args.processes)]
    deadline = time.monotonic() + args.seconds
    mix = tuple(int(part) for part in args.mix.split(":"))
    assert len(mix) == 3
    callers = [Caller(f"p{p}c{c}", server, deadline, (mix[0], mix[1], mix[2]),
                      seed=p * 100 + c)
               for p, server in enumerate(servers) for c in range(args.clients)]
    restarts: list[float] = []
    chaos = threading.Thread(target=killer, args=(servers, deadline, args.kill_every,
                                                  args.seed, restarts))
    for thread in [*callers, chaos]:
        thread.start()
    time.sleep(args.seconds / 2)  # a backup in the middle of the load and the kills
    started = time.perf_counter()
    snapshot = backup(data, work / "mid", [""])
    backup_s = time.perf_counter() - started
    for thread in [*callers, chaos]:
        thread.join(args.seconds + 300)
    live = {doc for c in callers for doc in c.live} - {d for c in callers for d in c.uncertain}
    gone = {doc for c in callers for doc in c.deleted} - {d for c in callers for d in c.uncertain}
    through_servers = []
    for server in servers:  # every process answers after the load, restarted ones included
        result = httpx.post(f"{server.base}/info", timeout=60, json={
            "jsonrpc": "2.0", "id": 1, "method": "info", "params": {}}).json()
        through_servers.append("result" in result)
    for server in servers:
        server.stop()
    store = SqliteStore.open(data)
    try:
        present = set(store.live_hashes(sorted(live | gone)))
    finally:
        store.close()
    report = verify_data_dir(data)
    restore(work / "mid", work / "mid-restored")
    backup_seq = snapshot.stores[0].seq
    assert backup_seq is not None
    acks = [ack for caller in callers for ack in caller.acks]
    uncertain = {doc for caller in callers for doc in caller.uncertain}
    expected = live_at(acks, backup_seq) - uncertain
    store = SqliteStore.open(work / "mid-restored")
    try:
        in_backup = set(store.live_hashes(sorted({doc for _, _, doc in acks})))
    finally:
        store.close()
    in_backup -= uncertain
    latency: dict[str, list[float]] = defaultdict(list)
    for caller in callers:
        for method, samples in caller.latency.items():
            latency[method].extend(samples)
    print(f"soak: {args.processes} processes × {args.clients} callers, {args.seconds:.0f} s, "
          f"mix retrieve:add:delete {args.mix}, SIGKILL every {args.kill_every:.0f} s "
          f"({len(restarts)} kills, restart to listening p50 "
          f"{sorted(restarts)[len(restarts) // 2] if restarts else 0:.1f} s)")
    print(f"  acknowledged: {sum(len(v) for v in latency.values())} requests; live adds "
          f"{len(live)}, deletes {len(gone)}; uncertain (cut by a kill) "
          f"{sum(len(c.uncertain) for c in callers)}; refused while down "
          f"{sum(c.refused for c in callers)}")
    print(f"  lost {len(live - present)}, resurrected {len(gone & present)}, errors "
          f"{sum(len(c.errors) for c in callers)} {[e for c in callers for e in c.errors][:3]}, "
          f"verify findings {len(report.findings)} {report.findings[:3]}, "
          f"servers answering after {sum(through_servers)}/{len(servers)}")
    after = sum(version > backup_seq for version, _, _ in acks)
    print(f"  backup during the load in {backup_s:.1f} s at version {backup_seq} "
          f"({len(acks) - after} writes acknowledged at or before it, {after} after), "
          f"restored: missing {len(expected - in_backup)}, extra {len(in_backup - expected)}")
    for method, samples in sorted(latency.items()):
        p50, _, p99 = percentiles(samples)
        print(f"  {method:13s} n={len(samples):6d}  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms")


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def backup_restore(args: argparse.Namespace, work: Path) -> None:
    data = work / "big"
    data.mkdir()
    (data / "rcpkit.toml").write_text(CONFIG)
    chooser = random.Random(args.seed)
    config = EngineConfig.load(data / "rcpkit.toml").with_overrides(data_dir=data)
    started = time.perf_counter()
    with Engine.open(config) as engine:
        for start in range(0, args.backup_chunks, 1000):
            engine.add([DocumentIn(id=f"d{n}", text=" ".join(chooser.choices(WORDS, k=40)))
                        for n in range(start, min(start + 1000, args.backup_chunks))])
    ingest_s = time.perf_counter() - started
    started = time.perf_counter()
    manifest = backup(data, work / "snapshot", [""])
    backup_s = time.perf_counter() - started
    started = time.perf_counter()
    restore(work / "snapshot", work / "restored")
    restore_s = time.perf_counter() - started
    started = time.perf_counter()
    report = verify_data_dir(work / "restored")
    verify_s = time.perf_counter() - started
    store = SqliteStore.open(work / "restored")
    try:
        restored_chunks = store.counts().chunks
    finally:
        store.close()
    print(f"backup/restore at {args.backup_chunks} one-chunk documents (384-d vectors; "
          f"ingest {ingest_s:.0f} s): root {size_of(data) / 2**20:.0f} MiB, backup "
          f"{size_of(work / 'snapshot') / 2**20:.0f} MiB in {len(manifest.files)} files")
    print(f"  backup {backup_s:.1f} s, restore (checksums, copy) {restore_s:.1f} s, verify of "
          f"the restored root {verify_s:.1f} s: {len(report.findings)} findings, "
          f"{restored_chunks} chunks at {manifest.stores[0].index_version}")


def many_collections(args: argparse.Namespace, work: Path) -> None:
    """A root of ``--collections`` small collections, backed up whole and restored."""
    root = work / "many"
    registry = CollectionRegistry(root)
    chooser = random.Random(args.seed)
    for number in range(args.collections):
        path = registry.create(f"c{number:03d}", CONFIG)
        config = EngineConfig.load(path / "rcpkit.toml").with_overrides(data_dir=path)
        with Engine.open(config) as engine:
            engine.add([DocumentIn(id=f"d{n}", text=" ".join(chooser.choices(WORDS, k=30)))
                        for n in range(100)])
    started = time.perf_counter()
    manifest = backup(root, work / "many-snapshot",
                      [f"collections/{name}" for name in registry.names()])
    backup_s = time.perf_counter() - started
    started = time.perf_counter()
    restore(work / "many-snapshot", work / "many-restored")
    restore_s = time.perf_counter() - started
    findings = sum(len(verify_data_dir(work / "many-restored" / "collections" / name).findings)
                   for name in CollectionRegistry(work / "many-restored").names())
    print(f"{args.collections} collections × 100 documents: backup {backup_s:.1f} s "
          f"({len(manifest.files)} files, {size_of(work / 'many-snapshot') / 2**20:.0f} MiB), "
          f"restore {restore_s:.1f} s, {len(CollectionRegistry(work / 'many-restored').names())}"
          f" collections restored, verify findings {findings}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--clients", type=int, default=2, help="callers per process")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--kill-every", type=float, default=8.0)
    parser.add_argument("--mix", default="6:3:1", help="retrieve:add:delete weights")
    parser.add_argument("--backup-chunks", type=int, default=10_000)
    parser.add_argument("--collections", type=int, default=0,
                        help="also back up and restore a root of this many collections")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(f"# bench_soak {stamp()}, load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} CPUs")
    work = Path(tempfile.mkdtemp(prefix="rcpkit-soak-"))
    try:
        soak(args, work)
        backup_restore(args, work)
        if args.collections:
            many_collections(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
