"""Binary formats of all sketches: round trips, dispatch, and the errors for bad bytes."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable

import numpy as np
import pytest

import sketches
from sketches import (
    BloomFilter,
    CountMinSketch,
    HyperLogLog,
    ScalableBloomFilter,
    SketchError,
    SketchFormatError,
    SketchTypeError,
    TopK,
    from_bytes,
)
from sketches._base import Sketch


def filled(factory: Callable[[], Sketch]) -> Sketch:
    sketch = factory()
    sketch.update(["a", "b", 1, 2.5, b"c", None] * 3 + list(range(40)))  # type: ignore[attr-defined]
    return sketch


FACTORIES: dict[str, Callable[[], Sketch]] = {
    "hll sparse": lambda: HyperLogLog(p=10),
    "hll dense": lambda: HyperLogLog(p=4),
    "bloom": lambda: BloomFilter(capacity=50, error_rate=0.01),
    "scalable bloom": lambda: ScalableBloomFilter(initial_capacity=8, error_rate=0.01),
    "count-min": lambda: CountMinSketch(width=20, depth=3),
    "topk": lambda: TopK(capacity=8),
}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_round_trip_copy_pickle_and_dispatch(name: str) -> None:
    sketch = filled(FACTORIES[name])
    raw = sketch.to_bytes()
    assert raw[1] == 1  # format version
    assert type(sketch).from_bytes(raw) == sketch
    assert from_bytes(raw) == sketch and type(from_bytes(raw)) is type(sketch)
    assert from_bytes(bytearray(raw)) == sketch and from_bytes(memoryview(raw)) == sketch
    assert sketch.copy() == sketch and sketch.copy() is not sketch
    assert copy.deepcopy(sketch) == sketch and copy.copy(sketch) == sketch
    assert pickle.loads(pickle.dumps(sketch)) == sketch
    assert sketch != FACTORIES[name]()
    assert sketch != raw
    with pytest.raises(TypeError):
        hash(sketch)


@pytest.mark.parametrize("name", list(FACTORIES))
def test_every_truncation_is_a_format_error(name: str) -> None:
    raw = filled(FACTORIES[name]).to_bytes()
    cls = type(filled(FACTORIES[name]))
    step = max(1, len(raw) // 200)
    for cut in list(range(0, len(raw), step)) + [len(raw) - 1]:
        with pytest.raises(SketchFormatError):
            cls.from_bytes(raw[:cut])


def test_wrong_type_message() -> None:
    bloom = BloomFilter(capacity=10, error_rate=0.1).to_bytes()
    with pytest.raises(SketchFormatError) as err:
        HyperLogLog.from_bytes(bloom)
    assert str(err.value) == (
        "not a HyperLogLog serialisation: type byte is 0x42 (a BloomFilter), expected 0x48; "
        "load it with BloomFilter.from_bytes"
    )
    with pytest.raises(
        SketchFormatError,
        match=r"not a TopK serialisation: type byte is 0x00 "
        r"\(unknown\), expected 0x54$",
    ):
        TopK.from_bytes(b"\x00\x01rest")


def test_datasketches_bytes_given_to_from_bytes_message() -> None:
    hll = HyperLogLog(p=12)
    hll.update(range(10))
    with pytest.raises(
        SketchFormatError,
        match=r"not a HyperLogLog serialisation: type byte is 0x03 "
        r"\(unknown\), expected 0x48; the data looks like an Apache DataSketches HLL "
        r"image: use HyperLogLog\.from_datasketches",
    ):
        HyperLogLog.from_bytes(hll.to_datasketches())
    with pytest.raises(
        SketchFormatError,
        match="unknown sketch type byte 0x03: expected one of "
        r"0x42 \(BloomFilter\), 0x43 \(CountMinSketch\), 0x48 \(HyperLogLog\), 0x53 "
        r"\(ScalableBloomFilter\), 0x54 \(TopK\); the data looks like an Apache "
        "DataSketches HLL image",
    ):
        from_bytes(hll.to_datasketches())


def test_version_message() -> None:
    raw = bytearray(HyperLogLog(p=12).to_bytes())
    raw[1] = 9
    with pytest.raises(SketchFormatError) as err:
        HyperLogLog.from_bytes(bytes(raw))
    assert str(err.value) == (
        "unsupported HyperLogLog format version 9: this library reads version 1; upgrade the "
        "sketches package that reads it"
    )


def test_truncation_messages() -> None:
    with pytest.raises(SketchFormatError) as err:
        CountMinSketch.from_bytes(b"C")
    assert str(err.value) == (
        "truncated CountMinSketch data: got 1 byte(s), a serialisation starts with a 2-byte "
        "header (type, version)"
    )
    raw = CountMinSketch(width=4, depth=2).to_bytes()
    with pytest.raises(SketchFormatError) as err:
        CountMinSketch.from_bytes(raw[:-5])
    assert (
        str(err.value)
        == f"truncated CountMinSketch data: needs at least {len(raw)} bytes, got {len(raw) - 5}"
    )
    with pytest.raises(SketchFormatError) as err:
        from_bytes(b"")
    assert str(err.value) == "cannot read a sketch from empty data: got 0 bytes"


def test_trailing_bytes_message() -> None:
    raw = BloomFilter(capacity=10, error_rate=0.1).to_bytes()
    with pytest.raises(SketchFormatError) as err:
        BloomFilter.from_bytes(raw + b"xyz")
    assert str(err.value) == (
        f"corrupt BloomFilter data: 3 unexpected trailing byte(s) after {len(raw)} bytes of sketch"
    )


def test_error_hierarchy() -> None:
    assert issubclass(SketchError, ValueError)
    for name in ("IncompatibleSketchError", "SketchFormatError", "SketchTypeError"):
        assert issubclass(getattr(sketches, name), SketchError)
    assert issubclass(sketches.SketchTypeError, TypeError)


def test_public_names() -> None:
    assert sorted(sketches.__all__) == sorted(
        [
            "BloomFilter",
            "CountMinSketch",
            "HashedBatch",
            "HyperLogLog",
            "IncompatibleSketchError",
            "ScalableBloomFilter",
            "SketchError",
            "SketchFormatError",
            "SketchTypeError",
            "TopK",
            "from_bytes",
            "hash128",
            "hll_coupons",
        ]
    )
    for name in sketches.__all__:
        assert getattr(sketches, name) is not None


# --- corrupt payloads: each message a reader can meet --------------------------------------


def test_corrupt_bloom_and_scalable_messages() -> None:
    raw = bytearray(BloomFilter(capacity=10, error_rate=0.1).to_bytes())
    raw[2:10] = (0).to_bytes(8, "little")
    with pytest.raises(
        SketchFormatError, match=r"corrupt BloomFilter data: capacity=0, error_rate=0\.1$"
    ):
        BloomFilter.from_bytes(bytes(raw))
    sbf = ScalableBloomFilter(initial_capacity=8, error_rate=0.01)
    good = sbf.to_bytes()
    bad_growth = good[:2] + good[2:18] + bytes([1]) + good[19:]
    with pytest.raises(
        SketchFormatError,
        match="corrupt ScalableBloomFilter data: ScalableBloomFilter growth=1 is out of range",
    ):
        ScalableBloomFilter.from_bytes(bad_growth)
    no_filters = good[:27] + (0).to_bytes(4, "little")
    with pytest.raises(SketchFormatError, match="corrupt ScalableBloomFilter data: no filters"):
        ScalableBloomFilter.from_bytes(no_filters)
    other = BloomFilter(capacity=9, error_rate=0.002).to_bytes()  # same size as filter 0
    assert len(other) == len(sbf.filters[0].to_bytes())
    swapped = good[:39] + other
    with pytest.raises(
        SketchFormatError,
        match=r"corrupt ScalableBloomFilter data: filter 0 is "
        r"BloomFilter\(capacity=9, error_rate=0\.002\), expected "
        r"BloomFilter\(capacity=8, error_rate=0\.00199",
    ):
        ScalableBloomFilter.from_bytes(swapped)


def test_corrupt_topk_messages() -> None:
    topk = TopK(capacity=4)
    topk.update(["a", "b", "c"])
    raw = topk.to_bytes()
    with pytest.raises(
        SketchFormatError, match="corrupt TopK data: TopK capacity=0 is out of range"
    ):
        TopK.from_bytes(raw[:2] + (0).to_bytes(4, "little") + raw[6:])
    with pytest.raises(SketchFormatError, match="corrupt TopK data: 3 counters exceed capacity 2"):
        TopK.from_bytes(raw[:2] + (2).to_bytes(4, "little") + raw[6:])
    keys_at = 2 + 4 + 8 + 8 + 4
    keys = raw[keys_at : keys_at + 24]
    reversed_keys = keys[16:24] + keys[8:16] + keys[0:8]
    with pytest.raises(
        SketchFormatError, match="corrupt TopK data: counters are not sorted by key"
    ):
        TopK.from_bytes(raw[:keys_at] + reversed_keys + raw[keys_at + 24 :])
    items_at = keys_at + 24 + 24
    with pytest.raises(SketchFormatError, match="corrupt TopK data: unknown item tag 9"):
        TopK.from_bytes(raw[:items_at] + bytes([9]) + raw[items_at + 1 :])


def test_corrupt_datasketches_hll4_messages() -> None:
    head = bytes([10, 1, 7, 4, 0, 8, 0, 2])  # HLL mode, HLL_4, lgK=4, compact
    body = bytes(32)  # HIP, KxQ0, KxQ1, num at curMin = 0, aux count = 0
    nibbles = bytes([0x0F]) + bytes(7)  # slot 0 says "look in the aux map"
    with pytest.raises(
        SketchFormatError,
        match=r"corrupt DataSketches HLL image: 1 HLL_4 "
        r"exception slot\(s\) missing from the aux array",
    ):
        HyperLogLog.from_datasketches(head + body + nibbles)
    with pytest.raises(
        SketchFormatError, match="corrupt DataSketches HLL image: unknown target type 3"
    ):
        HyperLogLog.from_datasketches(head[:7] + bytes([(3 << 2) | 2]) + body + nibbles)
    with pytest.raises(SketchTypeError, match=r"cannot hash numpy scalar 1j"):
        HyperLogLog(p=4).update(np.complex128(1j))
