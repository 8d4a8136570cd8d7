"""``initialize`` (§7.1), ``info`` (§7.2), ``ping`` (§7.15) and ``shutdown`` (§7.12)."""

from __future__ import annotations

from msgspec import field

from .base import (
    FiniteFloat,
    FreeForm,
    Int53,
    MessageStruct,
    PositiveInt,
)
from .common import PeerInfo

__all__ = [
    "InfoParams",
    "InitializeParams",
    "InitializeResult",
    "PingParams",
    "PingResult",
    "ShutdownParams",
    "ShutdownResult",
]


class InitializeParams(MessageStruct, frozen=True, kw_only=True):
    """§7.1. ``capabilities`` stays a wire dict; see :class:`Capabilities`."""

    protocol_version: PositiveInt
    client: PeerInfo | None = None
    capabilities: FreeForm = field(default_factory=dict)


class InitializeResult(MessageStruct, frozen=True, kw_only=True):
    """§7.1 result, also the ``info`` result (§7.2)."""

    protocol_version: PositiveInt
    server: PeerInfo
    capabilities: FreeForm


class InfoParams(MessageStruct, frozen=True, kw_only=True):
    """§7.2: no params."""


class PingParams(MessageStruct, frozen=True, kw_only=True):
    """§7.15: the server echoes ``nonce``."""

    nonce: str | Int53 | FiniteFloat | None = None


class PingResult(MessageStruct, frozen=True, kw_only=True):
    nonce: str | Int53 | FiniteFloat | None = None


class ShutdownParams(MessageStruct, frozen=True, kw_only=True):
    """§7.12: no params."""


class ShutdownResult(MessageStruct, frozen=True, kw_only=True):
    """§7.12: an empty result."""
