"""The §7.3.1 vector codec: ``json`` number arrays or ``f32-base64`` blobs.

``f32-base64`` is little-endian IEEE-754 binary32, one blob per vector, RFC 4648
base64 with padding. Encoding never emits a non-finite component (§4.6: NaN and
±Inf become the 0.0 sentinel); decoding rejects one, and rejects a blob whose
length is not ``dimension × 4`` bytes, with ``-32602``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from .errors import InvalidParams, OptionUnsupported

__all__ = ["ENCODINGS", "decode_vectors", "encode_vectors"]

ENCODINGS: tuple[str, ...] = ("json", "f32-base64")

_LITTLE_F32 = np.dtype("<f4")


def _as_matrix(vectors: np.ndarray | Sequence[Sequence[float]], dtype: np.dtype) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=dtype)
    if matrix.size == 0 and matrix.ndim < 2:
        matrix = matrix.reshape(0, 0)
    if matrix.ndim != 2:
        raise ValueError(f"expected a 2-D batch of vectors, got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        matrix = np.nan_to_num(matrix, nan=0.0, posinf=0.0, neginf=0.0)
    return matrix


def encode_vectors(vectors: np.ndarray | Sequence[Sequence[float]],
                   encoding: str) -> list[list[float]] | list[str]:
    """Encode a batch (n × d) for the wire under ``encoding`` (§7.3.1)."""
    if encoding == "json":
        rows: list[list[float]] = _as_matrix(vectors, np.dtype(np.float64)).tolist()
        return rows
    if encoding == "f32-base64":
        matrix = np.ascontiguousarray(_as_matrix(vectors, _LITTLE_F32))
        raw = matrix.tobytes()
        stride = matrix.shape[1] * 4
        if not stride:
            return ["" for _ in range(len(matrix))]
        return [base64.b64encode(raw[start:start + stride]).decode("ascii")
                for start in range(0, len(raw), stride)]
    raise OptionUnsupported(f"unknown vector encoding {encoding!r}", option="encoding",
                            value=encoding)


def decode_vectors(items: object, encoding: str, dimension: int | None, *,
                   field: str = "vectors") -> np.ndarray:
    """Decode wire vectors into a float32 ``(n, d)`` array (§7.3.1).

    ``dimension`` (when given) must match every vector; ``field`` names the
    params path reported in ``InvalidParams``.
    """
    if not isinstance(items, list):
        raise InvalidParams(f"{field} must be an array", field=field)
    if encoding == "json":
        matrix = _decode_json(items, field)
    elif encoding == "f32-base64":
        matrix = _decode_f32(items, dimension, field)
    else:
        raise InvalidParams(f"unknown vector encoding {encoding!r}", field="encoding")
    if not len(matrix):
        return np.zeros((0, dimension or 0), dtype=np.float32)
    if dimension is not None and matrix.shape[1] != dimension:
        raise InvalidParams(f"vectors have {matrix.shape[1]} components, expected {dimension}",
                            field=f"{field}[0]")
    if not np.isfinite(matrix).all():
        row = int(np.flatnonzero(~np.isfinite(matrix).all(axis=1))[0])
        raise InvalidParams("vector components must be finite", field=f"{field}[{row}]")
    return matrix


def _decode_json(items: list[Any], field: str) -> np.ndarray:
    try:
        rows = msgspec.convert(items, list[list[float]])
    except msgspec.ValidationError as exc:
        location = str(exc).rpartition("`$")[2].rstrip("`")
        raise InvalidParams("vectors must be arrays of numbers", field=field + location) from None
    if not rows:
        return np.zeros((0, 0), dtype=np.float32)
    width = len(rows[0])
    for index, row in enumerate(rows):
        if len(row) != width:
            raise InvalidParams("vectors must all have the same length",
                                field=f"{field}[{index}]")
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), width)


def _decode_f32(items: list[Any], dimension: int | None, field: str) -> np.ndarray:
    blobs: list[bytes] = []
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise InvalidParams("f32-base64 vectors must be strings", field=f"{field}[{index}]")
        try:
            blob = base64.b64decode(item, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidParams("invalid base64", field=f"{field}[{index}]") from None
        expected = dimension * 4 if dimension is not None else len(blobs[0]) if blobs else None
        if len(blob) % 4 or (expected is not None and len(blob) != expected):
            raise InvalidParams(f"blob of {len(blob)} bytes, expected "
                                f"{expected if expected is not None else 'a multiple of 4'}",
                                field=f"{field}[{index}]")
        blobs.append(blob)
    if not blobs:
        return np.zeros((0, 0), dtype=np.float32)
    flat = np.frombuffer(b"".join(blobs), dtype=_LITTLE_F32)
    return flat.reshape(len(blobs), len(blobs[0]) // 4).astype(np.float32)
