"""Raw wire drivers for the harness: bytes in, frames out, no client library (§5).

A :class:`Transport` sends JSON-RPC messages (or raw bytes) and yields every
frame the server produced, in arrival order. The stdio driver reads the child's
stdout byte-for-byte in a thread so it can see a BOM, partial lines and
non-JSON noise (§5.1); the HTTP driver posts with explicit headers and keeps
every status code and content type for the HTTP-only checks (§5.2).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

__all__ = [
    "Frame",
    "HttpExchange",
    "HttpTransport",
    "ReceiveTimeout",
    "ServerGone",
    "StdioTransport",
    "Transport",
    "WireLog",
    "parse_frame",
]

BOM = b"\xef\xbb\xbf"


class ReceiveTimeout(Exception):
    """No frame arrived within the per-read timeout: a silent or hung server."""


class ServerGone(Exception):
    """The server closed its output (process exited or stream ended)."""


@dataclass(frozen=True)
class Frame:
    """One decoded message as received; ``nonfinite`` marks NaN/Infinity tokens (§4.6)."""

    raw: bytes
    obj: Any
    nonfinite: bool = False


def _reject_constant(token: str) -> Any:
    raise ValueError(token)


def parse_frame(raw: bytes) -> Frame | None:
    """Decode one line as a JSON frame, or ``None`` if it is not JSON at all."""
    text = raw.decode("utf-8")
    try:
        return Frame(raw, json.loads(text, parse_constant=_reject_constant))
    except ValueError:
        pass
    try:
        return Frame(raw, json.loads(text), nonfinite=True)
    except ValueError:
        return None


@dataclass
class HttpExchange:
    """One HTTP round trip, kept for the §5.2 status/content-type checks."""

    path: str
    request_headers: dict[str, str]
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class WireLog:
    """Everything observed on one connection, for the whole-run checks."""

    frames: list[Frame] = field(default_factory=list)
    noise: list[bytes] = field(default_factory=list)
    stderr: list[bytes] = field(default_factory=list)
    leading_bom: bool = False
    unterminated: bytes = b""


class Transport(Protocol):
    """The harness side of one connection to the server under test."""

    kind: str
    log: WireLog

    def send(self, message: Any) -> None: ...

    def send_raw(self, data: bytes) -> None: ...

    def receive(self, timeout: float) -> Frame: ...

    def close(self) -> None: ...


def encode(message: Any) -> bytes:
    """Compact single-line UTF-8 JSON, as a conforming client writes it (§5.1)."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class StdioTransport:
    """Drive a server subprocess over NDJSON on stdin/stdout (§5.1)."""

    kind = "stdio"

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        write_timeout: float = 10.0,
    ) -> None:
        self.log = WireLog()
        self.write_timeout = write_timeout
        self._frames: queue.Queue[Frame | None] = queue.Queue()
        self._process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        assert self._process.stdin is not None
        # Non-blocking writes: a server that stops reading stdin must not hang the harness.
        os.set_blocking(self._process.stdin.fileno(), False)
        self._stdin_open = True
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        buffer = b""
        first = True
        while chunk := os.read(fd, 65536):
            if first:
                self.log.leading_bom = chunk.startswith(BOM)
                first = False
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self._accept_line(line)
        self.log.unterminated = buffer
        if buffer.strip():
            self._accept_line(buffer)
        self._frames.put(None)

    def _accept_line(self, line: bytes) -> None:
        body = line[len(BOM) :] if line.startswith(BOM) else line
        if not body.strip():
            return
        try:
            frame = parse_frame(body)
        except UnicodeDecodeError:
            frame = None
        if frame is None:
            self.log.noise.append(line)
            return
        self.log.frames.append(frame)
        self._frames.put(frame)

    def _read_stderr(self) -> None:
        assert self._process.stderr is not None
        for line in self._process.stderr:
            self.log.stderr.append(line.rstrip(b"\n"))

    def send(self, message: Any) -> None:
        self.send_raw(encode(message) + b"\n")

    def send_raw(self, data: bytes) -> None:
        """Write all of ``data``, waiting at most ``write_timeout`` for the pipe to drain."""
        assert self._process.stdin is not None
        if not self._stdin_open:
            raise ServerGone("stdin already closed")
        fd = self._process.stdin.fileno()
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                if not select.select([], [fd], [], self.write_timeout)[1]:
                    raise ReceiveTimeout(
                        f"server did not read its stdin within {self.write_timeout:g}s"
                    ) from None
            except OSError as exc:
                raise ServerGone(f"server closed stdin: {exc}") from exc

    def receive(self, timeout: float) -> Frame:
        try:
            frame = self._frames.get(timeout=timeout)
        except queue.Empty:
            raise ReceiveTimeout(f"no frame within {timeout:g}s") from None
        if frame is None:
            self._frames.put(None)
            raise ServerGone(f"server closed stdout (exit status {self._process.poll()})")
        return frame

    def close_stdin(self) -> None:
        """Half-close: EOF on the server's stdin is an implicit shutdown (§5.1)."""
        if self._stdin_open and self._process.stdin is not None:
            self._stdin_open = False
            with contextlib.suppress(OSError):
                self._process.stdin.close()

    def wait_exit(self, timeout: float) -> int | None:
        """Exit status once the process ends within ``timeout``, else ``None``."""
        try:
            return self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """Stop the child: close stdin, wait, terminate, then kill."""
        self.close_stdin()
        if self.wait_exit(2.0) is None:
            self._process.terminate()
            if self.wait_exit(2.0) is None:
                self._process.kill()
                self._process.wait()
        for reader in self._readers:
            reader.join(timeout=2.0)
        for stream in (self._process.stdin, self._process.stdout, self._process.stderr):
            if stream is not None and not stream.closed:
                stream.close()


class HttpTransport:
    """Drive a server over HTTP POST ``<base>/<method>`` (§5.2).

    Responses (a JSON body, a JSON batch, or each SSE ``data:`` frame) are
    queued as frames so the checks read them exactly like stdio frames.
    """

    kind = "http"

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.log = WireLog()
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.exchanges: list[HttpExchange] = []
        self._frames: queue.Queue[Frame] = queue.Queue()
        self._client = httpx.Client(timeout=timeout)

    def post(
        self,
        path: str,
        body: bytes,
        *,
        headers: dict[str, str] | None = None,
        method: str = "POST",
    ) -> HttpExchange:
        """Send one HTTP request and queue every frame of its response."""
        request_headers = {"Content-Type": "application/json", **self.headers, **(headers or {})}
        try:
            response = self._client.request(
                method, self.base_url + path, content=body, headers=request_headers
            )
        except httpx.TimeoutException as exc:
            raise ReceiveTimeout(f"HTTP request timed out: {exc}") from exc
        except httpx.HTTPError as exc:
            raise ServerGone(f"HTTP transport error: {exc}") from exc
        exchange = HttpExchange(
            path=path,
            request_headers=request_headers,
            status=response.status_code,
            headers={k.lower(): v for k, v in response.headers.items()},
            body=response.content,
        )
        self.exchanges.append(exchange)
        if exchange.headers.get("content-type", "").startswith("text/event-stream"):
            for payload in sse_payloads(exchange.body):
                self._queue(payload)
        elif exchange.body.strip():
            self._queue(exchange.body.strip())
        return exchange

    def _queue(self, raw: bytes) -> None:
        try:
            frame = parse_frame(raw)
        except UnicodeDecodeError:
            frame = None
        if frame is None:
            self.log.noise.append(raw)
            return
        self.log.frames.append(frame)
        self._frames.put(frame)

    @staticmethod
    def path_for(message: Any) -> str:
        """``/<method>`` for a single message, the base itself for batches (§5.2)."""
        if isinstance(message, dict) and isinstance(message.get("method"), str):
            return "/" + message["method"]
        return ""

    def send(self, message: Any) -> None:
        self.post(self.path_for(message), encode(message))

    def send_raw(self, data: bytes) -> None:
        self.post("", data)

    def receive(self, timeout: float) -> Frame:
        """Frames are queued synchronously by :meth:`post`; nothing queued means none will come."""
        try:
            return self._frames.get_nowait()
        except queue.Empty:
            raise ReceiveTimeout("no (further) frame in the HTTP response") from None

    def close(self) -> None:
        self._client.close()


def sse_payloads(body: bytes) -> list[bytes]:
    """The ``data:`` payloads of an SSE body, one per event (blank-line separated)."""
    payloads: list[bytes] = []
    for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            payloads.append(b"\n".join(data))
    return payloads
