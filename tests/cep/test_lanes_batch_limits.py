"""All keys of a batch in one lane call under a rule-wide partial-match cap, lateness and rows out of order: each key's own call's rows and counters."""

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
from tests.cep.test_lanes_many_keys import _mixed_events

pytestmark = pytest.mark.skipif(not numba_allowed(), reason="the batch call is the compiled loop's (numba)")


def _run(sql: str, events: list[dict], cuts: list[int], snap_at: int | None, mode: str, total: int | None,
         **opts: Any) -> tuple[list, PatternOperator]:
    """Rows (matches and late rows) in batches cut at ``cuts``, a snapshot restored into a fresh
    operator after batch ``snap_at``; ``mode`` as in tests/cep/test_lanes_batch.py."""
    old = lanes.USE_LANES, lanes.USE_BATCH
    lanes.USE_LANES, lanes.USE_BATCH = mode != "general", mode == "batch"
    try:
        compiled = parse_rule_text(sql).compiled

        def new() -> PatternOperator:
            op = PatternOperator(compiled, name="r", **opts)
            op.max_partial_matches_total = total  # (what an engine's limits set)
            return op

        op = new()
        rows: list = []
        bounds = [0] + sorted(set(cuts)) + [len(events)]
        for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            out = op.process(events[lo:hi])
            rows += out.matches + [("late", r) for r in out.late]
            if b == snap_at:
                data = op.snapshot()
                op = new()
                op.restore(data)
        return rows + op.finish().matches, op
    finally:
        lanes.USE_LANES, lanes.USE_BATCH = old


def _events(rnd: random.Random, light: int, heavy: int, heavy_rows: int, disorder: float) -> list[dict]:
    events = _mixed_events(rnd, light, heavy, heavy_rows)
    for e in events:
        if rnd.random() < disorder:  # (behind the watermark for a small lateness: late rows)
            e["ts"] = max(0, e["ts"] - rnd.randint(1, 10))
    return events


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(sorted(SHAPES)), seed=st.integers(0, 10_000), lateness=st.sampled_from([0, 3, 20]),
       total=st.sampled_from([None, 10, 40]), on_cap=st.sampled_from(["drop_oldest", "skip_key"]),
       ncuts=st.integers(1, 10), snap=st.booleans())
def test_rule_wide_cap_and_lateness(shape, seed, lateness, total, on_cap, ncuts, snap):
    sql = SHAPES[shape][0]
    rnd = random.Random(seed)
    events = _events(rnd, rnd.randint(20, 100), rnd.randint(1, 2), rnd.randint(100, 250), 0.1)
    cuts = [rnd.randrange(1, len(events)) for _ in range(ncuts)]
    snap_at = rnd.randrange(0, ncuts + 1) if snap else None
    opts = {"lateness_ms": lateness, "on_cap": on_cap}
    batch, op_batch = _run(sql, events, cuts, snap_at, "batch", total, **opts)
    keys, op_keys = _run(sql, events, cuts, snap_at, "keys", total, **opts)
    slow, op_slow = _run(sql, events, cuts, None, "general", total, **opts)
    assert batch == keys == slow
    assert _counters(op_batch) == _counters(op_keys) == _counters(op_slow)


def test_the_rule_wide_cap_and_late_rows_are_reached() -> None:
    """One fixed case where the rule-wide cap drops partial matches and rows arrive late."""
    sql = SHAPES["range_breakout"][0]
    rnd = random.Random(3)
    events = _events(rnd, 120, 2, 250, 0.1)
    cuts = list(range(60, len(events), 60))
    batch, op_batch = _run(sql, events, cuts, len(cuts) // 2, "batch", 10, lateness_ms=3)
    slow, op_slow = _run(sql, events, cuts, None, "general", 10, lateness_ms=3)
    assert op_batch.stats.cap_hits > 0 and op_batch.stats.partial_matches_dropped > 0
    assert any(r[0] == "late" for r in batch if isinstance(r, tuple))
    assert batch == slow and len(batch) > 20
    assert _counters(op_batch) == _counters(op_slow)
