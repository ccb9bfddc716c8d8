"""TopK heavy hitters: Misra-Gries bounds against exact counts, merging, item round trips."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sketches import IncompatibleSketchError, SketchError, TopK

SETTINGS = settings(max_examples=30, deadline=None)
items = st.one_of(st.integers(0, 30), st.sampled_from(["a", "b", "c", "d"]))
streams = st.lists(items, max_size=200)


def assert_guarantees(topk: TopK, truth: Counter) -> None:
    """Counts are lower bounds within error_bound; every item above the bound is kept."""
    n = sum(truth.values())
    assert topk.total == n
    assert topk.error_bound <= n / (topk.capacity + 1)
    kept = dict(topk.top())
    assert len(kept) <= topk.capacity
    for item, count in kept.items():
        assert truth[item] - topk.error_bound <= count <= truth[item], item
    for item, true_count in truth.items():
        if true_count > topk.error_bound:
            assert item in kept, item


def test_zipf_stream_against_counter() -> None:
    rng = np.random.default_rng(8)
    stream = rng.zipf(1.4, 400_000) % 100_000
    truth = Counter(stream.tolist())
    topk = TopK(capacity=200)
    for i in range(0, len(stream), 50_000):
        topk.update(stream[i : i + 50_000])
    assert_guarantees(topk, truth)
    assert [item for item, _ in topk.top(10)] == [item for item, _ in truth.most_common(10)]
    assert topk.estimate(int(stream[0])) == dict(topk.top())[int(stream[0])]


@pytest.mark.data
def test_real_data_top_urls_and_words(
    nasa_log: dict[str, list[str]], headline_words: list[str]
) -> None:
    for values in (nasa_log["url"], headline_words):
        truth = Counter(values)
        topk = TopK(capacity=100)
        topk.update(values)
        assert_guarantees(topk, truth)
        top5 = [item for item, _ in topk.top(5)]
        assert set(top5) <= {item for item, _ in truth.most_common(8)}


@SETTINGS
@given(streams, st.integers(1, 12), st.integers(1, 30))
def test_guarantees_hold_however_the_stream_is_cut(values: list, capacity: int, chunk: int) -> None:
    topk = TopK(capacity=capacity)
    for i in range(0, len(values), chunk):
        topk.update(values[i : i + chunk])
    assert_guarantees(topk, Counter(values))
    assert TopK.from_bytes(topk.to_bytes()) == topk


@SETTINGS
@given(streams, st.integers(1, 12))
def test_guarantees_hold_one_value_at_a_time(values: list, capacity: int) -> None:
    topk = TopK(capacity=capacity)
    for v in values:
        topk.update(v, weights=1)
    topk.update(None)
    assert_guarantees(topk, Counter(values))
    for item, count in topk.top():
        assert topk.estimate(item) == count


@SETTINGS
@given(streams, streams, streams, st.integers(1, 10))
def test_merge_commutes_and_keeps_the_bounds_in_any_grouping(
    a: list, b: list, c: list, capacity: int
) -> None:
    sa, sb, sc = TopK(capacity), TopK(capacity), TopK(capacity)
    sa.update(a)
    sb.update(b)
    sc.update(c)
    assert sa.copy().merge(sb) == sb.copy().merge(sa)
    truth = Counter(a + b + c)
    assert_guarantees(sa.copy().merge(sb).merge(sc), truth)
    assert_guarantees(sa.copy().merge(sb.copy().merge(sc)), truth)


def test_exact_while_under_capacity_and_weights() -> None:
    topk = TopK(capacity=10)
    topk.update(["x", "y", "x", None, "z", float("nan")])
    topk.update("x", weights=5)
    topk.update(["y", "w"], weights=[2, 1])
    assert topk.top()[:2] == [("x", 7), ("y", 3)]
    assert sorted(topk.top()[2:]) == [("w", 1), ("z", 1)]
    assert topk.error_bound == 0 and topk.total == 12
    assert topk.top(1) == [("x", 7)]
    assert topk.top(0) == []
    assert topk.estimate(["x", "nope", None]).tolist() == [7, 0, 0]
    assert len(topk) == 4


def test_items_of_every_type_round_trip() -> None:
    values: list[Any] = [7, -(2**63), 2**64 - 1, 2.5, "héllo", b"\x00raw", True]
    topk = TopK(capacity=16)
    topk.update(values)
    back = TopK.from_bytes(topk.to_bytes())
    assert back == topk
    got = {item for item, _ in back.top()}
    # 2**64 - 1 aliases -1 (same 64-bit image); True aliases 1; both kept as first seen.
    assert got == {7, -(2**63), 2**64 - 1, 2.5, "héllo", b"\x00raw", True}
    assert {type(item) for item in got} == {int, float, str, bytes, bool}


def test_numpy_and_arrow_items_come_back_as_python_values() -> None:
    import pyarrow as pa

    topk = TopK(capacity=4)
    topk.update(np.array([3, 3, 4]))
    topk.update(pa.array(["a", "a", "a"]))
    assert topk.top() == [("a", 3), (3, 2), (4, 1)]
    assert all(type(item) in (int, str) for item, _ in topk.top())


def test_parameter_messages() -> None:
    with pytest.raises(
        SketchError,
        match=r"TopK capacity=0 is out of range: expected an integer "
        r"from 1 to 16777216 \(counters kept; several times the k you will ask for\)",
    ):
        TopK(capacity=0)
    with pytest.raises(
        SketchError,
        match=r"TopK.top k=-1 is invalid: expected a non-negative "
        "integer or None",
    ):
        TopK(4).top(-1)
    with pytest.raises(SketchError, match="TopK weights=-2 is invalid"):
        TopK(4).update("a", weights=-2)


def test_merge_message() -> None:
    with pytest.raises(IncompatibleSketchError) as err:
        TopK(capacity=8).merge(TopK(capacity=16))
    assert str(err.value) == (
        "cannot merge TopK(capacity=8) with TopK(capacity=16): capacities differ; build both "
        "with the same capacity"
    )
