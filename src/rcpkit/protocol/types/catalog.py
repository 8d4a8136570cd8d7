"""``catalog/list`` (§7.13)."""

from __future__ import annotations

from .base import (
    FreeForm,
    MessageStruct,
    WireStruct,
)
from .common import PeerInfo

__all__ = ["CatalogEngine", "CatalogListParams", "CatalogListResult", "Endpoint"]


class CatalogListParams(MessageStruct, frozen=True, kw_only=True):
    """§7.13: no params."""


class Endpoint(WireStruct, frozen=True, kw_only=True):
    transport: str
    url: str | None = None
    command: list[str] | None = None


class CatalogEngine(WireStruct, frozen=True, kw_only=True):
    id: str
    server: PeerInfo
    capabilities: FreeForm
    endpoint: Endpoint | None = None


class CatalogListResult(MessageStruct, frozen=True, kw_only=True):
    engines: list[CatalogEngine]
