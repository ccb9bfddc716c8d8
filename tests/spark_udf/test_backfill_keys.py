"""A backfill's key-set groups (spark_udf.backfill): keys equal as values meet in one group, in every map task."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_udf.backfill import Packer, partition_values
from spark_udf.core import TimeReading

SCHEMA = pa.schema([("flag", pa.bool_()), ("d", pa.float64()), ("i", pa.int64()), ("ts", pa.int64())])
KEY_SETS = [("d",), ("flag",), ("i",), ("d", "i")]


def _groups(rows: list[dict[str, Any]], tasks: list[int], nparts: int) -> dict[int, dict[Any, set[int]]]:
    """Play the map side with each run of rows in a task of its own: per key set, each key's groups."""
    packer = Packer("ts", KEY_SETS, (), TimeReading(max_future_skew_ms=None), partition_values(nparts), flush_rows=3)
    out: dict[int, dict[Any, set[int]]] = defaultdict(lambda: defaultdict(set))
    at = 0
    for pid, n in enumerate(tasks):
        table = pa.Table.from_pylist(rows[at : at + n], schema=SCHEMA)
        at += n
        for rb in packer.pack_task(iter(table.to_batches(max_chunksize=2)), pid):
            for ks, bucket, blob in zip(rb.column("_cep_ks").to_pylist(), rb.column("_cep_bucket").to_pylist(),
                                        rb.column("_cep_rows").to_pylist()):
                if blob is None:
                    continue
                t = pa.ipc.open_stream(blob).read_all()
                # a dict's key: Python's value equality (1 == 1.0 == True, 0.0 == -0.0), as the engine compares keys
                for key in zip(*[t.column(c).to_pylist() for c in KEY_SETS[ks]]):
                    out[ks][key].add(bucket)
    return out


def test_a_key_seen_first_in_another_column_or_sign_keeps_its_group() -> None:
    """Task 0 meets the bool True before the long 1 and -0.0 before 0.0; task 1 the other way: each key still
    goes to one group (the engine compares keys as values, so 0.0 and -0.0 are one key, as in cep run)."""
    rows = [{"flag": True, "d": -0.0, "i": 1, "ts": 1}, {"flag": True, "d": 0.0, "i": 1, "ts": 2},
            {"flag": False, "d": 2.0, "i": 2, "ts": 3}, {"flag": False, "d": 0.0, "i": 1, "ts": 4},
            {"flag": False, "d": 3.0, "i": 1, "ts": 5}]
    got = _groups(rows, [2, 3], 16)
    split = {ks: {k: b for k, b in keys.items() if len(b) > 1} for ks, keys in got.items()}
    assert split == {ks: {} for ks in got}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from([True, False, None]), st.sampled_from([-0.0, 0.0, 1.0, 2.0, 0.5, None]),
                          st.sampled_from([0, 1, 2, None])), min_size=1, max_size=30),
       st.lists(st.integers(1, 8), min_size=1, max_size=5), st.integers(2, 12))
def test_equal_keys_meet_in_one_group_whatever_the_tasks(values: list[tuple[Any, Any, Any]], cuts: list[int],
                                                         nparts: int) -> None:
    rows = [{"flag": f, "d": d, "i": i, "ts": n} for n, (f, d, i) in enumerate(values)]
    tasks, left = [], len(rows)
    for c in cuts:
        if left:
            tasks.append(min(c, left))
            left -= tasks[-1]
    tasks.append(left)
    got = _groups(rows, tasks, nparts)
    assert sum(len(rows_) for rows_ in [rows]) == len(rows)
    for ks, keys in got.items():
        assert all(len(b) == 1 for b in keys.values()), (KEY_SETS[ks], dict(keys))


def test_nested_keys_reach_the_rules_as_cep_runs_errors() -> None:
    """A list or struct key is no key (cep run counts an error per row): the map side packs it, it does not fail."""
    schema = pa.schema([("k", pa.list_(pa.int64())), ("s", pa.struct([("a", pa.int64())])), ("ts", pa.int64())])
    table = pa.Table.from_pylist([{"k": [1, 2], "s": {"a": 1}, "ts": 1}, {"k": [1, 2], "s": {"a": 1}, "ts": 2},
                                  {"k": None, "s": None, "ts": 3}, {"k": [3], "s": {"a": 2}, "ts": 4}], schema=schema)
    packer = Packer("ts", [("k",), ("s",)], (), TimeReading(max_future_skew_ms=None), partition_values(4))
    packed = list(packer.pack_task(iter(table.to_batches(max_chunksize=1)), 0))
    seen: dict[int, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for rb in packed:
        for ks, bucket, blob in zip(rb.column("_cep_ks").to_pylist(), rb.column("_cep_bucket").to_pylist(),
                                    rb.column("_cep_rows").to_pylist()):
            if blob is not None:
                t = pa.ipc.open_stream(blob).read_all()
                for v in t.column(["k", "s"][ks]).to_pylist():
                    seen[ks][json.dumps(v, sort_keys=True)].add(bucket)
    assert {ks: sum(1 for _ in v) for ks, v in seen.items()} == {0: 3, 1: 3}
    assert all(len(b) == 1 for v in seen.values() for b in v.values())


def test_wide_rows_flush_by_bytes_and_each_key_set_leaves_as_its_own_batch() -> None:
    """A task holds at most ``flush_bytes`` of input before packing (not 400,000 rows of any width: a
    string or binary Arrow array holds at most 2 GiB), and a flush's key sets leave in batches of their own."""
    wide = pa.schema([("k", pa.string()), ("g", pa.string()), ("ts", pa.int64()), ("text", pa.string())])
    rows = [{"k": f"k{n % 7}", "g": f"g{n % 3}", "ts": n, "text": "x" * 1000} for n in range(200)]
    table = pa.Table.from_pylist(rows, schema=wide)
    packer = Packer("ts", [("g",), ("k",)], (), TimeReading(max_future_skew_ms=None), partition_values(3),
                    flush_bytes=20_000)
    out = list(packer.pack_task(iter(table.to_batches(max_chunksize=10)), 0))
    data = [rb for rb in out if rb.column("_cep_rows").null_count < rb.num_rows]
    assert all(len(set(rb.column("_cep_ks").to_pylist())) == 1 for rb in data)
    # 200 rows of 1 kB in flushes of 20 kB: ten flushes (of two batches each), each packed once per key set
    assert len(data) == 2 * 10
    assert max(sum(len(b) for b in rb.column("_cep_rows").to_pylist()) for rb in data) < 40_000
    orders = sorted(o for rb in data for b in rb.column("_cep_rows").to_pylist() if b is not None
                    for o in pa.ipc.open_stream(b).read_all().column("_cep_order").to_pylist())
    assert orders == sorted(list(range(200)) * 2)  # every row once per key set, in its place


def test_groups_of_one_flush_share_one_buffer_and_each_value_is_its_own_stream() -> None:
    """A flush's groups are written into one buffer that becomes the binary column without a copy: each
    value is still one whole Arrow stream holding exactly its group's rows (keys of hundreds of rows,
    flushes that split a key's run), and the column's values end where the next begins."""
    schema = pa.schema([("k", pa.string()), ("ts", pa.int64()), ("v", pa.float64())])
    rows = [{"k": f"k{n % 5}", "ts": n, "v": n / 7} for n in range(2_000)]  # 400 rows per key
    table = pa.Table.from_pylist(rows, schema=schema)
    packer = Packer("ts", [("k",)], (), TimeReading(max_future_skew_ms=None), partition_values(4), flush_rows=700)
    out = [rb for rb in packer.pack_task(iter(table.to_batches(max_chunksize=64)), 0)
           if rb.column("_cep_rows").null_count < rb.num_rows]
    assert len(out) == 3  # flushes of 704, 704 and 592 rows (whole input batches), one packed batch each
    got: dict[int, list[tuple[str, int, float]]] = defaultdict(list)
    for rb in out:
        col = rb.column("_cep_rows")
        assert col.buffers()[2].size == sum(len(b) for b in col.to_pylist())  # one buffer, no gaps
        for bucket, blob in zip(rb.column("_cep_bucket").to_pylist(), col.to_pylist()):
            t = pa.ipc.open_stream(blob).read_all()
            got[bucket] += zip(t.column("k").to_pylist(), t.column("ts").to_pylist(), t.column("v").to_pylist())
    assert sorted(r for g in got.values() for r in g) == sorted((r["k"], r["ts"], r["v"]) for r in rows)
    for g in got.values():  # each group's rows in input order, every key in one group
        assert [ts for _, ts, _ in g] == sorted(ts for _, ts, _ in g)
    assert sum(len({k for k, _, _ in g}) for g in got.values()) == 5


def test_packed_rows_past_two_gib_in_one_flush_are_refused_with_the_next_step() -> None:
    """Arrow's binary column holds 2 GiB: a flush that packed more (only with a flush_bytes set far above its
    default) is refused with what to change, before any value is built."""
    from spark_udf.backfill import _binary

    with pytest.raises(pa.ArrowCapacityError, match="2,147,483,648 bytes in one flush.*lower the packer's flush_bytes"):
        _binary(pa.py_buffer(b"x"), [0, 2**31])
    assert _binary(pa.py_buffer(b""), [0]).to_pylist() == []


def test_a_null_arrival_column_ranks_its_segment_first_instead_of_failing() -> None:
    """A user's arrival column (``SparkRunConfig.arrival_columns``) may hold NULL: its segment comes first
    (as Spark sorts NULLs first), where comparing None with a path used to raise a TypeError."""
    from spark_udf.core import arrival_plan

    plan = arrival_plan([('["a", 1]', 0, 5), ('[null, 0]', 0, 3), ('["a", null]', 0, 4), ('[null, null]', 0, 9)], 1)
    assert sorted(plan, key=lambda s: plan[s][0]) == ['[null, null]', '[null, 0]', '["a", null]', '["a", 1]']
    assert plan['["a", 1]'] == (3, [9])
