"""``next_deadline()`` reports WITHIN expiry the same way on every stepping path (the batch DFA too)."""

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

# fixed-length WITHIN rules: the batch DFA takes them (with the rewrite for the second)
FIXED = {
    "row_local": "PATTERN (A B C) WITHIN INTERVAL '{w}' MILLISECOND DEFINE A AS x > 6, B AS x < 5, C AS x > 4",
    "rewritten": ("PATTERN (R{{2}} D) WITHIN INTERVAL '{w}' MILLISECOND "
                  "DEFINE R AS R.x > PREV(R.x), D AS D.x < LAST(R.x)"),
}


def _sql(body: str) -> str:
    return ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
            f"MEASURES FIRST(ts) AS t0, LAST(ts) AS t1 {body})")


def _operator(sql: str, batch: bool, rewrite: bool, monkeypatch: Any) -> PatternOperator:
    monkeypatch.setattr(batch_dfa, "USE_BATCH_DFA", batch)
    monkeypatch.setattr(nfa, "REWRITE_CONDITIONS", rewrite)
    return PatternOperator(parse_rule_text(sql).compiled, name="r")


def _trace(sql: str, events: list[dict], cuts: list[int], batch: bool, rewrite: bool, monkeypatch: Any) -> list:
    """Per batch, as a host on an external clock runs it: the deadline before and after each
    step, the rows, and the partial matches still alive (the watermark trails the batch)."""
    op = _operator(sql, batch, rewrite, monkeypatch)
    got = []
    wm = 0
    bounds = [0, *cuts, len(events)]
    for lo, hi in zip(bounds, bounds[1:]):
        part = events[lo:hi]
        op.ingest(part, wm)
        got.append(("ingested", op.next_deadline()))
        wm = max([wm] + [e["ts"] for e in part]) - 2
        rows = op.advance_to(wm).matches
        got.append((wm, op.next_deadline(), [(r["k"], r["t0"], r["t1"]) for r in rows], op.live_partial_matches()))
        # what a Spark timeout does: advance to the deadline itself, then ask again
        d = op.next_deadline()
        if d is not None and d > wm:
            rows = op.advance_to(d).matches
            wm = d
            got.append(("timeout", d, op.next_deadline(), [(r["k"], r["t0"], r["t1"]) for r in rows],
                        op.live_partial_matches()))
    assert (op._keyed is not None) == batch
    return got


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(FIXED)), seed=st.integers(0, 10_000), keys=st.integers(1, 30),
       n=st.integers(100, 400), ncuts=st.integers(1, 8), within=st.sampled_from([3, 10, 40]))
def test_next_deadline_is_the_automatons_on_the_batch_dfa(name, seed, keys, n, ncuts, within):
    """Keys that fall quiet mid-stream, batches that split runs: the batch DFA's deadlines, rows and
    live partial matches equal the per-key automaton's (rewritten) and the unrewritten rule's."""
    sql = _sql(FIXED[name].format(w=within))
    rnd = random.Random(seed)
    events, t = [], 0
    for i in range(n):
        t += rnd.choice([0, 1, 1, 2, 7])
        # keys go quiet as the stream goes on, so their partial matches wait for time alone
        k = rnd.randrange(max(1, keys - (keys * i) // n))
        events.append({"k": k, "ts": t, "x": rnd.randrange(10)})
    cuts = sorted({rnd.randrange(1, n) for _ in range(ncuts)})
    with pytest.MonkeyPatch.context() as mp:
        fast = _trace(sql, events, cuts, True, True, mp)
        same = _trace(sql, events, cuts, False, True, mp)
        slow = _trace(sql, events, cuts, False, False, mp)
    assert fast == same == slow
    assert any(e[0] == "timeout" for e in fast)  # some deadline came before the next rows


def test_a_quiet_keys_partial_match_gives_its_deadline(monkeypatch) -> None:
    """One key starts a match and sends nothing more: its WITHIN deadline is what waits on time."""
    sql = _sql(FIXED["row_local"].format(w=100))
    for batch in (True, False):
        op = _operator(sql, batch, True, monkeypatch)
        op.ingest([{"k": "a", "ts": 1000, "x": 9}, {"k": "a", "ts": 1010, "x": 1}], 0)
        op.advance_to(1010)
        assert (op._keyed is not None) == batch
        assert op.live_partial_matches() == 1
        assert op.next_deadline() == 1000 + 100
        op.advance_to(1099)
        assert op.live_partial_matches() == 1 and op.next_deadline() == 1100
        op.advance_to(1100)
        assert op.live_partial_matches() == 0 and op.next_deadline() is None
