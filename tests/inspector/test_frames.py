"""The wiretap routes each frame to the call it belongs to (ids, §9 progress tokens)."""

from __future__ import annotations

import orjson

from rcpkit.inspector.frames import Frame, FrameLog
from rcpkit.protocol.errors import Timeout


def _received(log: FrameLog, message: object) -> None:
    log.received(orjson.dumps(message))


def test_a_watched_call_gets_its_request_progress_and_response_only() -> None:
    log = FrameLog()
    mine: list[Frame] = []
    with log.watch(mine.append):
        log.sent({"jsonrpc": "2.0", "id": 7, "method": "retrieve", "params": {}}, [7])
        _received(log, {"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": 7, "progress": 0.5}})
        _received(log, {"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": 8, "progress": 0.5}})
        _received(log, {"jsonrpc": "2.0", "id": 9, "result": {}})
        _received(log, {"jsonrpc": "2.0", "id": 7, "result": {"hits": []}})
    assert [frame.direction for frame in mine] == ["sent", "received", "received"]
    assert mine[1].frame["params"]["progressToken"] == 7
    assert mine[2].frame["result"] == {"hits": []}
    assert len(log.recent) == 5  # everything is kept in the history


def test_frames_after_the_watch_ends_are_not_routed() -> None:
    log = FrameLog()
    mine: list[Frame] = []
    with log.watch(mine.append):
        log.sent({"jsonrpc": "2.0", "id": 1, "method": "ping"}, [1])
    _received(log, {"jsonrpc": "2.0", "id": 1, "result": {}})
    assert len(mine) == 1


def test_a_batch_reply_reaches_each_member_call_once() -> None:
    log = FrameLog()
    mine: list[Frame] = []
    with log.watch(mine.append):
        log.sent([{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                  {"jsonrpc": "2.0", "id": 2, "method": "ping"}], [1, 2])
        _received(log, [{"jsonrpc": "2.0", "id": 2, "result": {}},
                        {"jsonrpc": "2.0", "id": 1, "result": {}}])
    assert len(mine) == 2


def test_the_record_is_a_snapshot_and_junk_is_kept_readable() -> None:
    log = FrameLog(keep=2)
    message = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"nonce": 1}}
    log.sent(message, [1])
    message["params"]["nonce"] = 2
    assert log.recent[0].frame["params"]["nonce"] == 1
    log.received(b"not json \xff")
    assert log.recent[1].frame == {"unparsable": "not json \ufffd"}
    log.failed(1, Timeout("gone"))
    assert len(log.recent) == 2 and log.recent[1].frame["error"]["code"] == -32014
