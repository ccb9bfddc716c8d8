"""Matches the compiled lane loop records and the engine outputs after the call: the rows, order and counters of every other path."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.lanes as lanes
from cep.compiled import numba_allowed
from cep.operator import PatternOperator
from patterns.rules import parse_rule_text
from tests.cep.test_lanes import SHAPES, _counters
from tests.cep.test_lanes_batch import _run
from tests.cep.test_lanes_many_keys import _brute, _mixed_events

pytestmark = pytest.mark.skipif(not numba_allowed(), reason="matches are recorded by the compiled loop (numba)")

_V_DEFINE = """PATTERN (S D{2,} U+)
           DEFINE D AS D.x < PREV(D.x),
                  U AS U.x > PREV(U.x) AND LAST(U.x) >= S.x)"""

# (statement, brute-force conditions): measures that are row lookups (the match leaves without a
# node chain), measures that need the chain (an aggregate), and a bounded reluctant shape
CASES: dict[str, tuple[str, dict]] = {
    "lookups": (
        """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES FIRST(S.ts) AS t0, LAST(D.ts) AS bottom_t, LAST(U.ts) AS t1, S.x AS sx,
                    LAST(D.x) AS bottom, FIRST(U.v) AS uv, LAST(ts) AS last_t, MATCH_NUMBER() AS mn,
                    CLASSIFIER() AS cls
           AFTER MATCH SKIP PAST LAST ROW
           """ + _V_DEFINE,
        SHAPES["v_shape"][1],
    ),
    "chain": SHAPES["v_shape"],
    "reluctant_b_reads_r": SHAPES["reluctant_b_reads_r"],
}


def _recorded(sql: str, events: list[dict], cuts: list[int], snap_at: int | None, mode: str,
              row_ids: bool = False) -> tuple[list, PatternOperator, int, int]:
    """:func:`tests.cep.test_lanes_batch._run`, also counting the matches output from the loop's
    records and the rows output at the end of input (matches still growing there)."""
    seen = [0, 0]
    real, real_init, real_finish = lanes._emit_rec, PatternOperator.__init__, PatternOperator.finish
    real_steps = lanes._emit_steps

    def counting(a: Any, st_: Any, cols: Any, off: int, rows_all: Any, rec: Any, nr: int, *rest: Any) -> None:
        seen[0] += nr
        real(a, st_, cols, off, rows_all, rec, nr, *rest)

    def counting_steps(a: Any, st_: Any, steps: list, *rest: Any) -> int:
        seen[0] += len(steps)  # (LaneBatch.finish_all: the recorded matches of a key, their rows read at once)
        return real_steps(a, st_, steps, *rest)

    def init(self: PatternOperator, *args: Any, **kw: Any) -> None:
        real_init(self, *args, **kw)
        self.row_ids = row_ids

    def finish(self: PatternOperator, *args: Any, **kw: Any) -> Any:
        out = real_finish(self, *args, **kw)
        seen[1] += len(out.matches)
        return out

    lanes._emit_rec = counting  # type: ignore[assignment]
    lanes._emit_steps = counting_steps  # type: ignore[assignment]
    PatternOperator.__init__, PatternOperator.finish = init, finish  # type: ignore[method-assign]
    try:
        rows, op, _ = _run(sql, events, cuts, snap_at, mode, check=mode == "batch")
    finally:
        lanes._emit_rec = real  # type: ignore[assignment]
        lanes._emit_steps = real_steps  # type: ignore[assignment]
        PatternOperator.__init__, PatternOperator.finish = real_init, real_finish  # type: ignore[method-assign]
    return rows, op, seen[0], seen[1]


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(sorted(CASES)), seed=st.integers(0, 10_000), light=st.integers(20, 120),
       heavy=st.integers(1, 3), heavy_rows=st.integers(150, 300), ncuts=st.integers(1, 10), snap=st.booleans(),
       row_ids=st.booleans())
def test_recorded_matches_agree_with_every_path(case, seed, light, heavy, heavy_rows, ncuts, snap, row_ids):
    """Keys of a few rows beside keys of hundreds with many matches each, batches that cut runs
    and matches, a restore in the middle: all keys in one call, each key in its own calls
    (CEP_LANES_BATCH=0) and the general path (CEP_LANES=0) give the same rows in the same order
    (with ``_id``s when asked) and the same counters, and per key the brute force's matches.
    Without a restore every match leaves from the loop's records (no row goes back to Python)."""
    sql, cond = CASES[case]
    rnd = random.Random(seed)
    events = _mixed_events(rnd, light, heavy, heavy_rows)
    cuts = [rnd.randrange(1, len(events)) for _ in range(ncuts)]
    snap_at = rnd.randrange(0, ncuts + 1) if snap else None
    batch, op_batch, rec_batch, last = _recorded(sql, events, cuts, snap_at, "batch", row_ids)
    keys, op_keys, rec_keys, _ = _recorded(sql, events, cuts, snap_at, "keys", row_ids)
    slow, op_slow, rec_slow, _ = _recorded(sql, events, cuts, None, "general", row_ids)
    assert batch == keys == slow
    assert _counters(op_batch) == _counters(op_keys) == _counters(op_slow)
    assert sorted((r["k"], r["t0"], r["t1"]) for r in batch) == _brute(sql, cond, events)
    assert rec_slow == 0
    if snap_at is None:  # (the end of input ends the matches still growing: the engine outputs those)
        assert rec_batch == rec_keys == len(batch) - last
    else:  # (a start row restored with its match as a node chain leaves through the engine)
        assert rec_batch <= len(batch) - last and rec_keys <= len(batch) - last
    if row_ids:
        assert len({r["_id"] for r in batch}) == len(batch)


def test_lookup_measures_leave_without_a_node_chain():
    """The row-lookup measures take the chain-free output (a FastMatch), the aggregate one the
    chain; both agree with the general path on a key whose matches fill a batch, cut mid-match."""
    a = PatternOperator(parse_rule_text(CASES["lookups"][0]).compiled, name="r").automaton
    assert a.lanes is not None and a.lanes.fast_match is not None and a.fast_plan is None
    b = PatternOperator(parse_rule_text(CASES["chain"][0]).compiled, name="r").automaton
    assert b.lanes is not None and b.lanes.fast_match is None
    # one key: three falls, then two rises past the start, so a match every 6 rows; batches of 7 cut matches
    xs = [10, 9, 8, 7, 11, 12] * 60
    events = [{"k": 1, "ts": i, "x": x, "v": i % 7} for i, x in enumerate(xs)]
    cuts = list(range(7, len(events), 7))
    got = {}
    for case in ("lookups", "chain"):
        sql, cond = CASES[case]
        batch, op_batch, rec, last = _recorded(sql, events, cuts, None, "batch")
        slow, op_slow, _, _ = _recorded(sql, events, cuts, None, "general")
        assert batch == slow and len(batch) > 50 and rec == len(batch) - last
        assert _counters(op_batch) == _counters(op_slow)
        assert sorted((r["k"], r["t0"], r["t1"]) for r in batch) == _brute(sql, cond, events)
        got[case] = batch
    rows = got["lookups"]
    assert [r["mn"] for r in rows] == list(range(1, len(rows) + 1))
    assert {r["cls"] for r in rows} == {"U"} and all(r["bottom_t"] < r["t1"] == r["last_t"] for r in rows)
    assert [(r["t0"], r["t1"]) for r in rows] == [(r["t0"], r["t1"]) for r in got["chain"]]


def _kept(op: PatternOperator) -> dict:
    """Each key's retained rows, row count, resume row, match number and queued start rows (the
    per-key state a snapshot writes)."""
    return {k: (s.base, list(s.rows), s.nrows, s.resume, s.match_number, [a.start for a in s.attempts])
            for k, s in op.states.items()}


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), light=st.integers(20, 120), heavy=st.integers(1, 3),
       heavy_rows=st.integers(150, 300), ncuts=st.integers(1, 10), snap=st.booleans())
def test_rows_kept_after_one_call_are_each_keys_own(seed, light, heavy, heavy_rows, ncuts, snap):
    """The rows each key retains after a batch stepped in one call (made for all keys at once,
    LaneBatch.keep_rows) are those of each key's own calls, row for row, and
    so is the rest of its state, after every batch: keys of a few rows beside keys of hundreds
    with many matches, batches that cut runs and matches, a restore in the middle."""
    rnd = random.Random(seed)
    events = _mixed_events(rnd, light, heavy, heavy_rows)
    bounds = [0] + sorted({rnd.randrange(1, len(events)) for _ in range(ncuts)}) + [len(events)]
    snap_at = rnd.randrange(0, len(bounds) - 1) if snap else None
    sql = CASES["lookups"][0]
    compiled = parse_rule_text(sql).compiled
    old = lanes.USE_BATCH
    ops, outs = [], []
    try:
        for batch in (True, False):
            lanes.USE_BATCH = batch
            op, rows, kept = PatternOperator(compiled, name="r"), [], []
            for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
                rows += op.process(events[lo:hi]).matches
                kept.append(_kept(op))
                if b == snap_at:
                    data = op.snapshot()
                    op = PatternOperator(compiled, name="r")
                    op.restore(data)
            ops.append(op)
            outs.append((rows, kept))
    finally:
        lanes.USE_BATCH = old
    (rows_b, kept_b), (rows_k, kept_k) = outs
    assert rows_b == rows_k
    assert kept_b == kept_k
    assert _counters(ops[0]) == _counters(ops[1])


_ARRAYS = st.one_of(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=40).map(lambda v: np.array(v, np.float64)),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40).map(lambda v: np.array(v, np.int64)),
    st.lists(st.integers(-(2**54), 2**54), max_size=40).map(lambda v: np.array(v, np.int64)),
    st.lists(st.one_of(st.none(), st.integers(-(2**60), 2**60), st.floats(allow_nan=True), st.booleans(), st.text(max_size=2)),
             max_size=40).map(lambda v: np.array(v + [None], dtype=object)),
    st.lists(st.booleans(), max_size=40).map(lambda v: np.array(v, bool)),
    st.lists(st.floats(width=32, allow_nan=False), max_size=40).map(lambda v: np.array(v, np.float32)),
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(arr=_ARRAYS)
def test_a_column_read_from_its_array_is_the_one_read_from_its_list(arr):
    """The compiled loop reads a column from the operator's array (float64 and int64 by their type,
    every other type through its list): the same values, and the same refusal (None) of a value not
    exactly a number (a float NaN, an integer at or past 2**53, a bool, text), as from the list."""
    got = lanes._clean_array(arr)
    ref = lanes._clean_column(arr.tolist())
    if ref is None:
        assert got is None
    else:
        assert got is not None and got.dtype == np.float64
        assert np.array_equal(got, ref, equal_nan=True)
