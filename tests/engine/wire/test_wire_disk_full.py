"""A disk that fills under ``index/add`` over the real wire (§7.10, §12): on a small tmpfs,
every write is either acknowledged (and stays found) or refused with ``-32010`` and
``data.detail: "disk full"`` (and nothing of it is written), never ``-32603``; the data
directory still opens and serves on the full disk, and takes writes again once there is
room. Needs root to mount the tmpfs; skipped otherwise."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_wire import Engine, make_data_dir

PER_BATCH = 20
MAX_BATCHES = 400
REFUSALS_WANTED = 6


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs",
                              str(mount_point)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _batch(number: int) -> list[dict[str, Any]]:
    return [{"id": f"b{number}-d{i}",
             "text": f"Note {i} of batch {number}: bees, bread and weather "
                     f"{number * PER_BATCH + i}. " * 80,
             "meta": {"batch": number}} for i in range(PER_BATCH)]


def _found(engine: Engine, number: int) -> int:
    hits = engine.retrieve("bees bread weather", 100, mode="dense", unit="document",
                           filter={"field": "batch", "op": "eq", "value": number})["hits"]
    return len(hits)


def test_a_full_disk_refuses_uncommitted_writes_and_acknowledges_committed_ones(
        small_disk: Path, serve: Any) -> None:
    data = make_data_dir(small_disk / "data")
    engine: Engine = serve(data)
    acknowledged: list[int] = []
    refused: list[int] = []
    for number in range(MAX_BATCHES):
        reply = engine.peer.call("index/add", {"documents": _batch(number)})
        if "result" in reply:
            assert reply["result"]["ids"] == [d["id"] for d in _batch(number)]
            acknowledged.append(number)
            continue
        error = reply["error"]
        assert error["code"] == -32010, error
        assert error["data"]["detail"] == "disk full", error
        refused.append(number)
        if len(refused) == REFUSALS_WANTED:
            break
    assert len(refused) == REFUSALS_WANTED, "the disk never filled; make the batches larger"
    assert engine.peer.close() == 0  # saving the indexes at exit may fail: logged, not fatal
    engine.peer.assert_clean()

    reopened: Engine = serve(data)  # on the still-full disk (a new session sees the batch field)
    for number in [*acknowledged[:2], *acknowledged[-3:], *refused]:
        assert _found(reopened, number) == (PER_BATCH if number in acknowledged else 0)
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    assert reopened.add(_batch(MAX_BATCHES))["ids"]
    reopened.close()
    assert _found(serve(data), MAX_BATCHES) == PER_BATCH
