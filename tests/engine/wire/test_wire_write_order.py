"""Pipelined writes on one connection commit in the order they arrived (§7.10, §7.7.1): each
acknowledged ``index/add`` names the version it made, and those versions rise with the
requests' order, whatever the sizes of the writes before and after."""

from __future__ import annotations

from typing import Any

from engine_wire import Engine

WRITES = 40


def _documents(number: int) -> list[dict[str, Any]]:
    # Large and small writes alternate, so a later small one is ready to commit first.
    size = 120 if number % 2 == 0 else 1
    return [{"id": f"w{number}-d{i}", "text": f"Write {number}, note {i}: bees and bread. " * 20}
            for i in range(size)]


def _version(reply: dict[str, Any]) -> int:
    return int(reply["result"]["_meta"]["indexVersion"].rpartition(".")[2])


def test_pipelined_writes_commit_in_arrival_order(serve: Any) -> None:
    engine: Engine = serve()
    for number in range(WRITES):
        engine.peer.send({"jsonrpc": "2.0", "id": f"write-{number}", "method": "index/add",
                          "params": {"documents": _documents(number)}})
    versions = [_version(engine.peer.reply(f"write-{number}")) for number in range(WRITES)]
    assert versions == sorted(versions) and len(set(versions)) == WRITES, versions
    engine.close()
