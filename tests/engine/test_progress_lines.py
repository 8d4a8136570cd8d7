"""Plain progress lines for a run whose output is not a terminal (issue 33): one at the first
passage, then one every ~10 s of the injected clock, never more often."""

from __future__ import annotations

import pytest

from rcpkit.cli.index import _ProgressLines
from support.clock import FakeClock


def test_a_line_at_the_first_passage_then_every_ten_seconds(
        capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock(1000.0)
    lines = _ProgressLines(600, clock=clock)
    clock.advance(0.5)
    lines.update(0.1, 1)
    for _ in range(20):  # many passages within the next 9 s: no new line
        clock.advance(0.45)
        lines.update(5, 40)
    clock.advance(0.9)  # 9.9 s since the last line: still none
    lines.update(100, 250)
    clock.advance(0.2)
    lines.update(120.5, 300)
    printed = capsys.readouterr()
    assert printed.out == ""
    assert printed.err.splitlines() == [
        "indexing: 0/600 documents · 1 passages embedded (2/s) · 0 s",
        "indexing: 120/600 documents · 300 passages embedded (28/s) · 10 s"]
