"""The lane path (cep/lanes.py), compiled and numpy, gives the general path's rows and counters and the brute force's matches."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.lanes as lanes
from cep.compiled import numba_allowed
from cep.operator import PatternOperator
from patterns.match_recognize import parse_statement
from patterns.rules import parse_rule_text
from tests.reference import reference_matches


def _avg(vals: list) -> float | None:
    got = [v for v in vals if v is not None]
    return sum(got) / len(got) if got else None


def _rows_of(asg: tuple, var: str) -> list[int]:
    return [i for i, v, _ in asg if v == var]


def _b_range(x, v, i, asg):
    s = asg[0][0]
    avg = _avg([v[j] for j in _rows_of(asg, "R")])
    return x[i] > x[s] + 2 and v[i] is not None and avg is not None and v[i] > 1.2 * avg


def _b_last(x, v, i, asg):
    rs = _rows_of(asg, "R")
    return bool(rs) and x[i] < x[rs[-1]] - 1


def _r_count(x, v, i, asg):
    return len(asg) <= 40 and x[i] != x[asg[0][0]]


def _b_sum(x, v, i, asg):
    got = [v[j] for j in _rows_of(asg, "R") if v[j] is not None]
    return bool(got) and v[i] is not None and sum(got) > 3 * v[i]


def _r_outside(x, v, i, asg):
    s = asg[0][0]  # NOT BETWEEN: below the low bound is enough, whatever the (maybe NULL) high bound
    return x[i] < x[s] + 3 or (v[s] is not None and x[i] > v[s])


def _b_or(x, v, i, asg):
    return x[i] > x[asg[0][0]] + 3 or (v[i] is not None and v[i] > 90 and len(_rows_of(asg, "R")) > 3)


def _prev(x, i):
    return x[i - 1] if i > 0 else None


def _down(x, v, i, a):
    return _prev(x, i) is not None and x[i] < _prev(x, i)


def _up_v(x, v, i, a):
    return _prev(x, i) is not None and x[i] > _prev(x, i) and x[i] >= x[a[0][0]]


def _down_eq(x, v, i, a):
    return _prev(x, i) is not None and x[i] <= _prev(x, i)


def _up_eq(x, v, i, a):
    return _prev(x, i) is not None and x[i] >= _prev(x, i) and x[i] >= x[a[0][0]] - 1


def _b_after_r(x, v, i, a):
    rs = _rows_of(a, "R")
    return bool(rs) and x[i] > x[rs[-1]] + 1


def _r_band_sum(x, v, i, a):
    got = [v[j] for j in _rows_of(a, "R") if v[j] is not None]
    return abs(x[i] - x[a[0][0]]) <= 2 and (not got or sum(got) < 400)


# (statement, conditions for the brute force: (x, v, row, assignment including the row) -> holds)
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    # range_breakout's shape: a band around the start row, a breakout on volume
    "range_breakout": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, B.ts AS t1, COUNT(R.*) AS nr, AVG(R.v) AS av, LAST(R.x) AS lr
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S R{3,} B)
           DEFINE R AS R.x BETWEEN S.x - 2 AND S.x + 2,
                  B AS B.x > S.x + 2 AND B.v > 1.2 * AVG(R.v))""",
        {"S": lambda x, v, i, a: True, "R": lambda x, v, i, a: x[a[0][0]] - 2 <= x[i] <= x[a[0][0]] + 2,
         "B": _b_range},
    ),
    # reluctant, bounded, LAST(R.x) in B (the previous row), a row-local condition on S
    "reluctant_last": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, B.ts AS t1, COUNT(*) AS n
           PATTERN (S R{2,30}? B)
           DEFINE S AS S.x > 4, R AS R.x >= S.x, B AS B.x < LAST(R.x) - 1)""",
        {"S": lambda x, v, i, a: x[i] > 4, "R": lambda x, v, i, a: x[i] >= x[a[0][0]], "B": _b_last},
    ),
    # COUNT(*) and <> in R, SUM in B, no lower bound
    "count_sum": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, B.ts AS t1, SUM(R.v) AS sv
           PATTERN (S R* B)
           DEFINE R AS COUNT(*) <= 40 AND R.x <> S.x, B AS SUM(R.v) > 3 * B.v)""",
        {"S": lambda x, v, i, a: True, "R": _r_count, "B": _b_sum},
    ),
    # NOT BETWEEN with a bound that may be NULL (S.v), OR with COUNT(R.*)
    "outside_or": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, B.ts AS t1
           PATTERN (S R{2,} B)
           DEFINE R AS R.x NOT BETWEEN S.x + 3 AND S.v,
                  B AS B.x > S.x + 3 OR (B.v > 90 AND COUNT(R.*) > 3))""",
        {"S": lambda x, v, i, a: True, "R": _r_outside, "B": _b_or},
    ),
    # the V-shape of rules/trading.yaml: two quantified variables, U reads the start row; D and U
    # exclude each other, so the runs of a start row never fork
    "v_shape": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, LAST(U.ts) AS t1, COUNT(D.*) AS nd, LAST(D.x) AS bottom
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S D{2,} U+)
           DEFINE D AS D.x < PREV(D.x),
                  U AS U.x > PREV(U.x) AND LAST(U.x) >= S.x)""",
        {"S": lambda x, v, i, a: True, "D": _down, "U": _up_v},
    ),
    # D and U overlap (equal closes pass both): a start row's runs fork, and go back to node chains
    "v_shape_forks": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, LAST(U.ts) AS t1, COUNT(D.*) AS nd
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S D{2,} U+)
           DEFINE D AS D.x <= PREV(D.x),
                  U AS U.x >= PREV(U.x) AND U.x >= S.x - 1)""",
        {"S": lambda x, v, i, a: True, "D": _down_eq, "U": _up_eq},
    ),
    # reluctant R, bounded B{2,6}; B reads the last R row (not the previous row after the first B)
    "reluctant_b_reads_r": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, LAST(B.ts) AS t1, COUNT(B.*) AS nb, LAST(R.x) AS lr
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S R{3,}? B{2,6})
           DEFINE R AS R.x BETWEEN S.x - 2 AND S.x + 2,
                  B AS B.x > LAST(R.x) + 1)""",
        {"S": lambda x, v, i, a: True, "R": lambda x, v, i, a: abs(x[i] - x[a[0][0]]) <= 2, "B": _b_after_r},
    ),
    # B may be empty: a row taken as R completes a match; SUM over R in R's own condition
    "r_completes": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, LAST(ts) AS t1, COUNT(B.*) AS nb
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S R{2,} B*)
           DEFINE R AS R.x BETWEEN S.x - 2 AND S.x + 2 AND (SUM(R.v) < 400 OR COUNT(R.v) = 0),
                  B AS B.x > S.x + 2)""",
        {"S": lambda x, v, i, a: True, "R": _r_band_sum, "B": lambda x, v, i, a: x[i] > x[a[0][0]] + 2},
    ),
}


def _events(rnd: random.Random, n: int, keys: int, trend: bool = False) -> list[dict]:
    """Random walks per key; ``trend``: each step keeps the last one's direction more often than
    not (falls and rises of several rows, as the V-shapes need)."""
    out, x, d = [], {k: 10 for k in range(keys)}, {k: 1 for k in range(keys)}
    for i in range(n):
        k = rnd.randrange(keys)
        if trend:
            if rnd.random() < 0.3:
                d[k] = rnd.choice((-1, 0, 1))
            step = d[k] * rnd.choice((1, 1, 2)) if d[k] else rnd.choice((-1, 0, 1))
        else:
            step = rnd.choice((-2, -1, 0, 0, 0, 1, 1, 2))
        x[k] = max(0, min(20, x[k] + step))
        out.append({"k": k, "ts": i, "x": x[k], "v": None if rnd.random() < 0.05 else rnd.randrange(1, 100)})
    return out


def _run(sql: str, events: list[dict], cuts: list[int], snap_at: int | None, use: bool, kernel: bool = True,
         **opts) -> tuple[list, Any]:
    """Rows of the rule over ``events`` cut into batches at ``cuts``; snapshot and restore into a
    fresh operator after batch ``snap_at``. ``use``: the lane path; ``kernel``: its compiled loop."""
    old = lanes.USE_LANES, lanes.USE_KERNEL
    lanes.USE_LANES, lanes.USE_KERNEL = use, kernel
    try:
        compiled = parse_rule_text(sql).compiled
        op = PatternOperator(compiled, name="r", **opts)
        assert (op.automaton.lanes is not None) == use
        if use:
            assert (op.automaton.lanes.kernel is not None) == (kernel and numba_allowed())
        rows: list = []
        bounds = [0] + sorted(set(cuts)) + [len(events)]
        for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            rows += op.process(events[lo:hi]).matches
            if b == snap_at:
                data = op.snapshot()
                op = PatternOperator(compiled, name="r", **opts)
                op.restore(data)
        rows += op.finish().matches
        return rows, op
    finally:
        lanes.USE_LANES, lanes.USE_KERNEL = old


def _counters(op: PatternOperator) -> tuple:
    s = op.stats
    return (s.matches, s.rows_emitted, s.partial_matches_peak, s.cap_hits, s.partial_matches_dropped,
            s.eval_errors, op.counts.processed)


def _three_paths_agree(sql: str, events: list[dict], cuts: list[int], snap_at: int | None) -> list:
    """The compiled loop, the numpy stepping (both restored at ``snap_at``) and the general path
    give the same rows in the same order and the same counters; those rows."""
    fast, op_fast = _run(sql, events, cuts, snap_at, True)
    numpy_rows, op_numpy = _run(sql, events, cuts, snap_at, True, kernel=False)
    slow, op_slow = _run(sql, events, cuts, None, False)
    assert fast == slow
    assert numpy_rows == slow
    assert _counters(op_fast) == _counters(op_slow) == _counters(op_numpy)
    return fast

@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(sorted(SHAPES)), seed=st.integers(0, 10_000), keys=st.integers(1, 3),
       n=st.integers(200, 700), ncuts=st.integers(0, 10), snap=st.booleans(), trend=st.booleans())
def test_same_rows_as_the_general_path_and_the_brute_force(shape, seed, keys, n, ncuts, snap, trend):
    """Keys of hundreds of rows, batches that split runs, a snapshot and restore in the middle:
    the compiled loop and the numpy stepping give the general path's rows in its order and its
    counters, and per key the brute force's matches."""
    sql, cond = SHAPES[shape]
    rnd = random.Random(seed)
    events = _events(rnd, n, keys, trend)
    cuts = [rnd.randrange(1, n) for _ in range(ncuts)]
    snap_at = rnd.randrange(0, ncuts + 1) if snap else None
    fast = _three_paths_agree(sql, events, cuts, snap_at)
    stmt = parse_statement(sql)
    expected = []
    for key in range(keys):
        evs = [e for e in events if e["k"] == key]
        xs, vs = [e["x"] for e in evs], [e["v"] for e in evs]

        def c(var: str, i: int, asg: tuple, xs: list = xs, vs: list = vs) -> bool:
            return cond[var](xs, vs, i, asg)

        expected += [(key, evs[a[0][0]]["ts"], evs[a[-1][0]]["ts"]) for a in reference_matches(len(xs), stmt.pattern, c)]
    assert sorted((r["k"], r["t0"], r["t1"]) for r in fast) == sorted(expected)


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("on_cap", ["drop_oldest", "skip_key"])
def test_per_key_cap(on_cap, kernel):
    """``max_partial_matches`` drops start rows as the general path does (rows and counters)."""
    sql = SHAPES["range_breakout"][0]
    events = _events(random.Random(3), 3000, 2)
    cuts = list(range(250, 3000, 250))
    fast, op_fast = _run(sql, events, cuts, 4, True, kernel, max_partial_matches=7, on_cap=on_cap)
    slow, op_slow = _run(sql, events, cuts, None, False, max_partial_matches=7, on_cap=on_cap)
    assert fast == slow and len(fast) > 5
    assert op_fast.stats.cap_hits > 0
    assert _counters(op_fast) == _counters(op_slow)


@pytest.mark.parametrize("kernel", [True, False])
def test_within_and_odd_values(kernel):
    """WITHIN ends start rows at their own times; a string where a number is expected sends the
    key's start rows back to node chains (the general path's errors and rows); the compiled loop
    leaves a batch with such a value to the numpy stepping and takes the next one back."""
    sql = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
             MEASURES S.ts AS t0, B.ts AS t1 PATTERN (S R{2,} B) WITHIN INTERVAL '40' MILLISECOND
             DEFINE R AS R.x BETWEEN S.x - 3 AND S.x + 3, B AS B.x > S.x + 3)"""
    events = _events(random.Random(5), 2000, 2)
    for i in (300, 301, 1200):
        events[i]["x"] = "n/a"
    cuts = list(range(111, 2000, 111))
    fast, op_fast = _run(sql, events, cuts, 6, True, kernel)
    slow, op_slow = _run(sql, events, cuts, None, False)
    assert fast == slow and len(fast) > 5
    assert op_fast.stats.eval_errors > 0
    assert _counters(op_fast) == _counters(op_slow)


def test_live_partial_matches_and_state():
    """Between batches the operator reports the general path's live partial matches."""
    sql = SHAPES["range_breakout"][0]
    events = _events(random.Random(8), 3000, 4)
    seen: dict[bool, list] = {}
    for use in (True, False):
        old = lanes.USE_LANES
        lanes.USE_LANES = use
        try:
            op = PatternOperator(parse_rule_text(sql).compiled, name="r")
            seen[use] = []
            for lo in range(0, 3000, 700):
                op.process(events[lo : lo + 700])
                seen[use].append(op.live_partial_matches())
        finally:
            lanes.USE_LANES = old
    assert seen[True] == seen[False] and any(seen[True])


def test_shapes_the_path_declines():
    """Rules outside the path's shape or expressions stay on the general path."""
    for pattern, define in [
        ("S R+ B C", "R AS R.x > S.x, B AS B.x < S.x"),  # two closing variables
        ("S R+ B", "R AS R.x * R.v > S.x, B AS B.x < S.x"),  # a product of two columns
        ("S R+ B", "R AS NOT (R.x > S.x), B AS B.x < S.x"),  # NOT: NULL is not FALSE
        ("S R+ B", "R AS R.x > S.x, B AS B.x < MAX(R.x)"),  # MIN/MAX
        ("(S R)+ B", "R AS R.x > S.x, B AS B.x < S.x"),
        ("S R{2,5} B", "R AS R.x > S.x, B AS B.x < S.x"),  # at most 7 live start rows per key
        ("S R+ B+ C+", "R AS R.x > S.x, B AS B.x < S.x, C AS C.x > S.x"),  # three quantified variables
        ("S R+ B+ R", "R AS R.x > S.x, B AS B.x < S.x"),  # R again after B
        ("S R+ B+", "R AS R.x > S.x, B AS B.x < FIRST(R.x)"),  # FIRST: not kept
    ]:
        sql = f"""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES S.ts AS t0
                  PATTERN ({pattern}) DEFINE {define})"""
        op = PatternOperator(parse_rule_text(sql).compiled, name="r")
        assert op.automaton.lanes is None, pattern


TWO_QUANTIFIED = ["v_shape", "v_shape_forks", "reluctant_b_reads_r", "r_completes"]


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("shape", TWO_QUANTIFIED)
def test_two_quantified_variables(shape, kernel):
    """``S R{n,m} B{p,q}`` (the V-shape and its kin) take the path; over trending keys of about a
    thousand rows, batches cut every 97 rows and a snapshot in the middle, rows and counters are
    the general path's; where R and B overlap the start rows' runs fork and still agree."""
    sql = SHAPES[shape][0]
    events = _events(random.Random(11), 3000, 3, trend=True)
    cuts = list(range(97, 3000, 97))
    fast, op_fast = _run(sql, events, cuts, 9, True, kernel)
    slow, op_slow = _run(sql, events, cuts, None, False)
    assert fast == slow and len(fast) > 10
    assert _counters(op_fast) == _counters(op_slow)
    # a row that passes R and B forks greedy R{n,} before B+ and reluctant R before B{2,}; not a
    # row that R completes (B* is never tried then)
    assert op_fast.automaton.lanes.can_fork == (shape != "r_completes")


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("on_cap", ["drop_oldest", "skip_key"])
def test_v_shape_within_caps_and_odd_values(on_cap, kernel):
    """The V-shape with WITHIN and a small cap, over rows with NULLs, a string, a bool and an
    integer past 2**53 (the key's start rows go back to node chains, the general path's errors
    and rows): the same rows and counters as the general path."""
    sql = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
             MEASURES S.ts AS t0, LAST(U.ts) AS t1, COUNT(D.*) AS nd
             AFTER MATCH SKIP PAST LAST ROW
             PATTERN (S D{2,} U+) WITHIN INTERVAL '30' MILLISECOND
             DEFINE D AS D.x <= PREV(D.x), U AS U.x >= PREV(U.x) AND LAST(U.x) >= S.x - 1)"""
    events = _events(random.Random(4), 2500, 2, trend=True)
    for i, bad in ((300, "n/a"), (301, None), (900, True), (1500, 2**60 + 1), (1501, None)):
        events[i]["x"] = bad
    cuts = list(range(150, 2500, 150))
    opts = {"max_partial_matches": 6, "on_cap": on_cap}
    fast, op_fast = _run(sql, events, cuts, 5, True, kernel, **opts)
    slow, op_slow = _run(sql, events, cuts, None, False, **opts)
    assert fast == slow and len(fast) > 10
    assert op_fast.stats.cap_hits > 0 and op_fast.stats.eval_errors > 0
    assert _counters(op_fast) == _counters(op_slow)


def test_rules_of_the_repository_on_the_path():
    """The V-shape of rules/trading.yaml and the generated ``S D{k,} U+`` rules of the many-rules
    benchmark take the path (the compiled loop where numba is allowed)."""
    from pathlib import Path

    from patterns.rules import load_rules

    rules = {r.name: r for r in load_rules(Path(__file__).resolve().parents[2] / "rules" / "trading.yaml")}
    op = PatternOperator(rules["v_shape"].compiled, name="v_shape")
    assert op.automaton.lanes is not None
    assert (op.automaton.lanes.kernel is not None) == numba_allowed()
    sql = """SELECT * FROM bars MATCH_RECOGNIZE (PARTITION BY symbol ORDER BY date
             MEASURES S.date AS d AFTER MATCH SKIP PAST LAST ROW PATTERN (S D{3,} U+)
             DEFINE D AS D.close < PREV(D.close) * 0.99, U AS U.close > PREV(U.close) AND LAST(U.close) >= S.close)"""
    assert PatternOperator(parse_rule_text(sql).compiled, name="r").automaton.lanes is not None
