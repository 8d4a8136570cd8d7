"""§12.2 retry policy: what is retried, how long to wait, which writes are safe."""

from __future__ import annotations

import pytest

from rcpkit.client.retry import RetryPolicy, is_retry_safe
from rcpkit.protocol.errors import (
    BackendUnavailable,
    Cancelled,
    Conflict,
    InternalError,
    InvalidParams,
    PayloadTooLarge,
    ProtocolViolation,
    RateLimited,
    Timeout,
    TransportClosed,
    Unauthorized,
)

POLICY = RetryPolicy(max_attempts=5, base_delay_s=0.1, max_delay_s=1.0)


@pytest.mark.parametrize("error", [RateLimited(), BackendUnavailable(), Timeout(),
                                   TransportClosed()])
def test_transient_errors_back_off_exponentially_with_jitter(error: Exception) -> None:
    for attempt, backoff in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8)]:
        delay = POLICY.delay_before_retry(error, attempt)  # type: ignore[arg-type]
        assert delay is not None and backoff / 2 <= delay <= backoff
    assert POLICY.delay_before_retry(error, 5) is None  # type: ignore[arg-type]


def test_backoff_is_capped() -> None:
    policy = RetryPolicy(max_attempts=20, base_delay_s=0.1, max_delay_s=1.0)
    delay = policy.delay_before_retry(RateLimited(), 15)
    assert delay is not None and delay <= 1.0


def test_server_hint_is_a_minimum() -> None:
    delay = POLICY.delay_before_retry(RateLimited(data={"retryAfterMs": 750}), 1)
    assert delay == 0.75


def test_internal_error_is_retried_once() -> None:
    assert POLICY.delay_before_retry(InternalError(), 1) is not None
    assert POLICY.delay_before_retry(InternalError(), 2) is None
    assert POLICY.delay_before_retry(ProtocolViolation(), 1) is None


@pytest.mark.parametrize("error", [InvalidParams(), Cancelled(), Unauthorized(),
                                   PayloadTooLarge(), Conflict()])
def test_final_errors_are_not_retried(error: Exception) -> None:
    assert POLICY.delay_before_retry(error, 1) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("method", "params", "safe"), [
    ("retrieve", {"query": "q"}, True),
    ("index/delete", {"ids": ["a"]}, True),
    ("index/add", {"documents": [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}]}, True),
    ("index/add", {"documents": [{"id": "a", "text": "x"}, {"text": "y"}]}, False),
    ("index/add", {"documents": [{"text": "x"}], "_meta": {"idempotencyKey": "k1"}}, True),
    ("memory/build", {"memoryId": "m"}, False),
    ("memory/build", {"documents": [{"id": "a", "text": "x"}]}, True),
    ("feedback", {"signals": [{"hitId": "a", "used": True}]}, False),
])
def test_writes_are_retry_safe_only_with_explicit_ids(method: str, params: dict[str, object],
                                                      safe: bool) -> None:
    assert is_retry_safe(method, params) is safe
