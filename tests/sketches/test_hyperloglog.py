"""HyperLogLog: accuracy against exact sets, merge laws, serialisation and DataSketches bytes."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sketches import (
    BloomFilter,
    HyperLogLog,
    IncompatibleSketchError,
    SketchError,
    SketchFormatError,
)

SETTINGS = settings(max_examples=30, deadline=None)
items = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=12), st.binary(max_size=20))
streams = st.lists(items, max_size=120)


def within_three_standard_errors(hll: HyperLogLog, exact: int) -> bool:
    return abs(hll.estimate() - exact) <= 3 * hll.standard_error * exact


@pytest.mark.parametrize("n", [10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000])
def test_estimate_within_three_standard_errors(n: int) -> None:
    start = int(np.random.default_rng(n).integers(0, 2**40))
    hll = HyperLogLog(p=14)
    hll.update(np.arange(start, start + n))
    assert within_three_standard_errors(hll, n), (n, hll.estimate())


@pytest.mark.parametrize("p", [4, 8, 10, 12, 16])
def test_estimate_across_precisions_and_sparse_dense_switch(p: int) -> None:
    rng = np.random.default_rng(p)
    for n in (3, 2**p // 8, 2**p // 4, 2**p // 4 + 2**p // 16 + 1, 2**p, 8 * 2**p):
        values = rng.integers(0, 2**62, n)
        hll = HyperLogLog(p=p)
        hll.update(values)
        exact = len(np.unique(values))
        # Sparse while it holds at most 2**p / 4 distinct 26-bit addresses.
        assert hll.is_sparse == (n <= hll.sparse_limit)
        assert within_three_standard_errors(hll, exact), (p, n, hll.estimate())


def test_small_counts_are_nearly_exact_while_sparse() -> None:
    hll = HyperLogLog(p=14)
    hll.update([f"user-{i}" for i in range(3_000)])
    assert hll.is_sparse
    assert abs(hll.estimate() - 3_000) < 1


def test_duplicates_missing_and_empty_values_do_not_count() -> None:
    hll = HyperLogLog(p=10)
    hll.update(["a", "a", None, "", b"", float("nan"), "b"])
    hll.update("a")
    hll.update(None)
    assert round(hll.estimate()) == 2
    assert HyperLogLog(p=10).estimate() == 0.0


def test_one_and_one_point_zero_are_the_same_item() -> None:
    hll = HyperLogLog(p=10)
    hll.update([1, 1.0, True, np.int16(1)])
    assert round(hll.estimate()) == 1


@pytest.mark.data
def test_real_data_distinct_hosts_urls_and_words(
    nasa_log: dict[str, list[str]], headline_words: list[str]
) -> None:
    for values in (nasa_log["host"], nasa_log["url"], headline_words):
        exact = len({v for v in values if v})
        for p in (10, 12, 14):
            hll = HyperLogLog(p=p)
            hll.update(values)
            assert within_three_standard_errors(hll, exact), (p, exact, hll.estimate())


@pytest.mark.data
def test_real_data_partitions_merge_bit_identically(nasa_log: dict[str, list[str]]) -> None:
    hosts = nasa_log["host"]
    whole = HyperLogLog(p=12)
    whole.update(hosts)
    parts = [HyperLogLog(p=12) for _ in range(4)]
    for i, part in enumerate(parts):
        part.update(hosts[i::4])
    merged = parts[0].merge(parts[1]).merge(parts[2]).merge(parts[3])
    assert merged == whole
    assert merged.to_bytes() == whole.to_bytes()


@SETTINGS
@given(streams, streams, st.integers(4, 9))
def test_merge_of_partitions_equals_one_sketch_of_both(a: list, b: list, p: int) -> None:
    left, right, both = HyperLogLog(p), HyperLogLog(p), HyperLogLog(p)
    left.update(a)
    right.update(b)
    both.update(a + b)
    assert left.copy().merge(right).to_bytes() == both.to_bytes()
    assert right.copy().merge(left) == both


@SETTINGS
@given(streams, streams, streams, st.integers(4, 9))
def test_merge_is_associative_and_commutative(a: list, b: list, c: list, p: int) -> None:
    sa, sb, sc = HyperLogLog(p), HyperLogLog(p), HyperLogLog(p)
    sa.update(a)
    sb.update(b)
    sc.update(c)
    assert sa.copy().merge(sb).merge(sc) == sa.copy().merge(sb.copy().merge(sc))
    assert sa.copy().merge(sb) == sb.copy().merge(sa)


@SETTINGS
@given(streams, st.integers(4, 12), st.integers(1, 7))
def test_batches_one_at_a_time_or_in_chunks_agree(values: list, p: int, chunk: int) -> None:
    whole, single, chunked = HyperLogLog(p), HyperLogLog(p), HyperLogLog(p)
    whole.update(values)
    for v in values:
        single.update(v)
    for i in range(0, len(values), chunk):
        chunked.update(values[i : i + chunk])
    assert whole == single == chunked


@SETTINGS
@given(streams, st.integers(4, 12))
def test_serialisation_round_trips(values: list, p: int) -> None:
    hll = HyperLogLog(p)
    hll.update(values)
    back = HyperLogLog.from_bytes(hll.to_bytes())
    assert back == hll and back.to_bytes() == hll.to_bytes()
    assert back.estimate() == hll.estimate()
    assert HyperLogLog.from_datasketches(hll.to_datasketches()).estimate() == pytest.approx(
        hll.estimate(), rel=3 * hll.standard_error, abs=1
    )


def test_copy_is_independent_and_equal() -> None:
    hll = HyperLogLog(p=8)
    hll.update(range(100))
    twin = hll.copy()
    assert twin == hll
    twin.update(range(100, 10_000))
    assert twin != hll


def test_registers_and_memory() -> None:
    hll = HyperLogLog(p=12)
    assert hll.nbytes == 0 and hll.is_sparse
    hll.update(range(100_000))
    assert not hll.is_sparse and hll.nbytes == 4096
    regs = hll.registers()
    assert regs.shape == (4096,) and regs.max() <= 63
    assert "HyperLogLog(p=12) <dense, estimate=" in repr(hll)


def test_precision_out_of_range_message() -> None:
    for p in (3, 22, 14.0, "14", True):
        with pytest.raises(
            SketchError,
            match=r"HyperLogLog precision p=.* is out of range: expected "
            r"an integer from 4 to 21 \(2\*\*p registers; p=14 gives ~0\.8% error",
        ):
            HyperLogLog(p=p)  # type: ignore[arg-type]


def test_merge_with_different_precision_message() -> None:
    with pytest.raises(IncompatibleSketchError) as err:
        HyperLogLog(p=12).merge(HyperLogLog(p=14))
    assert str(err.value) == (
        "cannot merge HyperLogLog(p=12) with HyperLogLog(p=14): precisions differ; "
        "build both with the same p"
    )


def test_merge_with_another_sketch_type_message() -> None:
    with pytest.raises(IncompatibleSketchError) as err:
        HyperLogLog(p=12).merge(BloomFilter(capacity=10, error_rate=0.1))  # type: ignore[arg-type]
    assert str(err.value) == (
        "cannot merge HyperLogLog(p=12) with BloomFilter(capacity=10, error_rate=0.1): different "
        "sketch types; merge HyperLogLog sketches only with each other"
    )
    with pytest.raises(IncompatibleSketchError, match="cannot merge HyperLogLog.p=12. with set: "):
        HyperLogLog(p=12).merge(set())  # type: ignore[arg-type]


def test_corrupt_serialisation_messages() -> None:
    good = HyperLogLog(p=5)
    good.update(range(100))
    raw = good.to_bytes()
    with pytest.raises(
        SketchFormatError, match=r"corrupt HyperLogLog data: precision p=30 outside 4\.\.21"
    ):
        HyperLogLog.from_bytes(raw[:2] + bytes([30]) + raw[3:])
    with pytest.raises(
        SketchFormatError,
        match=r"corrupt HyperLogLog data: unknown mode byte 7 "
        r"\(0 sparse, 1 dense\)",
    ):
        HyperLogLog.from_bytes(raw[:3] + bytes([7]) + raw[4:])
    with pytest.raises(
        SketchFormatError, match="corrupt HyperLogLog data: a register exceeds the largest rank 63"
    ):
        HyperLogLog.from_bytes(raw[:-1] + bytes([64]))
    sparse = HyperLogLog(p=10)
    sparse.update([1, 2, 3])
    keys = sparse.to_bytes()[8:]
    swapped = keys[4:8] + keys[:4] + keys[8:]
    with pytest.raises(
        SketchFormatError,
        match="corrupt HyperLogLog data: sparse entries are not sorted by address",
    ):
        HyperLogLog.from_bytes(sparse.to_bytes()[:8] + swapped)
    too_many = sparse.to_bytes()[:4] + struct.pack("<I", 10_000)
    with pytest.raises(
        SketchFormatError,
        match="corrupt HyperLogLog data: 10000 sparse entries exceed the limit 256 for p=10",
    ):
        HyperLogLog.from_bytes(too_many)


def test_standard_error_property() -> None:
    assert HyperLogLog(p=14).standard_error == pytest.approx(1.04 / math.sqrt(2**14))


# --- Apache DataSketches format, checked against the datasketches package when installed ----


def test_datasketches_export_layout_dense() -> None:
    hll = HyperLogLog(p=10)
    hll.update(range(50_000))
    raw = hll.to_datasketches()
    assert len(raw) == 40 + 1024
    assert raw[:8] == bytes([10, 1, 7, 10, 0, 16, 0, 10])  # HLL mode, HLL_8, out-of-order
    hip, kxq0, kxq1, at_min, aux = struct.unpack_from("<dddii", raw, 8)
    regs = hll.registers().astype(np.int64)
    assert at_min == int((regs == 0).sum()) and aux == 0
    assert kxq0 + kxq1 == pytest.approx(float(np.ldexp(1.0, -regs).sum()))
    assert hip == pytest.approx(hll.estimate())
    assert raw[40:] == hll.registers().tobytes()


def test_datasketches_export_layout_sparse() -> None:
    empty = HyperLogLog(p=12).to_datasketches()
    assert empty == bytes([2, 1, 7, 12, 3, 12, 0, 8])
    hll = HyperLogLog(p=12)
    hll.update([0, 1, 2])
    # Coupons of 0, 1, 2: (rank << 26) | low 26 bits of h0, as DataSketches lists them.
    coupons = set(struct.unpack_from("<3I", hll.to_datasketches(), 8))
    assert coupons == {0x04C2D7CB, 0x06FBF22B, 0x0DF92F86}
    hll.update(range(300))
    raw = hll.to_datasketches()
    assert raw[:8] == bytes([3, 1, 7, 12, 9, 8, 0, 9])  # compact SET
    assert struct.unpack_from("<i", raw, 8)[0] == 300


def test_datasketches_package_reads_our_bytes_and_we_read_its() -> None:
    ds = pytest.importorskip("datasketches")
    for n in (0, 5, 200, 5_000, 200_000):
        ours = HyperLogLog(p=12)
        ours.update(range(n))
        theirs = ds.hll_sketch(12, ds.tgt_hll_type.HLL_8)
        for v in range(min(n, 20_000)):
            theirs.update(v)
        if n <= 20_000:
            # Same hash, same registers: identical once both are dense or both list coupons.
            back = HyperLogLog.from_datasketches(theirs.serialize_updatable())
            assert np.array_equal(back.registers(), ours.registers())
        read = ds.hll_sketch.deserialize(ours.to_datasketches())
        assert read.get_estimate() == pytest.approx(ours.estimate(), rel=0.05, abs=1)
    for tgt in (ds.tgt_hll_type.HLL_4, ds.tgt_hll_type.HLL_6, ds.tgt_hll_type.HLL_8):
        theirs = ds.hll_sketch(11, tgt)
        for v in range(30_000):
            theirs.update(f"item-{v}")
        ours = HyperLogLog(p=11)
        ours.update([f"item-{v}" for v in range(30_000)])
        for image in (theirs.serialize_compact(), theirs.serialize_updatable()):
            assert HyperLogLog.from_datasketches(image) == ours
    union = ds.hll_union(12)
    left, right = HyperLogLog(p=12), HyperLogLog(p=12)
    left.update(range(60_000))
    right.update(range(40_000, 100_000))
    union.update(ds.hll_sketch.deserialize(left.to_datasketches()))
    union.update(ds.hll_sketch.deserialize(right.to_datasketches()))
    assert union.get_estimate() == pytest.approx(100_000, rel=3 * left.standard_error)
    merged = HyperLogLog.from_datasketches(
        union.get_result(ds.tgt_hll_type.HLL_8).serialize_compact()
    )
    assert merged == left.copy().merge(right)


def test_datasketches_import_errors() -> None:
    with pytest.raises(
        SketchFormatError,
        match=r"truncated DataSketches HLL image: got 3 byte\(s\), "
        "the preamble alone is 8",
    ):
        HyperLogLog.from_datasketches(b"\x0a\x01\x07")
    with pytest.raises(
        SketchFormatError, match="not a DataSketches HLL image: family id is 3, expected 7"
    ):
        HyperLogLog.from_datasketches(bytes([3, 1, 3, 12, 0, 0, 0, 0]))
    with pytest.raises(
        SketchFormatError,
        match="family id is .*; this looks like one of our own sketches: use from_bytes",
    ):
        HyperLogLog.from_datasketches(HyperLogLog(p=12).to_bytes() + bytes(8))
    with pytest.raises(
        SketchFormatError, match="unsupported DataSketches HLL serialisation version 2: expected 1"
    ):
        HyperLogLog.from_datasketches(bytes([10, 2, 7, 12, 0, 0, 0, 10]))
    with pytest.raises(
        SketchFormatError, match=r"corrupt DataSketches HLL image: lgK=25 outside 4\.\.21"
    ):
        HyperLogLog.from_datasketches(bytes([10, 1, 7, 25, 0, 0, 0, 10]))
    with pytest.raises(
        SketchFormatError, match="corrupt DataSketches HLL image: mode 2 with 2 preamble ints"
    ):
        HyperLogLog.from_datasketches(bytes([2, 1, 7, 12, 0, 0, 0, 10]))
    dense = HyperLogLog(p=12)
    dense.update(range(10_000))
    with pytest.raises(
        SketchFormatError,
        match="truncated DataSketches HLL image: needs at least 4136 bytes, got 100",
    ):
        HyperLogLog.from_datasketches(dense.to_datasketches()[:100])
    sparse = HyperLogLog(p=12)
    sparse.update(range(5))
    with pytest.raises(
        SketchFormatError, match="truncated DataSketches HLL image: needs at least 28 bytes, got 20"
    ):
        HyperLogLog.from_datasketches(sparse.to_datasketches()[:20])
