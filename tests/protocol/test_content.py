"""§4.8 Content blocks: normalisation rules, text/modality helpers, modality gating."""

from __future__ import annotations

from typing import Any

import pytest

from rcpkit.protocol.content import (
    ContentBlock,
    check_modalities,
    modality_of,
    normalize_content,
    text_of,
)
from rcpkit.protocol.errors import InvalidParams, OptionUnsupported

PNG = {"type": "image", "mimeType": "image/png", "data": "aGVsbG8="}
WAV = {"type": "audio", "mimeType": "audio/wav", "uri": "file:///clip.wav"}


def test_bare_string_is_a_text_block() -> None:
    assert normalize_content("héllo ✓", "query") == [ContentBlock(type="text", text="héllo ✓")]


def test_block_and_array_forms() -> None:
    block = ContentBlock(type="text", text="a")
    assert normalize_content(block, "query") == [block]
    blocks = normalize_content([{"type": "text", "text": "a"}, PNG], "query")
    assert [b.type for b in blocks] == ["text", "image"]
    assert blocks[1].mime_type == "image/png"


def test_null_members_are_absent_and_unknown_keys_ignored() -> None:
    [block] = normalize_content({"type": "image", "mimeType": "image/png", "data": "eA==",
                                 "uri": None, "x-acme": 1}, "query")
    assert block.uri is None and block.data == "eA=="


@pytest.mark.parametrize(("value", "field"), [
    ({"type": "text"}, "q"),
    ({"type": "image", "data": "eA=="}, "q"),
    ({"type": "image", "mimeType": "image/png"}, "q"),
    ({"type": "image", "mimeType": "image/png", "data": "eA==", "uri": "https://x/y.png"}, "q"),
    ({"type": "video", "mimeType": "video/mp4", "uri": "https://x"}, "q.type"),
    ({"text": "no type"}, "q.type"),
    ({"type": "text", "text": 3}, "q.text"),
    ([{"type": "text", "text": "ok"}, {"type": "blob", "uri": "file:///a"}], "q[1]"),
    ([["nested"]], "q[0]"),
    ([], "q"),
    (42, "q"),
    (None, "q"),
])
def test_malformed_content_names_the_path(value: Any, field: str) -> None:
    with pytest.raises(InvalidParams) as info:
        normalize_content(value, "q")
    assert info.value.data == {"field": field}


def test_text_of_joins_text_blocks_only() -> None:
    blocks = normalize_content([{"type": "text", "text": "a"}, PNG, {"type": "text", "text": "b"}],
                               "q")
    assert text_of(blocks) == "a\nb"
    assert text_of("plain") == "plain"


@pytest.mark.parametrize(("value", "modality"), [
    ("s", "text"),
    ([{"type": "text", "text": "a"}], "text"),
    ([PNG], "image"),
    ([WAV], "audio"),
    ([{"type": "blob", "mimeType": "image/jpeg", "uri": "file:///p.jpg"}], "image"),
    ([{"type": "blob", "mimeType": "application/pdf", "uri": "file:///p.pdf"}], "multimodal"),
    ([{"type": "text", "text": "a"}, PNG], "multimodal"),
])
def test_modality_of(value: Any, modality: str) -> None:
    assert modality_of(normalize_content(value, "q")) == modality


def test_check_modalities_defaults_to_text() -> None:
    check_modalities(normalize_content("a", "q"), None, "q")
    with pytest.raises(OptionUnsupported) as info:
        check_modalities(normalize_content([PNG], "q"), None, "q")
    assert info.value.code == -32005
    assert info.value.data is not None and info.value.data["param"] == "modality"
    assert info.value.data["option"] == "image"


def test_check_modalities_mixed_needs_multimodal() -> None:
    mixed = normalize_content([{"type": "text", "text": "a"}, PNG], "q")
    with pytest.raises(OptionUnsupported):
        check_modalities(mixed, ["text", "image"], "q")
    check_modalities(mixed, ["text", "image", "multimodal"], "q")


def test_code_modality_accepts_text_blocks() -> None:
    check_modalities(normalize_content("def f(): pass", "q"), ["code"], "q")
