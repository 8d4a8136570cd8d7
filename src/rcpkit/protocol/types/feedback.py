"""``feedback`` (§7.16)."""

from __future__ import annotations

from .base import (
    Id,
    MessageStruct,
    NonNegativeInt,
    SignedUnitFloat,
    WireStruct,
)

__all__ = ["FeedbackParams", "FeedbackResult", "FeedbackSignal"]


class FeedbackSignal(WireStruct, frozen=True, kw_only=True):
    hit_id: Id
    used: bool | None = None
    cited: bool | None = None
    helpful: bool | None = None
    reward: SignedUnitFloat | None = None
    poison_suspected: bool | None = None
    injection_suspected: bool | None = None


class FeedbackParams(MessageStruct, frozen=True, kw_only=True):
    """§7.16."""

    signals: list[FeedbackSignal]
    session_id: str | None = None
    query: str | None = None


class FeedbackResult(MessageStruct, frozen=True, kw_only=True):
    accepted: NonNegativeInt
