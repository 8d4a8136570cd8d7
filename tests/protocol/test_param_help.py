"""The param sentences (:mod:`rcpkit.protocol.param_help`) cover every §7 request param and
name only params that exist, so a param added to the typed params without one fails here."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec import inspect

from rcpkit.protocol.methods import METHODS
from rcpkit.protocol.param_help import PARAM_HELP, param_help
from support.schema import load_schema, requires_schema


def _paths(kind: Any, prefix: str = "") -> set[str]:
    """Every wire path of a typed params struct, nested structs included."""
    info = kind if isinstance(kind, inspect.Type) else inspect.type_info(kind)
    if isinstance(info, inspect.UnionType):
        return set().union(*(_paths(member, prefix) for member in info.types))
    if not isinstance(info, inspect.StructType):
        return set()
    paths: set[str] = set()
    for member in info.fields:
        path = prefix + member.encode_name
        paths |= {path, *_paths(member.type, path + ".")}
    return paths


def test_the_table_has_one_entry_per_request_method() -> None:
    assert set(PARAM_HELP) == set(METHODS)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_top_level_param_is_described_and_every_key_exists(method: str) -> None:
    paths = _paths(METHODS[method].params)
    described = param_help(method)
    assert set(described) <= paths, set(described) - paths
    top_level = {path for path in paths if "." not in path}
    assert top_level <= set(described), top_level - set(described)
    assert all(text.strip() and text.endswith((".", ")")) for text in described.values())


def test_an_unknown_method_has_no_sentences() -> None:
    assert param_help("x-acme/search") == {}


@requires_schema
def test_every_param_the_schema_defines_has_a_sentence() -> None:
    """The normative schema (§7) names the params; ours describe each one it names (the
    schema describes none: that is why the sentences are ours). Methods whose params the
    schema does not define (``info``, ``shutdown``, the ``embed/*`` variants) are left to
    the test above."""
    defs = load_schema()["$defs"]
    missing = {}
    checked = 0
    for method, row in sorted(METHODS.items()):
        definition = defs.get(row.params.__name__)
        if definition is None:
            continue
        checked += 1
        synonyms = getattr(row.params, "synonyms", {})  # e.g. texts for inputs
        named = {synonyms.get(name, name) for name in definition.get("properties", {})}
        if not named <= set(param_help(method)):
            missing[method] = sorted(named - set(param_help(method)))
    assert checked >= 10  # the schema's $defs are still found by these names
    assert missing == {}
