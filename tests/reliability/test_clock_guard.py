"""One far-future event no longer poisons the clock (issue 13, item 2).

An event dated 2199-12-31 among the bundled 2017 bars moved every rule's watermark to 2199, so
every later bar was late: 0 of 48 complex events, 2,490 late, exit 0. Now an event time more than
``max_future_skew`` (default one day) ahead of the wall clock is an error row, counted, that does
not move the clock; ``max_future_skew: none`` turns the guard off for data dated in the future.
The wall clock is injected (``Engine(clock=...)``, ``FixedClock``): no assertion here depends on
today's date.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import cep.events
from cep.cli import main
from cep.durable import DurableConfig, run_durable
from cep.engine import Engine
from cep.events import FixedClock, batch_from_records, event_times, parse_times
from patterns.errors import RuleErrors
from patterns.rules import load_rules, parse_rules

REPO = Path(__file__).resolve().parents[2]
BARS = REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl"
TRADING = REPO / "rules" / "trading.yaml"
FUTURE_BAR = {"symbol": "AAPL", "date": "2199-12-31", "open": 1, "high": 1, "low": 1, "close": 1, "volume": 1}
DAY = 86_400_000
END_OF_2017 = 1_514_764_800_000  # 2018-01-01T00:00:00Z: a clock just after the bars
CLOCK = FixedClock(END_OF_2017)


def bars() -> list[dict]:
    return [json.loads(x) for x in BARS.read_text().splitlines()]


def with_future_bar(at: int) -> list[dict]:
    rows = bars()
    return rows[:at] + [FUTURE_BAR] + rows[at:]


def run(events: list[dict], rules=None, clock=CLOCK, batch: int = 100):
    eng = Engine(rules if rules is not None else load_rules(TRADING), clock=clock)
    out = eng.process([])
    for i in range(0, len(events), batch):
        out.extend(eng.process(events[i : i + batch]))
    out.extend(eng.finish())
    return out, eng.counts()


def key(rows: list[dict]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


@pytest.mark.parametrize("at", [0, 10, 700, 1255])
def test_a_far_future_bar_is_an_error_and_the_48_complex_events_stay(at: int) -> None:
    clean, _ = run(bars())
    assert len(clean.matches) == 48
    out, counts = run(with_future_bar(at), batch=2000)  # one batch: its line numbers are the file's
    assert key(out.matches) == key(clean.matches) and out.late == []
    assert [(e["rule"], e["line"]) for e in out.errors] == [("v_shape", at + 1), ("three_up_then_drop", at + 1)]
    assert out.errors[0]["reason"] == (
        "event-time field 'date': event time in the future: '2199-12-31' (2199-12-31T00:00:00.000Z) is more "
        "than 1 day ahead of the clock (2018-01-01T00:00:00.000Z): check the event's time and the rule's "
        "time_unit; for data dated in the future (a synthetic replay) raise the rule's max_future_skew or set "
        "it to none")
    for c in counts.values():
        assert (c.read, c.errors, c.late) == (1256, 1, 0) and c.read == c.processed + c.late + c.errors + c.buffered


def test_without_the_guard_the_future_bar_poisons_the_clock_as_before() -> None:
    text = TRADING.read_text().replace("    sql: |", "    max_future_skew: none\n    sql: |")
    out, counts = run(with_future_bar(10), parse_rules(text, str(TRADING)))
    assert len(out.matches) == 0 and len(out.late) == 2490 and out.errors == []  # what the guard prevents


def test_the_guard_is_relative_to_the_clock_at_arrival() -> None:
    # the boundary: exactly the skew ahead is accepted, a millisecond more is refused
    b = batch_from_records([{"ts": END_OF_2017 + DAY}, {"ts": END_OF_2017 + DAY + 1}])
    assert event_times(b, "ts", clock=CLOCK)[1].tolist() == [True, False]
    assert event_times(b, "ts", max_future_skew_ms=None, clock=CLOCK)[1].tolist() == [True, True]
    # an event refused now is accepted once the clock has caught up (a live stream's clock moves)
    now = [END_OF_2017]
    rules = parse_rules(RULE)
    eng = Engine(rules, clock=lambda: now[0])
    early = eng.process([{"k": 1, "ts": END_OF_2017 + 2 * DAY, "v": 1}])
    now[0] += DAY
    later = eng.process([{"k": 1, "ts": END_OF_2017 + 2 * DAY, "v": 1}])
    assert len(early.errors) == 1 and later.errors == [] and eng.counts()["r"].processed + eng.counts()["r"].buffered == 1


RULE = """
rules:
  - name: r
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0, B.ts AS t1
        PATTERN (A B) DEFINE A AS A.v = 1, B AS B.v = 2)
"""

EVERY_KIND = """
rules:
  - name: pattern
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0, B.ts AS t1
        PATTERN (A B) DEFINE A AS A.v = 1, B AS B.v = 2)
  - name: analytics
    kind: analytics
    sql: SELECT k, COUNT(*) AS n, window_start FROM s GROUP BY k, TUMBLE(ts, INTERVAL '1' HOUR)
  - name: search
    kind: search
    from: s
    time_field: ts
    query: hello
"""


def test_every_rule_kind_refuses_the_future_event_and_keeps_its_clock() -> None:
    t = END_OF_2017 - DAY
    events = [{"k": 1, "ts": t, "v": 1, "text": "hello"}, {"k": 1, "ts": 7_258_032_000_000, "v": 2, "text": "hello"},
              {"k": 1, "ts": t + 1000, "v": 2, "text": "hello"}]
    out, counts = run(events, parse_rules(EVERY_KIND), batch=1)
    assert sorted(e["rule"] for e in out.errors) == ["analytics", "pattern", "search"]
    assert all("event time in the future: 7258032000000 (2199-12-31T00:00:00.000Z)" in e["reason"] for e in out.errors)
    assert out.late == []  # the on-time event after it is not late: the clock did not move
    by = {r["rule"]: r for r in out.matches}
    assert by["pattern"]["t1"] == t + 1000 and by["analytics"]["n"] == 2
    assert sum(r["rule"] == "search" for r in out.matches) == 2
    assert all(c.errors == 1 and c.late == 0 for c in counts.values())


def test_a_synthetic_stream_dated_in_the_future_needs_max_future_skew_none() -> None:
    t = 4_102_444_800_000  # 2100-01-01, a replay of synthetic data
    events = [{"k": 1, "ts": t + i, "v": v} for i, v in enumerate([1, 2, 1, 2])]
    guarded, _ = run(events, parse_rules(RULE))
    assert guarded.matches == [] and len(guarded.errors) == 4
    free, _ = run(events, parse_rules(RULE.replace("  - name: r\n", "  - name: r\n    max_future_skew: none\n")))
    assert [(m["t0"], m["t1"]) for m in free.matches] == [(t, t + 1), (t + 2, t + 3)] and free.errors == []


@pytest.mark.parametrize("text, want", [
    ("max_future_skew: 2 hours", 7_200_000),
    ("max_future_skew: 0", 0),
    ("max_future_skew: 60000", 60_000),
    ("max_future_skew: none", None),
    ("max_future_skew: None", None),
    ("", 86_400_000),
])
def test_max_future_skew_values(text: str, want: int | None) -> None:
    [rule] = parse_rules(RULE.replace("  - name: r\n", f"  - name: r\n    {text}\n"))
    assert rule.max_future_skew_ms == want


@pytest.mark.parametrize("text, message", [
    ("max_future_skew: -5", "rule 'r': max_future_skew must not be negative, found -5"),
    ("max_future_skew: soon", "rule 'r': max_future_skew: cannot read 'soon' as an interval; write milliseconds or "
                              "text such as '5 minutes'"),
    ("max_future_skew:", "rule 'r': max_future_skew is empty; write an interval such as '1 day', or none to accept "
                         "event times however far ahead of the clock"),
    ("max_future_skew: true", "rule 'r': max_future_skew must be milliseconds or text such as '5 minutes', found True"),
])
def test_bad_max_future_skew_is_a_rule_error_at_its_value(text: str, message: str) -> None:
    with pytest.raises(RuleErrors) as e:
        parse_rules(RULE.replace("  - name: r\n", f"  - name: r\n    {text}\n"), "rules.yaml")
    [err] = e.value.errors
    assert err.message == message
    assert "rules.yaml:4:" in err.format()  # the line of the value


@pytest.fixture
def pinned_clock(monkeypatch):
    """The CLI's and durable runs' wall clock, pinned just after the bars (they read cep.events')."""
    monkeypatch.setattr(cep.events, "wall_clock_ms", CLOCK)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cep_run_reports_the_future_bar_and_keeps_the_answer(tmp_path: Path, capsys, pinned_clock) -> None:
    src = write_jsonl(tmp_path / "bars.jsonl", with_future_bar(10))
    code = main(["run", str(TRADING), "--input", str(src), "--errors", str(tmp_path / "err.jsonl")])
    out, err = capsys.readouterr()
    assert code == 0 and len(out.splitlines()) == 48
    assert "cep run: 1,256 events, 48 complex events, 0 late, 2 errors" in err
    errors = [json.loads(x) for x in (tmp_path / "err.jsonl").read_text().splitlines()]
    assert [e["line"] for e in errors] == [11, 11]
    assert "is more than 1 day ahead of the clock (2018-01-01T00:00:00.000Z)" in errors[0]["reason"]


def test_a_durable_run_reports_the_future_bar_and_keeps_the_answer(tmp_path: Path, pinned_clock) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    write_jsonl(logs / "bars.jsonl", with_future_bar(10))
    cfg = DurableConfig(rules=str(TRADING), input=str(logs), state=str(tmp_path / "st"),
                        output=str(tmp_path / "out.jsonl"), errors=str(tmp_path / "err.jsonl"), finish=True,
                        quiet=True)
    assert run_durable(cfg) == 0
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 48
    errors = [json.loads(x) for x in (tmp_path / "err.jsonl").read_text().splitlines()]
    assert [(e["rule"], e["line"]) for e in errors] == [("v_shape", 11), ("three_up_then_drop", 11)]


def test_parse_times_refuses_only_valid_times_beyond_the_skew() -> None:
    values = np.array([1_000, "x", None, 86_401_001, "1970-01-02T00:00:01.001Z", 86_401_000], dtype=object)
    ms, ok, why = parse_times(values, now_ms=1_000, max_future_skew_ms=DAY)
    assert ok.tolist() == [True, False, False, False, False, True]  # at the skew exactly: accepted
    assert why[1] == "'x' is neither epoch milliseconds nor an ISO-8601 time" and why[2] == "missing (null)"
    assert why[3].startswith("event time in the future: 86401001 (1970-01-02T00:00:01.001Z) is more than 1 day")
    assert why[4].startswith("event time in the future: '1970-01-02T00:00:01.001Z' (1970-01-02T00:00:01.001Z)")


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
@pytest.mark.parametrize("mode", ["backfill", "stream"])
def test_spark_refuses_the_future_bar_as_the_embedded_engine_does(spark, tmp_path: Path, mode: str) -> None:
    from spark_udf.api import SparkRunConfig, apply_rules
    from tests.spark_udf.conftest import counted, match_key, sink_rows, write_events

    rules = load_rules(TRADING)
    rows = with_future_bar(10)
    exp, _ = run(rows)
    schema = "symbol string, date string, open double, high double, low double, close double, volume long"
    cfg = SparkRunConfig(buckets=4, clock=CLOCK)
    if mode == "backfill":
        write_jsonl(tmp_path / "bars.jsonl", rows)
        result = apply_rules(spark.read.schema(schema).json(str(tmp_path / "bars.jsonl")), rules, cfg)
        got = [r.asDict() for r in result.envelope.collect()]
        assert counted(got, "match") == counted([{**m, "output": "match"} for m in exp.matches], "match")
    else:
        # the future bar in the first micro-batch: if it moved Spark's watermark, every bar of the
        # second one would be late
        write_events(tmp_path / "in", 0, rows[:600])
        write_events(tmp_path / "in", 1, rows[600:])
        frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
        query = apply_rules(frame, rules, cfg).write_stream(str(tmp_path / "out"), str(tmp_path / "ck"))
        query.awaitTermination()
        got = sink_rows(spark, tmp_path / "out")
        assert len([r for r in got if r["output"] == "match"]) > 40  # a stream is not flushed at its end
        assert set(counted(got, "match")) <= {match_key(m) for m in exp.matches}
    assert [r for r in got if r["output"] == "late"] == []
    errors = sorted((r["rule"], r["reason"]) for r in got if r["output"] == "error")
    assert errors == sorted((e["rule"], e["reason"]) for e in exp.errors)
