"""Lane path fuzz: forks and rows whose arithmetic reaches 2**53 in one key and batch, against the general path and the brute force."""

from __future__ import annotations

import random
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patterns.match_recognize import parse_statement
from tests.cep.test_lanes import _counters, _run
from tests.reference import reference_matches

E53 = 2**53


def _rows_of(asg: tuple, var: str) -> list[int]:
    return [i for i, v, _ in asg if v == var]


def _prev(x: list, i: int) -> int | None:
    return x[i - 1] if i > 0 else None


def _le_prev(x: list, i: int) -> bool:
    p = _prev(x, i)
    return p is not None and x[i] <= p


def _ge_prev(x: list, i: int) -> bool:
    p = _prev(x, i)
    return p is not None and x[i] >= p


# (statement, conditions in Python ints: (x, row, assignment with the row) -> holds). D and U
# overlap on equal values (forks); U adds S to its own row (an intermediate past 2**53 when the
# values sit near 2**52 or 2**53); SUM(D.x) runs past 2**53 over a few rows near 2**52.
SHAPES: dict[str, tuple[str, dict[str, Callable[[list, int, tuple], bool]]]] = {
    "v_fork_sum_of_columns": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, LAST(U.ts) AS t1, COUNT(D.*) AS nd
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S D{2,} U+)
           DEFINE D AS D.x <= PREV(D.x),
                  U AS U.x >= PREV(U.x) AND U.x + S.x >= S.x + S.x - 1)""",
        {"S": lambda x, i, a: True, "D": lambda x, i, a: _le_prev(x, i),
         "U": lambda x, i, a: _ge_prev(x, i) and x[i] + x[a[0][0]] >= 2 * x[a[0][0]] - 1},
    ),
    "v_fork_running_sum": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, LAST(U.ts) AS t1, SUM(D.x) AS sd
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S D{2,} U{1,4})
           DEFINE D AS D.x <= PREV(D.x),
                  U AS U.x >= PREV(U.x) AND SUM(D.x) - U.x <> S.x)""",
        {"S": lambda x, i, a: True, "D": lambda x, i, a: _le_prev(x, i),
         "U": lambda x, i, a: _ge_prev(x, i) and sum(x[j] for j in _rows_of(a, "D")) - x[i] != x[a[0][0]]},
    ),
    "reluctant_b_product": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES S.ts AS t0, LAST(B.ts) AS t1, COUNT(B.*) AS nb
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S R{2,}? B{2,5})
           DEFINE R AS 3 * R.x - 3 * S.x BETWEEN -9 AND 9,
                  B AS B.x * 2 > LAST(R.x) * 2 + 1)""",
        {"S": lambda x, i, a: True, "R": lambda x, i, a: -9 <= 3 * x[i] - 3 * x[a[0][0]] <= 9,
         "B": lambda x, i, a: bool(rs := _rows_of(a, "R")) and 2 * x[i] > 2 * x[rs[-1]] + 1},
    ),
}

# (column values below 2**53 keep a batch on the compiled loop, which then stops where the
# arithmetic reaches 2**53; a rare level past it sends the batch to the numpy stepping)
BASES = (0, 2**52, 2**52 + 2**51, -(2**52 + 2**51), E53 - 80, E53 - 80, E53 + 80, 2**62)


def _events(rnd: random.Random, n: int, keys: int) -> list[dict]:
    """Trending walks (falls and rises of several rows, equal steps for forks) whose level jumps
    now and then between small numbers and 2**52..2**53 and beyond, mid-key."""
    out: list[dict] = []
    base = {k: rnd.choice(BASES[:-2]) for k in range(keys)}
    off = {k: 0 for k in range(keys)}
    d = {k: 1 for k in range(keys)}
    for i in range(n):
        k = rnd.randrange(keys)
        if rnd.random() < 0.03:
            base[k] = rnd.choice(BASES[:-2] if rnd.random() < 0.8 else BASES)
        if rnd.random() < 0.3:
            d[k] = rnd.choice((-1, 0, 1))
        off[k] = max(-30, min(30, off[k] + (d[k] * rnd.choice((1, 1, 2)) if d[k] else rnd.choice((-1, 0, 1)))))
        # (even offsets past 2**53 stay exact as floats: the rows stay on the lanes and only the
        # arithmetic is inexact)
        x = base[k] + (2 * off[k] if abs(base[k]) >= E53 - 80 else off[k])
        out.append({"k": k, "ts": i, "x": x})
    return out


def _brute(sql: str, cond: dict, events: list[dict], keys: int) -> list[tuple]:
    stmt = parse_statement(sql)
    out: list[tuple] = []
    for key in range(keys):
        evs = [e for e in events if e["k"] == key]
        xs = [e["x"] for e in evs]

        def c(var: str, i: int, asg: tuple, xs: list = xs) -> bool:
            return cond[var](xs, i, asg)

        out += [(key, evs[a[0][0]]["ts"], evs[a[-1][0]]["ts"]) for a in reference_matches(len(xs), stmt.pattern, c)]
    return sorted(out)


def _check(shape: str, events: list[dict], keys: int, cuts: list[int], snap_at: int | None,
           **opts: Any) -> list:
    sql, cond = SHAPES[shape]
    slow, op_slow = _run(sql, events, cuts, None, False, **opts)
    fast, op_fast = _run(sql, events, cuts, snap_at, True, **opts)
    nump, op_nump = _run(sql, events, cuts, snap_at, True, kernel=False, **opts)
    if not opts:
        assert sorted((r["k"], r["t0"], r["t1"]) for r in slow) == _brute(sql, cond, events, keys)
    assert nump == slow
    assert fast == slow
    assert _counters(op_fast) == _counters(op_slow) == _counters(op_nump)
    return slow


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(sorted(SHAPES)), seed=st.integers(0, 10_000), keys=st.integers(1, 2),
       n=st.integers(150, 400), ncuts=st.integers(0, 8), snap=st.booleans())
def test_forks_and_inexact_rows_mid_key(shape, seed, keys, n, ncuts, snap):
    """Keys of hundreds of rows crossing 2**53 mid-key, forks, batches that cut runs, a snapshot
    in the middle: compiled loop, numpy stepping and general path agree, and the brute force."""
    rnd = random.Random(seed)
    events = _events(rnd, n, keys)
    cuts = [rnd.randrange(1, n) for _ in range(ncuts)]
    snap_at = rnd.randrange(0, ncuts + 1) if snap else None
    _check(shape, events, keys, cuts, snap_at)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_snapshot_after_every_batch_of_one_row(shape):
    """Batches of a few rows with a snapshot after each: every stop (fork, inexact) is followed
    by a restore."""
    events = _events(random.Random(3), 240, 1)
    sql, cond = SHAPES[shape]
    slow, op_slow = _run(sql, events, list(range(3, 240, 3)), None, False)
    for kernel in (True, False):
        import cep.lanes as lanes
        old = lanes.USE_LANES, lanes.USE_KERNEL
        lanes.USE_LANES, lanes.USE_KERNEL = True, kernel
        try:
            from cep.operator import PatternOperator
            from patterns.rules import parse_rule_text
            compiled = parse_rule_text(sql).compiled
            op = PatternOperator(compiled, name="r")
            rows: list = []
            for lo in range(0, 240, 3):
                rows += op.process(events[lo:lo + 3]).matches
                data = op.snapshot()
                op = PatternOperator(compiled, name="r")
                op.restore(data)
            rows += op.finish().matches
        finally:
            lanes.USE_LANES, lanes.USE_KERNEL = old
        assert rows == slow, kernel
    assert sorted((r["k"], r["t0"], r["t1"]) for r in slow) == _brute(sql, cond, events, 1)


@pytest.mark.parametrize("on_cap", ["drop_oldest", "skip_key"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_within_and_caps(shape, on_cap):
    """WITHIN and a small cap over the same rows: the paths agree on rows and counters."""
    sql = SHAPES[shape][0].replace("\n           DEFINE", " WITHIN INTERVAL '25' MILLISECOND\n           DEFINE")
    SHAPES["_w"] = (sql, SHAPES[shape][1])
    try:
        rnd = random.Random(5)
        events = _events(rnd, 600, 2)
        _check("_w", events, 2, list(range(70, 600, 70)), 4, max_partial_matches=5, on_cap=on_cap)
    finally:
        del SHAPES["_w"]
