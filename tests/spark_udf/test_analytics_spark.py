"""Analytics rules on Spark give the embedded engine's rows: streams (with a restart), backfills, typed columns."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cep.cli import spark as spark_cli
from cep.engine import Engine
from cep.events import read_events
from patterns.rules import load_rules, parse_rules
from spark_udf.api import SparkRunConfig, apply_rules
from spark_udf.core import MALFORMED
from tests.spark_udf.analytics_workload import ANALYTICS_YAML, SCHEMA, analytics_stream
from tests.spark_udf.conftest import event_of, write_events
from tests.spark_udf.test_analytics_core import analytics_key
from tests.spark_udf.workload import embedded

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

REPO = Path(__file__).resolve().parents[2]
WEBLOGS = REPO / "rules" / "weblogs.yaml"
NASA = REPO / "rules" / "data" / "nasa_http_sample.jsonl"
NASA_SCHEMA = "host string, time long, method string, url string, status long, bytes long"


def spark_matches(rows: list[dict[str, Any]]) -> Counter:
    """Match rows of a sink or a collected envelope, each under its rule's own column names."""
    out: Counter = Counter()
    for r in rows:
        if r.get("output") != "match":
            continue
        suffix = f"__{r['rule']}"
        out[analytics_key({k.removesuffix(suffix): v for k, v in r.items() if k not in ("output", "kind")})] += 1
    return out


def events_of(records: list[dict[str, Any]], output: str | None = None) -> Counter:
    """(rule, event) of late or error rows, the event as sorted items (ints and floats alike)."""
    return Counter((r["rule"], tuple(sorted(event_of(r).items()))) for r in records
                   if output is None or r.get("output") == output)


def test_weblogs_stream_restarted_from_its_checkpoint_gives_the_embedded_engines_rows(
        spark: Any, tmp_path: Path, capsys) -> None:
    lines = NASA.read_text().splitlines()
    parts = [lines[:1700], lines[1700:]]
    args = ["run", str(WEBLOGS), "--input", str(tmp_path / "in"), "--schema", NASA_SCHEMA,
            "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"),
            "--max-files-per-trigger", "1", "--buckets", "4", "--shuffle-partitions", "2"]
    write_events(tmp_path / "in", 0, parts[0])
    assert spark_cli.main(args) == 0
    first = capsys.readouterr().err
    write_events(tmp_path / "in", 1, parts[1])
    assert spark_cli.main(args) == 0  # the same command: continues from the checkpoint
    second = capsys.readouterr().err
    rows = [r.asDict(recursive=True) for r in spark.read.json(str(tmp_path / "out")).collect()]

    # each file is one micro-batch; the embedded engine reads the same two batches, unfinished
    exp = embedded(load_rules(WEBLOGS), [[json.loads(line) for line in part] for part in parts])
    assert spark_matches(rows) == Counter(analytics_key(m) for m in exp.matches)
    assert {m["rule"] for m in exp.matches} == {r.name for r in load_rules(WEBLOGS)}
    assert not [r for r in rows if r["output"] != "match"]
    n_first = int(re.search(r"([\d,]+) complex events", first).group(1).replace(",", ""))
    n_second = int(re.search(r"([\d,]+) complex events", second).group(1).replace(",", ""))
    assert n_first + n_second == len(exp.matches)
    assert 0 < n_first < len(exp.matches)


def test_weblogs_backfill_gives_typed_columns_and_the_embedded_engines_rows(spark: Any) -> None:
    frame = spark.read.schema(NASA_SCHEMA).json(str(NASA))
    rules = load_rules(WEBLOGS)
    result = apply_rules(frame, rules, SparkRunConfig(buckets=4))
    types = {f.name: f.dataType.simpleString() for f in result.matches("not_found_storm").schema.fields}
    assert types == {"not_found": "bigint", "clients": "bigint", "urls": "array<struct<value:string,count:bigint>>",
                     "window_start": "bigint", "window_end": "bigint", "rule": "string", "correction": "boolean",
                     "retract": "boolean"}
    assert result.matches("long_visits").schema["minutes"].dataType.simpleString() == "double"
    rows = [r.asDict(recursive=True) for r in result.envelope.collect()]
    exp = Engine(rules).run(read_events(NASA))
    assert spark_matches(rows) == Counter(analytics_key(m) for m in exp.matches)
    assert result.counts()["matches"] == len(exp.matches) > 50
    [first] = result.matches("top_urls_per_hour").orderBy("window_start").limit(1).collect()
    assert first["top_urls"][0].asDict() == {"value": "/images/KSC-logosmall.gif", "count": 48}


def _file_stream(spark: Any, folder: Path):
    from pyspark.sql import functions as F

    df = spark.readStream.schema(SCHEMA + ", _corrupt_record string").option("maxFilesPerTrigger", 1).json(str(folder))
    return df.withColumn("_cep_source", F.col("_metadata.file_path"))


def test_stream_of_every_window_and_sketch_gives_the_embedded_engines_rows(spark: Any, tmp_path: Path) -> None:
    # disorder across micro-batches (late events within the lateness: corrections, a retraction)
    files = analytics_stream(11, files=3, sort_files=True)
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(files)]
    result = apply_rules(_file_stream(spark, tmp_path / "in"), parse_rules(ANALYTICS_YAML),
                         SparkRunConfig(buckets=4, source_column="_cep_source"))
    query = result.write_stream(str(tmp_path / "out"), str(tmp_path / "ck"))
    query.awaitTermination()
    rows = [r.asDict(recursive=True) for r in spark.read.json(str(tmp_path / "out")).collect()]

    exp = embedded(parse_rules(ANALYTICS_YAML), files)
    assert spark_matches(rows) == Counter(analytics_key(m) for m in exp.matches)
    assert {r["rule"] for r in rows if r["output"] == "match"} == {"tumble", "hop", "session", "slide", "overall"}
    assert sum(1 for m in exp.matches if m["correction"]) >= 5 and any(m.get("retract") for m in exp.matches)
    assert events_of(rows, "late") == events_of(exp.late)
    # the event 6 s behind in files 1 and 2 for every rule; for 'overall' (lateness 0) more
    assert {r: n for r, n in Counter(r["rule"] for r in exp.late).items() if r != "overall"} == dict.fromkeys(
        ("tumble", "hop", "session", "slide"), 2)
    errors = [r for r in rows if r["output"] == "error"]
    assert [m["event"] for m in errors if m["reason"] == MALFORMED] == ['{"k": "a", "ts": 12, ']
    assert Counter((r["rule"], r["reason"]) for r in errors if r["reason"] != MALFORMED) == Counter(
        (r["rule"], r["reason"]) for r in exp.errors)
    assert len(query.recentProgress) == len(paths) + 1  # and the batch without data that moves the watermark


def test_backfill_of_every_window_and_sketch_gives_the_embedded_engines_rows(
        spark: Any, tmp_path: Path, capsys) -> None:
    # disorder inside files too: a backfill judges lateness in reading order, as the engine does
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(analytics_stream(3, files=3))]
    rules = tmp_path / "rules.yaml"
    rules.write_text(ANALYTICS_YAML)
    assert spark_cli.main(["backfill", str(rules), "--input", str(tmp_path / "in"), "--schema", SCHEMA,
                           "--output", str(tmp_path / "bf"), "--buckets", "3", "--shuffle-partitions", "2"]) == 0
    err = capsys.readouterr().err
    rows = [r.asDict(recursive=True) for r in spark.read.json(str(tmp_path / "bf")).collect()]
    exp = Engine(parse_rules(ANALYTICS_YAML)).run(b for p in paths for b in read_events(p))
    assert spark_matches(rows) == Counter(analytics_key(m) for m in exp.matches)
    assert sum(1 for m in exp.matches if m["correction"]) >= 20
    assert sorted((r["rule"], r["reason"]) for r in rows if r["output"] == "late") == sorted(
        (r["rule"], r["reason"]) for r in exp.late)
    assert f"cep spark backfill: {len(exp.matches):,} complex events, {len(exp.late)} late" in err
