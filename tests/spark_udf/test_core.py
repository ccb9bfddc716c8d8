"""The Spark-free core against the embedded engine, under Spark's stateful-stage contract."""

from __future__ import annotations

import doctest
import pickle
from collections import Counter

import numpy as np
import pandas as pd
import pytest

import spark_udf.core
import spark_udf.schema
import spark_udf.state
from cep.operator import PatternOperator
from patterns.rules import parse_rules
from spark_udf.core import PRIOR_COL, SEQ_COL, GroupCore
from spark_udf.schema import Envelope, expr_type, pattern_output_fields
from spark_udf.state import RuleChangedError, StateEncodingError
from tests.spark_udf import workload
from tests.spark_udf.conftest import match_key
from tests.spark_udf.simulate import rows_of, run_stream
from tests.spark_udf.workload import COLUMNS, RULES_YAML, TYPES, events, stream

RULES = list(parse_rules(RULES_YAML))


def core_for(rules=RULES, buckets=4, **kw) -> tuple[GroupCore, Envelope]:
    return GroupCore.for_rules(rules, TYPES, buckets, **kw)


def as_rule_rows(frame: pd.DataFrame, env: Envelope) -> Counter:
    """Envelope match rows back in each rule's own column names."""
    out = Counter()
    for rec in rows_of(frame, "match"):
        row = {name: rec[e] for name, e, _ in env.columns_of(rec["rule"]) if e in rec}
        row["rule"] = rec["rule"]
        out[match_key(row)] += 1
    return out


def embedded(files, finish=False):
    return workload.embedded(parse_rules(RULES_YAML), files, finish)


@pytest.mark.parametrize("seed,buckets,chunk", [(1, 1, 1000), (2, 3, 3), (3, 64, 7), (4, 4, 1), (5, 2, 11)])
def test_stream_core_gives_the_embedded_engines_rows(seed: int, buckets: int, chunk: int) -> None:
    files = stream(seed, files=5)
    core, env = core_for(buckets=buckets)
    frame, *_ = run_stream(core, RULES, [events(r) for r in files], COLUMNS, buckets, chunk=chunk)
    exp = embedded(files)
    assert as_rule_rows(frame, env) == Counter(match_key(m) for m in exp.matches)
    assert sum(as_rule_rows(frame, env).values()) > 20
    late = Counter((r["rule"], r["event"]) for r in rows_of(frame, "late"))
    import json

    assert late == Counter((r["rule"], json.dumps(r["event"], separators=(",", ":"))) for r in exp.late)
    assert len(exp.late) == 3 * 3  # one late event in each of files 2..4, for each rule
    errors = Counter((r["rule"], r["reason"]) for r in rows_of(frame, "error"))
    assert errors == Counter((r["rule"], r["reason"]) for r in exp.errors)


def test_a_restart_from_the_saved_state_changes_nothing() -> None:
    files = [events(r) for r in stream(7, files=6)]
    core, env = core_for()
    whole, *_ = run_stream(core, RULES, files, COLUMNS, 4)
    first, state, timeouts, wm = run_stream(core, RULES, files[:3], COLUMNS, 4)
    # the no-data batch of the first run moved nothing the second would not; a fresh worker
    # (a new unpickled core, as Spark ships it) picks up the saved blobs
    fresh = pickle.loads(pickle.dumps(core))
    second, *_ = run_stream(fresh, RULES, files[3:], COLUMNS, 4, state=state, timeouts=timeouts, watermark=wm)
    both = pd.concat([first, second], ignore_index=True)
    assert as_rule_rows(both, env) == as_rule_rows(whole, env)


def test_within_matches_are_emitted_by_the_timeout_when_no_row_follows() -> None:
    rules = list(parse_rules(RULES_YAML))[:1]
    core, env = core_for(rules, buckets=1)
    rows = [{"k": "a", "ts": 1000, "px": 1, "tag": "x"}, {"k": "a", "ts": 1500, "px": 7, "tag": "x"},
            {"k": "b", "ts": 9000, "px": 1, "tag": "x"}]
    out, state, timeouts, wm = run_stream(core, rules, [rows], COLUMNS, 1)
    # batch 0 sees watermark 0; the batch without data sees 9000: 9000 - 1500 >= 1000 + 3000
    assert [(r["k"], r["t0"], r["t1"]) for r in rows_of(out, "match")] == [("a", 1000, 1500)]
    assert list(timeouts.values()) == [9000 + 1500 - 1]  # b's A started at 9000: deadline 12000 - 1500 + 1500 - 1
    assert wm == 9000


def test_timeout_is_the_earliest_deadline_in_sparks_terms() -> None:
    op = PatternOperator.from_rule(RULES[0])
    op.ingest(pd.DataFrame({"k": ["a", "b"], "ts": [5000, 7000], "px": [1, 1], "tag": ["x", "x"]}), 0)
    assert op.next_deadline() == 5000  # buffered: released once the watermark reaches 5000
    op.advance_to(5000)
    assert op.next_deadline() == 7000
    op.advance_to(7000)
    assert op.next_deadline() == 5000 + 3000  # a's partial match dies at its start + WITHIN


def test_static_group_replays_arrival_order_like_the_embedded_engine(monkeypatch) -> None:
    import pyspark

    class Ctx:
        def partitionId(self) -> int:  # noqa: N802 (Spark's name)
            return 0

    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: Ctx()))
    files = stream(11, files=4)
    rows = [r for f in files for r in events(f)]
    pdf = pd.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows], columns=COLUMNS)
    key_sets = [("k",), ()]
    [annotated] = list(spark_udf.core.annotate_arrival(iter([pdf]), "ts", key_sets, (), {}))
    core, env = core_for(buckets=1)
    frames = []
    for rule in RULES:
        ks = tuple(rule.compiled.statement.partition_by)
        g = annotated.assign(**{PRIOR_COL: annotated[f"{PRIOR_COL}_{key_sets.index(ks)}"]})
        g = g.sample(frac=1.0, random_state=3)  # Spark hands a group over in any order
        frames.append(core.static_group((rule.name, 0), g))
    frame = pd.concat(frames, ignore_index=True)
    exp = embedded(files, finish=True)
    assert as_rule_rows(frame, env) == Counter(match_key(m) for m in exp.matches)
    assert sorted((r["rule"], r["reason"]) for r in rows_of(frame, "late")) == sorted(
        (r["rule"], r["reason"]) for r in exp.late)
    assert SEQ_COL in annotated.columns


# ------------------------------------------------------------------ state versioning


def _saved_state(core: GroupCore):
    rows = [{"k": "a", "ts": 1000, "px": 1, "tag": "x"}]
    _, state, _, _ = run_stream(core, RULES[:1], [rows], COLUMNS, 1)
    [(key, stored)] = state.items()
    return key, stored


def test_a_changed_state_encoding_is_refused_with_what_to_do() -> None:
    core, _ = core_for(RULES[:1], buckets=1)
    key, stored = _saved_state(core)
    newer, _ = core_for(RULES[:1], buckets=1, state_version=2)
    with pytest.raises(StateEncodingError) as e:
        newer.stream_group(key, [], stored, 2000, True)
    msg = str(e.value)
    assert "encoding version 1; this build reads version 2" in msg
    assert "start a new checkpoint directory" in msg


def test_a_changed_pattern_is_reported_with_the_choices() -> None:
    core, _ = core_for(RULES[:1], buckets=1)
    key, stored = _saved_state(core)
    changed = list(parse_rules(RULES_YAML.replace("PATTERN (A B+)", "PATTERN (A B+ A)")))[:1]
    other, _ = core_for(changed, buckets=1)
    with pytest.raises(RuleChangedError) as e:
        other.stream_group(key, [], stored, 2000, True)
    msg = str(e.value)
    assert "rule 'within' changed since the checkpoint was written" in msg
    assert "rename the rule" in msg and "--on-rule-change reset" in msg
    # a new measure over known columns carries over
    measured = list(parse_rules(RULES_YAML.replace("A.tag AS tag", "A.tag AS tag, A.px AS apx")))[:1]
    ok, _ = core_for(measured, buckets=1)
    ok.stream_group(key, [], stored, 2000, True)
    # and reset drops the state, saying so on the errors output
    reset, _ = core_for(changed, buckets=1, on_rule_change="reset")
    frame, new_state, _ = reset.stream_group(key, [], stored, 2000, True)
    assert new_state is not None
    assert rows_of(frame, "error")[0]["reason"].startswith("state reset (on_rule_change='reset'): rule 'within'")


def test_a_changed_bucket_count_is_refused() -> None:
    core, _ = core_for(RULES[:1], buckets=1)
    key, stored = _saved_state(core)
    other, _ = core_for(RULES[:1], buckets=8)
    with pytest.raises(RuleChangedError, match="written with 1 key buckets, this run uses 8.*--buckets 1"):
        other.stream_group(key, [], stored, 2000, True)


def test_a_removed_rule_drops_its_state() -> None:
    core, _ = core_for(RULES[:1], buckets=1)
    key, stored = _saved_state(core)
    other, _ = core_for(RULES[1:2], buckets=1)
    frame, state, timeout = other.stream_group(key, [], stored, 2000, True)
    assert (frame, state, timeout) == (None, None, None)


def test_state_per_idle_key_is_small() -> None:
    rule = list(parse_rules("""
rules:
  - name: abc
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0, C.ts AS t1
        PATTERN (A B C) DEFINE A AS price > 102.33, B AS price < 100, C AS price > 100)
"""))[0]
    op = PatternOperator.from_rule(rule)
    empty = len(op.snapshot())
    rng = np.random.default_rng(0)
    n, keys = 100_000, 5_000
    op.ingest(pd.DataFrame({"k": rng.integers(0, keys, n), "ts": np.arange(n), "price": 100 + rng.normal(0, 1, n)}), 0)
    op.advance_to(n + 10_000)
    per_key = (len(op.snapshot()) - empty) / op.key_count()
    assert per_key < 200, per_key


# ------------------------------------------------------------------ output schemas


def test_measure_types_follow_the_expression() -> None:
    mr = list(parse_rules(RULES_YAML))[0].compiled.statement
    assert pattern_output_fields(mr, TYPES) == [
        ("k", "string"), ("t0", "bigint"), ("t1", "bigint"), ("nb", "bigint"), ("avg_px", "double"),
        ("tag", "string"), ("rule", "string")]
    all_rows = list(parse_rules(RULES_YAML))[1].compiled.statement
    assert [n for n, _ in pattern_output_fields(all_rows, TYPES)] == ["k", "ts", "cls", "mn", "n", "px", "tag", "rule"]
    glob = list(parse_rules(RULES_YAML))[2].compiled.statement
    assert dict(pattern_output_fields(glob, TYPES))["gap"] == "bigint"


@pytest.mark.parametrize("expr,typ", [
    ("SUM(A.px)", "bigint"), ("SUM(A.f)", "double"), ("MIN(A.tag)", "string"), ("A.px / 2", "double"),
    ("A.px * 2", "bigint"), ("ROUND(A.f, 1)", "double"), ("ROUND(A.px)", "bigint"), ("FLOOR(A.f)", "bigint"),
    ("A.px > 1", "boolean"), ("UPPER(A.tag)", "string"), ("CASE WHEN A.px > 1 THEN 1 ELSE 2.5 END", "double"),
    ("COALESCE(A.tag, 'x')", "string"), ("LAST(A.at)", "timestamp"), ("A.at + 1000", "bigint"),
    ("A.px || 'x'", "string"), ("MATCH_NUMBER()", "bigint"), ("A.nope", "string"),
])
def test_expression_types(expr: str, typ: str) -> None:
    rule = parse_rules(f"""
rules:
  - name: r
    sql: SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts MEASURES {expr} AS m PATTERN (A+) DEFINE A AS px > 0)
""").rules[0]
    types = {"px": "int", "f": "double", "tag": "string", "at": "timestamp", "ts": "bigint"}
    assert expr_type(rule.compiled.statement.measures[0].expr, types) == typ


def test_envelope_renames_a_column_two_rules_type_differently_and_refuses_reserved_names() -> None:
    env = Envelope.build({"a": ("pattern", [("x", "bigint")]), "b": ("pattern", [("x", "string"), ("output", "string")])})
    assert env.columns_of("b") == [("x", "x__b", "string"), ("output", "output__b", "string")]
    with pytest.raises(ValueError, match="reserved prefix '_cep_'"):
        Envelope.build({"a": ("pattern", [("_cep_x", "bigint")])})


def test_a_value_that_does_not_fit_its_type_is_null_and_reported() -> None:
    core, env = core_for(RULES[:1], buckets=1)
    spec = core.specs["within"]
    from cep.operator import OperatorOutput

    out = OperatorOutput(matches=[{"k": "a", "t0": "soon", "t1": 5, "rule": "within"}])
    frame = core._frame(spec, out)
    assert frame["t0"].tolist() == [None, None] and frame["t1"].tolist()[0] == 5
    assert "output column 't0': 'soon' is not a bigint; written as NULL" in frame["reason"].tolist()[1]


@pytest.mark.parametrize("module", [spark_udf.core, spark_udf.schema, spark_udf.state])
def test_doctests(module) -> None:
    res = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert res.failed == 0


SQL2016_YAML = """
rules:
  - name: next_define
    lateness: 1500
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, LAST(A.ts) AS t1, PREV(LAST(A.px), 1) AS before
        PATTERN (A+) DEFINE A AS px < NEXT(px) AND NEXT(px, 2) IS NOT NULL)
  - name: unmatched
    lateness: 1500
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES MATCH_NUMBER() AS mn, CLASSIFIER() AS cls
        ALL ROWS PER MATCH WITH UNMATCHED ROWS
        PATTERN (^ A B | A B+ C) DEFINE A AS px < 4, B AS px > PREV(px), C AS px < PREV(px))
"""


@pytest.mark.parametrize("seed,buckets,chunk", [(1, 1, 1000), (2, 3, 3), (3, 4, 1)])
def test_next_in_define_unmatched_rows_and_anchors_give_the_embedded_engines_rows(seed, buckets, chunk) -> None:
    """Rows held back for NEXT live in the saved state between micro-batches."""
    rules = list(parse_rules(SQL2016_YAML))
    files = stream(seed, files=5, bad=False)
    core, env = core_for(rules, buckets=buckets)
    frame, *_ = run_stream(core, rules, [events(r) for r in files], COLUMNS, buckets, chunk=chunk)
    exp = workload.embedded(rules, files)
    got = as_rule_rows(frame, env)
    assert got == Counter(match_key(m) for m in exp.matches)
    assert sum(1 for m in exp.matches if m["rule"] == "unmatched" and m["mn"] is not None) > 3
    assert sum(1 for m in exp.matches if m["rule"] == "next_define") > 3
    assert sum(1 for m in exp.matches if m["rule"] == "unmatched" and m["mn"] is None) > 20


@pytest.mark.parametrize("rule", [
    "  - name: r\n    sql: |\n      SELECT * FROM p JOIN accounts FOR SYSTEM_TIME AS OF p.ts ON p.a = accounts.id\n"
    "      MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS tier = 'gold')\n",
    "  - {name: r, kind: search, from: p, time_field: ts, join: {table: accounts, on: a}, query: gold}\n",
])
def test_a_joined_rule_without_its_tables_is_refused_on_spark(rule):
    """A plain list of rules has no tables: section; the rule (pattern or search) is refused rather than
    run without its table."""
    from patterns.errors import CepError
    from patterns.rules import parse_rules
    from spark_udf.api import apply_rules

    rules = parse_rules("tables:\n  - {name: accounts, from: changes, primary_key: id, columns: [tier], "
                        "time_field: ts}\nrules:\n" + rule)
    with pytest.raises(CepError, match="rule 'r' joins table 'accounts', which the rules do not declare"):
        apply_rules(None, list(rules))  # type: ignore[arg-type]


_VIEW_FILE = ("tables:\n  - {name: a, from: ca, primary_key: id, columns: [b], time_field: ts}\n"
              "  - {name: b, from: cb, primary_key: id, columns: [x], time_field: ts}\n"
              "views:\n  - {name: ab, sql: SELECT b.x FROM a JOIN b ON a.b = b.id}\nrules:\n")
_JOINING_AB = ("  - name: %s\n    sql: |\n      SELECT * FROM p JOIN ab FOR SYSTEM_TIME AS OF p.ts ON p.k = ab.id\n"
               "      MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts PATTERN (A) DEFINE A AS x > 1)\n")


@pytest.mark.parametrize("rules, inputs, message", [
    ("  - {name: s, kind: search, from: p, query: gold}\n", ("p", "ca"),
     "view 'ab': a view runs on Spark in the keyed stage, beside a pattern, analytics or joined search rule"),
    (_JOINING_AB % "ab", ("p", "ca"), "view 'ab': a rule has the same name"),
    (_JOINING_AB % "r", ("p",), r"view 'ab': none of its tables' changelogs \(ca, cb\) is among the named inputs"),
])
def test_the_views_spark_cannot_hold_are_refused_before_any_work(rules, inputs, message):
    """A view runs on Spark in the keyed stage (docs/spark.md, "Views on Spark"); what that plan cannot hold
    is refused with the reason, before any input is looked at."""
    from patterns.errors import CepError
    from spark_udf.api import apply_rules

    with pytest.raises(CepError, match=message):
        apply_rules(dict.fromkeys(inputs), parse_rules(_VIEW_FILE + rules))  # type: ignore[arg-type]


def _segments_row_by_row(pdf: pd.DataFrame, seg_cols: tuple[str, ...], pid: int = 0) -> list[tuple[str, int, int]]:
    """Reference: runs of equal segment values found row by row (missing values equal each other),
    keyed by the first row's values and the partition as JSON (the key the arrival plan is built on)."""
    import json

    def same(a, b):
        return all((pd.isna(x) and pd.isna(y)) or (not pd.isna(x) and not pd.isna(y) and x == y) for x, y in zip(a, b))

    vals = list(zip(*[pdf[c].tolist() for c in seg_cols]))
    runs, start = [], 0
    for i in range(1, len(vals) + 1):
        if i == len(vals) or not same(vals[i], vals[start]):
            runs.append((json.dumps([*vals[start], pid], default=str), start, i))
            start = i
    return runs


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(["f/a.json", "f/b.json", None]), st.sampled_from([0, 4096, None])),
                min_size=1, max_size=40),
       st.sampled_from(["object", "str", "arrow"]))
def test_segments_are_the_runs_of_equal_segment_values(rows, dtype) -> None:
    """Runs found column by column are the runs a row-by-row reading finds, in any string dtype,
    missing values included (a run of them is one segment)."""
    from spark_udf.core import segments

    path = pd.Series([r[0] for r in rows], dtype={"object": object, "str": "string", "arrow": "string[pyarrow]"}[dtype])
    pdf = pd.DataFrame({"path": path, "block": pd.array([r[1] for r in rows], dtype="Int64")})
    assert segments(pdf, ("path", "block"), 3) == _segments_row_by_row(pdf, ("path", "block"), 3)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.one_of(st.none(), st.sampled_from(["2013-02-08", "2013-02-08T10:00:00Z", "1500", "now", "junk",
                                                      "2199-12-31", "1899-12-31", "20130208", ""])),
                min_size=1, max_size=30),
       st.sampled_from(["ms", "s"]))
def test_a_text_time_column_is_read_once_per_distinct_text_as_row_by_row(texts, unit) -> None:
    """Reading each distinct text once gives every row what reading the rows one by one gives:
    times, which are usable, and the reasons of those that are not (future guard included)."""
    from cep.events import FixedClock, parse_times
    from spark_udf.core import TimeReading

    clock = FixedClock(1_700_000_000_000)
    ms, ok, why = TimeReading(unit, 86_400_000, clock).read(pd.DataFrame({"ts": texts}), "ts")
    for i, t in enumerate(texts):
        m1, ok1, why1 = parse_times(np.array([t], dtype=object), unit, now_ms=clock(), max_future_skew_ms=86_400_000)
        assert (bool(ok[i]), why[i]) == (bool(ok1[0]), why1[0]), t
        if ok1[0]:
            assert ms[i] == m1[0], t
