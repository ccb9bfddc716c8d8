"""The engine's automaton against the brute-force reference matcher on random patterns and streams."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.operator import PatternOperator
from patterns import ast as A
from patterns.compiler import nullable
from patterns.rules import parse_rule_text
from tests.reference import reference_matches

VARS = ["A", "B", "C"]


# ------------------------------------------------------------------ random patterns


def pattern_text(p: A.Pattern) -> str:
    if isinstance(p, A.PVar):
        return p.name
    if isinstance(p, A.PSeq):
        return " ".join(_group(i) for i in p.items)
    if isinstance(p, A.PAlt):
        return " | ".join(pattern_text(o) for o in p.options)
    if isinstance(p, A.PPermute):
        return "PERMUTE(" + ", ".join(pattern_text(i) for i in p.items) + ")"
    if isinstance(p, A.PExclude):
        return "{- " + pattern_text(p.item) + " -}"
    if isinstance(p, A.PQuant):
        if (p.low, p.high) == (0, None):
            q = "*"
        elif (p.low, p.high) == (1, None):
            q = "+"
        elif (p.low, p.high) == (0, 1):
            q = "?"
        elif p.high is None:
            q = f"{{{p.low},}}"
        elif p.low == p.high:
            q = f"{{{p.low}}}"
        else:
            q = f"{{{p.low},{p.high}}}"
        return _atom(p.item) + q + ("" if p.greedy else "?")
    raise TypeError(p)


def _atom(p: A.Pattern) -> str:
    return pattern_text(p) if isinstance(p, (A.PVar, A.PPermute, A.PExclude)) else f"({pattern_text(p)})"


def _group(p: A.Pattern) -> str:
    return f"({pattern_text(p)})" if isinstance(p, A.PAlt) else pattern_text(p)


def patterns(depth: int = 3):
    var = st.sampled_from(VARS).map(A.PVar)
    if depth == 0:
        return var
    sub = patterns(depth - 1)
    quants = st.sampled_from([(0, None), (1, None), (0, 1), (2, 2), (1, 3), (2, None), (0, 2)])
    return st.one_of(
        var,
        var,
        st.lists(sub, min_size=2, max_size=3).map(lambda xs: A.PSeq(tuple(xs))),
        st.lists(sub, min_size=2, max_size=2).map(lambda xs: A.PAlt(tuple(xs))),
        st.tuples(sub.filter(lambda x: not nullable(x)), quants, st.booleans()).map(
            lambda t: A.PQuant(t[0], t[1][0], t[1][1], t[2])
        ),
        st.lists(var, min_size=2, max_size=3).map(lambda xs: A.PPermute(tuple(xs))),
        sub.filter(lambda x: not nullable(x)).map(A.PExclude),
    )


# ------------------------------------------------------------------ conditions, twice: SQL and Python

CONDITIONS = [
    # (sql for var V, python cond(V, i, asg, rows))
    ("{V}.x < 3", lambda V, i, asg, xs: xs[i] < 3),
    ("{V}.x >= 2", lambda V, i, asg, xs: xs[i] >= 2),
    ("{V}.x > PREV({V}.x)", lambda V, i, asg, xs: i > 0 and xs[i] > xs[i - 1]),
    ("{V}.x <= PREV({V}.x)", lambda V, i, asg, xs: i > 0 and xs[i] <= xs[i - 1]),
    ("{V}.x = 1 OR {V}.x = 4", lambda V, i, asg, xs: xs[i] in (1, 4)),
    (None, lambda V, i, asg, xs: True),
    ("{V}.x >= A.x", lambda V, i, asg, xs: _last(asg, "A", xs) is not None and xs[i] >= _last(asg, "A", xs)),
    ("SUM({V}.x) <= 6", lambda V, i, asg, xs: sum(xs[r] for r, v, _ in asg if v == V) <= 6),
    ("COUNT(*) < 5", lambda V, i, asg, xs: len(asg) < 5),
    ("{V}.x <> FIRST(B.x)", lambda V, i, asg, xs: _first(asg, "B", xs) is not None and xs[i] != _first(asg, "B", xs)),
]


def _last(asg, var, xs):
    for r, v, _ in reversed(asg):
        if v == var:
            return xs[r]
    return None


def _first(asg, var, xs):
    for r, v, _ in asg:
        if v == var:
            return xs[r]
    return None


def build_sql(pattern: A.Pattern, conds: dict[str, int], skip: str, within: int | None) -> str:
    defines = []
    for v in VARS:
        sql = CONDITIONS[conds[v]][0]
        if sql is not None:
            defines.append(f"{v} AS {sql.format(V=v)}")
    skip_sql = {
        "PAST_LAST_ROW": "AFTER MATCH SKIP PAST LAST ROW",
        "TO_NEXT_ROW": "AFTER MATCH SKIP TO NEXT ROW",
        "TO_FIRST": "AFTER MATCH SKIP TO FIRST B",
        "TO_LAST": "AFTER MATCH SKIP TO LAST B",
    }[skip]
    within_sql = f" WITHIN INTERVAL '{within}' MILLISECOND" if within else ""
    return (
        "SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
        "MEASURES CLASSIFIER() AS cls, MATCH_NUMBER() AS mn ALL ROWS PER MATCH "
        f"{skip_sql} PATTERN ({pattern_text(pattern)}){within_sql} "
        + (f"DEFINE {', '.join(defines)}" if defines else "")
        + ")"
    )


def run_engine(sql: str, events: list[dict], chunks: list[int] | None = None, lateness: int = 0):
    rule = parse_rule_text(sql)
    op = PatternOperator(rule.compiled, name="r", lateness_ms=lateness)
    out = []
    if chunks is None:
        out += op.process(events).matches
    else:
        i = 0
        for c in chunks:
            out += op.process(events[i : i + c]).matches
            i += c
        out += op.process(events[i:]).matches
    out += op.finish().matches
    return out


def engine_assignments(rows: list[dict], key) -> list[tuple]:
    by_match: dict[int, list] = {}
    for r in rows:
        if r["k"] == key:
            by_match.setdefault(r["mn"], []).append((r["i"], r["cls"]))
    return [tuple(by_match[m]) for m in sorted(by_match)]


def reference_assignments(pattern, conds, skip, xs, ts, within):
    def cond(V, i, asg):
        return CONDITIONS[conds[V]][1](V, i, asg, xs)

    ms = reference_matches(len(xs), pattern, cond, skip, {"B"}, ts, within)
    shown = [tuple((i, v) for i, v, excl in m if not excl) for m in ms]
    return [m for m in shown if m]  # a fully excluded match outputs no row


@st.composite
def cases(draw):
    pattern = draw(patterns().filter(lambda p: not nullable(p)))
    conds = {v: draw(st.integers(0, len(CONDITIONS) - 1)) for v in VARS}
    skip = draw(st.sampled_from(["PAST_LAST_ROW", "TO_NEXT_ROW", "TO_FIRST", "TO_LAST"]))
    within = draw(st.sampled_from([None, None, 4, 7]))
    keys = draw(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=14), min_size=1, max_size=2))
    present = {v.name for v in _vars(pattern)}
    for v in VARS:
        needs = {6: "A", 9: "B"}.get(conds[v])
        if v not in present or (needs and needs not in present):
            conds[v] = 5  # no DEFINE for an absent variable; no reference to one
    if "B" not in present and skip in ("TO_FIRST", "TO_LAST"):
        skip = "TO_NEXT_ROW"
    return pattern, conds, skip, within, keys


def _vars(p):
    if isinstance(p, A.PVar):
        return [p]
    if isinstance(p, (A.PSeq, A.PPermute)):
        return [v for i in p.items for v in _vars(i)]
    if isinstance(p, A.PAlt):
        return [v for o in p.options for v in _vars(o)]
    return _vars(p.item)


def events_for(keys: list[list[int]]) -> list[dict]:
    events = []
    for k, xs in enumerate(keys):
        for i, x in enumerate(xs):
            events.append({"k": k, "ts": i * 2 + k, "x": x, "i": i})
    events.sort(key=lambda e: e["ts"])
    return events


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_automaton_matches_reference(case):
    pattern, conds, skip, within, keys = case
    sql = build_sql(pattern, conds, skip, within * 2 if within else None)
    events = events_for(keys)
    got = run_engine(sql, events)
    for k, xs in enumerate(keys):
        ts = [i * 2 + k for i in range(len(xs))]
        want = reference_assignments(pattern, conds, skip, xs, ts, within * 2 if within else None)
        assert engine_assignments(got, k) == want, (sql, k, xs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases(), st.randoms(use_true_random=False))
def test_same_output_whatever_the_batching(case, rnd):
    pattern, conds, skip, within, keys = case
    sql = build_sql(pattern, conds, skip, within * 2 if within else None)
    events = events_for(keys)
    whole = run_engine(sql, events)
    one_by_one = run_engine(sql, events, chunks=[1] * len(events))
    chunks = []
    left = len(events)
    while left > 0:
        c = rnd.randint(1, 5)
        chunks.append(c)
        left -= c
    random_chunks = run_engine(sql, events, chunks=chunks)
    for k in range(len(keys)):
        w = engine_assignments(whole, k)
        assert engine_assignments(one_by_one, k) == w
        assert engine_assignments(random_chunks, k) == w


@pytest.mark.parametrize("seed", range(5))
def test_out_of_order_within_lateness_equals_sorted(seed):
    rnd = random.Random(seed)
    sql = (
        "SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
        "MEASURES FIRST(A.ts) AS t0, LAST(C.ts) AS t1, COUNT(B.*) AS nb, SUM(B.x) AS sb "
        "PATTERN (A B+ C) WITHIN INTERVAL '40' MILLISECOND "
        "DEFINE A AS A.x < 2, B AS B.x >= PREV(B.x), C AS C.x < LAST(B.x))"
    )
    events = [{"k": rnd.randint(0, 3), "ts": t, "x": rnd.randint(0, 4)} for t in range(400)]
    sorted_out = run_engine(sql, events)
    # shuffle within a window of 5 ms, allow 5 ms lateness
    shuffled = sorted(events, key=lambda e: e["ts"] + rnd.uniform(0, 5))
    got = run_engine(sql, shuffled, chunks=[rnd.randint(1, 20) for _ in range(40)], lateness=5)
    assert sorted(map(str, got)) == sorted(map(str, sorted_out))
    assert len(sorted_out) > 5


@pytest.mark.parametrize("seed", range(5))
def test_snapshot_restore_mid_stream_changes_nothing(seed):
    rnd = random.Random(seed)
    sql = (
        "SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
        "MEASURES FIRST(A.ts) AS t0, LAST(C.ts) AS t1, AVG(B.x) AS ab, NEXT(C.x) AS nx "
        "PATTERN (A B+? C | A C) WITHIN INTERVAL '30' MILLISECOND "
        "DEFINE A AS A.x < 2, B AS B.x >= A.x, C AS C.x > LAST(B.x, 1))"
    )
    events = [{"k": rnd.randint(0, 3), "ts": t, "x": rnd.randint(0, 4)} for t in range(300)]
    expected = run_engine(sql, events, chunks=[7] * 40)
    rule = parse_rule_text(sql)
    op = PatternOperator(rule.compiled, name="r")
    cut = rnd.randint(1, 299)
    got = op.process(events[:cut]).matches
    blob = op.snapshot()
    op2 = PatternOperator(parse_rule_text(sql).compiled, name="r")
    op2.restore(blob)
    got += op2.process(events[cut:]).matches
    got += op2.finish().matches
    assert sorted(map(str, got)) == sorted(map(str, expected))
    assert op2.counts.read == len(events)
