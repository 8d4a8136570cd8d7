"""§7.3.1 vector codec: json / f32-base64, little-endian, strict blob lengths."""

from __future__ import annotations

import base64
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rcpkit.protocol.errors import InvalidParams, OptionUnsupported
from rcpkit.protocol.vectors import ENCODINGS, decode_vectors, encode_vectors

finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
batches = hnp.arrays(np.float32, hnp.array_shapes(min_dims=2, max_dims=2, min_side=1,
                                                   max_side=12), elements=finite32)


@settings(max_examples=60, deadline=None)
@given(batch=batches, encoding=st.sampled_from(ENCODINGS))
def test_round_trip_is_exact(batch: np.ndarray, encoding: str) -> None:
    wire = encode_vectors(batch, encoding)
    decoded = decode_vectors(wire, encoding, batch.shape[1])
    assert decoded.dtype == np.float32 and decoded.shape == batch.shape
    np.testing.assert_array_equal(decoded, batch)


def test_f32_base64_is_little_endian_with_padding() -> None:
    [blob] = encode_vectors([[1.0, -2.5]], "f32-base64")
    assert blob == base64.b64encode(struct.pack("<2f", 1.0, -2.5)).decode()
    assert blob.endswith("=")


def test_json_encoding_gives_plain_float_lists() -> None:
    assert encode_vectors(np.array([[0.5, 1.0]], dtype=np.float32), "json") == [[0.5, 1.0]]


def test_encoding_never_emits_non_finite() -> None:
    bad = [[float("nan"), float("inf"), -float("inf"), 1.0]]
    assert encode_vectors(bad, "json") == [[0.0, 0.0, 0.0, 1.0]]
    blob = encode_vectors(bad, "f32-base64")
    assert decode_vectors(blob, "f32-base64", 4).tolist() == [[0.0, 0.0, 0.0, 1.0]]


def test_empty_batch() -> None:
    assert encode_vectors([], "json") == []
    assert encode_vectors(np.zeros((0, 4), np.float32), "f32-base64") == []
    assert decode_vectors([], "f32-base64", 4).shape == (0, 4)


def test_unknown_encoding() -> None:
    with pytest.raises(OptionUnsupported):
        encode_vectors([[1.0]], "f16-base64")
    with pytest.raises(InvalidParams) as info:
        decode_vectors([[1.0]], "f16-base64", None)
    assert info.value.data == {"field": "encoding"}


one = base64.b64encode(struct.pack("<3f", 1, 2, 3)).decode()


@pytest.mark.parametrize(("items", "encoding", "dimension", "field"), [
    ([one, base64.b64encode(b"\0" * 8).decode()], "f32-base64", 3, "vectors[1]"),
    ([one], "f32-base64", 4, "vectors[0]"),
    ([base64.b64encode(b"\0" * 5).decode()], "f32-base64", None, "vectors[0]"),
    ([one, base64.b64encode(b"\0" * 8).decode()], "f32-base64", None, "vectors[1]"),
    (["not base64!"], "f32-base64", 3, "vectors[0]"),
    ([[1.0, 2.0]], "f32-base64", 2, "vectors[0]"),
    ([[1.0, 2.0], [1.0]], "json", None, "vectors[1]"),
    ([[1.0, "x"]], "json", None, "vectors[0][1]"),
    ([[True, 1.0]], "json", None, "vectors[0][0]"),
    ([[1.0, float("nan")]], "json", None, "vectors[0]"),
    ([[1.0], [float("inf")]], "json", 1, "vectors[1]"),
    ([[1.0, 2.0]], "json", 3, "vectors[0]"),
    ("nope", "json", None, "vectors"),
])
def test_malformed_vectors_are_invalid_params(items: object, encoding: str,
                                              dimension: int | None, field: str) -> None:
    with pytest.raises(InvalidParams) as info:
        decode_vectors(items, encoding, dimension)
    assert info.value.code == -32602
    assert info.value.data == {"field": field}


def test_field_prefix_is_configurable() -> None:
    with pytest.raises(InvalidParams) as info:
        decode_vectors(["???"], "f32-base64", 1, field="hits[2].vector")
    assert info.value.data == {"field": "hits[2].vector[0]"}
