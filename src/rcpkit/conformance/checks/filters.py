"""Metadata filter checks (§8): advertised fields, typed values, operators, combinators."""

from __future__ import annotations

from typing import Any

from rcpkit.conformance.checks.corpus import advertised_filter_fields
from rcpkit.conformance.checks.retrieve import expect_hits, probe_query
from rcpkit.conformance.model import Ctx, Level, check

L1 = Level.L1
REQ = ("retrieve", "filter")
SPEC_OPERATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "exists")
SAMPLE_VALUES: dict[str, Any] = {
    "keyword": "x-conformance-none",
    "text": "x-conformance-none",
    "int": 0,
    "float": 0.5,
    "bool": True,
}


def fields(ctx: Ctx) -> dict[str, str | None]:
    return advertised_filter_fields(ctx)


def operator_allowed(ctx: Ctx, op: str) -> bool:
    operators = (ctx.cap("filter") or {}).get("operators")
    return not isinstance(operators, list) or op in operators


def field_of_type(ctx: Ctx, *types: str) -> str:
    name = next((n for n, t in fields(ctx).items() if t in types), None)
    if name is None:
        raise ctx.skip(f"no advertised filter field of type {'/'.join(types)}")
    return name


def need_operator(ctx: Ctx, op: str) -> None:
    if not operator_allowed(ctx, op):
        raise ctx.skip(f"operator {op} not advertised")


def filtered(ctx: Ctx, node: dict[str, Any], *, query: str = "q") -> dict[str, Any]:
    return {"query": query, "k": 3, "filter": node}


def _register_rejection(
    name: str, title: str, build: Any, code: int | tuple[int, ...] = -32602
) -> None:
    @check(f"flt.{name}", L1, "8", title, requires=REQ)
    def rejected(ctx: Ctx) -> None:
        ctx.error("retrieve", filtered(ctx, build(ctx)), code)


def _unknown_field(ctx: Ctx) -> dict[str, Any]:
    need_operator(ctx, "eq")
    return {"field": "x-conformance-no-such-field", "op": "eq", "value": "a"}


def _undefined_operator(ctx: Ctx) -> dict[str, Any]:
    return {"field": next(iter(fields(ctx)), "x"), "op": "regex", "value": ".*"}


def _unadvertised_operator(ctx: Ctx) -> dict[str, Any]:
    op = next((o for o in SPEC_OPERATORS if not operator_allowed(ctx, o)), None)
    if op is None or not fields(ctx):
        raise ctx.skip("every operator is advertised")
    return {"field": next(iter(fields(ctx))), "op": op, "value": True if op == "exists" else "a"}


def _string_for_number(ctx: Ctx) -> dict[str, Any]:
    need_operator(ctx, "eq")
    return {"field": field_of_type(ctx, "int", "float"), "op": "eq", "value": "abc"}


def _number_for_keyword(ctx: Ctx) -> dict[str, Any]:
    need_operator(ctx, "eq")
    return {"field": field_of_type(ctx, "keyword"), "op": "eq", "value": {"a": 1}}


def _ordered_on_keyword(ctx: Ctx) -> dict[str, Any]:
    need_operator(ctx, "gt")
    return {"field": field_of_type(ctx, "keyword", "bool"), "op": "gt", "value": 3}


def _string_for_bool(ctx: Ctx) -> dict[str, Any]:
    need_operator(ctx, "eq")
    return {"field": field_of_type(ctx, "bool"), "op": "eq", "value": "true"}


def _in_scalar(ctx: Ctx) -> dict[str, Any]:
    need_operator(ctx, "in")
    return {"field": next(iter(fields(ctx)), "x"), "op": "in", "value": "a"}


def _exists_non_bool(ctx: Ctx) -> dict[str, Any]:
    need_operator(ctx, "exists")
    return {"field": next(iter(fields(ctx)), "x"), "op": "exists", "value": "yes"}


def _missing_op(ctx: Ctx) -> dict[str, Any]:
    return {"field": next(iter(fields(ctx)), "x"), "value": "a"}


for _name, _title, _build, _code in (
    ("unknown-field", "an unadvertised field yields -32602", _unknown_field, -32602),
    (
        "undefined-op",
        "an undefined operator is rejected (-32005/-32602)",
        _undefined_operator,
        (-32005, -32602),
    ),
    (
        "unadvertised-op",
        "an operator outside filter.operators yields -32005",
        _unadvertised_operator,
        -32005,
    ),
    (
        "string-for-number",
        "a string value for an int/float field yields -32602",
        _string_for_number,
        -32602,
    ),
    (
        "object-for-keyword",
        "an object value for a keyword field yields -32602",
        _number_for_keyword,
        -32602,
    ),
    ("ordered-on-keyword", "gt on a keyword/bool field yields -32602", _ordered_on_keyword, -32602),
    ("string-for-bool", 'a "true" string for a bool field yields -32602', _string_for_bool, -32602),
    ("in-scalar", "in with a scalar value yields -32602", _in_scalar, -32602),
    ("exists-non-bool", "exists with a non-boolean value yields -32602", _exists_non_bool, -32602),
    ("missing-op", "a condition without op yields -32602", _missing_op, -32602),
    ("empty-and", "an empty and array yields -32602", lambda ctx: {"and": []}, -32602),
    ("empty-or", "an empty or array yields -32602", lambda ctx: {"or": []}, -32602),
):
    _register_rejection(_name, _title, _build, _code)


def _valid_condition(ctx: Ctx) -> dict[str, Any]:
    """An ``eq`` condition on a typed field, with a value taken from a real hit if possible."""
    need_operator(ctx, "eq")
    typed = {n: t for n, t in fields(ctx).items() if t in SAMPLE_VALUES}
    if not typed:
        raise ctx.skip("no advertised keyword/text/int/float/bool filter field")
    hits = ctx.result("retrieve", {"query": probe_query(ctx), "k": 10}).get("hits", [])
    for hit in hits:
        meta = hit.get("meta") if isinstance(hit, dict) else None
        for name in typed:
            if isinstance(meta, dict) and isinstance(meta.get(name), str | int | float | bool):
                return {"field": name, "op": "eq", "value": meta[name]}
    name, kind = next(iter(typed.items()))
    assert kind is not None
    return {"field": name, "op": "eq", "value": SAMPLE_VALUES[kind]}


@check(
    "flt.eq-honoured", L1, "8", "an eq filter returns only hits whose meta matches", requires=REQ
)
def eq_honoured(ctx: Ctx) -> None:
    condition = _valid_condition(ctx)
    result = ctx.result("retrieve", filtered(ctx, condition, query=probe_query(ctx)))
    for hit in expect_hits(ctx, result, 3):
        meta = hit.get("meta")
        if isinstance(meta, dict) and condition["field"] in meta:
            ctx.expect(
                meta[condition["field"]] == condition["value"],
                f"meta.{condition['field']} == {condition['value']!r}",
                got=hit,
            )


@check("flt.combinators", L1, "8", "nested and/or/not filters are accepted", requires=REQ)
def combinators(ctx: Ctx) -> None:
    condition = _valid_condition(ctx)
    node = {"and": [condition, {"or": [condition, {"not": condition}]}]}
    expect_hits(ctx, ctx.result("retrieve", filtered(ctx, node, query=probe_query(ctx))), 3)
