"""The per-principal limiter on a fake clock (§15.5), and what the legacy fixed tokens may do."""

from __future__ import annotations

from pathlib import Path

import pytest

from rcpkit.tenancy.access import Access, CollectionGate
from rcpkit.tenancy.keys import KeyStore
from rcpkit.tenancy.limits import CONCURRENCY_RETRY_S, Limiter, Limits, QuotaExceeded
from rcpkit.tenancy.scopes import Scopes
from support.clock import FakeClock


def test_token_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    clock = FakeClock(0.0)
    limiter = Limiter(clock, clock)
    limits = Limits(requests_per_second=4, burst=3)
    assert [limiter.admit("a", limits) for _ in range(3)] == [None, None, None]
    assert limiter.admit("a", limits) == pytest.approx(0.25)
    clock.advance(10.0)  # a long quiet spell refills to the burst, not beyond
    assert [limiter.admit("a", limits) is None for _ in range(4)] == [True, True, True, False]


def test_concurrency_counts_requests_in_flight_per_principal() -> None:
    limiter = Limiter(FakeClock(0.0))
    limits = Limits(concurrent=2)
    assert limiter.admit("a", limits) is None and limiter.admit("a", limits) is None
    assert limiter.admit("a", limits) == CONCURRENCY_RETRY_S
    assert limiter.admit("b", limits) is None
    limiter.release("a")
    assert limiter.admit("a", limits) is None


def test_write_quota_renews_at_the_utc_day_boundary() -> None:
    wall = FakeClock(86_400.0 * 3 + 86_000.0)
    limiter = Limiter(wall, wall)
    limits = Limits(write_bytes_per_day=100)
    assert limiter.charge_writes("a", limits, 60) is None
    assert limiter.charge_writes("a", limits, 60) == pytest.approx(400.0)
    with pytest.raises(QuotaExceeded):
        limiter.charge_writes("a", limits, 101)
    wall.advance(400.0)
    assert limiter.charge_writes("a", limits, 60) is None


def test_key_limits_override_the_root_defaults() -> None:
    defaults = Limits(requests_per_second=10, concurrent=4)
    assert Limits(concurrent=1).over(defaults) == Limits(requests_per_second=10, concurrent=1)
    with pytest.raises(ValueError, match="unknown limit 'rps'"):
        Limits.from_mapping({"rps": 1}, "rcpkit.toml [limits]")


def test_legacy_tokens_keep_every_scope_and_a_revoked_key_loses_its_slot_cleanly(
        tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    record, token = keys.create("alice", Scopes.parse(["docs"]), Limits(concurrent=1))
    access = Access(keys, auth_tokens=["legacy"])
    gate = CollectionGate(access, "docs")
    legacy = gate.admit({b"authorization": b"Bearer legacy"})
    assert legacy == "credential-0"
    assert access.visible(legacy, ["docs", "notes"]) == ["docs", "notes"]
    caller = gate.admit({b"authorization": f"Bearer {token}".encode()})
    assert caller == f"key-{record.key_id}"
    refused = gate.admit({b"authorization": f"Bearer {token}".encode()})
    assert isinstance(refused, tuple) and refused[0] == 429
    keys.revoke([record.key_id])
    gate.release(caller)  # after revocation, the in-flight slot is still given back
    assert access.limiter.admit("alice", Limits(concurrent=1)) is None
    assert access.principal(caller) is None


def test_an_unreadable_keys_file_fails_closed(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    _, token = keys.create("alice", Scopes.parse(["docs"]))
    gate = CollectionGate(Access(keys), "docs")
    assert gate.admit({b"authorization": f"Bearer {token}".encode()}) is not None
    keys.path.write_text("{not json")
    refused = gate.admit({b"authorization": f"Bearer {token}".encode()})
    assert isinstance(refused, tuple) and refused[0] == 401


def test_a_principal_at_its_concurrency_cap_is_told_no_sooner_than_its_next_token() -> None:
    clock = FakeClock(0.0)
    limiter = Limiter(clock, clock)
    limits = Limits(requests_per_second=0.25, burst=1, concurrent=1)
    assert limiter.admit("a", limits) is None
    # Both limits refuse: the advice is the later of the two (the token, 4 s away).
    assert limiter.admit("a", limits) == pytest.approx(4.0)
    limiter.release("a")
    clock.advance(3.5)
    assert limiter.admit("a", limits) == pytest.approx(0.5)
    clock.advance(0.5)
    assert limiter.admit("a", limits) is None
    assert limiter.admit("a", limits) == CONCURRENCY_RETRY_S * 4
