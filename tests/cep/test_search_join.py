"""Search rules joined with a table (``join: {table, on, kind}``): joined columns are searched and
copied into rows; the rows are those of the rule without a join over documents joined beforehand
(pandas merge_asof), in arrival order, whatever the batching and interleaving."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cep import Engine
from patterns.errors import RuleErrors
from patterns.rules import parse_rules
from tests.cep.test_tables import _late_in_arrival_order, asof_reference, change_st
from tests.cep.test_window_join import _arrival as arrival

TABLE = """
tables:
  - {{name: accounts, from: account_changes, primary_key: id, columns: [tier], time_field: ts,
     lateness: {table_lateness}}}
"""

RULES = """
rules:
  - name: tickets
    kind: search
    from: tickets
    time_field: ts
    lateness: {rule_lateness}
    {join}
    fields: [id, ts, tier]
    default_fields: [tier, body]
    queries:
      - {{id: gold, query: 'tier:t1'}}
      - {{id: refund, query: 'tier:t2 AND body:refund'}}
      - {{id: bare, query: 't3 OR urgent'}}
"""


@settings(max_examples=50, deadline=None, derandomize=True)
@given(changes=st.lists(change_st, max_size=30),
       events=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 45), st.sampled_from(["refund", "urgent", "x"])),
                       max_size=25),
       order=st.randoms(use_true_random=False), kind=st.sampled_from(["inner", "left"]),
       table_lateness=st.sampled_from([0, 5, 100]), rule_lateness=st.sampled_from([0, 100]),
       restore_at=st.integers(0, 10))
def test_joined_search_matches_reference(changes, events, order, kind, table_lateness, rule_lateness, restore_at):
    check_joined_search(changes, events, order, kind, table_lateness, rule_lateness, restore_at)


@pytest.mark.parametrize("seed", [1, 2])
def test_joined_search_with_compaction(seed):
    """A long changelog (the table forgets old versions as the rule moves on): still the reference's rows."""
    import random

    rng = random.Random(seed)
    changes, events, t = [], [], 0
    for _ in range(3000):
        t += rng.choice((0, 1, 2))
        changes.append((rng.randrange(4), max(0, t - rng.choice((0, 0, 3, 30))), rng.random() < 0.05, rng.randrange(99)))
        if rng.random() < 0.2:
            events.append((rng.randrange(5), max(0, t - rng.choice((0, 0, 5, 40))), rng.choice(["refund", "urgent"])))
    engine = check_joined_search(changes, events, rng, "left", 5, 50, rng.randrange(40))
    assert engine.table_stats()["accounts"]["compacted"] > 500


def check_joined_search(changes, events, order, kind, table_lateness, rule_lateness, restore_at):
    """Run the joined rule over the arrival order ``order`` makes, check it against the reference; the engine."""
    opts = {"table_lateness": table_lateness, "rule_lateness": rule_lateness}
    joined = parse_rules(TABLE.format(**opts) + RULES.format(
        **opts, join=f"join: {{table: accounts, on: {{account: id}}, kind: {kind}}}"))
    engine = Engine(joined)
    engine.set_row_ids()
    docs = [{"id": i, "account": k, "ts": t, "body": b} for i, (k, t, b) in enumerate(events)]
    rows, late = [], []
    for b, (tag, part) in enumerate(arrival(changes, docs, order)):
        if tag == "c":
            recs = [{"id": k, "ts": t, "tier": f"t{v % 4}", **({"__deleted": "true"} if d else {})}
                    for k, t, d, v in part]
            out = engine.process(recs, stream="account_changes")
        else:
            out = engine.process(part, stream="tickets")
        rows += out.matches
        late += out.late
        if b + 1 == restore_at:
            fresh = Engine(joined)
            fresh.set_row_ids()
            fresh.restore(engine.snapshot())
            engine = fresh
    rows += engine.finish().matches

    late_c = _late_in_arrival_order([c[1] for c in changes], table_lateness)
    on_time = [c for c, is_late in zip(changes, late_c) if not is_late]
    tiers = asof_reference(
        pd.DataFrame({"key": [c[0] for c in on_time], "time": [c[1] for c in on_time], "seq": range(len(on_time)),
                      "deleted": [c[2] for c in on_time], "value": [f"t{c[3] % 4}" for c in on_time]}),
        pd.DataFrame({"key": [d["account"] for d in docs], "t": [d["ts"] for d in docs]}))
    ref_docs = [dict(d, stream="tickets", **({"tier": t} if t is not None else {})) for d, t in zip(docs, tiers)
                if t is not None or kind == "left"]
    ref = Engine(parse_rules(RULES.format(**opts, join="")))
    ref.set_row_ids()
    ref_late = _late_in_arrival_order([d["ts"] for d in docs], rule_lateness)
    late_ids = {d["id"] for d, is_late in zip(docs, ref_late) if is_late}
    ref_rows = ref.run([[d for d in ref_docs if d["id"] not in late_ids]] if ref_docs else []).matches
    strip = [{k: v for k, v in r.items() if k != "_id"} for r in rows]
    assert strip == [{k: v for k, v in r.items() if k != "_id"} for r in ref_rows]
    assert len({r["_id"] for r in rows}) == len(rows)
    assert sum(1 for x in late if x.get("rule") == "tickets") == len(late_ids)
    c = engine.counts()["tickets"]
    assert c.read == c.processed + c.late + c.errors + c.buffered
    return engine


def test_joined_columns_are_searched_and_copied():
    rules = parse_rules(TABLE.format(table_lateness=0) + RULES.format(
        rule_lateness=0, join="join: {table: accounts, on: account, kind: left}"))
    engine = Engine(rules)
    out = engine.process([{"id": 1, "account": 7, "ts": 10, "body": "refund please"},
                          {"id": 2, "account": 8, "ts": 11, "body": "urgent"}], stream="tickets")
    assert out.matches == []  # waiting for the table
    engine.process([{"id": 7, "ts": 0, "tier": "t2"}], stream="account_changes")
    out = engine.process([{"id": 7, "ts": 20, "tier": "t1"}], stream="account_changes")
    assert [(r["id"], r["query_id"], r["tier"]) for r in out.matches] == [(1, "refund", "t2"), (2, "bare", None)]
    assert engine.operators["tickets"].join.counts == {"joined": 1, "unmatched": 1, "dropped": 0}


@pytest.mark.parametrize("join,message", [
    ("join: {table: nope, on: account}", "join: unknown table 'nope' (declared tables: accounts)"),
    ("join: {table: accounts, on: {account: tier}}", "join: 'on' must map one document field to each primary-key"),
    ("join: {table: accounts, on: account, kind: right}", "join: kind must be inner or left, found 'right'"),
    ("join: {table: accounts, on: account, as_of: ts}", "unknown key 'as_of' in 'join'; known keys: table, on, kind"),
    ("join: accounts", "'join' must be a mapping {table: ..., on: ..., kind: inner|left}"),
])
def test_search_join_errors(join, message):
    text = TABLE.format(table_lateness=0) + RULES.format(rule_lateness=0, join=join)
    with pytest.raises(RuleErrors) as e:
        parse_rules(text)
    assert any(message in x.message for x in e.value.errors), [x.message for x in e.value.errors]


def test_search_join_needs_a_time_field():
    text = TABLE.format(table_lateness=0) + """
rules:
  - {name: r, kind: search, from: tickets, query: x, join: {table: accounts, on: account}}
"""
    with pytest.raises(RuleErrors) as e:
        parse_rules(text)
    assert "a join needs 'time_field': each document reads the table as of its event time" in str(e.value)
