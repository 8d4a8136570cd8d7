"""Drive an RCP server subprocess over stdio (§5.1) and police what it writes.

Every line the child writes to stdout must be one JSON frame that passes the
normative schema; anything else is recorded in :attr:`StdioPeer.problems`,
which :meth:`StdioPeer.assert_clean` turns into a test failure.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

from .schema import assert_frame

__all__ = ["StdioPeer", "python_argv"]

# A cold start imports the model runtime; on a loaded two-core machine that alone can
# take longer than 15 s, and a test that waits for a reply should not fail for it.
REPLY_WAIT_SECONDS = 60.0


def python_argv(*args: str) -> list[str]:
    """``[sys.executable, *args]``: run something with the test interpreter."""
    return [sys.executable, *args]


class StdioPeer:
    """A server subprocess: send frames (or raw bytes), receive parsed frames."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self.frames: queue.Queue[Any] = queue.Queue()
        self.received: list[Any] = []
        self.problems: list[str] = []
        self.stderr_lines: list[str] = []
        self.notifications: list[dict[str, Any]] = []
        self._replies: dict[tuple[type, Any], Any] = {}
        self._ids = itertools.count(1)
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    # ── reading ─────────────────────────────────────────────────────────────
    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                frame = json.loads(raw)
                assert raw.endswith(b"\n") and raw.count(b"\n") == 1
                assert_frame(frame)
            except Exception as exc:
                self.problems.append(f"bad stdout line {raw[:200]!r}: {exc}")
                continue
            self.received.append(frame)
            self.frames.put(frame)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr_lines.append(raw.decode("utf-8", "replace"))

    def recv(self, timeout: float = REPLY_WAIT_SECONDS) -> Any:
        """The next frame (reply, batch or notification)."""
        return self.frames.get(timeout=timeout)

    def reply(self, id_: Any, timeout: float = REPLY_WAIT_SECONDS) -> dict[str, Any]:
        """The reply carrying ``id_`` (same JSON type); notifications are collected meanwhile."""
        key = (type(id_), id_)
        while key not in self._replies:
            frame = self.recv(timeout)
            self._file(frame)
        return self._replies.pop(key)

    def _file(self, frame: Any) -> None:
        for item in frame if isinstance(frame, list) else [frame]:
            if "method" in item:
                self.notifications.append(item)
            else:
                self._replies[(type(item.get("id")), item.get("id"))] = item

    # ── writing ─────────────────────────────────────────────────────────────
    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, frame: Any) -> None:
        self.send_raw(json.dumps(frame).encode() + b"\n")

    def call(self, method: str, params: dict[str, Any] | None = None,
             id_: Any = None) -> dict[str, Any]:
        """Send a request and wait for its reply (the whole response object)."""
        rid = next(self._ids) if id_ is None else id_
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            frame["params"] = params
        self.send(frame)
        return self.reply(rid)

    def initialize(self, **params: Any) -> dict[str, Any]:
        return self.call("initialize", {"protocolVersion": 1, **params})["result"]

    # ── ending ──────────────────────────────────────────────────────────────
    def close(self, timeout: float = 15.0) -> int:
        """Close stdin (EOF), wait for exit and for the readers to drain; return the exit code."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        for reader in self._readers:
            reader.join(timeout)
        return code

    def assert_clean(self) -> None:
        assert not self.problems, self.problems

    def __enter__(self) -> StdioPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
