"""HLL_SKETCH on Spark: the sketches analytics rules emit are read by Spark SQL's hll_* functions.

One rule, GROUP BY key over one-second TUMBLE windows with COUNT(*), APPROX_COUNT_DISTINCT(u) and
HLL_SKETCH(u) at lgConfigK 8, over seeded events whose keys span every DataSketches mode: a few
values per window (LIST), tens (SET), past the SET limit but still sparse for us (HLL_8 written
from coupons), hundreds (dense). Events reach windows already emitted (within the lateness), so
rows are corrected and carry a new sketch.

References are Spark's own: ``hll_sketch_agg(u, 8)`` over the raw events, and the embedded engine
over the same input.
"""

from __future__ import annotations

import base64
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cep.engine import Engine
from patterns.rules import parse_rules
from sketches import HyperLogLog
from spark_udf.api import SparkRunConfig, apply_rules
from tests.spark_udf.conftest import write_events
from tests.spark_udf.test_analytics_core import analytics_key
from tests.spark_udf.workload import embedded, events

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

P = 8
RULES_YAML = f"""
rules:
  - name: visitors
    kind: analytics
    lateness: 1500
    sketches: {{hll_precision: {P}}}
    sql: |
      SELECT k, COUNT(*) AS n, APPROX_COUNT_DISTINCT(u) AS users, HLL_SKETCH(u) AS users_sketch,
             window_start, window_end
      FROM visits
      GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)
"""
SCHEMA = "k string, ts long, u string"
# events per window and distinct values to draw from, per key: LIST (< 8 coupons), SET (8..24 at
# lgK 8), sparse for us but HLL_8 for DataSketches (25..64), dense (> 64)
SHAPES = {"list": (5, 6), "set": (20, 30), "mid": (50, 400), "dense": (300, 2000)}
MODES = {0: "LIST", 1: "SET", 2: "HLL"}


def visit_files(seed: int, seconds: int = 5, files: int = 5) -> list[list[dict[str, Any]]]:
    """Files of one stream in arrival order, each sorted by time; an event arrives up to 800 ms
    after its time, so a file reaches back into windows the earlier files closed (never by more
    than the lateness: nothing is late). A few values are empty or missing (ignored by both)."""
    rnd = random.Random(seed)
    rows = []
    for key, (per_window, values) in SHAPES.items():
        for w in range(seconds):
            for _ in range(per_window):
                ts = 1_000_000 + w * 1000 + rnd.randrange(1000)
                r = rnd.random()
                u = None if r < 0.01 else "" if r < 0.02 else f"{key}{rnd.randrange(values)}"
                rows.append({"k": key, "ts": ts, "u": u, "_arrival": ts + rnd.randrange(800)})
    rows.sort(key=lambda r: r.pop("_arrival"))
    cut = [len(rows) * i // files for i in range(files + 1)]
    return [sorted(rows[a:b], key=lambda r: r["ts"]) for a, b in zip(cut, cut[1:])]


def as_bytes(v: Any) -> Any:
    """A sketch as Spark hands it back: bytearray from a DataFrame, base64 text from a JSON sink."""
    if isinstance(v, str):
        return base64.b64decode(v)
    return bytes(v) if isinstance(v, (bytearray, memoryview)) else v


def rows_of(records: list[dict[str, Any]]) -> Counter:
    return Counter(analytics_key({k: as_bytes(v) if k == "users_sketch" else v for k, v in r.items()
                                  if k not in ("output", "kind")}) for r in records)


def final_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last row of each (key, window): the correction when a window was corrected."""
    last: dict[tuple, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: bool(r["correction"])):
        last[(r["k"], r["window_start"])] = r
    return list(last.values())


@pytest.fixture(scope="module")
def visits(spark: Any, tmp_path_factory: Any) -> tuple[Path, list[list[dict[str, Any]]]]:
    folder = tmp_path_factory.mktemp("visits")
    files = visit_files(5)
    for i, rows in enumerate(files):
        write_events(folder / "in", i, events(rows))
    spark.read.schema(SCHEMA).json(str(folder / "in")).createOrReplaceTempView("raw_visits")
    return folder, files


@pytest.fixture(scope="module")
def backfill(spark: Any, visits: Any) -> tuple[list[dict[str, Any]], Any]:
    folder, _ = visits
    # arrival order = file path, then offset (as `cep spark backfill` reads files)
    frame = spark.read.schema(SCHEMA).json(str(folder / "in")).selectExpr(
        "*", "_metadata.file_path AS _cep_source", "_metadata.file_block_start AS _cep_block")
    result = apply_rules(frame, parse_rules(RULES_YAML), SparkRunConfig(
        buckets=3, source_column="_cep_source", arrival_columns=("_cep_source", "_cep_block")))
    frame = result.matches("visitors").selectExpr("*", "hll_sketch_estimate(users_sketch) AS spark_estimate")
    frame.cache()
    assert dict(result.matches("visitors").dtypes)["users_sketch"] == "binary"
    return [r.asDict() for r in frame.collect()], frame


def test_spark_estimates_our_sketch_as_approx_count_distinct(spark: Any, visits: Any, backfill: Any) -> None:
    rows, _frame = backfill
    spark_own = {(r.k, r.w): HyperLogLog.from_datasketches(r.s) for r in spark.sql(
        f"SELECT k, ts - ts % 1000 AS w, hll_sketch_agg(u, {P}) AS s FROM raw_visits GROUP BY k, ts - ts % 1000"
    ).collect()}
    tolerance = 2 * 1.04 / (1 << P) ** 0.5  # two standard errors of lgK 8, relative
    modes = Counter()
    for r in rows:
        mode = MODES[r["users_sketch"][7] & 3]
        modes[mode] += 1
        if mode != "HLL":
            # coupon lists and sets: DataSketches' estimate rounds to ours
            assert r["spark_estimate"] == r["users"], r
        else:
            # HLL_8 images are flagged out-of-order, so DataSketches reads them with its composite
            # estimator where APPROX_COUNT_DISTINCT uses Ertl's: two estimates of the same registers
            assert abs(r["spark_estimate"] - r["users"]) <= tolerance * r["users"], r
    assert set(modes) == {"LIST", "SET", "HLL"} and modes["HLL"] >= 10
    # every final row holds Spark's own sketch of that key's events in that window, register for
    # register (its estimate can still differ from ours: Spark reads its own in-order HLL images
    # with the HIP estimator)
    finals = final_rows(rows)
    assert len(finals) == len(SHAPES) * 5
    assert {(r["k"], r["window_start"]): HyperLogLog.from_datasketches(r["users_sketch"]) for r in finals} == spark_own


def test_union_of_a_windows_sketches_is_sparks_sketch_of_the_window(spark: Any, visits: Any, backfill: Any) -> None:
    from pyspark.sql import functions as F

    rows, _frame = backfill
    finals = spark.createDataFrame([(r["window_start"], bytearray(r["users_sketch"])) for r in final_rows(rows)],
                                   "window_start long, s binary")
    union = {r.window_start: (r.e, bytes(r.s)) for r in finals.groupBy("window_start").agg(
        F.expr("hll_union_agg(s)").alias("s")).selectExpr("window_start", "hll_sketch_estimate(s) AS e", "s").collect()}
    theirs = {r.window_start: r for r in spark.sql(
        f"SELECT window_start, s, hll_sketch_estimate(s) AS e, hll_sketch_estimate(hll_union(s, s)) AS merged_e "
        f"FROM (SELECT ts - ts % 1000 AS window_start, hll_sketch_agg(u, {P}) AS s FROM raw_visits "
        "GROUP BY ts - ts % 1000)").collect()}
    assert len(union) == 5 and union.keys() == theirs.keys()
    tolerance = 2 * 1.04 / (1 << P) ** 0.5
    for w, (estimate, sketch) in union.items():
        # hashing is identical (MurmurHash3_x64_128, seed 9001): the union holds, register for
        # register, Spark's own sketch of the window's raw events ...
        assert HyperLogLog.from_datasketches(sketch) == HyperLogLog.from_datasketches(theirs[w].s)
        # ... so read by the same estimator it gives the same number: a union result is
        # out-of-order (DataSketches' composite estimator), as is Spark's sketch once merged
        assert estimate == theirs[w].merged_e, w
        # Spark's sketch as built, by updates only, is read with the HIP estimator instead: another
        # estimate of the same registers, within two standard errors
        assert abs(estimate - theirs[w].e) <= tolerance * theirs[w].e, w
        # and the union is the merge of the rows' sketches as we read them
        merged = HyperLogLog(P)
        for r in final_rows(rows):
            if r["window_start"] == w:
                merged.merge(HyperLogLog.from_datasketches(r["users_sketch"]))
        assert HyperLogLog.from_datasketches(sketch) == merged


def test_backfill_rows_are_the_embedded_engines(visits: Any, backfill: Any) -> None:
    _, files = visits
    rows, _frame = backfill
    exp = Engine(parse_rules(RULES_YAML)).run([e for f in files for e in events(f)])
    assert sum(1 for m in exp.matches if m["correction"]) >= 5
    assert rows_of([{k: v for k, v in r.items() if k != "spark_estimate"} for r in rows]) == rows_of(exp.matches)


def test_stream_rows_are_the_embedded_engines(spark: Any, visits: Any, tmp_path: Path) -> None:
    folder, files = visits
    frame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder / "in"))
    result = apply_rules(frame, parse_rules(RULES_YAML), SparkRunConfig(buckets=3))
    query = result.write_stream(str(tmp_path / "out"), str(tmp_path / "ck"))
    query.awaitTermination()
    # the JSON sink carries the binary column as base64 text, as `cep run` writes sketches
    rows = [r.asDict() for r in spark.read.json(str(tmp_path / "out")).collect()]
    assert all(isinstance(r["users_sketch"], str) for r in rows if r["output"] == "match")
    exp = embedded(parse_rules(RULES_YAML), files)
    assert sum(1 for m in exp.matches if m["correction"]) >= 5
    assert rows_of([r for r in rows if r["output"] == "match"]) == rows_of(exp.matches)
    assert not [r for r in rows if r["output"] != "match"]
