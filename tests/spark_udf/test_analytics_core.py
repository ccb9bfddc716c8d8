"""Analytics rules in the Spark-free core, against the embedded engine, under Spark's stateful-stage contract."""

from __future__ import annotations

import json
import pickle
import random
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cep.analytics import WindowOperator
from cep.engine import Engine
from cep.operator import NO_WATERMARK
from patterns.rules import parse_rules
from spark_udf.core import PRIOR_COL, SEQ_COL, GroupCore
from spark_udf.kinds import KEYED_KINDS
from spark_udf.schema import analytics_output_fields
from spark_udf.state import RuleChangedError, decode_state
from tests.spark_udf.analytics_workload import ANALYTICS_YAML, COLUMNS, TYPES, analytics_stream
from tests.spark_udf.conftest import match_key
from tests.spark_udf.simulate import bucket_of, rows_of, run_stream
from tests.spark_udf.workload import embedded as workload_embedded
from tests.spark_udf.workload import events

RULES = list(parse_rules(ANALYTICS_YAML))


def analytics_key(row: dict[str, Any]) -> tuple:
    """An analytics row as a hashable value: heavy-hitter pairs as tuples (the engine's lists or
    Spark's structs), ``retract`` false as absent (the engine only sets it on retractions)."""
    row = dict(row)
    for k, v in row.items():
        if isinstance(v, (list, tuple)):
            row[k] = tuple((p["value"], p["count"]) if isinstance(p, dict) else tuple(p) for p in v)
    if row.get("retract") is False:
        del row["retract"]
    return match_key(row)


def rule_rows(frame: pd.DataFrame, env) -> Counter:
    """Envelope match rows back in each rule's own column names."""
    out: Counter = Counter()
    for rec in rows_of(frame, "match"):
        row = {name: rec[e] for name, e, _ in env.columns_of(rec["rule"]) if e in rec}
        row["rule"] = rec["rule"]
        out[analytics_key(row)] += 1
    return out


def embedded(files: list[list[Any]], finish: bool = False):
    return workload_embedded(RULES, files, finish)


def late_events(records: list[dict]) -> Counter:
    return Counter((r["rule"], r["event"] if isinstance(r["event"], str) else json.dumps(r["event"], separators=(",", ":")))
                   for r in records)


@pytest.mark.parametrize("seed,buckets,chunk", [(7, 1, 1000), (11, 4, 9), (38, 16, 5)])
def test_stream_core_gives_the_embedded_engines_rows(seed: int, buckets: int, chunk: int) -> None:
    # disorder only across files (micro-batches): see docs/spark.md on analytics rules
    files = analytics_stream(seed, files=5, sort_files=True)
    core, env = GroupCore.for_rules(RULES, TYPES, buckets)
    frame, *_ = run_stream(core, RULES, [events(r) for r in files], COLUMNS, buckets, chunk=chunk)
    exp = embedded(files)
    got = rule_rows(frame, env)
    assert got == Counter(analytics_key(m) for m in exp.matches)
    assert {m["rule"] for m in exp.matches} == {r.name for r in RULES}
    assert sum(1 for m in exp.matches if m["correction"]) >= 5  # late events within the lateness
    assert late_events(rows_of(frame, "late")) == late_events(exp.late)
    assert len(exp.late) >= 4 * len(RULES)  # the event 6 s behind in files 1..4, for every rule
    assert Counter((r["rule"], r["reason"]) for r in rows_of(frame, "error")) == Counter(
        (r["rule"], r["reason"]) for r in exp.errors)


def final_view(rows: list[dict[str, Any]]) -> Counter:
    """What a consumer keeping the last row per (rule, key, window) ends with, retractions
    removing it; SLIDE rows (one per event, never corrected) as they are."""
    last: dict[tuple, tuple] = {}
    slide: Counter = Counter()
    for row in rows:
        key = analytics_key(row)
        if row["rule"] == "slide":
            slide[key] += 1
            continue
        ident = (row["rule"], row.get("k"), row["window_start"])
        if row.get("retract"):
            last.pop(ident, None)
        else:
            last[ident] = tuple(kv for kv in key if kv[0] != "correction")
    return Counter(last.values()) + slide


def test_disorder_inside_micro_batches_changes_when_rows_come_out_not_the_final_view() -> None:
    """Spark fires windows between micro-batches: a window the embedded engine emits while a
    micro-batch is half read and corrects later may come out once, complete. Disorder inside
    every file (below every rule's lateness but 'overall''s, left out: it judges late rows
    differently), so the late events are the same."""
    rules = [r for r in RULES if r.name != "overall"]
    files = analytics_stream(8, files=4, disorder=900)
    files.append([{"k": "z", "ts": 10**9, "px": 0, "tag": "x", "u": "x"}])  # every other window final
    core, env = GroupCore.for_rules(rules, TYPES, 4)
    frame, *_ = run_stream(core, rules, [events(r) for r in files], COLUMNS, 4, chunk=25)
    exp = workload_embedded(rules, files)
    got = []
    for rec in rows_of(frame, "match"):
        got.append({**{name: rec[e] for name, e, _ in env.columns_of(rec["rule"]) if e in rec}, "rule": rec["rule"]})
    assert late_events(rows_of(frame, "late")) == late_events(exp.late)
    assert final_view(got) == final_view(exp.matches)
    assert rule_rows(frame, env) != Counter(analytics_key(m) for m in exp.matches)  # the timing did differ
    assert sum(1 for r in got if r["correction"]) < sum(1 for m in exp.matches if m["correction"])


def test_corrections_and_retractions_come_out_as_in_the_embedded_engine() -> None:
    # a window emitted on time, then an event within the lateness that fails its HAVING
    rows0 = [{"k": "a", "ts": 100, "px": 1, "tag": "t", "u": "x"}, {"k": "a", "ts": 200, "px": 2, "tag": "t", "u": "y"},
             {"k": "b", "ts": 1100, "px": 1, "tag": "t", "u": "x"}]
    rows1 = [{"k": "a", "ts": 900, "px": 9, "tag": "t", "u": "z"}, {"k": "a", "ts": 300, "px": 3, "tag": "t", "u": "z"},
             {"k": "b", "ts": 2600, "px": 1, "tag": "t", "u": "x"}]
    rules = RULES[:1]
    core, env = GroupCore.for_rules(rules, TYPES, 2)
    frame, *_ = run_stream(core, rules, [rows0, rows1], COLUMNS, 2)
    eng = Engine(rules)
    exp = eng.process(rows0)
    exp.extend(eng.process(rows1))
    assert rule_rows(frame, env) == Counter(analytics_key(m) for m in exp.matches)
    assert [(m["n"], m["correction"], m.get("retract")) for m in exp.matches] == [(2, False, None), (2, True, True)]
    retraction = [r for r in rows_of(frame, "match") if r["retract"]]
    assert len(retraction) == 1 and retraction[0]["correction"]


def test_a_restart_from_the_saved_state_changes_nothing() -> None:
    files = [events(r) for r in analytics_stream(12, files=6, sort_files=True)]
    core, env = GroupCore.for_rules(RULES, TYPES, 4)
    whole, *_ = run_stream(core, RULES, files, COLUMNS, 4, chunk=40)
    first, state, timeouts, wm = run_stream(core, RULES, files[:3], COLUMNS, 4, chunk=40)
    fresh = pickle.loads(pickle.dumps(core))  # a new worker, as Spark ships the core
    second, *_ = run_stream(fresh, RULES, files[3:], COLUMNS, 4, chunk=40, state=state, timeouts=timeouts,
                            watermark=wm)
    both = pd.concat([first, second], ignore_index=True)
    assert rule_rows(both, env) == rule_rows(whole, env)
    assert sum(rule_rows(whole, env).values()) > 100


def clocks_before(rows: list[dict[str, Any]], keys: tuple[str, ...], clock: int | None = None) -> list[int | None]:
    """Per row, the largest time of every earlier row with a time and the keys: the embedded
    engine's clock when the row came (None before any)."""
    out = []
    for r in rows:
        out.append(clock)
        if r.get("ts") is not None and all(r.get(k) is not None for k in keys):
            clock = r["ts"] if clock is None else max(clock, r["ts"])
    return out


def test_static_groups_replay_arrival_order_like_the_embedded_engine() -> None:
    """A backfill: each group's rows with the largest event time of every earlier row of the
    input, in any order; disorder inside files too. Corrections and heavy hitters included."""
    files = analytics_stream(11, files=4)
    rows = [r for f in files for r in events(f)]
    buckets = 3
    core, env = GroupCore.for_rules(RULES, TYPES, buckets)
    frames = []
    for rule in RULES:
        priors = clocks_before(rows, KEYED_KINDS["analytics"].key_columns(rule))
        groups: dict[int, list[dict]] = {}
        for seq, (r, prior) in enumerate(zip(rows, priors)):
            rec = {**{c: r.get(c) for c in COLUMNS}, SEQ_COL: seq, PRIOR_COL: prior}
            groups.setdefault(bucket_of(rule, r, buckets), []).append(rec)
        for b, recs in groups.items():
            random.Random(b).shuffle(recs)  # Spark hands a group over in any order
            pdf = pd.DataFrame(recs).astype({PRIOR_COL: "Int64"})
            frames.append(core.static_group((rule.name, b), pdf))
    frame = pd.concat(frames, ignore_index=True)
    exp = embedded(files, finish=True)
    assert rule_rows(frame, env) == Counter(analytics_key(m) for m in exp.matches)
    assert sum(1 for m in exp.matches if m["correction"]) >= 10
    assert sorted((r["rule"], r["reason"]) for r in rows_of(frame, "late")) == sorted(
        (r["rule"], r["reason"]) for r in exp.late)


def test_a_window_is_emitted_by_the_timeout_when_no_row_follows() -> None:
    rules = RULES[:1]  # TUMBLE 1 s, lateness 1.5 s
    core, env = GroupCore.for_rules(rules, TYPES, 1)
    rows = [{"k": "a", "ts": 1000, "px": 1, "tag": "x", "u": "p"}, {"k": "a", "ts": 1500, "px": 2, "tag": "x", "u": "q"},
            {"k": "b", "ts": 4000, "px": 1, "tag": "x", "u": "p"}]
    out, state, timeouts, wm = run_stream(core, rules, [rows], COLUMNS, 1)
    # batch 0 sees watermark 0; the batch without data sees 4000: a's window [1000, 2000) is
    # emitted (clock 4000 >= its end) and final (4000 >= 2000 + 1500)
    assert [(r["k"], r["n"], r["window_start"]) for r in rows_of(out, "match")] == [("a", 2, 1000)]
    assert list(timeouts.values()) == [5000 - 1]  # b's window ends at 5000: Spark fires once M > 4999
    assert wm == 4000


@pytest.mark.parametrize("rule,rows,deadlines", [
    # TUMBLE 1 s, lateness 1.5 s: emitted at its end, final at end + lateness (in watermark terms - lateness)
    ("tumble", [(1200, "a"), (2500, "b")], [(0, 500), (500, 1500), (1500, 2000), (2000, 3000), (3000, None)]),
    # SESSION gap 600 ms: the session [1000, 1600) of a, then [1400, 2000) of b
    ("session", [(1000, "a"), (1400, "b")], [(0, 100), (100, 500), (500, 1600), (1600, 2000), (2000, None)]),
    # SLIDE: a row comes out when the watermark reaches its event
    ("slide", [(1000, "a"), (1400, "b")], [(0, 1000), (1000, 1400), (1400, None)]),
])
def test_next_deadline_is_the_next_watermark_that_changes_something(rule: str, rows, deadlines) -> None:
    [r] = [x for x in RULES if x.name == rule]
    op = WindowOperator.from_rule(r)
    op.ingest([{"k": k, "ts": ts, "px": 1, "tag": "x", "u": "p"} for ts, k in rows], 0)
    for wm, expected in deadlines:
        op.advance_to(wm)
        assert op.next_deadline() == expected, wm


def test_ingest_at_the_watermark_process_would_have_gives_the_rows_of_process() -> None:
    files = [events(f) for f in analytics_stream(5, files=3)]
    for rule in RULES:
        own, ext = WindowOperator.from_rule(rule), WindowOperator.from_rule(rule)
        keys = KEYED_KINDS["analytics"].key_columns(rule)
        want, got = [], []
        clock = None
        for f in files:
            want += own.process(f).matches
            before = clocks_before(f, keys, clock)
            late_before = [NO_WATERMARK if c is None else c - rule.lateness_ms for c in before]
            clock = clocks_before(f + [{}], keys, clock)[-1]  # after the file
            got += ext.ingest(f, np.array(late_before, dtype=np.int64)).matches
            got += ext.advance_to(clock - rule.lateness_ms).matches
        want += own.finish().matches
        got += ext.finish().matches
        assert [analytics_key(m) for m in got] == [analytics_key(m) for m in want], rule.name
        assert len(want) > 5


def test_output_types_follow_the_rule() -> None:
    fields = {r.name: dict(analytics_output_fields(r.spec, TYPES)) for r in RULES}
    assert fields["tumble"] == {
        "k": "string", "n": "bigint", "total": "bigint", "mean": "double", "first_tag": "string", "top": "bigint",
        "users": "bigint", "approx_users": "bigint", "window_start": "bigint", "window_end": "bigint",
        "rule": "string", "correction": "boolean", "retract": "boolean"}
    assert fields["hop"]["tags"] == "array<struct<value:string,count:bigint>>"
    assert fields["hop"]["n_before"] == "bigint" and fields["hop"]["hot"] == "bigint"
    assert fields["session"]["seconds"] == "double" and fields["session"]["last_ts"] == "bigint"
    assert fields["slide"]["px"] == "bigint" and fields["slide"]["at"] == "bigint"
    timed = dict(analytics_output_fields(RULES[0].spec, {**TYPES, "ts": "timestamp", "px": "double"}))
    assert (timed["window_start"], timed["total"], timed["top"]) == ("timestamp", "double", "double")


def test_a_changed_analytics_rule_is_reported_with_the_choices() -> None:
    rules = RULES[:1]
    core, _ = GroupCore.for_rules(rules, TYPES, 1)
    _, state, _, _ = run_stream(core, rules, [[{"k": "a", "ts": 1000, "px": 1, "tag": "x", "u": "p"}]], COLUMNS, 1)
    [(key, stored)] = state.items()
    changed = list(parse_rules(ANALYTICS_YAML.replace("TUMBLE(ts, INTERVAL '1' SECOND)", "TUMBLE(ts, INTERVAL '2' SECOND)")))
    other, _ = GroupCore.for_rules(changed[:1], TYPES, 1)
    with pytest.raises(RuleChangedError) as e:
        other.stream_group(key, [], stored, 5000, True)
    msg = str(e.value)
    assert "rule 'tumble' changed since the checkpoint was written in a way its saved windows cannot survive " \
           "(its SQL statement, sketch sizes or lateness)" in msg
    assert "--on-rule-change reset (on_rule_change='reset') to drop this rule's windows" in msg
    reset, _ = GroupCore.for_rules(changed[:1], TYPES, 1, on_rule_change="reset")
    frame, new_state, _ = reset.stream_group(key, [], stored, 5000, True)
    assert new_state is not None
    assert rows_of(frame, "error")[0]["reason"].startswith("state reset (on_rule_change='reset'): rule 'tumble'")


def test_saved_state_forgets_keys_whose_windows_are_final() -> None:
    rules = RULES[:1]
    core, _ = GroupCore.for_rules(rules, TYPES, 1)
    rows = [{"k": f"key{i}", "ts": 1000 + i, "px": 1, "tag": "x", "u": "p"} for i in range(2000)]
    _, state, _, _ = run_stream(core, rules, [rows, [{"k": "z", "ts": 10_000, "px": 1, "tag": "x", "u": "p"}]],
                                COLUMNS, 1, chunk=len(rows))
    [(key, (blob, version))] = state.items()
    spec, op, header = core._operator("tumble")
    op.restore(decode_state(blob, version, header))
    assert op.key_count() == 1  # only z, whose window is still open
    assert len(blob) < 4000
