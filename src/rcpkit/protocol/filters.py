"""Metadata filters (§8): a builder, a validator and the normalised tree.

The validator turns a wire filter into a typed tree (:class:`Condition`,
:class:`All`, :class:`AnyOf`, :class:`Not`) or raises the exact error of §8:

* ``-32602`` (``data.field``) for a malformed node, an unadvertised field, a
  value whose JSON type does not fit the field type, an operator that does not
  apply to the field type, or an empty ``and``/``or``;
* ``-32005`` (``data.option``) for an operator outside ``filter.operators``.

``date`` values are normalised to integer epoch milliseconds (§4.6), so a
backend compares numbers only. Backends compile the tree with bound parameters
(§15.4); nothing here ever builds query text.

The builder mirrors the reference SDKs: ``eq("lang", "en") & gte("year", 2020)``.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import InvalidParams, OptionUnsupported

__all__ = [
    "FIELD_TYPES",
    "OPERATORS",
    "All",
    "AnyOf",
    "Condition",
    "FilterNode",
    "Not",
    "all_",
    "any_",
    "contains",
    "eq",
    "exists",
    "gt",
    "gte",
    "in_",
    "lt",
    "lte",
    "ne",
    "nin",
    "not_",
    "parse_date",
    "to_wire",
    "validate",
]

OPERATORS: tuple[str, ...] = (
    "eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "exists",
)
FIELD_TYPES: tuple[str, ...] = ("keyword", "text", "int", "float", "bool", "date", "geo")

_ORDERED_TYPES = frozenset({"int", "float", "date"})


@dataclass(frozen=True, slots=True)
class Condition:
    """A leaf ``{field, op, value}``; ``value`` is already type-checked."""

    field: str
    op: str
    value: Any

    def __and__(self, other: FilterNode) -> All:
        return all_(self, other)

    def __or__(self, other: FilterNode) -> AnyOf:
        return any_(self, other)

    def __invert__(self) -> Not:
        return Not(self)


@dataclass(frozen=True, slots=True)
class All:
    children: tuple[FilterNode, ...]

    __and__ = Condition.__and__
    __or__ = Condition.__or__
    __invert__ = Condition.__invert__


@dataclass(frozen=True, slots=True)
class AnyOf:
    children: tuple[FilterNode, ...]

    __and__ = Condition.__and__
    __or__ = Condition.__or__
    __invert__ = Condition.__invert__


@dataclass(frozen=True, slots=True)
class Not:
    child: FilterNode

    __and__ = Condition.__and__
    __or__ = Condition.__or__
    __invert__ = Condition.__invert__


FilterNode = Condition | All | AnyOf | Not


# ── builder ─────────────────────────────────────────────────────────────────

def eq(field: str, value: Any) -> Condition:
    return Condition(field, "eq", value)


def ne(field: str, value: Any) -> Condition:
    return Condition(field, "ne", value)


def gt(field: str, value: Any) -> Condition:
    return Condition(field, "gt", value)


def gte(field: str, value: Any) -> Condition:
    return Condition(field, "gte", value)


def lt(field: str, value: Any) -> Condition:
    return Condition(field, "lt", value)


def lte(field: str, value: Any) -> Condition:
    return Condition(field, "lte", value)


def in_(field: str, values: Sequence[Any]) -> Condition:
    return Condition(field, "in", list(values))


def nin(field: str, values: Sequence[Any]) -> Condition:
    return Condition(field, "nin", list(values))


def contains(field: str, value: Any) -> Condition:
    return Condition(field, "contains", value)


def exists(field: str, present: bool = True) -> Condition:
    return Condition(field, "exists", present)


def all_(*nodes: FilterNode) -> All:
    flat: list[FilterNode] = []
    for node in nodes:
        flat.extend(node.children if isinstance(node, All) else (node,))
    return All(tuple(flat))


def any_(*nodes: FilterNode) -> AnyOf:
    flat: list[FilterNode] = []
    for node in nodes:
        flat.extend(node.children if isinstance(node, AnyOf) else (node,))
    return AnyOf(tuple(flat))


def not_(node: FilterNode) -> Not:
    return Not(node)


def to_wire(node: FilterNode) -> dict[str, Any]:
    """Serialise a tree to the §8 JSON shape."""
    if isinstance(node, Condition):
        return {"field": node.field, "op": node.op, "value": node.value}
    if isinstance(node, All):
        return {"and": [to_wire(c) for c in node.children]}
    if isinstance(node, AnyOf):
        return {"or": [to_wire(c) for c in node.children]}
    return {"not": to_wire(node.child)}


# ── validator ───────────────────────────────────────────────────────────────

def parse_date(value: Any) -> int | None:
    """A §4.6 timestamp (RFC 3339 string or integer epoch-ms) as epoch-ms, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            moment = _dt.datetime.fromisoformat(text)
        except ValueError:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=_dt.UTC)
        return int(moment.timestamp() * 1000)
    return None


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _scalar_for(ftype: str, value: Any, path: str) -> Any:
    """Check one scalar against a field type and return its normalised form."""
    ok: bool
    if ftype in ("keyword", "text"):
        ok = isinstance(value, str)
    elif ftype == "int":
        ok = _is_number(value) and float(value).is_integer() and abs(value) < 2**53
        if ok:
            value = int(value)
    elif ftype == "float":
        ok = _is_number(value)
    elif ftype == "bool":
        ok = isinstance(value, bool)
    elif ftype == "date":
        parsed = parse_date(value)
        ok = parsed is not None
        value = parsed
    else:  # unknown or untyped ("any", "geo"): any JSON scalar
        ok = value is None or isinstance(value, str | bool) or _is_number(value)
    if not ok:
        raise InvalidParams(f"filter value for {path!r} does not match field type {ftype!r}",
                            field=path)
    return value


def validate(node: Any, fields: Mapping[str, str] | Collection[str],
             operators: Collection[str] | None = None, *, path: str = "filter") -> FilterNode:
    """Validate a wire filter against the advertised ``fields``/``operators`` (§8).

    ``fields`` is either a mapping name → type (§8 table) or a plain collection
    of names (untyped: any scalar accepted). Returns the normalised tree.

    One pass over the tree: an operator outside ``operators`` is remembered and raised
    (``-32005``) only once the whole tree is known to be well formed, so a structural or
    field error (``-32602``) anywhere in it takes precedence.
    """
    typed = dict(fields) if isinstance(fields, Mapping) else {name: "any" for name in fields}
    allowed_ops = frozenset(OPERATORS if operators is None else operators)
    unadvertised: list[OptionUnsupported] = []
    tree = _validate(node, typed, allowed_ops, path, 0, unadvertised)
    if unadvertised:
        raise unadvertised[0]
    return tree


_MAX_DEPTH = 32


def _validate(node: Any, fields: dict[str, str], ops: frozenset[str], path: str,
              depth: int, unadvertised: list[OptionUnsupported]) -> FilterNode:
    if isinstance(node, Condition | All | AnyOf | Not):
        node = to_wire(node)
    if depth > _MAX_DEPTH:
        raise InvalidParams("filter nests too deeply", field=path)
    if not isinstance(node, dict):
        raise InvalidParams("a filter node must be an object", field=path)
    combinators = [key for key in ("and", "or", "not") if key in node]
    if combinators:
        if len(combinators) > 1 or "field" in node:
            raise InvalidParams("a filter node has exactly one of and/or/not/field", field=path)
        key = combinators[0]
        body = node[key]
        if key == "not":
            return Not(_validate(body, fields, ops, f"{path}.not", depth + 1, unadvertised))
        if not isinstance(body, list) or not body:
            raise InvalidParams(f"'{key}' must be a non-empty array", field=f"{path}.{key}")
        children = tuple(_validate(child, fields, ops, f"{path}.{key}[{i}]", depth + 1,
                                   unadvertised)
                         for i, child in enumerate(body))
        return All(children) if key == "and" else AnyOf(children)

    name = node.get("field")
    op = node.get("op")
    if not isinstance(name, str) or not name:
        raise InvalidParams("filter condition needs a 'field' string", field=f"{path}.field")
    field_path = f"filter.{name}"
    if name not in fields:
        raise InvalidParams(f"filter field {name!r} is not advertised", field=field_path)
    if not isinstance(op, str):
        raise InvalidParams("filter condition needs an 'op' string", field=field_path)
    if op not in OPERATORS:
        raise InvalidParams(f"unknown filter operator {op!r}", field=field_path)
    if op not in ops:
        unadvertised.append(OptionUnsupported(f"filter operator {op!r} is not advertised",
                                              option=op, param="filter.op"))
    if "value" not in node:
        raise InvalidParams("filter condition needs a 'value'", field=field_path)
    ftype = fields[name]
    value = node["value"]

    if op == "exists":
        if not isinstance(value, bool):
            raise InvalidParams("'exists' takes a boolean value", field=field_path)
        return Condition(name, op, value)
    if op in ("gt", "gte", "lt", "lte"):
        if ftype not in _ORDERED_TYPES and ftype != "any":
            raise InvalidParams(f"operator {op!r} does not apply to a {ftype} field",
                                field=field_path)
        if ftype == "any" and not _is_number(value) and parse_date(value) is None:
            raise InvalidParams(f"operator {op!r} needs a number or date", field=field_path)
        return Condition(name, op, _scalar_for(ftype, value, field_path))
    if op in ("in", "nin"):
        if not isinstance(value, list):
            raise InvalidParams(f"operator {op!r} takes an array", field=field_path)
        return Condition(name, op, [_scalar_for(ftype, v, field_path) for v in value])
    if op == "contains":
        if ftype not in ("text", "keyword", "any"):
            raise InvalidParams(f"operator 'contains' does not apply to a {ftype} field",
                                field=field_path)
        return Condition(name, op, _scalar_for(ftype, value, field_path))
    # eq / ne
    if isinstance(value, list | dict):
        raise InvalidParams(f"operator {op!r} takes a scalar", field=field_path)
    return Condition(name, op, _scalar_for(ftype, value, field_path))
