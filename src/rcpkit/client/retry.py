"""The §12.2 retry policy: which failures to retry, how long to wait, which writes are safe.

Retryable: ``-32011`` RateLimited, ``-32010`` BackendUnavailable (and a
transport failure while the connection can still carry requests), ``-32014``
Timeout; ``-32603`` InternalError once. Everything else is final. The wait is
exponential backoff with "equal jitter", never shorter than the server's
``retryAfterMs`` / ``Retry-After`` hint.

A write (``Method.writes``) is retried only when repeating it cannot fork the corpus
(§7.10, §13.1): ``index/delete`` is idempotent (§7.11); ``index/add`` and
``memory/build`` only when every document carries an explicit ``id``;
any write carrying ``_meta.idempotencyKey`` is safe; ``feedback`` otherwise is not.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol.errors import (
    BackendUnavailable,
    InternalError,
    RateLimited,
    RcpError,
    Timeout,
    TransportClosed,
)
from ..protocol.methods import METHODS

__all__ = ["NO_RETRY", "RetryPolicy", "is_retry_safe"]

_ALWAYS_RETRYABLE = (RateLimited, BackendUnavailable, Timeout, TransportClosed)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter (§12.2). ``max_attempts`` counts the first try."""

    max_attempts: int = 4
    base_delay_s: float = 0.1
    max_delay_s: float = 5.0

    def delay_before_retry(self, error: RcpError, attempt: int) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or None when ``error`` is final."""
        if attempt >= self.max_attempts or not _retryable(error, attempt):
            return None
        backoff = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        delay = backoff / 2 + random.uniform(0, backoff / 2)
        hint = error.retry_after_ms
        return max(delay, hint / 1000) if hint is not None else delay


NO_RETRY = RetryPolicy(max_attempts=1)


def _retryable(error: RcpError, attempt: int) -> bool:
    if isinstance(error, _ALWAYS_RETRYABLE):
        return True
    return isinstance(error, InternalError) and attempt == 1  # -32603: retry once


def is_retry_safe(method: str, params: Mapping[str, Any]) -> bool:
    """Whether repeating ``method(params)`` after an unknown outcome is harmless (§7.10)."""
    row = METHODS.get(method)
    if row is None or not row.writes or row.idempotent:
        return True
    meta = params.get("_meta")
    if isinstance(meta, Mapping) and meta.get("idempotencyKey"):
        return True
    documents = params.get("documents")
    return isinstance(documents, list) and bool(documents) and all(
        isinstance(document, Mapping) and document.get("id") is not None
        for document in documents)
