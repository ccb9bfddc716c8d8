"""Tables and temporal joins: the versioned store against a pandas merge_asof reference, changelog
formats, rule-file errors, and pattern rules joined to a table."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cep.events import batch_from_records
from cep.safe_pickle import loads as safe_loads
from cep.tables import MIN_TIME, Table, VersionedTable
from cep.tables.changelog import decode
from patterns.errors import RuleErrors
from patterns.rules import parse_rules
from patterns.tables import TableSpec

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"


# ---------------------------------------------------------------- the reference


def asof_reference(changes: pd.DataFrame, events: pd.DataFrame) -> list:
    """The value each event sees: the last change of its key at or before its time (ties: the later
    change), None when there is none or it is a delete. pandas merge_asof per key, backward.

    ``changes``: key, time, seq (arrival order), deleted, value. ``events``: key, t.
    """
    ev = events.reset_index(drop=True).assign(_i=lambda d: np.arange(len(d)))
    if changes.empty or ev.empty:
        return [None] * len(ev)
    ev = ev.astype({"key": np.int64, "t": np.int64})
    changes = changes.astype({"key": np.int64, "time": np.int64})
    ch = changes.sort_values(["time", "seq"], kind="stable").rename(columns={"time": "t"})
    ch = ch[["key", "t", "deleted", "value"]]
    left = ev.sort_values("t", kind="stable")
    merged = pd.merge_asof(left, ch, on="t", by="key", direction="backward", allow_exact_matches=True)
    merged = merged.sort_values("_i")
    out = []
    for deleted, value in zip(merged["deleted"].tolist(), merged["value"].tolist()):
        missing = deleted is None or (isinstance(deleted, float) and np.isnan(deleted)) or bool(deleted)
        out.append(None if missing else value)
    return out


def test_reference_by_hand():
    changes = pd.DataFrame({"key": [1, 1, 1, 2], "time": [10, 20, 20, 10], "seq": [0, 1, 2, 3],
                            "deleted": [False, False, True, False], "value": ["a", "b", None, "c"]})
    events = pd.DataFrame({"key": [1, 1, 1, 2, 3], "t": [9, 10, 20, 5, 50]})
    assert asof_reference(changes, events) == [None, "a", None, None, None]


# ---------------------------------------------------------------- the store


def _store_values(table: VersionedTable, keys, times) -> list:
    rows = table.lookup(np.asarray(keys), np.asarray(times, dtype=np.int64))
    return table.gather(rows)["value"].tolist()


def _norm(vals: list) -> list:
    return [None if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in vals]


change_st = st.tuples(st.integers(0, 5), st.integers(0, 40), st.booleans(), st.integers(0, 99))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(changes=st.lists(change_st, max_size=60), events=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 45)),
                                                                  min_size=1, max_size=40),
       cuts=st.lists(st.integers(0, 60), max_size=5), restore_at=st.integers(0, 6), horizon=st.integers(0, 45))
def test_store_matches_merge_asof(changes, events, cuts, restore_at, horizon):
    """Any batching of the changes, a snapshot/restore between batches, and compaction at a horizon
    below every lookup give the reference's values."""
    ref = asof_reference(
        pd.DataFrame({"key": [c[0] for c in changes], "time": [c[1] for c in changes],
                      "seq": range(len(changes)), "deleted": [c[2] for c in changes],
                      "value": [c[3] for c in changes]}),
        pd.DataFrame({"key": [e[0] for e in events], "t": [e[1] for e in events]}))
    table = VersionedTable(("key",), ("value",))
    bounds = sorted({0, len(changes), *[min(c, len(changes)) for c in cuts]})
    for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        part = changes[lo:hi]
        table.apply(np.array([c[0] for c in part]), np.array([c[1] for c in part]), np.array([c[2] for c in part]),
                    {"value": np.array([c[3] for c in part])})
        if b == restore_at:
            table = VersionedTable.from_state(safe_loads(pickle.dumps(table.state())))
        if b % 2:  # lookups between batches (the merge of a delta into sorted versions)
            table.lookup(np.array([0]), np.array([0]))
    assert _norm(_store_values(table, [e[0] for e in events], [e[1] for e in events])) == ref
    lo_t = min(e[1] for e in events)
    table.compact(min(horizon, lo_t))
    assert _norm(_store_values(table, [e[0] for e in events], [e[1] for e in events])) == ref


def test_store_string_and_composite_keys():
    t = VersionedTable(("a", "b"), ("v",))
    keys = np.empty(3, dtype=object)
    keys[:] = [("x", 1), ("x", 2), ("x", 1)]
    t.apply(keys, np.array([1, 1, 5]), np.array([False, False, False]), {"v": np.array([10, 20, 30])})
    q = np.empty(4, dtype=object)
    q[:] = [("x", 1), ("x", 1), ("x", 2), ("y", 1)]
    rows = t.lookup(q, np.array([1, 5, 9, 9]))
    assert _norm(t.gather(rows)["v"].tolist()) == [10, 30, 20, None]


def test_store_snapshot_rows_valid_from_the_beginning():
    t = VersionedTable(("k",), ("v",))
    t.apply(np.array(["a"], dtype=object), np.array([MIN_TIME]), np.array([False]), {"v": np.array(["s"], dtype=object)})
    t.apply(np.array(["a"], dtype=object), np.array([100]), np.array([False]), {"v": np.array(["n"], dtype=object)})
    assert t.gather(t.lookup(np.array(["a", "a"], dtype=object), np.array([-10**12, 100])))["v"].tolist() == ["s", "n"]


def test_store_stats_and_compaction():
    t = VersionedTable(("k",), ("v",))
    n = 5000
    for step in range(3):
        t.apply(np.arange(n), np.full(n, step * 10), np.zeros(n, dtype=bool), {"v": np.arange(n) + step})
    s = t.stats()
    assert (s.keys, s.live_keys, s.versions, s.rows) == (n, n, 3 * n, 3 * n)
    assert s.bytes_per_row > 0
    assert t.compact(25) == 2 * n
    assert t.stats().versions == n
    assert t.gather(t.lookup(np.array([7]), np.array([30])))["v"].tolist() == [9]


# ---------------------------------------------------------------- the engine: joins in pattern rules

JOIN_RULES = """
tables:
  - name: accounts
    from: account_changes
    primary_key: id
    columns: [tier]
    time_field: ts
    lateness: {table_lateness}
rules:
  - name: seen
    lateness: {rule_lateness}
    sql: |
      SELECT * FROM payments AS p {kind} JOIN accounts FOR SYSTEM_TIME AS OF p.ts AS a ON p.account = a.id
      MATCH_RECOGNIZE (PARTITION BY account ORDER BY ts
        MEASURES A.ts AS ts, A.n AS n, a.tier AS tier
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A) DEFINE A AS A.n >= 0)
"""


def _late_in_arrival_order(times: list[int], lateness: int) -> list[bool]:
    """Late as the engine judges it: behind the running maximum of the earlier ones minus the lateness."""
    out, top = [], None
    for t in times:
        out.append(top is not None and t < top - lateness)
        top = t if top is None else max(top, t)
    return out


def _join_reference(changes, events, kind, table_lateness, rule_lateness):
    late_c = _late_in_arrival_order([c[1] for c in changes], table_lateness)
    on_time = [c for c, late in zip(changes, late_c) if not late]
    late_e = _late_in_arrival_order([e[1] for e in events], rule_lateness)
    evs = [e for e, late in zip(events, late_e) if not late]
    values = asof_reference(
        pd.DataFrame({"key": [c[0] for c in on_time], "time": [c[1] for c in on_time], "seq": range(len(on_time)),
                      "deleted": [c[2] for c in on_time], "value": [f"t{c[3]}" for c in on_time]}),
        pd.DataFrame({"key": [e[0] for e in evs], "t": [e[1] for e in evs]}))
    rows = [(e[0], e[1], e[2], v) for e, v in zip(evs, values) if v is not None or kind == "LEFT"]
    return sorted(rows, key=repr), sum(late_c), sum(late_e)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(changes=st.lists(change_st, max_size=40),
       events=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 45)), max_size=30),
       order=st.randoms(use_true_random=False), kind=st.sampled_from(["", "LEFT"]),
       table_lateness=st.sampled_from([0, 5, 100]), rule_lateness=st.sampled_from([0, 5, 100]),
       restore_at=st.integers(0, 12))
def test_engine_join_matches_reference(changes, events, order, kind, table_lateness, rule_lateness, restore_at):
    """Changes and events interleaved in any order, cut into batches anywhere, with a snapshot and a
    restore into a new engine between two batches: the rows are the reference's (the as-of value of
    the on-time changes, for the on-time events), late changes and events are reported."""
    from cep import Engine

    rules = parse_rules(JOIN_RULES.format(kind=kind, table_lateness=table_lateness, rule_lateness=rule_lateness))
    events = [(k, t, i) for i, (k, t) in enumerate(events)]
    # an arrival order: a random interleaving keeping each stream's own order
    tags = ["c"] * len(changes) + ["e"] * len(events)
    order.shuffle(tags)
    ci = ei = 0
    arrival = []
    for tag in tags:
        if tag == "c":
            arrival.append(("c", changes[ci]))
            ci += 1
        else:
            arrival.append(("e", events[ei]))
            ei += 1
    engine = Engine(rules)
    rows, late = [], []
    i = 0
    batch_no = 0
    while i < len(arrival):
        tag = arrival[i][0]
        j = i
        while j < len(arrival) and arrival[j][0] == tag and (j == i or order.random() < 0.7):
            j += 1
        part = [x for _, x in arrival[i:j]]
        if tag == "c":
            recs = [{"id": k, "ts": t, "tier": f"t{v}", **({"__deleted": "true"} if d else {})} for k, t, d, v in part]
            out = engine.process(recs, stream="account_changes")
        else:
            out = engine.process([{"account": k, "ts": t, "n": n} for k, t, n in part], stream="payments")
        rows += out.matches
        late += out.late
        batch_no += 1
        if batch_no == restore_at:
            fresh = Engine(rules)
            fresh.restore(engine.snapshot())
            engine = fresh
        i = j
    out = engine.finish()
    rows += out.matches
    want, late_changes, late_events = _join_reference(changes, events, "LEFT" if kind else "INNER",
                                                      table_lateness, rule_lateness)
    got = sorted(((r["account"], r["ts"], r["n"], r["tier"]) for r in rows), key=repr)
    assert got == want
    assert sum(1 for x in late if x.get("table") == "accounts") == late_changes
    assert sum(1 for x in late if x.get("rule") == "seen") == late_events
    c = engine.counts()["seen"]
    assert c.read == c.processed + c.late + c.errors + c.buffered


def test_join_waits_for_the_table_watermark():
    """An event is released only once the table's watermark has passed it: the change at the same
    time, arriving after the event, is seen."""
    from cep import Engine

    engine = Engine(parse_rules(JOIN_RULES.format(kind="", table_lateness=0, rule_lateness=0)))
    assert engine.process([{"account": 1, "ts": 10, "n": 0}, {"account": 1, "ts": 30, "n": 1}],
                          stream="payments").matches == []
    assert engine.process([{"id": 1, "ts": 10, "tier": "gold"}], stream="account_changes").matches == []
    out = engine.process([{"id": 1, "ts": 11, "tier": "silver"}], stream="account_changes")
    assert [(r["ts"], r["tier"]) for r in out.matches] == [(10, "gold")]
    assert [(r["ts"], r["tier"]) for r in engine.finish().matches] == [(30, "silver")]


def test_left_join_partition_by_joined_column_null_is_an_error():
    from cep import Engine

    rules = parse_rules("""
tables:
  - {name: accounts, from: account_changes, primary_key: id, columns: [tier], time_field: ts}
rules:
  - name: per_tier
    sql: |
      SELECT * FROM payments LEFT JOIN accounts FOR SYSTEM_TIME AS OF payments.ts ON payments.account = accounts.id
      MATCH_RECOGNIZE (PARTITION BY tier ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A{2}) DEFINE A AS A.n > 0)
""")
    engine = Engine(rules)
    engine.process([{"id": 1, "ts": 0, "tier": "gold"}, {"id": 2, "ts": 0, "tier": "gold"}], stream="account_changes")
    engine.process([{"account": a, "ts": t, "n": 1} for a, t in [(1, 1), (3, 2), (2, 3)]], stream="payments")
    out = engine.finish()
    assert [(r["tier"], r["n"]) for r in out.matches] == [("gold", 2)]
    assert [e["reason"] for e in out.errors] == [
        "partition field 'tier' is missing (null): table 'accounts' has no row for the event's key at its time (LEFT JOIN)"]
    c = engine.counts()["per_tier"]
    assert (c.read, c.processed, c.errors) == (3, 2, 1)


def test_merged_stream_routes_changes_to_the_table():
    """In a merged batch (rows tagged with their stream) the changelog rows feed the table, not the rules."""
    from cep import Engine

    engine = Engine(parse_rules(JOIN_RULES.format(kind="LEFT", table_lateness=0, rule_lateness=0)),
                    streams=["payments", "account_changes"])
    out = engine.process([
        {"stream": "account_changes", "id": 1, "ts": 1, "tier": "gold"},
        {"stream": "payments", "account": 1, "ts": 2, "n": 7},
        {"stream": "account_changes", "id": 1, "ts": 3, "tier": "x"},
    ])
    out.extend(engine.finish())
    assert [(r["n"], r["tier"]) for r in out.matches] == [(7, "gold")]
    assert engine.counts()["seen"].read == 1
    assert engine.table_stats()["accounts"]["applied"] == 2


# ---------------------------------------------------------------- changelog formats


def _spec(**kw):
    return TableSpec("t", "changes", ("id",), ("name", "tier"), **kw)


def test_debezium_envelopes():
    """c/u/r upsert ``after``, d deletes ``before``'s key; ``payload`` wrappers; errors for the rest."""
    table = Table(_spec(format="debezium", lateness_ms=1000))
    out = table.apply(batch_from_records([
        {"op": "r", "before": None, "after": {"id": 1, "name": "Ann", "tier": "silver"}, "ts_ms": 100},
        {"op": "u", "before": {"id": 1, "name": "Ann", "tier": "silver"},
         "after": {"id": 1, "name": "Ann", "tier": "gold"}, "ts_ms": 200},
        {"schema": {}, "payload": {"op": "c", "after": {"id": 2, "name": "Bo", "tier": "gold"}, "ts_ms": 150}},
        {"op": "d", "before": {"id": 1, "name": "Ann", "tier": "gold"}, "after": None, "ts_ms": 300},
        {"op": "d", "before": None, "ts_ms": 310},
        {"op": "t", "ts_ms": 320},
        {"op": "c", "after": {"id": None}, "ts_ms": 330},
        {"op": "c", "after": {"id": 3}, "ts_ms": "soon"},
    ]))
    assert [e["reason"] for e in out.errors] == [
        "Debezium op 'd' needs a 'before' object with the key (set the table's REPLICA IDENTITY or equivalent), found None",
        "Debezium op 't' (truncate) is not supported: it would delete every key at once",
        "primary key field 'id' is missing (null)",
        "time field 'ts_ms': 'soon' is neither epoch milliseconds nor an ISO-8601 time",
    ]
    assert [e["line"] for e in out.errors] == [5, 6, 7, 8]
    rows = table.lookup([np.array([1, 1, 1, 2, 2])], np.array([150, 250, 300, 149, 150]))
    assert _norm(table.gather(rows)["tier"].tolist()) == ["silver", "gold", None, None, "gold"]


def test_debezium_time_from_source():
    spec = _spec(format="debezium", time_field="source.ts_ms")
    ch = decode(batch_from_records([{"op": "c", "after": {"id": 1, "tier": "a"}, "ts_ms": 999,
                                     "source": {"ts_ms": 5}}]), spec)
    assert ch.times.tolist() == [5]


def test_upsert_delete_markers():
    """The default marker is Debezium's flattened ``__deleted``; any field and values can be named."""
    ch = decode(batch_from_records([{"id": 1, "ts": 1, "tier": "a"}, {"id": 1, "ts": 2, "__deleted": "true"},
                                    {"id": 2, "ts": 3, "__deleted": "false", "tier": "b"}]), _spec(time_field="ts"))
    assert ch.deletes.tolist() == [False, True, False]
    spec = _spec(time_field="ts", delete_field="op", delete_values=("d", "delete"))
    ch = decode(batch_from_records([{"id": 1, "ts": 1, "op": "u"}, {"id": 1, "ts": 2, "op": "delete"},
                                    {"id": 1, "ts": 3, "op": "d"}]), spec)
    assert ch.deletes.tolist() == [False, True, True]


def test_table_state_restores_through_the_safe_unpickler():
    table = Table(_spec(time_field="ts"))
    table.apply(batch_from_records([{"id": "a", "ts": 1, "tier": "x"}, {"id": "b", "ts": 2, "tier": "y"}]))
    again = Table(_spec(time_field="ts"))
    again.restore(safe_loads(pickle.dumps(table.state())))
    rows = again.lookup([np.array(["a", "b", "c"], dtype=object)], np.array([5, 5, 5]))
    assert _norm(again.gather(rows)["tier"].tolist()) == ["x", "y", None]
    assert again.watermark == 2


# ---------------------------------------------------------------- rule-file errors

TABLE = """tables:
  - name: customers
    from: customer_changes
    primary_key: id
    columns: [tier]
    time_field: ts
"""
RULE = """rules:
  - name: r
    sql: SELECT * FROM pay AS p JOIN {table} FOR SYSTEM_TIME AS OF {as_of} AS c ON {on} MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS {cond})
"""


def _errors(text: str) -> list[str]:
    with pytest.raises(RuleErrors) as exc:
        parse_rules(text, "f.yaml")
    return [e.format().split("\n")[0] for e in exc.value.errors]


def _rule(table="customers", as_of="p.ts", on="p.cust = c.id", cond="c.tier = 'gold'") -> str:
    return TABLE + RULE.format(table=table, as_of=as_of, on=on, cond=cond)


@pytest.mark.parametrize("text, message", [
    (_rule(table="clients"), "f.yaml:9:38: unknown table 'clients' (declared tables: customers); declare it under "
                             "'tables:' in the rule file"),
    (_rule(on="p.cust = c.tier"), "f.yaml:9:92: ON ... = c.tier: 'tier' is not in table 'customers''s primary key (id); "
                                  "a temporal join looks rows up by their primary key"),
    (_rule(as_of="p.placed"), "f.yaml:9:70: AS OF placed: a temporal join reads the table as of the rule's event time, "
                              "so AS OF must name the ORDER BY column (ts), as Flink requires the left side's time "
                              "attribute"),
    (_rule(as_of="c.ts"), "f.yaml:9:70: AS OF c.ts: the time must be the stream's (p or pay), the time each event "
                          "looks the table up at"),
    (_rule(cond="c.region = 'EU'"), "f.yaml:9:150: c.region: table 'customers' has no column 'region'; its columns: tier"),
    (_rule(cond="p.tier = 'gold'"), "f.yaml:9:150: p.tier: the join replaces the event's 'tier' with table "
                                    "'customers''s column of that name; write tier (the table's), or rename the event field"),
    (_rule(on="p.cust = p.id"), "f.yaml:9:83: ON p.cust = p.id: each equality names a column of the stream (p or pay) "
                                "and one of the table (c or customers), qualified by name or alias"),
])
def test_join_errors(text, message):
    assert _errors(text) == [message]


@pytest.mark.parametrize("table, message", [
    ("  - name: t\n    primary_key: id\n    columns: [a]\n    time_field: ts\n",
     "f.yaml:2:5: table 't' needs 'from:', the input stream that carries its changelog"),
    ("  - name: t\n    from: s\n    columns: [a]\n    time_field: ts\n",
     "f.yaml:2:5: table 't' needs 'primary_key:', the key column or a list of key columns"),
    ("  - name: t\n    from: s\n    primary_key: id\n    time_field: ts\n",
     "f.yaml:2:5: table 't' needs 'columns:', the list of columns a join adds to each event"),
    ("  - name: t\n    from: s\n    primary_key: id\n    columns: [a]\n",
     "f.yaml:2:5: table 't' needs 'time_field:', the field saying when each change takes effect (event time: a lookup "
     "at time t sees the changes up to t)"),
    ("  - name: t\n    from: s\n    primary_key: id\n    columns: [a]\n    time_field: ts\n    format: csv\n",
     "f.yaml:7:13: table 't': format must be upsert or debezium, found 'csv'"),
    ("  - name: t\n    from: s\n    primary_key: id\n    columns: [id, a]\n    time_field: ts\n",
     "f.yaml:5:14: table 't': id is in primary_key; columns lists the other columns (a join already has the key: it "
     "equals the event's join column)"),
    ("  - name: t\n    from: s\n    primary_key: id\n    columns: [a]\n    format: debezium\n    delete_field: op\n",
     "f.yaml:7:19: table 't': delete_field is for format upsert; a Debezium envelope says a delete with op 'd'"),
    ("  - name: t\n    from: s\n    primary_key: id\n    columns: [a]\n    time_field: ts\n    lateness: soon\n",
     "f.yaml:7:15: table 't': lateness: cannot read 'soon' as an interval; write milliseconds or text such as '5 minutes'"),
    ("  - name: t\n    from: s\n    primary_key: id\n    columns: [a]\n    time_field: ts\n    snapshot: rows.xlsx\n",
     "f.yaml:7:15: table 't': snapshot 'rows.xlsx' must end in .csv, .tsv, .jsonl, .json, .ndjson or .parquet (its "
     "format)"),
    ("  - name: t\n    from: s\n    primary_key: id\n    columns: [a]\n    time_field: ts\n    colums: [b]\n",
     "f.yaml:7:5: unknown key 'colums' for a table; known keys: name, description, from, primary_key, columns, format, "
     "time_field, time_unit, lateness, delete_field, delete_values, snapshot"),
    ("  - name: 1t\n", "f.yaml:2:11: a table needs a 'name' that is an SQL identifier (letters, digits, _), found '1t'"),
])
def test_table_declaration_errors(table, message):
    assert _errors("tables:\n" + table + "rules: []\n") == [message]


def test_snapshot_outside_the_rule_files_folder(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "secret.csv").write_text("id,a\n1,2\n")
    text = "tables:\n  - {name: t, from: s, primary_key: id, columns: [a], time_field: ts, snapshot: ../secret.csv}\nrules: []\n"
    with pytest.raises(RuleErrors) as exc:
        parse_rules(text, str(tmp_path / "rules" / "f.yaml"))
    (err,) = exc.value.errors
    assert "snapshot file ../secret.csv" in err.message and "is outside" in err.message


# ---------------------------------------------------------------- real data: S&P 500 bars and GICS sectors

FIXTURES = REPO / "tests" / "fixtures" / "tables"


def test_sp500_sample_tagged_with_sector():
    """The bundled 2017 bars of five stocks joined with their sector (a snapshot table): every match
    carries its company's sector, and the per-sector rule counts rows as pandas does."""
    from cep import Engine
    from patterns.rules import load_rules

    bars = [json.loads(line) for line in open(REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl")]
    engine = Engine(load_rules(FIXTURES / "sectors.yaml"), streams=["bars"])
    out = engine.process(bars, stream="bars")
    out.extend(engine.finish())
    companies = pd.read_csv(FIXTURES / "sp500_sectors_sample.csv").set_index("Symbol")
    tech = [r for r in out.matches if r["rule"] == "tech_rise"]
    df = pd.DataFrame(bars).sort_values(["symbol", "date"])
    df["prev"] = df.groupby("symbol")["close"].shift()
    df["sector"] = df["symbol"].map(companies["GICS Sector"])
    want = df[(df["sector"] == "Information Technology") & (df["close"] > df["prev"] * 1.03)]
    assert sorted((r["symbol"], r["up_date"]) for r in tech) == sorted(zip(want["symbol"], want["date"]))
    assert all(r["sector"] == companies.loc[r["symbol"], "GICS Sector"] for r in tech)
    per_sector = [r for r in out.matches if r["rule"] == "sector_days"]
    assert len(per_sector) == sum(n // 10 for n in df.groupby("sector").size())
    assert engine.table_stats()["companies"]["snapshot_rows"] == 5


@pytest.mark.data
def test_sp500_full_history_inner_join_drops_symbols_not_listed(tmp_path):
    """619,040 bars of 2013-2018 against today's constituents: bars of symbols no longer listed are
    dropped by the inner join (counted), the others tagged with their sector."""
    if not (SHARED / "sp500_daily_ohlcv_2013_2018.csv").exists():
        pytest.skip("needs ../shared/data")
    import shutil

    from cep import Engine

    shutil.copy(SHARED / "sp500_companies.csv", tmp_path / "companies.csv")
    (tmp_path / "rules.yaml").write_text("""
tables:
  - {name: companies, from: company_changes, primary_key: Symbol, columns: ["GICS Sector"], time_field: t,
     snapshot: companies.csv}
rules:
  - name: tagged
    sql: |
      SELECT * FROM bars JOIN companies FOR SYSTEM_TIME AS OF bars.date ON bars.Name = companies.Symbol
      MATCH_RECOGNIZE (PARTITION BY Name ORDER BY date MEASURES A."GICS Sector" AS sector PATTERN (A)
                       DEFINE A AS A.close > A.open * 1.1)
""")
    from patterns.rules import load_rules

    engine = Engine(load_rules(tmp_path / "rules.yaml"), streams=["bars"])
    # the file is sorted by symbol, then date: in event-time order for the stream
    bars = pd.read_csv(SHARED / "sp500_daily_ohlcv_2013_2018.csv").sort_values("date", kind="stable")
    rows = []
    for lo in range(0, len(bars), 65536):
        rows += engine.process(bars.iloc[lo:lo + 65536], stream="bars").matches
    rows += engine.finish().matches
    sectors = pd.read_csv(SHARED / "sp500_companies.csv").set_index("Symbol")["GICS Sector"]
    bars["sector"] = bars["Name"].map(sectors)
    want = bars[bars["sector"].notna() & (bars["close"] > bars["open"] * 1.1)]
    assert sorted((r["Name"], r["sector"]) for r in rows) == sorted(zip(want["Name"], want["sector"]))
    join = engine.operators["tagged"].join.counts
    assert join["dropped"] == int(bars["sector"].isna().sum())


# ---------------------------------------------------------------- idle progress and reload


def test_idle_progress_does_not_pass_the_table_watermark():
    """advance_watermarks moves a joined pattern rule's watermark (later events behind it are late)
    but releases no event the table cannot answer for yet: the change that comes later is seen."""
    from cep import Engine

    engine = Engine(parse_rules(JOIN_RULES.format(kind="", table_lateness=0, rule_lateness=0)))
    engine.process([{"id": 1, "ts": 0, "tier": "silver"}], stream="account_changes")
    engine.process([{"account": 1, "ts": 10, "n": 0}], stream="payments")
    assert engine.advance_watermarks({"seen": 100}).matches == []  # the table is at 0: the event waits
    assert engine.watermarks()["seen"] == 100
    assert len(engine.process([{"account": 1, "ts": 50, "n": 1}], stream="payments").late) == 1
    out = engine.process([{"id": 1, "ts": 5, "tier": "gold"}, {"id": 1, "ts": 200, "tier": "x"}],
                         stream="account_changes")
    assert [(r["ts"], r["tier"]) for r in out.matches] == [(10, "gold")]


def test_reload_keeps_unchanged_tables_and_refuses_changed_ones(tmp_path):
    """Engine.reload: an unchanged table keeps its rows; a changed one refuses the whole reload (its
    rows came from changes already read); a new table starts from its snapshot; a dropped one goes."""
    from cep import Engine

    text = JOIN_RULES.format(kind="", table_lateness=0, rule_lateness=0)
    engine = Engine(parse_rules(text))
    engine.process([{"id": 1, "ts": 0, "tier": "gold"}, {"id": 1, "ts": 100, "tier": "x"}], stream="account_changes")
    rep = engine.reload(parse_rules(text.replace("MEASURES A.ts", "MEASURES A.n AS n2, A.ts")))
    assert rep.accepted and rep.changed == ["seen"] and rep.tables_added == rep.tables_removed == []
    out = engine.process([{"account": 1, "ts": 10, "n": 3}], stream="payments")
    assert [(r["tier"], r["n2"]) for r in out.matches] == [("gold", 3)]  # the rows survived the reload

    rep = engine.reload(parse_rules(text.replace("columns: [tier]", "columns: [tier, country]")))
    assert not rep.accepted
    assert rep.errors == ["table 'accounts' changed (columns): its rows come from the changelog this run has already "
                          "read, which cannot be read again; restart from an empty state, or declare the new table "
                          "under another name"]
    assert "rules not reloaded, the old rules keep running" in rep.summary()
    assert engine.table_stats()["accounts"]["applied"] == 2

    (tmp_path / "regions.csv").write_text("id,region\n1,EU\n")
    (tmp_path / "rules.yaml").write_text("""
tables:
  - {name: regions, from: region_changes, primary_key: id, columns: [region], time_field: ts, snapshot: regions.csv}
rules:
  - name: by_region
    kind: search
    from: payments
    time_field: ts
    join: {table: regions, on: account}
    fields: [account, region]
    query: 'region:eu'
""")
    rep = engine.reload(str(tmp_path / "rules.yaml"))
    assert rep.accepted and rep.tables_added == ["regions"] and rep.tables_removed == ["accounts"]
    assert rep.removed == ["seen"] and "tables added regions; tables removed accounts" in rep.summary()
    out = engine.process([{"account": 1, "ts": 20}], stream="payments")
    out.extend(engine.finish())
    assert out.matches == [{"account": 1, "region": "EU", "query_id": "by_region", "metadata": {}, "rule": "by_region"}]

    # a plain list of rules says nothing about tables: the engine's stay
    from patterns.rules import load_rules

    rep = engine.reload(list(load_rules(tmp_path / "rules.yaml")))
    assert rep.accepted and rep.kept == ["by_region"] and list(engine.tables) == ["regions"]


def test_reload_refuses_a_rule_joining_an_undeclared_table():
    from cep import Engine
    from patterns.rules import RuleSet

    engine = Engine(parse_rules(JOIN_RULES.format(kind="", table_lateness=0, rule_lateness=0)))
    joined = next(iter(parse_rules(JOIN_RULES.format(kind="", table_lateness=0, rule_lateness=0))))
    rep = engine.reload(RuleSet((joined,), tables={}))
    assert not rep.accepted
    assert rep.errors == ["rule 'seen' joins table 'accounts', which the new rules do not declare (tables:)"]
    assert list(engine.tables) == ["accounts"] and list(engine.operators) == ["seen"]


def test_a_join_does_not_write_into_the_batch_other_rules_read():
    """A joined rule fills its buffered column from the table; another rule over the same events
    (which buffers the batch's own arrays when every row is accepted) still reads the events' value."""
    from cep import Engine

    text = JOIN_RULES.format(kind="", table_lateness=0, rule_lateness=0) + """
  - name: plain
    sql: |
      SELECT * FROM payments MATCH_RECOGNIZE (PARTITION BY account ORDER BY ts
        MEASURES A.ts AS ts, A.tier AS tier AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A) DEFINE A AS A.n >= 0)
"""
    engine = Engine(parse_rules(text))
    # the table's watermark is past the events: the joined rule enriches them as they come
    engine.process([{"id": 1, "ts": 0, "tier": "gold"}, {"id": 2, "ts": 100, "tier": "silver"}],
                   stream="account_changes")
    rows = []
    for t in range(1, 6):
        rows += engine.process([{"account": 1, "ts": t, "n": t, "tier": "own"}], stream="payments").matches
    rows += engine.finish().matches
    tiers = {(r["rule"], r["tier"]) for r in rows}
    assert tiers == {("seen", "gold"), ("plain", "own")}
