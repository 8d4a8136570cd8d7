"""``rcpkit serve``: flag errors are one line and exit 2; --app over stdio and HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from rcpkit.cli import app
from support.net import free_port
from support.stdio import python_argv

RCPKIT = python_argv("-c", "from rcpkit.cli import main; main()")
APP = "rcpkit.server.example:server"


def run(*args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*RCPKIT, "serve", *args], capture_output=True, timeout=60, **kw)


@pytest.mark.parametrize("args", [
    ["--stdio", "--http", "127.0.0.1:1", "--app", APP],
    [],
    ["--http", "nowhere", "--app", APP],
    ["--stdio", "--app", "no_such_module:x"],
    ["--stdio", "--app", "rcpkit.server.example:nope"],
    ["--stdio", "--app", "rcpkit.server.example"],
    ["--stdio", "--app", "rcpkit.server.example:SAMPLE_DOCUMENTS"],
    ["--http", "127.0.0.1:0", "--sessions", "sticky", "--app", APP],
    ["--stdio", "--auth-token", "t", "--app", APP],
    ["--stdio", "--metrics", "--app", APP],
    ["--http", "127.0.0.1:0", "--metrics-token", "t", "--app", APP],
    ["--stdio", "--access-log", "--access-log-format", "xml", "--app", APP],
    ["--http", "127.0.0.1:0", "--workers", "2", "--sessions", "token", "--app", APP],
    ["--http", "127.0.0.1:0", "--workers", "0", "--app", APP],
    ["--stdio", "--workers", "2", "--app", APP],
    ["--http", "127.0.0.1:0", "--max-sessions", "0", "--app", APP],
    ["--http", "127.0.0.1:0", "--header-timeout", "0", "--app", APP],
])
def test_flag_errors_are_one_line_exit_2(args: list[str]) -> None:
    result = CliRunner().invoke(app, ["serve", *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rcpkit serve: "), result.stderr
    assert result.stdout == ""


@pytest.mark.wire
def test_serve_stdio_app() -> None:
    request = b'{"jsonrpc":"2.0","id":1,"method":"info"}\n'
    proc = run("--stdio", "--app", APP, input=request)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["result"]["server"]["name"] == "rcpkit-keyword-example"


@pytest.mark.wire
@pytest.mark.parametrize("stdin", ["/dev/null", "/dev/zero"])
def test_serve_stdio_on_a_character_device_reads_it_to_the_end(stdin: str) -> None:
    """A device epoll cannot watch (``/dev/null``: EOF at once; ``/dev/zero``: one endless
    line, refused as too long, until the bound below) is read by a thread, not the loop."""
    with open(stdin, "rb") as device:
        if stdin == "/dev/null":
            proc = run("--stdio", "--app", APP, stdin=device)
            assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
            return
        child = subprocess.Popen([*RCPKIT, "serve", "--stdio", "--app", APP], stdin=device,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        frame = json.loads(child.stdout.readline())  # type: ignore[union-attr]
        assert (frame["id"], frame["error"]["code"]) == (None, -32600)
    finally:
        child.kill()
        child.communicate(timeout=30)


@pytest.mark.wire
def test_serve_http_app_with_auth_from_env() -> None:
    port = free_port()
    child = subprocess.Popen([*RCPKIT, "serve", "--http", f"127.0.0.1:{port}", "--app", APP,
                              "--sessions", "token"], env={"RCPKIT_AUTH_TOKENS": "a,b",
                                                           **_base_env()},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/rcp/info"
        frame = {"jsonrpc": "2.0", "id": 1, "method": "info"}
        deadline = time.monotonic() + 30
        while True:
            try:
                refused = httpx.post(url, json=frame)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and child.poll() is None
                time.sleep(0.1)
        assert refused.status_code == 401
        allowed = httpx.post(url, json=frame, headers={"Authorization": "Bearer b"})
        assert allowed.json()["result"]["_meta"]["conformance"] == "L0"
    finally:
        child.send_signal(signal.SIGTERM)
        # uvicorn finishes in-flight work, then re-raises the signal it caught
        assert child.wait(30) in (0, -signal.SIGTERM)


@pytest.mark.wire
def test_serve_http_limit_flags() -> None:
    """``--max-header-bytes`` and ``--max-sessions`` reach the server (§15.5)."""
    port = free_port()
    child = subprocess.Popen([*RCPKIT, "serve", "--http", f"127.0.0.1:{port}", "--app", APP,
                              "--sessions", "token", "--max-sessions", "1",
                              "--max-header-bytes", "2048"], env=_base_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/rcp/initialize"
        frame = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": 1}}
        deadline = time.monotonic() + 30
        while True:
            try:
                first = httpx.post(url, json=frame)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and child.poll() is None
                time.sleep(0.1)
        token = first.json()["result"]["_meta"]["session"]
        used = httpx.post(f"http://127.0.0.1:{port}/rcp/ping", headers={"RCP-Session": token},
                          json={"jsonrpc": "2.0", "id": 2, "method": "ping"})
        assert used.json()["result"] == {}
        assert httpx.post(url, json=frame).status_code == 429  # one session, in use
        assert httpx.post(url, json=frame, headers={"X-Pad": "p" * 4096}).status_code == 431
    finally:
        child.send_signal(signal.SIGTERM)
        assert child.wait(30) in (0, -signal.SIGTERM)


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "RCPKIT_AUTH_TOKENS"}


@pytest.mark.parametrize("transport", [["--stdio"], ["--http", "127.0.0.1:0"]])
def test_a_missing_data_directory_is_refused_unless_asked_for(
        tmp_path: Path, transport: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    typo = tmp_path / "typo"
    result = CliRunner().invoke(app, ["serve", *transport, "--data", str(typo)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.strip() == (
        f"rcpkit serve: error: no data directory {typo}: build one with "
        f"`rcpkit index add FILES --data {typo}`, or pass --create to serve an empty one")
    monkeypatch.chdir(tmp_path)  # the default data directory, ./rcpkit-data, neither
    result = CliRunner().invoke(app, ["serve", *transport])
    assert result.exit_code == 2 and "no data directory rcpkit-data" in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == []


@pytest.mark.wire
def test_serve_defaults_to_the_engine(tmp_path: Path) -> None:
    request = b'{"jsonrpc":"2.0","id":1,"method":"info"}\n'
    proc = run("--stdio", "--data", str(tmp_path / "data"), "--create", "--embedder",
               "hashing", input=request)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"]["server"]["name"] == "rcpkit-engine"


def test_an_unknown_traces_exporter_is_one_line_exit_2() -> None:
    result = CliRunner().invoke(app, ["serve", "--stdio", "--app", APP],
                                env={"OTEL_TRACES_EXPORTER": "zipkin"})
    assert result.exit_code == 2
    assert result.stderr.strip() == ("rcpkit serve: error: OTEL_TRACES_EXPORTER 'zipkin': "
                                     "rcpkit knows otlp, console and none")
