"""Content blocks and modalities (§4.8).

A Content block is the tagged union used wherever a query, a passage or a
document body travels. A bare string is exactly a ``text`` block. Block rules
(a text block carries ``text``; any other block carries ``mimeType`` and
exactly one of ``data``/``uri``) are checked when the block is built, so a
malformed block in params becomes ``-32602`` with the block's path.

A *modality* is the coarse kind of a block (``text``, ``image``, ``audio``,
``code``, ``multimodal``); servers advertise the modalities they accept per
capability, ``["text"]`` when unadvertised, and reject others with ``-32005``.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from .codec import convert
from .errors import InvalidParams, OptionUnsupported

__all__ = [
    "CONTENT_TYPES",
    "DEFAULT_MODALITIES",
    "MODALITIES",
    "ContentBlock",
    "accepted_modalities",
    "check_modalities",
    "modality_of",
    "normalize_content",
    "plain_text",
    "text_of",
]

CONTENT_TYPES: tuple[str, ...] = ("text", "image", "audio", "blob")
MODALITIES: tuple[str, ...] = ("text", "image", "audio", "code", "multimodal")
DEFAULT_MODALITIES: tuple[str, ...] = ("text",)

ContentType = Literal["text", "image", "audio", "blob"]


class ContentBlock(msgspec.Struct, frozen=True, kw_only=True, rename="camel",
                   omit_defaults=True):
    """One §4.8 block: ``{type, text?, mimeType?, data? | uri?}``."""

    type: ContentType
    text: str | None = None
    mime_type: str | None = None
    data: str | None = None
    uri: str | None = None

    def __post_init__(self) -> None:
        # msgspec turns a ValueError raised here into a ValidationError that
        # carries the block's path, hence -32602 with data.field.
        if self.type == "text":
            if self.text is None:
                raise ValueError("a text block needs `text`")
            return
        if self.mime_type is None:
            raise ValueError(f"an {self.type} block needs `mimeType`")
        if (self.data is None) == (self.uri is None):
            raise ValueError(f"an {self.type} block needs exactly one of `data` or `uri`")


def normalize_content(value: Any, path: str) -> list[ContentBlock]:
    """A string, a block (typed or wire dict) or an array of them → blocks (§4.8).

    Raises ``InvalidParams(field=path…)`` for anything else or a malformed block.
    """
    if isinstance(value, str):
        return [ContentBlock(type="text", text=value)]
    if isinstance(value, ContentBlock):
        return [value]
    if isinstance(value, dict):
        return [_block_from_wire(value, path)]
    if isinstance(value, list | tuple):
        if not value:
            raise InvalidParams("content must not be an empty array", field=path)
        blocks: list[ContentBlock] = []
        for index, item in enumerate(value):
            item_path = f"{path}[{index}]"
            if isinstance(item, list | tuple):
                raise InvalidParams("content arrays do not nest", field=item_path)
            blocks.extend(normalize_content(item, item_path))
        return blocks
    raise InvalidParams("content must be a string, a Content block or an array of blocks",
                        field=path)


def _block_from_wire(value: dict[str, Any], path: str) -> ContentBlock:
    return convert(value, ContentBlock, path=path)


def text_of(blocks: Sequence[ContentBlock] | str) -> str:
    """The text carried by ``blocks`` (text blocks joined by newlines)."""
    if isinstance(blocks, str):
        return blocks
    return "\n".join(block.text for block in blocks if block.text is not None
                     and block.type == "text")


def plain_text(value: str | ContentBlock | Sequence[ContentBlock], path: str) -> str:
    """The text a text-only consumer reads from ``value``: text blocks, and ``text/*`` blocks
    carrying base64 ``data`` (decoded as UTF-8), joined by newlines. A block given by
    ``uri`` is refused with ``-32602`` rather than silently read as nothing: content is
    never fetched on a client's behalf (§4.8; §15.5, an SSRF vector). So is a non-text
    block, should one get past modality gating."""
    if isinstance(value, str):
        return value
    blocks = [value] if isinstance(value, ContentBlock) else value
    single = isinstance(value, ContentBlock)
    parts: list[str] = []
    for index, block in enumerate(blocks):
        where = path if single else f"{path}[{index}]"
        if block.type == "text":
            parts.append(block.text or "")
        elif block.uri is not None:
            raise InvalidParams("content given by uri is not fetched by this server; send it "
                                "inline", field=f"{where}.uri")
        elif _block_modality(block) == "text":
            try:
                parts.append(base64.b64decode(block.data or "", validate=True).decode("utf-8"))
            except ValueError:
                raise InvalidParams("data must be base64 of UTF-8 text",
                                    field=f"{where}.data") from None
        else:
            raise InvalidParams(f"{_block_modality(block)} content cannot be read as text",
                                field=where)
    return "\n".join(parts)


def _block_modality(block: ContentBlock) -> str:
    if block.type in ("text", "image", "audio"):
        return block.type
    major = (block.mime_type or "").partition("/")[0]
    # A blob of an unrecognised media type fits no single modality.
    return major if major in ("text", "image", "audio") else "multimodal"


def modality_of(blocks: Sequence[ContentBlock] | str) -> str:
    """The §4.8 modality of a query/body: the shared block kind, or ``multimodal``."""
    if isinstance(blocks, str):
        return "text"
    kinds = {_block_modality(block) for block in blocks}
    if not kinds:
        return "text"
    return kinds.pop() if len(kinds) == 1 else "multimodal"


def accepted_modalities(advertised: Sequence[str] | None) -> frozenset[str]:
    """The modalities a capability accepts: ``["text"]`` when unadvertised (§4.8).

    ``code`` travels as text blocks, so advertising it also admits text.
    """
    accepted = set(DEFAULT_MODALITIES if advertised is None else advertised)
    if "code" in accepted:
        accepted.add("text")
    return frozenset(accepted)


def check_modalities(blocks: Sequence[ContentBlock], advertised: Sequence[str] | None,
                     path: str) -> None:
    """Raise ``OptionUnsupported`` for a block outside the advertised modalities (§4.8).

    ``advertised`` follows :func:`accepted_modalities`; mixing kinds needs
    ``multimodal``.
    """
    accepted = accepted_modalities(advertised)
    for index, block in enumerate(blocks):
        kind = _block_modality(block)
        if kind not in accepted:
            raise OptionUnsupported(f"{kind} content is not accepted here", option=kind,
                                    param="modality", field=f"{path}[{index}]")
    overall = modality_of(blocks)
    if overall == "multimodal" and "multimodal" not in accepted:
        raise OptionUnsupported("mixed-modality content is not accepted here",
                                option=overall, param="modality", field=path)
