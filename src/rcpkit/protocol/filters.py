"""Metadata filters (§8): a builder, a validator and the normalised tree.

The validator turns a wire filter into a typed tree (:class:`Condition`,
:class:`All`, :class:`AnyOf`, :class:`Not`) or raises a :class:`FilterError`, which
carries no wire code: this language is also the engine's query language, so the
side that calls it says what a refusal becomes. On the wire (§8) that is

* ``-32602`` (``data.field``) for a malformed node, an unadvertised field, a
  value whose JSON type does not fit the field type, an operator that does not
  apply to the field type, or an empty ``and``/``or``;
* ``-32005`` (``data.option``) for an operator outside ``filter.operators``
  (:class:`UnadvertisedOperator`).

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

__all__ = [
    "FIELD_TYPES",
    "MAX_NODES",
    "OPERATORS",
    "All",
    "AnyOf",
    "Condition",
    "FilterError",
    "FilterNode",
    "Not",
    "UnadvertisedOperator",
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



class FilterError(ValueError):
    """A filter the §8 language refuses; ``field`` is the dotted path of the offending
    node (``filter.lang``, ``filter.and[1]``) and ``limit`` the bound it broke, if any."""

    def __init__(self, message: str, field: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.limit = limit


class UnadvertisedOperator(FilterError):
    """A well-formed filter whose only fault is an operator outside the allowed set."""

    def __init__(self, message: str, operator: str) -> None:
        super().__init__(message, field="filter.op")
        self.operator = operator


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
        raise FilterError(f"filter value for {path!r} does not match field type {ftype!r}", path)
    return value


def validate(node: Any, fields: Mapping[str, str] | Collection[str],
             operators: Collection[str] | None = None, *, path: str = "filter") -> FilterNode:
    """Validate a wire filter against the advertised ``fields``/``operators`` (§8).

    ``fields`` is either a mapping name → type (§8 table) or a plain collection
    of names (untyped: any scalar accepted). Returns the normalised tree.

    One pass over the tree: an operator outside ``operators`` is remembered and raised
    (:class:`UnadvertisedOperator`) only once the whole tree is known to be well formed,
    so a structural or field error anywhere in it takes precedence.
    """
    typed = dict(fields) if isinstance(fields, Mapping) else {name: "any" for name in fields}
    allowed_ops = frozenset(OPERATORS if operators is None else operators)
    if _more_nodes_than(node, MAX_NODES):
        raise FilterError(f"a filter may hold at most {MAX_NODES} nodes", path, MAX_NODES)
    unadvertised: list[UnadvertisedOperator] = []
    tree = _validate(node, typed, allowed_ops, path, 0, unadvertised)
    if unadvertised:
        raise unadvertised[0]
    return tree


_MAX_DEPTH = 32
MAX_NODES = 1024
"""Conditions and combinators in one filter, at most (§15.5: each costs a query-engine
term; a set of values belongs in one ``in`` condition)."""


def _more_nodes_than(node: Any, limit: int) -> bool:
    """Whether the wire tree ``node`` has more than ``limit`` nodes, counted without recursion
    and stopping at the limit."""
    pending = [node]
    seen = 0
    while pending:
        current = pending.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(current, dict):
            for key in ("and", "or"):
                children = current.get(key)
                if isinstance(children, list):
                    pending.extend(children)
            if "not" in current:
                pending.append(current["not"])
    return False


def _validate(node: Any, fields: dict[str, str], ops: frozenset[str], path: str,
              depth: int, unadvertised: list[UnadvertisedOperator]) -> FilterNode:
    if isinstance(node, Condition | All | AnyOf | Not):
        node = to_wire(node)
    if depth > _MAX_DEPTH:
        raise FilterError("filter nests too deeply", path)
    if not isinstance(node, dict):
        raise FilterError("a filter node must be an object", path)
    combinators = [key for key in ("and", "or", "not") if key in node]
    if combinators:
        if len(combinators) > 1 or "field" in node:
            raise FilterError("a filter node has exactly one of and/or/not/field", path)
        key = combinators[0]
        body = node[key]
        if key == "not":
            return Not(_validate(body, fields, ops, f"{path}.not", depth + 1, unadvertised))
        if not isinstance(body, list) or not body:
            raise FilterError(f"'{key}' must be a non-empty array", f"{path}.{key}")
        children = tuple(_validate(child, fields, ops, f"{path}.{key}[{i}]", depth + 1,
                                   unadvertised)
                         for i, child in enumerate(body))
        return All(children) if key == "and" else AnyOf(children)

    name = node.get("field")
    op = node.get("op")
    if not isinstance(name, str) or not name:
        raise FilterError("filter condition needs a 'field' string", f"{path}.field")
    field_path = f"filter.{name}"
    if name not in fields:
        raise FilterError(f"filter field {name!r} is not advertised", field_path)
    if not isinstance(op, str):
        raise FilterError("filter condition needs an 'op' string", field_path)
    if op not in OPERATORS:
        raise FilterError(f"unknown filter operator {op!r}", field_path)
    if op not in ops:
        unadvertised.append(UnadvertisedOperator(f"filter operator {op!r} is not advertised",
                                                 op))
    if "value" not in node:
        raise FilterError("filter condition needs a 'value'", field_path)
    ftype = fields[name]
    value = node["value"]

    if op == "exists":
        if not isinstance(value, bool):
            raise FilterError("'exists' takes a boolean value", field_path)
        return Condition(name, op, value)
    if op in ("gt", "gte", "lt", "lte"):
        if ftype not in _ORDERED_TYPES and ftype != "any":
            raise FilterError(f"operator {op!r} does not apply to a {ftype} field", field_path)
        if ftype == "any" and not _is_number(value) and parse_date(value) is None:
            raise FilterError(f"operator {op!r} needs a number or date", field_path)
        return Condition(name, op, _scalar_for(ftype, value, field_path))
    if op in ("in", "nin"):
        if not isinstance(value, list):
            raise FilterError(f"operator {op!r} takes an array", field_path)
        return Condition(name, op, [_scalar_for(ftype, v, field_path) for v in value])
    if op == "contains":
        if ftype not in ("text", "keyword", "any"):
            raise FilterError(f"operator 'contains' does not apply to a {ftype} field", field_path)
        return Condition(name, op, _scalar_for(ftype, value, field_path))
    # eq / ne
    if isinstance(value, list | dict):
        raise FilterError(f"operator {op!r} takes a scalar", field_path)
    return Condition(name, op, _scalar_for(ftype, value, field_path))
