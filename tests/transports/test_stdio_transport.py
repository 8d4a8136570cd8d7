"""stdio transport over a real subprocess (§5.1, §13.1): every stdout line is checked
against the normative schema by :class:`support.stdio.StdioPeer`."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from support.stdio import StdioPeer, python_argv

pytestmark = pytest.mark.wire

EXAMPLE = str(Path(__file__).resolve().parents[1] / "support" / "example_server.py")


def spawn(*args: str) -> StdioPeer:
    return StdioPeer(python_argv(EXAMPLE, *args))


def line(method: str, params: Any = None, id_: Any = 1) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        message["id"] = id_
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode() + b"\n"


def test_session_end_to_end() -> None:
    with spawn() as peer:
        assert peer.call("ping", {"nonce": "n"})["result"] == {"nonce": "n"}
        assert peer.call("retrieve", {"query": "x", "k": 1})["error"]["code"] == -32001
        result = peer.initialize()
        assert result["_meta"]["conformance"] == "L0"
        hits = peer.call("retrieve", {"query": "json", "k": 3})["result"]["hits"]
        assert hits and hits[0]["id"] in {"rcp", "stdio"}
        assert peer.call("shutdown")["result"] == {}
        assert peer.close() == 0
        peer.assert_clean()


def test_stray_prints_and_tracebacks_go_to_stderr() -> None:
    with spawn() as peer:
        peer.initialize()
        assert peer.call("x-test/print")["result"] == {"printed": True}
        boom = peer.call("x-test/boom")
        assert boom["error"]["code"] == -32603 and "secret" not in json.dumps(boom)
        assert peer.call("ping", id_="after")["result"] == {}
        assert peer.close() == 0
        peer.assert_clean()
        stderr = "".join(peer.stderr_lines)
        assert "stray print from a handler" in stderr
        assert "secret internal detail" in stderr and "Traceback" in stderr


def test_framing_blank_lines_partial_reads_and_crlf() -> None:
    with spawn() as peer:
        peer.send_raw(b"\n\n   \n")
        data = line("ping", {"nonce": 1}, id_="split")
        for i in range(0, len(data), 7):  # dribble the frame in small pieces
            peer.send_raw(data[i:i + 7])
            time.sleep(0.002)
        assert peer.reply("split")["result"] == {"nonce": 1}
        peer.send_raw(line("ping", id_="crlf")[:-1] + b"\r\n")
        assert peer.reply("crlf")["result"] == {}
        # a final frame without its newline still counts at EOF
        peer.send_raw(line("ping", id_="last")[:-1])
        assert peer.close() == 0
        assert peer.reply("last")["result"] == {}
        peer.assert_clean()


def test_bad_input_is_answered_and_survived() -> None:
    with spawn("200") as peer:  # lines over 200 bytes are refused
        peer.send_raw(b"\xff\xfe{]\n")
        reply = peer.recv()
        assert reply["id"] is None and reply["error"]["code"] == -32700
        peer.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * 500
                      + b'"}}\n')
        reply = peer.recv()
        assert reply["id"] is None and reply["error"]["code"] == -32600
        assert reply["error"]["data"]["limit"] == 200
        peer.send_raw(b"\xef\xbb\xbf" + line("ping", id_=2))  # a BOM is not JSON
        assert peer.recv()["error"]["code"] == -32700
        assert peer.call("ping", id_=3)["result"] == {}
        assert peer.close() == 0
        peer.assert_clean()


def test_no_bom_and_one_frame_per_line() -> None:
    proc = subprocess.run(python_argv(EXAMPLE), input=line("info") + line("ping", id_=2),
                          capture_output=True, timeout=30, check=True)
    assert proc.stdout.startswith(b'{"jsonrpc"')
    lines = proc.stdout.split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3
    assert all(json.loads(raw)["jsonrpc"] == "2.0" for raw in lines[:-1])


def test_eof_finishes_in_flight_requests() -> None:
    with spawn() as peer:
        peer.initialize()
        peer.send_raw(line("x-test/sleep", {"seconds": 0.3}, id_="slow"))
        assert peer.close() == 0
        assert peer.reply("slow")["result"] == {"slept": 0.3}
        peer.assert_clean()


def test_nothing_after_shutdown_is_processed() -> None:
    with spawn() as peer:
        peer.initialize()
        peer.send_raw(line("x-test/sleep", {"seconds": 0.2}, id_="inflight")
                      + line("shutdown", id_="bye") + line("ping", id_="late"))
        assert peer.reply("bye")["result"] == {}
        assert peer.proc.wait(15) == 0  # exits without waiting for EOF
        peer.close()
        assert peer.reply("inflight")["result"] == {"slept": 0.2}
        assert all(frame.get("id") != "late" for frame in peer.received)
        peer.assert_clean()


def test_stdin_from_a_regular_file(tmp_path: Path) -> None:
    script = tmp_path / "requests.ndjson"
    script.write_bytes(line("initialize", {"protocolVersion": 1}) + line("ping", id_=2)
                       + line("retrieve", {"query": "http", "k": 1}, id_=3))
    with script.open("rb") as stdin:
        proc = subprocess.run(python_argv(EXAMPLE), stdin=stdin, capture_output=True,
                              timeout=30, check=True)
    ids = [json.loads(raw)["id"] for raw in proc.stdout.splitlines()]
    assert sorted(ids) == [1, 2, 3]


def test_pipelined_requests_each_answered_once() -> None:
    with spawn() as peer:
        peer.initialize()
        count = 500
        peer.send_raw(b"".join(line("ping", {"nonce": i}, id_=i + 100) for i in range(count))
                      + line("retrieve", {"query": "json", "k": 1}, id_="r"))
        for i in range(count):
            assert peer.reply(i + 100)["result"] == {"nonce": i}
        assert "hits" in peer.reply("r")["result"]
        assert peer.close() == 0
        ids = [f["id"] for f in peer.received if isinstance(f, dict) and "id" in f]
        assert len(ids) == len(set(map(str, ids))) == count + 2
        peer.assert_clean()


def test_cancel_progress_and_log_in_band() -> None:
    with spawn() as peer:
        peer.initialize(capabilities={"log": {}}, _meta={"logLevel": "info"})
        peer.send_raw(line("x-test/busy", {"seconds": 10, "_meta": {"progressToken": "p"}},
                           id_=5))
        first = peer.recv()
        assert first["method"] == "notifications/progress"
        assert first["params"]["progressToken"] == "p"
        peer.send_raw(line("notifications/cancel", {"id": 5}, id_=None))
        assert peer.reply(5)["error"]["code"] == -32006
        assert peer.call("x-test/log")["result"] == {}
        levels = [n["params"]["level"] for n in peer.notifications
                  if n["method"] == "notifications/log"]
        assert levels == ["info", "warning"]
        assert peer.close() == 0
        peer.assert_clean()


def test_server_default_deadline() -> None:
    with spawn(str(1 << 20), "100") as peer:
        peer.initialize()
        assert peer.call("x-test/sleep", {"seconds": 5})["error"]["code"] == -32014
        assert peer.close() == 0


@pytest.mark.parametrize(("broken", "echoed"), [
    (b"[]\n", None), (b"[1,2]\n", None), (b'{"id":1}\n', 1), (b"null\n", None), (b"42\n", None),
    (b'[{"jsonrpc":"2.0","id":7,"method":"ping","params":[1]}]\n', None)])
def test_odd_frames(broken: bytes, echoed: Any) -> None:
    """A malformed single frame echoes a recoverable id; a malformed batch member never does
    (§11)."""
    with spawn() as peer:
        peer.send_raw(broken)
        reply = peer.recv()
        replies = reply if isinstance(reply, list) else [reply]
        assert all(r["error"]["code"] == -32600 and r["id"] == echoed for r in replies)
        assert peer.call("ping", id_="alive")["result"] == {}
        assert peer.close() == 0
        peer.assert_clean()


def test_shutdown_inside_a_batch_ends_the_session() -> None:
    with spawn() as peer:
        peer.send_raw(b"[" + line("ping", id_="a")[:-1] + b"," + line("shutdown", id_="b")[:-1]
                      + b"]\n")
        replies = peer.recv()
        assert sorted(r["id"] for r in replies) == ["a", "b"]
        assert peer.proc.wait(15) == 0
        peer.close()
        peer.assert_clean()
