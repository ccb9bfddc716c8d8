"""Rules sharing work over one batch (cep.sharing) give exactly what each rule gives alone.

Differential: the same random rules of the five shapes of the many-rules benchmark (V-shapes,
rises then drops with WITHIN, volume spikes, streaks, level crossings), over the same random
batches, with ``cep.engine.SHARE_WORK`` on and off: the same rows, late rows, errors, time-outs and
counters, and the same state after every batch (snapshots compared without their timings),
including a snapshot restored into a new engine half-way. Thresholds come from short lists, so
rules repeat each other's conditions and the shared masks are exercised.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.engine as engine_mod
from cep.engine import Engine, StateLimits
from cep.events import batch_from_records
from cep.safe_pickle import loads as safe_loads
from patterns.rules import Rule, parse_rule_text
from tests.reference import reference_matches

HEAD = "SELECT * FROM bars MATCH_RECOGNIZE (\n  PARTITION BY {part} ORDER BY ts\n"


def rule_sql(shape: str, th: int, n: int, part: str, extra: str) -> str:
    """A rule of ``shape``; ``th`` picks thresholds from short lists (rules repeat conditions)."""
    head = HEAD.format(part=part)
    f = [1.0, 1.01, 1.02][th % 3]
    if shape == "v_shape_any":
        return (head + f"  MEASURES FIRST(S.ts) AS t0, LAST(U.ts) AS t1 {extra}\n  AFTER MATCH SKIP PAST LAST ROW\n"
                f"  PATTERN (S D{{{n},}} U+)\n  DEFINE D AS D.px < PREV(D.px) * {2 - f:g},\n"
                "         U AS U.px > PREV(U.px) AND LAST(U.px) >= S.px)")
    if shape == "v_shape":
        return (head + f"  MEASURES FIRST(D.ts) AS t0, LAST(U.ts) AS t1 {extra}\n  AFTER MATCH SKIP PAST LAST ROW\n"
                f"  PATTERN (D{{{n},}} U{{2,}})\n  DEFINE D AS D.px < PREV(D.px) * {2 - f:g}, U AS U.px > PREV(U.px))")
    if shape == "rise_drop":
        return (head + f"  MEASURES FIRST(R.ts) AS t0, D.ts AS t1, D.px AS px {extra}\n  PATTERN (R{{{n}}} D)\n"
                f"  WITHIN INTERVAL '{5 + th % 4}' SECOND\n"
                f"  DEFINE R AS R.px > PREV(R.px) * {f:g}, D AS D.px < LAST(R.px) * 0.99)")
    if shape == "timeout":
        return (head + f"  MEASURES FIRST(R.ts) AS t0, D.ts AS t1 {extra}\n  ONE ROW PER MATCH WITH TIMEOUT ROWS\n"
                f"  PATTERN (R{{{n}}} D)\n  WITHIN INTERVAL '{3 + th % 4}' SECOND\n"
                f"  DEFINE R AS R.px > PREV(R.px) * {f:g}, D AS D.px < LAST(R.px))")
    if shape == "volume_spike":
        return (head + f"  MEASURES S.ts AS t0, F.ts AS t1 {extra}\n  PATTERN (S F)\n"
                f"  DEFINE S AS S.vol > PREV(S.vol) * {1 + th % 3} AND S.px > S.op,\n"
                "         F AS F.px > S.px)")
    if shape == "streak":
        cmp = ">" if th % 2 else "<"
        return (head + f"  MEASURES FIRST(U.ts) AS t0, COUNT(U.*) AS n {extra}\n  AFTER MATCH SKIP PAST LAST ROW\n"
                f"  PATTERN (U{{{n},}})\n  DEFINE U AS U.px {cmp} PREV(U.px))")
    if shape == "all_rows":
        return (head + f"  MEASURES CLASSIFIER() AS v, MATCH_NUMBER() AS m\n  ALL ROWS PER MATCH\n"
                f"  PATTERN (A B+)\n  DEFINE A AS A.px >= {100 + th % 5}, B AS B.px < PREV(B.px))")
    if shape == "level_cross":
        level = 98 + th % 5
        return (head + f"  MEASURES A.ts AS t0 {extra}\n  PATTERN (A)\n"
                f"  DEFINE A AS A.px >= {level} AND PREV(A.px) < {level})")
    raise AssertionError(shape)


SHAPES = ["v_shape_any", "v_shape", "rise_drop", "timeout", "volume_spike", "streak", "all_rows", "level_cross"]


@st.composite
def rule_sets(draw) -> list[Rule]:
    out = []
    for i in range(draw(st.integers(1, 12))):
        shape = draw(st.sampled_from(SHAPES))
        part = draw(st.sampled_from(["k", "k", "k", "k, g", "g"]))
        extra = draw(st.sampled_from(["", "", ", MATCH_NUMBER() AS mn"]))
        rule = parse_rule_text(rule_sql(shape, draw(st.integers(0, 11)), draw(st.integers(1, 3)), part, extra),
                               f"r{i}_{shape}")
        lateness = draw(st.sampled_from([0, 0, 0, 1500]))
        if lateness:
            from dataclasses import replace

            rule = replace(rule, lateness_ms=lateness)
        out.append(rule)
    return out


@st.composite
def streams(draw) -> tuple[list[dict], list[int]]:
    """Events of a few keys (each with up to hundreds of rows), sometimes late, null or bad."""
    seed = draw(st.integers(0, 2**31 - 1))
    n = draw(st.integers(1, 600))
    rng = np.random.default_rng(seed)
    keys = int(rng.integers(1, 5))
    px = {k: 100.0 for k in range(keys)}
    t = 1_000_000
    events = []
    dates = draw(st.booleans())
    for _ in range(n):
        k = int(rng.integers(0, keys))
        px[k] = round(px[k] * (1 + rng.normal(0, 0.01)), 2)
        t += int(rng.integers(0, 800))
        at = t - int(rng.integers(0, 3000)) if rng.random() < 0.05 else t  # some out of order
        ts: object = str(np.datetime64(at, "ms")) + "Z" if dates else at
        e = {"k": f"s{k}", "g": k % 2, "ts": ts, "px": px[k], "op": round(px[k] * (1 + rng.normal(0, 0.01)), 2),
             "vol": int(rng.integers(1, 10) * 100)}
        r = rng.random()
        if r < 0.01:
            e["k"] = None  # a null key: an error row
        elif r < 0.02:
            e["ts"] = "not a time"
        elif r < 0.03:
            e["px"] = None
        events.append(e)
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), min_size=1, max_size=6))))
    return events, cuts


def _batches(events: list[dict], cuts: list[int]) -> list:
    bounds = [0, *[c for c in cuts if 0 < c < len(events)], len(events)]
    return [batch_from_records(events[a:b], lines=list(range(a + 1, b + 1)), source="s")
            for a, b in zip(bounds, bounds[1:]) if b > a]


def _state(eng: Engine) -> dict:
    """The engine's snapshot per rule, without the timings (seconds_*) and the batch DFA's history
    number that differ between runs."""
    body = safe_loads(eng.snapshot()[7:], "test")
    out = {}
    for name, blob in body["rules"].items():
        s = safe_loads(blob[1:], "test")
        s["stats"] = {k: v for k, v in s["stats"].items() if not k.startswith("seconds_")}
        if s.get("batch_dfa") is not None:
            # a process-wide number naming what the rule stepped (cep.sharing.rejoin_histories), not
            # its state: it differs between runs, and with sharing off rules never share by it
            s["batch_dfa"].pop("history")
        out[name] = pickle.dumps(s, protocol=5)
    return out


def _key(r: dict) -> str:
    return json.dumps(r, sort_keys=True, default=str)


def run(rules: list[Rule], batches: list, share: bool, limits: StateLimits | None, restore_at: int | None,
        reload_at: int | None = None):
    """Rows, counters and states; a snapshot restored into a new engine before batch ``restore_at``;
    before batch ``reload_at``, copies of the rules join (no history yet, the same conditions)."""
    engine_mod.SHARE_WORK = share
    try:
        eng = Engine(rules)
        if limits is not None:
            eng.set_state_limits(limits)
        got: dict[str, list] = {"matches": [], "late": [], "errors": [], "timeouts": []}
        states = []
        for i, b in enumerate(batches):
            if i == reload_at:
                from dataclasses import replace

                rules = rules + [replace(r, name=r.name + "_late") for r in rules]
                assert eng.reload(rules).accepted
            if i == restore_at:
                snap = eng.snapshot()
                eng = Engine(rules)
                if limits is not None:
                    eng.set_state_limits(limits)
                eng.restore(snap)
            o = eng.process(b)
            for k in got:
                got[k] += [_key(r) for r in getattr(o, k)]
            states.append(_state(eng))
        o = eng.finish()
        for k in got:
            got[k] += [_key(r) for r in getattr(o, k)]
        counts = {k: vars(v) for k, v in eng.counts().items()}
        return got, counts, states
    finally:
        engine_mod.SHARE_WORK = True


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(rules=rule_sets(), stream=streams(), data=st.data())
def test_sharing_changes_nothing(rules, stream, data):
    events, cuts = stream
    batches = _batches(events, cuts)
    limits = data.draw(st.sampled_from([None, None, StateLimits(idle_state_ttl_ms=4000),
                                        StateLimits(max_partial_matches_total=3, max_buffered_events=50)]))
    restore_at = data.draw(st.one_of(st.none(), st.integers(0, max(0, len(batches) - 1))))
    reload_at = data.draw(st.one_of(st.none(), st.integers(1, max(1, len(batches) - 1))))
    on = run(rules, batches, True, limits, restore_at, reload_at)
    off = run(rules, batches, False, limits, restore_at, reload_at)
    assert on[0] == off[0]  # rows, late rows, errors, time-outs, in order
    assert on[1] == off[1]  # counters
    assert on[2] == off[2]  # state after every batch


def test_shared_conditions_over_real_bars_change_nothing():
    """Fifty benchmark rules over the bundled S&P 500 sample in batches that split runs."""
    from pathlib import Path

    import benchmarks.bench_many_rules as bench
    from cep.events import read_events

    path = Path(__file__).resolve().parents[2] / "rules" / "data" / "sp500_daily_2017_sample.jsonl"
    rules = bench.rule_set(50)
    for size in (37, 1000):
        batches = list(read_events(path, batch_size=size))
        on, off = run(rules, batches, True, None, 3), run(rules, batches, False, None, 3)
        assert on == off
        assert len(on[0]["matches"]) > 50


def test_a_streak_rule_matches_the_reference_with_other_rules_sharing_its_conditions():
    """The engine with rules sharing masks against the brute-force matcher, per key."""
    from patterns.match_recognize import parse_statement

    rng = np.random.default_rng(15)
    events = []
    px = {0: 100.0, 1: 100.0}
    for t in range(400):
        k = t % 2
        px[k] = round(px[k] * (1 + rng.normal(0, 0.01)), 2)
        events.append({"k": f"s{k}", "g": k, "ts": 1000 * t, "px": px[k], "op": px[k], "vol": 100})
    rules = [parse_rule_text(rule_sql("streak", 1, n, "k", ""), f"s{n}") for n in (2, 3, 4)]
    rules += [parse_rule_text(rule_sql("level_cross", i, 1, "k", ""), f"l{i}") for i in range(3)]
    out = Engine(rules).run(_batches(events, [50, 51, 190, 333]))
    for rule in rules[:3]:
        stmt = parse_statement(rule.source)
        for k in ("s0", "s1"):
            xs = [e["px"] for e in events if e["k"] == k]
            tss = [e["ts"] for e in events if e["k"] == k]
            want = reference_matches(len(xs), stmt.pattern, lambda v, i, a: i > 0 and xs[i] > xs[i - 1])
            got = [(r["t0"], r["n"]) for r in out.matches if r["rule"] == rule.name and r["k"] == k]
            assert got == [(tss[m[0][0]], len(m)) for m in want]


@pytest.mark.parametrize("share", [True, False])
def test_a_rule_with_a_bad_time_in_the_future_is_judged_by_its_own_clock(share):
    """Times are parsed once, but each rule's future guard reads its own setting."""
    from dataclasses import replace

    from cep.events import FixedClock

    engine_mod.SHARE_WORK = share
    try:
        a = parse_rule_text(rule_sql("level_cross", 0, 1, "k", ""), "guarded")
        b = replace(a, name="unguarded", max_future_skew_ms=None)
        eng = Engine([a, b], clock=FixedClock(0))
        out = eng.process([{"k": "x", "ts": 5_000_000_000, "px": 1.0}])
        assert [e["rule"] for e in out.errors] == ["guarded"]
        assert eng.counts()["unguarded"].buffered + eng.counts()["unguarded"].processed == 1
    finally:
        engine_mod.SHARE_WORK = True
