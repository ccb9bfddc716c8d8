"""Many batch-DFA rules over one stream, sharing work by their stepped history: against one engine per rule and the per-key automaton."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
from cep.engine import Engine
from cep.sharing import FRESH_HISTORY
from patterns.rules import parse_rule_text

HEAD = "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts\n"

# rule shapes over one integer column; thresholds come from a few round values so that many rules
# share a condition's text (x > PREV(x), x > 3) and a mask is computed once for them
SHAPES = (
    # starts on any row: its first variable has no condition
    "MEASURES FIRST(S.ts) AS t0, LAST(D.ts) AS t1, COUNT(D.*) AS nd, MATCH_NUMBER() AS mn\n"
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (S D{{2,}} U)\n"
    "DEFINE D AS D.x < PREV(D.x), U AS U.x > PREV(U.x) + {a})",
    "MEASURES FIRST(U.ts) AS t0, LAST(U.ts) AS t1, COUNT(U.*) AS n, CLASSIFIER() AS c\n"
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (U{{{n},}})\n"
    "DEFINE U AS U.x > PREV(U.x))",
    "MEASURES A.ts AS t0, B.ts AS t1, B.x AS bx\n"
    "PATTERN (A B) DEFINE A AS A.x >= {a} AND PREV(A.x) < {a}, B AS B.x > PREV(B.x, 2))",
    "MEASURES R.ts AS t0, LAST(D.ts) AS t1\n"
    "AFTER MATCH SKIP TO NEXT ROW PATTERN (R D+) WITHIN INTERVAL '{w}' MILLISECOND\n"
    "DEFINE R AS R.x > {a}, D AS D.x < R.x)",
    "MEASURES A.ts AS t0, A.x AS ax\n"
    "PATTERN (A) DEFINE A AS A.x > PREV(A.x) + {a})",
    # never starts: no value reaches it
    "MEASURES A.ts AS t0, B.ts AS t1\n"
    "PATTERN (A B) DEFINE A AS A.x > 1000, B AS B.x < PREV(B.x))",
)


def _rules(rnd: random.Random, n: int) -> list:
    out = []
    for i in range(n):
        shape = i % len(SHAPES) if i < len(SHAPES) else rnd.randrange(len(SHAPES))
        sql = HEAD + SHAPES[shape].format(a=rnd.choice([0, 2, 3]), n=rnd.choice([2, 3]), w=rnd.choice([4, 9]))
        out.append(parse_rule_text(sql, f"r{i}_{shape}"))
    return out


def _events(rnd: random.Random, keys: int, per_key: int) -> list[dict]:
    """Keys interleaved, each with one to two hundred rows of a random walk (runs of rises and falls)."""
    walk = {k: 5 for k in range(keys)}
    ts = {k: 0 for k in range(keys)}
    left = {k: per_key + rnd.randrange(per_key // 2) for k in range(keys)}
    out = []
    while left:
        k = rnd.choice(list(left))
        walk[k] = max(0, min(12, walk[k] + rnd.choice([-2, -1, -1, 0, 1, 1, 2])))
        ts[k] += rnd.choice([0, 1, 1, 2])  # ties keep arrival order
        out.append({"k": f"key{k}", "ts": ts[k], "x": walk[k]})
        left[k] -= 1
        if not left[k]:
            del left[k]
    return out


def _run(rules: list, batches: list[list[dict]], late_rule: object, late_from: int, snap_at: int | None,
         use_batch_dfa: bool) -> tuple[dict[str, list], dict[str, tuple], Engine]:
    """All rules in one engine (``late_rule`` added by a reload before batch ``late_from``), the
    engine's snapshot restored into a fresh one after batch ``snap_at``; rows and counters per rule."""
    old = batch_dfa.USE_BATCH_DFA
    batch_dfa.USE_BATCH_DFA = use_batch_dfa
    try:
        eng = Engine(rules)
        now = list(rules)
        rows: dict[str, list] = {}
        for b, evs in enumerate(batches):
            if b == late_from:
                now = [*rules, late_rule]
                assert eng.reload(now).added == [late_rule.name]  # type: ignore[attr-defined]
            for r in eng.process(evs).matches:
                rows.setdefault(r["rule"], []).append(repr(sorted(r.items())))
            if b == snap_at:
                data = eng.snapshot()
                eng = Engine(now)
                eng.restore(data)
        for r in eng.finish().matches:
            rows.setdefault(r["rule"], []).append(repr(sorted(r.items())))
        counts = {name: tuple(vars(c).values()) for name, c in eng.counts().items()}
        return rows, counts, eng
    finally:
        batch_dfa.USE_BATCH_DFA = old


def _alone(rule: object, batches: list[list[dict]]) -> tuple[list, tuple]:
    """One rule in an engine of its own (nothing shared with another rule)."""
    eng = Engine([rule])  # type: ignore[list-item]
    rows = [repr(sorted(r.items())) for evs in batches for r in eng.process(evs).matches]
    rows += [repr(sorted(r.items())) for r in eng.finish().matches]
    return rows, tuple(vars(eng.counts()[rule.name]).values())  # type: ignore[attr-defined]


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), snap=st.booleans())
def test_rules_sharing_history_match_each_rule_alone_and_the_automaton(seed: int, snap: bool) -> None:
    rnd = random.Random(seed)
    rules = _rules(rnd, 10)
    late_rule = parse_rule_text(HEAD + SHAPES[1].format(n=2), "late")  # shares U AS U.x > PREV(U.x)
    events = _events(rnd, keys=4, per_key=150)
    cuts = sorted(rnd.sample(range(1, len(events)), 5))  # batches that cut runs
    bounds = [0, *cuts, len(events)]
    batches = [events[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
    late_from = rnd.randrange(1, len(batches))
    snap_at = rnd.randrange(len(batches) - 1) if snap else None

    got, got_counts, eng = _run(rules, batches, late_rule, late_from, snap_at, True)
    if snap_at is None:
        # the rules stepped the same orders from empty share one history; the late rule has its own
        hist = {name: op._keyed.history for name, op in eng.operators.items() if op._keyed is not None}
        # every shape but WITHIN over a run of any length (SHAPES[3]) steps on the batch DFA
        assert set(hist) == {r.name for r in rules if not r.name.endswith("_3")} | {"late"}
        assert hist["late"] not in (None, FRESH_HISTORY)
        assert len({h for name, h in hist.items() if name != "late"}) == 1
        assert hist["late"] != hist["r0_0"]
    ref, ref_counts, _ = _run(rules, batches, late_rule, late_from, snap_at, False)
    assert got == ref
    assert got_counts == ref_counts
    for rule in rules:
        alone, alone_counts = _alone(rule, batches)
        assert got.get(rule.name, []) == alone, rule.name
        assert got_counts[rule.name] == alone_counts, rule.name
    alone, _ = _alone(late_rule, batches[late_from:])
    assert got.get("late", []) == alone
    assert any(got.values())  # (a run that matched nothing would prove little)
