"""Frame classification and encoding (§4, §5.3, §11) — sans-I/O, fed bytes."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rcpkit.protocol import messages as m
from rcpkit.protocol.errors import InvalidRequest, ParseError
from rcpkit.protocol.types import Hit


@pytest.mark.parametrize("raw_id", [0, -1, 7, 2**53 - 1, "abc", "", "ü-🙂"])
def test_request_ids_keep_json_type_and_value(raw_id: object) -> None:
    frame = orjson.dumps({"jsonrpc": "2.0", "id": raw_id, "method": "ping", "params": {}})
    msg = m.parse(frame)
    assert isinstance(msg, m.Request)
    assert msg.id == raw_id and type(msg.id) is type(raw_id)
    echoed = orjson.loads(m.encode(m.success_response(msg.id, {})))
    assert echoed["id"] == raw_id and type(echoed["id"]) is type(raw_id)


@pytest.mark.parametrize("raw_id", [None, True, [1], {"a": 1}, 2**53 + 10])
def test_invalid_ids_are_invalid_requests_with_null_id(raw_id: object) -> None:
    msg = m.classify({"jsonrpc": "2.0", "id": raw_id, "method": "ping"})
    assert isinstance(msg, m.Invalid)
    assert msg.id is None and isinstance(msg.error, InvalidRequest)


def test_notification_has_no_id() -> None:
    msg = m.parse(b'{"jsonrpc":"2.0","method":"notifications/cancel","params":{"id":3}}')
    assert msg == m.Notification("notifications/cancel", {"id": 3})


@pytest.mark.parametrize("data", [b"{", b"\xff\xfe", b"NaN", b'{"a": Infinity}', b""])
def test_unparseable_frames_are_parse_errors(data: bytes) -> None:
    msg = m.parse(data)
    assert isinstance(msg, m.Invalid) and isinstance(msg.error, ParseError)
    assert msg.id is None and msg.error.code == -32700


def test_empty_batch_is_single_invalid_request() -> None:
    msg = m.parse(b"[]")
    assert isinstance(msg, m.Invalid) and msg.error.code == -32600


def test_batch_members_classified_independently() -> None:
    out = m.parse(b'[{"jsonrpc":"2.0","id":1,"method":"ping"},1,'
                  b'{"jsonrpc":"2.0","method":"x"},{"jsonrpc":"1.0","id":2,"method":"ping"}]')
    assert isinstance(out, list)
    kinds = [type(x).__name__ for x in out]
    assert kinds == ["Request", "Invalid", "Notification", "Invalid"]
    assert out[3].id == 2  # a well-typed id is echoed even on an invalid member


def test_positional_params_rejected() -> None:
    msg = m.classify({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]})
    assert isinstance(msg, m.Invalid) and msg.id == 1


def test_compact_envelope_is_accepted() -> None:
    assert m.parse(b'{"method":"info","id":"a"}') == m.Request("a", "info", None, True)
    # Without an id it is a notification like any other frame (§4.5): never answered.
    assert m.parse(b'{"method":"info","params":{}}') == m.Notification("info", {})
    assert isinstance(m.parse(b'{"method":"info","id":1}', allow_compact=False), m.Invalid)


def test_responses_are_classified() -> None:
    ok = m.parse(b'{"jsonrpc":"2.0","id":1,"result":{"x":1}}')
    err = m.parse(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"p"}}')
    assert ok == m.Response(1, {"x": 1}, None)
    assert isinstance(err, m.Response) and err.error == {"code": -32700, "message": "p"}


def test_huge_integers_are_valid_json_not_parse_errors() -> None:
    big = b"123456789012345678901234567890"
    msg = m.parse(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":' + big + b"}}")
    assert isinstance(msg, m.Request)


def test_encode_never_emits_non_finite_numbers() -> None:
    frame = {"score": math.nan, "v": [math.inf, 1.5], "a": np.array([np.nan], np.float32),
             "keep": None}
    data = m.encode(frame)
    assert b"NaN" not in data and b"Infinity" not in data
    assert orjson.loads(data) == {"score": 0.0, "v": [0.0, 1.5], "a": [0.0], "keep": None}


def test_encode_applies_one_float_rule_to_structs_and_free_form_members() -> None:
    """§4.6 inside a frame: optional members omitted, free-form (``meta``, ``data``) null."""
    frame = m.request(1, "index/add", {"documents": [{"text": "t", "meta": {"x": math.nan}}]})
    assert orjson.loads(m.encode(frame))["params"]["documents"][0]["meta"] == {"x": None}
    hit = Hit(id="a", score=math.inf, confidence=math.nan)
    reply = orjson.loads(m.encode(m.success_response(None, {"hits": [hit]})))
    assert reply == {"jsonrpc": "2.0", "id": None, "result": {"hits": [{"id": "a", "score": 0.0}]}}


@given(st.recursive(st.none() | st.booleans() | st.floats() | st.integers(-2**53, 2**53)
                    | st.text(), lambda c: st.lists(c, max_size=4)
                    | st.dictionaries(st.text(max_size=5), c, max_size=4), max_leaves=20))
def test_encoded_frames_are_single_line_finite_json(value: object) -> None:
    data = m.encode({"jsonrpc": "2.0", "id": 1, "result": {"v": value}})
    assert b"\n" not in data and not data.startswith(b"\xef\xbb\xbf")
    decoded = orjson.loads(data)  # orjson rejects NaN/Infinity tokens
    assert decoded["id"] == 1


_MEMBER_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
    st.sampled_from(["2.0", "1.0", "", "ping", "\ud800", 2**53 - 1, 2**53, -(2**53)]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(),
                                                          max_size=3))
_MEMBERS = st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "extra"])


@given(st.dictionaries(_MEMBERS, _MEMBER_VALUES, max_size=5), st.booleans(),
       st.sampled_from([b"", b" ", b"\n", b"x", b"]"]))
def test_the_usual_request_parses_as_any_frame_does(
        members: dict[str, object], compact: bool, tail: bytes) -> None:
    """``parse`` decodes the usual request on a path of its own: whatever the members, it
    classifies every frame as the general path does (§4.1, §4.6, §5.3)."""
    # the stdlib writes huge integers and escapes lone surrogates, as a client may
    data = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping", **members}).encode() + tail
    assert _wire(m.parse(data, allow_compact=compact)) == _wire(m._parse_any(data, compact))


@pytest.mark.parametrize("data", [
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"q":"\\ud800"}}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"q":"\xff"}}',
    b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"n":123456789012345678901234567890}}',
    b'{"jsonrpc":"2.0","id":1,"method":"x","params":' + b"[" * 3000 + b"]" * 3000 + b"}",
    b'{"jsonrpc":"2.0","id":1,"id":"two","method":"x","params":{"a":1,"a":2}}',
    b'{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}',
    b'{"jsonrpc":"2.0","id":true,"method":"x"}',
    b'{"jsonrpc":"2.0","id":1.0,"method":"x"}',
    b'{"jsonrpc":"2.0","id":9007199254740992,"method":"x"}',
    b'{"jsonrpc":"2.0","id":-9007199254740991,"method":"x"}',
    b'{"jsonrpc":"2.0","id":1,"method":""}',
    b'{"id":1,"method":"x"}',
])
def test_frames_at_the_edge_of_the_usual_request_parse_as_any_frame_does(data: bytes) -> None:
    assert _wire(m.parse(data)) == _wire(m._parse_any(data, True))


def _wire(parsed: m.Message | list[m.Message]) -> object:
    """A parse result made comparable: an Invalid's error as it goes on the wire."""
    if isinstance(parsed, list):
        return [_wire(each) for each in parsed]
    if isinstance(parsed, m.Invalid):
        return "invalid", parsed.id, parsed.error.to_wire()
    return parsed
