"""Several batch-DFA rules in one engine: a batch's rows reach the store only where a later batch reads them.

The batch path (cep/batch_dfa.py) copies a row's column values into its store only when a later
batch can read it (PREV, or a partial match still alive at the batch's end); matches that end
in the batch read the batch's own columns, and a key with nothing alive jumps to its next row that
can start a match. These tests run rules that share conditions over keys of hundreds of rows, cut
into batches that split runs, with a snapshot and restore of the whole engine between batches and
a measured column whose type changes from batch to batch; the rows must be the per-key
automaton's (``cep.batch_dfa.USE_BATCH_DFA`` off, the path CEP_NO_NUMBA=1 runs), value for value
and type for type, and each rule's matches the brute force's.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
from patterns.match_recognize import parse_statement
from patterns.rules import parse_rules
from tests.reference import reference_matches
from tests.replay import replay_engine

# conditions shared across rules (x < PREV(x), x > PREV(x), x > 6); y is only measured
RULES = """
rules:
  - name: v
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, C.ts AS t1, A.y AS ay, LAST(B.y) AS b_y
        PATTERN (A B+ C) DEFINE B AS x < PREV(x), C AS x > PREV(x))
  - name: w
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, C.ts AS t1, B.y AS b_y
        PATTERN (A B C) DEFINE A AS x > 6, B AS x < PREV(x), C AS x > PREV(x))
  - name: within
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, B.ts AS t1, B.y AS b_y
        PATTERN (A B) WITHIN INTERVAL '5' MILLISECOND
        DEFINE A AS x > 6, B AS x < PREV(x))
  - name: streak
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES FIRST(U.ts) AS t0, LAST(U.ts) AS t1, COUNT(U.*) AS n, LAST(U.y) AS uy
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (U{3,}) DEFINE U AS x > PREV(x))
"""

CONDS = {
    "v": {"A": lambda x, i: True, "B": lambda x, i: i > 0 and x[i] < x[i - 1], "C": lambda x, i: i > 0 and x[i] > x[i - 1]},
    "w": {"A": lambda x, i: x[i] > 6, "B": lambda x, i: i > 0 and x[i] < x[i - 1], "C": lambda x, i: i > 0 and x[i] > x[i - 1]},
    "within": {"A": lambda x, i: x[i] > 6, "B": lambda x, i: i > 0 and x[i] < x[i - 1]},
    "streak": {"U": lambda x, i: i > 0 and x[i] > x[i - 1]},
}


def _y(batch_no: int, v: int) -> Any:
    """The measured column: integers, floats or text depending on the batch."""
    return (v, v + 0.5, f"y{v}")[batch_no % 3]


def _batches(rnd: random.Random, n: int, keys: int, cuts: list[int]) -> list[list[dict]]:
    bounds = [0] + sorted(set(cuts)) + [n]
    out = []
    for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        out.append([{"k": rnd.randrange(keys), "ts": i, "x": rnd.randrange(10), "y": _y(b, i)} for i in range(lo, hi)])
    return out


def _run(batches: list[list[dict]], use: bool, snap_at: int | None) -> tuple[list[str], dict, dict]:
    """Rows (as repr, so types count), counters and whether each rule took the batch path."""
    return replay_engine(RULES, batches, use, snap_at)


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), keys=st.integers(1, 3), n=st.integers(300, 1200),
       ncuts=st.integers(0, 8), snap=st.booleans())
def test_rules_sharing_conditions_match_the_automaton_and_the_brute_force(seed, keys, n, ncuts, snap):
    rnd = random.Random(seed)
    cuts = [rnd.randrange(1, n) for _ in range(ncuts)]
    batches = _batches(rnd, n, keys, cuts)
    snap_at = rnd.randrange(0, len(batches)) if snap else None
    fast, fast_counts, taken = _run(batches, True, snap_at)
    slow, slow_counts, _ = _run(batches, False, None)
    # with CEP_NO_NUMBA=1 the rules keep the automaton, and both runs are the pure path
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
            for asg in reference_matches(len(xs), stmt.pattern, c, stmt.skip.mode, ts=[e["ts"] for e in evs], within=within):
                expected.add((k, evs[asg[0][0]]["ts"], evs[asg[-1][0]]["ts"]))
        got = {(r[0], r[1], r[2]) for r in (_fields(x) for x in fast) if r[3] == name}
        assert got == expected, name


def _fields(row_repr: str) -> tuple:
    row = dict(eval(row_repr))  # noqa: S307 - our own repr of plain values
    return row["k"], row["t0"], row["t1"], row["rule"]


def test_a_measured_value_from_an_earlier_batch_keeps_its_type():
    """A partial match alive across batches whose column changes type reads each row's own value:
    the store turns to Python values as the automaton's rows hold them."""
    batches = [
        [{"k": 0, "ts": 0, "x": 9, "y": 1}, {"k": 0, "ts": 1, "x": 8, "y": 2}],
        [{"k": 0, "ts": 2, "x": 7, "y": 3.5}],
        [{"k": 0, "ts": 3, "x": 9, "y": "z"}],
    ]
    fast, _, taken = _run(batches, True, None)
    slow, _, _ = _run(batches, False, None)
    assert taken["v"] == batch_dfa._numba_ok() and fast == slow
    v_rows = [dict(eval(r)) for r in fast if "'v'" in r]  # noqa: S307
    assert [(r["ay"], r["b_y"]) for r in v_rows] == [(1, 3.5)]
