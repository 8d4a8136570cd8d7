"""Per-collection ``read``/``write`` scopes of a principal (§15.3, §15.6).

A grant names a collection (or ``*``, every collection) and the actions allowed on it. The
two actions are independent: an ingesting feed may hold ``write`` without ``read``. Either
one makes the collection visible to the principal (``info``, ``catalog/list``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ..protocol.methods import WRITE_METHODS

__all__ = ["ACTIONS", "ANY_COLLECTION", "Action", "Scopes", "action_of"]

Action = Literal["read", "write"]
ACTIONS: tuple[Action, ...] = ("read", "write")
ANY_COLLECTION = "*"


def action_of(method: str) -> Action:
    """The scope a method needs: ``write`` for the methods that change what later callers
    see (§15.3)."""
    return "write" if method in WRITE_METHODS else "read"


@dataclass(frozen=True)
class Scopes:
    """collection (or ``*``) → the actions granted on it."""

    grants: Mapping[str, frozenset[Action]]

    @classmethod
    def parse(cls, specs: Iterable[str]) -> Scopes:
        """From ``COLLECTION[:ACTION[,ACTION]]`` strings (``docs:read,write``, ``*:read``);
        a bare collection grants ``read``. Raises ValueError naming a bad spec."""
        grants: dict[str, set[Action]] = {}
        for spec in specs:
            collection, _, actions = spec.partition(":")
            collection = collection.strip()
            if not collection:
                raise ValueError(f"scope {spec!r} names no collection")
            named = [a.strip() for a in actions.split(",")] if actions else ["read"]
            for action in named:
                if action not in ACTIONS:
                    raise ValueError(f"scope {spec!r}: {action!r} is neither read nor write")
                grants.setdefault(collection, set()).add(action)
        return cls({name: frozenset(actions) for name, actions in grants.items()})

    @classmethod
    def from_json(cls, value: Mapping[str, Iterable[str]]) -> Scopes:
        return cls.parse(f"{name}:{','.join(actions)}" for name, actions in value.items())

    def to_json(self) -> dict[str, list[str]]:
        return {name: sorted(actions) for name, actions in sorted(self.grants.items())}

    def allows(self, collection: str, action: Action) -> bool:
        return any(action in self.grants.get(name, ()) for name in (collection, ANY_COLLECTION))

    def sees(self, collection: str) -> bool:
        return any(self.allows(collection, action) for action in ACTIONS)

    def describe(self) -> str:
        return " ".join(f"{name}:{','.join(sorted(actions))}"
                        for name, actions in sorted(self.grants.items()))
