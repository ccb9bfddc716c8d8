"""Analytics rules joined with a table (``FROM s [LEFT] JOIN t FOR SYSTEM_TIME AS OF s.ts``): the same
rows as the rule without a join over events joined beforehand (a pandas merge_asof), final window
values as a pandas groupby, whatever the batching and interleaving; and real data."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cep import Engine
from cep.explain.model import ExplainError
from patterns.errors import RuleErrors
from patterns.rules import load_rules, parse_rules
from tests.cep.test_tables import _late_in_arrival_order, asof_reference, change_st

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "tables"

TUMBLE = "TUMBLE(ts, INTERVAL '10' MILLISECOND)"

JOINED = """
tables:
  - {{name: accounts, from: account_changes, primary_key: id, columns: [tier], time_field: ts,
     lateness: {table_lateness}}}
rules:
  - name: per_tier
    kind: analytics
    lateness: {rule_lateness}
    sql: |
      SELECT a.tier, COUNT(*) AS n, SUM(p.n) AS total, window_start
      FROM payments AS p JOIN accounts FOR SYSTEM_TIME AS OF p.ts AS a ON p.account = a.id
      WHERE a.tier <> 't3'
      GROUP BY a.tier, {window}
  - name: per_account
    kind: analytics
    lateness: {rule_lateness}
    sql: |
      SELECT account, COUNT(*) AS n, COUNT(tier) AS tiered, MAX(tier) AS top, window_end
      FROM payments LEFT JOIN accounts FOR SYSTEM_TIME AS OF payments.ts ON payments.account = accounts.id
      GROUP BY account, {window}
      HAVING COUNT(*) >= 1
"""

# the same rules without a join, over events whose tier was looked up beforehand; an event the inner
# join drops carries the tier '~', filtered by WHERE (it still moves the rule's clock, as in the join)
REFERENCE = """
rules:
  - name: per_tier
    kind: analytics
    lateness: {rule_lateness}
    sql: |
      SELECT tier, COUNT(*) AS n, SUM(n) AS total, window_start
      FROM payments WHERE tier <> 't3' AND tier <> '~'
      GROUP BY tier, {window}
  - name: per_account
    kind: analytics
    lateness: {rule_lateness}
    sql: |
      SELECT account, COUNT(*) AS n, COUNT(tier) AS tiered, MAX(tier) AS top, window_end
      FROM payments GROUP BY account, {window}
      HAVING COUNT(*) >= 1
"""


def _arrival(changes, events, order):
    """A random interleaving of the two streams, each in its own order, cut into batches."""
    tags = ["c"] * len(changes) + ["e"] * len(events)
    order.shuffle(tags)
    it = {"c": iter(changes), "e": iter(events)}
    seq = [(tag, next(it[tag])) for tag in tags]
    batches, i = [], 0
    while i < len(seq):
        j = i + 1
        while j < len(seq) and seq[j][0] == seq[i][0] and order.random() < 0.7:
            j += 1
        batches.append((seq[i][0], [x for _, x in seq[i:j]]))
        i = j
    return batches


@settings(max_examples=60, deadline=None, derandomize=True)
@given(changes=st.lists(change_st, max_size=40),
       events=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 45)), max_size=30),
       order=st.randoms(use_true_random=False),
       table_lateness=st.sampled_from([0, 5, 100]), rule_lateness=st.sampled_from([0, 5, 100]),
       restore_at=st.integers(0, 12))
def test_joined_analytics_matches_reference(changes, events, order, table_lateness, rule_lateness, restore_at):
    """Changes and events interleaved in any order and cut anywhere, with a snapshot and a restore into a
    new engine between two batches: the rows (on-time windows and corrections, in order) are those of
    the rules without a join over the events joined beforehand (pandas merge_asof on the on-time
    changes), and each window's last row holds the pandas groupby of its on-time events."""
    check_joined_analytics(changes, events, order, table_lateness, rule_lateness, restore_at)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_joined_analytics_with_compaction(seed):
    """Long changelogs (many versions per key, so the table forgets old versions as the rules move on)
    interleaved with events: still the reference's rows."""
    import random

    rng = random.Random(seed)
    changes, events, t = [], [], 0
    for _ in range(3000):
        t += rng.choice((0, 1, 2))
        changes.append((rng.randrange(4), max(0, t - rng.choice((0, 0, 3, 30))), rng.random() < 0.05, rng.randrange(99)))
        if rng.random() < 0.3:
            events.append((rng.randrange(5), max(0, t - rng.choice((0, 0, 5, 40)))))
    engine = check_joined_analytics(changes, events, rng, rng.choice((0, 5, 50)), rng.choice((0, 5, 50)),
                                    rng.randrange(40))
    assert engine.table_stats()["accounts"]["compacted"] > 500  # the table forgot old versions meanwhile


@pytest.mark.parametrize("window", ["HOP(ts, INTERVAL '5' MILLISECOND, INTERVAL '15' MILLISECOND)",
                                    "SESSION(ts, INTERVAL '4' MILLISECOND)", "SLIDE(ts, INTERVAL '8' MILLISECOND)"])
@pytest.mark.parametrize("seed", [1, 2])
def test_joined_analytics_other_windows(window, seed):
    """HOP, SESSION and SLIDE windows: the rows of the unjoined rule over events joined beforehand."""
    import random

    rng = random.Random(seed)
    changes = [(rng.randrange(6), rng.randrange(60), rng.random() < 0.1, rng.randrange(99)) for _ in range(40)]
    events = [(rng.randrange(7), rng.randrange(60)) for _ in range(40)]
    check_joined_analytics(changes, events, rng, rng.choice((0, 5, 100)), rng.choice((0, 5, 100)), rng.randrange(15),
                           window)


def check_joined_analytics(changes, events, order, table_lateness, rule_lateness, restore_at, window=TUMBLE):
    """Run the joined rules over the arrival order ``order`` makes, check them against the reference;
    the engine at the end."""
    opts = {"table_lateness": table_lateness, "rule_lateness": rule_lateness, "window": window}
    rules = parse_rules(JOINED.format(**opts))
    events = [(k, t, i) for i, (k, t) in enumerate(events)]
    engine = Engine(rules)
    rows, late = [], []
    for b, (tag, part) in enumerate(_arrival(changes, events, order)):
        if tag == "c":
            recs = [{"id": k, "ts": t, "tier": f"t{v % 5}", **({"__deleted": "true"} if d else {})}
                    for k, t, d, v in part]
            out = engine.process(recs, stream="account_changes")
        else:
            out = engine.process([{"account": k, "ts": t, "n": n} for k, t, n in part], stream="payments")
        rows += out.matches
        late += out.late
        if b + 1 == restore_at:
            fresh = Engine(rules)
            fresh.restore(engine.snapshot())
            engine = fresh
    out = engine.finish()
    rows += out.matches
    assert not out.errors

    # the reference: on-time changes, the as-of tier of every event, the rules without a join
    late_c = _late_in_arrival_order([c[1] for c in changes], table_lateness)
    on_time = [c for c, is_late in zip(changes, late_c) if not is_late]
    tiers = asof_reference(
        pd.DataFrame({"key": [c[0] for c in on_time], "time": [c[1] for c in on_time], "seq": range(len(on_time)),
                      "deleted": [c[2] for c in on_time], "value": [f"t{c[3] % 5}" for c in on_time]}),
        pd.DataFrame({"key": [e[0] for e in events], "t": [e[1] for e in events]}))
    ref_engine = Engine(parse_rules(REFERENCE.format(**opts)))
    ref_in = [{"account": k, "ts": t, "n": n, "tier": tier} for (k, t, n), tier in zip(events, tiers)]
    ref_out = ref_engine.run([ref_in] if ref_in else [])
    for name in ("per_tier", "per_account"):
        got = [r for r in rows if r["rule"] == name]
        want = [r for r in ref_out.matches if r["rule"] == name]
        if name == "per_tier":
            ref_in_tier = [dict(e, tier=e["tier"] or "~") for e in ref_in]
            want = [r for r in Engine(parse_rules(REFERENCE.format(**opts))).run([ref_in_tier] if ref_in else []).matches
                    if r["rule"] == name]
        assert got == want
    assert sum(1 for x in late if x.get("table") == "accounts") == sum(late_c)
    late_e = _late_in_arrival_order([e[1] for e in events], rule_lateness)
    assert sum(1 for x in late if x.get("rule") == "per_tier") == sum(late_e)

    if window != TUMBLE:
        return engine
    # the final value of each window: a pandas groupby of its on-time events
    df = pd.DataFrame([dict(e, late=is_late) for e, is_late in zip(ref_in, late_e)],
                      columns=["account", "ts", "n", "tier", "late"])
    df = df[~df["late"].astype(bool) & df["tier"].notna() & (df["tier"] != "t3")]
    df["window_start"] = df["ts"] // 10 * 10
    want_final = {(k[0], k[1]): (int(g["n"].size), int(g["n"].sum())) for k, g in df.groupby(["tier", "window_start"])}
    last: dict = {}
    for r in rows:
        if r["rule"] == "per_tier":
            last[(r["tier"], r["window_start"])] = (r["n"], r["total"])
    assert last == want_final
    for name in ("per_tier", "per_account"):
        c = engine.counts()[name]
        assert c.read == c.processed + c.late + c.errors + c.buffered
    return engine


def test_events_wait_for_the_table_in_arrival_order():
    """An event the table cannot answer for yet holds back the events that came after it and the
    windows their clock closes; the change that arrives later is seen."""
    rules = parse_rules(JOINED.format(table_lateness=0, rule_lateness=0, window=TUMBLE))
    engine = Engine(rules)
    out = engine.process([{"account": 1, "ts": 12, "n": 5}, {"account": 1, "ts": 25, "n": 1}], stream="payments")
    assert out.matches == [] and engine.counts()["per_tier"].buffered == 2
    engine.process([{"id": 1, "ts": 0, "tier": "gold"}], stream="account_changes")
    out = engine.process([{"id": 1, "ts": 20, "tier": "silver"}], stream="account_changes")
    # the event at 12 is released (gold); the one at 25 waits, and so does the clock it brought
    assert [r for r in out.matches if r["rule"] == "per_tier"] == []
    out = engine.process([{"id": 1, "ts": 30, "tier": "x"}], stream="account_changes")
    assert [(r["tier"], r["n"], r["window_start"]) for r in out.matches if r["rule"] == "per_tier"] == [("gold", 1, 10)]
    out = engine.finish()
    assert [(r["tier"], r["n"], r["window_start"]) for r in out.matches if r["rule"] == "per_tier"] == [("silver", 1, 20)]
    assert engine.operators["per_tier"].join.counts == {"joined": 2, "unmatched": 0, "dropped": 0}


def test_left_join_group_by_joined_column_null_is_an_error():
    rules = parse_rules("""
tables:
  - {name: accounts, from: account_changes, primary_key: id, columns: [tier], time_field: ts}
rules:
  - name: per_tier
    kind: analytics
    sql: |
      SELECT tier, COUNT(*) AS n FROM payments LEFT JOIN accounts FOR SYSTEM_TIME AS OF payments.ts
        ON payments.account = accounts.id
      GROUP BY tier, TUMBLE(ts, INTERVAL '10' MILLISECOND)
""")
    engine = Engine(rules)
    engine.process([{"id": 1, "ts": 0, "tier": "gold"}], stream="account_changes")
    engine.process([{"account": a, "ts": t} for a, t in [(1, 1), (3, 2), (1, 3)]], stream="payments")
    out = engine.finish()
    assert [(r["tier"], r["n"]) for r in out.matches] == [("gold", 2)]
    assert [e["reason"] for e in out.errors] == [
        "group key field 'tier' is missing (null): table 'accounts' has no row for the event's key at its time "
        "(LEFT JOIN)"]
    assert out.errors[0]["event"]["account"] == 3
    c = engine.counts()["per_tier"]
    assert (c.read, c.processed, c.errors) == (3, 2, 1)


def test_idle_progress_waits_for_the_table():
    """advance_watermarks moves the rule's clock (later events behind it are late) but windows close
    only as far as the table lets their events through."""
    engine = Engine(parse_rules(JOINED.format(table_lateness=0, rule_lateness=0, window=TUMBLE)))
    engine.process([{"account": 1, "ts": 3, "n": 1}], stream="payments")
    assert engine.advance_watermarks({"per_tier": 50}).matches == []  # the event at 3 waits for the table
    late = engine.process([{"account": 1, "ts": 20, "n": 1}], stream="payments").late
    assert [x["rule"] for x in late] == ["per_tier"]  # behind its new watermark; per_account did not move
    out = engine.process([{"id": 1, "ts": 0, "tier": "gold"}, {"id": 2, "ts": 60, "tier": "x"}], stream="account_changes")
    assert [(r["tier"], r["n"]) for r in out.matches if r["rule"] == "per_tier"] == [("gold", 1)]


def test_sp500_weekly_volume_per_sector():
    """The bundled 2017 daily bars of five stocks joined with their GICS sector (a snapshot table),
    grouped by the joined column per week: the rows are pandas' groupby of the same join."""
    bars = [json.loads(line) for line in open(REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl")]
    engine = Engine(load_rules(FIXTURES / "sector_volume.yaml"), streams=["bars"])
    out = engine.process(bars, stream="bars")
    out.extend(engine.finish())
    assert not out.errors and not out.late
    companies = pd.read_csv(FIXTURES / "sp500_sectors_sample.csv")
    df = pd.merge(pd.DataFrame(bars), companies, left_on="symbol", right_on="Symbol")
    week = 7 * 86_400_000
    ms = (pd.to_datetime(df["date"]) - pd.Timestamp(0)) // pd.Timedelta(milliseconds=1)
    df["window_start"] = ms // week * week
    want = {(s, w): (int(g["volume"].sum()), len(g), g["symbol"].nunique())
            for (s, w), g in df.groupby(["GICS Sector", "window_start"])}
    got = {(r["sector"], r["window_start"]): (r["volume"], r["bars"], r["stocks"]) for r in out.matches}
    assert got == want
    assert len(out.matches) == len(want) == 212
    assert engine.table_stats()["companies"]["snapshot_rows"] == 5


@pytest.mark.parametrize("sql,message", [
    ("SELECT tier, COUNT(*) AS n FROM p JOIN accounts FOR SYSTEM_TIME AS OF p.other ON p.a = accounts.id "
     "GROUP BY tier, TUMBLE(ts, INTERVAL '1' SECOND)",
     "AS OF other: a temporal join reads the table as of the rule's event time, so AS OF must name the window's "
     "time column (ts)"),
    ("SELECT x.tier, COUNT(*) AS n FROM p JOIN accounts FOR SYSTEM_TIME AS OF p.ts ON p.a = accounts.id "
     "GROUP BY tier, TUMBLE(ts, INTERVAL '1' SECOND)",
     "x.tier: 'x' is neither the stream (p) nor the table (accounts)"),
    ("SELECT tier, COUNT(*) AS n FROM p JOIN accounts FOR SYSTEM_TIME AS OF p.ts ON p.a = accounts.id "
     "GROUP BY accounts.nope, TUMBLE(ts, INTERVAL '1' SECOND)",
     "accounts.nope: table 'accounts' has no column 'nope'; its columns: tier"),
    ("SELECT p.tier AS t, COUNT(*) AS n FROM p JOIN accounts FOR SYSTEM_TIME AS OF p.ts ON p.a = accounts.id "
     "GROUP BY p.tier, TUMBLE(ts, INTERVAL '1' SECOND)",
     "p.tier: the join replaces the event's 'tier' with table 'accounts''s column of that name"),
    ("SELECT COUNT(*) AS n FROM p JOIN nope FOR SYSTEM_TIME AS OF p.ts ON p.a = nope.id "
     "GROUP BY TUMBLE(ts, INTERVAL '1' SECOND)",
     "unknown table 'nope' (declared tables: accounts)"),
    ("SELECT a.x AS y, COUNT(*) AS n FROM p GROUP BY TUMBLE(ts, INTERVAL '1' SECOND)",
     "qualified column a.x: an analytics rule reads one stream; write x (or join a table"),
])
def test_joined_analytics_errors(sql, message):
    text = ("tables:\n  - {name: accounts, from: changes, primary_key: id, columns: [tier], time_field: ts}\n"
            "rules:\n  - name: r\n    kind: analytics\n    sql: " + json.dumps(sql) + "\n")
    with pytest.raises(RuleErrors) as e:
        parse_rules(text)
    assert any(message in x.message for x in e.value.errors), [x.message for x in e.value.errors]


def test_explain_refuses_joined_rules():
    from cep.explain.analytics import explain_analytics

    rules = parse_rules(JOINED.format(table_lateness=0, rule_lateness=0, window=TUMBLE))
    with pytest.raises(ExplainError, match="rule 'per_tier' joins table 'accounts': explaining rules with a temporal join is not"):
        explain_analytics(rules.rules[0], [], {"tier": "t1"}, None, None)
