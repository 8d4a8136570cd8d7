"""Notification params: cancel (§7.14), progress (§9) and log (§17.1)."""

from __future__ import annotations

from typing import Any

from .base import (
    FreeForm,
    Id,
    MessageStruct,
    UnitFloat,
)

__all__ = ["CancelParams", "LogParams", "ProgressParams"]


class CancelParams(MessageStruct, frozen=True, kw_only=True):
    """§7.14: ``id`` of the request to abandon."""

    id: Id
    reason: str | None = None


class ProgressParams(MessageStruct, frozen=True, kw_only=True):
    """§9: ``progressToken`` is echoed verbatim; ``partial`` stays free-form."""

    progress_token: Id
    progress: UnitFloat | None = None
    stage: str | None = None
    message: str | None = None
    partial: FreeForm | None = None


class LogParams(MessageStruct, frozen=True, kw_only=True):
    """§17.1."""

    level: str
    message: str
    logger: str | None = None
    data: Any = None
