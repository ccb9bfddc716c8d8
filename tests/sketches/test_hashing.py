"""The shared hash: MurmurHash3_x64_128 (seed 9001) vectors, input types, missing values."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sketches import SketchTypeError, hash128, hashing
from sketches.hashing import _canonical_bytes, _murmur3_py, hash_scalar

# MurmurHash3_x64_128(data, seed=9001) as (first, second) little-endian 64-bit words, from the
# reference implementation (mmh3.hash64 with signed=False).
VECTORS: list[tuple[bytes, tuple[int, int]]] = [
    (b"", (2193432386669714361, 6960091888636423060)),
    (b"a", (17726747621663146543, 14204157431899926782)),
    (b"hello", (2429546677275050410, 14051253931401752306)),
    (b"x" * 15, (5217393119486778679, 2387180332419597109)),
    (b"y" * 16, (5670367570276014581, 14864966747920695012)),
    (b"z" * 17, (847895814932588262, 9267916164903461007)),
    ("héllo wörld, 33 bytes long!!!!".encode(), (10524272657187357043, 10846143533775321139)),
    (struct.pack("<q", 0), (4650249816222390219, 11131435645388517298)),
    (struct.pack("<q", 1), (811507182322053675, 16783237272830240613)),
    (struct.pack("<q", -1), (2087312376421901529, 7243929014912122502)),
]


def pairs(values: Any) -> list[tuple[int, int]]:
    batch = hash128(values)
    return list(zip(batch.h0.tolist(), batch.h1.tolist()))


@pytest.mark.parametrize(("data", "expected"), VECTORS)
def test_bytes_match_reference_vectors(data: bytes, expected: tuple[int, int]) -> None:
    assert pairs([data]) == [expected]
    assert pairs(data) == [expected]


def test_integers_hash_as_eight_little_endian_bytes() -> None:
    assert pairs([0, 1, -1]) == [VECTORS[7][1], VECTORS[8][1], VECTORS[9][1]]


def test_matches_mmh3_on_random_strings_and_ints() -> None:
    mmh3 = pytest.importorskip("mmh3")
    rng = np.random.default_rng(7)
    blobs = [rng.bytes(int(n)) for n in rng.integers(0, 80, 2_000)]
    assert pairs(blobs) == [mmh3.hash64(b, seed=9001, signed=False) for b in blobs]
    ints = rng.integers(-(2**63), 2**63 - 1, 2_000, dtype=np.int64)
    expected = [mmh3.hash64(struct.pack("<q", v), seed=9001, signed=False) for v in ints.tolist()]
    assert pairs(ints) == expected


def test_long_outlier_string_in_a_batch_of_short_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    values = ["a", "b" * 5_000, "c", "", "é" * 600]
    expected = [_murmur3_py(v.encode()) for v in values]
    assert pairs(values) == expected
    # Without mmh3, long strings go through the vectorised block loop too.
    monkeypatch.setattr(hashing, "_mmh3", None)
    assert pairs(values) == expected
    assert hash_scalar(values[1]) == expected[1]


def test_equal_python_values_hash_alike() -> None:
    assert pairs(1) == pairs(1.0) == pairs(True) == pairs(np.int8(1)) == pairs(np.float32(1.0))
    assert pairs(-0.0) == pairs(0)
    assert pairs("a") == pairs(b"a") == pairs(bytearray(b"a")) == pairs(memoryview(b"a"))
    assert pairs(2.5) == pairs([struct.unpack("<q", struct.pack("<d", 2.5))[0]])
    assert pairs(2.5) != pairs(2)
    assert pairs(float("inf")) != pairs(float("-inf"))


def test_missing_values_are_skipped_and_reported() -> None:
    batch = hash128(["a", None, "b", float("nan")])
    assert batch.size == 4
    assert batch.valid is not None and batch.valid.tolist() == [True, False, True, False]
    assert len(batch.h0) == 2
    assert hash128(None).size == 1 and len(hash128(None).h0) == 0
    assert hash128(None).scalar and hash128("x").scalar and not hash128(["x"]).scalar


def test_skip_empty_drops_empty_strings_and_bytes() -> None:
    batch = hash128(["", "a", b"", None], skip_empty=True)
    assert batch.valid is not None and batch.valid.tolist() == [False, True, False, False]
    assert len(hash128("", skip_empty=True).h0) == 0
    assert len(hash128(["", "a"]).h0) == 2


BATCHES: dict[str, Any] = {
    "list": [3, 1, 2],
    "tuple": (3, 1, 2),
    "generator": (v for v in [3, 1, 2]),
    "numpy int32": np.array([3, 1, 2], dtype=np.int32),
    "numpy uint8": np.array([3, 1, 2], dtype=np.uint8),
    "numpy float": np.array([3.0, 1.0, 2.0]),
    "numpy object": np.array([3, 1, 2], dtype=object),
    "pandas int": pd.Series([3, 1, 2]),
    "pandas Int64": pd.Series([3, 1, 2], dtype="Int64"),
    "pandas index": pd.Index([3, 1, 2]),
    "arrow int16": pa.array([3, 1, 2], type=pa.int16()),
    "arrow uint64": pa.array([3, 1, 2], type=pa.uint64()),
    "arrow double": pa.array([3.0, 1.0, 2.0]),
    "arrow chunked": pa.chunked_array([[3], [1, 2]]),
    "arrow dictionary": pa.array([3, 1, 2]).dictionary_encode(),
    "arrow sliced": pa.array([9, 3, 1, 2, 9]).slice(1, 3),
}


@pytest.mark.parametrize("name", list(BATCHES))
def test_integer_batches_of_every_container_agree(name: str) -> None:
    assert pairs(BATCHES[name]) == pairs([3, 1, 2])


STRING_BATCHES: dict[str, Any] = {
    "numpy unicode": np.array(["yé", "a", "bb"]),
    "numpy bytes": np.array(["yé".encode(), b"a", b"bb"]),
    "numpy object": np.array(["yé", "a", "bb"], dtype=object),
    "pandas object": pd.Series(["yé", "a", "bb"], dtype=object),
    "pandas str": pd.Series(["yé", "a", "bb"], dtype="string"),
    "pandas category": pd.Series(["yé", "a", "bb"], dtype="category"),
    "arrow string": pa.array(["yé", "a", "bb"]),
    "arrow large_string": pa.array(["yé", "a", "bb"], type=pa.large_string()),
    "arrow binary": pa.array(["yé".encode(), b"a", b"bb"]),
    "arrow string_view": pa.array(["yé", "a", "bb"], type=pa.string_view()),
    "arrow sliced": pa.array(["zz", "yé", "a", "bb", "zz"]).slice(1, 3),
    "arrow chunked": pa.chunked_array([["yé"], ["a", "bb"]]),
}


@pytest.mark.parametrize("name", list(STRING_BATCHES))
def test_string_batches_of_every_container_agree(name: str) -> None:
    assert pairs(STRING_BATCHES[name]) == pairs(["yé", "a", "bb"])


def test_ranges_and_sets() -> None:
    assert pairs(range(5, 0, -2)) == pairs([5, 3, 1])
    assert sorted(pairs({1, 2})) == sorted(pairs([1, 2]))


def test_fixed_size_binary_and_temporal_types() -> None:
    fixed = pa.array([b"ab", b"cd"], type=pa.binary(2))
    assert pairs(fixed) == pairs([b"ab", b"cd"])
    stamps = np.array(["2024-01-01T00:00:00", "NaT"], dtype="datetime64[ms]")
    batch = hash128(stamps)
    assert batch.valid is not None and batch.valid.tolist() == [True, False]
    assert pairs(stamps[:1]) == pairs([int(stamps[0].astype(np.int64))])
    arrow_ts = pa.array([1_000, None], type=pa.timestamp("ms"))
    assert pairs(arrow_ts) == pairs([1_000])
    assert pairs(pa.array([1, 2], type=pa.date32())) == pairs([1, 2])


def test_nullable_containers_mark_missing_values() -> None:
    for values in (
        pd.Series([1, None, 3], dtype="Int64"),
        pd.Series([1.0, np.nan, 3.0]),
        pa.array([1, None, 3]),
        pa.chunked_array([[1, None], [3]]),
        [1, None, 3],
        np.array([1, None, 3], dtype=object),
    ):
        batch = hash128(values)
        assert batch.valid is not None and batch.valid.tolist() == [True, False, True], values
        assert pairs(values) == pairs([1, 3])
    assert hash128(pa.nulls(3)).valid.tolist() == [False] * 3  # type: ignore[union-attr]


def test_mixed_type_lists_keep_input_order() -> None:
    mixed = [1, "a", None, 2.5, b"b", True, float("nan"), np.int64(7)]
    expected = [
        pairs(v)[0] for v in mixed if v is not None and not (isinstance(v, float) and math.isnan(v))
    ]
    assert pairs(mixed) == expected
    assert hash128(mixed).valid.tolist() == [  # type: ignore[union-attr]
        True,
        True,
        False,
        True,
        True,
        True,
        False,
        True,
    ]


def test_pandas_missing_markers_in_object_lists() -> None:
    batch = hash128([1, pd.NA, "a", pd.NaT, None])
    assert batch.valid is not None and batch.valid.tolist() == [True, False, True, False, False]


def test_uint64_values_above_int64_alias_their_bit_pattern() -> None:
    assert pairs([2**64 - 1]) == pairs([-1])
    assert pairs(np.array([2**64 - 1], dtype=np.uint64)) == pairs(-1)


def test_large_batch_crosses_chunk_boundaries() -> None:
    values = np.arange(50_000)
    batch = hash128(values)
    assert pairs(values[40_000:40_003]) == list(
        zip(batch.h0[40_000:40_003].tolist(), batch.h1[40_000:40_003].tolist())
    )


def test_unhashable_value_message() -> None:
    with pytest.raises(
        SketchTypeError,
        match=r"cannot hash dict value \{'a': 1\} at position 1: "
        r"sketches accept str, bytes, int, float, bool and None \(ignored\)",
    ):
        hash128(["x", {"a": 1}])


def test_unhashable_scalar_message() -> None:
    with pytest.raises(
        SketchTypeError,
        match=r"cannot hash object value <object object at .*: "
        r"expected a scalar \(str, bytes, int, float, bool, None\) or a batch",
    ):
        hash128(object())
    with pytest.raises(
        SketchTypeError, match=r"cannot hash dict value \{'k': 1\}: expected a scalar"
    ):
        hash128({"k": 1})


def test_too_large_integer_message() -> None:
    with pytest.raises(
        SketchTypeError,
        match=r"cannot hash integer 1267650600228229401496703205376: "
        r"it does not fit in 64 bits; hash str\(value\) instead",
    ):
        hash128([1, 2**100])
    with pytest.raises(SketchTypeError, match="it does not fit in 64 bits"):
        hash128(2**100)


def test_two_dimensional_array_message() -> None:
    with pytest.raises(
        SketchTypeError,
        match=r"cannot hash a 2-D array of shape \(2, 2\): pass a "
        r"1-D batch \(flatten it with \.ravel\(\) if every cell is an item\)",
    ):
        hash128(np.zeros((2, 2)))


def test_unsupported_dtype_messages() -> None:
    with pytest.raises(
        SketchTypeError,
        match=r"cannot hash numpy dtype complex128: expected "
        "integers, floats, bools, strings, bytes, datetimes or objects of those",
    ):
        hash128(np.array([1j]))
    with pytest.raises(
        SketchTypeError,
        match=r"cannot hash Arrow type list<item: int64>: expected "
        "integers, floats, bools, strings, binary, temporal values or a dictionary",
    ):
        hash128(pa.array([[1]]))


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.binary(max_size=40),
)


@settings(max_examples=60, deadline=None)
@given(scalars, st.booleans())
def test_single_value_path_matches_the_vectorised_hash(value: Any, skip_empty: bool) -> None:
    batch = hash128([value], skip_empty=skip_empty)
    expected = (int(batch.h0[0]), int(batch.h1[0])) if len(batch.h0) else None
    assert hash_scalar(value, skip_empty=skip_empty) == expected
    data = _canonical_bytes(value)
    if expected is not None and data is not None:
        assert _murmur3_py(data) == expected  # the pure-Python fallback when mmh3 is absent


def test_single_value_path_for_numpy_scalars_and_errors() -> None:
    for value in (
        np.int8(-3),
        np.uint64(2**64 - 1),
        np.float32(0.1),
        np.str_("é"),
        np.bytes_(b"z"),
    ):
        batch = hash128([value])
        assert hash_scalar(value) == (int(batch.h0[0]), int(batch.h1[0]))
    assert hash_scalar(np.datetime64("NaT")) is None
    assert hash_scalar(np.datetime64(5, "ms")) == hash_scalar(5)
    with pytest.raises(
        SketchTypeError,
        match="cannot hash integer 36893488147419103232: it does not fit in 64 bits",
    ):
        hash_scalar(2**65)
