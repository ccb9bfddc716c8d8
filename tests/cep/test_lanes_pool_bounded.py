"""The lane pool shared by a batch's keys stays bounded by its live start rows and a batch, not by the rows the stream has seen."""

from __future__ import annotations

import random

import pytest

import cep.lanes as lanes
from cep.compiled import numba_allowed
from cep.operator import PatternOperator
from patterns.rules import parse_rule_text
from tests.cep.test_lanes import SHAPES

pytestmark = pytest.mark.skipif(not numba_allowed(), reason="the shared pool is the compiled loop's (numba)")


def _batches(nkeys: int, nbatches: int, per: int) -> list[list[dict]]:
    rnd = random.Random(0)
    x: dict[int, int] = {}
    out, t = [], 0
    for _ in range(nbatches):
        evs = []
        for _ in range(per):
            k = rnd.randrange(nkeys)
            x[k] = max(0, min(20, x.get(k, 10) + rnd.choice([-2, -1, 0, 1, 2])))
            evs.append({"k": k, "ts": t, "x": x[k], "v": rnd.randrange(1, 100)})
            t += 1
        out.append(evs)
    return out


def test_pool_is_reclaimed_not_grown_when_ended_start_rows_take_lanes() -> None:
    """range_breakout over 100 keys, 40 batches of 500 rows: every batch, start rows that ended
    and wait at a key's head for their match get a lane before the call (a start row's number
    is other keys' too). Those lanes once pushed the pool past its room after the reclaim test
    had passed, so it grew fourfold each time it filled (65,536 lanes after 12,000 rows, a
    million after 766,000, for about a thousand live start rows). Rows stay each key's own
    call's."""
    sql = SHAPES["range_breakout"][0]
    batches = _batches(100, 40, 500)
    old = lanes.USE_BATCH
    got: dict[bool, list] = {}
    try:
        for use_batch in (True, False):
            lanes.USE_BATCH = use_batch
            op = PatternOperator(parse_rule_text(sql).compiled, name="r")
            rows: list = []
            peak_live = caps = 0
            for evs in batches:
                rows += op.process(evs).matches
                peak_live = max(peak_live, sum(len(st.attempts) for st in op.states.values()))
                if op._lane_pool is not None:
                    caps = max(caps, len(op._lane_pool.start))
            got[use_batch] = rows + op.finish().matches
            if use_batch:
                assert peak_live > 500  # (enough live start rows for the pool to fill several times)
                # room for the live start rows, one batch's new ones and the growth step (x4)
                assert caps <= 4 * 2 * (peak_live + 2 * 500), (caps, peak_live)
    finally:
        lanes.USE_BATCH = old
    assert got[True] == got[False] and len(got[True]) > 50
