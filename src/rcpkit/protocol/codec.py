"""Builtins ↔ typed wire objects, and the one rule for non-finite floats (§4.6).

Decoding (:func:`convert`) is liberal where the spec allows it and peers differ:

* an explicit JSON ``null`` counts as absent (§4.6), except inside free-form
  objects (``meta``, ``_meta``, ``filter``, ``capabilities``, log ``data``,
  progress ``partial``), which are passed through untouched;
* unknown fields and ``x-`` keys are ignored (§4.6, §6.2);
* a type's ``synonyms`` (``texts`` for ``inputs``…) fill the canonical field;
* integers are JSON numbers without a fractional part (§4.6): ``3`` and ``3.0``
  (also ``1e2``) are accepted, ``3.5``, strings and booleans are not.

Every decoding failure is ``InvalidParams`` whose ``data.field`` is the dotted
params path (``"rerank.topN"``, ``"documents[2].text"``, §12.1).

Encoding never emits NaN/Infinity (§4.6): :func:`to_builtins` (a result or params
object) and :func:`finite_frame` (a whole JSON-RPC frame) apply the same rule.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any, TypeVar

import msgspec

from .errors import InvalidParams

__all__ = ["MAX_SAFE_INT", "convert", "finite_frame", "to_builtins"]

T = TypeVar("T")

MAX_SAFE_INT = 2**53 - 1

#: Keys whose values are free-form JSON: never rewritten on the way in or out.
_FREE_FORM = frozenset({"_meta", "meta", "filter", "capabilities", "data", "partial"})

_AT_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]+)`")
_MAX_REASON = 160


# ── decoding ─────────────────────────────────────────────────────────────────

def _prepare(value: Any) -> Any:
    """Drop ``null`` members (§4.6) and turn integral floats into ints, outside free-form."""
    if isinstance(value, dict):
        return {key: item if key in _FREE_FORM else _prepare(item)
                for key, item in value.items() if item is not None}
    if isinstance(value, list):
        # Numeric arrays (vectors, scores, indices) are homogeneous: leave them to msgspec.
        if value and isinstance(value[0], int | float):
            return value
        return [_prepare(item) for item in value]
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_SAFE_INT:
        return int(value)
    return value


def _join(prefix: str, location: str) -> str:
    """``prefix`` + a msgspec location (``.a[2].b``) → a dotted params path."""
    if not prefix:
        return location.lstrip(".")
    return prefix + location if location else prefix


def _error_location(exc: msgspec.ValidationError, prefix: str) -> tuple[str, str]:
    """(reason, field path) of a msgspec error; a missing field names that field."""
    text = str(exc)
    match = _AT_PATH.search(text)
    # msgspec shows a mapping value as ``[...]``: report the mapping itself.
    location = match.group("path").replace("[...]", "") if match else ""
    reason = text[: match.start()] if match else text
    missing = _MISSING.match(reason)
    if missing:
        location = f"{location}.{missing.group('name')}"
    if len(reason) > _MAX_REASON:
        reason = reason[:_MAX_REASON] + "…"
    return reason, _join(prefix, location)


def convert(obj: Any, typ: type[T], *, path: str = "") -> T:
    """Decode JSON builtins into ``typ``; errors become ``InvalidParams(field=…)``.

    ``path`` prefixes the reported field (e.g. ``"hits[0]"``). A type's
    ``synonyms`` (alias → canonical) fill the canonical field when it is absent.
    """
    prepared = _prepare(obj)
    synonyms: dict[str, str] = getattr(typ, "synonyms", {})
    if synonyms and isinstance(prepared, dict):
        for alias, canonical in synonyms.items():
            if canonical not in prepared and alias in prepared:
                prepared[canonical] = prepared[alias]
    try:
        return msgspec.convert(prepared, typ)
    except msgspec.ValidationError as exc:
        reason, location = _error_location(exc, path)
        where = f" at '{location}'" if location else ""
        raise InvalidParams(f"invalid params: {reason}{where}", field=location or None) from None


# ── encoding ─────────────────────────────────────────────────────────────────

#: Keys that hold a required score: a non-finite value becomes this sentinel.
_REQUIRED_FLOAT_KEYS = frozenset({"score"})
_SENTINEL = 0.0


def to_builtins(obj: Any) -> Any:
    """Structs/dataclasses → JSON builtins: camelCase, ``_meta``, None/default fields omitted.

    numpy scalars/arrays become numbers/lists; non-finite floats follow :func:`_finite`.
    """
    return _finite(_plain(obj), free_form=False, keep_null=False)


def finite_frame(frame: Any) -> Any:
    """A JSON-RPC frame (builtins, Structs, numpy values) with the §4.6 float rule applied.

    Unlike :func:`to_builtins`, explicit ``null`` members stay: a frame's ``id`` may be null.
    """
    return _finite(_plain(frame), free_form=False, keep_null=True)


def _plain(obj: Any) -> Any:
    return msgspec.to_builtins(obj, enc_hook=_numpy_hook)


def _numpy_hook(value: Any) -> Any:
    """Engines hand over numpy scalars and arrays; they travel as plain numbers/lists."""
    np = sys.modules.get("numpy")  # not loaded: no value here is numpy's
    if np is not None and isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def _finite(value: Any, *, free_form: bool, keep_null: bool) -> Any:
    """§4.6: a non-finite optional member is omitted, a required ``score`` and any array
    element (scores, vector components) become 0.0; inside free-form objects they become
    ``null``. ``None`` members are dropped outside free-form unless ``keep_null``."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            nested_free = free_form or key in _FREE_FORM
            if not free_form and not keep_null and item is None:
                continue
            if isinstance(item, float) and not math.isfinite(item):
                if free_form:
                    out[key] = None
                elif key in _REQUIRED_FLOAT_KEYS:
                    out[key] = _SENTINEL
                continue
            out[key] = _finite(item, free_form=nested_free, keep_null=keep_null)
        return out
    if isinstance(value, list):
        if value and isinstance(value[0], int | float) and _all_finite(value):
            return value
        replacement = None if free_form else _SENTINEL
        return [replacement if isinstance(item, float) and not math.isfinite(item)
                else _finite(item, free_form=free_form, keep_null=keep_null)
                for item in value]
    return value


def _all_finite(numbers: list[Any]) -> bool:
    """Fast check for a numeric array (a sum is finite only if every term is)."""
    try:
        return math.isfinite(sum(numbers))
    except (TypeError, OverflowError):
        return False
