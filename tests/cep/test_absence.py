"""Absence (``NOT B`` in PATTERN) and timed-out partial matches (``WITH TIMEOUT ROWS``).

Every property test checks the operator against the brute-force reference matcher
(``tests.reference.reference_outcomes``), which walks the pattern by backtracking and judges NOT by
looking at the partition's rows directly, with conditions written here in plain Python. Keys hold
hundreds of rows, batches are cut at random, the state is saved and restored midway, and the
output (rows and ``_id``) must not depend on any of it. Deadlines are driven by the watermark:
other keys' events move it, so a key that never sends another event still emits its absence.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.operator import PatternOperator
from patterns.errors import RuleError
from patterns.rules import parse_rule_text, parse_rules
from tests.reference import reference_outcomes
from tests.replay import replay

WITHIN_MS = 10_000

# name -> (PATTERN text, WITHIN?, history-dependent conditions?)
CASES = {
    "not_followed": ("A NOT B", True, False),
    "not_followed_greedy": ("A+ NOT B", True, False),
    "not_followed_any": ("A NOT (B | C)", True, False),
    "not_followed_history": ("A NOT B", True, True),
    "not_between": ("A NOT B C", False, False),
    "not_between_within": ("A NOT B C", True, False),
    "not_between_history": ("A NOT B C", True, True),
    "not_between_loop": ("A C* NOT B D", True, False),
    "then_absent": ("A C NOT B", True, False),
}


def sql_for(pattern: str, within: bool, history: bool, timeouts: bool, skip: str) -> str:
    b = "B.v = 1 AND B.w > A.w" if history else "B.v = 1"
    c = "C.v = 2 AND C.w >= A.w" if history else "C.v = 2"
    return (
        "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
        "MEASURES FIRST(i) AS first_i, LAST(i) AS last_i, COUNT(*) AS n, A.i AS a_i "
        + ("ONE ROW PER MATCH WITH TIMEOUT ROWS " if timeouts else "")
        + f"AFTER MATCH SKIP {skip} PATTERN ({pattern}) "
        + (f"WITHIN INTERVAL '{WITHIN_MS // 1000}' SECOND " if within else "")
        + "DEFINE " + ", ".join(d for v, d in [("A", "A AS A.v = 0"), ("B", f"B AS {b}"), ("C", f"C AS {c}"),
                                                 ("D", "D AS D.v = 3")] if v in pattern) + ")"
    )


def conditions(rows: list[dict], history: bool):
    """The DEFINE conditions again, in Python, over one key's rows (``asg``: rows to variables)."""

    def cond(var: str, i: int, asg) -> bool:
        r = rows[i]
        a_rows = [j for j, v, _ in asg if v == "A"]
        a_w = rows[a_rows[-1]]["w"] if a_rows else None
        if var == "A":
            return r["v"] == 0
        if var == "B":
            return r["v"] == 1 and (not history or (a_w is not None and r["w"] > a_w))
        if var == "C":
            return r["v"] == 2 and (not history or (a_w is not None and r["w"] >= a_w))
        if var == "D":
            return r["v"] == 3
        raise AssertionError(var)

    return cond


def make_events(seed: int, keys: int, per_key: int, values: int = 4) -> list[dict]:
    rnd = random.Random(seed)
    events = []
    for k in range(keys):
        t = rnd.randrange(0, 5_000)
        for i in range(per_key):
            t += rnd.choice((0, 1000, 2000, 3000, 7000))
            events.append({"k": f"K{k}", "ts": t, "v": rnd.randrange(values), "w": rnd.randrange(5), "i": i})
    events.sort(key=lambda e: e["ts"])  # stable: a key's rows keep their order
    return events


def expected(sql: str, events: list[dict], history: bool, within: bool, timeouts: bool, skip: str):
    """Per key, the reference's matches and time-outs as the operator's measures would show them."""
    mr = parse_rule_text(sql).compiled.statement
    by_key: dict[str, list[dict]] = {}
    for e in events:
        by_key.setdefault(e["k"], []).append(e)
    out = {}
    for k, rows in by_key.items():
        ts = [r["ts"] for r in rows]
        cond = conditions(rows, history)
        got = reference_outcomes(len(rows), mr.pattern, cond, ts, WITHIN_MS if within else 10**15,
                                 skip="PAST_LAST_ROW" if skip == "PAST LAST ROW" else "TO_NEXT_ROW")
        items = []
        for o in got:
            asg = o[1]
            first, last = asg[0][0], asg[-1][0]
            a_rows = [j for j, v, _ in asg if v == "A"]
            row = (first, last, len(asg), a_rows[-1] if a_rows else None)
            if o[0] == "match":
                items.append(("match", row))
            elif timeouts:
                items.append(("timeout", row, list(o[2]), ts[first] + WITHIN_MS))
        out[k] = items
    return out


def run(sql: str, events: list[dict], cuts: list[int], restore_at: int | None):
    """Feed ``events`` in batches cut at ``cuts``; snapshot and restore after batch ``restore_at``."""
    compiled = parse_rule_text(sql).compiled
    op = PatternOperator(compiled, name="r")
    op.row_ids = True
    matches, timeouts = [], []
    bounds = [0, *cuts, len(events)]
    for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        out = op.process(events[lo:hi])
        assert not out.late and not out.errors
        matches += out.matches
        timeouts += out.timeouts
        if b == restore_at:
            blob = op.snapshot()
            op = PatternOperator(compiled, name="r")
            op.row_ids = True
            op.restore(blob)
    out = op.finish()
    return matches + out.matches, timeouts + out.timeouts


def as_items(matches, timeouts):
    by_key: dict[str, list] = {}
    for r in matches:
        by_key.setdefault(r["k"], []).append((r["first_i"], ("match", (r["first_i"], r["last_i"], r["n"], r["a_i"]))))
    for r in timeouts:
        by_key.setdefault(r["k"], []).append(
            (r["first_i"], ("timeout", (r["first_i"], r["last_i"], r["n"], r["a_i"]), r["_waiting_for"], r["_deadline"]))
        )
    return {k: [x for _, x in sorted(v, key=lambda p: p[0])] for k, v in by_key.items()}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(sorted(CASES)),
    timeouts=st.booleans(),
    skip=st.sampled_from(["PAST LAST ROW", "TO NEXT ROW"]),
    seed=st.integers(0, 10**6),
    data=st.data(),
)
def test_against_the_reference_whatever_the_batching(case, timeouts, skip, seed, data):
    pattern, within, history = CASES[case]
    timeouts = timeouts and within
    sql = sql_for(pattern, within, history, timeouts, skip)
    events = make_events(seed, keys=3, per_key=data.draw(st.integers(60, 260), label="rows per key"))
    want = expected(sql, events, history, within, timeouts, skip)
    whole = run(sql, events, [], None)
    got = as_items(*whole)
    for k in want:
        assert got.get(k, []) == want[k], k
    # batches cut at random (one event at a time among them) and a restore midway: the same rows
    n = len(events)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, n - 1), max_size=12), label="cuts")))
    if data.draw(st.booleans(), label="one at a time"):
        cuts = list(range(1, n))
    restore_at = data.draw(st.integers(0, len(cuts)), label="restore after batch")
    again = run(sql, events, cuts, restore_at)
    key = lambda r: r["_id"]  # noqa: E731
    assert sorted(again[0], key=key) == sorted(whole[0], key=key)
    assert sorted(again[1], key=key) == sorted(whole[1], key=key)
    assert len({r["_id"] for r in whole[0] + whole[1]}) == len(whole[0]) + len(whole[1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_case_on_long_keys(case):
    """A fixed data set per case: both kinds of rows occur, and every one equals the reference's."""
    pattern, within, history = CASES[case]
    sql = sql_for(pattern, within, history, within, "PAST LAST ROW")
    events = make_events(7, keys=4, per_key=300)
    want = expected(sql, events, history, within, within, "PAST LAST ROW")
    got = as_items(*run(sql, events, list(range(50, len(events), 97)), 3))
    assert {k: got.get(k, []) for k in want} == want
    kinds = {kind for items in want.values() for kind, *_ in items}
    # after A, a pattern ending "A NOT B" only waits for its deadline: it matches or dies, never times out
    waits_for_a_row = within and pattern not in ("A NOT B", "A+ NOT B", "A NOT (B | C)")
    assert kinds == ({"match", "timeout"} if waits_for_a_row else {"match"})


def test_a_quiet_key_emits_its_absence_when_other_keys_move_the_watermark():
    sql = sql_for("A NOT B", True, False, False, "PAST LAST ROW")
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    assert op.process([{"k": "quiet", "ts": 1000, "v": 0, "w": 0, "i": 0}]).matches == []
    assert op.next_deadline() == 11_000
    # another key's events move the watermark; the quiet key never sends another event
    assert op.process([{"k": "busy", "ts": 10_999, "v": 3, "w": 0, "i": 0}]).matches == []
    out = op.process([{"k": "busy", "ts": 11_000, "v": 3, "w": 0, "i": 1}])
    assert [(r["k"], r["a_i"]) for r in out.matches] == [("quiet", 0)]
    assert op.next_deadline() is None
    # a host that knows the watermark (Spark) moves it without events
    op.ingest([{"k": "q2", "ts": 20_000, "v": 0, "w": 0, "i": 0}], late_before=0)
    assert op.advance_to(29_999).matches == []
    assert [r["k"] for r in op.advance_to(30_000).matches] == ["q2"]


def test_a_b_row_exactly_at_the_deadline_is_too_late():
    sql = sql_for("A NOT B", True, False, False, "PAST LAST ROW")
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    out = op.process([{"k": "x", "ts": 0, "v": 0, "w": 0, "i": 0}, {"k": "x", "ts": 10_000, "v": 1, "w": 0, "i": 1}])
    assert [r["a_i"] for r in out.matches] == [0]
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    out = op.process([{"k": "x", "ts": 0, "v": 0, "w": 0, "i": 0}, {"k": "x", "ts": 9_999, "v": 1, "w": 0, "i": 1}])
    assert out.matches == [] and op.finish().matches == []


def test_timeout_row_fields():
    sql = (
        "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS a_ts, B.ts AS b_ts, "
        "MATCH_NUMBER() AS m ONE ROW PER MATCH WITH TIMEOUT ROWS PATTERN (A B C) WITHIN INTERVAL '1' MINUTE "
        "DEFINE A AS v = 0, B AS v = 1, C AS v = 2)"
    )
    op = PatternOperator(parse_rule_text(sql).compiled, name="abc")
    op.row_ids = True
    op.process([{"k": 7, "ts": 5_000, "v": 0}, {"k": 7, "ts": 6_000, "v": 1}])
    out = op.advance_to(65_000)
    assert out.matches == []
    assert out.timeouts == [
        {"k": 7, "a_ts": 5_000, "b_ts": 6_000, "m": None, "rule": "abc", "_waiting_for": ["C"],
         "_deadline": 65_000, "_id": "abc:[7]:5000:timeout:0"}
    ]
    assert op.stats.timeouts == 1


def test_deadline_in_the_time_fields_unit():
    sql = (
        "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS a_ts "
        "ONE ROW PER MATCH WITH TIMEOUT ROWS PATTERN (A B) WITHIN INTERVAL '90' SECOND "
        "DEFINE A AS v = 0, B AS v = 1)"
    )
    op = PatternOperator(parse_rule_text(sql).compiled, name="r", time_unit="s")
    op.process([{"k": 1, "ts": 100, "v": 0}])
    assert [r["_deadline"] for r in op.finish().timeouts] == [190]
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    op.process([{"k": 1, "ts": "2026-01-01T00:00:00Z", "v": 0}])
    assert [r["_deadline"] for r in op.finish().timeouts] == ["2026-01-01T00:01:30.000Z"]


@pytest.mark.parametrize(
    "pattern, tail, message",
    [
        ("NOT B A", "WITHIN INTERVAL '1' MINUTE", "cannot start with NOT"),
        ("A NOT B", "", "needs WITHIN"),
        ("(A NOT B C)+ D", "", "between the elements"),
        ("A (B | NOT C) D", "", "between the elements"),
        ("A NOT B NOT C D", "", "NOT (B | C)"),
        ("A NOT B B", "", "both required and forbidden"),
        ("A NOT E C", "", "NOT E needs a condition"),
        ("A NOT B*", "WITHIN INTERVAL '1' MINUTE", "takes no quantifier"),
    ],
)
def test_misplaced_not_is_a_clear_error(pattern, tail, message):
    sql = (
        "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS a "
        f"PATTERN ({pattern}) {tail} DEFINE A AS v = 0, B AS v = 1, C AS v = 2, D AS v = 3)"
    )
    with pytest.raises(Exception) as e:
        parse_rule_text(sql)
    assert message in str(e.value)


def test_not_variable_cannot_be_read():
    sql = (
        "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES B.ts AS b "
        "PATTERN (A NOT B C) DEFINE A AS v = 0, B AS v = 1, C AS v = 2)"
    )
    with pytest.raises(RuleError, match="MEASURES reads B, a NOT variable"):
        parse_rule_text(sql)


def test_timeout_rows_need_within():
    sql = (
        "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS a "
        "ONE ROW PER MATCH WITH TIMEOUT ROWS PATTERN (A B) DEFINE A AS v = 0, B AS v = 1)"
    )
    with pytest.raises(RuleError, match="WITH TIMEOUT ROWS needs WITHIN"):
        parse_rule_text(sql)


def test_show_timeout_matches_is_the_same_clause():
    base = ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS a ONE ROW PER MATCH {} "
            "PATTERN (A B) WITHIN INTERVAL '1' SECOND DEFINE A AS v = 0, B AS v = 1)")
    for clause in ("WITH TIMEOUT ROWS", "SHOW TIMEOUT MATCHES"):
        op = PatternOperator(parse_rule_text(base.format(clause)).compiled, name="r")
        op.process([{"k": 1, "ts": 0, "v": 0}])
        assert [r["a"] for r in op.finish().timeouts] == [0]


# ------------------------------------------------------------------ the column-wise path

def run_with(monkeypatch, use_path: bool, sql: str, events, cuts, restore_at, **kw):
    import cep.absence

    monkeypatch.setattr(cep.absence, "USE_ABSENCE_PATH", use_path)
    compiled = parse_rule_text(sql).compiled

    def make() -> PatternOperator:
        op = PatternOperator(compiled, name="r", **kw)
        op.row_ids = True
        return op

    rows, op = replay(make, events, cuts, restore_at)
    assert (op._fast is not None) == use_path
    return sorted(rows, key=lambda r: r["_id"]), op.stats


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("cap, on_cap", [(10_000, "drop_oldest"), (3, "drop_oldest"), (2, "skip_key")])
def test_column_wise_path_equals_the_automaton(monkeypatch, seed, cap, on_cap):
    rnd = random.Random(seed)
    skip = rnd.choice(["PAST LAST ROW", "TO NEXT ROW"])
    pattern = rnd.choice(["A NOT B", "A NOT (B | C)"])
    sql = (
        "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
        "MEASURES A.i AS a_i, A.ts AS a_ts, MATCH_NUMBER() AS m, CLASSIFIER() AS c, COUNT(*) AS n "
        f"AFTER MATCH SKIP {skip} PATTERN ({pattern}) WITHIN INTERVAL '10' SECOND "
        "DEFINE A AS A.v = 0, B AS B.v = 1" + (", C AS C.v = 2)" if "C" in pattern else ")")
    )
    # few values, so one key often has several A rows waiting at once (the cap is reached)
    events = make_events(seed, keys=4, per_key=250, values=3 if seed % 2 else 5)
    cuts = sorted(rnd.sample(range(1, len(events)), 15))
    restore_at = rnd.randrange(len(cuts))
    kw = dict(max_partial_matches=cap, on_cap=on_cap)
    fast, fs = run_with(monkeypatch, True, sql, events, cuts, restore_at, **kw)
    slow, ss = run_with(monkeypatch, False, sql, events, cuts, restore_at, **kw)
    assert fast == slow
    assert fs.matches == ss.matches == len(fast) > 0
    assert fs.partial_matches_dropped == ss.partial_matches_dropped
    if cap < 10:
        assert ss.cap_hits > 0  # the cap was really exercised


def test_column_wise_path_fires_on_the_watermark(monkeypatch):
    import cep.absence

    monkeypatch.setattr(cep.absence, "USE_ABSENCE_PATH", True)
    sql = sql_for("A NOT B", True, False, False, "PAST LAST ROW")
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    op.process([{"k": "quiet", "ts": 1000, "v": 0, "w": 0, "i": 0}, {"k": "x", "ts": 1000, "v": 0, "w": 0, "i": 0}])
    assert op._fast is not None and op.next_deadline() == 11_000 and op.live_partial_matches() == 2
    op.process([{"k": "x", "ts": 5000, "v": 1, "w": 0, "i": 1}])  # x's B ends its wait
    assert op.live_partial_matches() == 1
    out = op.process([{"k": "busy", "ts": 11_000, "v": 3, "w": 0, "i": 0}])
    assert [(r["k"], r["a_i"]) for r in out.matches] == [("quiet", 0)]
    assert op.next_deadline() is None and op.finish().matches == []


TIE_RULES = """rules:
  - name: r
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0 ONE ROW PER MATCH WITH TIMEOUT ROWS
        AFTER MATCH SKIP PAST LAST ROW PATTERN (A X*? B) WITHIN INTERVAL '10' MILLISECOND
        DEFINE A AS t = 'A', B AS t = 'B')
"""


@pytest.mark.parametrize("restore", [None, "snapshot", "snapshot without the deadline heap"])
def test_deadlines_that_tie_fire_in_the_same_order_after_a_restore(restore):
    # x's deadline at 15 was pushed before y's at 15 (x's first partial match ended first and its
    # next one was watched then); a restore that rebuilt the heap key by key would put x first
    import pickle

    from cep import Engine
    from cep.safe_pickle import loads as safe_loads

    first = [dict(ts=0, k="x", t="A"), dict(ts=5, k="x", t="A"), dict(ts=5, k="y", t="A"), dict(ts=12, k="z", t="C")]
    engine = Engine(parse_rules(TIE_RULES))
    got = [(r["k"], r["t0"]) for r in engine.process(first).timeouts]
    if restore is not None:
        snap = engine.snapshot()
        if restore == "snapshot without the deadline heap":  # as written before the heap was kept
            state = safe_loads(snap[7:], "engine snapshot")
            blob = state["rules"]["r"]
            op_state = pickle.loads(blob[1:])
            del op_state["deadlines"]
            state["rules"]["r"] = blob[:1] + pickle.dumps(op_state, protocol=5)
            snap = snap[:7] + pickle.dumps(state, protocol=5)
        engine = Engine(parse_rules(TIE_RULES))
        engine.restore(snap)
    got += [(r["k"], r["t0"]) for r in engine.process([dict(ts=20, k="z", t="C")]).timeouts]
    got += [(r["k"], r["t0"]) for r in engine.finish().timeouts]
    assert sorted(got) == [("x", 0), ("x", 5), ("y", 5)]  # an old snapshot still loads and loses nothing
    if restore != "snapshot without the deadline heap":
        assert got == [("x", 0), ("y", 5), ("x", 5)]
