"""The exact DEFINE rewrites (patterns/rewrite.py) and WITHIN on the batch DFA: same rows as the
unrewritten automaton and as the brute force, across cut batches and a snapshot in the middle."""

from __future__ import annotations

import random
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
import cep.nfa as nfa
from cep.explain.pattern import expr_sql
from cep.operator import PatternOperator
from patterns.match_recognize import parse_statement
from patterns.rewrite import fixed_length, rewrite_defines
from patterns.rules import parse_rule_text
from tests.reference import reference_matches
from tests.replay import replay

_HEAD = ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
         "MEASURES FIRST(ts) AS t0, LAST(ts) AS t1, MATCH_NUMBER() AS mn {skip} ")


def _sql(body: str, skip: str = "") -> str:
    return _HEAD.format(skip=skip) + body + ")"


def _rewritten(body: str) -> dict[str, str]:
    cp = parse_rule_text(_sql(body)).compiled
    return {cp.program.var_names[v]: expr_sql(e) for v, e in rewrite_defines(cp).items()}


def test_last_of_the_variable_just_before_is_prev():
    """Each rewrite where the row before is always the named variable's, and none elsewhere."""
    assert _rewritten("PATTERN (R{3} D) DEFINE R AS R.x > PREV(R.x), D AS D.x < LAST(R.x) * 0.9") == {
        "R": "R.x > PREV(R.x)", "D": "D.x < PREV(D.x) * 0.9"}
    # B follows A or B: LAST(A.x) is not the row before; C follows only B
    assert _rewritten("PATTERN (A B+ C) DEFINE B AS x > A.x, C AS C.x > LAST(B.x + 1)") == {
        "B": "x > A.x", "C": "C.x > PREV(C.x + 1)"}
    # a subset: D follows B or C, both in U
    assert _rewritten("PATTERN (A (B | C) D) SUBSET U = (B, C) DEFINE D AS x > LAST(U.x)") == {"D": "x > PREV(D.x)"}
    # B? may be skipped: C follows A or B
    assert _rewritten("PATTERN (A B? C) DEFINE C AS C.x > LAST(A.x)") == {"C": "C.x > LAST(A.x)"}
    # a variable that can start the match has no row before it in the match
    assert _rewritten("PATTERN ((A | B) A) DEFINE A AS A.x > B.x") == {"A": "A.x > B.x"}
    # FIRST, PREV of another variable, aggregates and LAST with an offset keep their meaning
    body = "PATTERN (A B) DEFINE B AS B.x > FIRST(A.x) AND B.x > PREV(A.x) AND B.x > SUM(A.x) AND B.x > LAST(A.x, 1)"
    assert _rewritten(body)["B"] == "B.x > FIRST(A.x) AND B.x > PREV(A.x) AND B.x > SUM(A.x) AND B.x > LAST(A.x, 1)"
    # rows skipped by ANY come between
    cp = parse_rule_text(_sql("PATTERN (A ANY B) WITHIN INTERVAL '5' SECOND DEFINE B AS B.x > A.x",
                              "AFTER MATCH NO SKIP")).compiled
    assert expr_sql(rewrite_defines(cp)[cp.var_ids["B"]]) == "B.x > A.x"


def test_fixed_length():
    def n(p: str) -> int | None:
        return fixed_length(parse_statement(_sql(f"PATTERN ({p}) DEFINE A AS x > 1")).pattern)

    assert [n("A"), n("A{3} B"), n("(A B | B A) C"), n("PERMUTE(A, B) {- C -}"), n("A{2,3}"), n("A B+"),
            n("A | A B"), n("A NOT B")] == [1, 4, 3, 3, None, None, None, None]


# ------------------------------------------------------------------ differential

def _last(asg: tuple, names: set[str], xs: list[int]) -> int | None:
    for r, v, _ in reversed(asg):
        if v in names:
            return xs[r]
    return None


def _prev_up(xs: list[int], i: int, a: tuple, d: int) -> bool:
    return i > 0 and xs[i] > xs[i - 1]


Cond = Callable[[list, int, tuple, int], bool]  # (values, row, assignment so far, threshold)

# (pattern and DEFINE, the brute force's conditions, fixed length): each reads LAST of another
# variable; the ones marked rewritten become row-local
TEMPLATES: dict[str, tuple[str, dict[str, Cond]]] = {
    "rise_drop": (  # rewritten: D always follows R
        "PATTERN (R{{{n}}} D) {within} DEFINE R AS R.x > PREV(R.x), D AS D.x < LAST(R.x) - {d}",
        {"R": _prev_up, "D": lambda xs, i, a, d: (v := _last(a, {"R"}, xs)) is not None and xs[i] < v - d}),
    "kleene_then_last": (  # C rewritten; B not (B follows A or B)
        "PATTERN (A B+ C) {within} DEFINE A AS A.x > {d}, B AS B.x >= A.x, C AS C.x < LAST(B.x)",
        {"A": lambda xs, i, a, d: xs[i] > d, "B": lambda xs, i, a, d: xs[i] >= _last(a, {"A"}, xs),
         "C": lambda xs, i, a, d: xs[i] < _last(a, {"B"}, xs)}),
    "subset": (  # rewritten through the subset
        "PATTERN (A (B | C) D) {within} SUBSET U = (B, C) DEFINE A AS A.x > {d}, B AS B.x < PREV(B.x), "
        "C AS C.x > 6, D AS D.x > LAST(U.x)",
        {"A": lambda xs, i, a, d: xs[i] > d, "B": lambda xs, i, a, d: i > 0 and xs[i] < xs[i - 1],
         "C": lambda xs, i, a, d: xs[i] > 6, "D": lambda xs, i, a, d: xs[i] > _last(a, {"B", "C"}, xs)}),
    "excluded": (  # rewritten: an excluded row is still the row before
        "PATTERN (A {{- B -}} C) {within} DEFINE A AS A.x > {d}, B AS B.x > PREV(B.x), C AS C.x < B.x",
        {"A": lambda xs, i, a, d: xs[i] > d, "B": _prev_up, "C": lambda xs, i, a, d: xs[i] < _last(a, {"B"}, xs)}),
    "optional_between": (  # not rewritten: C follows A or B
        "PATTERN (A B? C) {within} DEFINE A AS A.x > {d}, B AS B.x > 7, C AS C.x > LAST(A.x)",
        {"A": lambda xs, i, a, d: xs[i] > d, "B": lambda xs, i, a, d: xs[i] > 7,
         "C": lambda xs, i, a, d: xs[i] > _last(a, {"A"}, xs)}),
}


def _make(sql: str, rewrite: bool, **opts: Any) -> Callable[[], PatternOperator]:
    compiled = parse_rule_text(sql).compiled

    def make() -> PatternOperator:
        old = nfa.REWRITE_CONDITIONS
        nfa.REWRITE_CONDITIONS = rewrite
        try:
            return PatternOperator(compiled, name="r", **opts)
        finally:
            nfa.REWRITE_CONDITIONS = old

    return make


def _rows(sql: str, events: list[dict], cuts: list[int], restore_at: int | None, batch: bool,
          rewrite: bool) -> tuple[list[dict], Any]:
    old = batch_dfa.USE_BATCH_DFA
    batch_dfa.USE_BATCH_DFA = batch
    try:
        return replay(_make(sql, rewrite), events, cuts, restore_at)
    finally:
        batch_dfa.USE_BATCH_DFA = old


def _counters(op: PatternOperator) -> tuple:
    s = op.stats
    return (s.matches, s.rows_emitted, s.partial_matches_peak, s.cap_hits, s.partial_matches_dropped,
            op.counts.processed, op.key_count(), op.live_partial_matches())


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(TEMPLATES)), seed=st.integers(0, 10_000), keys=st.integers(1, 4),
       n=st.integers(200, 700), ncuts=st.integers(0, 10), snap=st.booleans(),
       reps=st.integers(1, 3), d=st.integers(0, 3), within=st.sampled_from([None, 3, 8, 20]))
def test_same_rows_as_unrewritten_automaton_and_brute_force(name, seed, keys, n, ncuts, snap, reps, d, within):
    """Rewritten (batch DFA where it fits) against unrewritten (the automaton, every key alone):
    rows in order, counters; per key, the brute force's matches (with WITHIN)."""
    body, conds = TEMPLATES[name]
    sql = _sql(body.format(n=reps, d=d, within=f"WITHIN INTERVAL '{within}' MILLISECOND" if within else ""))
    rnd = random.Random(seed)
    # times with gaps and ties across keys, so WITHIN ends some runs mid-way
    events, t = [], 0
    for _ in range(n):
        t += rnd.choice([0, 1, 1, 2, 5])
        events.append({"k": rnd.randrange(keys), "ts": t, "x": rnd.randrange(10)})
    cuts = sorted({rnd.randrange(1, n) for _ in range(ncuts)})
    restore_at = rnd.randrange(0, len(cuts) + 1) if snap else None
    fast, op_fast = _rows(sql, events, cuts, restore_at, True, True)
    same, op_same = _rows(sql, events, cuts, None, False, True)
    slow, op_slow = _rows(sql, events, cuts, None, False, False)
    # the batch DFA against the automaton on the rewritten rule: rows and every counter; against
    # the unrewritten rule: rows and matches (a rule that was not history-free counts its partial
    # matches as runs, not as start rows, so the peaks differ by what they count)
    assert fast == same == slow
    assert _counters(op_fast) == _counters(op_same)
    assert _counters(op_fast)[:2] == _counters(op_slow)[:2]
    stmt = parse_statement(sql)
    expected = []
    by_key: dict = {}
    for e in events:
        by_key.setdefault(e["k"], []).append(e)
    for k, evs in by_key.items():
        xs, ts = [e["x"] for e in evs], [e["ts"] for e in evs]

        def c(var: str, i: int, asg: tuple, xs: list = xs) -> bool:
            return conds[var](xs, i, asg, d)

        for asg in reference_matches(len(xs), stmt.pattern, c, stmt.skip.mode, ts=ts, within=within):
            expected.append((k, ts[asg[0][0]], ts[asg[-1][0]]))
    assert sorted((r["k"], r["t0"], r["t1"]) for r in fast) == sorted(expected)


def test_rise_drop_with_within_takes_the_batch_dfa():
    """The rule shape of issue 15 that took the automaton (LAST of another variable, WITHIN) now
    steps every key at once; a variable-length pattern with WITHIN still keeps the automaton."""
    fixed = _sql("PATTERN (R{2} D) WITHIN INTERVAL '10' MILLISECOND DEFINE R AS R.x > PREV(R.x), D AS D.x < LAST(R.x)")
    varying = _sql("PATTERN (R+ D) WITHIN INTERVAL '10' MILLISECOND DEFINE R AS R.x > PREV(R.x), D AS D.x < LAST(R.x)")
    rnd = random.Random(7)
    events = [{"k": i % 3, "ts": i, "x": rnd.randrange(10)} for i in range(300)]
    for sql, keyed in ((fixed, True), (varying, False)):
        _, op = _rows(sql, events, [100, 200], None, True, True)
        assert (op._keyed is not None) == keyed
        assert op.stats.matches > 0


@pytest.mark.parametrize("lateness", [0, 3])
def test_within_expiry_by_the_watermark(lateness):
    """Keys that stop sending: the watermark ends their runs (live partial matches drop to the
    automaton's figure between batches), and late rows are reported the same way."""
    sql = _sql("PATTERN (R{3} D) WITHIN INTERVAL '30' MILLISECOND DEFINE R AS R.x > PREV(R.x), D AS D.x < LAST(R.x)")
    rnd = random.Random(4)
    events = []
    for t in range(600):
        k = rnd.randrange(6) if t < 300 else rnd.randrange(2)  # keys 2..5 fall quiet
        events.append({"k": k, "ts": t - rnd.randrange(3), "x": rnd.randrange(10)})
    seen = []
    for batch in (True, False):
        old = batch_dfa.USE_BATCH_DFA
        batch_dfa.USE_BATCH_DFA = batch
        try:
            op = _make(sql, batch, lateness_ms=lateness)()
            got = []
            for lo in range(0, 600, 50):
                out = op.process(events[lo : lo + 50])
                got.append((out.matches, len(out.late), op.live_partial_matches(), op.key_count()))
            got.append((op.finish().matches, 0, op.live_partial_matches(), op.key_count()))
            assert (op._keyed is not None) == batch
        finally:
            batch_dfa.USE_BATCH_DFA = old
        seen.append(got)
    assert seen[0] == seen[1]
    assert any(live for _, _, live, _ in seen[0]) and sum(len(m) for m, *_ in seen[0]) > 5


def _without_mode(blob: bytes) -> bytes:
    """The snapshot as an engine from before the mode was saved wrote it (no "dfa" entry)."""
    import pickle

    state = pickle.loads(blob[1:])
    del state["dfa"]
    return blob[:1] + pickle.dumps(state, protocol=5)


@pytest.mark.parametrize("old_format", [False, True])
@pytest.mark.parametrize("written, read", [(False, True), (True, False)])
def test_restore_across_the_rewrite(monkeypatch, written, read, old_format):
    """A snapshot written with the rewrite off (an older engine: node chains) restores into an engine
    with it on (DFA states) and the other way round, with the rows of a run that never switched."""
    sql = ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES FIRST(ts) AS t0, LAST(ts) AS t1 "
           "PATTERN (R{3} D) DEFINE R AS R.x > PREV(R.x), D AS D.x < LAST(R.x))")
    rnd = random.Random(3)
    events = [{"k": i % 3, "ts": i, "x": rnd.randrange(10)} for i in range(400)]
    monkeypatch.setattr(batch_dfa, "USE_BATCH_DFA", False)  # the per-key automaton's own threads

    def op(rewrite: bool) -> PatternOperator:
        monkeypatch.setattr(nfa, "REWRITE_CONDITIONS", rewrite)
        return PatternOperator(parse_rule_text(sql).compiled, name="r")

    want, _ = replay(lambda: op(written), events, [201], None)
    first = op(written)
    assert first.automaton.dfa == written
    got = first.process(events[:201]).matches
    blob = first.snapshot()
    second = op(read)
    second.restore(_without_mode(blob) if old_format else blob)
    assert second.automaton.dfa == written  # steps on in the snapshot's mode
    got += second.process(events[201:]).matches + second.finish().matches
    assert got == want and len(want) == 6
    again = second.snapshot()  # and writes that mode, so a second restore agrees
    third = op(read)
    third.restore(again)
    assert third.automaton.dfa == written


def test_restore_refuses_partial_matches_of_a_form_no_setting_gives(monkeypatch):
    """A rule that is not a DFA with or without the rewrite cannot take a snapshot that says its
    partial matches are DFA states: a clear error naming the rule, not a crash later."""
    import pickle

    from cep.operator import StateVersionError

    sql = ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES FIRST(ts) AS t0 "
           "PATTERN (A B+) DEFINE B AS B.x > FIRST(A.x))")
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    assert not op.automaton.dfa
    op.process([{"k": 1, "ts": i, "x": i} for i in range(5)])
    blob = op.snapshot()
    state = pickle.loads(blob[1:])
    state["dfa"] = True
    other = PatternOperator(parse_rule_text(sql).compiled, name="r")
    with pytest.raises(StateVersionError, match="rule 'r': the snapshot's partial matches are DFA states"):
        other.restore(blob[:1] + pickle.dumps(state, protocol=5))
