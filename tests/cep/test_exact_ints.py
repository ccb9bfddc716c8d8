"""Integers near 2**53 and 2**63 give the exact general path's answer on every vectorised path."""

from __future__ import annotations

import functools
import random
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.lanes as lanes
from cep.compiled import numba_allowed
from cep.operator import PatternOperator
from patterns.match_recognize import parse_statement
from patterns.rules import parse_rule_text
from tests.cep.test_analytics_properties import WINDOWS, _sizes, feed
from tests.cep.test_analytics_reference import (
    SELECT,
    final_view,
    reference_panes,
    reference_sessions_final,
    reference_slide,
    rule,
)
from tests.reference import reference_matches

E53 = 2**53
E63 = 2**63

# ------------------------------------------------------------------------------ the lane path


def _rows_of(asg: tuple, var: str) -> list[int]:
    return [i for i, v, _ in asg if v == var]


def _last_r(x: list, asg: tuple) -> int | None:
    rs = _rows_of(asg, "R")
    return x[rs[-1]] if rs else None


# (statement, conditions for the brute force in Python ints: (x, row, assignment with the row) -> holds)
LANE_SHAPES: dict[str, tuple[str, dict[str, Callable[[list, int, tuple], bool]]]] = {
    # a sum of two columns near 2**53 (rounded in float64 past it)
    "sum_of_columns": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, B.ts AS t1
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S R{2,} B)
           DEFINE R AS R.x + S.x >= S.x + S.x - 6,
                  B AS B.x + S.x > S.x + S.x + 1)""",
        {"S": lambda x, i, a: True,
         "R": lambda x, i, a: x[i] + x[a[0][0]] >= 2 * x[a[0][0]] - 6,
         "B": lambda x, i, a: x[i] + x[a[0][0]] > 2 * x[a[0][0]] + 1},
    ),
    # products with a literal, the previous row
    "product_literal": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, B.ts AS t1
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S R{2,} B)
           DEFINE R AS 3 * R.x - 3 * S.x BETWEEN -9 AND 9,
                  B AS B.x * 3 > LAST(R.x) * 3 + 2)""",
        {"S": lambda x, i, a: True,
         "R": lambda x, i, a: -9 <= 3 * x[i] - 3 * x[a[0][0]] <= 9,
         "B": lambda x, i, a: (lr := _last_r(x, a)) is not None and 3 * x[i] > 3 * lr + 2},
    ),
    # a running SUM and AVG that pass 2**53 (and may come back below it)
    "running_sum": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, B.ts AS t1, SUM(R.x) AS sx
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S R{2,} B)
           DEFINE R AS COUNT(R.*) <= 30,
                  B AS AVG(R.x) > S.x AND SUM(R.x) <> B.x)""",
        {"S": lambda x, i, a: True,
         "R": lambda x, i, a: len(_rows_of(a, "R")) <= 30,
         "B": lambda x, i, a: bool(rs := _rows_of(a, "R"))
         and sum(x[j] for j in rs) / len(rs) > x[a[0][0]] and sum(x[j] for j in rs) != x[i]},
    ),
}

BASES = (0, 2**52, E53 - 12, -(E53 - 12), 2**52 + 2**51, E63 - 40, -(E63 - 40))


def _lane_events(rnd: random.Random, n: int, keys: int, bases: tuple, spread: int = 12) -> list[dict]:
    """Values a few apart around big bases (so sums and products round in float64), both signs."""
    out = []
    base = {k: rnd.choice(bases) for k in range(keys)}
    for i in range(n):
        k = rnd.randrange(keys)
        if rnd.random() < 0.02:
            base[k] = rnd.choice(bases)
        off = rnd.randrange(-spread, spread + 1) * (1 if base[k] else rnd.choice((1, 2**50)))
        x = base[k] + off if abs(base[k]) < E53 - 12 or base[k] == 0 else base[k] - abs(off)
        x = max(-(E63 - 1), min(E63 - 1, x))
        out.append({"k": k, "ts": i, "x": x})
    return out


def _run_rule(sql: str, events: list[dict], cuts: list[int], snap_at: int | None, use: bool,
              kernel: bool = True) -> tuple[list, Any]:
    old = lanes.USE_LANES, lanes.USE_KERNEL
    lanes.USE_LANES, lanes.USE_KERNEL = use, kernel
    try:
        compiled = parse_rule_text(sql).compiled
        op = PatternOperator(compiled, name="r")
        assert (op.automaton.lanes is not None) == use
        if use:
            assert (op.automaton.lanes.kernel is not None) == (kernel and numba_allowed())
        rows: list = []
        bounds = [0] + sorted(set(cuts)) + [len(events)]
        for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            rows += op.process(events[lo:hi]).matches
            if b == snap_at:
                data = op.snapshot()
                op = PatternOperator(compiled, name="r")
                op.restore(data)
        rows += op.finish().matches
        return rows, op
    finally:
        lanes.USE_LANES, lanes.USE_KERNEL = old


def _brute(sql: str, cond: dict, events: list[dict], keys: int) -> list[tuple]:
    stmt = parse_statement(sql)
    out = []
    for key in range(keys):
        evs = [e for e in events if e["k"] == key]
        xs = [e["x"] for e in evs]

        def c(var: str, i: int, asg: tuple, xs: list = xs) -> bool:
            return cond[var](xs, i, asg)

        out += [(key, evs[a[0][0]]["ts"], evs[a[-1][0]]["ts"]) for a in reference_matches(len(xs), stmt.pattern, c)]
    return sorted(out)


def _check_lanes(shape: str, events: list[dict], keys: int, cuts: list[int], snap_at: int | None) -> list:
    sql, cond = LANE_SHAPES[shape]
    slow, op_slow = _run_rule(sql, events, cuts, None, False)
    fast, op_fast = _run_rule(sql, events, cuts, snap_at, True)
    numpy_rows, op_numpy = _run_rule(sql, events, cuts, snap_at, True, kernel=False)
    assert sorted((r["k"], r["t0"], r["t1"]) for r in slow) == _brute(sql, cond, events, keys)
    assert numpy_rows == slow
    assert fast == slow
    for op in (op_fast, op_numpy):
        assert (op.stats.matches, op.stats.partial_matches_peak, op.stats.eval_errors) == \
            (op_slow.stats.matches, op_slow.stats.partial_matches_peak, op_slow.stats.eval_errors)
    return slow


@pytest.mark.parametrize("shape", sorted(LANE_SHAPES))
def test_lanes_one_key_near_2_53(shape):
    """One key of hundreds of rows around +-2**53: rows differ from float64's when rounded."""
    events = _lane_events(random.Random(7), 400, 1, (E53 - 12, -(E53 - 12), 2**52 + 2**51), 3)
    rows = _check_lanes(shape, events, 1, [133, 250], 1)
    assert rows  # (the case means something: matches exist)


def test_lanes_reviewer_case():
    """The reviewer's case: ``B.x + S.x`` with both near 2**53 is exact, so B holds."""
    sql = LANE_SHAPES["sum_of_columns"][0]
    s = E53 - 11
    events = [{"k": 0, "ts": i, "x": x} for i, x in enumerate([s, s, s, s + 2])]
    # B: (s + 2) + s > s + s + 1 in Python ints; float64 (even numbers only past 2**53, ties to a
    # multiple of 4) makes both sides 2s + 2, so B failed there
    for use, kernel in ((False, True), (True, True), (True, False)):
        rows, _ = _run_rule(sql, events, [], None, use, kernel)
        assert [(r["t0"], r["t1"]) for r in rows] == [(0, 3)], (use, kernel)
    events[-1]["x"] = s + 1  # 2s + 1 > 2s + 1: FALSE on every path
    for use, kernel in ((False, True), (True, True), (True, False)):
        rows, _ = _run_rule(sql, events, [], None, use, kernel)
        assert rows == [], (use, kernel)


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(sorted(LANE_SHAPES)), seed=st.integers(0, 10_000), keys=st.integers(1, 3),
       n=st.integers(150, 400), ncuts=st.integers(0, 6), snap=st.booleans())
def test_lanes_same_rows_as_exact_ints(shape, seed, keys, n, ncuts, snap):
    """Keys of hundreds of rows whose values sit near 0, 2**52, 2**53 and 2**63 (both signs),
    batches that cut runs, a snapshot in the middle: the compiled loop and the numpy stepping
    give the general path's rows and counters, and the general path the brute force's matches
    in Python ints."""
    rnd = random.Random(seed)
    events = _lane_events(rnd, n, keys, BASES)
    cuts = [rnd.randrange(1, n) for _ in range(ncuts)]
    snap_at = rnd.randrange(0, ncuts + 1) if snap else None
    _check_lanes(shape, events, keys, cuts, snap_at)


# ------------------------------------------------------------- row-local column kernels


@functools.lru_cache(maxsize=None)
def _define(expr: str) -> Any:
    sql = f"""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0
              PATTERN (A) DEFINE A AS {expr})"""
    return parse_rule_text(sql).compiled.defines[0]


KERNEL_EXPRS = [
    "x + y > 9007199254740992",
    "x * 3 > y * 3 + 2",
    "x - y < 1",
    "x + 1 > x",  # wraps at 2**63 - 1 in int64
    "-x < 1",  # -(-2**63) wraps in int64
    "ABS(x) > 4611686018427387904",
    "x > 9007199254740993.0",  # (the literal is 2**53 as a float)
    "x >= f",
    "x + f > y",
    "x / 3 > y / 3",
    "x % 7 = 3",
    "x > 100000000000000000000",
    "x + 100000000000000000000 > 0",
    "x BETWEEN y - 1 AND y + 1",
    "o + 1 > o",  # an object column of ints with NULLs
    "o * 2 >= y",
    "o = y",
    "o > 9007199254740992.0",
]

BIG = (0, 1, 2**52, 2**53 - 3, 2**53 + 1, 2**62 + 1, 2**63 - 1, -(2**53) - 1, -(2**62) - 3, -(2**63))


def _kernel_vs_rows(expr: str, xs: list, ys: list, fs: list, os_: list) -> None:
    import numpy as np

    from cep.expressions import ColumnarUnsupported, compile_columnar, compile_local_rows, truthy
    from cep.operator import _typed

    e = _define(expr)
    n = len(xs)
    cols = {"x": np.array(xs, dtype=np.int64), "y": np.array(ys, dtype=np.int64),
            "f": np.array(fs, dtype=np.float64), "o": np.array(os_, dtype=object)}
    py = {"x": xs, "y": ys, "f": fs, "o": os_}
    needs, fn = compile_local_rows(e, "A")
    arrays = {key: py[key[0]] for key in needs}
    want = []
    for i in range(n):
        try:
            want.append(truthy(fn((i, arrays))))
        except (TypeError, ValueError, ArithmeticError):
            want.append(False)
    try:
        got = compile_columnar(e, "A")(lambda name, lag: _typed(cols[name]), n)
    except ColumnarUnsupported:
        return  # (the operator evaluates such a condition row by row: the reference itself)
    assert got.tolist() == want, expr


@settings(max_examples=40, deadline=None, derandomize=True)
@given(data=st.lists(st.tuples(st.sampled_from(BIG), st.integers(-3, 3), st.sampled_from(BIG), st.integers(-3, 3),
                               st.floats(allow_nan=False, allow_infinity=False, width=64),
                               st.one_of(st.none(), st.sampled_from(BIG))), min_size=1, max_size=40))
def test_column_kernels_give_the_row_paths_answer(data):
    """Each row-local condition over int64 columns near 2**53 and 2**63 (both signs), a float
    column and an object column with NULLs: the column kernel's mask is the row path's (Python
    ints), or the kernel declines and the row path runs."""
    i64 = (-(2**63), 2**63 - 1)
    xs = [max(i64[0], min(i64[1], b + d)) for b, d, *_ in data]
    ys = [max(i64[0], min(i64[1], b + d)) for _, _, b, d, _, _ in data]
    fs = [float(x) + (0.5 if i % 3 == 0 else 0.0) if i % 2 else f for i, (x, (_, _, _, _, f, _)) in
          enumerate(zip(xs, data))]
    os_ = [o for *_, o in data]
    for expr in KERNEL_EXPRS:
        _kernel_vs_rows(expr, xs, ys, fs, os_)


def test_column_kernel_cases():
    """Hand-picked rows where int64 wraps or float64 rounds."""
    m = 2**63 - 1
    _kernel_vs_rows("x + 1 > x", [m, 5], [0, 0], [0.0, 0.0], [None, 1])
    _kernel_vs_rows("-x < 1", [-(2**63), 3], [0, 0], [0.0, 0.0], [None, 1])
    _kernel_vs_rows("x >= f", [2**53 + 1, 2**53], [0, 0], [float(2**53), float(2**53)], [None, 1])
    _kernel_vs_rows("o + 1 > o", [0, 0, 0], [0, 0, 0], [0.0] * 3, [2**53 + 1, None, 2**63 + 5])
    _kernel_vs_rows("x + 100000000000000000000 > 0", [1, -5], [0, 0], [0.0, 0.0], [None, 1])


# ------------------------------------------------------------------ windowed analytics

BIG_V = (2**62 + 7, 2**63 - 1, -(2**63), 2**53 + 1, -(2**53) - 3, 5)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(ev=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 120), st.sampled_from(BIG_V), st.integers(0, 3)),
                   min_size=1, max_size=45).map(lambda xs: [{"k": k, "ts": t, "v": v, "u": u} for k, t, v, u in xs]),
       kind=st.sampled_from(["TUMBLE", "HOP", "SESSION", "SLIDE"]), lateness=st.sampled_from([0, 10]),
       sizes=st.lists(st.integers(1, 45), min_size=1, max_size=6))
def test_analytics_sums_of_big_ints_are_exact(ev, kind, lateness, sizes):
    """SUM over int64 values whose total passes 2**63 (both signs) is the exact Python sum, in
    batches that cut windows: the reference's rows (pure Python ints), and AVG is that sum over the count."""
    sizes = _sizes(sizes, len(ev))
    sql = SELECT.format(window=WINDOWS[kind], min_n=1)
    got = feed(rule(sql, lateness), ev, sizes)[0]
    if kind == "TUMBLE":
        assert got == reference_panes(ev, 20, 20, lateness, 1)
    elif kind == "HOP":
        assert got == reference_panes(ev, 30, 10, lateness, 1)
    elif kind == "SESSION":
        assert final_view(got) == reference_sessions_final(ev, 6, lateness, 1)
    else:
        assert got == reference_slide(ev, 15, lateness, 1)
    avg = sql.replace("SUM(v) AS s", "SUM(v) AS s, AVG(v) AS a")
    for row in feed(rule(avg, lateness), ev, sizes)[0]:
        assert row["a"] == row["s"] / row["n"], row  # (Python: an exact int over the count, rounded once)
        assert type(row["s"]) is int


# ------------------------------------------------------------- percolator numeric ranges


def test_percolator_ranges_compare_integers_exactly():
    """Numeric range queries compare a document's integers with the bounds as Python does
    (exactly), at and around 2**53 and 2**63, both signs, and numbers written as text."""
    from cep.percolator.percolator import Percolator

    p = Percolator()
    bounds = {"ge": (E53 + 1, None, True), "lt": (None, E53 + 1, False), "big": (E63, None, True),
              "neg": (None, -E53 - 1, True)}
    p.register("ge", f"x:[{E53 + 1} TO *]")
    p.register("lt", f"x:{{* TO {E53 + 1}}}")
    p.register("big", f"x:[{E63} TO *]")
    p.register("neg", f"x:[* TO {-E53 - 1}]")
    for x in (E53, E53 + 1, E53 + 2, E63 - 1, E63, -E53 - 1, -E53, float(E53), str(E53 + 1), str(-E53 - 1)):
        v = int(x) if isinstance(x, str) else x
        want = sorted(q for q, (lo, hi, hi_in) in bounds.items()
                      if (lo is None or v >= lo) and (hi is None or (v <= hi if hi_in else v < hi)))
        assert sorted(p.percolate({"x": x}).ids) == want, x
