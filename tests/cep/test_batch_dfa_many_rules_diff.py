"""Many batch-DFA rules in one engine, rules added and removed, a restore in the middle: the same output, in order, as without sharing, without the batch DFA and as each rule alone."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
import cep.engine as engine_mod
from cep.engine import Engine
from cep.operator import PatternOperator
from patterns.rules import Rule, parse_rule_text

HEAD = "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts\n"

# shapes over two integer columns; thresholds come from a few round values so that many rules
# share a condition's text (x > PREV(x), x > 3) and the masks and history sharing come into play
SHAPES = (
    # starts on any row: its first variable has no condition
    "MEASURES FIRST(S.ts) AS t0, LAST(D.ts) AS t1, COUNT(D.*) AS nd, S.x AS sx\n"
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (S D{{2,}} U)\n"
    "DEFINE D AS D.x < PREV(D.x), U AS U.x > PREV(U.x) + {a})",
    "MEASURES FIRST(U.ts) AS t0, LAST(U.ts) AS t1, COUNT(U.*) AS n, CLASSIFIER() AS c, MATCH_NUMBER() AS mn\n"
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (U{{{n},}})\n"
    "DEFINE U AS U.x > PREV(U.x))",
    "MEASURES A.ts AS t0, B.ts AS t1, B.y AS b_y, (B.x - A.x) * 10 AS rise\n"
    "PATTERN (A B) DEFINE A AS A.x >= {a} AND PREV(A.x) < {a}, B AS B.x > PREV(B.x, 2))",
    "MEASURES R.ts AS t0, LAST(D.ts) AS t1, LAST(D.y) AS dy\n"
    "AFTER MATCH SKIP TO NEXT ROW PATTERN (R{{2}} D) WITHIN INTERVAL '{w}' MILLISECOND\n"
    "DEFINE R AS R.x > {a}, D AS D.x < LAST(R.x))",
    "MEASURES A.ts AS t0, A.y AS ay\n"
    "PATTERN (A) DEFINE A AS A.x > PREV(A.x) + {a} AND A.y > 2)",
    "MEASURES FIRST(A.ts) AS t0, LAST(B.ts) AS t1\n"
    "AFTER MATCH SKIP TO NEXT ROW PATTERN (A+ B)\n"
    "DEFINE A AS A.y < {a}, B AS B.y >= PREV(B.y) + 2)",
    # a row measure whose variable may match no row (then NULL)
    "MEASURES A.ts AS t0, LAST(B.ts) AS tb, FIRST(B.y) AS fy, C.ts AS t1\n"
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B* C)\n"
    "DEFINE A AS A.x < {a} + 3, B AS B.x > PREV(B.x), C AS C.x <= PREV(C.x))",
    # never starts: no value reaches it
    "MEASURES A.ts AS t0, B.ts AS t1\n"
    "PATTERN (A B) DEFINE A AS A.x > 1000, B AS B.x < PREV(B.x))",
)


def _rule(rnd: random.Random, shape: int, name: str) -> Rule:
    sql = HEAD + SHAPES[shape].format(a=rnd.choice([0, 2, 3]), n=rnd.choice([2, 3]), w=rnd.choice([6, 12]))
    return parse_rule_text(sql, name)


def _events(rnd: random.Random, keys: int, per_key: int) -> list[dict[str, Any]]:
    """Keys interleaved, each with hundreds of rows of random walks; now and then an event out of
    order (late), one with no time and one with no key (bad events)."""
    walk = {k: 5 for k in range(keys)}
    ts = {k: 0 for k in range(keys)}
    left = {k: per_key + rnd.randrange(per_key // 2) for k in range(keys)}
    out: list[dict[str, Any]] = []
    while left:
        k = rnd.choice(list(left))
        walk[k] = max(0, min(12, walk[k] + rnd.choice([-2, -1, -1, 0, 1, 1, 2])))
        ts[k] += rnd.choice([0, 1, 1, 2])  # ties keep arrival order
        ev: dict[str, Any] = {"k": f"key{k}", "ts": ts[k], "x": walk[k], "y": rnd.randrange(6)}
        roll = rnd.random()
        if roll < 0.004:
            ev["ts"] = None
        elif roll < 0.008:
            ev["k"] = None
        elif roll < 0.02:
            ev["ts"] = max(0, max(ts.values()) - 30)  # behind the watermark: late
        out.append(ev)
        left[k] -= 1
        if not left[k]:
            del left[k]
    return out


def _canon(rows: list[dict]) -> list[str]:
    return [repr(sorted(r.items())) for r in rows]


def _engine_run(plan: list[list[Rule]], batches: list[list[dict]], snap_at: int | None, share: bool,
                use_batch_dfa: bool) -> tuple[list[str], list[str], list[str], dict[str, tuple], Engine]:
    """One engine over the batches, its rules replaced by ``plan[b]`` before batch ``b`` (reload),
    its snapshot restored into a fresh engine after batch ``snap_at``: every output in order."""
    old_dfa, old_share = batch_dfa.USE_BATCH_DFA, engine_mod.SHARE_WORK
    batch_dfa.USE_BATCH_DFA, engine_mod.SHARE_WORK = use_batch_dfa, share
    try:
        eng = Engine(plan[0])
        matches: list[str] = []
        late: list[str] = []
        errors: list[str] = []
        for b, evs in enumerate(batches):
            if b and plan[b] != plan[b - 1]:
                assert eng.reload(plan[b]).accepted
            out = eng.process(evs)
            matches += _canon(out.matches)
            late += _canon(out.late)
            errors += _canon(out.errors)
            if b == snap_at:
                data = eng.snapshot()
                eng = Engine(plan[b])
                eng.restore(data)
        out = eng.finish()
        matches += _canon(out.matches)
        counts = {name: tuple(vars(c).values()) for name, c in eng.counts().items()}
        return matches, late, errors, counts, eng
    finally:
        batch_dfa.USE_BATCH_DFA, engine_mod.SHARE_WORK = old_dfa, old_share


def _operator_alone(rule: Rule, batches: list[list[dict]], finish: bool = True) -> list[str]:
    """One operator of its own, fed the batches directly (no engine, nothing shared)."""
    op = PatternOperator.from_rule(rule)
    rows = [r for evs in batches for r in op.process(evs).matches]
    return _canon(rows + (op.finish().matches if finish else []))


@pytest.mark.filterwarnings("ignore")
@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), snap=st.booleans())
def test_many_rules_added_removed_restored_match_every_reference(seed: int, snap: bool) -> None:
    rnd = random.Random(seed)
    rules = [_rule(rnd, i % len(SHAPES) if i < len(SHAPES) else rnd.randrange(len(SHAPES)), f"r{i}")
             for i in range(12)]
    added = _rule(rnd, 1, "added")  # shares U AS U.x > PREV(U.x) with the streaks
    events = _events(rnd, keys=3, per_key=160)
    cuts = sorted(rnd.sample(range(1, len(events)), 5))  # batches that cut runs
    bounds = [0, *cuts, len(events)]
    batches = [events[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
    add_at, drop_at = rnd.randrange(1, len(batches)), rnd.randrange(1, len(batches))
    dropped = rules[rnd.randrange(len(rules))]
    plan = []
    for b in range(len(batches)):
        now = [r for r in rules if not (b >= drop_at and r is dropped)]
        plan.append(now + ([added] if b >= add_at else []))
    snap_at = rnd.randrange(len(batches) - 1) if snap else None

    got = _engine_run(plan, batches, snap_at, True, True)
    on_dfa = [name for name, op in got[4].operators.items() if op.keyed_state is not None]
    if batch_dfa._numba_ok():  # (with CEP_NO_NUMBA=1 every run is the automaton's: the pure path)
        assert len(on_dfa) >= 8, on_dfa  # (most rules take the batch DFA: the path under test)
    # the same rows in the same order, late rows, errors and counters: without sharing and on the
    # per-key automaton
    for share, use in ((False, True), (True, False)):
        ref = _engine_run(plan, batches, snap_at, share, use)
        assert got[:4] == ref[:4], (share, use)
    # each rule alone, over the batches it was in the engine for
    per_rule: dict[str, list[str]] = {}
    for row in got[0]:
        name = row.split("('rule', '", 1)[1].split("'", 1)[0]
        per_rule.setdefault(name, []).append(row)
    for rule in rules:
        if rule is dropped:
            # its state is dropped without flushing: its rows are those of the batches before
            assert per_rule.get(rule.name, []) == _operator_alone(rule, batches[:drop_at], finish=False)
            continue
        assert per_rule.get(rule.name, []) == _operator_alone(rule, batches), rule.name
    assert per_rule.get("added", []) == _operator_alone(added, batches[add_at:])
    assert sum(map(len, per_rule.values())) > 20  # (a run that matched little would prove little)


def test_rules_with_one_compiled_program_share_one_table() -> None:
    """Rules that differ only in their constants step on one DFA table (built once), equal to the
    one built for each alone; another pattern gets its own."""
    rnd = random.Random(7)
    a, b = (PatternOperator.from_rule(_rule(rnd, 3, n)).automaton for n in ("a", "b"))
    other = PatternOperator.from_rule(_rule(rnd, 1, "c")).automaton
    ta, tb, tc = batch_dfa.DfaTable.build(a), batch_dfa.DfaTable.build(b), batch_dfa.DfaTable.build(other)
    assert ta is not None and ta is tb
    assert tc is not None and tc is not ta
    fresh = batch_dfa.DfaTable._build(b, batch_dfa.MAX_STATES)  # (b's own, not the cache's)
    assert fresh is not None and fresh.states == ta.states
    assert (fresh.trans == ta.trans).all() and (fresh.parent == ta.parent).all()
