"""Bloom filters: no false negatives, measured false-positive rates, merge laws, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sketches import (
    BloomFilter,
    IncompatibleSketchError,
    ScalableBloomFilter,
    SketchError,
    SketchFormatError,
)

SETTINGS = settings(max_examples=30, deadline=None)
items = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=12), st.binary(max_size=20))
streams = st.lists(items, max_size=120)


@pytest.mark.parametrize("error_rate", [0.1, 0.01, 0.001])
def test_false_positive_rate_at_capacity_within_one_and_a_half_times(error_rate: float) -> None:
    rng = np.random.default_rng(int(1 / error_rate))
    bloom = BloomFilter(capacity=100_000, error_rate=error_rate)
    inserted = rng.integers(0, 2**62, 100_000)
    bloom.update(inserted)
    assert bloom.contains(inserted).all()
    absent = rng.integers(2**62, 2**63 - 1, 300_000)
    measured = bloom.contains(absent).mean()
    assert error_rate / 1.5 <= measured <= error_rate * 1.5, measured
    assert bloom.false_positive_rate() == pytest.approx(error_rate, rel=0.5)
    assert bloom.cardinality() == pytest.approx(100_000, rel=0.02)


def test_small_batches_and_large_batches_set_the_same_bits() -> None:
    values = np.arange(20_000)
    one_go = BloomFilter(capacity=20_000, error_rate=0.01)
    one_go.update(values)  # large batch: scratch bitmap path
    pieces = BloomFilter(capacity=20_000, error_rate=0.01)
    for i in range(0, 20_000, 100):
        pieces.update(values[i : i + 100])  # small batches: scatter path
    assert one_go == pieces


@pytest.mark.data
def test_real_data_hosts_no_false_negatives_and_rate(nasa_log: dict[str, list[str]]) -> None:
    hosts = nasa_log["host"]
    first = set(hosts[: len(hosts) // 2])
    bloom = BloomFilter(capacity=len(first), error_rate=0.02)
    bloom.update(hosts[: len(hosts) // 2])
    assert bloom.contains(sorted(first)).all()
    queries = [f"{h}.absent" for h in nasa_log["url"]] + [h.upper() + "!" for h in hosts]
    fresh = sorted(set(queries) - first)
    assert bloom.contains(fresh).mean() <= 0.02 * 1.5


def test_contains_scalar_batch_and_missing() -> None:
    bloom = BloomFilter(capacity=100, error_rate=0.01)
    bloom.update(["a", 1, 2.5, b"raw", None])
    assert bloom.contains("a") is True
    assert bloom.contains(1.0) is True and bloom.contains(True) is True
    assert bloom.contains(None) is False
    got = bloom.contains(np.array(["a", "zzz"]))
    assert isinstance(got, np.ndarray) and got.dtype == bool and got.tolist() == [True, False]
    assert bloom.contains(["a", None, "zzz", b"raw"]).tolist() == [True, False, False, True]
    assert "a" in bloom and "zzz" not in bloom
    assert bloom.contains([]).tolist() == []


def test_sizing_follows_the_standard_formulas() -> None:
    bloom = BloomFilter(capacity=1_000_000, error_rate=0.01)
    assert bloom.num_bits == math.ceil(-1_000_000 * math.log(0.01) / math.log(2) ** 2)
    assert bloom.num_hashes == 7
    assert bloom.nbytes == (bloom.num_bits + 63) // 64 * 8


@SETTINGS
@given(streams, streams, st.integers(1, 200))
def test_merge_of_partitions_equals_one_filter_of_both(a: list, b: list, capacity: int) -> None:
    left, right, both = (BloomFilter(capacity, 0.05) for _ in range(3))
    left.update(a)
    right.update(b)
    both.update(a + b)
    assert left.copy().merge(right).to_bytes() == both.to_bytes()
    assert right.copy().merge(left) == both


@SETTINGS
@given(streams, streams, streams)
def test_merge_is_associative_and_commutative(a: list, b: list, c: list) -> None:
    sa, sb, sc = (BloomFilter(64, 0.01) for _ in range(3))
    sa.update(a)
    sb.update(b)
    sc.update(c)
    assert sa.copy().merge(sb).merge(sc) == sa.copy().merge(sb.copy().merge(sc))
    assert sa.copy().merge(sb) == sb.copy().merge(sa)


@SETTINGS
@given(streams, st.integers(1, 9))
def test_one_at_a_time_chunks_and_whole_batch_agree(values: list, chunk: int) -> None:
    whole, single, chunked = (BloomFilter(40, 0.01) for _ in range(3))
    whole.update(values)
    for v in values:
        single.update(v)
    for i in range(0, len(values), chunk):
        chunked.update(values[i : i + chunk])
    assert whole == single == chunked
    if values:
        assert whole.contains(values).all()


@SETTINGS
@given(streams)
def test_serialisation_round_trips(values: list) -> None:
    bloom = BloomFilter(100, 0.01)
    bloom.update(values)
    assert BloomFilter.from_bytes(bloom.to_bytes()) == bloom
    sbf = ScalableBloomFilter(initial_capacity=8, error_rate=0.01)
    sbf.update(values)
    back = ScalableBloomFilter.from_bytes(sbf.to_bytes())
    assert back == sbf and back.count == sbf.count


def test_bloom_parameter_messages() -> None:
    with pytest.raises(
        SketchError,
        match=r"BloomFilter capacity=0 is out of range: expected a "
        "positive integer, the number of distinct items the filter must hold",
    ):
        BloomFilter(capacity=0)
    with pytest.raises(
        SketchError,
        match=r"BloomFilter error_rate=1\.5 is out of range: expected a "
        "false-positive rate strictly between 0 and 1, such as 0.01",
    ):
        BloomFilter(capacity=10, error_rate=1.5)
    with pytest.raises(
        SketchError,
        match=r"BloomFilter\(capacity=10000000000, error_rate=1e-06\) "
        r"needs \d+ bits, more than the limit of 2\*\*32 bits \(512 MiB\): "
        "use a ScalableBloomFilter, a larger error_rate or several filters",
    ):
        BloomFilter(capacity=10**10, error_rate=1e-6)


def test_bloom_merge_message() -> None:
    with pytest.raises(IncompatibleSketchError) as err:
        BloomFilter(capacity=100, error_rate=0.01).merge(BloomFilter(capacity=200, error_rate=0.01))
    assert str(err.value) == (
        "cannot merge BloomFilter(capacity=100, error_rate=0.01) with "
        "BloomFilter(capacity=200, error_rate=0.01): sizes differ; build both with the same "
        "capacity and error_rate"
    )


def test_bloom_corrupt_header_message() -> None:
    raw = bytearray(BloomFilter(capacity=100, error_rate=0.01).to_bytes())
    raw[26] = 3  # number of hashes
    with pytest.raises(
        SketchFormatError,
        match=r"corrupt BloomFilter data: 959 bits and 3 hashes do "
        r"not match capacity=100, error_rate=0\.01 \(959 bits, 7 hashes\)",
    ):
        BloomFilter.from_bytes(bytes(raw))


# --- ScalableBloomFilter ---------------------------------------------------------------------


def test_scalable_grows_and_keeps_its_compound_rate() -> None:
    rng = np.random.default_rng(11)
    sbf = ScalableBloomFilter(initial_capacity=1_000, error_rate=0.01)
    inserted = rng.integers(0, 2**62, 60_000)
    for i in range(0, len(inserted), 7_000):
        sbf.update(inserted[i : i + 7_000])
    assert len(sbf.filters) == 6  # 1k + 2k + 4k + 8k + 16k + 32k >= 60k
    # Items the chain wrongly reports present are not counted: at most the error rate of them.
    distinct = len(np.unique(inserted))
    assert distinct * (1 - 0.01) <= sbf.count <= distinct
    assert sbf.contains(inserted).all()
    absent = rng.integers(2**62, 2**63 - 1, 200_000)
    assert sbf.contains(absent).mean() <= 0.01 * 1.5
    assert [f.capacity for f in sbf.filters] == [1_000 * 2**i for i in range(6)]


def test_scalable_scalar_and_batch_lookups_agree() -> None:
    sbf = ScalableBloomFilter(initial_capacity=50, error_rate=0.01)
    sbf.update(range(300))
    probes = list(range(-200, 400))
    assert [sbf.contains(v) for v in probes] == sbf.contains(probes).tolist()
    assert sbf.contains(None) is False


def test_scalable_counts_distinct_new_items_only() -> None:
    sbf = ScalableBloomFilter(initial_capacity=10, error_rate=0.001)
    sbf.update(["a"] * 50 + ["b"] * 50)
    sbf.update(["a", "b", None])
    assert sbf.count == 2 and len(sbf.filters) == 1
    sbf.update([f"x{i}" for i in range(25)])
    assert sbf.count == 27 and len(sbf.filters) == 2
    assert sbf.contains(["a", "x24", "nope"]).tolist() == [True, True, False]
    assert sbf.contains("a") is True


def test_scalable_merge_keeps_every_item() -> None:
    left = ScalableBloomFilter(initial_capacity=100, error_rate=0.01)
    right = ScalableBloomFilter(initial_capacity=100, error_rate=0.01)
    left.update(range(1_000))
    right.update(range(500, 3_000))
    merged = left.copy().merge(right)
    assert merged.contains(np.arange(3_000)).all()
    assert merged == right.copy().merge(left)
    assert len(merged.filters) == max(len(left.filters), len(right.filters))
    merged.update(range(3_000, 3_500))
    assert merged.contains(np.arange(3_500)).all()


def test_scalable_parameter_and_merge_messages() -> None:
    with pytest.raises(
        SketchError,
        match=r"ScalableBloomFilter growth=1 is out of range: expected "
        r"an integer from 2 to 16 \(2 or 4 are usual\)",
    ):
        ScalableBloomFilter(growth=1)
    with pytest.raises(
        SketchError,
        match=r"ScalableBloomFilter ratio=1\.0 is out of range: expected "
        r"a tightening ratio strictly between 0 and 1 \(0\.8 to 0\.9 are usual\)",
    ):
        ScalableBloomFilter(ratio=1.0)
    with pytest.raises(
        SketchError,
        match="ScalableBloomFilter initial_capacity=-5 is out of range: expected a positive integer",
    ):
        ScalableBloomFilter(initial_capacity=-5)
    with pytest.raises(IncompatibleSketchError) as err:
        ScalableBloomFilter(100, 0.01).merge(ScalableBloomFilter(100, 0.05))
    assert str(err.value) == (
        "cannot merge ScalableBloomFilter(initial_capacity=100, error_rate=0.01, growth=2, "
        "ratio=0.8) with ScalableBloomFilter(initial_capacity=100, error_rate=0.05, growth=2, "
        "ratio=0.8): parameters differ; build both with the same initial_capacity, error_rate, "
        "growth and ratio"
    )
