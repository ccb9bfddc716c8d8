"""Bounded state: caps on partial matches turn an explosion into counted drops, never a crash."""

from __future__ import annotations

import pytest

from cep.engine import Engine
from patterns.errors import RuleErrors
from patterns.rules import parse_rules


def rules(pattern: str, define: str, cap: int, policy: str = "drop_oldest", within: str = "") -> str:
    return f"""
rules:
  - name: r
    max_partial_matches: {cap}
    on_cap: {policy}
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES COUNT(*) AS n PATTERN ({pattern}) {within} DEFINE {define})
"""

# With AFTER MATCH SKIP PAST LAST ROW and no WITHIN, later start rows that reach the head's
# automaton state are merged into it (they cannot be reported), so "every row opens a partial
# match" needs a WITHIN (each start row then expires at its own time) or the general path.
LONG = "WITHIN INTERVAL '1' HOUR"


def live(engine: Engine) -> tuple[int, int]:
    """(most start rows alive for one key, most partial matches alive for one key).

    A partial match is a run, and on the DFA paths an automaton position of a start row's state
    (docs/cli.md: what partial_matches_peak counts; these rules merge no runs on the general path)."""
    op = engine.operators["r"]
    states = op.automaton.dfa_states
    if op._keyed is not None:  # the batch DFA path (cep/batch_dfa.py): a DFA state per start row
        kd = op._keyed
        nk = kd.keys()
        most = int(kd.alen[:nk].max(initial=0))
        per_key = [sum(len(kd.table.states[int(kd.pool[2, kd.k[5, i] + q])]) for q in range(int(kd.alen[i])))
                   for i in range(nk)]
        return most, max(per_key, default=0)
    attempts = max((len(st.attempts) for st in op.states.values()), default=0)
    threads = max(
        (sum(len(a.threads) if isinstance(a.threads, list) else len(states[a.threads]) for a in st.attempts)
         for st in op.states.values()),
        default=0,
    )
    return attempts, threads


@pytest.mark.parametrize("history", [True, False])
def test_every_row_starts_a_match_that_never_ends(history):
    # A+ B where B never holds: every row opens a partial match that lives for ever
    cond = "A AS SUM(A.x) >= 0, B AS x < 0" if history else "A AS x >= 0, B AS x < 0"
    eng = Engine(parse_rules(rules("A+ B", cond, cap=20, within=LONG)))
    for start in range(0, 4000, 500):
        eng.process([{"k": i % 3, "ts": start + i, "x": 1} for i in range(500)])
        attempts, threads = live(eng)
        # the cap counts runs on the general path and start rows on the DFA paths, where each start
        # row of A+ B holds two positions (another A, or B), which the partial-match count counts
        assert attempts <= 20 and threads <= (20 if history else 2 * 20)
    c = eng.counts()["r"]
    assert c.cap_hits > 0 and c.partial_matches_dropped > 0


def test_exponential_alternatives_stay_within_the_cap():
    # (A | B)+ C where A and B both hold and look back: the runs double at every row
    eng = Engine(parse_rules(rules("(A | B)+ C", "A AS COUNT(A.*) >= 0, B AS COUNT(B.*) >= 0, C AS x < 0", cap=64)))
    eng.process([{"k": 1, "ts": i, "x": 1} for i in range(1000)])
    attempts, threads = live(eng)
    assert attempts <= 64 and threads <= 64
    assert eng.counts()["r"].partial_matches_dropped > 1000


def test_skip_key_policy_forgets_the_keys_partial_matches():
    eng = Engine(parse_rules(rules("A+ B", "A AS x >= 0, B AS x < 0", cap=10, policy="skip_key", within=LONG)))
    eng.process([{"k": 1, "ts": i, "x": 1} for i in range(105)])
    attempts, _ = live(eng)
    assert attempts <= 10
    out = eng.process([{"k": 1, "ts": 200, "x": -1}]).matches + eng.finish().matches
    assert len(out) == 1 and out[0]["n"] <= 11  # the match starts after the last reset


def test_equivalent_start_rows_merge_without_changing_the_rows():
    import cep.nfa as nfa

    events = [{"k": 1, "ts": i, "x": 1} for i in range(3000)] + [{"k": 1, "ts": 5000, "x": -1}]
    out = {}
    for merge in (False, True):
        nfa.MERGE_EQUIVALENT_ATTEMPTS = merge
        try:
            eng = Engine(parse_rules(rules("A+ B", "A AS x >= 0, B AS x < 0", cap=100_000)))
            eng.process(events[:-1])
            out[merge] = (live(eng)[0], eng.process(events[-1:]).matches + eng.finish().matches)
        finally:
            nfa.MERGE_EQUIVALENT_ATTEMPTS = True
    assert out[False][0] == 3000 and out[True][0] == 1  # one live start row instead of 3,000
    assert out[True][1] == out[False][1] == [{"k": 1, "n": 3001, "rule": "r"}]


def test_bad_policy_is_refused():
    with pytest.raises(RuleErrors, match="on_cap must be drop_oldest or skip_key, found 'explode'"):
        parse_rules(rules("A+ B", "A AS x >= 0", cap=10, policy="explode"))



@pytest.mark.parametrize("history", [True, False])
def test_peak_counter_is_the_most_partial_matches_one_key_held(history):
    # the step counter and a count taken from outside after every event agree, in both paths
    cond = "A AS SUM(A.x) >= 0, B AS x < 0" if history else "A AS x >= 0, B AS x < 0"
    eng = Engine(parse_rules(rules("A+ B", cond, cap=1000, within="WITHIN INTERVAL '7' MILLISECOND")))
    seen = 0
    for i in range(60):
        eng.process([{"k": 0, "ts": i, "x": -1 if i % 13 == 12 else 1}, {"k": 1, "ts": i, "x": 1}])
        seen = max(seen, live(eng)[1])
    assert seen >= 6  # several start rows alive at once: the counter is not per partial match
    assert eng.counts()["r"].partial_matches_peak == seen
