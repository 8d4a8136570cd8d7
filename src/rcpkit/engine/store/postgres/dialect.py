"""PostgreSQL's spelling of the shared SQL (:class:`~rcpkit.engine.store.sql.Dialect`),
with the §8 filter leaf over ``jsonb`` (bound parameters only, §15.4)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..sql import Dialect, FilterLeaves

__all__ = ["DIALECT"]


class _JsonbLeaves(FilterLeaves):
    """§8 tests over ``jsonb``, each never NULL."""

    def exists(self, field: str, params: list[Any]) -> str:
        params.append(field)
        return "(d.filter_meta ? %s)"

    def equals(self, field: str, value: Any, params: list[Any]) -> str:
        return _contained(field, value, params)

    def any_of(self, field: str, values: Sequence[Any], params: list[Any]) -> str:
        return f"({' OR '.join(_contained(field, v, params) for v in values)})"

    def contains(self, field: str, value: Any, params: list[Any]) -> str:
        params.extend((field, field, json.dumps(value), field, value))
        return ("COALESCE(CASE jsonb_typeof(d.filter_meta -> %s) "
                "WHEN 'array' THEN (d.filter_meta -> %s) @> %s::jsonb "
                "ELSE strpos(d.filter_meta ->> %s, %s) > 0 END, false)")

    def compare(self, field: str, operator: str, value: Any, params: list[Any]) -> str:
        params.extend((field, field, value))
        return (f"COALESCE(CASE WHEN jsonb_typeof(d.filter_meta -> %s) = 'number' "
                f"THEN (d.filter_meta -> %s)::numeric {operator} %s END, false)")


def _contained(field: str, value: Any, params: list[Any]) -> str:
    """``field`` equals the scalar ``value`` or is an array holding it (§8), written as
    containment of the whole ``filter_meta`` so that its GIN ``jsonb_path_ops`` index applies.
    Inside an object, containment matches a scalar only by jsonb equality (``7`` = ``7.0``,
    never ``"7"``) and an array only by element, hence one form for each shape."""
    params.extend((json.dumps({field: value}), json.dumps({field: [value]})))
    return "(d.filter_meta @> %s::jsonb OR d.filter_meta @> %s::jsonb)"


def _decoded(value: Any) -> Any:
    return value  # psycopg decodes jsonb and bigint[] itself


DIALECT = Dialect(placeholder="%s", true="true", false="false", greatest="GREATEST",
                  index_hints=False, list_parameters=True, encode_ids=list, decode_ids=list,
                  load_json=_decoded, leaves=_JsonbLeaves())
