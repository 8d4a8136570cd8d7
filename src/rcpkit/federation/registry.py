"""The static engine registry ``rcp.json`` (§16.1).

::

    {"engines": [
        {"id": "docs", "transport": "stdio", "command": ["python3", "docs.py"],
         "env": {"LANG": "C"}, "cwd": "/srv/docs"},
        {"id": "web", "transport": "http", "url": "http://127.0.0.1:8000/rcp",
         "headers": {"Authorization": "Bearer …"}, "weight": 2.0, "required": true,
         "expose": true},
        {"id": "web", "transport": "http", "url": "http://10.0.0.2:8000/rcp", "priority": 1}]}

``id`` labels an engine's hits (``meta.engine``). Several entries may share one ``id``:
they are replicas of one logical engine, tried in ascending ``priority`` (the primary
has the lowest) by the :class:`~rcpkit.federation.selector.Selector`; they must agree on
``weight``, ``required`` and ``expose``. ``weight`` (default 1.0, >= 0) scales the
engine in fusion (§16.3); ``required`` (default false) makes its failure fail the whole
query (§16.2); ``expose`` (default false) lets a gateway publish the engine's
``endpoint`` in ``catalog/list`` (§7.13). A bad registry raises :class:`RegistryError`
naming the offending entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

__all__ = ["EngineGroup", "EngineSpec", "Registry", "RegistryError", "load_registry"]


class RegistryError(ValueError):
    """The registry document is unreadable or invalid (the message names the entry)."""


class _Entry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One raw registry entry, as written in ``rcp.json``."""

    id: str
    transport: Literal["stdio", "http"]
    command: list[str] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    weight: float = 1.0
    required: bool = False
    priority: int = 0
    expose: bool = False


class _Document(msgspec.Struct, frozen=True, kw_only=True):
    engines: list[_Entry]


@dataclass(frozen=True)
class EngineSpec:
    """How to reach one engine replica (§16.1)."""

    id: str
    transport: Literal["stdio", "http"]
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0

    def endpoint(self) -> dict[str, Any]:
        """The §7.13 ``endpoint`` object a client may connect to directly."""
        if self.transport == "http":
            return {"transport": "http", "url": self.url}
        return {"transport": "stdio", "command": list(self.command)}


@dataclass(frozen=True)
class EngineGroup:
    """One logical engine: its replicas (primary first) and its federation settings."""

    id: str
    replicas: tuple[EngineSpec, ...]
    weight: float = 1.0
    required: bool = False
    expose: bool = False


@dataclass(frozen=True)
class Registry:
    """The validated registry: logical engines in document order."""

    engines: tuple[EngineGroup, ...]

    @classmethod
    def from_dict(cls, document: Any) -> Registry:
        """Validate a decoded ``rcp.json`` document."""
        try:
            parsed = msgspec.convert(document, _Document)
        except msgspec.ValidationError as exc:
            raise RegistryError(f"invalid registry: {exc}") from None
        groups: dict[str, list[tuple[int, _Entry]]] = {}
        for index, entry in enumerate(parsed.engines):
            _check_entry(index, entry)
            groups.setdefault(entry.id, []).append((index, entry))
        if not groups:
            raise RegistryError("invalid registry: `engines` lists no engine")
        return cls(tuple(_group(entries) for entries in groups.values()))


def load_registry(path: str | Path) -> Registry:
    """Read and validate a registry file."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise RegistryError(f"cannot read the registry {str(path)!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise RegistryError(f"the registry {str(path)!r} is not valid JSON: {exc}") from None
    return Registry.from_dict(document)


def _check_entry(index: int, entry: _Entry) -> None:
    where = f"engines[{index}] ({entry.id!r})"
    if not entry.id:
        raise RegistryError(f"engines[{index}]: `id` must not be empty")
    if entry.transport == "stdio":
        if not entry.command or not all(entry.command):
            raise RegistryError(f"{where}: a stdio engine needs a non-empty `command` list")
        if entry.url is not None or entry.headers is not None:
            raise RegistryError(f"{where}: `url`/`headers` apply to http engines only")
    else:
        if not entry.url or not entry.url.startswith(("http://", "https://")):
            raise RegistryError(f"{where}: an http engine needs an http(s) `url`")
        if entry.command is not None or entry.env is not None or entry.cwd is not None:
            raise RegistryError(f"{where}: `command`/`env`/`cwd` apply to stdio engines only")
    if not (entry.weight >= 0 and entry.weight != float("inf")):
        raise RegistryError(f"{where}: `weight` must be a finite number >= 0")


def _group(entries: list[tuple[int, _Entry]]) -> EngineGroup:
    """Replicas sharing an ``id`` (§16.1), ordered by priority."""
    first = entries[0][1]
    for index, entry in entries[1:]:
        settings = (entry.weight, entry.required, entry.expose)
        if settings != (first.weight, first.required, first.expose):
            raise RegistryError(f"engines[{index}] ({entry.id!r}): replicas of one engine must "
                                "agree on weight, required and expose")
    priorities = [entry.priority for _, entry in entries]
    if len(set(priorities)) != len(priorities):
        raise RegistryError(f"engine {first.id!r}: replicas need distinct priorities")
    replicas = tuple(
        EngineSpec(id=entry.id, transport=entry.transport, command=tuple(entry.command or ()),
                   env=dict(entry.env or {}), cwd=entry.cwd, url=entry.url,
                   headers=dict(entry.headers or {}), priority=entry.priority)
        for _, entry in sorted(entries, key=lambda item: item[1].priority))
    return EngineGroup(first.id, replicas, first.weight, first.required, first.expose)
