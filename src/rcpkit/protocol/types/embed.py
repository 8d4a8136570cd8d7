"""``embed`` (§7.3), ``embed/sparse`` (§7.4) and ``embed/multi`` (§7.5)."""

from __future__ import annotations

from typing import ClassVar

from .base import (
    FiniteFloat,
    Input,
    MessageStruct,
    NonNegativeInt,
    PositiveInt,
    WireStruct,
)

__all__ = [
    "EmbedParams",
    "EmbedResult",
    "MultiEmbedParams",
    "MultiEmbedResult",
    "SparseEmbedParams",
    "SparseEmbedResult",
    "SparseVector",
]


class EmbedParams(MessageStruct, frozen=True, kw_only=True):
    """§7.3 (``texts`` is a synonym of ``inputs``); ``encoding`` per §7.3.1.

    ``strict`` applies the §7.7 rule to an unadvertised ``encoding``.
    """

    synonyms: ClassVar[dict[str, str]] = {"texts": "inputs"}

    inputs: list[Input]
    kind: str | None = None
    encoding: str | None = None
    strict: bool = True


class EmbedResult(MessageStruct, frozen=True, kw_only=True):
    """§7.3: one vector per input; ``dimension`` required with a binary encoding."""

    vectors: list[list[float] | str]
    encoding: str | None = None
    dimension: PositiveInt | None = None


class SparseEmbedParams(MessageStruct, frozen=True, kw_only=True):
    """§7.4; accepts ``texts`` or ``inputs`` (peers use both)."""

    synonyms: ClassVar[dict[str, str]] = {"texts": "inputs"}

    inputs: list[Input]
    kind: str | None = None


class SparseVector(WireStruct, frozen=True, kw_only=True):
    indices: list[NonNegativeInt]
    values: list[FiniteFloat]

    def __post_init__(self) -> None:
        if len(self.indices) != len(self.values):
            raise ValueError("`indices` and `values` must have the same length")


class SparseEmbedResult(MessageStruct, frozen=True, kw_only=True):
    sparse: list[SparseVector]


class MultiEmbedParams(MessageStruct, frozen=True, kw_only=True):
    """§7.5; accepts ``texts`` or ``inputs``; ``encoding`` per §7.3.1."""

    synonyms: ClassVar[dict[str, str]] = {"texts": "inputs"}

    inputs: list[Input]
    kind: str | None = None
    encoding: str | None = None
    strict: bool = True


class MultiEmbedResult(MessageStruct, frozen=True, kw_only=True):
    """§7.5: one matrix per input; each row a list, or a base64 string (§7.3.1)."""

    matrices: list[list[list[float] | str]]
    dimension: PositiveInt | None = None
    encoding: str | None = None
