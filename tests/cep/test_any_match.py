"""Skip-till-any-match: ``ANY B`` with ``AFTER MATCH NO SKIP`` (Flink CEP's ``followedByAny``).

Every combination is a match: for ``A ANY B``, each later ``B`` row within ``WITHIN`` pairs with
each ``A`` row. The operator is compared with the brute-force reference
(``tests.reference.reference_all_matches``: every way the backtracking matcher completes from every
start row), on keys of hundreds of rows, cut into random batches and restored midway.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.operator import PatternOperator
from patterns.errors import RuleError
from patterns.rules import parse_rule_text
from tests.reference import reference_all_matches
from tests.replay import replay

WITHIN_MS = 6_000

CASES = {
    "pairs": ("A ANY B", False),
    "triples": ("A ANY B ANY C", False),
    "any_of_then_strict": ("A ANY (B | C) D", False),
    "loop_then_any": ("A B+ ANY C", False),
    "history": ("A ANY B", True),
    "any_then_absent": ("A ANY B NOT C D", False),
}


def sql_for(pattern: str, history: bool) -> str:
    b = "B.v = 1 AND B.w > A.w" if history else "B.v = 1"
    defs = [("A", "A AS A.v = 0"), ("B", f"B AS {b}"), ("C", "C AS C.v = 2"), ("D", "D AS D.v = 3")]
    return (
        "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
        "MEASURES FIRST(i) AS first_i, LAST(i) AS last_i, COUNT(*) AS n, A.i AS a_i "
        f"AFTER MATCH NO SKIP PATTERN ({pattern}) WITHIN INTERVAL '{WITHIN_MS // 1000}' SECOND "
        "DEFINE " + ", ".join(d for v, d in defs if v in pattern.replace("ANY", "")) + ")"
    )


def make_events(seed: int, keys: int, per_key: int) -> list[dict]:
    rnd = random.Random(seed)
    events = []
    for k in range(keys):
        t = rnd.randrange(0, 3_000)
        for i in range(per_key):
            t += rnd.choice((0, 1000, 1000, 2000, 4000))
            events.append({"k": f"K{k}", "ts": t, "v": rnd.randrange(5), "w": rnd.randrange(4), "i": i})
    events.sort(key=lambda e: e["ts"])
    return events


def cond_for(rows: list[dict], history: bool):
    def cond(var: str, i: int, asg) -> bool:
        r = rows[i]
        if var == "A":
            return r["v"] == 0
        if var == "B":
            a = [j for j, v, _ in asg if v == "A"]
            return r["v"] == 1 and (not history or (bool(a) and r["w"] > rows[a[-1]]["w"]))
        if var == "C":
            return r["v"] == 2
        if var == "D":
            return r["v"] == 3
        raise AssertionError(var)

    return cond


def expected(sql: str, events: list[dict], history: bool) -> dict[str, Counter]:
    mr = parse_rule_text(sql).compiled.statement
    by_key: dict[str, list[dict]] = {}
    for e in events:
        by_key.setdefault(e["k"], []).append(e)
    out = {}
    for k, rows in by_key.items():
        ts = [r["ts"] for r in rows]
        got = reference_all_matches(len(rows), mr.pattern, cond_for(rows, history), ts, WITHIN_MS)
        out[k] = Counter(
            (asg[0][0], asg[-1][0], len(asg), [j for j, v, _ in asg if v == "A"][-1]) for asg in got
        )
    return out


def run(sql: str, events: list[dict], cuts: list[int], restore_at: int | None, **kw):
    compiled = parse_rule_text(sql).compiled

    def make() -> PatternOperator:
        op = PatternOperator(compiled, name="r", **kw)
        op.row_ids = True
        return op

    return replay(make, events, cuts, restore_at)


def as_counters(rows) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for r in rows:
        out.setdefault(r["k"], Counter())[(r["first_i"], r["last_i"], r["n"], r["a_i"])] += 1
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(sorted(CASES)), seed=st.integers(0, 10**6), data=st.data())
def test_every_combination_whatever_the_batching(case, seed, data):
    pattern, history = CASES[case]
    sql = sql_for(pattern, history)
    events = make_events(seed, keys=3, per_key=data.draw(st.integers(40, 200), label="rows per key"))
    want = expected(sql, events, history)
    whole, _ = run(sql, events, [], None)
    got = as_counters(whole)
    assert {k: got.get(k, Counter()) for k in want} == want
    n = len(events)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, n - 1), max_size=10), label="cuts")))
    again, _ = run(sql, events, cuts, data.draw(st.integers(0, len(cuts)), label="restore after"))
    assert sorted(r["_id"] for r in again) == sorted(r["_id"] for r in whole)
    assert len({r["_id"] for r in whole}) == len(whole)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_case_on_long_keys(case):
    pattern, history = CASES[case]
    sql = sql_for(pattern, history)
    events = make_events(11, keys=3, per_key=400)
    want = expected(sql, events, history)
    rows, _ = run(sql, events, list(range(77, len(events), 131)), 4)
    assert {k: c for k, c in as_counters(rows).items()} == {k: c for k, c in want.items() if c}
    assert sum(sum(c.values()) for c in want.values()) > 5


def test_pairs_by_hand():
    sql = sql_for("A ANY B", False)
    ev = [{"k": "x", "ts": t, "v": v, "w": 0, "i": i} for i, (t, v) in enumerate([(0, 0), (1000, 1), (2000, 0), (3000, 1), (7000, 1)])]
    rows, op = run(sql, ev, [], None)
    # WITHIN 6 s: a0 pairs with b1 and b3 (b4 at 7 s is too late for it); a2 with b3 and b4
    assert sorted((r["a_i"], r["last_i"]) for r in rows) == [(0, 1), (0, 3), (2, 3), (2, 4)]
    assert op.stats.matches == 4


def test_the_caps_bound_the_combinations():
    """A flood of B rows: every A keeps one partial match per B; the per-key cap bounds them."""
    sql = sql_for("A ANY B ANY C", False)
    ev = [{"k": "x", "ts": i, "v": 0 if i % 50 == 0 else 1, "w": 0, "i": i} for i in range(2000)]
    rows, op = run(sql, ev, [], None, max_partial_matches=500)
    assert op.stats.partial_matches_peak <= 500 + 1
    assert op.stats.partial_matches_dropped > 0 and rows == []


@pytest.mark.parametrize("pattern, tail, skip, message", [
    ("A ANY B", "WITHIN INTERVAL '1' MINUTE", "AFTER MATCH SKIP PAST LAST ROW", "write AFTER MATCH NO SKIP"),
    ("A ANY B", "", "AFTER MATCH NO SKIP", "ANY needs WITHIN"),
    ("ANY B A", "WITHIN INTERVAL '1' MINUTE", "AFTER MATCH NO SKIP", "cannot start with ANY"),
    ("(A ANY B)+", "WITHIN INTERVAL '1' MINUTE", "AFTER MATCH NO SKIP", "ANY may stand only"),
    ("A ANY B+", "WITHIN INTERVAL '1' MINUTE", "AFTER MATCH NO SKIP", "ANY takes no quantifier"),
])
def test_misused_any_is_a_clear_error(pattern, tail, skip, message):
    sql = (f"SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS a {skip} "
           f"PATTERN ({pattern}) {tail} DEFINE A AS v = 0, B AS v = 1)")
    with pytest.raises(Exception) as e:
        parse_rule_text(sql)
    assert message in str(e.value)


def test_no_skip_without_any_reports_every_path():
    sql = ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(B.*) AS nb "
           "AFTER MATCH NO SKIP PATTERN (A B+) DEFINE A AS v = 0, B AS v = 1)")
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    ev = [{"k": 1, "ts": i, "v": v} for i, v in enumerate([0, 1, 1, 1])]
    got = op.process(ev).matches + op.finish().matches
    assert sorted(r["nb"] for r in got) == [1, 2, 3]  # Flink's NO_SKIP: a b1, a b1 b2, a b1 b2 b3


def test_unmatched_rows_refuse_no_skip():
    sql = ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS a ALL ROWS PER MATCH "
           "WITH UNMATCHED ROWS AFTER MATCH NO SKIP PATTERN (A B) DEFINE A AS v = 0, B AS v = 1)")
    with pytest.raises(RuleError, match="NO SKIP cannot be combined"):
        parse_rule_text(sql)
