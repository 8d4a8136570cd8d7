"""Helpers for the engine's wire tests: the real ``rcpkit serve`` in a subprocess, over stdio
(``support.stdio.StdioPeer``, which schema-checks every frame) and over HTTP on loopback, and
the same served engine in this process over the in-memory connection (:class:`MemoryEngine`),
for the tests about the engine's answers rather than about the wire.

Data directories carry an ``rcpkit.toml`` selecting the deterministic hashing embedder, so these
tests need no model; one smoke test uses the real MiniLM.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from rcpkit.binding import bind
from rcpkit.client import AsyncClient, Client, MemoryTransport
from rcpkit.client.session import RequestId, Sink
from rcpkit.engine.core import open_engine
from rcpkit.protocol.codec import to_builtins
from rcpkit.protocol.errors import RcpError, TransportClosed
from support.net import free_port
from support.schema import assert_frame
from support.stdio import StdioPeer

RCPKIT = (sys.executable, "-c", "from rcpkit.cli import main; main()")

HASHING_CONFIG = """\
embedder = "hashing"
hashing_dimension = 64
index_save_every = 5

[field_types]
summary = "text"
"""


def rcpkit_argv(*args: str) -> list[str]:
    """``rcpkit ARGS`` run by the test interpreter."""
    return [*RCPKIT, *args]


def make_data_dir(path: Path, config: str = HASHING_CONFIG) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "rcpkit.toml").write_text(config)
    return path


class _Calls:
    """The conveniences both served engines offer on top of their ``ok``."""

    def ok(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def add(self, documents: Sequence[dict[str, Any]], **options: Any) -> dict[str, Any]:
        return self.ok("index/add", {"documents": list(documents), **options})

    def retrieve(self, query: str, k: int = 10, **options: Any) -> dict[str, Any]:
        return self.ok("retrieve", {"query": query, "k": k, **options})

    def ids(self, query: str, k: int = 50, **options: Any) -> list[str]:
        return [hit["id"] for hit in self.retrieve(query, k, **options)["hits"]]


class Engine(_Calls):
    """A served engine over stdio: ``ok`` returns a result, ``error`` the error object."""

    def __init__(self, data: Path, **initialize: Any) -> None:
        self.peer = StdioPeer(rcpkit_argv("serve", "--stdio", "--data", str(data)))
        self.info = self.peer.initialize(**initialize)

    def ok(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        reply = self.peer.call(method, params)
        assert "result" in reply, reply
        result: dict[str, Any] = reply["result"]
        return result

    def error(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        reply = self.peer.call(method, params)
        assert "error" in reply, reply
        error: dict[str, Any] = reply["error"]
        return error

    def close(self) -> None:
        code = self.peer.close()
        self.peer.assert_clean()
        assert code == 0, "".join(self.peer.stderr_lines[-20:])


class _CheckedSink:
    """Schema-checks each frame the server sends before the client reads it (as
    :class:`StdioPeer` does on a pipe); a bad one is recorded, not raised in the server."""

    def __init__(self, sink: Sink, problems: list[str]) -> None:
        self._sink = sink
        self._problems = problems

    def deliver(self, frame: bytes) -> None:
        try:
            assert_frame(json.loads(frame))
        except AssertionError as exc:
            self._problems.append(str(exc))
        self._sink.deliver(frame)

    def fail(self, request_id: RequestId, error: RcpError) -> None:
        self._sink.fail(request_id, error)

    def connection_lost(self, error: TransportClosed) -> None:
        self._sink.connection_lost(error)


class _CheckedTransport(MemoryTransport):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.problems: list[str] = []

    async def start(self, sink: Sink) -> None:
        await super().start(_CheckedSink(sink, self.problems))


class MemoryEngine(_Calls):
    """:class:`Engine`'s ``ok``/``error``/``add``/``retrieve``/``ids``/``info`` on the engine
    ``rcpkit serve --data DIR`` would open, bound the same way, but in this process: no
    process to start; frames are still encoded, parsed and schema-checked."""

    def __init__(self, data: Path) -> None:
        self.engine = open_engine(data)
        self._transport = _CheckedTransport(bind(self.engine))
        self.client = Client(AsyncClient.open(self._transport, strict=False, log_level=None))
        self.info: dict[str, Any] = to_builtins(self.client.init_result)

    def ok(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.client.call(method, params)

    def error(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            result = self.client.call(method, params)
        except RcpError as exc:
            return exc.to_wire()
        raise AssertionError(f"{method} succeeded: {result}")

    def close(self) -> None:
        self.client.close()
        self.engine.close()
        assert not self._transport.problems, self._transport.problems


class HttpEngine:
    """``rcpkit serve --http`` on a loopback port; ``post`` sends one JSON-RPC request."""

    def __init__(self, data: Path, *serve_options: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/rcp"
        self.proc = subprocess.Popen(
            rcpkit_argv("serve", "--http", f"127.0.0.1:{self.port}", "--data", str(data),
                        *serve_options),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.client = httpx.Client(timeout=30)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.post("info", {})
                return
            except httpx.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("rcpkit serve --http did not start") from None
                time.sleep(0.1)

    def post(self, method: str, params: dict[str, Any], **headers: str) -> httpx.Response:
        frame = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return self.client.post(f"{self.base}/{method}", json=frame, headers=headers)

    def ok(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = self.post(method, params).json()
        assert "result" in body, body
        result: dict[str, Any] = body["result"]
        return result

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(30)
