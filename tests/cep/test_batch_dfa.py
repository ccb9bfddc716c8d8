"""The batch DFA path (cep/batch_dfa.py) gives the automaton's rows, in its order, and the brute force's matches."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
from cep.engine import Engine
from cep.operator import PatternOperator, StateVersionError
from patterns.match_recognize import parse_statement
from patterns.rules import parse_rule_text, parse_rules
from tests.reference import reference_matches

# (statement, conditions for the brute force: (values of the key, row, assignment) -> holds)
SHAPES = {
    "v_shape": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES A.ts AS t0, LAST(B.ts) AS bottom, C.ts AS t1, MATCH_NUMBER() AS mn
           PATTERN (A B+ C) DEFINE B AS x < PREV(x), C AS x > PREV(x))""",
        {"A": lambda x, i: True, "B": lambda x, i: i > 0 and x[i] < x[i - 1],
         "C": lambda x, i: i > 0 and x[i] > x[i - 1]},
    ),
    "alternation_to_next_row": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES FIRST(A.ts) AS t0, LAST(U.ts) AS u_last, FIRST(U.x) AS u_first, ts AS t1,
                    CLASSIFIER() AS cls, MATCH_NUMBER() AS mn
           AFTER MATCH SKIP TO NEXT ROW
           PATTERN (A (B | C)+? D?) SUBSET U = (B, C)
           DEFINE A AS x > 5, B AS x < PREV(x), C AS x > 7, D AS x = 0)""",
        {"A": lambda x, i: x[i] > 5, "B": lambda x, i: i > 0 and x[i] < x[i - 1],
         "C": lambda x, i: x[i] > 7, "D": lambda x, i: x[i] == 0},
    ),
    "prev_two_back": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES A.ts AS t0, LAST(B.x) AS b_x, C.ts AS t1
           PATTERN (A B* C) DEFINE A AS x > PREV(x, 2), B AS x >= 3, C AS x < 3)""",
        {"A": lambda x, i: i > 1 and x[i] > x[i - 2], "B": lambda x, i: x[i] >= 3, "C": lambda x, i: x[i] < 3},
    ),
    "deep_kleene_count": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES A.ts AS t0, COUNT(B.*) AS nb, COUNT(*) AS n, COUNT(U.*) AS nu, C.ts AS t1
           PATTERN (A B+ C) SUBSET U = (A, C) DEFINE A AS x < 3, B AS x < 8, C AS x >= 8)""",
        {"A": lambda x, i: x[i] < 3, "B": lambda x, i: x[i] < 8, "C": lambda x, i: x[i] >= 8},
    ),
    # expressions over the kernel's measures, combined after it: NULL leaves (D absent), division
    # by zero (A.x = 0), counts, CASE and a function of several leaves
    "expression_measures": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES A.ts AS t0, ROUND(100 * (LAST(B.x) - A.x) / A.x, 2) AS pct, COUNT(B.*) * 2 + 1 AS odd,
                    COALESCE(D.x, -1) AS d_or, CASE WHEN FIRST(B.x) > 5 THEN 'hi' ELSE 'lo' END AS band,
                    GREATEST(A.x, LAST(B.x)) - MATCH_NUMBER() AS g, C.ts AS t1
           PATTERN (A B+ D? C) DEFINE A AS x < 3, B AS x < 8, D AS x = 8, C AS x >= 8)""",
        {"A": lambda x, i: x[i] < 3, "B": lambda x, i: x[i] < 8, "D": lambda x, i: x[i] == 8,
         "C": lambda x, i: x[i] >= 8},
    ),
    "no_partition": (
        """SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts
           MEASURES FIRST(A.ts) AS t0, LAST(A.ts) AS t1, B.x AS b_x
           PATTERN (A{2,} B) DEFINE A AS x > 4, B AS x <= 4)""",
        {"A": lambda x, i: x[i] > 4, "B": lambda x, i: x[i] <= 4},
    ),
}


def _events(rnd: random.Random, n: int, keys: int) -> list[dict]:
    return [{"k": rnd.randrange(keys), "ts": i, "x": rnd.randrange(10)} for i in range(n)]


def _run(sql: str, events: list[dict], cuts: list[int], snap_at: int | None, use: bool, row_ids: bool = False,
         **opts) -> tuple[list, Any]:
    """Rows of the rule over ``events`` cut into batches at ``cuts``; snapshot and restore into a
    fresh operator after batch ``snap_at``."""
    old = batch_dfa.USE_BATCH_DFA
    batch_dfa.USE_BATCH_DFA = use
    try:
        compiled = parse_rule_text(sql).compiled
        op = PatternOperator(compiled, name="r", **opts)
        op.row_ids = row_ids
        rows: list = []
        bounds = [0] + sorted(set(cuts)) + [len(events)]
        for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            rows += op.process(events[lo:hi]).matches
            if b == snap_at:
                data = op.snapshot()
                op = PatternOperator(compiled, name="r", **opts)
                op.row_ids = row_ids
                op.restore(data)
        rows += op.finish().matches
        assert (op._keyed is not None) == use
        return rows, op
    finally:
        batch_dfa.USE_BATCH_DFA = old


def _counters(op: PatternOperator) -> tuple:
    s = op.stats
    return (s.matches, s.rows_emitted, s.partial_matches_peak, s.cap_hits, s.partial_matches_dropped,
            op.counts.processed, op.key_count())


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(sorted(SHAPES)), seed=st.integers(0, 10_000), keys=st.integers(1, 4),
       n=st.integers(200, 900), ncuts=st.integers(0, 12), snap=st.booleans())
def test_same_rows_as_the_automaton_and_the_brute_force(shape, seed, keys, n, ncuts, snap):
    """Keys of hundreds of rows, batches that split runs, a snapshot and restore in the middle:
    the automaton's rows in its order and counters, and per key the brute force's matches."""
    sql, cond = SHAPES[shape]
    rnd = random.Random(seed)
    events = _events(rnd, n, keys)
    cuts = [rnd.randrange(1, n) for _ in range(ncuts)]
    snap_at = rnd.randrange(0, ncuts + 1) if snap else None
    fast, op_fast = _run(sql, events, cuts, snap_at, True)
    slow, op_slow = _run(sql, events, cuts, None, False)
    assert fast == slow
    assert _counters(op_fast) == _counters(op_slow)
    # the brute force: per key, the rows each match's first and last variables took
    stmt = parse_statement(sql)
    by_key: dict = {}
    for e in events:
        by_key.setdefault(e["k"] if "PARTITION" in sql else (), []).append(e)
    expected = set()
    for evs in by_key.values():
        xs = [e["x"] for e in evs]

        def c(var: str, i: int, asg: tuple, xs: list = xs) -> bool:
            return cond[var](xs, i)

        for asg in reference_matches(len(xs), stmt.pattern, c, stmt.skip.mode):
            expected.add((evs[asg[0][0]]["ts"], evs[asg[-1][0]]["ts"]))
    got = {(r["t0"], r["t1"]) for r in fast}
    if shape == "no_partition":  # t1 is the last A row there: the match's last row is the B after it
        got = {(r["t0"], next(e["ts"] for e in events if e["ts"] > r["t1"])) for r in fast}
    assert got == expected


def test_many_keys_per_batch():
    """Thousands of keys with a few rows each per batch, over many batches; with row ids (``_id``,
    as durable runs write them)."""
    sql = SHAPES["v_shape"][0]
    rnd = random.Random(15)
    events = _events(rnd, 30_000, 3_000)
    cuts = list(range(2048, 30_000, 2048))
    fast, op_fast = _run(sql, events, cuts, 7, True, row_ids=True)
    slow, op_slow = _run(sql, events, cuts, None, False, row_ids=True)
    assert fast == slow and len(fast) > 1000
    assert len({r["_id"] for r in fast}) == len(fast)
    assert _counters(op_fast) == _counters(op_slow)


@pytest.mark.parametrize("on_cap", ["drop_oldest", "skip_key"])
def test_per_key_cap(on_cap):
    """``max_partial_matches`` drops attempts as the automaton does (rows and counters)."""
    sql = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
             MEASURES A.ts AS t0, C.ts AS t1 AFTER MATCH SKIP TO NEXT ROW
             PATTERN (A B+ C) DEFINE A AS x > 2, B AS x > 1, C AS x = 0)"""
    rnd = random.Random(3)
    events = _events(rnd, 4000, 5)
    cuts = list(range(333, 4000, 333))
    fast, op_fast = _run(sql, events, cuts, 4, True, max_partial_matches=3, on_cap=on_cap)
    slow, op_slow = _run(sql, events, cuts, None, False, max_partial_matches=3, on_cap=on_cap)
    assert fast == slow and len(fast) > 50
    assert op_fast.stats.cap_hits > 0
    assert _counters(op_fast) == _counters(op_slow)


def test_live_partial_matches_and_keys():
    """What the operator reports between batches is the automaton's."""
    sql = SHAPES["v_shape"][0]
    events = _events(random.Random(8), 3000, 50)
    for use in (True, False):
        old = batch_dfa.USE_BATCH_DFA
        batch_dfa.USE_BATCH_DFA = use
        try:
            op = PatternOperator(parse_rule_text(sql).compiled, name="r")
            seen = []
            for lo in range(0, 3000, 700):
                op.process(events[lo : lo + 700])
                seen.append((op.live_partial_matches(), op.key_count()))
        finally:
            batch_dfa.USE_BATCH_DFA = old
        if use:
            fast_seen = seen
    assert fast_seen == seen and any(live for live, _ in seen)


def test_engine_with_shared_work():
    """Several rules in one engine (shared masks and PREV signatures): same rows either way."""
    text = """
rules:
  - name: v
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, C.ts AS t1 PATTERN (A B+ C)
        DEFINE B AS x < PREV(x), C AS x > PREV(x))
  - name: w
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, C.ts AS t1 PATTERN (A B C)
        DEFINE A AS x > 6, B AS x < PREV(x), C AS x > PREV(x))
  - name: within
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0 PATTERN (A B) WITHIN INTERVAL '5' MILLISECOND
        DEFINE A AS x > 7, B AS x < PREV(x))
"""
    events = _events(random.Random(21), 6000, 300)
    outs = []
    for use in (True, False):
        old = batch_dfa.USE_BATCH_DFA
        batch_dfa.USE_BATCH_DFA = use
        try:
            eng = Engine(parse_rules(text))
            outs.append(eng.run([events[i : i + 1000] for i in range(0, 6000, 1000)]).matches)
            taken = {name: op._keyed is not None for name, op in eng.operators.items()}
        finally:
            batch_dfa.USE_BATCH_DFA = old
        if use:
            # WITHIN over a pattern whose matches all have two rows: the batch path (cep/batch_dfa.py)
            assert taken == {"v": True, "w": True, "within": True}
    assert outs[0] == outs[1] and len(outs[0]) > 500


def test_uncovered_rules_keep_the_automaton():
    """WITHIN over matches of varying length, aggregates other than COUNT, measures that navigate
    (PREV) and back-referencing
    conditions that no rewrite makes row-local are not planned for the batch path."""
    assert batch_dfa.batch_plan(PatternOperator(parse_rule_text(SHAPES["v_shape"][0]).compiled).automaton) is not None
    for sql in (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0
           PATTERN (A B+) WITHIN INTERVAL '5' SECOND DEFINE A AS x > 1, B AS x < 1)""",
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES SUM(B.x) AS sb
           PATTERN (A B+) DEFINE A AS x > 1, B AS x < 1)""",
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.x - PREV(A.x) AS d
           PATTERN (A B+) DEFINE A AS x > 1, B AS x < 1)""",
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0
           PATTERN (A B+) DEFINE A AS x > 1, B AS x < A.x)""",
    ):
        op = PatternOperator(parse_rule_text(sql).compiled, name="r")
        op.process([{"k": 1, "ts": 1, "x": 2}])
        assert op._keyed is None


def test_restore_without_numba_is_a_clear_error(monkeypatch):
    """A snapshot holding the batch path's state cannot be resumed by the automaton: it says so."""
    sql = SHAPES["v_shape"][0]
    monkeypatch.setattr(batch_dfa, "USE_BATCH_DFA", True)
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    op.process(_events(random.Random(1), 100, 3))
    assert op._keyed is not None
    data = op.snapshot()
    monkeypatch.setattr(batch_dfa, "_numba_ok", lambda: False)
    fresh = PatternOperator(parse_rule_text(sql).compiled, name="r")
    with pytest.raises(StateVersionError, match=r"batch DFA.s state .*\(is numba installed\?\)"):
        fresh.restore(data)


def test_state_view_shows_the_partial_matches():
    """``cep state`` of a batch-path rule shows the automaton's partial matches, rows and variables
    (rows retained differ: the automaton keeps rows lazily, the batch path only what it needs)."""
    from cep.state_view.pattern import pattern_view

    sql = SHAPES["prev_two_back"][0]
    events = _events(random.Random(2), 700, 6)
    views = []
    for use in (True, False):
        old = batch_dfa.USE_BATCH_DFA
        batch_dfa.USE_BATCH_DFA = use
        try:
            op = PatternOperator(parse_rule_text(sql).compiled, name="r")
            op.process(events[:350])
            op.process(events[350:])
            v = pattern_view(op)
        finally:
            batch_dfa.USE_BATCH_DFA = old
        views.append(([{k: x for k, x in e.items() if k != "rows_retained"} for e in v.keys], v.totals))
    assert views[0] == views[1]
    assert views[0][1]["partial_matches"] > 0 and any(len(p["rows"]) > 1 for e in views[0][0] for p in e["partial_matches"])


def test_store_settles_and_is_compacted_in_place():
    """Batch after batch the column store is compacted rather than grown: its size settles at about
    two batches of rows, and the rows still equal the automaton's (PREV across every cut)."""
    sql = SHAPES["prev_two_back"][0]
    events = _events(random.Random(5), 12_000, 40)
    cuts = list(range(1000, 12_000, 1000))
    fast, op_fast = _run(sql, events, cuts, None, True)
    slow, _ = _run(sql, events, cuts, None, False)
    assert fast == slow and len(fast) > 100
    assert len(op_fast._keyed.s_mask) <= 4 * 1000 + 4096


def test_store_takes_only_the_rows_kept():
    """A batch's rows are stepped from the batch itself: the store (links, masks, columns) and the
    attempt pool grow with the rows and attempts kept for later batches, not with the batch. One
    batch of 20,000 rows over 40 keys keeps at most two rows per key (PREV(x, 2)) plus the rows of
    live attempts; the rows still equal the automaton's."""
    sql = SHAPES["prev_two_back"][0]
    events = _events(random.Random(6), 24_000, 40)
    fast, op_fast = _run(sql, events, [20_000], None, True)
    slow, _ = _run(sql, events, [20_000], None, False)
    assert fast == slow and len(fast) > 100
    keyed = op_fast._keyed
    assert keyed.s_used < 2_000 and len(keyed.s_mask) <= 4096 and len(keyed.cols[0]) <= 4096
    assert keyed.pool.shape[1] <= 4096


def test_pool_grows_inside_the_step():
    """Every row starts an attempt that stays alive (``B+`` takes every row, ``C`` never comes until
    the end, ``SKIP TO NEXT ROW`` keeps each start row): a batch's attempts outgrow the pool the
    step was given, which grows while stepping; rows, match numbers and counters equal the
    automaton's, with batches cut at several sizes and a snapshot in the middle."""
    sql = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
             MEASURES A.ts AS t0, COUNT(B.*) AS nb, C.ts AS t1, MATCH_NUMBER() AS mn
             AFTER MATCH SKIP TO NEXT ROW
             PATTERN (A B+ C) DEFINE A AS x >= 0, B AS x < 100, C AS x = 100)"""
    rnd = random.Random(8)
    events = [{"k": i % 3, "ts": i, "x": rnd.randrange(10)} for i in range(9_000)]
    events += [{"k": k, "ts": 9_000 + k, "x": 100} for k in range(3)]
    for cuts, snap in (([6_000], None), ([500, 5_500, 8_000], 1)):
        fast, op_fast = _run(sql, events, cuts, snap, True, max_partial_matches=100_000)
        slow, op_slow = _run(sql, events, cuts, snap, False, max_partial_matches=100_000)
        assert fast == slow and len(fast) == 3 * 2_999
        assert op_fast.stats.partial_matches_peak == op_slow.stats.partial_matches_peak >= 2_000


@pytest.mark.parametrize("size", [1, 2, 3, 16_385])
def test_batches_of_odd_sizes_with_runs_across_them(size):
    """The batch's rows are read from the batch while it is stepped (links within a key's segment,
    the segment's first row to the key's last stored row): batches of one, two and three rows (every
    link crosses into the store) and of 16,384 + 1 rows (runs of hundreds of rows split at the
    cut), keys first seen mid-stream, SKIP PAST LAST ROW and TO NEXT ROW, a snapshot in the middle:
    the automaton's rows, match numbers and counters."""
    rnd = random.Random(size)
    n, keys, end = (600, 6, 0.03) if size < 10 else (20_000, 30, 0.004)
    events = [{"k": rnd.randrange(keys if i > n // 4 else 2), "ts": i,
               "x": 1000 if rnd.random() < end else rnd.randrange(10)} for i in range(n)]
    cuts = list(range(size, n, size))
    for skip in ("PAST LAST ROW", "TO NEXT ROW"):
        sql = f"""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
                 MEASURES A.ts AS t0, FIRST(B.x) AS fb, LAST(B.ts) AS lb, COUNT(B.*) AS nb, C.ts AS t1,
                          MATCH_NUMBER() AS mn
                 AFTER MATCH SKIP {skip} PATTERN (A B+ C) DEFINE A AS x > PREV(x), B AS x < 1000, C AS x = 1000)"""
        fast, op_fast = _run(sql, events, cuts, len(cuts) // 2, True, row_ids=True, max_partial_matches=100_000)
        slow, op_slow = _run(sql, events, cuts, None, False, row_ids=True, max_partial_matches=100_000)
        assert fast == slow and len(fast) > 0
        assert _counters(op_fast) == _counters(op_slow)
