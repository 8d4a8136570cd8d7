"""The method table (:mod:`rcpkit.protocol.methods`) and what is derived from it agree with
the spec as the conformance suite reads it, which keeps its own list on purpose (§7, §14.5)."""

from __future__ import annotations

from rcpkit.client.retry import is_retry_safe
from rcpkit.conformance.model import GATED_METHODS
from rcpkit.protocol.methods import ALWAYS_ALLOWED, METHODS, WRITE_METHODS
from rcpkit.tenancy.scopes import action_of


def test_the_conformance_model_agrees_with_the_table() -> None:
    gated = {name: row.capability for name, row in METHODS.items() if row.capability}
    assert gated == GATED_METHODS
    assert set(METHODS) - set(GATED_METHODS) == ALWAYS_ALLOWED


def test_scopes_and_retries_read_the_writes_of_the_table() -> None:
    for name in METHODS:
        assert action_of(name) == ("write" if name in WRITE_METHODS else "read")
        # a write without ids or an idempotency key is retried only when idempotent (§13.1)
        assert is_retry_safe(name, {}) == (name not in WRITE_METHODS or METHODS[name].idempotent)
    assert {"index/add", "index/delete", "feedback", "memory/build"} == WRITE_METHODS
