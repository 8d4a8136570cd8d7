"""NDJSON and SSE framing (§5.1, §5.2)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rcpkit.protocol.framing import OVERSIZED, LineBuffer, SseParser, ndjson, sse_event


def test_blank_lines_skipped_and_partial_reads_buffered() -> None:
    buf = LineBuffer()
    assert buf.feed(b'{"a":1}\n\n  \n{"b"') == [b'{"a":1}']
    assert buf.feed(b":2}\r\n") == [b'{"b":2}']
    assert buf.feed(b'{"c":3}') == []
    assert buf.finish() == [b'{"c":3}']


def test_oversized_line_reported_once_and_stream_recovers() -> None:
    buf = LineBuffer(max_line=10)
    assert buf.feed(b"x" * 25) == [OVERSIZED]
    assert buf.feed(b"y" * 25) == []
    assert buf.feed(b'yy\n{"ok":1}\n') == [b'{"ok":1}']
    assert buf.feed(b"z" * 11 + b"\nq\n") == [OVERSIZED, b"q"]


@given(st.lists(st.binary(min_size=1, max_size=30).filter(lambda b: b"\n" not in b and b.strip()),
                max_size=8), st.integers(1, 7))
def test_any_chunking_yields_the_same_lines(lines: list[bytes], step: int) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    buf = LineBuffer()
    got: list[bytes] = []
    for i in range(0, len(stream), step):
        got += buf.feed(stream[i:i + step])
    got += buf.finish()
    assert got == [line.rstrip(b"\r") for line in lines]


def test_sse_round_trip() -> None:
    wire = sse_event(b'{"a":1}') + b": comment\n\n" + sse_event(b'{"b":2}')
    parser = SseParser()
    events = []
    for byte in range(len(wire)):
        events += parser.feed(wire[byte:byte + 1])
    assert events == [b'{"a":1}', b'{"b":2}']
    assert ndjson(b"{}") == b"{}\n"
