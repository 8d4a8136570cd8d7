"""``rcpkit inspect`` as a user runs it: first stdout line, loopback bind, exit codes."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from rcpkit.transports.http import create_app as create_rcp_app
from support.example_server import build_test_server
from support.http import LoopbackServer

from .conftest import RCPKIT, assert_cancel_sent

URL = re.compile(r"^http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]{20,})$")


def test_prints_its_address_first_serves_the_page_and_stops_cleanly(sample_data: Path) -> None:
    process = subprocess.Popen([*RCPKIT, "inspect", "--data", str(sample_data), "--no-open"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        match = URL.match(first)
        assert match, first
        page = httpx.get(first, timeout=30)
        assert page.status_code == 200 and "RCP inspector" in page.text
        token = match.group(2)
        overview = httpx.get(f"http://127.0.0.1:{match.group(1)}/api/overview",
                             headers={"x-inspector-token": token}, timeout=30)
        assert overview.json()["server"]["name"] == "rcpkit-engine"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert out == ""  # nothing after the address line
    assert "Traceback" not in err


@pytest.mark.wire
@pytest.mark.parametrize("args", [
    [],
    ["--http", "http://127.0.0.1:9/rcp", "--stdio", "true"],
    ["--stdio", "true", "--header", "Authorization: Bearer x"],
    ["--http", "http://127.0.0.1:9/rcp", "--header", "no-colon"],
    ["--http", "http://127.0.0.1:9/rcp", "--listen", "127.0.0.1:http"],
    ["--http", "http://127.0.0.1:9/rcp", "--eval-root", "/no/such/directory"],
    ["--http", "http://127.0.0.1:9/rcp", "--allow-stdio", " "],
])
def test_usage_errors_exit_2(args: list[str]) -> None:
    run = subprocess.run([*RCPKIT, "inspect", "--no-open", *args], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert run.stdout == "" and run.stderr.startswith("rcpkit inspect: error: ")


@pytest.mark.wire
@pytest.mark.parametrize("args", [
    ["--http", "http://127.0.0.1:9/rcp"],
    ["--stdio", "true"],
])
def test_an_unreachable_server_exits_1_with_one_line(args: list[str]) -> None:
    run = subprocess.run([*RCPKIT, "inspect", "--no-open", "--timeout", "10", *args],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stderr
    assert run.stdout == ""
    assert run.stderr.startswith("rcpkit inspect: error: cannot inspect")
    assert "Traceback" not in run.stderr


@pytest.mark.wire
def test_a_call_whose_page_goes_away_is_cancelled_on_the_server() -> None:
    """Closing the event stream (the page's Cancel, or a closed tab) abandons the request:
    the inspector sends ``notifications/cancel`` for it (§7.14)."""
    server = f"{sys.executable} {Path(__file__).parents[1] / 'support' / 'example_server.py'}"
    process = subprocess.Popen([*RCPKIT, "inspect", "--stdio", server, "--no-open"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        match = URL.match(url)
        assert match
        base = f"http://127.0.0.1:{match.group(1)}"
        headers = {"x-inspector-token": match.group(2)}
        body = {"method": "x-test/sleep", "params": {"seconds": 60}, "stream": True}
        with httpx.stream("POST", f"{base}/api/call", json=body, headers=headers,
                          timeout=30) as response:
            # The progress frame arrives live, through the lean server's chunked SSE.
            progressed = any(line.startswith("data: ") and "notifications/progress" in line
                             for line in response.iter_lines())
        assert progressed
        assert_cancel_sent(url, "x-test/sleep")
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)


@pytest.mark.wire
def test_connect_and_reconnect_over_the_inspectors_own_server() -> None:
    """``/api/connect`` and ``/api/reconnect`` through the lean HTTP server (which starts an
    app outside a task): a 200 with the new overview, not a 500; only ``--allow-stdio``
    commands (and the first target) are offered."""
    example = f"{sys.executable} {Path(__file__).parents[1] / 'support' / 'example_server.py'}"
    sloppy = f"{sys.executable} {Path(__file__).with_name('sloppy_server.py')}"
    process = subprocess.Popen([*RCPKIT, "inspect", "--stdio", example, "--allow-stdio", sloppy,
                                "--no-open"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None
        match = URL.match(process.stdout.readline().strip())
        assert match
        base = f"http://127.0.0.1:{match.group(1)}"
        headers = {"x-inspector-token": match.group(2)}
        overview = httpx.get(f"{base}/api/overview", headers=headers, timeout=30).json()
        assert overview["allowedStdio"] == [example, sloppy]
        with LoopbackServer(create_rcp_app(build_test_server())) as upstream:
            over_http = httpx.post(f"{base}/api/connect", json={"http": upstream.url + "/rcp"},
                                   headers=headers, timeout=60)
            assert over_http.status_code == 200, over_http.text
        gone = httpx.post(f"{base}/api/connect", json={"http": upstream.url + "/rcp"},
                          headers=headers, timeout=60)
        assert gone.status_code == 502 and "cannot connect" in gone.json()["error"]["message"]
        switched = httpx.post(f"{base}/api/connect", json={"stdio": sloppy}, headers=headers,
                              timeout=60)
        assert switched.status_code == 200 and switched.json()["server"]["name"] == "sloppy"
        again = httpx.post(f"{base}/api/reconnect", json={}, headers=headers, timeout=60)
        assert again.status_code == 200 and again.json()["connected"] is True
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
