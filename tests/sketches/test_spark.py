"""Interop with Spark SQL's DataSketches HLL functions: hll_sketch_agg, hll_union, estimate."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sketches import HyperLogLog

pytestmark = pytest.mark.spark


def spark_sketch(spark: Any, sql_from: str, column: str, p: int) -> bytes:
    row = spark.sql(f"SELECT hll_sketch_agg({column}, {p}) AS s FROM {sql_from}").collect()[0]
    return bytes(row.s)


def test_spark_sketch_imports_with_identical_registers(spark: Any) -> None:
    for n, p in ((5, 12), (30_000, 14), (100, 6)):
        ours = HyperLogLog(p=p)
        ours.update(np.arange(n))
        imported = HyperLogLog.from_datasketches(spark_sketch(spark, f"range({n})", "id", p))
        assert np.array_equal(imported.registers(), ours.registers()), (n, p)
        assert imported.estimate() == pytest.approx(n, rel=3 * ours.standard_error)


def test_spark_strings_hash_like_ours_and_skip_null_and_empty(spark: Any) -> None:
    words = [f"w{i}" for i in range(3_000)] + ["", None, "héllo"]
    frame = spark.createDataFrame([(w,) for w in words], "w string")
    frame.createOrReplaceTempView("words")
    imported = HyperLogLog.from_datasketches(spark_sketch(spark, "words", "w", 12))
    ours = HyperLogLog(p=12)
    ours.update(words)
    assert np.array_equal(imported.registers(), ours.registers())


def test_our_export_unions_with_spark_sketch_in_spark(spark: Any) -> None:
    ours = HyperLogLog(p=12)
    ours.update(np.arange(0, 60_000))  # Spark holds 40,000 .. 99,999
    theirs = spark_sketch(spark, "range(40000, 100000)", "id", 12)
    frame = spark.createDataFrame(
        [(bytearray(ours.to_datasketches()), bytearray(theirs))], "ours binary, theirs binary"
    )
    row = frame.selectExpr(
        "hll_sketch_estimate(ours) AS ours",
        "hll_sketch_estimate(hll_union(ours, theirs)) AS union_estimate",
        "hll_union(ours, theirs) AS union_sketch",
    ).collect()[0]
    tolerance = 3 * ours.standard_error
    assert row.ours == pytest.approx(60_000, rel=tolerance)
    assert row.union_estimate == pytest.approx(100_000, rel=tolerance)
    # The union Spark computed is, register for register, the merge we compute.
    expected = ours.copy().merge(HyperLogLog.from_datasketches(theirs))
    assert HyperLogLog.from_datasketches(bytes(row.union_sketch)) == expected


def test_small_exports_read_as_lists_and_sets_in_spark(spark: Any) -> None:
    rows = []
    for n in (0, 3, 200):
        ours = HyperLogLog(p=12)
        ours.update([f"k{i}" for i in range(n)])
        rows.append((n, bytearray(ours.to_datasketches())))
    frame = spark.createDataFrame(rows, "n int, s binary")
    got = {r.n: r.e for r in frame.selectExpr("n", "hll_sketch_estimate(s) AS e").collect()}
    assert got == {0: 0, 3: 3, 200: 200}
