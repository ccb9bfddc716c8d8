"""Count-Min: never under-counts, over-counts within epsilon * N w.p. 1 - delta, merge laws."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sketches import CountMinSketch, IncompatibleSketchError, SketchError, SketchFormatError

SETTINGS = settings(max_examples=30, deadline=None)
items = st.one_of(st.integers(-50, 50), st.sampled_from(["a", "b", "c", "d", ""]))
streams = st.lists(items, max_size=150)


def errors(cms: CountMinSketch, truth: Counter) -> np.ndarray:
    keys = list(truth)
    return cms.estimate(keys) - np.array([truth[k] for k in keys])


@pytest.mark.parametrize("conservative", [True, False])
def test_never_under_counts_and_stays_within_epsilon_bound(conservative: bool) -> None:
    rng = np.random.default_rng(5)
    stream = rng.zipf(1.2, 300_000) % 50_000
    truth = Counter(stream.tolist())
    cms = CountMinSketch.from_error(epsilon=0.001, delta=0.01, conservative=conservative)
    for i in range(0, len(stream), 40_000):
        cms.update(stream[i : i + 40_000])
    err = errors(cms, truth)
    assert err.min() >= 0
    assert cms.total == len(stream)
    # Each estimate exceeds its bound with probability at most delta.
    assert (err > cms.error_bound).mean() <= cms.delta
    absent = cms.estimate(np.arange(10**9, 10**9 + 10_000))
    assert (absent > cms.error_bound).mean() <= cms.delta


def test_conservative_update_is_tighter_on_skewed_data() -> None:
    rng = np.random.default_rng(6)
    stream = rng.zipf(1.3, 200_000) % 20_000
    truth = Counter(stream.tolist())
    plain = CountMinSketch(width=500, depth=4, conservative=False)
    tight = CountMinSketch(width=500, depth=4, conservative=True)
    for chunk in np.array_split(stream, 20):
        plain.update(chunk)
        tight.update(chunk)
    assert errors(tight, truth).min() >= 0
    assert errors(tight, truth).sum() < 0.5 * errors(plain, truth).sum()


@pytest.mark.data
def test_real_data_word_frequencies(headline_words: list[str]) -> None:
    truth = Counter(headline_words)
    cms = CountMinSketch.from_error(epsilon=0.0005, delta=0.001)
    cms.update(headline_words)
    err = errors(cms, truth)
    assert err.min() >= 0
    assert (err > cms.error_bound).mean() <= cms.delta
    assert cms.estimate("police") >= truth["police"] > 0


def test_scalar_batch_missing_and_weights() -> None:
    cms = CountMinSketch(width=1_000, depth=5)
    cms.update(["GET", "GET", None, "POST"])
    cms.update("GET", weights=3)
    cms.update(["PUT", None, "POST"], weights=[10, 99, 1])
    assert cms.estimate("GET") == 5
    assert cms.estimate(["POST", None, "PUT", "DELETE"]).tolist() == [2, 0, 10, 0]
    assert cms.estimate(None) == 0
    assert isinstance(cms.estimate("GET"), int)
    assert cms.total == 3 + 3 + 11
    assert cms.estimate(1) == cms.estimate(1.0) == 0


def test_from_error_sizes_and_bounds() -> None:
    cms = CountMinSketch.from_error(epsilon=0.01, delta=0.001)
    assert (cms.width, cms.depth) == (math.ceil(math.e / 0.01), math.ceil(math.log(1000)))
    assert cms.epsilon <= 0.01 and cms.delta <= 0.001
    assert cms.nbytes == cms.width * cms.depth * 8


@SETTINGS
@given(streams, streams)
def test_plain_merge_equals_one_sketch_of_both(a: list, b: list) -> None:
    left, right, both = (CountMinSketch(64, 3, conservative=False) for _ in range(3))
    left.update(a)
    right.update(b)
    both.update(a + b)
    assert left.copy().merge(right) == both


@SETTINGS
@given(streams, streams, streams, st.booleans())
def test_merge_is_associative_commutative_and_an_upper_bound(
    a: list, b: list, c: list, conservative: bool
) -> None:
    sa, sb, sc = (CountMinSketch(32, 3, conservative=conservative) for _ in range(3))
    sa.update(a)
    sb.update(b)
    sc.update(c)
    assert sa.copy().merge(sb).merge(sc) == sa.copy().merge(sb.copy().merge(sc))
    assert sa.copy().merge(sb) == sb.copy().merge(sa)
    merged = sa.copy().merge(sb).merge(sc)
    truth = Counter(v for v in a + b + c)
    if truth:
        assert errors(merged, truth).min() >= 0


@SETTINGS
@given(streams, st.integers(1, 9))
def test_conservative_never_under_counts_however_the_stream_is_cut(
    values: list, chunk: int
) -> None:
    cms = CountMinSketch(16, 2)
    for i in range(0, len(values), chunk):
        cms.update(values[i : i + chunk])
    truth = Counter(values)
    if truth:
        assert errors(cms, truth).min() >= 0
    assert CountMinSketch.from_bytes(cms.to_bytes()) == cms


@SETTINGS
@given(streams)
def test_one_value_at_a_time_matches_batches(values: list) -> None:
    plain_batch, plain_single = CountMinSketch(32, 3, False), CountMinSketch(32, 3, False)
    plain_batch.update(values)
    for v in values:
        plain_single.update(v)
    assert plain_single == plain_batch
    tight = CountMinSketch(16, 2)
    for v in values:
        tight.update(v, weights=2)
    truth = Counter(values)
    for item, count in truth.items():
        assert tight.estimate(item) >= 2 * count
        assert tight.estimate(item) == int(tight.estimate([item])[0])


def test_parameter_messages() -> None:
    with pytest.raises(
        SketchError,
        match=r"CountMinSketch width=0 is out of range: expected an "
        r"integer from 1 to 2147483648; or build it with "
        r"CountMinSketch\.from_error\(epsilon, delta\)",
    ):
        CountMinSketch(width=0)
    with pytest.raises(SketchError, match="CountMinSketch depth=100 is out of range"):
        CountMinSketch(depth=100)
    with pytest.raises(
        SketchError,
        match=r"CountMinSketch epsilon=2 is out of range: expected a "
        r"number strictly between 0 and 1, such as 0\.001",
    ):
        CountMinSketch.from_error(epsilon=2, delta=0.1)
    with pytest.raises(SketchError, match="CountMinSketch delta=0 is out of range"):
        CountMinSketch.from_error(epsilon=0.1, delta=0)


def test_weight_messages() -> None:
    cms = CountMinSketch(10, 2)
    with pytest.raises(
        SketchError,
        match=r"CountMinSketch weights=-1 is invalid: expected a "
        "non-negative integer or one per value",
    ):
        cms.update("a", weights=-1)
    with pytest.raises(
        SketchError,
        match="CountMinSketch got 2 weights for 3 values: pass one "
        "weight per value, or a single integer",
    ):
        cms.update(["a", "b", "c"], weights=[1, 2])
    with pytest.raises(
        SketchError,
        match=r"CountMinSketch weights must be non-negative integers, "
        r"got dtype float64 \(minimum 0\.5\)",
    ):
        cms.update(["a"], weights=[0.5])


def test_merge_messages() -> None:
    with pytest.raises(IncompatibleSketchError) as err:
        CountMinSketch(100, 5).merge(CountMinSketch(200, 5))
    assert str(err.value) == (
        "cannot merge CountMinSketch(width=100, depth=5, conservative=True) with "
        "CountMinSketch(width=200, depth=5, conservative=True): shapes differ; build both with "
        "the same width and depth"
    )
    with pytest.raises(IncompatibleSketchError) as err:
        CountMinSketch(100, 5).merge(CountMinSketch(100, 5, conservative=False))
    assert str(err.value) == (
        "cannot merge CountMinSketch(width=100, depth=5, conservative=True) with "
        "CountMinSketch(width=100, depth=5, conservative=False): update modes differ; build "
        "both with the same conservative setting"
    )


def test_corrupt_shape_message() -> None:
    raw = bytearray(CountMinSketch(10, 2).to_bytes())
    raw[2:6] = (0).to_bytes(4, "little")
    with pytest.raises(
        SketchFormatError,
        match="corrupt CountMinSketch data: CountMinSketch width=0 is out of range",
    ):
        CountMinSketch.from_bytes(bytes(raw))
