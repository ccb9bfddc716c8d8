"""A backfill's key-set groups (spark_udf.backfill): the rows of ``cep run``, and the general path where they cannot run."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cep.engine import Engine
from cep.events import read_events
from patterns.rules import parse_rules
from spark_udf.backfill import Packer, late_free, partition_values, stream_rows
from spark_udf.core import MALFORMED, GroupCore, TimeReading, arrival_plan
from tests.spark_udf.conftest import counted, event_of, match_key, write_events

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")

# Four pattern rules, three key sets (k; g; none): a lane-path shape (S R{2,} B), a batch-DFA shape
# (A B C, row-local conditions), a rule keyed by another column with WITHIN, and one without PARTITION BY
RULES_YAML = """
rules:
  - name: lanes
    lateness: 1000
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts
        MEASURES S.ts AS t0, LAST(R.ts) AS t1, COUNT(R.*) AS nr, B.px AS bpx
        PATTERN (S R{2,} B)
        DEFINE R AS R.px < S.px, B AS B.px >= S.px)
  - name: abc
    lateness: 800
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts
        MEASURES A.ts AS ta, C.ts AS tc
        PATTERN (A B C)
        DEFINE A AS px < 3, B AS px BETWEEN 3 AND 6, C AS px > 6)
  - name: by_group
    lateness: 2000
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY g ORDER BY ts
        MEASURES FIRST(U.ts) AS t0, LAST(U.ts) AS t1, COUNT(U.*) AS n
        ONE ROW PER MATCH
        PATTERN (U{3,})
        WITHIN INTERVAL '2' SECOND
        DEFINE U AS px > PREV(px))
  - name: no_partition
    lateness: 900
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        ORDER BY ts
        MEASURES X.k AS k1, Y.k AS k2
        PATTERN (X Y)
        DEFINE X AS px = 9, Y AS px = 0)
"""
SCHEMA = "k string, g string, ts long, px long, _corrupt_record string"


def _files(seed: int, late: bool) -> list[list[Any]]:
    """Three files of ~150 rows over 23 keys: time rises with up to 800 ms of disorder (within every
    rule's lateness), and with ``late`` some rows fall up to 6 s behind; file 1 holds a row without a key, one without a
    time and a malformed line."""
    rng = random.Random(seed)
    keys = [f"key{i}" for i in range(23)]
    t = 1_000_000
    out = []
    for f in range(3):
        rows: list[Any] = []
        for _ in range(rng.randint(120, 180)):
            t += rng.randint(0, 300)
            ts = t - rng.randint(0, 800)
            if late and rng.random() < 0.04:
                ts -= rng.randint(900, 6000)
            rows.append({"k": rng.choice(keys), "g": rng.choice("xyz"), "ts": ts, "px": rng.randint(0, 9)})
        if f == 1:
            rows.insert(5, {"k": None, "g": "x", "ts": rows[4]["ts"], "px": 1})
            rows.insert(9, {"k": "key1", "g": "y", "ts": None, "px": 1})
            rows.insert(11, '{"k": "key2", "ts": ')
        out.append(rows)
    return out


def _rules(names: tuple[str, ...] | None = None) -> Any:
    rules = parse_rules(RULES_YAML)
    return rules if names is None else [r for r in rules if r.name in names]


def _embedded(paths: list[Path], names: tuple[str, ...] | None = None) -> Any:
    eng = Engine(_rules(names))
    out = eng.process([])
    for p in paths:
        for b in read_events(p):
            out.extend(eng.process(b))
    out.extend(eng.finish())
    return out


def _backfill(spark: Any, folder: Path, names: tuple[str, ...] | None = None, **config: Any) -> Any:
    from pyspark.sql import functions as F

    from spark_udf.api import SparkRunConfig, apply_rules

    frame = (spark.read.schema(SCHEMA).json(str(folder))
             .withColumn("_cep_source", F.col("_metadata.file_path"))
             .withColumn("_cep_block", F.col("_metadata.file_block_start")))
    return apply_rules(frame, _rules(names), SparkRunConfig(
        buckets=5, source_column="_cep_source", arrival_columns=("_cep_source", "_cep_block"), **config))


def _event(row: dict[str, Any]) -> str:
    """The event of a late or error row, order-free; a malformed record's text as it is."""
    try:
        return json.dumps(event_of(row), sort_keys=True)
    except ValueError:
        return str(row["event"])


def _problems(rows: list[dict[str, Any]], output: str) -> Counter:
    return Counter((r["rule"], r["reason"], _event(r)) for r in rows if r["output"] == output)


def _expected(records: list[dict[str, Any]]) -> Counter:
    return Counter((r.get("rule"), r["reason"], _event(r)) for r in records)


@pytest.mark.spark
@pytest.mark.parametrize("seed,late", [(1, False), (2, True), (3, True)])
def test_key_set_groups_give_cep_runs_rows(spark: Any, tmp_path: Path, seed: int, late: bool, capsys: Any) -> None:
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(_files(seed, late))]
    exp = _embedded(paths)
    result = _backfill(spark, tmp_path / "in")
    assert result.keyed_groups == "key-set"
    rows = [r.asDict() for r in result.envelope.collect()]
    assert counted(rows, "match") == Counter(match_key(m) for m in exp.matches)
    assert all(n > 0 for n in Counter(m["rule"] for m in exp.matches).values())
    assert len({m["rule"] for m in exp.matches}) == 4  # every rule found something: nothing is vacuous
    assert _problems(rows, "late") == _expected(exp.late)
    # errors of each rule (no key, no time) as embedded; a malformed line is one row of no rule
    assert _problems(rows, "error") - Counter({(None, MALFORMED, '{"k": "key2", "ts": '): 1}) == _expected(
        [e for e in exp.errors if e.get("rule") is not None])
    assert sum(1 for r in rows if r["output"] == "error" and r["reason"] == MALFORMED) == 1
    assert bool(exp.late) == late  # the late seeds take the second arrival pass; without late rows it is skipped
    if seed == 1:
        # one key set (k): one scan of the input, packed per group in one Python pass (no explode, no
        # join, no sort of every row), one shuffle of the packed rows, the groups in one Python pass
        one = _backfill(spark, tmp_path / "in", names=("lanes", "abc"))
        capsys.readouterr()
        one.envelope.explain()
        plan = capsys.readouterr().out
        for absent in ("Generate", "BroadcastHashJoin", "Sort ", "FlatMapGroupsInPandas"):
            assert absent not in plan, (absent, plan)
        assert plan.count("FileScan json") == 1 and "MapInArrow" in plan and "MapInPandas" in plan, plan
        (shuffle,) = [line for line in plan.splitlines() if "Exchange" in line]
        assert "hashpartitioning(_cep_part" in shuffle, shuffle
        exp_one = _embedded(paths, ("lanes", "abc"))
        got = [r.asDict() for r in one.envelope.collect()]
        assert counted(got, "match") == Counter(match_key(m) for m in exp_one.matches)
        assert {m["rule"] for m in exp_one.matches} == {"lanes", "abc"}
        assert _problems(got, "error") - Counter({(None, MALFORMED, '{"k": "key2", "ts": '): 1}) == _expected(
            [e for e in exp_one.errors if e.get("rule") is not None])
        assert sum(1 for r in got if r["output"] == "error" and r["reason"] == MALFORMED) == 1
    if seed != 2:
        return
    # and the general path (one group per rule) agrees row for row (one seed: each run is a Spark job)
    general = _backfill(spark, tmp_path / "in", key_set_groups=False)
    assert general.keyed_groups == "rule"
    other = [r.asDict() for r in general.envelope.collect()]
    assert counted(other, "match") == counted(rows, "match")
    assert _problems(other, "late") == _problems(rows, "late")

    # a late or bad row names the file it came from, on both paths (the key-set groups read it
    # back from the segment's key, which the packed rows carry once per segment)
    def sourced(rs: list[dict[str, Any]]) -> Counter:
        return Counter((r["output"], r["rule"], r["reason"], _event(r), r["source"]) for r in rs
                       if r["output"] in ("late", "error"))

    assert sourced(rows) == sourced(other)
    files = {p.resolve().as_uri().replace("file:///", "file:/") for p in paths} | {p.resolve().as_uri() for p in paths}
    assert {r["source"] for r in rows if r["output"] in ("late", "error")} <= files
    assert len({r["source"] for r in rows if r["output"] == "late"}) > 1  # rows of several files were late


def _json_backfill(spark: Any, folder: Path, schema: str = SCHEMA, names: tuple[str, ...] | None = None,
                   where: str | None = None, **config: Any) -> Any:
    """The backfill of ``_backfill`` over the frame of ``read_json_lines`` (optionally filtered after it)."""
    from spark_udf.api import SparkRunConfig, apply_rules, read_json_lines

    frame = read_json_lines(spark, str(folder), schema, **({"corrupt_column": config["corrupt_column"]}
                                                           if "corrupt_column" in config else {}))
    if where is not None:
        frame = frame.where(where)
    return apply_rules(frame, _rules(names), SparkRunConfig(
        buckets=5, source_column="_cep_source", arrival_columns=("_cep_source", "_cep_block"), **config))


def _plan(df: Any, capsys: Any) -> str:
    capsys.readouterr()
    df.explain()
    return capsys.readouterr().out


@pytest.mark.spark
@pytest.mark.parametrize("key_set_groups,local_files", [(True, True), (True, False), (False, True)])
def test_json_lines_read_by_the_engine_give_cep_runs_rows(case_sensitive: Any, tmp_path: Path, key_set_groups: bool,
                                                          local_files: bool, capsys: Any) -> None:
    spark = case_sensitive
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(_files(2, True))]
    exp = _embedded(paths)
    spark.conf.set("spark.cep.backfill.localFiles", str(local_files).lower())
    try:
        result = _json_backfill(spark, tmp_path / "in", key_set_groups=key_set_groups)
        assert result.keyed_groups == ("key-set" if key_set_groups else "rule")
        plan = _plan(result.envelope, capsys)
        rows = [r.asDict() for r in result.envelope.collect()]
    finally:
        spark.conf.unset("spark.cep.backfill.localFiles")
    if key_set_groups and local_files:
        # the map tasks read their splits of the local files themselves and decode the lines with the engine
        assert "FileScan" not in plan and "Range" in plan, plan
    elif key_set_groups:
        # the map tasks read the files once, as text, and decode the lines with the engine
        assert plan.count("FileScan text") == 1 and "FileScan json" not in plan, plan
    else:  # the rule groups read the frame as it is: Spark's reader
        assert "FileScan json" in plan and "FileScan text" not in plan, plan
    assert counted(rows, "match") == Counter(match_key(m) for m in exp.matches)
    assert len({m["rule"] for m in exp.matches}) == 4 and exp.late
    assert _problems(rows, "late") == _expected(exp.late)
    assert _problems(rows, "error") - Counter({(None, MALFORMED, '{"k": "key2", "ts": '): 1}) == _expected(
        [e for e in exp.errors if e.get("rule") is not None])
    assert sum(1 for r in rows if r["output"] == "error" and r["reason"] == MALFORMED) == 1
    files = {p.resolve().as_uri().replace("file:///", "file:/") for p in paths} | {p.resolve().as_uri() for p in paths}
    assert {r["source"] for r in rows if r["output"] in ("late", "error")} <= files


@pytest.mark.spark
def test_json_lines_the_engine_does_not_read_as_spark_keep_sparks_reader(case_sensitive: Any, tmp_path: Path,
                                                                         capsys: Any) -> None:
    spark = case_sensitive
    for i, rows in enumerate(_files(1, False)):
        write_events(tmp_path / "in", i, rows)

    def scans(**kw: Any) -> tuple[int, int]:
        plan = _plan(_json_backfill(spark, tmp_path / "in", **kw).envelope, capsys)
        # the engine's decoder: the map tasks read the local files themselves (no scan), or Spark's text source
        engine = ("FileScan" not in plan and "Range" in plan) or plan.count("FileScan text") == 1
        return int(engine and "FileScan json" not in plan), plan.count("FileScan json")

    assert scans() == (1, 0)
    # a float (rounded to 32 bits), a decimal (to its scale), a timestamp, a date: Spark's parse of
    # the value, which the engine's decoder does not repeat; so is a frame changed after read_json_lines
    for schema in ("k string, g string, ts timestamp, px long", "k string, g string, ts long, px float",
                   "k string, g string, ts long, px decimal(10, 2)", "k string, g date, ts long, px long",
                   "k string, g array<string>, ts long, px long"):
        assert scans(schema=schema) == (0, 1), schema
    assert scans(where="px > 0") == (0, 1)
    assert scans(schema="k long, g long, ts long, px long") == (1, 0)
    # session settings under which Spark's reader reads otherwise than the engine's decoder: an empty
    # string NULL in a long column (not malformed), a number in a string column written again by
    # Jackson ("1.50" as "1.5"; the default before Spark 4.0)
    for key, value in (("spark.sql.legacy.json.allowEmptyString.enabled", "true"),
                       ("spark.sql.json.enableExactStringParsing", "false")):
        before = spark.conf.get(key)
        spark.conf.set(key, value)
        try:
            assert scans() == (0, 1), key
            assert scans(schema="k long, g long, ts long, px long") == ((1, 0) if "Exact" in key else (0, 1)), key
        finally:
            spark.conf.set(key, before)
    # a session that matches names without case: Spark's reader (the engine's decoder reads them with case)
    spark.conf.set("spark.sql.caseSensitive", "false")
    assert scans() == (0, 1)


ANALYTICS = """
rules:
  - name: per_key
    kind: analytics
    sql: |
      SELECT k, COUNT(*) AS n FROM ticks GROUP BY k, TUMBLE(ts, INTERVAL '5' SECOND)
"""
JOINED = """
tables:
  - name: limits
    from: limit_changes
    primary_key: k
    columns: [cap]
    time_field: ts
rules:
  - name: over_limit
    sql: |
      SELECT * FROM ticks AS t JOIN limits FOR SYSTEM_TIME AS OF t.ts AS l ON t.k = l.k
      MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS at PATTERN (A)
                       DEFINE A AS A.px > l.cap)
"""


@pytest.mark.spark
def test_rules_the_key_set_groups_cannot_run_take_the_general_path(spark: Any, tmp_path: Path) -> None:
    from spark_udf.api import apply_rules

    rows = [{"k": "a", "g": "x", "ts": 1000 * i, "px": i % 10} for i in range(30)]
    frame = spark.createDataFrame(pd.DataFrame(rows))
    pattern = parse_rules(RULES_YAML)
    assert apply_rules(frame, pattern).keyed_groups == "key-set"
    # analytics rules read the arrival watermark as their clock: one group per rule and bucket
    mixed = parse_rules(ANALYTICS.replace("rules:\n", "rules:\n" + RULES_YAML.split("rules:\n", 1)[1], 1))
    analytics = apply_rules(frame, mixed)
    assert analytics.keyed_groups == "rule"
    got = [r.asDict() for r in analytics.envelope.collect()]
    eng = Engine(mixed)
    exp = eng.process(rows)
    exp.extend(eng.finish())
    # Spark's analytics rows say retract: false where the engine's leave it out
    assert counted([{k: v for k, v in r.items() if not (k == "retract" and v is False)} for r in got],
                   "match") == Counter(match_key(m) for m in exp.matches)
    # a temporal join keeps its table's replica in each rule group
    joined = parse_rules(JOINED)
    assert apply_rules(frame, joined).keyed_groups == "rule"
    # named inputs (FROM routing) and a stream are not key-set groups either
    assert apply_rules({"ticks": frame}, pattern).keyed_groups == "rule"


def _late_rows(segments: list[list[int]], lateness: int) -> int:
    """Brute force: rows whose time is earlier than every earlier row's largest time minus the lateness."""
    return sum(1 for w, t in zip(_watermarks(segments), (t for seg in segments for t in seg))
               if w is not None and t < w - lateness)


def _watermarks(segments: list[list[int]]) -> list[int | None]:
    """Brute force: each row's arrival watermark (the largest time of every earlier row), None for the first."""
    seen: int | None = None
    out = []
    for seg in segments:
        for t in seg:
            out.append(seen)
            seen = t if seen is None else max(seen, t)
    return out


def _pack(packer: Packer, batches: list[pa.RecordBatch], tasks: list[int]) -> pd.DataFrame:
    """Play the map side: consecutive runs of batches in tasks of their own (partition ids in order)."""
    out, at = [], 0
    for pid, n in enumerate(tasks):
        out += list(packer.pack_task(iter(batches[at : at + n]), pid))
        at += n
    return pa.Table.from_batches(out).to_pandas() if out else pd.DataFrame()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.integers(0, 60), min_size=0, max_size=12), min_size=1, max_size=5),
       st.integers(0, 30), st.integers(1, 5), st.integers(1, 20))
def test_the_packed_statistics_say_whether_any_row_is_late(segments: list[list[int]], lateness: int, chunk: int,
                                                          flush: int) -> None:
    """The map side's statistics and per-row watermarks (batches and flushes that split segments) against brute force."""
    rows = [{"s": f"s{i}", "k": "a", "ts": t} for i, seg in enumerate(segments) for t in seg]
    table = pa.Table.from_pylist(rows, schema=pa.schema([("s", pa.string()), ("k", pa.string()), ("ts", pa.int64())]))
    batches = table.to_batches(max_chunksize=chunk)
    packer = Packer("ts", [("k",)], ("s",), TimeReading(max_future_skew_ms=None), partition_values(2), flush_rows=flush)
    packed = _pack(packer, batches, [len(batches)])
    if not rows:
        return
    stats = packed[packed["_cep_rows"].isna()]
    assert set(stats["_cep_part"]) == set(partition_values(2))  # every reduce partition gets every segment's figures
    cols = [stats[c].tolist() for c in ("_cep_seg", "_cep_ks", "_cep_mx", "_cep_mn", "_cep_lag")]
    got = sorted({(s, int(k), *[None if v != v else int(v) for v in (mx, mn, lag)]) for s, k, mx, mn, lag in zip(*cols)},
                 key=str)
    plan = arrival_plan(((s, k, mx) for s, k, mx, _, _ in got), 1)
    assert late_free(got, plan, 0, lateness) == (_late_rows(segments, lateness) == 0)
    # each row's arrival watermark as the reduce side reads it: its segment's (from the plan) and its own within
    # the segment where it is behind an earlier row there; late (or not) exactly as by the second pass's figure
    expect = _watermarks(segments)
    behind = any(t < max(seg[:j]) for seg in segments for j, t in enumerate(seg) if j)
    seen = 0
    for blob in packed["_cep_rows"].dropna():
        t = pa.ipc.open_stream(blob).read_all()
        assert behind or "_cep_within_0" not in t.schema.names  # no row behind: no watermark of its own sent
        st_ = stream_rows(t, plan, 0, True)
        data, order, before = st_.data, st_.order, st_.before
        assert not [c for c in data.schema.names if c.startswith("_cep_") and c != "_cep_source"]
        for o, ts, b in zip(order.tolist(), data.column("ts").to_pylist(), before.tolist()):
            w = expect[o]
            for lt in {0, lateness}:
                assert (ts < b - lt) == (w is not None and ts < w - lt), (o, ts, b, w, lt)
            assert b <= (np.iinfo(np.int64).min if w is None else w)  # never ahead of the true watermark
            seen += 1
    assert seen == len(rows)


ARROW_SCHEMA = pa.schema([("k", pa.string()), ("g", pa.string()), ("ts", pa.int64()), ("px", pa.int64()),
                          ("_cep_corrupt", pa.string()), ("_cep_source", pa.string())])


def _arrow_rows(files: list[list[Any]], paths: list[Path]) -> list[dict[str, Any]]:
    """The files' rows as Spark's permissive JSON reader gives them: a malformed line in _cep_corrupt."""
    out = []
    for rows, path in zip(files, paths):
        for r in rows:
            rec = {"_cep_corrupt": r} if isinstance(r, str) else dict(r)
            out.append({**{f: None for f in ARROW_SCHEMA.names}, **rec, "_cep_source": str(path)})
    return out


@pytest.mark.parametrize("seed,late", [(4, False), (5, True), (6, True)])
def test_packed_groups_give_cep_runs_rows_without_spark(tmp_path: Path, seed: int, late: bool) -> None:
    """Spark's contract played in plain Python: map tasks over runs of batches, packed rows shuffled by
    partition in any order, each partition's groups run: the rows of ``cep run``, every flush and split."""
    from spark_udf.backfill import PackedGroups

    rng = random.Random(seed)
    files = _files(seed, late)
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(files)]
    exp = _embedded(paths)
    assert bool(exp.late) == late
    rules = _rules()
    types = {"k": "string", "g": "string", "ts": "bigint", "px": "bigint"}
    core, _ = GroupCore.for_rules(rules, types, 5)
    key_sets = [("g",), ("k",), ()]  # sorted, as apply_rules orders them
    rules_of = {0: ["by_group"], 1: ["lanes", "abc"], 2: ["no_partition"]}
    lateness = {0: [2000], 1: [1000, 800], 2: [900]}
    table = pa.Table.from_pylist(_arrow_rows(files, paths), schema=ARROW_SCHEMA)
    batches = table.to_batches(max_chunksize=rng.randint(7, 60))
    # files are segments; a task reads whole files (here: the first, then the other two)
    cut = sum(1 for b in batches if b.column("_cep_source")[b.num_rows - 1].as_py() == str(paths[0]))
    parts = partition_values(3)
    # flushes by rows or by bytes (a row here is about 60 bytes of Arrow)
    packer = Packer("ts", key_sets, ("_cep_source",), TimeReading(), parts, flush_rows=rng.randint(40, 300),
                    flush_bytes=rng.choice([1 << 30, rng.randint(1_000, 8_000)]))
    packed = _pack(packer, batches, [cut, len(batches) - cut])
    # a group's rows fed to its rules all at once, and a few rows at a time (runs of a key cut, a
    # rule's matches spanning batches), as cep run's batches feed them
    for batch_rows in (16_384, rng.randint(1, 5), rng.randint(6, 40)):
        runner = PackedGroups(core, rules_of, lateness, len(key_sets), ("_cep_source",), batch_rows=batch_rows)
        frames = []
        for p in parts:
            mine = packed[packed["_cep_part"] == p].sample(frac=1, random_state=seed).reset_index(drop=True)
            chunks = [mine.iloc[a : a + 5] for a in range(0, len(mine), 5)]
            frames += list(runner.run(iter(chunks)))
        rows = [r for f in frames for r in f.to_dict("records")]
        rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()} for r in rows]
        assert counted(rows, "match") == Counter(match_key(m) for m in exp.matches), batch_rows
        assert len({m["rule"] for m in exp.matches}) == 4
        assert _problems(rows, "late") == _expected(exp.late), batch_rows
        assert _problems(rows, "error") - Counter({(None, MALFORMED, '{"k": "key2", "ts": '): 1}) == _expected(
            [e for e in exp.errors if e.get("rule") is not None])
        bad = [r for r in rows if r["output"] == "error" and r["reason"] == MALFORMED]
        assert len(bad) == 1 and bad[0]["source"] == str(paths[1])
        assert {r["source"] for r in rows if r["output"] == "late"} <= {str(p) for p in paths}


def test_a_group_whose_segment_no_task_reported_fails_with_the_reason() -> None:
    from spark_udf.backfill import PackedGroups

    core, _ = GroupCore.for_rules(_rules(("abc",)), {"k": "string", "g": "string", "ts": "bigint", "px": "bigint"}, 1)
    table = pa.Table.from_pylist([{"s": "f1", "k": "a", "ts": 1, "px": 1}])
    packer = Packer("ts", [("k",)], ("s",), TimeReading(max_future_skew_ms=None), partition_values(1))
    packed = _pack(packer, table.to_batches(), [1])
    runner = PackedGroups(core, {0: ["abc"]}, {0: [800]}, 1, ("s",))
    data = packed[packed["_cep_rows"].notna()]  # the statistics rows lost: the segment is unknown
    with pytest.raises(RuntimeError, match=r'rows of group \(0, 0\) come from input segment \["f1", 0\] that no map '
                                           r"task reported"):
        list(runner.run(iter([data])))


def _exchanges(df: Any, capsys: Any) -> list[str]:
    """The shuffles of a DataFrame's physical plan, as ``explain`` prints them."""
    capsys.readouterr()
    df.explain()
    return [line.strip() for line in capsys.readouterr().out.splitlines() if "Exchange hashpartitioning(_cep_part" in line]


@pytest.mark.spark
def test_the_group_stage_gets_a_partition_per_core_each_its_share(spark: Any, tmp_path: Path,
                                                                      capsys: Any) -> None:
    import re

    from spark_udf.api import SparkRunConfig
    from spark_udf.backfill import partition_values

    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(_files(1, False))]
    assert paths
    cores = spark.sparkContext.defaultParallelism
    # a small input (Spark knows its files' size): one partition per core
    (default,) = _exchanges(_backfill(spark, tmp_path / "in").envelope, capsys)
    assert re.search(rf", {cores}\), REPARTITION_BY_NUM", default), default
    (fixed,) = _exchanges(_backfill(spark, tmp_path / "in", backfill_partitions=7).envelope, capsys)
    assert re.search(r", 7\), REPARTITION_BY_NUM", fixed), fixed
    # 0: as many partitions as the session's shuffle partitions
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions"))
    (own,) = _exchanges(_backfill(spark, tmp_path / "in", backfill_partitions=0).envelope, capsys)
    assert re.search(rf", {shuffle}\), REPARTITION_BY_NUM", own), own
    with pytest.raises(ValueError, match="backfill_partitions must be 0 or more, found -1"):
        SparkRunConfig(backfill_partitions=-1)
    # the packed rows of partition p carry a value that Spark's hash partitioning sends to partition p:
    # every partition gets exactly one of the values (consecutive ints would leave some empty)
    for n in (7, 8):
        vals = partition_values(n)
        got = spark.createDataFrame([(v,) for v in vals], "v int").repartition(n, "v").rdd.glom().collect()
        assert sorted(row.v for part in got for row in part) == sorted(vals)
        assert [[row.v for row in part] for part in got] == [[v] for v in vals]


@pytest.mark.spark
def test_json_lines_in_several_blocks_per_file_give_sparks_and_cep_runs_rows(case_sensitive: Any, tmp_path: Path,
                                                                             capsys: Any) -> None:
    """Files split into several blocks (a small ``maxPartitionBytes``), an empty file, one with CRLF
    line ends and one without a final newline: the engine's decoder gives the rows of Spark's reader
    (the same backfill over a frame changed after ``read_json_lines``, which Spark's reader reads) and
    ``cep run``'s matches and late rows."""
    spark = case_sensitive
    folder = tmp_path / "in"
    paths = [write_events(folder, i, rows) for i, rows in enumerate(_files(2, True))]
    paths[0].write_bytes(paths[0].read_bytes().replace(b"\n", b"\r\n"))
    paths[2].write_bytes(paths[2].read_bytes().rstrip(b"\n"))
    (folder / "empty.jsonl").write_bytes(b"")
    exp = _embedded(paths)
    key = "spark.sql.files.maxPartitionBytes"
    before = spark.conf.get(key)
    spark.conf.set(key, "2000")
    # the malformed-record column first, the others in another order than the file's: the decoder's
    # batches name their columns, the planned frame's order is not theirs
    schema = "_corrupt_record string, px long, ts long, g string, k string"
    try:
        result = _json_backfill(spark, folder, schema)
        plan = _plan(result.envelope, capsys)
        assert "FileScan json" not in plan and "Range" in plan, plan  # the engine's decoder reads them, split by split
        engine = [r.asDict() for r in result.envelope.collect()]
        reader = [r.asDict() for r in _json_backfill(spark, folder, schema, where="true").envelope.collect()]
    finally:
        spark.conf.set(key, before)

    def rows(rs: list[dict[str, Any]]) -> Counter:
        return Counter(json.dumps(r, sort_keys=True, default=str) for r in rs)

    assert rows(engine) == rows(reader)
    assert counted(engine, "match") == Counter(match_key(m) for m in exp.matches)
    assert exp.late and _problems(engine, "late") == _expected(exp.late)


@pytest.mark.spark
def test_json_lines_with_a_malformed_record_column_of_another_name(case_sensitive: Any, tmp_path: Path) -> None:
    """``read_json_lines(corrupt_column=...)`` names the column Spark's reader puts a malformed record
    in (not only the engine's decoder): both routes report the malformed line, with its text."""
    spark = case_sensitive
    for i, rows in enumerate(_files(1, False)):
        write_events(tmp_path / "in", i, rows)
    schema = "k string, g string, ts long, px long"

    def errors(**kw: Any) -> Counter:
        rows = [r.asDict() for r in _json_backfill(spark, tmp_path / "in", schema, corrupt_column="bad", **kw)
                .envelope.collect()]
        return _problems(rows, "error")

    engine, reader = errors(), errors(where="true")
    assert engine == reader
    assert engine[(None, MALFORMED, '{"k": "key2", "ts": ')] == 1


def test_packed_groups_without_arrival_order_give_the_same_rows_in_any_batches(tmp_path: Path) -> None:
    """Without arrival order no row is late and each rule sees its group sorted by time: fed a few rows at
    a time, a rule must not release on its own watermark between batches (a row seconds behind an
    earlier one would then come after rows it precedes in time), so the rows are those of one batch."""
    from spark_udf.backfill import PackedGroups

    files = _files(5, True)  # rows up to 6 s behind earlier ones
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(files)]
    types = {"k": "string", "g": "string", "ts": "bigint", "px": "bigint"}
    core, _ = GroupCore.for_rules(_rules(), types, 5)
    key_sets = [("g",), ("k",), ()]
    rules_of = {0: ["by_group"], 1: ["lanes", "abc"], 2: ["no_partition"]}
    lateness = {0: [2000], 1: [1000, 800], 2: [900]}
    table = pa.Table.from_pylist(_arrow_rows(files, paths), schema=ARROW_SCHEMA)
    parts = partition_values(3)
    packed = _pack(Packer("ts", key_sets, ("_cep_source",), TimeReading(), parts), table.to_batches(30), [5, 100])
    got = []
    for batch_rows in (16_384, 7):
        runner = PackedGroups(core, rules_of, lateness, len(key_sets), ("_cep_source",), arrival_order=False,
                              batch_rows=batch_rows)
        rows = [r for p in parts for f in runner.run(iter([packed[packed["_cep_part"] == p]]))
                for r in f.to_dict("records")]
        assert not [r for r in rows if r["output"] == "late"]
        got.append(counted(rows, "match"))
    assert sum(got[0].values()) > 20 and got[1] == got[0]


@pytest.mark.spark
@pytest.mark.parametrize("key_set_groups", [True, False])
def test_a_file_split_over_tasks_with_only_the_file_as_arrival_column_gives_cep_runs_late_rows(
        case_sensitive: Any, tmp_path: Path, key_set_groups: bool) -> None:
    """Arrival columns that name the file but not its block: Spark splits each file over several
    tasks (a small maxPartitionBytes), and a task's rows are judged against the rows the earlier
    tasks read of the same file too (partition order is offset order within a file). Before, each
    task started the file's running maximum afresh, and rows late against an earlier part were
    missed (64 late rows against cep run's 68)."""
    from pyspark.sql import functions as F

    from spark_udf.api import SparkRunConfig, apply_rules

    spark = case_sensitive
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(_files(2, True))]
    exp = _embedded(paths)
    key = "spark.sql.files.maxPartitionBytes"
    before = spark.conf.get(key)
    spark.conf.set(key, "3000")
    try:
        frame = spark.read.schema(SCHEMA).json(str(tmp_path / "in")).withColumn("_cep_source", F.col("_metadata.file_path"))
        assert frame.rdd.getNumPartitions() > len(paths)  # files split over tasks
        result = apply_rules(frame, _rules(), SparkRunConfig(buckets=5, source_column="_cep_source",
                                                             arrival_columns=("_cep_source",), key_set_groups=key_set_groups))
        rows = [r.asDict() for r in result.envelope.collect()]
    finally:
        spark.conf.set(key, before)
    assert counted(rows, "match") == Counter(match_key(m) for m in exp.matches)
    assert exp.late and _problems(rows, "late") == _expected(exp.late)


WIDE_SCHEMA = "k string, g string, ts long, px long, note string, qty double, big long"


def _overlapping_files(seed: int, errors: bool) -> list[list[Any]]:
    """Three files, each in time order, each starting up to 3 s before the one before ends (its first
    rows late against the earlier file only), with fields no rule reads (a string, sometimes
    missing, a double, a long, sometimes NULL); with ``errors`` the second holds a row without a
    key and one without a time."""
    rng = random.Random(seed)
    keys = [f"key{i}" for i in range(17)]
    out, t = [], 1_000_000
    for f in range(3):
        t -= rng.randint(1_500, 3_000) if f else 0
        rows: list[Any] = []
        for _ in range(rng.randint(150, 220)):
            t += rng.randint(1, 300)
            row = {"k": rng.choice(keys), "g": rng.choice("xyz"), "ts": t, "px": rng.randint(0, 9),
                   "qty": rng.random() * 100, "big": None if rng.random() < 0.2 else rng.randint(-(1 << 60), 1 << 60)}
            if rng.random() < 0.8:
                row["note"] = rng.choice(["buy", "sell", "hold é", 'q"uote'])
            rows.append(row)
        if errors and f == 1:
            rows.insert(7, {"k": None, "g": "x", "ts": rows[6]["ts"], "px": 1, "note": "no key"})
            rows.insert(12, {"k": "key1", "g": "y", "ts": None, "px": 1, "note": "no time"})
        out.append(rows)
    return out


@pytest.mark.parametrize("seed,errors", [(21, False), (22, True)])
def test_narrow_streams_report_the_whole_events_of_rows_late_against_an_earlier_file(
        tmp_path: Path, seed: int, errors: bool) -> None:
    """The local-files path in plain Python: the map tasks read their splits, a flush whose rows cannot
    be late within their file or errors sends only the fields its key set's rules read; the rows that
    are late against an earlier file have their whole events decoded again (once per map task) and
    every row is ``cep run``'s. With errors the second file's flush stays whole, and its groups'
    streams meet narrow ones."""
    from spark_udf.api import _fields_read
    from spark_udf.backfill import PackedGroups
    from spark_udf.core import CORRUPT_COL
    from spark_udf.json_lines import JsonLinesDecoder, column_kinds
    from spark_udf.local_files import SplitReader, flat_ddl, plan_files

    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(_overlapping_files(seed, errors))]
    exp = _embedded(paths)
    assert exp.late
    rules = _rules()
    types = dict(flat_ddl(WIDE_SCHEMA) or [])
    core, _ = GroupCore.for_rules(rules, types, 5)
    key_sets = [("g",), ("k",), ()]
    rules_of = {0: ["by_group"], 1: ["lanes", "abc"], 2: ["no_partition"]}
    lateness = {0: [2000], 1: [1000, 800], 2: [900]}
    keep = [_fields_read([r for r in rules if r.name in rules_of[i]]) for i in range(3)]
    assert keep == [frozenset({"g", "ts", "px"}), frozenset({"k", "ts", "px"}), frozenset({"k", "ts", "px"})]
    decoder = JsonLinesDecoder(column_kinds(flat_ddl(WIDE_SCHEMA)), CORRUPT_COL, ("_cep_source", "_cep_block"),
                               dictionary=True)
    tasks = plan_files([p.resolve().as_uri() for p in paths], 1 << 27, 4 << 20, 3)
    assert tasks is not None and len(tasks) == 3
    reader = SplitReader(decoder, "_cep_source", "_cep_block", tasks)
    parts = partition_values(2)
    packer = Packer("ts", key_sets, ("_cep_source", "_cep_block"), TimeReading(), parts, decoder=reader, keep=keep)
    out = []
    for pid in range(len(tasks)):
        ids = iter([pa.record_batch([pa.array([pid], pa.int64())], names=["id"])])
        out += list(packer.pack_task(reader.decode(ids), pid))
    packed = pa.Table.from_batches(out).to_pandas()
    streams = [pa.ipc.open_stream(b).read_all() for b in packed["_cep_rows"].dropna()]
    thin = [t for t in streams if (t.schema.metadata or {}).get(b"cep_narrow")]
    assert thin and all("note" not in t.schema.names and "qty" not in t.schema.names for t in thin)
    assert (len(thin) < len(streams)) == errors  # the file with errors: its streams whole
    decoded: list[list[int]] = []
    decode = reader.decode

    def counted_decode(batches: Any) -> Any:
        batches = list(batches)
        decoded.append([i for b in batches for i in b.column("id").to_pylist()])
        return decode(iter(batches))

    runner = PackedGroups(core, rules_of, lateness, len(key_sets), ("_cep_source", "_cep_block"), reader=reader)
    calls: list[int] = []
    reread = runner.reread
    runner.reread = lambda order: calls.append(order) or reread(order)  # type: ignore[method-assign]
    reader.decode = counted_decode  # type: ignore[method-assign]
    rows = []
    for p in parts:
        runner._tasks.clear()  # each reduce partition is a task of its own
        rows += [r for f in runner.run(iter([packed[packed["_cep_part"] == p]])) for r in f.to_dict("records")]
    rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()} for r in rows]
    assert counted(rows, "match") == Counter(match_key(m) for m in exp.matches)
    assert _problems(rows, "late") == _expected(exp.late)
    assert _problems(rows, "error") == _expected(exp.errors)
    assert calls  # (a row late for several rules: once per rule)
    # each map task's rows decoded again at most once per reduce task, and only those of late rows' tasks
    assert len(decoded) <= len(parts) * len(tasks) and all(len(d) == 1 for d in decoded)
    assert {d[0] for d in decoded} == {o >> 33 for o in calls}
    # an input file that changed before the reduce side read a row again: the task fails and says so
    rewritten = [dict(r, px=(r["px"] + 1) % 10) if isinstance(r, dict) else r for r in _overlapping_files(seed, errors)[1]]
    write_events(tmp_path / "in", 1, rewritten)
    write_events(tmp_path / "in", 2, [dict(r, px=(r["px"] + 1) % 10) for r in _overlapping_files(seed, errors)[2]])
    runner._tasks.clear()
    with pytest.raises(RuntimeError, match=r"reads otherwise now .* did an input file change during the backfill"):
        for p in parts:
            list(runner.run(iter([packed[packed["_cep_part"] == p]])))
    # files cut short: the row is gone
    for i in (1, 2):
        write_events(tmp_path / "in", i, _overlapping_files(seed, errors)[i][:3])
    runner._tasks.clear()
    with pytest.raises(RuntimeError, match=r"of map task \d is not in its input any more: did an input file change"):
        for p in parts:
            list(runner.run(iter([packed[packed["_cep_part"] == p]])))
    with pytest.raises(RuntimeError, match="a narrow packed row needs the map tasks' split reader"):
        PackedGroups(core, rules_of, lateness, len(key_sets), ("_cep_source", "_cep_block")).reread(1 << 33)
    late_events = [json.loads(_event(r)) for r in rows if r["output"] == "late"]
    assert any("qty" in e and "note" in e for e in late_events)  # whole events, fields no rule reads included


@pytest.mark.spark
def test_narrow_streams_on_spark_give_cep_runs_rows(case_sensitive: Any, tmp_path: Path) -> None:
    """The same through apply_rules(read_json_lines(...)): every row and every late event as ``cep run``'s."""
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(_overlapping_files(23, True))]
    exp = _embedded(paths)
    assert exp.late and exp.errors
    result = _json_backfill(case_sensitive, tmp_path / "in", schema=WIDE_SCHEMA)
    assert result.keyed_groups == "key-set"
    rows = [r.asDict() for r in result.envelope.collect()]
    assert counted(rows, "match") == Counter(match_key(m) for m in exp.matches)
    assert _problems(rows, "late") == _expected(exp.late)
    assert _problems(rows, "error") == _expected(exp.errors)
