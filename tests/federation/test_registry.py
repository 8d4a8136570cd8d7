"""The ``rcp.json`` registry (§16.1): defaults, replicas, and clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rcpkit.federation import Registry, RegistryError, load_registry


def test_defaults_and_transports() -> None:
    registry = Registry.from_dict({"engines": [
        {"id": "docs", "transport": "stdio", "command": ["python3", "docs.py"],
         "env": {"A": "1"}, "cwd": "/tmp"},
        {"id": "web", "transport": "http", "url": "http://127.0.0.1:8000/rcp",
         "headers": {"Authorization": "Bearer t"}, "weight": 2.0, "required": True,
         "expose": True}]})
    docs, web = registry.engines
    assert (docs.id, docs.weight, docs.required, docs.expose) == ("docs", 1.0, False, False)
    assert docs.replicas[0].command == ("python3", "docs.py")
    assert docs.replicas[0].env == {"A": "1"} and docs.replicas[0].cwd == "/tmp"
    assert (web.weight, web.required, web.expose) == (2.0, True, True)
    assert web.replicas[0].endpoint() == {"transport": "http",
                                          "url": "http://127.0.0.1:8000/rcp"}
    assert docs.replicas[0].endpoint() == {"transport": "stdio",
                                           "command": ["python3", "docs.py"]}


def test_replicas_share_an_id_and_are_ordered_by_priority() -> None:
    registry = Registry.from_dict({"engines": [
        {"id": "web", "transport": "http", "url": "http://b/rcp", "priority": 2},
        {"id": "web", "transport": "http", "url": "http://a/rcp", "priority": 1}]})
    (web,) = registry.engines
    assert [replica.url for replica in web.replicas] == ["http://a/rcp", "http://b/rcp"]


@pytest.mark.parametrize(("document", "fragment"), [
    ({}, "engines"),
    ({"engines": []}, "no engine"),
    ({"engines": [{"id": "a", "transport": "ftp"}]}, "transport"),
    ({"engines": [{"id": "a", "transport": "stdio"}]}, "non-empty `command`"),
    ({"engines": [{"id": "a", "transport": "stdio", "command": []}]}, "non-empty `command`"),
    ({"engines": [{"id": "a", "transport": "http"}]}, "http(s) `url`"),
    ({"engines": [{"id": "a", "transport": "http", "url": "ftp://x"}]}, "http(s) `url`"),
    ({"engines": [{"id": "a", "transport": "http", "url": "http://x", "command": ["x"]}]},
     "stdio engines only"),
    ({"engines": [{"id": "a", "transport": "stdio", "command": ["x"], "url": "http://x"}]},
     "http engines only"),
    ({"engines": [{"id": "a", "transport": "http", "url": "http://x", "weight": -1}]},
     "`weight`"),
    ({"engines": [{"id": "a", "transport": "http", "url": "http://x", "wieght": 2}]},
     "wieght"),
    ({"engines": [{"id": "", "transport": "http", "url": "http://x"}]}, "`id`"),
    ({"engines": [{"id": "a", "transport": "http", "url": "http://x"},
                  {"id": "a", "transport": "http", "url": "http://y"}]}, "distinct priorities"),
    ({"engines": [{"id": "a", "transport": "http", "url": "http://x"},
                  {"id": "a", "transport": "http", "url": "http://y", "priority": 1,
                   "required": True}]}, "must agree"),
])
def test_invalid_registries(document: Any, fragment: str) -> None:
    with pytest.raises(RegistryError) as caught:
        Registry.from_dict(document)
    assert fragment in str(caught.value)


def test_load_from_file(tmp_path: Path) -> None:
    path = tmp_path / "rcp.json"
    path.write_text('{"engines": [{"id": "a", "transport": "http", "url": "http://x/rcp"}]}')
    assert load_registry(path).engines[0].id == "a"
    path.write_text("{not json")
    with pytest.raises(RegistryError, match="not valid JSON"):
        load_registry(path)
    with pytest.raises(RegistryError, match="cannot read"):
        load_registry(tmp_path / "missing.json")
