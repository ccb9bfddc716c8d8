"""The central test: Spark gives the embedded engine's rows, streaming and in a backfill."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cep.engine import Engine
from cep.events import read_events
from patterns.rules import parse_rules
from spark_udf.api import SparkRunConfig, apply_rules
from spark_udf.core import MALFORMED
from tests.spark_udf.conftest import counted, event_of, match_key, sink_rows, write_events
from tests.spark_udf.workload import RULES_YAML, SCHEMA, stream

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]


def _embedded(paths: list[Path], finish: bool):
    eng = Engine(parse_rules(RULES_YAML))
    out = eng.process([])
    for p in paths:
        for b in read_events(p):
            out.extend(eng.process(b))
    if finish:
        out.extend(eng.finish())
    return out


def _file_stream(spark: Any, folder: Path):
    from pyspark.sql import functions as F

    df = spark.readStream.schema(SCHEMA + ", _corrupt_record string").option("maxFilesPerTrigger", 1).json(str(folder))
    return df.withColumn("_cep_source", F.col("_metadata.file_path"))


def test_stream_gives_the_embedded_engines_rows(spark: Any, tmp_path: Path) -> None:
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(stream(21, files=4))]
    result = apply_rules(_file_stream(spark, tmp_path / "in"), parse_rules(RULES_YAML),
                         SparkRunConfig(buckets=8, source_column="_cep_source"))
    query = result.write_stream(str(tmp_path / "out"), str(tmp_path / "ck"))
    query.awaitTermination()
    rows = sink_rows(spark, tmp_path / "out")

    # Each file is one micro-batch; the embedded engine reads the same files one batch each and
    # is not finished: a stream has no end, so both stop at the final watermark.
    exp = _embedded(paths, finish=False)
    assert counted(rows, "match") == Counter(match_key(m) for m in exp.matches)
    assert {r["rule"] for r in rows if r["output"] == "match"} == {"within", "all_rows", "global"}

    late = [r for r in rows if r["output"] == "late"]
    assert Counter((r["rule"], json.dumps(event_of(r), sort_keys=True)) for r in late) == Counter(
        (r["rule"], json.dumps(r["event"], sort_keys=True)) for r in exp.late)
    assert len(late) == 6 and all(r["reason"].startswith("late: event time") for r in late)
    assert {Path(r["source"].replace("file://", "")).name for r in late} == {"events-002.json", "events-003.json"}

    errors = [r for r in rows if r["output"] == "error"]
    malformed = [r for r in errors if r["reason"] == MALFORMED]
    assert [(m.get("rule"), m["event"]) for m in malformed] == [(None, '{"k": "a", "ts": 12, ')]
    assert Counter((r["rule"], r["reason"]) for r in errors if r["reason"] != MALFORMED) == Counter(
        (r["rule"], r["reason"]) for r in exp.errors if r["rule"] is not None)

    # the counts reach the query progress: one observed-metrics row per micro-batch
    progress = query.recentProgress
    metrics = [p["observedMetrics"]["cep"] for p in progress if p.get("observedMetrics")]
    assert sum(m["matches"] for m in metrics) == len(exp.matches)
    assert sum(m["late"] for m in metrics) == 6
    assert sum(m["errors"] for m in metrics) == len(errors)
    assert sum(p["numInputRows"] for p in progress) == sum(
        len(p.read_text().splitlines()) for p in paths)
    assert len(progress) == 5  # four files, then the batch without data that moves the watermark


def test_typed_outputs_per_rule_and_per_kind(spark: Any, tmp_path: Path) -> None:
    write_events(tmp_path / "in", 0, stream(3, files=1, late=False, bad=False)[0])
    result = apply_rules(_file_stream(spark, tmp_path / "in"), parse_rules(RULES_YAML), SparkRunConfig(buckets=2))
    types = {f.name: f.dataType.simpleString() for f in result.matches("within").schema.fields}
    assert types == {"k": "string", "t0": "bigint", "t1": "bigint", "nb": "bigint", "avg_px": "double",
                     "tag": "string", "rule": "string"}
    all_rows = [f.name for f in result.matches("all_rows").schema.fields]
    assert all_rows == ["k", "ts", "cls", "mn", "n", "px", "tag", "rule"]
    assert result.kind("pattern").columns[0] == "rule"
    assert result.late.columns == ["rule", "kind", "source", "line", "reason", "event"]
    with pytest.raises(KeyError, match="no rule named 'nope'"):
        result.matches("nope")


def test_backfill_gives_the_embedded_engines_rows(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(stream(22, files=3))]
    # out of order beyond the lateness inside a file: late in the embedded engine's reading order
    extra = [{"k": "a", "ts": 5_000_000, "px": 1, "tag": "hot"}, {"k": "b", "ts": 4_990_000, "px": 2, "tag": "cold"}]
    paths.append(write_events(tmp_path / "in", 3, extra))
    frame = (
        spark.read.schema(SCHEMA + ", _corrupt_record string").json(str(tmp_path / "in"))
        .withColumn("_cep_source", F.col("_metadata.file_path"))
        .withColumn("_cep_block", F.col("_metadata.file_block_start"))
    )
    result = apply_rules(frame, parse_rules(RULES_YAML), SparkRunConfig(
        buckets=4, source_column="_cep_source", arrival_columns=("_cep_source", "_cep_block")))
    rows = [r.asDict() for r in result.envelope.collect()]
    exp = _embedded(paths, finish=True)
    assert counted(rows, "match") == Counter(match_key(m) for m in exp.matches)
    # lateness judged in reading order: the same events, the same watermarks in the reasons
    assert sorted((r["rule"], r["reason"]) for r in rows if r["output"] == "late") == sorted(
        (r["rule"], r["reason"]) for r in exp.late)
    assert any("events-003" in (r["source"] or "") for r in rows if r["output"] == "late")
    counts = result.counts()
    assert counts["matches"] == len(exp.matches) and counts["late"] == len(exp.late)


def test_timestamp_and_decimal_columns_reach_the_engine_as_milliseconds_and_doubles(spark: Any) -> None:
    import datetime as dt
    from decimal import Decimal

    rules = parse_rules("""
rules:
  - name: up
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY at
        MEASURES FIRST(A.at) AS t0, LAST(B.at) AS t1, LAST(B.px) - A.px AS rise
        PATTERN (A B+) DEFINE B AS px > PREV(px))
""")
    t0 = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)
    rows = [("a", t0 + dt.timedelta(seconds=i), Decimal(p)) for i, p in enumerate(["1.50", "2.00", "2.50", "1.00"])]
    frame = spark.createDataFrame(rows, "k string, at timestamp, px decimal(10,2)")
    result = apply_rules(frame, rules)
    schema = {f.name: f.dataType.simpleString() for f in result.matches("up").schema.fields}
    assert schema == {"k": "string", "t0": "timestamp", "t1": "timestamp", "rise": "double", "rule": "string"}
    [m] = [r.asDict() for r in result.matches("up").collect()]
    ms = int(t0.timestamp() * 1000)
    eng = Engine(rules)
    exp = eng.run([[{"k": "a", "at": ms + 1000 * i, "px": float(p)} for i, p in enumerate(["1.50", "2.00", "2.50", "1.00"])]])
    [e] = exp.matches
    assert (m["t0"].timestamp() * 1000, m["t1"].timestamp() * 1000, m["rise"]) == (e["t0"], e["t1"], e["rise"])


def test_first_seen_rules_give_the_embedded_engines_rows(spark: Any) -> None:
    rules = parse_rules("""
rules:
  - name: new_ips
    sql: |
      SELECT * FROM logins MATCH_RECOGNIZE (PARTITION BY user ORDER BY ts
        MEASURES FIRST(N.ts) AS t0, COUNT(N.*) AS n
        PATTERN (N{2,} X) DEFINE N AS FIRST_SEEN(N.ip), X AS NOT FIRST_SEEN(X.ip))
""")
    rnd = __import__("random").Random(5)
    events = [{"user": f"u{rnd.randrange(5)}", "ts": 1000 * i, "ip": f"10.0.0.{rnd.randrange(9)}"} for i in range(300)]
    frame = spark.createDataFrame([(e["user"], e["ts"], e["ip"]) for e in events], "user string, ts long, ip string")
    # several buckets: each holds the seen values of its own keys, in its snapshot
    got = [r.asDict() for r in apply_rules(frame, rules, SparkRunConfig(buckets=3)).matches("new_ips").collect()]
    exp = Engine(rules).run([events]).matches
    assert exp and sorted((r["user"], r["t0"], r["n"]) for r in got) == sorted((r["user"], r["t0"], r["n"]) for r in exp)


def test_next_in_define_and_unmatched_rows_give_the_embedded_engines_rows(spark: Any) -> None:
    rules = parse_rules("""
rules:
  - name: peaks
    sql: |
      SELECT * FROM bars MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts
        MEASURES P.ts AS t, P.px AS px, NEXT(P.px) AS px_after
        ALL ROWS PER MATCH WITH UNMATCHED ROWS
        PATTERN (P) DEFINE P AS P.px > PREV(P.px) AND P.px > NEXT(P.px))
""")
    rnd = __import__("random").Random(7)
    events = [{"sym": f"s{rnd.randrange(3)}", "ts": 1000 * i, "px": rnd.randrange(20)} for i in range(200)]
    frame = spark.createDataFrame([(e["sym"], e["ts"], e["px"]) for e in events], "sym string, ts long, px long")
    got = [r.asDict() for r in apply_rules(frame, rules, SparkRunConfig(buckets=2)).matches("peaks").collect()]
    exp = Engine(rules).run([events]).matches
    assert len(exp) == 200 and sum(1 for r in exp if r["t"] is not None) > 20
    key = lambda r: (r["sym"], r["ts"], r["t"], r["px_after"])  # noqa: E731
    assert sorted(map(key, got), key=repr) == sorted(map(key, exp), key=repr)
