"""Timestamp columns under pandas 3: Spark's event times equal the embedded engine's on the same data.

PySpark 4.3 warns that it does not fully support pandas >= 3, whose parsed datetimes are
``datetime64[us]`` (pandas 2: ``[ns]``). These tests take that case head on: the same pandas 3
frame, with microsecond times (between two milliseconds, so that a unit slip or a rounding
difference shows) in a zone-aware and a naive column, goes through the embedded engine (as a
DataFrame and from Parquet) and through Spark (a backfill from Parquet, a backfill from
``createDataFrame``, and a stream from Parquet files), and every row must agree: pattern measures
that copy the time, analytics window bounds, late events and their reasons.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cep.engine import Engine
from cep.events import read_events
from patterns.rules import parse_rules
from spark_udf.api import SparkRunConfig, apply_rules

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

RULES = """
rules:
  - name: rise
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY {col}
        MEASURES FIRST(A.{col}) AS t0, LAST(B.{col}) AS t1, COUNT(B.*) AS n
        PATTERN (A B+) WITHIN INTERVAL '10' MINUTE DEFINE B AS px > PREV(px))
  - name: per_minute
    kind: analytics
    lateness: 30 seconds
    sql: |
      SELECT k, COUNT(*) AS n, SUM(px) AS total, window_start, window_end FROM t
      GROUP BY k, TUMBLE({col}, INTERVAL '1' MINUTE)
"""

START = pd.Timestamp("2017-07-28T07:00:00.000999Z")  # a microsecond short of the next millisecond


def frame() -> pd.DataFrame:
    """Two keys, prices that rise and fall, a few events out of order (one late), pandas 3 dtypes."""
    steps = [0, 7, 15, 22, 31, 40, 38, 52, 61, 75, 83, 5, 95, 104, 118, 126, 133, 141, 150, 162]
    ts = [START + pd.Timedelta(seconds=s, microseconds=250 * (i % 4)) for i, s in enumerate(steps)]
    df = pd.DataFrame({
        "k": ["a" if i % 3 else "b" for i in range(len(ts))],
        "at": pd.Series(ts).astype("datetime64[us, UTC]"),
        "px": [10.0, 11, 12, 9, 10, 13, 14, 8, 9, 10, 11, 12, 7, 8, 9, 10, 6, 7, 8, 9],
    })
    df["naive"] = df["at"].dt.tz_localize(None)
    assert str(df["at"].dtype) == "datetime64[us, UTC]" and str(df["naive"].dtype) == "datetime64[us]"
    return df


def ms_of(v: Any, ntz: bool) -> Any:
    """A collected Spark time as epoch ms (other values as they are): a ``timestamp_ntz`` comes
    back as the naive UTC wall time, a ``timestamp`` as the naive local time PySpark made it from."""
    if isinstance(v, dt.datetime):
        if ntz:
            v = v.replace(tzinfo=dt.timezone.utc)
        return round(v.timestamp() * 1000)
    return v


def rows_of(out_rows: list[dict], col: str, ntz: bool = False) -> list[tuple]:
    keep = ("rule", "k", "t0", "t1", "n", "total", "window_start", "window_end")
    return sorted(tuple((f, ms_of(r.get(f), ntz)) for f in keep if r.get(f) is not None) for r in out_rows)


def late_of(rows: list[dict]) -> list[tuple[str, str]]:
    return sorted((r["rule"], r["reason"]) for r in rows)


@pytest.mark.parametrize("col", ["at", "naive"])
def test_spark_timestamp_columns_give_the_embedded_engines_event_times(spark: Any, tmp_path: Path, col: str) -> None:
    from tests.spark_udf.conftest import sink_rows

    rules = parse_rules(RULES.format(col=col))
    df = frame()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "t.parquet")
    embedded = Engine(rules).run([df])
    from_file = Engine(rules).run(read_events(tmp_path / "t.parquet"))
    assert rows_of(embedded.matches, col) == rows_of(from_file.matches, col)
    assert {r["rule"] for r in embedded.matches} == {"rise", "per_minute"} and len(embedded.late) == 3
    # the times the engine saw are the frame's, floored to the millisecond
    want_ms = [int(t.value // 1000) // 1000 for t in df["at"]]
    assert read_events(tmp_path / "t.parquet").__next__().column(col).tolist() == want_ms

    expected = rows_of(embedded.matches, col)
    for source in ("parquet", "pandas"):
        sdf = spark.read.parquet(str(tmp_path / "t.parquet")) if source == "parquet" else spark.createDataFrame(df)
        typ = dict(sdf.dtypes)[col]
        assert typ == ("timestamp" if col == "at" or source == "pandas" else "timestamp_ntz"), (source, typ)
        got = [r.asDict() for r in apply_rules(sdf, rules, SparkRunConfig(buckets=2)).envelope.collect()]
        assert rows_of([r for r in got if r["output"] == "match"], col, typ == "timestamp_ntz") == expected, source
        assert late_of([r for r in got if r["output"] == "late"]) == late_of(embedded.late), source

    # a stream of two Parquet files: the rows a stream gives (no flush at the end). In time order:
    # within one micro-batch a stream accepts what the embedded engine finds late (docs/spark.md)
    (tmp_path / "in").mkdir()
    df = df.sort_values("at", kind="stable").reset_index(drop=True)
    half = len(df) // 2
    for i, part in enumerate((df.iloc[:half], df.iloc[half:])):
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False),
                       tmp_path / "in" / f"part-{i}.parquet")
        # the file source reads files in modification-time order: tied (two files written within
        # its resolution) the second could come first, its rows then late (as conftest.write_events)
        os.utime(tmp_path / "in" / f"part-{i}.parquet", (1_600_000_000 + i, 1_600_000_000 + i))
    schema = spark.read.parquet(str(tmp_path / "t.parquet")).schema
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in"))
    query = apply_rules(stream, rules, SparkRunConfig(buckets=2)).write_stream(str(tmp_path / "out"),
                                                                             str(tmp_path / "ck"))
    query.awaitTermination()
    got = sink_rows(spark, tmp_path / "out")
    eng = Engine(rules)
    want = eng.process(df.iloc[:half]).matches + eng.process(df.iloc[half:]).matches
    assert len(want) >= 3
    # the JSON sink writes times as text, with the offset for a timestamp, without for timestamp_ntz (UTC)
    for r in got:
        for f in ("t0", "t1", "window_start", "window_end"):
            if isinstance(r.get(f), str):
                t = pd.Timestamp(r[f])
                r[f] = (t if t.tzinfo else t.tz_localize("UTC")).value // 1_000_000
    assert rows_of([r for r in got if r["output"] == "match"], col) == rows_of(want, col)
