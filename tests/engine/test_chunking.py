"""Chunking for index/add ``chunk:true`` / ``contextual:true`` (§7.10)."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcpkit.engine.documents.chunking import Chunk, chunk_text, contextualize

GUIDE = """# Guide

Intro paragraph. It has two sentences!

## Permits

You need a permit for extensions. The municipality decides. e.g. this is not split.

### Fees

Fees vary. Ask the office.

```python
# a comment, not a heading
x = 1
```
"""


def assert_well_formed(chunks: list[Chunk], text: str, max_chars: int) -> None:
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert chunk.text == text[chunk.start : chunk.end]
        assert 0 < len(chunk.text) <= max_chars
        assert chunk.text == chunk.text.strip()
    for before, after in pairwise(chunks):
        assert before.start < after.start and before.end < after.end


def test_short_document_is_one_chunk() -> None:
    chunks = chunk_text(GUIDE)
    assert len(chunks) == 1
    assert chunks[0].text == GUIDE.strip()
    assert chunks[0].headings == ("Guide",)
    assert chunk_text("Just a line.") == [Chunk(0, 0, 12, "Just a line.", ())]


@pytest.mark.parametrize("text", ["", "   \n\n\t "])
def test_blank_document_has_no_chunks(text: str) -> None:
    assert chunk_text(text) == []


def test_paragraphs_sentences_and_headings() -> None:
    chunks = chunk_text(GUIDE, max_chars=80, overlap_chars=0)
    assert_well_formed(chunks, GUIDE, 80)
    assert [c.text for c in chunks] == [
        "# Guide\n\nIntro paragraph. It has two sentences!",
        "## Permits\n\nYou need a permit for extensions.",
        "The municipality decides. e.g. this is not split.",
        "### Fees\n\nFees vary. Ask the office.",
        "```python\n# a comment, not a heading\nx = 1\n```",
    ]
    assert [c.headings for c in chunks] == [
        ("Guide",),
        ("Guide", "Permits"),
        ("Guide", "Permits"),
        ("Guide", "Permits", "Fees"),
        ("Guide", "Permits", "Fees"),
    ]


def test_title_repeating_the_top_heading_is_not_repeated() -> None:
    chunks = chunk_text(GUIDE, max_chars=80, overlap_chars=0, title=" guide ")
    assert chunks[-1].headings == ("Permits", "Fees")
    assert contextualize(chunks[-1], "Guide") == "Guide > Permits > Fees"
    assert contextualize(chunks[0], "Guide") == "Guide"
    assert contextualize(chunks[0], None) == ""
    assert contextualize(Chunk(0, 0, 1, "x", ("A", "B")), "  ") == "A > B"


def test_overlap_carries_whole_trailing_sentences_within_a_section() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(12))
    chunks = chunk_text(text, max_chars=100, overlap_chars=60)
    assert_well_formed(chunks, text, 100)
    assert len(chunks) > 2
    for before, after in pairwise(chunks):
        assert after.start < before.end  # overlap
        assert before.end - after.start <= 60
        shared = text[after.start : before.end]
        assert re.fullmatch(
            r"Sentence number \d+ is here\.( Sentence number \d+ is here\.)*", shared
        )
    assert chunks[-1].end == len(text)


def test_no_overlap_across_a_heading() -> None:
    text = "Alpha beta gamma. Delta epsilon.\n\n## Next\n\nZeta eta theta. Iota kappa."
    chunks = chunk_text(text, max_chars=40, overlap_chars=30)
    heading_chunk = next(c for c in chunks if c.text.startswith("## Next"))
    assert heading_chunk.headings == ("Next",)
    assert chunks[heading_chunk.index - 1].end < heading_chunk.start


def test_long_sentences_split_between_words_and_giant_words_hard() -> None:
    text = "word " * 50 + "x" * 30
    text = text.strip()
    chunks = chunk_text(text, max_chars=25, overlap_chars=0)
    assert_well_formed(chunks, text, 25)
    assert all(c.text.startswith("word") or set(c.text) == {"x"} for c in chunks)
    assert all(not c.text.endswith("wor") for c in chunks)
    assert "".join(c.text for c in chunks if set(c.text) == {"x"}) == "x" * 30


def test_prefers_paragraph_boundaries() -> None:
    first = "One two three four five six seven. " * 2
    text = first.strip() + "\n\n" + "Eight nine ten eleven. " * 3
    chunks = chunk_text(text.strip(), max_chars=120, overlap_chars=0)
    assert chunks[0].text == first.strip()


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        chunk_text("x", max_chars=0)
    with pytest.raises(ValueError):
        chunk_text("x", max_chars=10, overlap_chars=10)


words = st.sampled_from(["alpha", "beta.", "Gamma", "delta!", "#", "## Head", "\n", "\n\n", "ω"])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(words, max_size=120).map(" ".join),
    st.integers(8, 200),
    st.integers(0, 100),
)
def test_chunks_are_exact_ordered_bounded_and_deterministic(
    text: str, max_chars: int, overlap: int
) -> None:
    overlap = min(overlap, max_chars - 1)
    chunks = chunk_text(text, max_chars=max_chars, overlap_chars=overlap)
    assert_well_formed(chunks, text, max_chars)
    assert chunks == chunk_text(text, max_chars=max_chars, overlap_chars=overlap)
    covered = "".join(
        text[max(c.start, chunks[i - 1].end if i else 0) : c.end] for i, c in enumerate(chunks)
    )
    assert re.sub(r"\s", "", covered) == re.sub(r"\s", "", text)
