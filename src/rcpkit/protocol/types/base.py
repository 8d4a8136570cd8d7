"""Field types and the two base Structs every §7 wire object derives from.

Numbers follow §4.6: integers lie within ±(2^53 − 1), floats are finite. Option
*values* (``mode``, ``rerank.method``, ``unit``…) stay plain strings: whether one is
acceptable depends on what the server advertised, which is
:mod:`rcpkit.protocol.gating`'s job (``-32005``), not a structural error (``-32602``).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta, field

from ..codec import MAX_SAFE_INT
from ..content import ContentBlock

__all__ = [
    "FiniteFloat",
    "FreeForm",
    "Id",
    "Input",
    "Int53",
    "MessageStruct",
    "NonNegativeFloat",
    "NonNegativeInt",
    "PositiveFloat",
    "PositiveInt",
    "Query",
    "SignedUnitFloat",
    "UnitFloat",
    "WireStruct",
]

_MAX_FLOAT = 1.7976931348623157e308

Int53 = Annotated[int, Meta(ge=-MAX_SAFE_INT, le=MAX_SAFE_INT)]
PositiveInt = Annotated[int, Meta(ge=1, le=MAX_SAFE_INT)]
NonNegativeInt = Annotated[int, Meta(ge=0, le=MAX_SAFE_INT)]
FiniteFloat = Annotated[float, Meta(ge=-_MAX_FLOAT, le=_MAX_FLOAT)]
NonNegativeFloat = Annotated[float, Meta(ge=0.0, le=_MAX_FLOAT)]
PositiveFloat = Annotated[float, Meta(gt=0.0, le=_MAX_FLOAT)]
UnitFloat = Annotated[float, Meta(ge=0.0, le=1.0)]
SignedUnitFloat = Annotated[float, Meta(ge=-1.0, le=1.0)]

Id = str | Int53
Query = str | ContentBlock | list[ContentBlock]
Input = ContentBlock | str
FreeForm = dict[str, Any]


class WireStruct(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Base of every nested wire object: camelCase names, None/defaults omitted."""


class MessageStruct(WireStruct, frozen=True, kw_only=True):
    """Base of params and results: every one may carry ``_meta`` (§4.4)."""

    meta: FreeForm | None = field(name="_meta", default=None)
