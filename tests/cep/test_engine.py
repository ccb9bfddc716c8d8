"""The embedded engine: many rules, event time, late and bad events, inputs of every kind."""

from __future__ import annotations

import math

import pandas as pd
import pyarrow as pa
import pytest

from cep.engine import Engine
from cep.operator import StateVersionError
from patterns.rules import parse_rules

RULES = """
rules:
  - name: rise
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY sym ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, LAST(B.ts) AS t1, LAST(B.px) - A.px AS gain
        PATTERN (A B{2,})
        DEFINE B AS B.px > PREV(B.px))
  - name: dip
    lateness: 10
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY sym ORDER BY ts
        MEASURES A.ts AS t0, B.px AS low
        PATTERN (A B)
        DEFINE B AS B.px < A.px * 0.9)
"""


def ticks(prices: dict[str, list[float]], step: int = 10) -> list[dict]:
    ev = []
    for sym, ps in prices.items():
        for i, p in enumerate(ps):
            ev.append({"sym": sym, "ts": i * step, "px": p})
    return sorted(ev, key=lambda e: e["ts"])


def test_many_rules_in_one_pass_each_row_names_its_rule():
    eng = Engine(parse_rules(RULES))
    out = eng.run([ticks({"X": [1, 2, 3, 4, 1, 5], "Y": [10, 8, 9]})])
    by_rule = {}
    for r in out.matches:
        by_rule.setdefault(r["rule"], []).append(r)
    assert by_rule["rise"] == [{"sym": "X", "t0": 0, "t1": 30, "gain": 3, "rule": "rise"}]
    assert sorted((r["sym"], r["t0"]) for r in by_rule["dip"]) == [("X", 30), ("Y", 0)]


def test_iso_times_and_epoch_ms_agree():
    eng1 = Engine(parse_rules(RULES))
    eng2 = Engine(parse_rules(RULES))
    ev = ticks({"X": [1, 2, 3, 4]}, step=1000)
    iso = [dict(e, ts=pd.Timestamp(e["ts"], unit="ms", tz="UTC").isoformat()) for e in ev]
    a = [r for r in eng1.run([ev]).matches if r["rule"] == "rise"]
    b = [r for r in eng2.run([iso]).matches if r["rule"] == "rise"]
    assert len(a) == len(b) == 1
    assert b[0]["t0"] == "1970-01-01T00:00:00+00:00"


def test_late_events_are_reported_counted_never_dropped_silently():
    eng = Engine(parse_rules(RULES))
    eng.process(ticks({"X": [1, 2, 3]}))  # max ts 20
    out = eng.process([{"sym": "X", "ts": 12, "px": 9}])
    rise_late = [r for r in out.late if r["rule"] == "rise"]
    assert len(rise_late) == 1
    assert "8 ms behind the watermark" in rise_late[0]["reason"]
    assert "allowed lateness 0 ms" in rise_late[0]["reason"]
    assert rise_late[0]["event"] == {"sym": "X", "ts": 12, "px": 9}
    # 'dip' allows 10 ms: the same event is on time there
    assert not [r for r in out.late if r["rule"] == "dip"]
    c = eng.counts()
    assert c["rise"].late == 1 and c["dip"].late == 0
    eng.finish()
    for name, cnt in eng.counts().items():
        assert cnt.read == cnt.processed + cnt.late + cnt.errors + cnt.buffered, name


@pytest.mark.parametrize(
    "event,reason",
    [
        ({"ts": 1, "px": 1}, "partition field 'sym' is missing (null)"),
        ({"sym": "X", "px": 1}, "event-time field 'ts': missing (null)"),
        ({"sym": "X", "ts": "yesterday", "px": 1}, "'yesterday' is neither epoch milliseconds nor an ISO-8601 time"),
        ({"sym": "X", "ts": True, "px": 1}, "True is a boolean, not a time"),
        ({"sym": "X", "ts": math.inf, "px": 1}, "inf is not a finite epoch-millisecond time"),
        ({"sym": "X", "ts": [1], "px": 1}, "[1] is a list, not a time"),
        ({"sym": {"a": 1}, "ts": 1, "px": 1}, "partition field 'sym' holds a dict"),
    ],
)
def test_bad_events_go_to_errors_and_the_rest_flows(event, reason):
    eng = Engine(parse_rules(RULES))
    good = ticks({"X": [1, 2, 3, 4]})
    out = eng.run([good[:2] + [event] + good[2:]])
    errs = [e for e in out.errors if e["rule"] == "rise"]
    assert len(errs) == 1 and reason in errs[0]["reason"], errs
    assert errs[0]["line"] == 3
    assert [r["rule"] for r in out.matches].count("rise") == 1
    c = eng.counts()["rise"]
    assert (c.read, c.processed, c.errors) == (5, 4, 1)


def test_wrong_type_in_a_condition_is_counted_not_fatal():
    eng = Engine(parse_rules(RULES))
    ev = ticks({"X": [1, 2, 3, 4]})
    ev[2]["px"] = "n/a"
    out = eng.run([ev])
    assert eng.counts()["rise"].eval_errors >= 1
    assert all(r["rule"] != "rise" or r["t1"] != 20 for r in out.matches)


def test_pandas_and_arrow_inputs_give_the_same_rows():
    ev = ticks({"X": [1, 2, 3, 4, 1, 5, 6, 7], "Y": [3, 4, 5, 6]})
    want = Engine(parse_rules(RULES)).run([ev]).matches
    df = pd.DataFrame(ev)
    assert Engine(parse_rules(RULES)).run([df]).matches == want
    tbl = pa.Table.from_pylist(ev)
    assert Engine(parse_rules(RULES)).run([tbl]).matches == want


def test_streams_route_by_from_and_merge_across_streams():
    rules = parse_rules(
        """
rules:
  - name: search_then_click
    sql: |
      SELECT * FROM events MATCH_RECOGNIZE (
        PARTITION BY session ORDER BY ts
        MEASURES S.q AS query, C.url AS url, C.ts - S.ts AS delay
        PATTERN (S X*? C) WITHIN INTERVAL '1' HOUR
        DEFINE S AS S.stream = 'searches', C AS C.stream = 'clicks')
  - name: clicks_only
    sql: |
      SELECT * FROM clicks MATCH_RECOGNIZE (
        PARTITION BY session ORDER BY ts MEASURES COUNT(*) AS n PATTERN (C{2}) DEFINE C AS TRUE)
"""
    )
    eng = Engine(rules, streams=["searches", "clicks"])
    out = eng.process([{"session": 1, "ts": 0, "q": "shoes"}], stream="searches")
    out.extend(eng.process([{"session": 1, "ts": 60_000, "url": "/a"}, {"session": 1, "ts": 120_000, "url": "/b"}], stream="clicks"))
    out.extend(eng.finish())
    sc = [r for r in out.matches if r["rule"] == "search_then_click"]
    assert sc == [{"session": 1, "query": "shoes", "url": "/a", "delay": 60_000, "rule": "search_then_click"}]
    co = [r for r in out.matches if r["rule"] == "clicks_only"]
    assert co == [{"session": 1, "n": 2, "rule": "clicks_only"}]
    assert eng.counts()["clicks_only"].read == 2

    # the same events merged into one batch in time order (as `cep run --input a=... --input b=...`
    # reads them), each tagged with its stream: each rule still reads what its FROM names
    merged = Engine(rules, streams=["searches", "clicks"])
    out = merged.process([
        {"session": 1, "ts": 0, "q": "shoes", "stream": "searches"},
        {"session": 1, "ts": 30_000, "q": "boots", "stream": "searches"},
        {"session": 1, "ts": 60_000, "url": "/a", "stream": "clicks"},
        {"session": 1, "ts": 120_000, "url": "/b", "stream": "clicks"},
    ])
    out.extend(merged.finish())
    assert [r for r in out.matches if r["rule"] == "clicks_only"] == co  # no search row between the clicks
    assert merged.counts()["clicks_only"].read == 2 and merged.counts()["search_then_click"].read == 4


def test_engine_snapshot_restore_and_version_errors():
    rules = parse_rules(RULES)
    ev = ticks({"X": [1, 2, 3, 4, 1, 5, 6, 7, 8], "Y": [5, 1, 2, 3, 4]})
    want = Engine(rules).run([ev]).matches
    eng = Engine(rules)
    got = eng.process(ev[:6]).matches
    blob = eng.snapshot()
    eng2 = Engine(parse_rules(RULES))
    eng2.restore(blob)
    got += eng2.run([ev[6:]]).matches
    assert sorted(map(str, got)) == sorted(map(str, want))
    with pytest.raises(StateVersionError, match="not an engine snapshot of this version"):
        eng2.restore(b"garbage")
    op = eng2.operators["rise"]
    with pytest.raises(StateVersionError, match="state version 99"):
        op.restore(bytes([99]) + b"x")
    other = Engine(parse_rules(RULES.replace("B{2,}", "B{3,}")))
    with pytest.raises(StateVersionError, match="different pattern"):
        other.restore(blob)


def test_all_rows_per_match_outputs_every_row_with_running_measures():
    rules = parse_rules(
        """
rules:
  - name: run
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts
        MEASURES CLASSIFIER() AS cls, RUNNING SUM(B.v) AS running, FINAL SUM(B.v) AS total,
                 MATCH_NUMBER() AS mn
        ALL ROWS PER MATCH
        PATTERN (A B+ {- C -} D)
        DEFINE A AS v = 0, B AS v > 0, C AS v < 0, D AS v = 0)
"""
    )
    ev = [{"k": "a", "ts": i, "v": v, "note": f"n{i}"} for i, v in enumerate([0, 2, 3, -1, 0])]
    rows = Engine(rules).run([ev]).matches
    assert [(r["ts"], r["cls"], r["running"], r["total"], r["note"]) for r in rows] == [
        (0, "A", None, 5, "n0"),
        (1, "B", 2, 5, "n1"),
        (2, "B", 5, 5, "n2"),
        (4, "D", 5, 5, "n4"),
    ]
    assert {r["mn"] for r in rows} == {1}


def test_next_in_measures_waits_for_the_row_after_the_match():
    sql = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES LAST(B.v) AS last_b, NEXT(B.v) AS after_b, NEXT(B.v, 2) AS after2, PREV(A.v) AS before
        PATTERN (A B+) DEFINE A AS v = 0, B AS v > 0 AND v < 5)"""
    from patterns.rules import parse_rule_text

    ev = [{"k": 1, "ts": i, "v": v} for i, v in enumerate([7, 0, 1, 2, 9, 8, 0, 3])]
    want = [
        {"k": 1, "last_b": 2, "after_b": 9, "after2": 8, "before": 7, "rule": "r"},
        {"k": 1, "last_b": 3, "after_b": None, "after2": None, "before": 8, "rule": "r"},
    ]
    for chunks in ([ev], [[e] for e in ev], [ev[:4], ev[4:5], ev[5:]]):
        eng = Engine([parse_rule_text(sql, name="r")])
        assert eng.run(chunks).matches == want, chunks


def test_distinct_counts_exact_and_approximate_over_a_variable():
    import random

    from patterns.rules import parse_rule_text

    # S starts a session, A+ takes its rows, E ends it: one partial match per session
    sql = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES COUNT(DISTINCT A.v) AS exact, APPROX_COUNT_DISTINCT(A.v) AS approx, COUNT(A.*) AS n
        PATTERN (S A+ E) DEFINE S AS kind = 's', A AS kind = 'a' AND COUNT(DISTINCT A.v) <= 1500, E AS kind = 'e')"""
    rnd = random.Random(5)
    values = [rnd.randint(0, 2000) for _ in range(1500)]
    ev = [{"k": 1, "ts": 0, "kind": "s"}]
    ev += [{"k": 1, "ts": i + 1, "kind": "a", "v": v} for i, v in enumerate(values)]
    ev += [{"k": 1, "ts": 10_000, "kind": "e"}]
    (row,) = Engine([parse_rule_text(sql, name="r")]).run([ev]).matches
    exact = len(set(values))
    assert row["n"] == 1500 and row["exact"] == exact
    assert abs(row["approx"] - exact) <= 3 * 1.04 / 64 * exact  # p=12: 4096 registers
