"""``partial_matches_peak`` is one measure on every stepping path: general, lanes, lazy DFA, batch DFA, rewritten or not."""

from __future__ import annotations

import itertools
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
import cep.lanes as lanes
import cep.nfa as nfa
from cep.operator import PatternOperator
from patterns.rules import parse_rule_text
from tests.replay import replay

# rules that move between paths with the switches: what each takes with everything on is in the comment
RULES = {
    "row_local": "PATTERN (A B+ C) DEFINE A AS x > {d}, B AS x < PREV(x), C AS x > PREV(x)",  # batch DFA
    "rewritten_fixed": "PATTERN (R{{2}} D) DEFINE R AS R.x > PREV(R.x), D AS D.x < LAST(R.x)",  # batch DFA
    "rewritten_loop": "PATTERN (A B+ C) DEFINE A AS A.x > {d}, B AS B.x < PREV(B.x), C AS C.x > LAST(B.x)",
    "rewritten_subset": ("PATTERN (A (B | C) D) SUBSET U = (B, C) DEFINE A AS A.x > {d}, B AS B.x < PREV(B.x), "
                         "C AS C.x > 6, D AS D.x > LAST(U.x)"),  # two runs in one position, unrewritten
    # (B and C exclusive: where both can take a row the pattern grows and gets a work budget, which
    # counts start rows on the DFA paths and runs on the others, docs/reliability.md "Work per event")
    "rewritten_alternation_loop": ("PATTERN (A (B | C)+ D) SUBSET U = (B, C) DEFINE A AS A.x > {d}, "
                                   "B AS B.x < 3, C AS C.x > 6, D AS D.x > LAST(U.x) AND D.x >= 3 AND D.x <= 6"),
    "rewritten_lanes_shape": "PATTERN (S R{{3,}} B) DEFINE R AS R.x >= PREV(R.x), B AS B.x < LAST(R.x)",
    "lanes": "PATTERN (S R{{2,}} B) DEFINE R AS R.x <= S.x + {d}, B AS B.x > S.x + 1",  # lanes
    "general": "PATTERN (A B+ C) DEFINE A AS x > {d}, B AS SUM(B.x) < 30, C AS C.x > FIRST(B.x)",  # general
    "anchored": "PATTERN (^ A (B | C)+) DEFINE A AS x > {d}, B AS x < 5, C AS x > 3",  # general, runs merged
}


def _sql(body: str, d: int, within: int | None, skip: str) -> str:
    w = f" WITHIN INTERVAL '{within}' MILLISECOND" if within else ""
    body = body.format(d=d)
    at = body.find(" SUBSET") if " SUBSET" in body else body.find(" DEFINE")  # WITHIN follows PATTERN
    return ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES FIRST(ts) AS t0, LAST(ts) AS t1 "
            f"AFTER MATCH SKIP {skip} {body[:at]}{w}{body[at:]})")


def _run(sql: str, events: list[dict], cuts: list[int], restore_at: int | None, lanes_on: bool, batch: bool,
         rewrite: bool) -> tuple[list[dict], Any, str]:
    old = lanes.USE_LANES, batch_dfa.USE_BATCH_DFA, nfa.REWRITE_CONDITIONS
    lanes.USE_LANES, batch_dfa.USE_BATCH_DFA, nfa.REWRITE_CONDITIONS = lanes_on, batch, rewrite
    try:
        compiled = parse_rule_text(sql).compiled
        rows, op = replay(lambda: PatternOperator(compiled, name="r"), events, cuts, restore_at)
    finally:
        lanes.USE_LANES, batch_dfa.USE_BATCH_DFA, nfa.REWRITE_CONDITIONS = old
    a = op.automaton
    path = ("batch_dfa" if op._keyed is not None else "lazy_dfa" if a.dfa else
            "lanes" if a.lanes is not None else "general")
    return rows, op, path


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(RULES)), seed=st.integers(0, 10_000), keys=st.integers(1, 3),
       n=st.integers(150, 500), ncuts=st.integers(0, 8), snap=st.booleans(), d=st.integers(0, 4),
       within=st.sampled_from([None, None, 12]), skip=st.sampled_from(["PAST LAST ROW", "PAST LAST ROW", "TO NEXT ROW"]))
def test_the_peak_is_the_same_on_every_path(name, seed, keys, n, ncuts, snap, d, within, skip):
    """Keys of hundreds of rows, batches that split runs, a restore in the middle: every setting of
    CEP_LANES, the batch DFA and REWRITE_CONDITIONS gives the same rows and the same peak."""
    sql = _sql(RULES[name], d, within, skip)
    rnd = random.Random(seed)
    events, t = [], 0
    for _ in range(n):
        t += rnd.choice([0, 1, 1, 2])
        events.append({"k": rnd.randrange(keys), "ts": t, "x": rnd.randrange(10)})
    cuts = sorted({rnd.randrange(1, n) for _ in range(ncuts)})
    restore_at = rnd.randrange(0, len(cuts) + 1) if snap else None
    got = {}
    for lanes_on, batch, rewrite in itertools.product((True, False), repeat=3):
        rows, op, path = _run(sql, events, cuts, restore_at, lanes_on, batch, rewrite)
        got[(lanes_on, batch, rewrite, path)] = (rows, op.stats.matches, op.stats.partial_matches_peak)
    first = next(iter(got.values()))
    assert all(v == first for v in got.values()), {k: v[1:] for k, v in got.items()}


# the batch DFA is compiled: without numba (CEP_NO_NUMBA=1) its rules step on the lazy DFA
BATCH = {"batch_dfa"} if batch_dfa._numba_ok() else set()


def test_each_rule_moves_between_the_paths_it_is_meant_to():
    """The rules above do cross paths with the switches (so the equality above compares paths)."""
    events = [{"k": 0, "ts": i, "x": (i * 7) % 10} for i in range(50)]
    seen = {}
    for name, body in RULES.items():
        paths = set()
        for lanes_on, batch, rewrite in itertools.product((True, False), repeat=3):
            paths.add(_run(_sql(body, 1, None, "PAST LAST ROW"), events, [], None, lanes_on, batch, rewrite)[2])
        seen[name] = paths
    assert seen["rewritten_fixed"] == {"lazy_dfa", "general"} | BATCH
    assert seen["rewritten_lanes_shape"] == {"lazy_dfa", "general"} | BATCH
    assert seen["lanes"] == {"lanes", "general"}
    assert seen["row_local"] == {"lazy_dfa"} | BATCH


def test_runs_in_one_position_count_once_and_merged_start_rows_not_at_all():
    """The measure by hand, on every path. (A (B | C) (B | C) D) unrewritten: after a row that both
    B and C take, the general path holds four runs in two positions: two partial matches. (A B+ C):
    a later start row in the head's state is merged into the head by the lazy DFA (SKIP PAST LAST
    ROW) and not counted on the general path either. (Before, the first read 4 on the general path
    and 1 on the DFA paths, the second 9 as written (on the lanes) and 2 rewritten.)"""
    two = ("PATTERN (A (B | C) (B | C) D) SUBSET U = (B, C) DEFINE A AS A.x > {d}, B AS B.x < PREV(B.x), "
           "C AS C.x > 6, D AS D.x > LAST(U.x)")
    cases = [(two, 8, [9, 8], 2), (RULES["rewritten_loop"], 0, [9, 8, 7, 6, 5], 3)]
    for body, d, xs, peak in cases:
        events = [{"k": 0, "ts": i, "x": x} for i, x in enumerate(xs)]
        paths = set()
        for batch, rewrite in itertools.product((True, False), repeat=2):
            _, op, path = _run(_sql(body, d, None, "PAST LAST ROW"), events, [1], None, True, batch, rewrite)
            assert op.stats.partial_matches_peak == peak, (body, batch, rewrite, path)
            paths.add(path)
        assert paths == {"lazy_dfa", "general"} | BATCH
