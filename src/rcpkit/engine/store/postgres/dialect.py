"""PostgreSQL's spelling of the shared SQL (:class:`~rcpkit.engine.store.sql.Dialect`),
with the §8 filter leaf over ``jsonb`` (bound parameters only, §15.4)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rcpkit.protocol.filters import Condition

from ..sql import Dialect

__all__ = ["DIALECT"]


def _condition(cond: Condition, known: Mapping[str, str], params: list[Any]) -> str:
    """A boolean SQL expression over ``d.filter_meta`` that is never NULL."""
    if cond.field not in known:
        # The validator only admits advertised fields; an unknown one matches nothing.
        return "false"
    field, op, value = cond.field, cond.op, cond.value
    if op == "exists":
        params.append(field)
        return "(d.filter_meta ? %s)" if value else "NOT (d.filter_meta ? %s)"
    if op in ("eq", "ne"):
        member = _contained(field, value, params)
        return member if op == "eq" else f"NOT {member}"
    if op in ("in", "nin"):
        member = f"({' OR '.join(_contained(field, v, params) for v in value)})" \
            if value else "false"
        return member if op == "in" else f"NOT {member}"
    if op == "contains":
        # Element membership for array values, case-sensitive substring for strings (§8).
        params.extend((field, field, json.dumps(value), field, value))
        return ("COALESCE(CASE jsonb_typeof(d.filter_meta -> %s) "
                "WHEN 'array' THEN (d.filter_meta -> %s) @> %s::jsonb "
                "ELSE strpos(d.filter_meta ->> %s, %s) > 0 END, false)")
    comparison = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[op]
    params.extend((field, field, value))
    return (f"COALESCE(CASE WHEN jsonb_typeof(d.filter_meta -> %s) = 'number' "
            f"THEN (d.filter_meta -> %s)::numeric {comparison} %s END, false)")


def _contained(field: str, value: Any, params: list[Any]) -> str:
    """``field`` equals the scalar ``value`` or is an array holding it (§8), written as
    containment of the whole ``filter_meta`` so that its GIN ``jsonb_path_ops`` index applies.
    Inside an object, containment matches a scalar only by jsonb equality (``7`` = ``7.0``,
    never ``"7"``) and an array only by element, hence one form for each shape."""
    params.extend((json.dumps({field: value}), json.dumps({field: [value]})))
    return "(d.filter_meta @> %s::jsonb OR d.filter_meta @> %s::jsonb)"


def _decoded(value: Any) -> Any:
    return value  # psycopg decodes jsonb and bigint[] itself


DIALECT = Dialect(placeholder="%s", true="true", greatest="GREATEST", index_hints=False,
                  list_parameters=True, encode_ids=list, decode_ids=list, load_json=_decoded,
                  condition=_condition)
