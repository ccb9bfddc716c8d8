"""Random rules of the lane path's shape against the general path: rows in order, counters, cut batches, restores, caps."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import cep.lanes as lanes
from cep.compiled import numba_allowed
from cep.operator import PatternOperator
from patterns.rules import parse_rule_text
from tests.cep.test_lanes import _counters
from tests.cep.test_lanes_many_keys import _mixed_events
from tests.replay import replay

# the parts a rule is drawn from: quantifiers (greedy, reluctant, bounded), conditions reading the
# start row, PREV, LAST of the other variable and running aggregates, and measures of every kind
# the recorded matches output differently (row lookups leave as a FastMatch, the rest as a chain)
_RQ = ["*", "+", "{2,}", "{3,}?", "{2,30}?", "*?", "+?", "{1,20}", "{0,25}"]
_BQ = ["", "+", "{2,6}", "*", "?", "{1,3}?", "+?"]
_R = ["R.x BETWEEN S.x - 2 AND S.x + 2", "R.x < PREV(R.x)", "R.x <= PREV(R.x)", "R.x >= S.x",
      "COUNT(*) <= 30 AND R.x <> S.x", "R.x BETWEEN S.x - 3 AND S.x + 3 AND (SUM(R.v) < 500 OR COUNT(R.v) = 0)"]
_B = ["B.x > S.x + 2", "B.x > PREV(B.x) AND LAST(B.x) >= S.x", "B.x < LAST(R.x) - 1", "B.x >= PREV(B.x)",
      "B.x > LAST(R.x) + 1", "B.v > 1.2 * AVG(R.v)", "SUM(R.v) > 3 * B.v"]
_S = ["", "S.x > 4", "S.x < 15"]
_LOOKUPS = ["S.ts AS t0", "LAST(R.ts) AS lr", "FIRST(R.ts) AS fr", "LAST(B.ts) AS lb", "B.x AS bx", "LAST(ts) AS lt",
            "FIRST(ts) AS ft", "MATCH_NUMBER() AS mn", "CLASSIFIER() AS cls", "FIRST(B.v) AS fbv", "R.x AS rx"]
_OTHERS = ["COUNT(R.*) AS nr", "SUM(R.v) AS sv", "LAST(R.x, 1) AS lr1", "FIRST(R.x, 1) AS fr1", "PREV(S.x, 2) AS ps",
           "CLASSIFIER(R) AS cr", "AVG(B.x) AS ab", "LAST(B.x) - FIRST(R.x) AS d"]


def _rule(rnd: random.Random) -> str:
    """A rule of the shape ``S R{..} B{..}`` (sometimes with an exclusion or a SUBSET measure),
    ONE or ALL ROWS PER MATCH, with or without WITHIN."""
    rq, bq = rnd.choice(_RQ), rnd.choice(_BQ)
    pool = _LOOKUPS + _OTHERS if rnd.random() < 0.5 else _LOOKUPS  # (half: measures that are all row lookups)
    meas = rnd.sample(pool, rnd.randint(1, 5))
    pat = f"S R{rq} B{bq}"
    if rnd.random() < 0.3:
        pat = rnd.choice([f"S {{- R{rq} -}} B{bq}", f"S R{rq} {{- B{bq} -}}", f"{{- S -}} R{rq} B{bq}"])
    subset = ""
    if rnd.random() < 0.25:
        subset = "SUBSET U = (R, B) "
        meas.append(rnd.choice(["LAST(U.ts) AS ut", "FIRST(U.x) AS ux", "U.v AS uv"]))
    rows = "ALL ROWS PER MATCH" if rnd.random() < 0.2 else "ONE ROW PER MATCH"
    within = f" WITHIN INTERVAL '{rnd.choice([10, 25, 60])}' MILLISECOND" if rnd.random() < 0.3 else ""
    sc = rnd.choice(_S)
    defs = ([f"S AS {sc}"] if sc else []) + [f"R AS {rnd.choice(_R)}", f"B AS {rnd.choice(_B)}"]
    return (f"SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES {', '.join(dict.fromkeys(meas))} "
            f"{rows} AFTER MATCH SKIP PAST LAST ROW PATTERN ({pat}){within} {subset}DEFINE {', '.join(defs)})")


def _events(rnd: random.Random) -> list[dict]:
    """Light keys beside one or two keys of hundreds of rows; now and then a value the arrays
    cannot take exactly (a fraction, NULL, an integer past 2**53), which sends a key's start rows
    to node chains and back."""
    events = _mixed_events(rnd, rnd.randint(10, 60), rnd.randint(1, 2), rnd.randint(80, 300))
    for e in events:
        r = rnd.random()
        if r < 0.004:
            e["x"] = e["x"] + 0.5
        elif r < 0.008:
            e["x"] = None
        elif r < 0.009:
            e["x"] = 2**53 + 7
    return events


def _run(sql: str, events: list[dict], cuts: list[int], snap_at: int | None, mode: str, row_ids: bool,
         **opts: Any) -> tuple[list, tuple, Any]:
    """Rows and counters over batches cut at ``cuts``, restored into a fresh operator after batch
    ``snap_at``. ``mode``: ``general`` (no lane path), ``batch`` (all keys in one compiled call),
    ``keys`` (a compiled call per key), ``numpy`` (the lane path without the compiled loop)."""
    old = lanes.USE_LANES, lanes.USE_BATCH, lanes.USE_KERNEL
    lanes.USE_LANES, lanes.USE_BATCH, lanes.USE_KERNEL = mode != "general", mode == "batch", mode != "numpy"
    try:
        compiled = parse_rule_text(sql).compiled

        def new() -> PatternOperator:
            op = PatternOperator(compiled, name="r", **opts)
            op.row_ids = row_ids
            return op

        plan = new().automaton.lanes
        rows, op = replay(new, events, sorted(set(cuts)), snap_at)
        return rows, _counters(op), plan
    finally:
        lanes.USE_LANES, lanes.USE_BATCH, lanes.USE_KERNEL = old


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1))
def test_random_lane_rules_match_the_general_path(seed: int) -> None:
    """A random rule of the lane shape over light and heavy keys, batches that cut runs and
    matches, a restore in the middle, sometimes a cap (either policy) and row ids: every form of
    the lane path (one compiled call for all keys, a call per key, the numpy stepping) gives the
    general path's rows in its order and its counters."""
    rnd = random.Random(seed)
    sql = _rule(rnd)
    events = _events(rnd)
    cuts = [rnd.randrange(1, len(events)) for _ in range(rnd.randint(0, 25))]
    snap_at = rnd.randrange(0, len(cuts) + 1) if rnd.random() < 0.5 else None
    opts: dict[str, Any] = {}
    if rnd.random() < 0.35:
        opts = {"max_partial_matches": rnd.choice([3, 5, 9]), "on_cap": rnd.choice(["drop_oldest", "skip_key"])}
    row_ids = rnd.random() < 0.3
    note(f"{sql} {opts} cuts={len(cuts)} snap_at={snap_at}")
    ref, ref_counters, _ = _run(sql, events, cuts, None, "general", row_ids, **opts)
    for mode in ("batch", "keys", "numpy"):
        got, counters, _ = _run(sql, events, cuts, snap_at, mode, row_ids, **opts)
        assert got == ref, mode
        assert counters == ref_counters, mode


def test_the_random_rules_reach_the_recorded_matches() -> None:
    """The generator's rules mostly take the compiled lane loop, some with row-lookup measures
    only (their recorded matches leave without a node chain), some ALL ROWS PER MATCH."""
    plans = []
    for seed in range(40):
        rnd = random.Random(seed)
        sql = _rule(rnd)
        plans.append((PatternOperator(parse_rule_text(sql).compiled, name="r").automaton.lanes, "ALL ROWS" in sql))
    on_lanes = [(p, all_rows) for p, all_rows in plans if p is not None]
    assert len(on_lanes) >= 20
    assert sum(p.fast_match is not None for p, _ in on_lanes) >= 5
    assert sum(all_rows for _, all_rows in on_lanes) >= 2
    if numba_allowed():
        assert sum(p.kernel is not None for p, _ in on_lanes) >= 15
