"""All keys of a batch in one call of the compiled lane loop: the same rows, counters and state as each key alone."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.lanes as lanes
from cep.compiled import numba_allowed
from cep.operator import PatternOperator
from patterns.rules import parse_rule_text
from tests.cep.test_lanes import SHAPES, _counters
from tests.cep.test_lanes_many_keys import _brute, _check_retained, _mixed_events

pytestmark = pytest.mark.skipif(not numba_allowed(), reason="the batch call is the compiled loop's (numba)")


def _run(sql: str, events: list[dict], cuts: list[int], snap_at: int | None, mode: str,
         check: bool = False, **opts: Any) -> tuple[list, PatternOperator, dict[str, int]]:
    """Rows of the rule over ``events`` in batches cut at ``cuts``, a snapshot restored into a
    fresh operator after batch ``snap_at``. ``mode``: ``batch`` (all keys in one call), ``keys``
    (each key by its own call of the compiled loop), ``general`` (no lane path). Also returns how
    often the batch call ran and how often its shared arrays were compacted."""
    old = lanes.USE_LANES, lanes.USE_BATCH
    lanes.USE_LANES, lanes.USE_BATCH = mode != "general", mode == "batch"
    seen = {"calls": 0, "compactions": 0}
    real_step, real_compact = lanes.step_batch, lanes._Lanes.compact

    def counting_step(*args: Any, **kw: Any) -> Any:
        got = real_step(*args, **kw)
        seen["calls"] += got is not None
        return got

    def counting_compact(self: Any, q: Any) -> Any:
        seen["compactions"] += self.shared
        return real_compact(self, q)

    lanes.step_batch, lanes._Lanes.compact = counting_step, counting_compact  # type: ignore[method-assign]
    try:
        compiled = parse_rule_text(sql).compiled
        op = PatternOperator(compiled, name="r", **opts)
        rows: list = []
        bounds = [0] + sorted(set(cuts)) + [len(events)]
        for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            rows += op.process(events[lo:hi]).matches
            if check:
                _check_retained(op)
            if b == snap_at:
                data = op.snapshot()
                op = PatternOperator(compiled, name="r", **opts)
                op.restore(data)
        rows += op.finish().matches
        return rows, op, seen
    finally:
        lanes.USE_LANES, lanes.USE_BATCH = old
        lanes.step_batch, lanes._Lanes.compact = real_step, real_compact  # type: ignore[method-assign]


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(sorted(SHAPES)), seed=st.integers(0, 10_000), light=st.integers(30, 150),
       heavy=st.integers(1, 3), heavy_rows=st.integers(100, 300), ncuts=st.integers(1, 12), snap=st.booleans(),
       cap=st.sampled_from([None, 5, 8]))
def test_one_call_per_batch_matches_each_key_alone(shape, seed, light, heavy, heavy_rows, ncuts, snap, cap):
    """Many keys of a few rows beside keys of hundreds, batches that cut runs, a restore in the
    middle: one call for all keys gives each key's own call's rows in its order, the general
    path's rows and counters, and (without a cap) the brute force's matches; retained rows stay
    complete."""
    sql, cond = SHAPES[shape]
    rnd = random.Random(seed)
    events = _mixed_events(rnd, light, heavy, heavy_rows)
    cuts = [rnd.randrange(1, len(events)) for _ in range(ncuts)]
    snap_at = rnd.randrange(0, ncuts + 1) if snap else None
    opts = {} if cap is None else {"max_partial_matches": cap, "on_cap": "drop_oldest"}
    batch, op_batch, seen = _run(sql, events, cuts, snap_at, "batch", check=True, **opts)
    keys, op_keys, _ = _run(sql, events, cuts, snap_at, "keys", **opts)
    slow, op_slow, _ = _run(sql, events, cuts, None, "general", **opts)
    assert seen["calls"] > 0
    assert batch == keys == slow
    assert _counters(op_batch) == _counters(op_keys) == _counters(op_slow)
    if cap is None:
        assert sorted((r["k"], r["t0"], r["t1"]) for r in batch) == _brute(sql, cond, events)


@pytest.mark.parametrize("on_cap", ["drop_oldest", "skip_key"])
def test_caps_within_and_compaction_over_many_batches(on_cap):
    """A per-key cap and WITHIN over 100 light keys and two heavy ones of 1,500 rows in 14 batches:
    the shared arrays are compacted between batches, an ended start row gets a lane again after
    a cap (its start row's number is another key's too), and rows and counters stay each key's
    own call's."""
    sql = SHAPES["range_breakout"][0].replace("PATTERN (S R{3,} B)", "PATTERN (S R{3,} B) WITHIN INTERVAL '0.4' SECOND")
    assert "WITHIN" in sql
    rnd = random.Random(5)
    events = _mixed_events(rnd, 100, 2, 1500)
    cuts = list(range(250, len(events), 250))
    opts = {"max_partial_matches": 7, "on_cap": on_cap}
    batch, op_batch, seen = _run(sql, events, cuts, len(cuts) // 2, "batch", check=True, **opts)
    keys, op_keys, _ = _run(sql, events, cuts, len(cuts) // 2, "keys", **opts)
    slow, op_slow, _ = _run(sql, events, cuts, None, "general", **opts)
    assert seen["calls"] >= len(cuts) // 2 and seen["compactions"] > 0
    assert op_batch.stats.cap_hits > 0
    assert batch == keys == slow and len(batch) > 5
    assert _counters(op_batch) == _counters(op_keys) == _counters(op_slow)


def test_runs_that_fork_inside_a_batch():
    """A start row whose runs fork goes to node chains (its key then steps alone until it holds no
    start row, and joins the batch's call again): rows and counters as on the general path."""
    sql = SHAPES["v_shape_forks"][0]
    rnd = random.Random(2)
    events = _mixed_events(rnd, 200, 2, 300)
    cuts = list(range(50, len(events), 50))
    batch, op_batch, seen = _run(sql, events, cuts, None, "batch", check=True)
    slow, op_slow, _ = _run(sql, events, cuts, None, "general")
    assert batch == slow
    assert _counters(op_batch) == _counters(op_slow)
    pool = op_batch._lane_pool
    assert pool is not None and pool.shared
    assert any(st_.lanes is pool for st_ in op_batch.states.values())
