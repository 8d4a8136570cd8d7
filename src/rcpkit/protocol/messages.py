"""JSON-RPC 2.0 frames for RCP/1 (§4, §5.3, §11): decode, classify, encode.

Sans-I/O: functions take bytes or builtins and return values. A frame that
cannot be understood is returned as an :class:`Invalid` value carrying the
error to answer with, never raised, so a transport keeps reading.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Any, Literal

import msgspec
import orjson

from ..scalar_text import is_scalar_text, non_scalar_path
from .codec import MAX_SAFE_INT, finite_frame
from .errors import InvalidParams, InvalidRequest, ParseError, RcpError

__all__ = [
    "MAX_DEPTH",
    "Invalid",
    "Message",
    "Notification",
    "Request",
    "Response",
    "classify",
    "decode",
    "encode",
    "error_response",
    "is_valid_id",
    "notification",
    "parse",
    "request",
    "require_scalar",
    "success_response",
]

Id = str | int


class Request(msgspec.Struct, frozen=True):
    """A call that must be answered exactly once (§4.1)."""

    id: Id
    method: str
    params: Any = None
    compact: bool = False
    """True for the §5.3 envelope without ``jsonrpc``; like any frame without an
    ``id`` it is a notification otherwise (§4.5), so it is never answered."""


class Notification(msgspec.Struct, frozen=True):
    """A message without ``id``: never answered (§4.5)."""

    method: str
    params: Any = None


class Response(msgspec.Struct, frozen=True):
    """A reply; exactly one of ``result``/``error`` is meaningful (§4.2, §4.3)."""

    id: Id | None
    result: Any = None
    error: dict[str, Any] | None = None


class Invalid(msgspec.Struct, frozen=True):
    """A frame or batch member that is not a valid message; answer ``error``."""

    id: Id | None
    error: RcpError


Message = Request | Notification | Response | Invalid


def is_valid_id(value: Any) -> bool:
    """§4.1/§4.6: a request id is a string or an integral number within 53 bits."""
    kind = type(value)  # the two usual cases first: this runs for every request
    if kind is int:
        number: int = value
        return -MAX_SAFE_INT <= number <= MAX_SAFE_INT
    if kind is str:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return True
    if isinstance(value, int):
        return -MAX_SAFE_INT <= value <= MAX_SAFE_INT
    return isinstance(value, float) and math.isfinite(value) and abs(value) <= MAX_SAFE_INT


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode(data: bytes | str) -> Any:
    """Parse one JSON text; raise :class:`ParseError` on invalid JSON or UTF-8.

    NaN/Infinity literals are rejected (§4.6). Integers beyond 64 bits, which
    orjson refuses, are still valid JSON and fall back to the stdlib parser, which
    also lets through escaped lone surrogates (``"\\ud800"``): :func:`parse` looks
    for those in such frames (:func:`non_scalar_path`).
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return _decode_lenient(data, exc)


MAX_DEPTH = 1024
"""Arrays/objects nested deeper than this are refused as a whole (orjson's limit)."""


def _decode_lenient(data: bytes | str, refusal: orjson.JSONDecodeError) -> Any:
    """What orjson refused (``refusal``) but the stdlib parser may read (see :func:`decode`)."""
    too_deep = "depth limit" in str(refusal)
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        if not too_deep:
            return json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ParseError("parse error: the frame is not valid UTF-8 JSON") from exc
    except RecursionError:
        too_deep = True
    raise InvalidRequest(f"the frame nests arrays/objects more than {MAX_DEPTH} levels deep",
                         data={"limit": MAX_DEPTH})


_NOT_UNICODE = "a string is not valid Unicode (it holds a lone surrogate)"


def require_scalar(value: Any, path: str) -> None:
    """Raise ``-32602`` naming the first string in ``value`` (at ``path``) that is not
    valid Unicode (:func:`non_scalar_path`)."""
    where = non_scalar_path(value, path)
    if where is not None:
        raise InvalidParams(_NOT_UNICODE, field=where)


_ABSENT: Any = object()


def classify(obj: Any, allow_compact: bool = True) -> Message:
    """Classify one decoded JSON value (not a batch) as a message."""
    if not isinstance(obj, dict):
        return Invalid(None, InvalidRequest("a message must be a JSON object"))
    raw_id = obj.get("id", _ABSENT)
    has_id = raw_id is not _ABSENT
    echo_id: Id | None = raw_id if has_id and is_valid_id(raw_id) else None
    version = obj.get("jsonrpc")
    method = obj.get("method")

    if "result" in obj or "error" in obj:
        if version != "2.0" or method is not None:
            return Invalid(echo_id, InvalidRequest("malformed response object"))
        error = obj.get("error")
        return Response(echo_id, obj.get("result"), error if isinstance(error, dict) else None)

    compact = version is None and allow_compact
    if version != "2.0" and not compact:
        return Invalid(echo_id, InvalidRequest("'jsonrpc' must be \"2.0\""))
    if not isinstance(method, str) or not method:
        return Invalid(echo_id, InvalidRequest("'method' must be a non-empty string"))
    params = obj.get("params")
    if params is not None and not isinstance(params, dict):
        # §4.1: params MUST be an object; positional params are not used by RCP.
        return Invalid(echo_id, InvalidRequest("'params' must be an object"))
    if not has_id:
        return Notification(method, params)
    if echo_id is None:
        return Invalid(None, InvalidRequest("'id' must be a string or an integer"))
    return Request(echo_id, method, params, compact)


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """The usual request, exactly: any other member, a missing ``jsonrpc`` (§5.3), an id
    other than an integer within 53 bits or a string, or an empty method fails to decode."""

    jsonrpc: Literal["2.0"]
    id: Annotated[int, msgspec.Meta(ge=-MAX_SAFE_INT, le=MAX_SAFE_INT)] | str
    method: Annotated[str, msgspec.Meta(min_length=1)]
    params: msgspec.Raw = msgspec.Raw()
    """Left undecoded here: orjson decodes it as for any other frame (see :func:`parse`)."""


_ENVELOPE = msgspec.json.Decoder(_Envelope)


def parse(data: bytes | str, *, allow_compact: bool = True) -> Message | list[Message]:
    """Decode and classify one frame: a message, a batch (list), or an Invalid.

    An empty batch is a single ``-32600`` with ``id: null`` (§11). A request holding
    a string that is not valid Unicode is refused with ``-32602`` naming it.

    The usual request is decoded straight into its parts (:class:`_Envelope`, in C); its
    ``params`` by orjson as every other frame, so that they decode to the same values. Any
    frame the envelope does not fit takes the general path, which gives every answer.
    """
    try:
        envelope = _ENVELOPE.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return _parse_any(data, allow_compact)
    raw = envelope.params
    if not raw:
        return Request(envelope.id, envelope.method)
    try:
        params = orjson.loads(memoryview(raw))
    except orjson.JSONDecodeError:  # not valid Unicode, say: the general path says how
        return _parse_any(data, allow_compact)
    if params is not None and type(params) is not dict:
        return _parse_any(data, allow_compact)
    return Request(envelope.id, envelope.method, params)


def _parse_any(data: bytes | str, allow_compact: bool) -> Message | list[Message]:
    """:func:`parse` of any frame."""
    lenient = False
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as refusal:
        lenient = True
        try:
            obj = _decode_lenient(data, refusal)
        except RcpError as exc:
            return Invalid(None, exc)
    if isinstance(obj, list):
        if not obj:
            return Invalid(None, InvalidRequest("an empty batch is not a valid request"))
        return [_classify(item, allow_compact, lenient) for item in obj]
    if not lenient:  # orjson's strings are valid Unicode: nothing more to check
        return classify(obj, allow_compact)
    return _classify(obj, allow_compact, lenient)


def _classify(obj: Any, allow_compact: bool, lenient: bool) -> Message:
    message = classify(obj, allow_compact)
    if not lenient or isinstance(message, Response | Invalid):
        return message
    where = non_scalar_path(obj)
    if where is None:
        return message
    if isinstance(message, Request) and (where == "params" or where.startswith("params.")):
        return Invalid(message.id, InvalidParams(_NOT_UNICODE,
                                                 field=where.removeprefix("params.")))
    if isinstance(message, Notification):
        return Notification(message.method if is_scalar_text(message.method) else "")
    return Invalid(None, InvalidRequest(_NOT_UNICODE))


# ── encoding ────────────────────────────────────────────────────────────────

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def encode(message: Any) -> bytes:
    """Serialise to compact single-line JSON bytes (no trailing newline).

    orjson never emits a raw newline, but it writes a non-finite float as
    ``null``. So a frame whose bytes contain ``null`` is re-encoded after the
    §4.6 rule of :func:`~rcpkit.protocol.codec.finite_frame`; frames without
    ``null`` (nearly all) pay nothing for this check.
    """
    data = orjson.dumps(message, option=_OPTIONS, default=_default)
    # ``partition``, not ``in`` or ``find``: the cheapest search on bytes (Python 3.11), as
    # it parses no arguments; this runs on every reply
    if data.partition(b"null")[1]:
        data = orjson.dumps(finite_frame(message), option=_OPTIONS, default=_default)
    return data


def _default(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        return msgspec.to_builtins(value)
    np = sys.modules.get("numpy")  # not loaded: no value here is numpy's
    if np is not None and isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def success_response(id_: Id | None, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": {} if result is None else result}


def error_response(id_: Id | None, error: RcpError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": error.to_wire()}


def request(id_: Id, method: str, params: Any = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    frame["params"] = {} if params is None else params
    return frame


def notification(method: str, params: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": {} if params is None else params}
