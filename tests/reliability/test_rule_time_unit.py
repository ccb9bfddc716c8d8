"""Numeric event times in the rule's unit, and a warning when they look like another (issue 13, item 3).

The NASA log's ``time`` is epoch seconds; read as milliseconds, hourly windows gave one window dated
1970 covering the whole day, silently. A rule's ``time_unit`` (``s``, ``ms`` by default, ``us``,
``ns``) applies to numbers and numeric strings, in every rule kind, embedded and on Spark; ISO
strings, dates and timestamps carry their own. ``cep run``, durable runs and ``cep spark backfill``
warn once when the first batch's numbers look like another unit.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import cep.analytics.operator
import cep.operator
import cep.search_rules
from cep.cli import main
from cep.durable import DurableConfig, run_durable
from cep.engine import Engine, with_time_unit
from cep.events import batch_from_records, parse_times, read_events, unit_hint
from patterns.errors import RuleErrors
from patterns.rules import load_rules, parse_rules

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "rules" / "data" / "nasa_http_sample.jsonl"  # times in epoch ms
WEBLOGS, OPS = REPO / "rules" / "weblogs.yaml", REPO / "rules" / "ops.yaml"
MS_PER = {"s": 1000, "ms": 1, "us": 0.001, "ns": 0.000001}
RAW_TIMES = ("first_at", "last_at", "not_found_at", "second_at")  # pattern measures that copy the raw time field

HOURLY = """
rules:
  - name: per_hour
    kind: analytics
    {extra}
    sql: |
      SELECT COUNT(*) AS requests, window_start, window_end FROM requests GROUP BY TUMBLE(time, INTERVAL '1' HOUR)
"""

WARNING_S = (
    "cep run: warning: rule 'per_hour' reads the numeric event times in 'time' as epoch milliseconds, but they "
    "look like epoch seconds: their median 807,257,094 read as milliseconds is 1970-01-10T08:14:17.094Z, read "
    "as seconds 1995-08-01T06:04:54.000Z. If they are seconds, set 'time_unit: s' on the rule (cep run: "
    '--time-unit s); docs/semantics.md, "Event time"'
)


def sample() -> list[dict]:
    return [json.loads(x) for x in SAMPLE.read_text().splitlines()]


def in_unit(rows: list[dict], unit: str, field: str = "time") -> list[dict]:
    return [{**r, field: int(round(r[field] / MS_PER[unit]))} for r in rows]


def run(rules, events, batch: int = 500):
    eng = Engine(rules)
    out = eng.process([])
    for i in range(0, len(events), batch):
        out.extend(eng.process(events[i : i + batch]))
    out.extend(eng.finish())
    return out


def in_ms(rows: list[dict], unit: str) -> list[str]:
    """Rows with the raw time measures scaled back to ms, as sortable text."""
    return sorted(json.dumps({k: (int(v * MS_PER[unit]) if k in RAW_TIMES else v) for k, v in r.items()},
                             sort_keys=True) for r in rows)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------ reading numbers in a unit


def test_numbers_and_numeric_strings_are_read_in_the_unit() -> None:
    values = np.array([807256800, 807256800.123, "807256800", -1, "1995-08-01T09:00:00Z", True], dtype=object)
    ms, ok, why = parse_times(values, "s")
    assert ms[:5].tolist() == [807256800000, 807256800123, 807256800000, -1000, 807267600000]
    assert ok.tolist() == [True] * 5 + [False] and why[5] == "True is a boolean, not a time"
    # micro- and nanoseconds round down, towards the past, as Arrow's and Spark's casts do
    assert parse_times(np.array([1_999, -1]), "us")[0].tolist() == [1, -1]
    assert parse_times(np.array([1_999_999, -1]), "ns")[0].tolist() == [1, -1]
    assert parse_times(np.array([2**63 + 5], dtype=np.uint64), "ns")[2] == ["9223372036854775813 is out of range for epoch nanoseconds"]
    assert parse_times(np.array([2.5e6, np.nan]), "ns")[0][0] == 2


@pytest.mark.parametrize("values, unit, reason", [
    (np.array([10**17]), "s", "100000000000000000 is out of range for epoch seconds"),
    (np.array([10**17], dtype=object), "s", "100000000000000000 is out of range for epoch seconds"),
    (np.array(["100000000000000000"], dtype=object), "s", "'100000000000000000' is out of range for epoch seconds"),
    (np.array([float("inf")]), "s", "inf is not a finite epoch-second time"),
    (np.array(["soon"], dtype=object), "us", "'soon' is neither epoch microseconds nor an ISO-8601 time"),
    (np.array([8_000_000_000_000]), "s", "8000000000000 is after 2200-01-01T00:00:00.000Z, the latest accepted event time"),
])
def test_numbers_that_are_no_time_in_the_unit_say_so(values, unit: str, reason: str) -> None:
    _, ok, why = parse_times(values, unit)
    assert not ok[0] and why[0] == reason


@pytest.mark.parametrize("unit", ["s", "us", "ns"])
def test_every_example_rule_gives_the_same_rows_in_every_unit(unit: str) -> None:
    rules = [*load_rules(WEBLOGS), *load_rules(OPS)]
    want = run(rules, sample())
    got = run(with_time_unit(rules, unit), in_unit(sample(), unit))
    assert len(want.matches) == 58 + 188
    assert in_ms(got.matches, unit) == in_ms(want.matches, "ms") and got.errors == got.late == []


def test_dates_timestamps_and_iso_strings_ignore_the_unit() -> None:
    rules = parse_rules(HOURLY.format(extra="time_unit: s"))
    rows = sample()[:1200]
    want = run(parse_rules(HOURLY.format(extra="")), rows).matches
    iso = [{**r, "time": pd.Timestamp(r["time"], unit="ms", tz="UTC").isoformat()} for r in rows]
    assert run(rules, iso).matches == want
    frame = pd.DataFrame({"time": pd.to_datetime([r["time"] for r in rows], unit="ms")})  # datetime64 column
    assert Engine(rules).run([frame]).matches == want
    table = pa.table({"time": pa.array([r["time"] for r in rows], pa.timestamp("ms"))})
    assert Engine(rules).run([table]).matches == want
    py = [{"time": ts.to_pydatetime()} for ts in frame["time"]]  # datetime objects in records
    assert Engine(rules).run([py]).matches == want


def test_access_logs_are_read_in_ms_whatever_the_unit() -> None:
    log = REPO / "rules" / "data" / "apache_access_sample.log"
    want = Engine(load_rules(WEBLOGS)).run(read_events(log)).matches
    got = Engine(with_time_unit(load_rules(WEBLOGS), "s")).run(read_events(log)).matches
    assert got == want and len(want) > 0


def test_merged_inputs_of_timestamps_and_seconds_keep_their_time_order(tmp_path: Path, capsys) -> None:
    rows = sample()[:1000]
    a, b = rows[::2], rows[1::2]
    pq.write_table(pa.table({"time": pa.array([r["time"] for r in a], pa.timestamp("ms")),
                             "host": [r["host"] for r in a]}), tmp_path / "a.parquet")
    write_jsonl(tmp_path / "b.jsonl", in_unit([{"time": r["time"], "host": r["host"]} for r in b], "s"))
    (tmp_path / "r.yaml").write_text(HOURLY.format(extra="time_unit: s"))
    code = main(["run", str(tmp_path / "r.yaml"), "--input", f"a={tmp_path / 'a.parquet'}",
                 "--input", f"b={tmp_path / 'b.jsonl'}", "--batch-size", "64"])
    out, err = capsys.readouterr()
    want = Counter(r["time"] // 3_600_000 * 3_600_000 for r in rows)
    assert code == 0 and f"1,000 events, {len(want)} complex events, 0 late, 0 errors" in err
    assert {json.loads(x)["window_start"]: json.loads(x)["requests"] for x in out.splitlines()} == want


# ------------------------------------------------------------------ rule files and the command line


def test_an_unknown_unit_in_the_api_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^unknown time unit 'min'; expected one of s, ms, us, ns$"):
        parse_times(np.array([1]), "min")
    with pytest.raises(ValueError, match=r"^unknown time unit 'min'; expected one of s, ms, us, ns$"):
        with_time_unit(load_rules(WEBLOGS), "min")


def test_time_unit_in_a_rule_file() -> None:
    [rule] = parse_rules(HOURLY.format(extra="time_unit: ns"))
    assert rule.time_unit == "ns" and parse_rules(HOURLY.format(extra="")).rules[0].time_unit == "ms"
    with pytest.raises(RuleErrors) as e:
        parse_rules(HOURLY.format(extra="time_unit: minutes"), "r.yaml")
    [err] = e.value.errors
    assert err.message == ("rule 'per_hour': time_unit must be one of s, ms, us, ns (the unit of numeric event "
                           "times: epoch seconds, milliseconds, microseconds, nanoseconds), found 'minutes'")
    assert err.format().startswith("r.yaml:5:16: ")


def test_cep_run_warns_once_and_time_unit_fixes_it(tmp_path: Path, capsys) -> None:
    src = write_jsonl(tmp_path / "seconds.jsonl", in_unit(sample(), "s"))
    (tmp_path / "r.yaml").write_text(HOURLY.format(extra=""))
    assert main(["run", str(tmp_path / "r.yaml"), "--input", str(src), "--batch-size", "100", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and err.splitlines() == [WARNING_S]  # once, though 30 batches
    assert main(["run", str(tmp_path / "r.yaml"), "--input", str(src), "--time-unit", "s", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3 and err == ""
    (tmp_path / "s.yaml").write_text(HOURLY.format(extra="time_unit: s"))
    assert main(["run", str(tmp_path / "s.yaml"), "--input", str(src), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_one_warning_names_every_rule_that_reads_the_field_wrong(tmp_path: Path, capsys) -> None:
    src = write_jsonl(tmp_path / "seconds.jsonl", in_unit(sample(), "s"))
    assert main(["run", str(WEBLOGS), "--input", str(src), "--quiet"]) == 0
    [line] = capsys.readouterr().err.splitlines()
    names = ", ".join(repr(r.name) for r in load_rules(WEBLOGS))
    assert line.startswith(f"cep run: warning: rules {names} read the numeric event times in 'time' as epoch "
                           "milliseconds, but they look like epoch seconds")


@pytest.mark.parametrize("unit, looks", [("us", "microseconds"), ("ns", "nanoseconds")])
def test_finer_units_read_as_ms_warn_too(tmp_path: Path, capsys, unit: str, looks: str) -> None:
    src = write_jsonl(tmp_path / "t.jsonl", in_unit(sample()[:50], unit))
    (tmp_path / "r.yaml").write_text(HOURLY.format(extra=""))
    assert main(["run", str(tmp_path / "r.yaml"), "--input", str(src)]) == 0
    err = capsys.readouterr().err
    assert f"but they look like epoch {looks}" in err and "out of range (before 1900 or after 2200)" in err
    assert "50 events, 0 complex events, 0 late, 50 errors" in err  # refused, not silently wrong


@pytest.mark.parametrize("rows, unit, looks", [
    ([{"time": t} for t in range(0, 1000, 10)], "ms", None),  # small synthetic times: no unit fits better
    ([{"time": 807256800000}], "ms", None),
    ([{"time": "1995-08-01T09:00:00Z"}], "s", None),  # ISO carries its own unit
    ([{"time": 807256800}], "s", None),
    ([{"time": "807256800"}, {"time": "x"}, {"time": True}], "ms", "s"),  # numeric strings count, the rest not
    ([{"time": 807256800000}], "s", "ms"),  # milliseconds read as seconds: year 25,550
    ([{"time": 807256800.0}], "ns", "s"),
])
def test_the_unit_check(rows: list[dict], unit: str, looks: str | None) -> None:
    hint = unit_hint(batch_from_records(rows), "time", unit)
    assert (hint and hint.looks_like) == looks


def test_the_unit_is_checked_on_the_first_batch_only(monkeypatch) -> None:
    calls = Counter()

    def counting(module):
        real = module.unit_hint

        def wrapped(batch, field, unit="ms", sample=10_000):
            calls[module.__name__] += 1
            return real(batch, field, unit, sample)
        monkeypatch.setattr(module, "unit_hint", wrapped)

    for module in (cep.operator, cep.analytics.operator, cep.search_rules):
        counting(module)
    rules = parse_rules("""
rules:
  - name: p
    sql: SELECT * FROM r MATCH_RECOGNIZE (ORDER BY time PATTERN (A) DEFINE A AS A.status = 404)
  - name: a
    kind: analytics
    sql: SELECT COUNT(*) AS n FROM r GROUP BY TUMBLE(time, INTERVAL '1' HOUR)
  - name: s
    kind: search
    from: r
    time_field: time
    query: shuttle
""")
    eng = Engine(rules)
    warnings = []
    for i in range(0, 3000, 100):
        warnings += eng.process(in_unit(sample()[i : i + 100], "s")).warnings
    assert calls == {"cep.operator": 1, "cep.analytics.operator": 1, "cep.search_rules": 1}
    assert len(warnings) == 1 and warnings[0].startswith("warning: rules 'p', 'a', 's' read")


def test_a_durable_run_warns_and_keeps_its_time_unit(tmp_path: Path) -> None:
    import io

    logs = tmp_path / "logs"
    logs.mkdir()
    write_jsonl(logs / "a.jsonl", in_unit(sample(), "s"))
    (tmp_path / "r.yaml").write_text(HOURLY.format(extra=""))

    def cfg(**kw) -> DurableConfig:
        return DurableConfig(rules=str(tmp_path / "r.yaml"), input=str(logs), state=str(tmp_path / kw.pop("st", "st")),
                             output=str(tmp_path / kw.pop("out", "out.jsonl")), quiet=True, batch_lines=100, **kw)

    err = io.StringIO()
    assert run_durable(cfg(), err) == 0
    assert err.getvalue().splitlines() == [WARNING_S]
    err = io.StringIO()
    assert run_durable(cfg(st="st2", out="out2.jsonl", time_unit="s", finish=True), err) == 0
    assert err.getvalue() == "" and len((tmp_path / "out2.jsonl").read_text().splitlines()) == 3
    err = io.StringIO()
    assert run_durable(cfg(st="st2", out="out2.jsonl"), err) == 2
    assert err.getvalue() == (f"cep run: state {str(tmp_path / 'st2')!r} was written with --time-unit s, this run asks "
                              "for no --time-unit (it decides every event's time); pass the same or a new --state\n")


def test_merged_inputs_need_one_unit_per_field(tmp_path: Path, capsys) -> None:
    src = write_jsonl(tmp_path / "a.jsonl", sample()[:10])
    (tmp_path / "r.yaml").write_text(HOURLY.format(extra="time_unit: s") + """
  - name: other
    kind: analytics
    sql: SELECT COUNT(*) AS n FROM requests GROUP BY TUMBLE(time, INTERVAL '1' DAY)
""")
    assert main(["run", str(tmp_path / "r.yaml"), "--input", f"a={src}", "--input", f"b={src}"]) == 2
    assert capsys.readouterr().err == (
        "cep run: the rules read the event-time field 'time' in different time units (ms: other; s: per_hour), so "
        "merged inputs have no one time order; give them one time_unit (or pass --time-unit)\n")


@pytest.mark.data
def test_the_full_nasa_day_in_seconds(shared_data: Path, capsys) -> None:
    """The examples over the full log (epoch seconds) with --time-unit s: the rows of the day in ms."""
    tsv = shared_data / "nasa_http_1995-08-01.tsv"
    batches = list(read_events(tsv))
    for b in batches:  # the same fields as the CLI reads, the times converted to ms by hand
        b.columns["time"] = b.columns["time"] * 1000
    rules = [*load_rules(WEBLOGS), *load_rules(OPS)]
    want = Engine(rules).run(batches).matches
    rows = []
    for rf in (WEBLOGS, OPS):
        assert main(["run", str(rf), "--input", str(tsv), "--time-unit", "s", "--quiet"]) == 0
        out, err = capsys.readouterr()
        rows += [json.loads(x) for x in out.splitlines()]
        assert err == ""
    assert len(want) > 500 and in_ms(rows, "s") == in_ms(want, "ms")
    # without --time-unit: the warning, and the one 1970 window the examples used to give silently
    assert main(["run", str(WEBLOGS), "--input", str(tsv), "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "look like epoch seconds" in err
    top = [json.loads(x) for x in out.splitlines() if json.loads(x)["rule"] == "top_urls_per_hour"]
    assert [r["window_start"] for r in top] == [806400000]  # 1970-01-10: what the warning is for


# ------------------------------------------------------------------ Spark


SPARK_RULES = """
rules:
  - name: per_hour
    kind: analytics
    time_unit: {unit}
    sql: |
      SELECT COUNT(*) AS requests, COUNT(DISTINCT host) AS hosts, window_start FROM requests
      GROUP BY TUMBLE(time, INTERVAL '1' HOUR)
  - name: retries
    time_unit: {unit}
    sql: |
      SELECT * FROM requests MATCH_RECOGNIZE (PARTITION BY host ORDER BY time
        MEASURES FIRST(N.url) AS url, COUNT(N.*) AS attempts, FIRST(N.time) AS first_at
        PATTERN (N{{3,}}) WITHIN INTERVAL '5' MINUTE DEFINE N AS N.status = 404 AND N.url = FIRST(N.url))
"""


def _no_retract(row: dict) -> dict:
    """A Spark row as the engine's: analytics rows say ``retract`` only when true."""
    return {k: v for k, v in row.items() if not (k == "retract" and v is False)}


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
@pytest.mark.parametrize("mode, typ", [("backfill", "bigint"), ("stream", "bigint"), ("stream", "string")])
def test_spark_reads_the_unit_as_the_embedded_engine(spark, tmp_path: Path, mode: str, typ: str) -> None:
    from spark_udf.api import SparkRunConfig, apply_rules
    from tests.spark_udf.conftest import counted, match_key, sink_rows, write_events

    rules = parse_rules(SPARK_RULES.format(unit="s"))
    rows = in_unit(sample(), "s")
    if typ == "string":
        rows = [{**r, "time": str(r["time"])} for r in rows]
    schema = f"host string, time {typ}, method string, url string, status bigint, bytes bigint"
    exp = Engine(rules).run([rows[:1500], rows[1500:]])
    assert {m["rule"] for m in exp.matches} == {"per_hour", "retries"}
    if mode == "backfill":
        write_jsonl(tmp_path / "a.jsonl", rows)
        got = [r.asDict() for r in apply_rules(spark.read.schema(schema).json(str(tmp_path / "a.jsonl")), rules,
                                               SparkRunConfig(buckets=4)).envelope.collect()]
        got = [_no_retract(r) for r in got]
        assert counted(got, "match") == Counter(match_key(m) for m in exp.matches)
    else:
        write_events(tmp_path / "in", 0, rows[:1500])
        write_events(tmp_path / "in", 1, rows[1500:])
        frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
        query = apply_rules(frame, rules, SparkRunConfig(buckets=4)).write_stream(str(tmp_path / "out"),
                                                                                 str(tmp_path / "ck"))
        query.awaitTermination()
        got = [_no_retract(r) for r in sink_rows(spark, tmp_path / "out")]
        # a stream is not flushed at its end: the last hour and the open retries stay open
        stream = Engine(rules)
        want = stream.process(rows[:1500]).matches + stream.process(rows[1500:]).matches
        assert counted(got, "match") == Counter(match_key(m) for m in want)
        assert sum(r["rule"] == "per_hour" for r in want) == 2
    assert [r for r in got if r["output"] in ("late", "error")] == []


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_spark_timestamps_ignore_the_unit_and_one_query_needs_one_unit(spark) -> None:
    import datetime as dt

    from patterns.errors import CepError
    from spark_udf.api import apply_rules, time_unit_warnings

    t0 = dt.datetime(1995, 8, 1, 6, tzinfo=dt.timezone.utc)
    frame = spark.createDataFrame([("h", t0 + dt.timedelta(minutes=m), 200, "/a") for m in range(0, 150, 10)],
                                  "host string, time timestamp, status bigint, url string")
    rules = parse_rules(SPARK_RULES.format(unit="s"))
    got = apply_rules(frame, rules).matches("per_hour").collect()
    hour = 3_600_000
    start = int(t0.timestamp() * 1000)
    # collected timestamps are naive local times, as PySpark made them from t0
    assert sorted((int(r["window_start"].timestamp() * 1000), r["requests"]) for r in got) == [
        (start, 6), (start + hour, 6), (start + 2 * hour, 3)]
    assert time_unit_warnings(frame, rules) == []  # a timestamp column has no unit to get wrong
    mixed = parse_rules(SPARK_RULES.format(unit="s").replace("    time_unit: s\n    sql: |\n      SELECT * FROM",
                                                              "    sql: |\n      SELECT * FROM"))
    with pytest.raises(CepError) as e:
        apply_rules(spark.createDataFrame([("h", 1, 200, "/a")], "host string, time bigint, status bigint, url string"),
                    mixed)
    assert str(e.value) == (
        "rules read their event times differently (time_unit s, max_future_skew 1 day: per_hour; time_unit ms, "
        "max_future_skew 1 day: retries); one Spark query has one watermark, shared by every pattern and "
        "analytics rule and every search rule with a time_field: give them one time_unit and max_future_skew, "
        "or run them as separate queries (one rule file each)")


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_spark_backfill_warns_from_the_first_rows(spark, tmp_path: Path) -> None:
    from spark_udf.api import time_unit_warnings

    write_jsonl(tmp_path / "a.jsonl", in_unit(sample(), "s"))
    frame = spark.read.schema("host string, time bigint, status bigint, url string").json(str(tmp_path / "a.jsonl"))
    [w] = time_unit_warnings(frame, parse_rules(SPARK_RULES.format(unit="ms")))
    assert w.startswith("warning: rules 'per_hour', 'retries' read the numeric event times in 'time' as epoch "
                        "milliseconds, but they look like epoch seconds: their median")
    assert time_unit_warnings(frame, parse_rules(SPARK_RULES.format(unit="s"))) == []
    stream = spark.readStream.schema("host string, time bigint").json(str(tmp_path))
    assert time_unit_warnings(stream, parse_rules(SPARK_RULES.format(unit="ms"))) == []
