"""Bounded state beyond the per-key cap: idle-key expiry (sessions), a rule-wide partial-match cap,
a cap on buffered events. Each is counted, and expiry does not depend on batching or restarts."""

from __future__ import annotations

import random

import pytest

from cep.engine import Engine, StateLimits
from patterns.rules import parse_rules

TTL_RULES = """
rules:
  - name: up
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, LAST(B.ts) AS t1, MATCH_NUMBER() AS m, PREV(A.v) AS before
        PATTERN (A B+) {within}
        DEFINE A AS v = 0, B AS v >= PREV(v) AND v > 0)
"""


def stream(seed: int, n: int = 1500, keys: int = 30) -> list[dict]:
    rng = random.Random(seed)
    out, t = [], 0
    for _ in range(n):
        t += rng.choice((0, 1, 10, 100, 500, 3000))
        out.append({"k": rng.randrange(keys), "ts": t, "v": rng.randint(0, 2)})
    return out


def run(events: list[dict], limits: StateLimits, batch: int, within: str = "", snapshot_at: int | None = None):
    rules = parse_rules(TTL_RULES.format(within=within))
    eng = Engine(rules)
    eng.set_row_ids()
    eng.set_state_limits(limits)
    rows = []
    for i in range(0, len(events), batch):
        if snapshot_at is not None and i >= snapshot_at:
            blob = eng.snapshot()
            eng = Engine(rules)
            eng.set_row_ids()
            eng.set_state_limits(limits)
            eng.restore(blob)
            snapshot_at = None
        rows += eng.process(events[i : i + batch]).matches
    rows += eng.finish().matches
    return rows, eng


def canon(rows: list[dict]) -> list[tuple]:
    return sorted(tuple(sorted(r.items())) for r in rows)


@pytest.mark.parametrize("within", ["", "WITHIN INTERVAL '2' SECOND"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_idle_expiry_gives_the_same_rows_in_any_batching_and_across_a_restart(seed, within):
    events = stream(seed)
    limits = StateLimits(idle_state_ttl_ms=2000)
    want, eng = run(events, limits, 1500, within)
    for batch, snap in ((3, None), (7, 700), (100, 300)):
        got, _ = run(events, limits, batch, within, snap)
        assert canon(got) == canon(want), (batch, snap)
    ids = [r["_id"] for r in want]
    assert len(ids) == len(set(ids))  # match numbers restart per session; start times keep ids unique
    assert eng.operators["up"].stats.keys_expired > 50


def test_a_key_quiet_past_the_ttl_starts_a_new_session():
    ev = [{"k": 1, "ts": 0, "v": 5}, {"k": 1, "ts": 10, "v": 0}, {"k": 1, "ts": 20, "v": 1},
          {"k": 1, "ts": 30, "v": 0},  # then silence for longer than the TTL
          {"k": 1, "ts": 5000, "v": 0}, {"k": 1, "ts": 5010, "v": 2}]
    eng = Engine(parse_rules(TTL_RULES.format(within="")))
    eng.set_state_limits(StateLimits(idle_state_ttl_ms=1000))
    out = eng.process(ev).matches + eng.finish().matches
    assert [(r["t0"], r["t1"], r["m"], r["before"]) for r in out] == [
        (10, 20, 1, 5),  # ended by the next A (greedy B+ is over)
        (5000, 5010, 1, None),  # a new session: MATCH_NUMBER starts at 1, PREV sees nothing before it
    ]
    # without the TTL the partition goes on: match number 2, PREV reaches back over the gap
    eng = Engine(parse_rules(TTL_RULES.format(within="")))
    out = eng.process(ev).matches + eng.finish().matches
    assert [(r["m"], r["before"]) for r in out] == [(1, 5), (2, 0)]


def test_expiry_keeps_the_number_of_keys_flat_under_key_churn():
    def batch(b: int) -> list[dict]:  # every batch brings 200 new keys; old ones go quiet for good
        return [{"k": b * 200 + i % 200, "ts": b * 1000 + i, "v": i % 3} for i in range(800)]

    rules = parse_rules(TTL_RULES.format(within="WITHIN INTERVAL '1' SECOND"))
    eng = Engine(rules)
    eng.set_state_limits(StateLimits(idle_state_ttl_ms=2000))
    op = eng.operators["up"]
    sizes = []
    for b in range(30):
        eng.process(batch(b))
        sizes.append(len(op.states))
    assert max(sizes[5:]) <= 1000 and op.stats.keys_expired >= 5000
    no_ttl = Engine(rules)
    for b in range(30):
        no_ttl.process(batch(b))
    assert len(no_ttl.operators["up"].states) == 6000


CAP_RULES = """
rules:
  - name: r
    on_cap: {policy}
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES COUNT(*) AS n PATTERN (A+ B) WITHIN INTERVAL '1' HOUR DEFINE {define})
"""


@pytest.mark.parametrize("policy", ["drop_oldest", "skip_key"])
@pytest.mark.parametrize("history", [False, True])
def test_rule_wide_cap_on_partial_matches_over_all_keys(policy, history):
    define = "A AS SUM(A.x) >= 0, B AS x < 0" if history else "A AS x >= 0, B AS x < 0"
    eng = Engine(parse_rules(CAP_RULES.format(policy=policy, define=define)))
    eng.set_state_limits(StateLimits(max_partial_matches_total=300))
    op = eng.operators["r"]
    for start in range(0, 5000, 500):  # every row opens a partial match that never ends
        eng.process([{"k": i % 50, "ts": start + i, "x": 1} for i in range(500)])
        assert op.live_partial_matches() <= 300
    c = eng.counts()["r"]
    assert c.cap_hits >= 9 and c.partial_matches_dropped >= 4000
    # the keys still match afterwards
    out = eng.process([{"k": k, "ts": 30_000 + k, "x": -1} for k in range(50)]).matches + eng.finish().matches
    assert len(out) == 50 if policy == "drop_oldest" else len(out) >= 1


def test_pathological_pattern_stays_within_the_caps():
    # every step optional over a long window: without caps the runs grow with every row
    rules = """
rules:
  - name: r
    max_partial_matches: 50
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(*) AS n
        PATTERN (A? B* C*? D) WITHIN INTERVAL '1' HOUR
        DEFINE A AS COUNT(A.*) >= 0, B AS COUNT(B.*) >= 0, C AS COUNT(C.*) >= 0, D AS x < 0)
"""
    eng = Engine(parse_rules(rules))
    eng.set_state_limits(StateLimits(max_partial_matches_total=500))
    op = eng.operators["r"]
    peak = 0
    for start in range(0, 12_000, 2000):
        eng.process([{"k": i % 20, "ts": start + i, "x": 1} for i in range(2000)])
        peak = max(peak, op.live_partial_matches())
    assert peak <= 500
    assert eng.counts()["r"].partial_matches_dropped > 0


def test_buffered_events_cap_moves_the_watermark_and_later_events_are_late():
    rules = parse_rules("""
rules:
  - name: r
    lateness: 1 hour
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0 PATTERN (A B)
        DEFINE A AS x = 0, B AS x = 1)
""")
    eng = Engine(rules)
    eng.set_state_limits(StateLimits(max_buffered_events=100))
    op = eng.operators["r"]
    late = 0
    for b in range(20):
        res = eng.process([{"k": i % 5, "ts": b * 1000 + i * 2, "x": i % 2} for i in range(200)])
        assert op.counts.buffered <= 100
        late += len(res.late)
    assert op.stats.buffer_cap_hits == 20
    res = eng.process([{"k": 1, "ts": 5, "x": 0}])  # far behind the forced watermark, inside the lateness
    assert len(res.late) == 1 and "behind the watermark" in res.late[0]["reason"]
    eng.finish()
    c = eng.counts()["r"]
    assert c.read == c.processed + c.late + c.errors + c.buffered
    # the forced watermark survives a restart
    blob = eng.snapshot()
    eng2 = Engine(rules)
    eng2.restore(blob)
    assert eng2.operators["r"].floor == op.floor is not None


# TTL_RULES without the PREV measure: a rule the batch DFA steps
BATCH_DFA_RULES = """
rules:
  - name: up
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, LAST(B.ts) AS t1, MATCH_NUMBER() AS m
        PATTERN (A B+)
        DEFINE A AS v = 0, B AS v >= PREV(v) AND v > 0)
"""


def test_limits_the_batch_dfa_does_not_keep_are_refused_once_a_rule_steps_on_it():
    """The batch DFA (cep/batch_dfa.py) keeps no sessions and no rule-wide cap: a rule already
    stepping on it cannot take an idle TTL or a partial-match total later (its rows would silently
    ignore them); the engine says so and goes on as before. A buffered-events bound is kept."""
    import cep.batch_dfa as batch_dfa
    from patterns.errors import CepError

    rules = parse_rules(BATCH_DFA_RULES)
    events = stream(3)
    eng = Engine(rules)
    rows = eng.process(events[:700]).matches
    assert eng.operators["up"]._keyed is not None  # the rule took the batch path
    blob = eng.snapshot()
    for limits in (StateLimits(idle_state_ttl_ms=2000), StateLimits(max_partial_matches_total=50)):
        with pytest.raises(CepError, match=r"rule 'up' steps on the batch DFA, which keeps no .*: set the state limits before"):
            eng.set_state_limits(limits)
        # a snapshot of that state restored into an engine with the limits: refused too
        other = Engine(rules)
        other.set_state_limits(limits)
        with pytest.raises(CepError, match=r"rule 'up': the snapshot holds the batch DFA's state .* keeps no (idle TTL|partial-match total)"):
            other.restore(blob)
    eng.set_state_limits(StateLimits(max_buffered_events=100))
    rows += eng.process(events[700:]).matches + eng.finish().matches
    ref = Engine(rules)
    ref.set_state_limits(StateLimits(max_buffered_events=100))
    want = ref.process(events[:700]).matches + ref.process(events[700:]).matches + ref.finish().matches
    assert canon(rows) == canon(want)
    # on the per-key automaton the same limits apply from the next batch on
    old = batch_dfa.USE_BATCH_DFA
    batch_dfa.USE_BATCH_DFA = False
    try:
        eng = Engine(rules)
        eng.process(events[:700])
        eng.set_state_limits(StateLimits(idle_state_ttl_ms=2000))
        eng.process(events[700:])
        assert eng.operators["up"].stats.keys_expired > 0
    finally:
        batch_dfa.USE_BATCH_DFA = old
