"""Server-side chunking for ``index/add`` with ``chunk:true`` / ``contextual:true`` (§7.10).

A document is cut into *units* — Markdown ATX headings, sentences, and, for a sentence longer
than ``max_chars``, runs of whole words (a single word longer than ``max_chars`` is the only
thing ever cut mid-word). Chunks are consecutive units packed greedily up to ``max_chars``,
preferring to end at a paragraph or heading boundary when that keeps the chunk at least half
full, and never ending on a heading (a heading stays with the text it introduces). Consecutive
chunks share up to ``overlap_chars`` of whole trailing units, except across a heading. Offsets
are character offsets into the original document, so ``chunk.text == document[start:end]``
(the ``citation.start``/``end`` of a hit, §7.7).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Chunk", "chunk_text", "contextualize", "sentence_spans"]

_HEADING = re.compile(r" {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*")
_FENCE = re.compile(r" {0,3}(?:```|~~~)")
# A sentence ends at ., !, ? or … (plus closing quotes/brackets) when whitespace and a character
# that is not a lower-case ASCII letter follow ("e.g. this" does not end one), or at CJK stops.
_SENTENCE_END = re.compile(r"[.!?…]+['\"”’)\]]*(?=\s+[^\sa-z])|[。！？]+")
_NON_SPACE = re.compile(r"\S+")


@dataclass(frozen=True)
class Chunk:
    """A contiguous span ``text == document[start:end]`` and the heading path in effect there."""

    index: int
    start: int
    end: int
    text: str
    headings: tuple[str, ...]


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    opens_block: bool
    is_heading: bool
    headings: tuple[str, ...]


def chunk_text(
    text: str, *, max_chars: int = 1200, overlap_chars: int = 150, title: str | None = None
) -> list[Chunk]:
    """Split ``text`` into chunks of at most ``max_chars`` characters (§7.10 ``chunk:true``).

    A document that fits in ``max_chars`` yields one chunk; a blank document yields none.
    ``title`` is the document title: a top heading that merely repeats it is left out of
    ``headings`` so that :func:`contextualize` does not say it twice.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    if not 0 <= overlap_chars < max_chars:
        raise ValueError("overlap_chars must be in [0, max_chars)")
    units = _units(text, max_chars, title)
    chunks: list[Chunk] = []
    first = 0  # the first unit not yet covered by a chunk
    start = 0  # the first unit of the next chunk (< first when it overlaps the previous one)
    while first < len(units):
        last = _chunk_end(units, start, first, max_chars)
        begin, end = units[start].start, units[last].end
        chunks.append(Chunk(len(chunks), begin, end, text[begin:end], units[start].headings))
        first = last + 1
        start = _overlap_start(units, start, last, max_chars, overlap_chars)
    return chunks


def contextualize(chunk: Chunk, title: str | None) -> str:
    """Situating context for ``contextual:true`` (§7.10): ``"Title > Section > Sub"`` or ``""``."""
    parts = [title.strip()] if title and title.strip() else []
    parts.extend(chunk.headings)
    return " > ".join(parts)


def _chunk_end(units: list[_Unit], start: int, first: int, max_chars: int) -> int:
    """Index of the last unit of the chunk that begins at ``start`` and must cover ``first``."""
    origin = units[start].start
    last = first
    while last + 1 < len(units) and units[last + 1].end - origin <= max_chars:
        last += 1
    if last + 1 == len(units):
        return last
    for cut in range(last, first - 1, -1):
        if units[cut + 1].opens_block and units[cut].end - origin >= max_chars // 2:
            last = cut
            break
    while last > first and units[last].is_heading:
        last -= 1
    return last


def _overlap_start(
    units: list[_Unit], start: int, last: int, max_chars: int, overlap_chars: int
) -> int:
    """First unit of the chunk after ``units[start..last]``: the earliest trailing unit whose
    span to ``last`` fits in ``overlap_chars`` while the next unit still fits in the chunk."""
    following = last + 1
    if following >= len(units) or units[following].is_heading:
        return following
    for candidate in range(start + 1, following):
        origin = units[candidate].start
        if units[last].end - origin <= overlap_chars and units[following].end - origin <= max_chars:
            return candidate
    return following


def sentence_spans(text: str, *, max_chars: int = 1200) -> list[tuple[int, int]]:
    """``(start, end)`` of each heading, sentence (or word run of an overlong sentence) of
    ``text``, in order: the units chunks are packed from."""
    return [(unit.start, unit.end) for unit in _units(text, max_chars, None)]


def _units(text: str, max_chars: int, title: str | None) -> list[_Unit]:
    """Headings, sentences and word runs of ``text``, each at most ``max_chars`` long."""
    units: list[_Unit] = []
    repeated_title = title.strip().casefold() if title else None
    stack: list[tuple[int, str]] = []
    path: tuple[str, ...] = ()
    for start, end, level, heading in _blocks(text):
        if level:
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, heading))
            names = [name for _, name in stack]
            if names and names[0].casefold() == repeated_title:
                names = names[1:]
            path = tuple(names)
        for position, (piece_start, piece_end) in enumerate(_pieces(text, start, end, max_chars)):
            units.append(_Unit(piece_start, piece_end, position == 0, bool(level), path))
    return units


def _blocks(text: str) -> Iterator[tuple[int, int, int, str]]:
    """Paragraphs and ATX headings as ``(start, end, heading level or 0, heading text)``.

    Blank lines separate paragraphs; inside a fenced code block they do not, and ``#`` lines
    there are code, not headings.
    """
    paragraph: tuple[int, int] | None = None
    in_fence = False
    line_start = 0
    for line in text.split("\n"):
        content_start = line_start + len(line) - len(line.lstrip())
        content_end = line_start + len(line.rstrip())
        line_start += len(line) + 1
        heading = None if in_fence else _HEADING.fullmatch(line.rstrip())
        if heading is not None:
            if paragraph is not None:
                yield (*paragraph, 0, "")
                paragraph = None
            yield content_start, content_end, len(heading.group(1)), heading.group(2).strip()
            continue
        if _FENCE.match(line):
            in_fence = not in_fence
        if not line.strip() and not in_fence:
            if paragraph is not None:
                yield (*paragraph, 0, "")
                paragraph = None
            continue
        paragraph = (content_start if paragraph is None else paragraph[0], content_end)
    if paragraph is not None:
        yield (*paragraph, 0, "")


def _pieces(text: str, start: int, end: int, max_chars: int) -> Iterator[tuple[int, int]]:
    """Sentences of ``text[start:end]``; a sentence over ``max_chars`` becomes word runs."""
    for sentence_start, sentence_end in _sentences(text, start, end):
        if sentence_end - sentence_start <= max_chars:
            yield sentence_start, sentence_end
        else:
            yield from _word_runs(text, sentence_start, sentence_end, max_chars)


def _sentences(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    position = start
    for stop in _SENTENCE_END.finditer(text, start, end):
        if stop.end() > position:
            yield position, stop.end()
        following = _NON_SPACE.search(text, stop.end(), end)
        position = following.start() if following else end
    if position < end:
        yield position, end


def _word_runs(text: str, start: int, end: int, max_chars: int) -> Iterator[tuple[int, int]]:
    """Maximal runs of whole words of at most ``max_chars``; an overlong word is cut hard."""
    run: tuple[int, int] | None = None
    for word in _NON_SPACE.finditer(text, start, end):
        word_start, word_end = word.span()
        if word_end - word_start > max_chars:
            if run is not None:
                yield run
                run = None
            for cut in range(word_start, word_end, max_chars):
                yield cut, min(cut + max_chars, word_end)
        elif run is None:
            run = (word_start, word_end)
        elif word_end - run[0] > max_chars:
            yield run
            run = (word_start, word_end)
        else:
            run = (run[0], word_end)
    if run is not None:
        yield run
