"""The compiled lane path over many keys of a few rows each beside keys of hundreds of rows: rows, counters and retained rows."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.lanes as lanes
from cep.compiled import numba_allowed
from cep.engine import Engine
from patterns.match_recognize import parse_statement
from patterns.rules import parse_rule_text
from tests.cep.test_lanes import SHAPES, _counters, _three_paths_agree
from tests.reference import reference_matches


def key_walks(rnd: random.Random, light: int, heavy: int, heavy_rows: int) -> Iterator[tuple[int, int, int]]:
    """(row, key, x) of ``light`` keys of 1 to 6 rows and ``heavy`` keys of ``heavy_rows`` rows,
    interleaved at random (each key's rows in order); ``x`` a trending walk in 0..20 per key
    (falls and rises of several rows)."""
    labels = [k for k in range(heavy) for _ in range(heavy_rows)]
    labels += [k for k in range(heavy, heavy + light) for _ in range(rnd.randint(1, 6))]
    rnd.shuffle(labels)
    x: dict[int, int] = {}
    d: dict[int, int] = {}
    for i, k in enumerate(labels):
        if k not in x:
            x[k], d[k] = rnd.randrange(0, 21), rnd.choice((-1, 1))
        if rnd.random() < 0.3:
            d[k] = rnd.choice((-1, 0, 1))
        step = d[k] * rnd.choice((1, 1, 2)) if d[k] else rnd.choice((-1, 0, 1))
        x[k] = max(0, min(20, x[k] + step))
        yield i, k, x[k]


def _mixed_events(rnd: random.Random, light: int, heavy: int, heavy_rows: int) -> list[dict]:
    """:func:`key_walks` as events, ``v`` small with NULLs."""
    return [{"k": k, "ts": i, "x": x, "v": None if rnd.random() < 0.05 else rnd.randrange(1, 100)}
            for i, k, x in key_walks(rnd, light, heavy, heavy_rows)]


def _brute(sql: str, cond: dict, events: list[dict]) -> list[tuple]:
    stmt = parse_statement(sql)
    out: list[tuple] = []
    for key in sorted({e["k"] for e in events}):
        evs = [e for e in events if e["k"] == key]
        xs, vs = [e["x"] for e in evs], [e["v"] for e in evs]

        def c(var: str, i: int, asg: tuple, xs: list = xs, vs: list = vs) -> bool:
            return cond[var](xs, vs, i, asg)

        out += [(key, evs[a[0][0]]["ts"], evs[a[-1][0]]["ts"]) for a in reference_matches(len(xs), stmt.pattern, c)]
    return sorted(out)


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(sorted(SHAPES)), seed=st.integers(0, 10_000), light=st.integers(20, 120),
       heavy=st.integers(1, 2), heavy_rows=st.integers(120, 300), ncuts=st.integers(0, 8), snap=st.booleans())
def test_many_light_keys_and_heavy_keys(shape, seed, light, heavy, heavy_rows, ncuts, snap):
    """Keys of a few rows beside keys of hundreds, batches that cut runs, a restore in the middle:
    the compiled loop, the numpy stepping and the general path give the same rows in the same
    order and the same counters, and per key the brute force's matches."""
    sql, cond = SHAPES[shape]
    rnd = random.Random(seed)
    events = _mixed_events(rnd, light, heavy, heavy_rows)
    n = len(events)
    cuts = [rnd.randrange(1, n) for _ in range(ncuts)]
    snap_at = rnd.randrange(0, ncuts + 1) if snap else None
    fast = _three_paths_agree(sql, events, cuts, snap_at)
    assert sorted((r["k"], r["t0"], r["t1"]) for r in fast) == _brute(sql, cond, events)


def _engine_rows(rules: list[str], events: list[dict], cuts: list[int], use: bool,
                 check: bool = False) -> tuple[list, list[tuple]]:
    """Rows and counters of ``rules`` run together by one engine (they share the batch's decoding
    and column lists); ``check``: after each batch, every key's retained rows are checked."""
    old = lanes.USE_LANES
    lanes.USE_LANES = use
    try:
        eng = Engine([parse_rule_text(sql, f"r{i}") for i, sql in enumerate(rules)])
        ops = list(eng.operators.values())
        assert all((op.automaton.lanes is not None) == use for op in ops)
        rows: list = []
        bounds = [0] + sorted(set(cuts)) + [len(events)]
        for lo, hi in zip(bounds, bounds[1:]):
            rows += eng.process(events[lo:hi]).matches
            if check:
                for op in ops:
                    _check_retained(op)
        if use and numba_allowed():
            # the compiled loop stepped keys: all of a batch's in one call (their lanes in the
            # operator's shared arrays), or each by its own call (which leaves its queue behind)
            assert all(any(x.lanes is not None and (x.lanes.shared if lanes.USE_BATCH else x.lanes.qcache is not None)
                           for x in op.states.values()) for op in ops)
        rows += eng.finish().matches
    finally:
        lanes.USE_LANES = old
    return rows, [_counters(op) for op in ops]


def _check_retained(op: Any) -> None:
    """Every key's retained rows end at its last row, and reach back to its first live start row
    (minus the rows PREV reads)."""
    back = op.automaton.max_back
    for st_ in op.states.values():
        assert st_.base + len(st_.rows) == st_.nrows
        if st_.attempts:
            assert st_.base <= max(0, st_.attempts[0].start - back)


def _rule(threshold: int) -> str:
    return f"""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
               MEASURES S.ts AS t0, LAST(U.ts) AS t1, COUNT(D.*) AS nd, LAST(D.x) AS bottom,
                        PREV(S.x, 3) AS before_start
               AFTER MATCH SKIP PAST LAST ROW
               PATTERN (S D{{2,}} U+)
               DEFINE D AS D.x < PREV(D.x),
                      U AS U.x > PREV(U.x) AND LAST(U.x) >= S.x + {threshold})"""


def test_rules_sharing_a_batch_over_many_keys():
    """Three V-shapes in one engine over 400 light keys and two heavy ones, in batches that cut
    runs, one measure reading 3 rows before the start row: the same rows and counters with and
    without the lane path, and each key keeps the rows its live start rows need."""
    rnd = random.Random(11)
    events = _mixed_events(rnd, 400, 2, 400)
    cuts = list(range(97, len(events), 97))
    rules = [_rule(t) for t in (-1, 0, 2)]
    fast, c_fast = _engine_rows(rules, events, cuts, True, check=True)
    slow, c_slow = _engine_rows(rules, events, cuts, False)
    assert fast == slow
    assert c_fast == c_slow
    assert len(fast) > 20  # (the walks make V-shapes in light and heavy keys)
    # (a measure reads the row 3 before the start row: retained rows reach back that far)
    assert any(r["before_start"] is not None for r in fast)
    assert {r["k"] for r in fast} & {0, 1} and {r["k"] for r in fast} - {0, 1}
