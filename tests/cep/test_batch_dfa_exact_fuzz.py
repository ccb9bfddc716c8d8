"""Batch DFA fuzz: rules sharing PREV conditions over integers around 2**53, against the per-key automaton and the brute force."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
from patterns.match_recognize import parse_statement
from patterns.rules import parse_rules
from tests.reference import reference_matches
from tests.replay import replay_engine

E53 = 2**53

# shared conditions (x < PREV(x), x > PREV(x), x >= PREV(x), a literal next to 2**53 and an
# arithmetic one); adjacent integers past 2**53 are one float64, so PREV read as a float would
# call them equal
RULES = f"""
rules:
  - name: v
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, C.ts AS t1, LAST(B.x) AS bx
        PATTERN (A B+ C) DEFINE B AS x < PREV(x), C AS x > PREV(x))
  - name: w
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, C.ts AS t1
        PATTERN (A B C) DEFINE A AS x > {E53 - 2}, B AS x < PREV(x), C AS x >= PREV(x))
  - name: within
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, B.ts AS t1
        PATTERN (A B) WITHIN INTERVAL '5' MILLISECOND
        DEFINE A AS x > {E53 - 2}, B AS x < PREV(x))
  - name: streak
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES FIRST(U.ts) AS t0, LAST(U.ts) AS t1, COUNT(U.*) AS n
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (U{{3,}}) DEFINE U AS x > PREV(x))
  - name: flat
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES FIRST(F.ts) AS t0, LAST(F.ts) AS t1
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (F{{2,}}) DEFINE F AS x >= PREV(x) AND x + 1 > PREV(x) + 1)
"""


def _p(x: list, i: int) -> int | None:
    return x[i - 1] if i > 0 else None


CONDS = {
    "v": {"A": lambda x, i: True, "B": lambda x, i: i > 0 and x[i] < x[i - 1], "C": lambda x, i: i > 0 and x[i] > x[i - 1]},
    "w": {"A": lambda x, i: x[i] > E53 - 2, "B": lambda x, i: i > 0 and x[i] < x[i - 1],
          "C": lambda x, i: i > 0 and x[i] >= x[i - 1]},
    "within": {"A": lambda x, i: x[i] > E53 - 2, "B": lambda x, i: i > 0 and x[i] < x[i - 1]},
    "streak": {"U": lambda x, i: i > 0 and x[i] > x[i - 1]},
    "flat": {"F": lambda x, i: i > 0 and x[i] >= x[i - 1] and x[i] + 1 > x[i - 1] + 1},
}

LEVELS = (0, E53 - 4, E53, E53 + 4, -(E53 + 2), 2**62)


def _batches(rnd: random.Random, n: int, keys: int, cuts: list[int]) -> list[list[dict]]:
    """Values a few apart around each level, a level kept for a stretch of a batch or several
    (so a batch may hold only small values while PREV reads a big one from the one before)."""
    bounds = [0] + sorted(set(cuts)) + [n]
    level = {k: rnd.choice(LEVELS) for k in range(keys)}
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        evs = []
        for i in range(lo, hi):
            k = rnd.randrange(keys)
            if rnd.random() < 0.02:
                level[k] = rnd.choice(LEVELS)
            evs.append({"k": k, "ts": i, "x": level[k] + rnd.randrange(-4, 5)})
        out.append(evs)
    return out


def _run(batches: list[list[dict]], use: bool, snap_at: int | None) -> tuple[list[str], dict, dict]:
    """Rows (as repr, so types count), counters and whether each rule took the batch path."""
    return replay_engine(RULES, batches, use, snap_at)


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), keys=st.integers(1, 3), n=st.integers(200, 600),
       ncuts=st.integers(0, 8), snap=st.booleans())
def test_prev_around_2_53_matches_the_automaton_and_the_brute_force(seed, keys, n, ncuts, snap):
    """Keys of hundreds of rows, batches that cut runs, a restore in the middle: the batch DFA's
    rows and counters are the automaton's, and each rule's matches the brute force's in ints."""
    rnd = random.Random(seed)
    cuts = [rnd.randrange(1, n) for _ in range(ncuts)]
    batches = _batches(rnd, n, keys, cuts)
    snap_at = rnd.randrange(0, len(batches)) if snap else None
    fast, fast_counts, taken = _run(batches, True, snap_at)
    slow, slow_counts, _ = _run(batches, False, None)
    assert taken == dict.fromkeys(CONDS, batch_dfa._numba_ok())
    assert fast == slow
    assert fast_counts == slow_counts
    events = [e for b in batches for e in b]
    stmts = {r.name: parse_statement(r.source) for r in parse_rules(RULES)}
    for name, cond in CONDS.items():
        stmt = stmts[name]
        expected = set()
        for k in range(keys):
            evs = [e for e in events if e["k"] == k]
            xs = [e["x"] for e in evs]

            def c(var: str, i: int, asg: tuple, xs: list = xs, cond: dict = cond) -> bool:
                return cond[var](xs, i)

            within = 5 if name == "within" else None
            for asg in reference_matches(len(xs), stmt.pattern, c, stmt.skip.mode, ts=[e["ts"] for e in evs],
                                         within=within):
                expected.add((k, evs[asg[0][0]]["ts"], evs[asg[-1][0]]["ts"]))
        got = set()
        for r in fast:
            row = dict(eval(r))  # noqa: S307 - our own repr of plain values
            if row["rule"] == name:
                got.add((row["k"], row["t0"], row["t1"]))
        assert got == expected, name
