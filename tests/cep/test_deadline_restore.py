"""WITHIN deadlines and partial matches after snapshot/restore mid-stream, on the batch DFA and the per-key automaton."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
import cep.nfa as nfa
from cep.operator import PatternOperator
from patterns.rules import parse_rule_text
from tests.cep.test_within_deadlines import FIXED, _sql


def _make(sql: str, batch: bool, rewrite: bool, mp: Any) -> PatternOperator:
    mp.setattr(batch_dfa, "USE_BATCH_DFA", batch)
    mp.setattr(nfa, "REWRITE_CONDITIONS", rewrite)
    return PatternOperator(parse_rule_text(sql).compiled, name="r")


def _trace(sql: str, events: list[dict], cuts: list[int], restores: set[int], batch: bool, rewrite: bool,
           mp: Any) -> list:
    """As a host on an external clock: deadlines, rows and live partial matches per batch; at the
    cuts in ``restores`` the operator is replaced by a new one restored from its snapshot."""
    op = _make(sql, batch, rewrite, mp)
    got = []
    wm = 0
    bounds = [0, *cuts, len(events)]
    for j, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if j in restores:
            snap = op.snapshot()
            op = _make(sql, batch, rewrite, mp)
            op.restore(snap)
            got.append(("restored", op.next_deadline(), op.live_partial_matches()))
        part = events[lo:hi]
        op.ingest(part, wm)
        wm = max([wm] + [e["ts"] for e in part]) - 2
        rows = op.advance_to(wm).matches
        got.append((wm, op.next_deadline(), sorted((r["k"], r["t0"], r["t1"]) for r in rows), op.live_partial_matches()))
        d = op.next_deadline()
        if d is not None and d > wm:
            rows = op.advance_to(d).matches
            wm = d
            got.append(("timeout", d, op.next_deadline(), sorted((r["k"], r["t0"], r["t1"]) for r in rows),
                        op.live_partial_matches()))
    assert (op._keyed is not None) == batch  # the restored operator steps on the path it was asked for
    rows = op.finish().matches
    got.append(("finish", sorted((r["k"], r["t0"], r["t1"]) for r in rows)))
    return got


@settings(max_examples=5, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(FIXED)), seed=st.integers(0, 10_000), keys=st.integers(1, 30),
       n=st.integers(50, 200), ncuts=st.integers(1, 8), within=st.sampled_from([3, 10, 40]))
def test_deadlines_and_rows_survive_a_restore_mid_stream(name, seed, keys, n, ncuts, within):
    sql = _sql(FIXED[name].format(w=within))
    rnd = random.Random(seed)
    events, t = [], 0
    for i in range(n):
        t += rnd.choice([0, 1, 1, 2, 7])
        k = rnd.randrange(max(1, keys - (keys * i) // n))
        events.append({"k": f"k{k}", "ts": t, "x": rnd.randrange(10)})
    cuts = sorted({rnd.randrange(1, n) for _ in range(ncuts)})
    restores = {j for j in range(1, len(cuts) + 1) if rnd.random() < 0.6} or {1}
    with pytest.MonkeyPatch.context() as mp:
        plain = _trace(sql, events, cuts, set(), True, True, mp)
        fast = _trace(sql, events, cuts, restores, True, True, mp)
        slow = _trace(sql, events, cuts, restores, False, True, mp)
    strip = [e for e in fast if e[0] != "restored"]
    assert strip == plain, "a restore changed the batch DFA's deadlines, rows or partial matches"
    assert fast == slow
