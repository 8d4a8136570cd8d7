"""``rcpkit watch DIR --data KB`` and ``rcpkit serve --watch DIR`` as a user runs them: real
processes, real file-system events (watchfiles), answers read over the wire from a server
on the same data (§7.7 retrieve; §7.10/§7.11 through the watcher).

A change becomes searchable some time after it is made, with no event the test can wait on:
each check polls the served engine, bounded in count and time (:func:`eventually`).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from engine_wire import Engine, HttpEngine, make_data_dir, rcpkit_argv

pytestmark = pytest.mark.timeout(240)

WAIT_S = 30.0
"""How long a change may take to become searchable here (the watcher's own target is 2 s;
a loaded CI machine runs several test processes per core)."""


def eventually(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Poll ``check`` every 0.1 s until it holds, failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.1)


class Watch:
    """``rcpkit watch FOLDER --data DATA`` in a subprocess; its stderr read line by line."""

    def __init__(self, folder: Path, data: Path, *options: str) -> None:
        self.proc = subprocess.Popen(
            rcpkit_argv("watch", str(folder), "--data", str(data), "--settle", "0.2", *options),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "COLUMNS": "200"})
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_for("watching ")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, text: str, timeout_s: float = 90.0) -> str:
        """The first line (from now on) containing ``text``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {text!r}; so far: {self.lines[-20:]}") \
                    from None
            if line is None:
                raise AssertionError(f"watch exited ({self.proc.wait()}) before {text!r}: "
                                     f"{self.lines[-20:]}")
            self.lines.append(line)
            if text in line:
                return line

    def stop(self) -> tuple[int, str]:
        """Ctrl-C; the exit status and the stdout."""
        self.proc.send_signal(signal.SIGINT)
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()  # to its end: the process closes it on exit
        self.proc.wait(60)
        self._reader.join(10)
        while not self._queue.empty():
            line = self._queue.get()
            if line is not None:
                self.lines.append(line)
        return self.proc.returncode, out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture
def watching(data_dir: Path) -> Iterator[Callable[..., Watch]]:
    started: list[Watch] = []

    def start(folder: Path, *options: str) -> Watch:
        watch = Watch(folder, data_dir, *options)
        started.append(watch)
        return watch

    yield start
    for watch in started:
        watch.kill()


def documents(engine: Engine | HttpEngine, query: str) -> set[str]:
    hits = engine.ok("retrieve", {"query": query, "k": 10, "mode": "sparse"})["hits"]
    return {hit["id"].rpartition("#")[0] for hit in hits}


def test_watch_beside_a_server_reflects_every_change_and_catches_up_after_a_restart(
        tmp_path: Path, data_dir: Path, watching: Callable[..., Watch],
        serve: Callable[..., Engine]) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "bees.md").write_text("# Bees\n\nHoneybees dance to show where flowers are.")
    (folder / ".gitignore").write_text("*.log\n")
    watch = watching(folder)
    engine = serve()
    assert documents(engine, "honeybees dance") == {"bees.md"}

    (folder / "compost.txt").write_text("Compost needs greens and browns.")
    eventually(lambda: documents(engine, "compost greens") == {"compost.txt"}, "a created file")
    (folder / "compost.txt").write_text("Compost needs nitrogen and carbon.")
    eventually(lambda: documents(engine, "nitrogen carbon") == {"compost.txt"}, "an edit")
    assert documents(engine, "greens browns") == set()
    (folder / "bees.md").rename(folder / "honeybees.md")
    eventually(lambda: documents(engine, "honeybees dance") == {"honeybees.md"}, "a rename")
    (folder / "debug.log").write_text("ignored by .gitignore: compost compost compost")
    (folder / "blob.txt").write_bytes(b"\x00\x01binary")
    assert "binary content" in watch.wait_for("skipped blob.txt")
    (folder / "compost.txt").unlink()
    eventually(lambda: documents(engine, "nitrogen carbon") == set(), "a delete")
    assert documents(engine, "compost") == set()  # debug.log was never indexed

    code, out = watch.stop()
    assert code == 0 and "watch:" not in out  # stdout has the first sync's summary only
    assert any("watch stopped" in line for line in watch.lines)
    assert not any("Traceback" in line for line in watch.lines)

    # Changes made while nothing watched are synced when watching starts again.
    (folder / "honeybees.md").unlink()
    (folder / "frost.md").write_text("Frost protection covers tomatoes at night.")
    watch = watching(folder)
    eventually(lambda: documents(engine, "frost tomatoes") == {"frost.md"}, "a catch-up")
    assert documents(engine, "honeybees dance") == set()
    code, out = watch.stop()
    summary = {line.split()[0]: line.split()[1] for line in out.splitlines()
               if len(line.split()) == 2}
    assert code == 0 and summary["added"] == "1" and summary["deleted"] == "1", out


def test_the_watched_folder_deleted_and_recreated(tmp_path: Path, data_dir: Path,
                                                  watching: Callable[..., Watch],
                                                  serve: Callable[..., Engine]) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "moon.md").write_text("Moon phases follow a monthly cycle.")
    watch = watching(folder)
    engine = serve()
    shutil.rmtree(folder)
    watch.wait_for("the folder is gone")
    eventually(lambda: documents(engine, "moon phases") == set(), "its files' deletes")
    folder.mkdir()
    (folder / "stars.md").write_text("Sailors found north by the pole star.")
    watch.wait_for("the folder is back")
    eventually(lambda: documents(engine, "pole star") == {"stars.md"}, "a file after")
    assert watch.stop()[0] == 0


def test_serve_watch_syncs_the_folder_and_reports_on_metrics(tmp_path: Path,
                                                             data_dir: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "rain.md").write_text("Rain gauges measure rainfall in millimetres.")
    served = HttpEngine(data_dir, "--watch", str(folder), "--metrics")
    try:
        eventually(lambda: documents(served, "rain gauges") == {"rain.md"}, "the first sync")
        (folder / "seeds.md").write_text("Seed saving keeps heirloom varieties alive.")
        eventually(lambda: documents(served, "heirloom seed") == {"seeds.md"}, "a new file")
        (folder / "rain.md").unlink()
        eventually(lambda: documents(served, "rain gauges") == set(), "a delete")
        scraped = httpx.get(f"http://127.0.0.1:{served.port}/metrics", timeout=30).text
        values = {name: float(value) for name, value in re.findall(
            r'rcpkit_index\{[^}]*name="watch_(\w+)"[^}]*\} (\S+)', scraped)}
        assert values["files_indexed"] >= 2 and values["files_deleted"] >= 1, scraped
        assert values["queue_depth"] == 0.0 and values["last_lag_seconds"] > 0.0
    finally:
        served.close()


def test_watch_refuses_what_it_cannot_do(tmp_path: Path, data_dir: Path) -> None:
    missing = subprocess.run(rcpkit_argv("watch", str(tmp_path / "nowhere"), "--data",
                                         str(data_dir)), capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2
    assert "not a folder" in missing.stderr and "Traceback" not in missing.stderr
    folder = tmp_path / "notes"
    folder.mkdir()
    workers = subprocess.run(rcpkit_argv("serve", "--http", "127.0.0.1:0", "--data",
                                         str(data_dir), "--workers", "2", "--watch",
                                         str(folder)), capture_output=True, text=True,
                             timeout=120)
    assert workers.returncode == 2
    assert "rcpkit watch DIR --data DATA" in workers.stderr
    assert make_data_dir(tmp_path / "other").is_dir()
