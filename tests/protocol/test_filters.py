"""§8 filter validator: every operator × field type; refusals name the offending node and
set an unadvertised operator apart (the wire codes are tested in ``test_gating``)."""

from __future__ import annotations

import pytest

from rcpkit.protocol import filters as f

FIELDS = {"lang": "keyword", "body": "text", "year": "int", "price": "float",
          "draft": "bool", "published": "date"}

VALID = [
    ("lang", "eq", "en"), ("lang", "ne", "sv"), ("lang", "in", ["en", "sv"]),
    ("lang", "nin", ["de"]), ("lang", "contains", "en"), ("lang", "exists", True),
    ("body", "contains", "cat"), ("body", "eq", "x"),
    ("year", "eq", 2020), ("year", "gt", 2019), ("year", "gte", 2020.0), ("year", "lt", 3),
    ("year", "lte", 3), ("year", "in", [1, 2]), ("year", "exists", False),
    ("price", "gt", 1.5), ("price", "eq", 2), ("draft", "eq", True), ("draft", "ne", False),
    ("published", "gte", "2020-01-01T00:00:00Z"), ("published", "lt", 1577836800000),
]

INVALID = [
    ("lang", "gt", "a"), ("lang", "eq", 1), ("lang", "in", "en"), ("lang", "eq", ["en"]),
    ("body", "lt", "x"), ("year", "eq", "2020"), ("year", "eq", 1.5), ("year", "gt", True),
    ("year", "contains", 1), ("price", "eq", "1"), ("draft", "eq", 1), ("draft", "gt", True),
    ("published", "gte", "yesterday"), ("lang", "exists", "yes"), ("year", "in", [1, "2"]),
]


@pytest.mark.parametrize(("field", "op", "value"), VALID)
def test_valid_conditions(field: str, op: str, value: object) -> None:
    node = f.validate({"field": field, "op": op, "value": value}, FIELDS)
    assert isinstance(node, f.Condition) and node.field == field and node.op == op


@pytest.mark.parametrize(("field", "op", "value"), INVALID)
def test_type_mismatches_are_refused_with_field(field: str, op: str, value: object) -> None:
    with pytest.raises(f.FilterError) as err:
        f.validate({"field": field, "op": op, "value": value}, FIELDS)
    assert err.value.field == f"filter.{field}"
    assert not isinstance(err.value, f.UnadvertisedOperator)


def test_dates_are_normalised_to_epoch_ms() -> None:
    node = f.validate({"field": "published", "op": "gte", "value": "2020-01-01T00:00:00Z"}, FIELDS)
    assert node == f.Condition("published", "gte", 1577836800000)


def test_unadvertised_field_and_unadvertised_operator_are_told_apart() -> None:
    with pytest.raises(f.FilterError) as err:
        f.validate({"field": "secret", "op": "eq", "value": 1}, FIELDS)
    assert err.value.field == "filter.secret"
    assert not isinstance(err.value, f.UnadvertisedOperator)
    with pytest.raises(f.UnadvertisedOperator) as opt:
        f.validate({"field": "lang", "op": "ne", "value": "x"}, FIELDS, ["eq", "in"])
    assert opt.value.operator == "ne" and opt.value.field == "filter.op"


def test_filter_errors_carry_no_wire_code() -> None:
    assert issubclass(f.FilterError, ValueError)
    assert not hasattr(f.FilterError("x", "filter"), "code")


@pytest.mark.parametrize("node", [{"and": []}, {"or": []}, {"and": {}}, {"not": []}, [],
                                  {"and": [{"field": "lang"}]}, {"field": "lang", "op": "eq"},
                                  {"and": [], "or": []}, {"field": "lang", "op": "??", "value": 1}])
def test_malformed_trees(node: object) -> None:
    with pytest.raises(f.FilterError):
        f.validate(node, FIELDS)


def test_nested_combinators_and_builder_round_trip() -> None:
    tree = (f.eq("lang", "en") & (f.gte("year", 2020) | f.in_("lang", ["sv"]))) & ~f.exists("draft")
    wire = f.to_wire(tree)
    assert f.validate(wire, FIELDS) == tree
    assert wire["and"][0] == {"field": "lang", "op": "eq", "value": "en"}


def test_untyped_field_list_accepts_scalars() -> None:
    node = f.validate({"field": "tag", "op": "in", "value": ["a", 1]}, ["tag"])
    assert node == f.Condition("tag", "in", ["a", 1])


def test_depth_limit() -> None:
    node: dict = {"field": "lang", "op": "eq", "value": "en"}
    for _ in range(40):
        node = {"not": node}
    with pytest.raises(f.FilterError):
        f.validate(node, FIELDS)
