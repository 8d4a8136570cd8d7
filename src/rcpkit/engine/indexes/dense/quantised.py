"""An int8 first pass for exact dense search: it reads a quarter of the bytes and proves
which rows cannot reach the top k, so that only the others are scored exactly.

Each stored vector ``x`` is kept as int8 codes ``c`` with a scale ``s`` of its own
(``x̂ = s·c``, ``s = max|x| / 127``, rounded to nearest), and a query ``q`` likewise
(``q̂ = t·c_q``). numkong's packed int8 kernel (VNNI where the CPU has it) gives every
``c·c_q`` exactly as an int32, so the first-pass score ``a = s·t·(c·c_q)`` is ``x̂·q̂`` up to
two float roundings. By Cauchy–Schwarz

    |x·q − x̂·q̂| = |(x − x̂)·q + x̂·(q − q̂)| ≤ R·|q| + N·|q − q̂|

with ``R`` the largest ``|x − x̂|`` and ``N`` the largest ``|x̂|`` over the coded rows. With
``B`` that bound plus the rounding of the first pass and of the exact kernel, and ``A`` the
k-th largest first-pass score, k rows score at least ``A − B`` exactly; a row whose first
pass is below ``A − 2B`` scores below that, so it is neither in the top k nor tied with it
(§16.3). :func:`candidates` returns the rows at or above ``A − 2B``: the exact top k of the
coded rows is the exact top k of those.

On MiniLM vectors ``B`` is about 0.019 and a query keeps 21–22 rows of 10k or 50k for exact
scoring (at most ~70); the int8 scan of 10k × 384 takes ~0.08 ms warm where numpy's float32
product takes ~0.7 ms (``benchmarks/bench_exact_scan.py``, docs/benchmarks.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numkong import PackedMatrix

__all__ = ["Int8Codes", "candidates", "encode", "first_pass"]

_UNIT_ROUNDOFF = 2.0**-24
"""float32's unit roundoff: the exact kernel's and the first pass's rounding are bounded by
multiples of it."""
_CODE_MAX = 127.0
_ENCODE_ROWS = 2_048


@dataclass(frozen=True, slots=True)
class Int8Codes:
    """The int8 codes of the first ``rows`` vectors of a matrix, packed for numkong, with
    the constants that bound their error (see the module docstring)."""

    packed: PackedMatrix
    """numkong's packed layout of the codes (opaque)."""
    scales: np.ndarray
    """float32 ``s`` per row."""
    rows: int
    residual: float
    """``R``: the largest ``|x − x̂|``."""
    coded_norm: float
    """``N``: the largest ``|x̂|``."""
    norm: float
    """The largest ``|x|`` (for the exact kernel's rounding)."""
    dimension: int


def encode(vectors: np.ndarray) -> Int8Codes:
    """Codes for every row of a float32 ``(n, d)`` matrix, made ``_ENCODE_ROWS`` rows at a
    time so that the work stays in cache (~0.12 s for 100k × 384)."""
    import numkong

    matrix = np.asarray(vectors, dtype=np.float32)
    rows = len(matrix)
    codes = np.empty(matrix.shape, dtype=np.int8)
    scales = np.empty(rows, dtype=np.float32)
    residual = coded_norm = norm = 0.0
    for start in range(0, rows, _ENCODE_ROWS):
        block = matrix[start:start + _ENCODE_ROWS]
        peaks = np.abs(block).max(axis=1)
        scale = np.where(peaks > 0, peaks / np.float32(_CODE_MAX), np.float32(1))
        quotient = block / scale[:, None]
        np.rint(quotient, out=quotient)
        codes[start:start + _ENCODE_ROWS] = quotient
        scales[start:start + _ENCODE_ROWS] = scale
        decoded = np.multiply(quotient, scale[:, None], out=quotient)
        coded_norm = max(coded_norm, float(np.vecdot(decoded, decoded).max()))
        decoded -= block
        residual = max(residual, float(np.vecdot(decoded, decoded).max()))
        norm = max(norm, float(np.vecdot(block, block).max()))
    # Sums of d float32 squares are within d·u of their value, relatively: 1 + 2·d·u covers
    # them (and the square root halves it).
    slack = 1 + 2 * matrix.shape[1] * _UNIT_ROUNDOFF
    return Int8Codes(numkong.dots_pack(codes), scales, rows, math.sqrt(residual) * slack,
                     math.sqrt(coded_norm) * slack, math.sqrt(norm) * slack, matrix.shape[1])


def first_pass(codes: Int8Codes, query: np.ndarray) -> tuple[np.ndarray, float]:
    """float32 first-pass scores of the coded rows for ``query`` (a float32 ``(d,)``), and
    the bound ``B``: each row's exact score (as :func:`.exact.scores` computes it) is
    within ``B`` of its first-pass score."""
    import numkong

    wide = query.astype(np.float64)
    peak = float(np.abs(wide).max())
    step = peak / _CODE_MAX if peak > 0 else 1.0
    query_codes = np.rint(wide / step)
    query_error = float(np.sqrt(np.square(wide - query_codes * step).sum()))
    query_norm = float(np.sqrt(np.square(wide).sum()))
    dots = np.asarray(numkong.dots_packed(query_codes.astype(np.int8)[None, :],
                                          codes.packed))[0]
    first = dots.astype(np.float32)  # |c·c_q| ≤ d·127² < 2**24: converted exactly
    first *= codes.scales
    first *= np.float32(step)
    # The first pass rounds three times (relative u each); the exact kernel's dot product is
    # off by at most γ_d·|x|·|q| (d·u / (1 − d·u), recursive summation being the worst case).
    rounding = (4 * _UNIT_ROUNDOFF * codes.coded_norm * query_norm
                + 2 * codes.dimension * _UNIT_ROUNDOFF * codes.norm * query_norm)
    return first, codes.residual * query_norm + codes.coded_norm * query_error + rounding


def candidates(codes: Int8Codes, query: np.ndarray, keep: int,
               allowed: np.ndarray | None = None) -> np.ndarray:
    """Positions (ascending) among the coded rows that may be in the exact top ``keep`` of
    ``query`` (float32 ``(d,)``), over the rows ``allowed`` (a mask over the coded rows;
    None: all). Every row of that top ``keep``, and every row tied with its last, is among
    them."""
    rows = codes.rows
    if allowed is not None:
        keep = min(keep, int(np.count_nonzero(allowed)))
    if keep <= 0 or rows == 0:
        return np.zeros(0, dtype=np.int64)
    first, bound = first_pass(codes, query)
    # Only allowed scores are partitioned: introselect slows ~20x on a mask's many equal
    # placeholders (half the rows at -inf for a 50 % filter).
    eligible = first if allowed is None else first[allowed]
    if keep >= len(eligible):
        return np.arange(rows) if allowed is None else np.flatnonzero(allowed)
    kth = float(np.partition(eligible, len(eligible) - keep)[len(eligible) - keep])
    kept = first >= kth - 2 * bound
    if allowed is not None:
        kept &= allowed
    return np.flatnonzero(kept)
