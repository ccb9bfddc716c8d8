"""Batch-DFA rules with mixed settings sharing one engine (stepped history) against each rule alone and the batch DFA off (4 examples, about 10 cpu-s)."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
from cep.engine import Engine, StateLimits
from patterns.rules import parse_rule_text

HEAD = "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts\n"

# shapes over an integer column x and a float column y (null or text in some rows); the same
# condition texts recur so that masks, PREV values and key ids are shared between rules whose
# settings (lateness, time unit, future guard) differ
SHAPES = (
    "MEASURES FIRST(U.ts) AS t0, LAST(U.ts) AS t1, COUNT(U.*) AS n\n"
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (U{{2,}}) DEFINE U AS U.x > PREV(U.x))",
    "MEASURES A.ts AS t0, B.ts AS t1, B.x AS bx\n"
    "PATTERN (A B) DEFINE A AS A.x >= {a} AND PREV(A.x) < {a}, B AS B.x > PREV(B.x, 2))",
    "MEASURES A.ts AS t0, A.y AS ay\n"
    "PATTERN (A) DEFINE A AS A.y > PREV(A.y) + {a})",
    "MEASURES FIRST(S.ts) AS t0, LAST(D.ts) AS t1, COUNT(D.*) AS nd\n"
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (S D{{2,}}) DEFINE D AS D.x < PREV(D.x))",
    "MEASURES A.ts AS t0, B.ts AS t1\n"
    "PATTERN (A B) WITHIN INTERVAL '{w}' MILLISECOND DEFINE A AS A.x > PREV(A.x, 3), B AS B.y < {a})",
    "MEASURES A.ts AS t0, LAST(B.ts) AS t1\n"
    "PATTERN (A B+) DEFINE A AS A.x > PREV(A.x), B AS B.x > PREV(B.x))",
)


def _rule(rnd: random.Random, i: int, shape: int | None = None) -> Any:
    shape = rnd.randrange(len(SHAPES)) if shape is None else shape
    sql = HEAD + SHAPES[shape].format(a=rnd.choice([0, 2, 3]), w=rnd.choice([4, 9]))
    rule = parse_rule_text(sql, f"r{i}_{shape}")
    opts: dict[str, Any] = {}
    if rnd.random() < 0.3:
        opts["lateness_ms"] = rnd.choice([1, 3])
    if rnd.random() < 0.2:
        opts["time_unit"] = "s"
    if rnd.random() < 0.3:
        opts["max_future_skew_ms"] = None
    return dataclasses.replace(rule, **opts)


def _events(rnd: random.Random, keys: int, per_key: int, text_times: bool) -> list[dict]:
    """Keys interleaved, each with a hundred or more rows; some late, some with a bad time, key or value."""
    walk = {k: 5 for k in range(keys)}
    now = 0  # one clock for every key: the rows behind it are the late ones
    left = {k: per_key + rnd.randrange(per_key // 2) for k in range(keys)}
    out: list[dict] = []
    while left:
        k = rnd.choice(list(left))
        walk[k] = max(0, min(12, walk[k] + rnd.choice([-2, -1, -1, 0, 1, 1, 2])))
        now += rnd.choice([0, 1, 1, 2])
        t: Any = now - (rnd.choice([1, 2, 4]) if rnd.random() < 0.05 else 0)  # some behind: late for some
        y: Any = walk[k] / 2 + rnd.choice([0.0, 0.25])
        r = rnd.random()
        if r < 0.01:
            y = None
        elif r < 0.015:
            y = "n/a"  # a value no numeric condition reads
        if text_times:
            t = f"2024-01-01T00:00:{t // 1000:02d}.{t % 1000:03d}Z"
        ev = {"k": f"key{k}", "ts": t, "x": walk[k], "y": y}
        r = rnd.random()
        if r < 0.005:
            ev["ts"] = "soon"  # a bad time
        elif r < 0.01:
            ev["k"] = None  # a null key: a partition of its own
        out.append(ev)
        left[k] -= 1
        if not left[k]:
            del left[k]
    return out


def _key(r: dict) -> str:
    return repr(sorted((k, v) for k, v in r.items() if k != "event"))


def _collect(acc: dict[str, dict[str, list]], out: Any) -> None:
    for kind in ("matches", "late", "errors"):
        for r in getattr(out, kind):
            acc.setdefault(r.get("rule"), {}).setdefault(kind, []).append(_key(r))


def _run(plan: list[tuple], use_batch_dfa: bool, only: str | None = None) -> tuple[dict, dict, Engine]:
    """Play ``plan`` (steps: batch, snapshot/restore, reload to a rule list, advance watermarks) in one
    engine; ``only``: that rule alone (the other rules left out of every step)."""
    old = batch_dfa.USE_BATCH_DFA
    batch_dfa.USE_BATCH_DFA = use_batch_dfa
    try:
        def keep(rules: list) -> list:
            return [r for r in rules if only is None or r.name == only]

        rows: dict[str, dict[str, list]] = {}
        eng: Engine | None = None
        now: list = []
        limits: StateLimits | None = None
        for step in plan:
            what = step[0]
            if what == "rules":
                now = keep(step[1])
                if eng is None:
                    eng = Engine(now)
                else:
                    eng.reload(now)
            elif what == "limits":  # (engine-wide: set with no rule yet too)
                limits = step[1]
                assert eng is not None
                eng.set_state_limits(limits)
            elif eng is None or not now:
                continue
            elif what == "batch":
                _collect(rows, eng.process(step[1]))
            elif what == "restore":
                data = eng.snapshot()
                eng = Engine(now)
                if limits is not None:
                    eng.set_state_limits(limits)
                eng.restore(data)
            elif what == "advance":
                _collect(rows, eng.advance_watermarks(step[1]))
        assert eng is not None
        _collect(rows, eng.finish())
        counts = {name: tuple(vars(c).values()) for name, c in eng.counts().items()}
        return rows, counts, eng
    finally:
        batch_dfa.USE_BATCH_DFA = old


def _plan(rnd: random.Random, text_times: bool) -> tuple[list[tuple], list]:
    rules = [_rule(rnd, i, i if i < len(SHAPES) else None) for i in range(10)]
    extra = _rule(rnd, 99)
    events = _events(rnd, keys=3, per_key=120, text_times=text_times)
    cuts = sorted(rnd.sample(range(1, len(events)), 6))
    bounds = [0, *cuts, len(events)]
    plan: list[tuple] = [("rules", rules)]
    ttl = rnd.choice([None, None, None, 5, 40])
    if ttl is not None:  # (from the start: a rule stepping on the batch DFA refuses it later)
        plan.append(("limits", StateLimits(idle_state_ttl_ms=ttl)))
    now = list(rules)
    for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        plan.append(("batch", events[lo:hi]))
        r = rnd.random()
        if b == 2:
            now = [*now, extra]  # added mid-stream: a history of its own
            plan.append(("rules", now))
        elif b == 4 and rnd.random() < 0.5:
            now = [x for x in now if x.name != now[1].name]  # one removed
            plan.append(("rules", now))
        if b == 3 and rnd.random() < 0.4:
            # a buffer bound from here on: it moves the watermark of the rules holding rows back
            plan.append(("limits", StateLimits(idle_state_ttl_ms=ttl, max_buffered_events=20)))
        if r < 0.25:
            plan.append(("restore",))
        elif r < 0.5 and not text_times:
            # idle progress for some rules only: their watermark moves ahead of the others'
            top = max(e["ts"] for e in events[:hi] if isinstance(e["ts"], int))
            plan.append(("advance", {x.name: top + rnd.choice([0, 2]) for x in now if rnd.random() < 0.4}))
    return plan, [*rules, extra]


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), text_times=st.booleans())
def test_mixed_rules_sharing_history_match_each_rule_alone_and_the_automaton(seed: int, text_times: bool) -> None:
    rnd = random.Random(seed)
    plan, rules = _plan(rnd, text_times)
    got, got_counts, eng = _run(plan, True)
    if not any(step[0] == "limits" and step[1].idle_state_ttl_ms is not None for step in plan):
        assert any(op._keyed is not None for op in eng.operators.values())  # (the batch path ran)
    ref, ref_counts, _ = _run(plan, False)
    assert got == ref
    assert got_counts == ref_counts
    for rule in rules:
        alone, alone_counts, _ = _run(plan, True, only=rule.name)
        assert got.get(rule.name, {}) == alone.get(rule.name, {}), rule.name
        if rule.name in got_counts:
            assert got_counts[rule.name] == alone_counts[rule.name], rule.name
    assert any(v.get("matches") for v in got.values())
    assert any(v.get("late") for v in got.values()) and any(v.get("errors") for v in got.values())
