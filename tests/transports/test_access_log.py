"""The access log (``rcpkit serve --access-log``): one line per request on stderr, over
HTTP (refusals by the gate included) and over stdio (whose stdout stays frames only, §5.1);
never a body (§15.6). Also over stdio: trace spans of the ``console`` exporter go to stderr."""

from __future__ import annotations

import io
import json
import os
from typing import Any

import httpx
import pytest

from rcpkit.server.example import build_server
from rcpkit.transports.access import AccessLog
from rcpkit.transports.http import create_app
from support.http import LoopbackServer
from support.stdio import StdioPeer, python_argv

pytestmark = pytest.mark.wire

TOKEN = "s3cret"
SECRET = "quokka lagoon"
RCPKIT = python_argv("-c", "from rcpkit.cli import main; main()")
KEYS = {"time", "method", "collection", "principal", "status", "code", "durationMs",
        "bytesIn", "bytesOut"}


def _post(url: str, path: str, body: Any, token: str | None = TOKEN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(url + path, json=body, headers=headers)


def test_http_requests_and_refusals_are_one_json_line_each() -> None:
    stream = io.StringIO()
    app = create_app(build_server(), auth_tokens=[TOKEN], collection="docs",
                     access_log=AccessLog("json", stream=stream))
    with LoopbackServer(app, kind="rcpkit") as srv:
        retrieve = {"jsonrpc": "2.0", "id": 1, "method": "retrieve",
                    "params": {"query": SECRET, "k": 2}}
        answered = _post(srv.url, "/rcp/retrieve", retrieve)
        assert answered.status_code == 200
        assert _post(srv.url, "/rcp", {**retrieve, "params": {"query": SECRET, "k": 0}}
                     ).status_code == 200
        assert _post(srv.url, "/rcp/retrieve", retrieve, token="wrong").status_code == 401
        assert _post(srv.url, "/rcp", [retrieve, {**retrieve, "id": 2}]).status_code == 200
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [set(line) for line in lines] == [KEYS] * 4
    assert [(line["method"], line["status"], line["code"], line["principal"])
            for line in lines] == [("retrieve", 200, 0, "credential-0"),
                                   ("retrieve", 200, -32602, "credential-0"),
                                   ("retrieve", 401, -32012, None),
                                   ("batch", 200, 0, "credential-0")]
    assert all(line["collection"] == "docs" and line["durationMs"] >= 0 for line in lines)
    assert lines[0]["bytesOut"] == len(answered.content)
    assert lines[0]["bytesIn"] == len(answered.request.content)
    assert lines[0]["time"].endswith("Z")
    assert "quokka" not in stream.getvalue()


def test_a_method_name_cannot_forge_a_text_line() -> None:
    stream = io.StringIO()
    app = create_app(build_server(), access_log=AccessLog(stream=stream))
    with LoopbackServer(app, kind="rcpkit") as srv:
        httpx.post(f"{srv.url}/rcp", json={"jsonrpc": "2.0", "id": 1,
                                           "method": "ping\n2026 forged 200 0"})
    (line,) = stream.getvalue().splitlines()
    assert '"ping\\n2026 forged 200 0"' in line


def test_stdio_logs_to_stderr_and_keeps_stdout_for_frames() -> None:
    pytest.importorskip("opentelemetry.sdk")
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "rcp-test"}
    argv = [*RCPKIT, "serve", "--stdio", "--app", "rcpkit.server.example:server",
            "--access-log", "--access-log-format", "json"]
    with StdioPeer(argv, env=env) as peer:
        peer.initialize()
        assert "result" in peer.call("retrieve", {"query": SECRET, "k": 2, "_meta": {
            "x-tracecontext": {
                "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}})
        assert peer.call("retrieve", {"query": SECRET, "k": 0})["error"]["code"] == -32602
        assert peer.close() == 0
        peer.assert_clean()  # stdout: schema-valid frames only
    stderr = "\n".join(peer.stderr_lines)
    lines = [json.loads(line) for line in peer.stderr_lines if line.startswith('{"time"')]
    assert [(line["method"], line["code"], line["principal"], line["status"])
            for line in lines] == [("initialize", 0, "stdio", None),
                                   ("retrieve", 0, "stdio", None),
                                   ("retrieve", -32602, "stdio", None)]
    assert all(line["bytesIn"] > 0 and line["bytesOut"] > 0 for line in lines)
    # the console exporter's spans: the retrieve continued the caller's trace
    assert '"trace_id": "0x4bf92f3577b34da6a3ce929d0e0e4736"' in stderr
    assert '"name": "retrieve"' in stderr and '"rcp-test"' in stderr
    assert "quokka" not in stderr
