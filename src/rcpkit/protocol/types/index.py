"""``index/add`` (§7.10) and ``index/delete`` (§7.11)."""

from __future__ import annotations

from .base import (
    MessageStruct,
    NonNegativeInt,
)
from .common import IndexDocument

__all__ = ["IndexAddParams", "IndexAddResult", "IndexDeleteParams", "IndexDeleteResult"]


class IndexAddParams(MessageStruct, frozen=True, kw_only=True):
    """§7.10: ``chunk``/``contextual`` need ``index.chunking``/``index.contextual``."""

    documents: list[IndexDocument]
    chunk: bool = False
    contextual: bool = False


class IndexAddResult(MessageStruct, frozen=True, kw_only=True):
    ids: list[str]
    chunks: NonNegativeInt | None = None


class IndexDeleteParams(MessageStruct, frozen=True, kw_only=True):
    """§7.11."""

    ids: list[str]


class IndexDeleteResult(MessageStruct, frozen=True, kw_only=True):
    deleted: NonNegativeInt
