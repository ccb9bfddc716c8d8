"""FIRST_SEEN(col) in DEFINE: a row whose value its partition key never brought before.

The reference is exact: the same rule with the condition replaced by a precomputed column that a
Python set fills in event-time order, run through the same engine (whose matching is pinned
elsewhere against the brute-force matcher). The Bloom filter may only err by taking a new value
for a seen one; with these few hundred pairs and a 0.1% rate, the seeded runs agree exactly.
"""

from __future__ import annotations

import random

import pytest

from cep.engine import Engine
from cep.seen import SeenFilter, key_hashes
from patterns.errors import RuleErrors
from patterns.rules import parse_rules

RULE = """
rules:
  - name: new_values
    lateness: {lateness}
    sql: |
      SELECT * FROM logins MATCH_RECOGNIZE (
        PARTITION BY user ORDER BY ts
        MEASURES FIRST(N.ts) AS first_new, LAST(N.ts) AS last_new, COUNT(N.*) AS new_ips
        AFTER MATCH SKIP {skip}
        PATTERN (S? N{{2,}} X)
        WITHIN INTERVAL '{within}' SECOND
        DEFINE S AS amount > 90, N AS {cond}, X AS amount < 50)
"""


def stream(seed: int, n: int = 400, users: int = 4, ips: int = 12) -> list[dict]:
    rnd = random.Random(seed)
    out = []
    t = 0
    for _ in range(n):
        t += rnd.randint(1, 3) * 1000
        ip = rnd.choice([f"10.0.0.{i}" for i in range(ips)] + [None])
        out.append({"user": f"u{rnd.randrange(users)}", "ts": t, "ip": ip, "amount": rnd.randrange(100)})
    return out


def with_exact_flags(events: list[dict]) -> list[dict]:
    """Each event plus ``fs``: 1 when its user never brought its ip before (in time order)."""
    seen: set[tuple] = set()
    out = []
    for e in sorted(events, key=lambda e: e["ts"]):
        pair = (e["user"], e["ip"])
        fs = None if e["ip"] is None else int(pair not in seen)
        if e["ip"] is not None:
            seen.add(pair)
        out.append({**e, "fs": fs})
    return out


def run(events, cond: str, chunks: int = 1, lateness: int = 0, skip: str = "PAST LAST ROW", within: int = 60):
    eng = Engine(parse_rules(RULE.format(cond=cond, lateness=lateness, skip=skip, within=within)))
    rows = []
    size = max(1, len(events) // chunks)
    for i in range(0, len(events), size):
        rows += eng.process(events[i : i + size]).matches
    rows += eng.finish().matches
    return rows, eng


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("skip", ["PAST LAST ROW", "TO NEXT ROW"])
def test_first_seen_equals_an_exact_set_in_event_time_order(seed, skip):
    events = stream(seed)
    got, eng = run(events, "FIRST_SEEN(N.ip) AND N.amount >= 10", skip=skip)
    want, _ = run(with_exact_flags(events), "N.fs = 1 AND N.amount >= 10", skip=skip)
    assert got == want
    assert got, "the workload should produce matches"
    assert eng.counts()["new_values"].errors == 0


def ordered(rows: list[dict]) -> list[dict]:
    """Rows per key in emission order (the order across keys follows the batches)."""
    return sorted(rows, key=lambda r: (r["user"], r["first_new"]))


def test_batching_out_of_order_and_snapshot_change_nothing():
    events = stream(11, n=600)
    base, _ = run(events, "FIRST_SEEN(ip)")
    assert base
    base = ordered(base)
    assert ordered(run(events, "FIRST_SEEN(ip)", chunks=37)[0]) == base
    # shuffled within the allowed lateness: released in event-time order, so the same flags
    rnd = random.Random(3)
    shuffled = list(events)
    for i in range(0, len(shuffled) - 4, 4):
        block = shuffled[i : i + 4]
        rnd.shuffle(block)
        shuffled[i : i + 4] = block
    assert ordered(run(shuffled, "FIRST_SEEN(ip)", chunks=25, lateness=20_000)[0]) == base
    # snapshot in the middle, restore into a fresh engine: the seen values come along
    rules = parse_rules(RULE.format(cond="FIRST_SEEN(ip)", lateness=0, skip="PAST LAST ROW", within=60))
    first = Engine(rules)
    rows = first.process(events[:300]).matches
    second = Engine(rules)
    second.restore(first.snapshot())
    rows += second.process(events[300:]).matches + second.finish().matches
    assert ordered(rows) == base


def test_null_values_are_neither_new_nor_remembered():
    rules = parse_rules(RULE.format(cond="FIRST_SEEN(N.ip)", lateness=0, skip="PAST LAST ROW", within=60))
    eng = Engine(rules)
    ev = [
        {"user": "a", "ts": 1000, "ip": "x", "amount": 60},
        {"user": "a", "ts": 2000, "ip": None, "amount": 60},  # NULL: N fails here
        {"user": "a", "ts": 3000, "ip": "y", "amount": 60},
        {"user": "a", "ts": 4000, "ip": "z", "amount": 60},
        {"user": "a", "ts": 5000, "ip": "x", "amount": 10},  # seen before: X, ends the match
    ]
    rows = eng.process(ev).matches + eng.finish().matches
    assert [(r["first_new"], r["new_ips"]) for r in rows] == [(3000, 2)]


def test_keys_are_separate_and_values_by_column_value():
    f = SeenFilter()
    keys = key_hashes(["a", "b", ("a", 1), ("a", 1), "a"])
    first, null = f.first_seen(keys, __import__("numpy").array([1.0, 1.0, 1.0, 1.0, float("nan")]))
    assert first.tolist() == [True, True, True, False, False]
    assert null.tolist() == [False, False, False, False, True]
    g = SeenFilter.from_bytes(f.to_bytes())
    again, _ = g.first_seen(key_hashes(["a", "c"]), __import__("numpy").array([1.0, 1.0]))
    assert again.tolist() == [False, True]


@pytest.mark.parametrize(
    "define, message",
    [
        ("N AS FIRST_SEEN(N.ip) OR N.amount > LAST(S.amount)", "must be part of a condition on the current row only"),
        ("N AS PREV(FIRST_SEEN(N.ip))", "FIRST_SEEN(...) inside PREV(...) is not supported"),
        ("N AS FIRST_SEEN(N.ip || 'x')", "FIRST_SEEN takes one column of the current row"),
        ("N AS FIRST_SEEN(S.ip)", "must be part of a condition on the current row only"),
    ],
)
def test_misplaced_first_seen_is_a_positioned_error(define, message):
    sql = f"""
rules:
  - name: r
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (
        PARTITION BY user ORDER BY ts
        PATTERN (S N)
        DEFINE S AS amount > 0, {define})
"""
    with pytest.raises(RuleErrors) as e:
        parse_rules(sql)
    text = str(e.value)
    assert message in text
    assert "^" in text


def test_first_seen_in_measures_is_an_error():
    sql = """
rules:
  - name: r
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (
        PARTITION BY user ORDER BY ts
        MEASURES FIRST_SEEN(N.ip) AS fresh
        PATTERN (N)
        DEFINE N AS amount > 0)
"""
    with pytest.raises(RuleErrors, match="FIRST_SEEN\\(...\\) is a DEFINE condition"):
        parse_rules(sql)
