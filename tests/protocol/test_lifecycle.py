"""The §13 lifecycle and the §12 admission precedence."""

from __future__ import annotations

import pytest

from rcpkit.protocol.errors import (
    CapabilityMissing,
    InvalidParams,
    InvalidRequest,
    NotInitialized,
    UnknownMethod,
    VersionMismatch,
)
from rcpkit.protocol.lifecycle import Session, State

CAPS = {"retrieve": {"maxK": 10}, "x-acme": {}}
REGISTERED = {"retrieve", "embed", "x-acme/echo", "x-other/thing"}


def test_only_info_ping_shutdown_initialize_before_initialize() -> None:
    s = Session()
    for method in ("info", "ping", "shutdown", "initialize"):
        assert s.admit(method, CAPS, REGISTERED) is None
    for method in ("retrieve", "embed", "nonsense", "x-acme/echo"):
        assert isinstance(s.admit(method, CAPS, REGISTERED), NotInitialized)


def test_version_negotiation_failure_leaves_session_uninitialized() -> None:
    s = Session()
    with pytest.raises(VersionMismatch):
        s.initialize({"protocolVersion": 0}, CAPS)
    assert s.state is State.UNINITIALIZED
    assert isinstance(s.admit("retrieve", CAPS, REGISTERED), NotInitialized)
    assert s.initialize({"protocolVersion": 7}, CAPS) == 1  # min(client, server)
    assert s.ready and s.capabilities == CAPS


@pytest.mark.parametrize("params", [{}, {"protocolVersion": "1"}, {"protocolVersion": True},
                                    {"protocolVersion": 1.5}, None])
def test_malformed_initialize_is_invalid_params(params: object) -> None:
    with pytest.raises(InvalidParams) as err:
        Session().initialize(params, CAPS)
    assert err.value.data == {"field": "protocolVersion"}


def test_precedence_after_initialize() -> None:
    s = Session()
    s.initialize({"protocolVersion": 1}, CAPS)
    assert isinstance(s.admit("initialize", CAPS, REGISTERED), InvalidRequest)
    assert s.admit("retrieve", CAPS, REGISTERED) is None
    assert isinstance(s.admit("embed", CAPS, REGISTERED), CapabilityMissing)
    assert isinstance(s.admit("graph", CAPS, REGISTERED), CapabilityMissing)
    assert isinstance(s.admit("frobnicate", CAPS, REGISTERED), UnknownMethod)
    assert s.admit("x-acme/echo", CAPS, REGISTERED) is None
    assert isinstance(s.admit("x-other/thing", CAPS, REGISTERED), CapabilityMissing)
    assert isinstance(s.admit("x-acme/missing", CAPS, REGISTERED), UnknownMethod)


def test_log_opt_in_and_levels() -> None:
    s = Session()
    s.initialize({"protocolVersion": 1}, CAPS)
    assert not s.wants_log("error")
    s2 = Session()
    s2.initialize({"protocolVersion": 1, "_meta": {"logLevel": "warning"}}, CAPS)
    assert s2.wants_log("error") and s2.wants_log("warning") and not s2.wants_log("info")
    s3 = Session()
    s3.initialize({"protocolVersion": 1, "capabilities": {"log": {}}}, CAPS)
    assert s3.wants_log("info") and not s3.wants_log("debug")
