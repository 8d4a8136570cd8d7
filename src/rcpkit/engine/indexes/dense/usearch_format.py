"""usearch's serialisation of a dense index, read and written without usearch's help.

Pinned: written against usearch 2.26 and checked on files it writes
(``tests/engine/test_usearch_format.py``); ``pyproject.toml`` holds usearch to
``PINNED`` (the 2.x series from 2.26 on). A serialisation that names another major
version, or whose bytes do not add up to the layout below, is refused with
:class:`FormatError` naming what is wrong, never misread: the callers then keep the file
whole, or rebuild the graph from the record.

``Index.save()`` writes (little-endian throughout):

- a u32 row count and a u32 byte width, then every slot's vector codes (``rows × width``);
- the index head (``HEAD`` bytes): ``b"usearch"``, the u16 major, minor and patch version,
  the metric, scalar, key and slot kinds, then counts;
- the graph header, five u64: size, connectivity, base connectivity, max level, entry slot;
- one i16 level per node;
- the nodes, each a u64 key, its i16 level and, per level from 0 up, a u32 neighbour count
  plus a u32 slot per possible neighbour (``base`` on level 0, ``connectivity`` above).

A *lean* file (:func:`lean_pieces`, :func:`unlean`) is the same with the vector codes of most
slots left out (rcpkit recomputes them from its own float32 rows, :func:`vector_codes`):
the u32 row count and width, the u32 slots kept, their codes, then the index part verbatim.

This module is also the only place rcpkit imports usearch (:func:`load_usearch`).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from usearch.index import Index as Index  # the type, for the modules beside this one

__all__ = ["FREE_KEY", "PINNED", "FormatError", "Layout", "Links", "count_at", "lean_pieces",
           "links", "load_usearch", "parse", "unlean", "unlinked", "vector_codes"]

PINNED = "usearch>=2.26,<3"
"""The usearch versions this reader knows (``pyproject.toml`` requires the same)."""
MAJOR = 2
MAGIC = b"usearch"
MATRIX_HEAD = 8
HEAD = 64
GRAPH_HEAD = 40
FREE_KEY = np.iinfo(np.uint64).max
"""The key of a slot whose row was removed."""
LINK_ROWS = 65_536
"""Nodes whose neighbour lists are read at a time by :func:`links` (~70 MB of index)."""
_NO_ROWS = np.zeros(0, dtype=np.int64)


class FormatError(ValueError):
    """Bytes that are not a usearch serialisation this module can read; says why."""


def load_usearch() -> type[Index]:
    """Import usearch's ``Index``, loading onnxruntime first when it is installed.

    usearch's extension and onnxruntime's do not coexist if usearch is loaded first (the
    process segfaults when onnxruntime is imported afterwards; the reverse order is fine).
    If something else already imported usearch alone, fail loudly instead of crashing later.
    """
    if importlib.util.find_spec("onnxruntime") is not None:
        if "usearch.index" in sys.modules and "onnxruntime" not in sys.modules:
            raise RuntimeError("usearch was imported before onnxruntime; importing onnxruntime "
                               "now would crash the process (import this module first)")
        import onnxruntime  # noqa: F401
    from usearch.index import Index

    return Index


class Layout(NamedTuple):
    """Where things are in a serialisation (:func:`parse`)."""

    block: np.ndarray
    """``(rows, bytes per vector)``: every slot's vector."""
    index_part: np.ndarray
    """The bytes after the vectors (the index proper)."""
    keys: np.ndarray
    """Each slot's key (``FREE_KEY`` for a removed one)."""
    starts: np.ndarray
    """Each node's offset in the serialisation."""
    levels: np.ndarray
    connectivity: int
    base: int
    """Neighbours a node may have on level 0 (``connectivity`` on the others)."""
    entry: int
    """The slot every search starts from."""


def parse(serialised: np.ndarray) -> Layout:
    """The layout of ``serialised`` (uint8, as ``Index.save()`` returns or writes it);
    :class:`FormatError` when it is not a complete usearch 2 serialisation."""
    if len(serialised) < MATRIX_HEAD:
        raise FormatError(f"truncated: {len(serialised)} bytes, shorter than the row header")
    rows, width = (int(n) for n in serialised[:MATRIX_HEAD].view("<u4"))
    index_start = MATRIX_HEAD + rows * width
    header_end = index_start + HEAD + GRAPH_HEAD
    if len(serialised) < header_end + 2 * rows:
        raise FormatError(f"truncated: {len(serialised)} bytes, {rows} rows of {width} bytes "
                          f"and the index headers need at least {header_end + 2 * rows}")
    head = serialised[index_start:index_start + HEAD]
    if head[:len(MAGIC)].tobytes() != MAGIC:
        raise FormatError("not a usearch index (no usearch head after the vectors)")
    version = tuple(int(n) for n in head[len(MAGIC):len(MAGIC) + 6].view("<u2"))
    if version[0] != MAJOR:
        raise FormatError(f"written by usearch {'.'.join(map(str, version))}; this reader "
                          f"knows {PINNED}")
    if not rows:
        raise FormatError("an empty index has no graph to read")
    size, connectivity, base, max_level, entry = (
        int(n) for n in serialised[header_end - GRAPH_HEAD:header_end].view("<u8"))
    levels = serialised[header_end:header_end + 2 * rows].view("<i2").astype(np.int64)
    if size != rows or levels.min() < 0 or levels.max() > max_level:
        raise FormatError(f"damaged graph header: {size} nodes for {rows} rows, levels "
                          f"{levels.min()}..{levels.max()} of at most {max_level}")
    node_bytes = 8 + 2 + 4 + 4 * base + levels * (4 + 4 * connectivity)
    starts = header_end + 2 * rows + np.concatenate([[0], np.cumsum(node_bytes)[:-1]])
    end = int(starts[-1] + node_bytes[-1])
    if end != len(serialised):
        raise FormatError(f"{'truncated' if end > len(serialised) else 'trailing bytes'}: "
                          f"the nodes end at byte {end}, the data at {len(serialised)}")
    heads = serialised[starts[:, None] + np.arange(10)]
    if not np.array_equal(heads[:, 8:].copy().view("<i2").ravel(), levels):
        raise FormatError("damaged nodes: their levels differ from the level table")
    keys = heads[:, :8].copy().view("<u8").ravel()
    block = serialised[MATRIX_HEAD:index_start].reshape(rows, width)
    return Layout(block, serialised[index_start:], keys, starts, levels, connectivity, base,
                  entry)


class Links(NamedTuple):
    """One level's links: node ``nodes[i]`` points to ``neighbours[offsets[i]:offsets[i+1]]``."""

    nodes: np.ndarray
    offsets: np.ndarray
    neighbours: np.ndarray


def links(serialised: np.ndarray, layout: Layout) -> list[Links]:
    """Every level's neighbour lists (level 0 first), read ``LINK_ROWS`` nodes at a time."""
    levels = []
    for level in range(int(layout.levels.max()) + 1):
        nodes = np.flatnonzero(layout.levels >= level)
        width = layout.base if level == 0 else layout.connectivity
        counts, lists = [], []
        for start in range(0, len(nodes), LINK_ROWS):
            offsets = layout.starts[nodes[start:start + LINK_ROWS]] + count_at(layout, level)
            words = serialised[offsets[:, None] + np.arange(4 + 4 * width)].view("<u4")
            count = np.minimum(words[:, 0], width).astype(np.int64)
            counts.append(count)
            lists.append(words[:, 1:][np.arange(width) < count[:, None]].astype(np.int64))
        offsets = np.concatenate([[0], np.cumsum(np.concatenate(counts))])
        levels.append(Links(nodes, offsets, np.concatenate(lists)))
    return levels


def count_at(layout: Layout, level: int) -> int:
    """Offset, from a node's start, of its neighbour count on ``level``: a node is a u64 key,
    an i16 level, then per level from 0 up a u32 count and its neighbour slots (``base`` of
    them on level 0, ``connectivity`` above)."""
    if level == 0:
        return 10
    return 14 + 4 * layout.base + (level - 1) * (4 + 4 * layout.connectivity)


def unlinked(serialised: np.ndarray, layout: Layout) -> np.ndarray:
    """Mask of the slots holding a key that no path of links, on any level, leads to from the
    entry slot: what a search can never return, however wide. A breadth-first walk over
    :func:`links` (O(links))."""
    rows = len(layout.keys)
    steps = []
    for level in links(serialised, layout):
        row_of = np.full(rows, -1, dtype=np.int64)
        row_of[level.nodes] = np.arange(len(level.nodes))
        steps.append((row_of, level.offsets, level.neighbours))
    reached = np.zeros(rows, dtype=bool)
    frontier = np.array([layout.entry], dtype=np.int64) if layout.entry < rows else _NO_ROWS
    reached[frontier] = True
    while len(frontier):
        found = []
        for row_of, offsets, neighbours in steps:
            at = row_of[frontier]
            at = at[at >= 0]
            low, count = offsets[at], offsets[at + 1] - offsets[at]
            total = int(count.sum())
            if total:
                found.append(neighbours[np.repeat(low - np.cumsum(count) + count, count)
                                        + np.arange(total)])
        if not found:
            break
        step = np.concatenate(found)
        step = step[step < rows]
        frontier = np.unique(step[~reached[step]])
        reached[frontier] = True
    unreached: np.ndarray = ~reached & (layout.keys != FREE_KEY)
    return unreached


def vector_codes(vectors: np.ndarray, dtype: str) -> np.ndarray:
    """The bytes usearch 2 stores for float32 ``vectors`` in a graph of ``dtype``: f16 by
    IEEE round-to-nearest; bf16 as the upper half of the float32 bits, rounded to nearest
    even; i8 as ``trunc(x * 127 / |x|)`` in double precision, the squares summed one dimension
    after another as usearch does (``accumulate`` is sequential, where ``sum`` is pairwise),
    zero vectors as zeros."""
    codes: np.ndarray
    if dtype == "f16":
        codes = vectors.astype(np.float16).view(np.uint8)
        return codes
    if dtype == "bf16":
        bits = np.ascontiguousarray(vectors, dtype=np.float32).view("<u4")
        rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
        codes = rounded.astype("<u2").view(np.uint8)
        return codes
    wide = vectors.astype(np.float64)
    squares = np.multiply(wide, wide)
    magnitude = np.sqrt(np.add.accumulate(squares, axis=1, out=squares)[:, -1:])
    np.multiply(wide, 127.0, out=wide)
    np.divide(wide, magnitude, out=wide, where=magnitude > 0)
    wide[magnitude[:, 0] <= 0] = 0
    np.clip(wide, -127.0, 127.0, out=wide)
    codes = np.trunc(wide, out=wide).astype(np.int8).view(np.uint8)
    return codes


def lean_pieces(serialised: np.ndarray, layout: Layout, kept: np.ndarray) -> list[np.ndarray]:
    """The pieces of a lean file of ``serialised``, keeping the codes of the ``kept`` slots
    (ascending) only; written one after another, :func:`unlean` reads them back."""
    return [serialised[:MATRIX_HEAD], kept.astype("<u4"), layout.block[kept],
            layout.index_part]


def unlean(data: np.ndarray, kept_rows: int) -> tuple[np.ndarray, Layout, np.ndarray]:
    """A lean file of ``kept_rows`` kept slots back as a whole serialisation, its layout and
    the kept slots: their codes restored, every other slot's left for the caller to fill
    (``layout.block`` is a view into the serialisation); :class:`FormatError` when ``data``
    is not such a file."""
    if len(data) < MATRIX_HEAD:
        raise FormatError(f"truncated: {len(data)} bytes, shorter than the row header")
    rows, width = (int(n) for n in data[:MATRIX_HEAD].view("<u4"))
    kept_end = MATRIX_HEAD + kept_rows * 4
    index_start = kept_end + kept_rows * width
    if kept_rows > rows or len(data) < index_start:
        raise FormatError(f"truncated: {len(data)} bytes, {kept_rows} kept rows of {width} "
                          f"bytes need {index_start} before the index")
    block_end = MATRIX_HEAD + rows * width
    serialised = np.empty(block_end + len(data) - index_start, dtype=np.uint8)
    serialised[:MATRIX_HEAD] = data[:MATRIX_HEAD]
    serialised[block_end:] = data[index_start:]
    layout = parse(serialised)
    kept = data[MATRIX_HEAD:kept_end].view("<u4").astype(np.int64)
    if len(kept) and (kept.max() >= rows or np.any(np.diff(kept) <= 0)):
        raise FormatError("damaged lean file: its kept slots are not ascending slots")
    layout.block[kept] = data[kept_end:index_start].reshape(kept_rows, width)
    return serialised, layout, kept
