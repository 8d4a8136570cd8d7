"""§8 filter semantics as served (the engine and its binding, in memory), table-driven:
every operator on every field type, nested ``and``/``or``/``not``, and the exact ``-32602``
errors with ``data.field``.

Each case is checked against a reference evaluator over the same documents. Semantics the
engine documents: ``ne``/``nin`` are the negations of ``eq``/``in`` (a document without the
field matches them); on an array field ``eq``/``in`` match an element.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from engine_wire import MemoryEngine, make_data_dir

from rcpkit.protocol.filters import parse_date

DOCS: list[dict[str, Any]] = [
    {"id": "a", "meta": {"lang": "en", "tags": ["bees", "honey"], "year": 2019, "price": 1.5,
                         "published": True, "date": "2023-03-01",
                         "summary": "honey harvest notes"}},
    {"id": "b", "meta": {"lang": "sv", "tags": ["baking"], "year": 2020, "price": 2.5,
                         "published": False, "date": "2023-06-30T00:00:00Z",
                         "summary": "kanelbullar och bröd"}},
    {"id": "c", "meta": {"lang": "es", "tags": ["bees"], "year": 2021, "price": 3.0,
                         "published": True, "date": "2024-01-15",
                         "summary": "abejas y miel"}},
    {"id": "d", "meta": {"lang": "en", "tags": ["weather", "baking"], "year": 2022,
                         "price": 4.25, "published": False, "date": "2024-05-01T12:00:00Z",
                         "summary": "Honey-coloured clouds"}},
    {"id": "e", "meta": {"lang": "en", "year": 2020, "price": 0.5, "date": "2022-12-31"}},
    {"id": "f", "meta": {"tags": ["honey"], "published": True, "summary": "no language set"}},
]
FIELD_TYPES = {"lang": "keyword", "tags": "keyword", "year": "int", "price": "float",
               "published": "bool", "date": "date", "summary": "text"}


def _matches(meta: dict[str, Any], node: dict[str, Any]) -> bool:
    """The reference evaluator (see the module docstring)."""
    if "and" in node:
        return all(_matches(meta, child) for child in node["and"])
    if "or" in node:
        return any(_matches(meta, child) for child in node["or"])
    if "not" in node:
        return not _matches(meta, node["not"])
    field, op, value = node["field"], node["op"], node["value"]
    if op == "exists":
        return (field in meta) == value
    if field not in meta:
        return op in ("ne", "nin")
    present = meta[field]
    values = present if isinstance(present, list) else [present]
    if FIELD_TYPES[field] == "date":
        values = [parse_date(v) for v in values]
        value = [parse_date(v) for v in value] if isinstance(value, list) else parse_date(value)
    if op in ("eq", "ne"):
        return (value in values) == (op == "eq")
    if op in ("in", "nin"):
        return any(v in value for v in values) == (op == "in")
    if op == "contains":
        return value in present if isinstance(present, str) else value in values
    compare = {"gt": lambda a: a > value, "gte": lambda a: a >= value,
               "lt": lambda a: a < value, "lte": lambda a: a <= value}[op]
    return any(compare(v) for v in values)


def cond(field: str, op: str, value: Any) -> dict[str, Any]:
    return {"field": field, "op": op, "value": value}


CASES: list[dict[str, Any]] = [
    # keyword
    cond("lang", "eq", "en"), cond("lang", "ne", "en"), cond("lang", "in", ["en", "sv"]),
    cond("lang", "nin", ["en"]), cond("lang", "exists", True), cond("lang", "exists", False),
    cond("lang", "eq", "EN"),
    # keyword array
    cond("tags", "eq", "bees"), cond("tags", "contains", "honey"),
    cond("tags", "in", ["baking", "weather"]), cond("tags", "nin", ["bees"]),
    cond("tags", "ne", "honey"), cond("tags", "exists", False),
    # int
    cond("year", "eq", 2020), cond("year", "ne", 2020), cond("year", "gt", 2020),
    cond("year", "gte", 2020), cond("year", "lt", 2021), cond("year", "lte", 2021),
    cond("year", "in", [2019, 2022]), cond("year", "nin", [2019, 2020]),
    cond("year", "exists", True),
    # float
    cond("price", "gt", 2.5), cond("price", "gte", 2.5), cond("price", "lt", 1),
    cond("price", "lte", 3.0), cond("price", "eq", 1.5), cond("price", "in", [0.5, 4.25]),
    # bool
    cond("published", "eq", True), cond("published", "ne", True),
    cond("published", "eq", False), cond("published", "exists", False),
    # date: RFC 3339 strings and epoch-ms
    cond("date", "gt", "2023-06-30T00:00:00Z"), cond("date", "gte", "2023-06-30"),
    cond("date", "lt", "2023-01-01T00:00:00+01:00"), cond("date", "lte", 1704067200000),
    cond("date", "eq", "2024-01-15T00:00:00Z"), cond("date", "ne", 1704067200000 + 14 * 86400000),
    # text
    cond("summary", "contains", "honey"), cond("summary", "contains", "bröd"),
    cond("summary", "eq", "abejas y miel"), cond("summary", "exists", True),
    # combinators
    {"and": [cond("lang", "eq", "en"), cond("year", "gte", 2020)]},
    {"or": [cond("lang", "eq", "sv"), cond("tags", "contains", "weather")]},
    {"not": cond("published", "eq", True)},
    {"and": [{"or": [cond("lang", "in", ["en", "es"]), cond("lang", "exists", False)]},
             {"not": {"or": [cond("price", "gt", 4), cond("tags", "eq", "honey")]}}]},
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryEngine]:
    data = make_data_dir(tmp_path_factory.mktemp("filters") / "data")
    seed = MemoryEngine(data)
    seed.add([{"id": d["id"], "text": f"shared words about document {d['id']}",
               "meta": d["meta"]} for d in DOCS])
    seed.close()
    # Restarted: a session advertises the fields known when it was initialized (§13.2), so a
    # new one is needed to see the fields this corpus introduced.
    served = MemoryEngine(data)
    yield served
    served.close()


def test_advertised_fields_carry_their_types(engine: MemoryEngine) -> None:
    assert engine.info["capabilities"]["filter"]["fields"] == FIELD_TYPES


@pytest.mark.parametrize("node", CASES, ids=lambda node: str(node).replace(" ", ""))
def test_filter_matches_reference(engine: MemoryEngine, node: dict[str, Any]) -> None:
    expected = sorted(d["id"] for d in DOCS if _matches(d["meta"], node))
    found = engine.ids("shared words document", mode="dense", unit="document", filter=node)
    assert sorted(found) == expected


@pytest.mark.parametrize(("node", "field"), [
    (cond("nope", "eq", 1), "filter.nope"),
    (cond("lang", "gt", "en"), "filter.lang"),
    (cond("year", "eq", "2020"), "filter.year"),
    (cond("published", "in", [1]), "filter.published"),
    (cond("date", "gt", "not a date"), "filter.date"),
    ({"and": []}, "filter.and"),
    ({"or": [cond("lang", "eq", "en"), {"field": "year"}]}, "filter.year"),
])
def test_malformed_filters_are_invalid_params_with_field(engine: MemoryEngine, node: dict[str, Any],
                                                         field: str) -> None:
    """``data.field`` names the offending filter field (or combinator) under ``filter``."""
    error = engine.error("retrieve", {"query": "x", "k": 3, "filter": node})
    assert error["code"] == -32602
    assert error["data"]["field"] == field
