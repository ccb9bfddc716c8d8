"""The rest of SQL:2016 against the brute-force reference: NEXT in DEFINE, WITH UNMATCHED ROWS,
anchors ``^`` / ``$`` and navigation nested in navigation.

Every property test runs the engine three ways, in one batch, in random chunks with a snapshot and
restore in the middle, and one event at a time, and compares each key's rows, in order, with
:func:`tests.reference.reference_rows` (which sees the whole partition, so ``NEXT`` there is a
plain look at a later row). Short keys with random patterns exercise the automaton's corners;
keys of hundreds of rows with fixed patterns exercise batch cuts past the 64-row runs and the
rows held back for ``NEXT``.

A pattern whose partial matches can multiply with every row (``(A|B)+`` where both can take a row
and a condition is not row-local; :func:`patterns.growth.find_growth`) gets a default work budget
that drops runs and may change the answer (docs/reliability.md, "Work per event"). The comparisons
run such a rule with a budget no key reaches, and check the default budget apart: it gives the
reference's rows unless it dropped partial matches.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cep.operator import PatternOperator
from patterns import ast as A
from patterns.compiler import nullable
from patterns.rules import parse_rule_text
from tests.reference import reference_rows

VARS = ["A", "B", "C"]


# ------------------------------------------------------------------ conditions, twice: SQL and Python


def _rows_of(asg, var):
    return [r for r, v, _ in asg if v == var]


def _next_of_first_a(i, asg, xs):
    first = _rows_of(asg, "A")
    if not first or first[0] + 1 >= len(xs):
        return None
    return xs[first[0] + 1]


def _prev_of_last_1(V, i, asg, xs):
    rows = _rows_of(asg, V)  # the current row is the last of them (RUNNING)
    if len(rows) < 2 or rows[-2] - 1 < 0:
        return None
    return xs[rows[-2] - 1]


CONDITIONS = [
    # (sql for variable V, python cond(V, i, asg, xs)); asg includes row i mapped to V
    ("{V}.x < 3", lambda V, i, asg, xs: xs[i] < 3),
    ("{V}.x >= 2", lambda V, i, asg, xs: xs[i] >= 2),
    (None, lambda V, i, asg, xs: True),
    ("{V}.x < NEXT({V}.x)", lambda V, i, asg, xs: i + 1 < len(xs) and xs[i] < xs[i + 1]),
    ("NEXT({V}.x, 2) = 0", lambda V, i, asg, xs: i + 2 < len(xs) and xs[i + 2] == 0),
    ("NEXT(x) IS NULL OR NEXT(x) > 2", lambda V, i, asg, xs: i + 1 >= len(xs) or xs[i + 1] > 2),
    ("{V}.x <> NEXT(FIRST(A.x), 1)",
     lambda V, i, asg, xs: (n := _next_of_first_a(i, asg, xs)) is not None and xs[i] != n),
    ("{V}.x >= PREV(LAST({V}.x, 1))",
     lambda V, i, asg, xs: (p := _prev_of_last_1(V, i, asg, xs)) is not None and xs[i] >= p),
    ("COUNT(*) < 5", lambda V, i, asg, xs: len(asg) < 5),
    ("{V}.x > PREV(LAST({V}.x))", lambda V, i, asg, xs: i > 0 and xs[i] > xs[i - 1]),
]
NEEDS_A = {6}  # conditions that name A


def pattern_text(p: A.Pattern) -> str:
    if isinstance(p, A.PVar):
        return p.name
    if isinstance(p, A.PAnchor):
        return p.kind
    if isinstance(p, A.PSeq):
        return " ".join(f"({pattern_text(i)})" if isinstance(i, A.PAlt) else pattern_text(i) for i in p.items)
    if isinstance(p, A.PAlt):
        return " | ".join(pattern_text(o) for o in p.options)
    if isinstance(p, A.PExclude):
        return "{- " + pattern_text(p.item) + " -}"
    assert isinstance(p, A.PQuant)
    q = {(0, None): "*", (1, None): "+", (0, 1): "?", (1, 3): "{1,3}", (2, 2): "{2}"}[(p.low, p.high)]
    inner = pattern_text(p.item) if isinstance(p.item, A.PVar) else f"({pattern_text(p.item)})"
    return inner + q + ("" if p.greedy else "?")


def _vars(p: A.Pattern) -> set[str]:
    if isinstance(p, A.PVar):
        return {p.name}
    if isinstance(p, (A.PSeq, A.PAlt)):
        return set().union(*(_vars(x) for x in (p.items if isinstance(p, A.PSeq) else p.options)))
    if isinstance(p, (A.PQuant, A.PExclude)):
        return _vars(p.item)
    return set()


def _has_exclusion(p: A.Pattern) -> bool:
    if isinstance(p, A.PExclude):
        return True
    if isinstance(p, (A.PSeq, A.PAlt)):
        return any(_has_exclusion(x) for x in (p.items if isinstance(p, A.PSeq) else p.options))
    if isinstance(p, A.PQuant):
        return _has_exclusion(p.item)
    return False


def patterns(depth: int = 2):
    var = st.sampled_from(VARS).map(A.PVar)
    if depth == 0:
        return var
    sub = patterns(depth - 1)
    quants = st.sampled_from([(0, None), (1, None), (0, 1), (1, 3), (2, 2)])
    return st.one_of(
        var,
        st.lists(sub, min_size=2, max_size=3).map(lambda xs: A.PSeq(tuple(xs))),
        st.lists(sub, min_size=2, max_size=2).map(lambda xs: A.PAlt(tuple(xs))),
        st.tuples(sub.filter(lambda x: not nullable(x)), quants, st.booleans()).map(
            lambda t: A.PQuant(t[0], t[1][0], t[1][1], t[2])
        ),
        sub.filter(lambda x: not nullable(x)).map(A.PExclude),
    )


BEGIN, END = A.PAnchor("^"), A.PAnchor("$")


def anchored(p: A.Pattern, q: A.Pattern, how: str) -> A.Pattern:
    """``p`` with anchors placed as ``how`` says (``q`` a second pattern for alternatives)."""
    return {
        "none": p,
        "^p": A.PSeq((BEGIN, p)),
        "p$": A.PSeq((p, END)),
        "^p$": A.PSeq((BEGIN, p, END)),
        "(^p|q)": A.PAlt((A.PSeq((BEGIN, p)), q)),
        "p($|q)": A.PSeq((p, A.PAlt((END, q)))),
        "(p$|q)": A.PAlt((A.PSeq((p, END)), q)),
    }[how]


HOW = ["none", "^p", "p$", "^p$", "(^p|q)", "p($|q)", "(p$|q)"]
SKIPS = {
    "PAST_LAST_ROW": "AFTER MATCH SKIP PAST LAST ROW",
    "TO_NEXT_ROW": "AFTER MATCH SKIP TO NEXT ROW",
    "TO_LAST": "AFTER MATCH SKIP TO LAST B",
}


def build_sql(pattern: A.Pattern, conds: dict[str, int], skip: str, within: int | None, unmatched: bool) -> str:
    defines = [f"{v} AS {CONDITIONS[c][0].format(V=v)}" for v, c in sorted(conds.items()) if CONDITIONS[c][0]]
    rows = "ALL ROWS PER MATCH WITH UNMATCHED ROWS" if unmatched else "ALL ROWS PER MATCH"
    within_sql = f" WITHIN INTERVAL '{within}' MILLISECOND" if within else ""
    return (
        "SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
        f"MEASURES CLASSIFIER() AS cls, MATCH_NUMBER() AS mn {rows} {SKIPS[skip]} "
        f"PATTERN ({pattern_text(pattern)}){within_sql} "
        + (f"DEFINE {', '.join(defines)}" if defines else "")
        + ")"
    )


# the work budget of a rule whose runs can multiply: more partial matches than any key here holds
NO_BUDGET = 1_000_000


def exact_budget(sql: str) -> int | None:
    """``max_steps_per_event`` that leaves the rule exact: None (no budget by default) unless the
    check flags its runs as multiplying, which gives it a default budget that drops runs."""
    return None if PatternOperator(parse_rule_text(sql).compiled).automaton.growth is None else NO_BUDGET


def feed(sql: str, events: list[dict], cuts: list[int] | None, restore_at: int | None = None,
         ttl: int | None = None, budget: int | None = None) -> list[dict]:
    """Events in batches cut at ``cuts`` (None: one batch); snapshot and restore after batch
    ``restore_at``; then the end of input. ``budget``: the rule's ``max_steps_per_event``."""
    rule = parse_rule_text(sql)

    def make():
        op = PatternOperator(rule.compiled, name="r", max_steps_per_event=budget)
        op.row_ids = True
        op.idle_state_ttl_ms = ttl
        return op

    op = make()
    out: list[dict] = []
    bounds = [0, *(cuts or []), len(events)]
    for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        out += op.process(events[lo:hi]).matches
        if b == restore_at:
            blob = op.snapshot()
            op = make()
            op.restore(blob)
    return out + op.finish().matches


def engine_sequence(rows: list[dict], key) -> list[tuple]:
    return [(r["mn"], r["i"], r["cls"]) for r in rows if r["k"] == key]


def reference_sequence(pattern, conds, skip, xs, ts, within, end_time, unmatched) -> list[tuple]:
    def cond(V, i, asg):
        return CONDITIONS[conds[V]][1](V, i, asg, xs)

    out, number = [], 0
    for kind, x in reference_rows(len(xs), pattern, cond, skip, {"B"}, ts, within, end_time, unmatched):
        if kind == "unmatched":
            out.append((None, x, None))
            continue
        number += 1
        out += [(number, i, v) for i, v, excl in x if not excl]  # type: ignore[union-attr]
    return out


def events_for(keys: list[list[int]], spacing: int = 2) -> tuple[list[dict], list[list[int]]]:
    events, tss = [], []
    for k, xs in enumerate(keys):
        ts = [i * spacing + k for i in range(len(xs))]
        tss.append(ts)
        events += [{"k": k, "ts": t, "x": x, "i": i} for i, (t, x) in enumerate(zip(ts, xs))]
    events.sort(key=lambda e: e["ts"])
    return events, tss


def random_cuts(rnd: random.Random, n: int, sizes: list[int]) -> list[int]:
    cuts, at = [], 0
    while True:
        at += rnd.choice(sizes)
        if at >= n:
            return cuts
        cuts.append(at)


def check_all_batchings(sql, events, want_by_key, rnd, sizes, ttl=None):
    """One batch, random chunks with a restore in the middle, one at a time: the reference's rows,
    and the very same rows (``_id`` included) every way."""
    cuts = random_cuts(rnd, len(events), sizes)
    budget = exact_budget(sql)
    runs = {
        "one batch": feed(sql, events, None, ttl=ttl, budget=budget),
        "chunks": feed(sql, events, cuts, restore_at=len(cuts) // 2 if cuts else None, ttl=ttl, budget=budget),
        "one at a time": feed(sql, events, list(range(1, len(events))), restore_at=len(events) // 3, ttl=ttl,
                              budget=budget),
    }
    for how, rows in runs.items():
        for key, want in want_by_key.items():
            assert engine_sequence(rows, key) == want, (how, sql, key, cuts)
    ids = {how: sorted(r["_id"] for r in rows) for how, rows in runs.items()}
    assert ids["one batch"] == ids["chunks"] == ids["one at a time"]
    assert len(set(ids["one batch"])) == len(ids["one batch"])
    if budget is not None:
        # the default budget: the same rows unless it dropped partial matches (and said so)
        op = PatternOperator(parse_rule_text(sql).compiled, name="r")
        op.row_ids = True
        op.idle_state_ttl_ms = ttl
        rows = op.process(events).matches + op.finish().matches
        if op.stats.budget_dropped == 0:
            assert sorted(r["_id"] for r in rows) == ids["one batch"], sql
            for key, want in want_by_key.items():
                assert engine_sequence(rows, key) == want, ("default budget", sql, key)


# ------------------------------------------------------------------ random patterns, short keys


@st.composite
def short_cases(draw):
    p = draw(patterns().filter(lambda x: not nullable(x)))
    q = draw(patterns().filter(lambda x: not nullable(x)))
    how = draw(st.sampled_from(HOW))
    pattern = anchored(p, q, how)
    unmatched = draw(st.booleans())
    if unmatched and _has_exclusion(pattern):
        unmatched = False
    present = _vars(pattern)
    conds = {}
    for v in sorted(present):
        c = draw(st.integers(0, len(CONDITIONS) - 1))
        conds[v] = 2 if c in NEEDS_A and "A" not in present else c
    skip = draw(st.sampled_from(sorted(SKIPS)))
    if skip == "TO_LAST" and "B" not in present:
        skip = "TO_NEXT_ROW"
    within = draw(st.sampled_from([None, None, 5, 9]))
    keys = draw(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=12), min_size=1, max_size=3))
    seed = draw(st.integers(0, 2**32 - 1))
    return pattern, conds, skip, within, unmatched, keys, seed


# (A|B)+? $ over [0,0,0,0,0,0,1,2] with B AS B.x < NEXT(B.x): A and B both take rows 5 and 6, and
# B's condition is not row-local, so the runs of every start row double there and the default
# work budget dropped row 0's (the engine started the match at row 1). Found by this test.
RELUCTANT_ALT_END = A.PSeq((A.PQuant(A.PAlt((A.PVar("A"), A.PVar("B"))), 1, None, False), END))
BUDGET_XS = [0, 0, 0, 0, 0, 0, 1, 2]
# (A|B)+ $ with row-local conditions that both hold on every row: anchored, so not on the DFA path;
# its runs in one automaton state share their future and must be merged (12 rows made 2^12 runs
# per start row, the cap dropped the earliest, and the match started at row 2).
GREEDY_ALT_END = A.PSeq((A.PQuant(A.PAlt((A.PVar("A"), A.PVar("B"))), 1, None), END))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(short_cases())
@example((RELUCTANT_ALT_END, {"A": 0, "B": 3}, "PAST_LAST_ROW", None, False, [BUDGET_XS], 0))
@example((RELUCTANT_ALT_END, {"A": 0, "B": 3}, "PAST_LAST_ROW", None, True, [BUDGET_XS], 1))
@example((RELUCTANT_ALT_END, {"A": 0, "B": 8}, "TO_NEXT_ROW", 9, True, [BUDGET_XS, [1, 0, 2]], 2))
@example((GREEDY_ALT_END, {"A": 0, "B": 2}, "PAST_LAST_ROW", None, False, [[0] * 12], 3))
def test_random_patterns_match_the_reference_whatever_the_batching(case):
    pattern, conds, skip, within, unmatched, keys, seed = case
    sql = build_sql(pattern, conds, skip, within, unmatched)
    events, tss = events_for(keys)
    end_time = max(e["ts"] for e in events)
    want = {
        k: reference_sequence(pattern, conds, skip, xs, tss[k], within, end_time, unmatched)
        for k, xs in enumerate(keys)
    }
    check_all_batchings(sql, events, want, random.Random(seed), [1, 2, 3, 5, 8])


@pytest.mark.parametrize("unmatched", [False, True])
def test_reluctant_alternation_before_the_end_anchor_starts_at_the_first_row(unmatched):
    """``(A|B)+? $`` with ``NEXT`` in B's condition: the match starts at row 0, as the standard
    (and the reference) says; only the default work budget, which the check attaches to this
    pattern because its runs multiply where A and B overlap, may drop that start row, and then it
    counts what it dropped."""
    conds = {"A": 0, "B": 3}  # A AS A.x < 3, B AS B.x < NEXT(B.x): both hold on rows 5 and 6
    sql = build_sql(RELUCTANT_ALT_END, conds, "PAST_LAST_ROW", None, unmatched)
    events, tss = events_for([BUDGET_XS])
    want = reference_sequence(RELUCTANT_ALT_END, conds, "PAST_LAST_ROW", BUDGET_XS, tss[0], None, None, unmatched)
    # reluctant: the first row that can end a match at '$' is the last; A is preferred to B
    assert want == [(1, i, "A") for i in range(8)]
    assert PatternOperator(parse_rule_text(sql).compiled).automaton.growth is not None
    assert exact_budget(sql) == NO_BUDGET
    for cuts in (None, [1, 5, 6, 7], list(range(1, 8))):
        assert engine_sequence(feed(sql, events, cuts, budget=NO_BUDGET), 0) == want, cuts
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    op.row_ids = True
    got = engine_sequence(op.process(events).matches + op.finish().matches, 0)
    assert got == want or op.stats.budget_dropped > 0


@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("anchor", ["$", "^"])
def test_anchored_rules_without_history_merge_their_runs(greedy, anchor):
    """``(A|B)+ $`` and ``^ (A|B)+`` where A and B both hold on every row: the runs of a start row
    that reach one automaton state are one (their futures are the same; the preferred is kept),
    so a start row holds a few runs, not 2^n, and no cap cuts the match short."""
    loop = A.PQuant(A.PAlt((A.PVar("A"), A.PVar("B"))), 1, None, greedy)
    pattern = A.PSeq((loop, END) if anchor == "$" else (BEGIN, loop))
    conds = {"A": 0, "B": 2}  # A AS A.x < 3, B always
    xs = [0] * 40
    sql = build_sql(pattern, conds, "PAST_LAST_ROW", None, False)
    events, tss = events_for([xs])
    want = reference_sequence(pattern, conds, "PAST_LAST_ROW", xs, tss[0], None, None, False)
    # greedy: one match of every row from row 0 (with '$': a reluctant one too; with '^' the
    # reluctant loop stops after row 0)
    assert want == [(1, i, "A") for i in range(40 if greedy or anchor == "$" else 1)]
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    op.row_ids = True
    got = engine_sequence(op.process(events).matches + op.finish().matches, 0)
    assert got == want
    assert op.automaton.growth is None and not op.automaton.dfa
    assert op.stats.partial_matches_dropped == 0 and op.stats.cap_hits == 0
    assert op.stats.partial_matches_peak <= 3 * len(xs)  # a few runs per start row, not 2^n


# ------------------------------------------------------------------ fixed patterns, long keys

LONG = [
    # (pattern, its AST, conditions per variable) chosen so the reference stays polynomial
    ("A B+ C", A.PSeq((A.PVar("A"), A.PQuant(A.PVar("B"), 1, None), A.PVar("C")))),
    ("A+ B", A.PSeq((A.PQuant(A.PVar("A"), 1, None), A.PVar("B")))),
    ("A B*? C", A.PSeq((A.PVar("A"), A.PQuant(A.PVar("B"), 0, None, False), A.PVar("C")))),
    ("^ A+", A.PSeq((BEGIN, A.PQuant(A.PVar("A"), 1, None)))),
    ("A B+ $", A.PSeq((A.PVar("A"), A.PQuant(A.PVar("B"), 1, None), END))),
    ("A (B | $)", A.PSeq((A.PVar("A"), A.PAlt((A.PVar("B"), END))))),
]
LONG_CONDS = [0, 1, 2, 3, 4, 5, 7, 9]


@st.composite
def long_cases(draw):
    text, pattern = draw(st.sampled_from(LONG))
    present = _vars(pattern)
    conds = {v: draw(st.sampled_from(LONG_CONDS)) for v in sorted(present)}
    # at least one NEXT in DEFINE most of the time
    if draw(st.booleans()):
        conds[draw(st.sampled_from(sorted(present)))] = draw(st.sampled_from([3, 4, 5]))
    skip = draw(st.sampled_from(["PAST_LAST_ROW", "TO_NEXT_ROW"]))
    unmatched = draw(st.booleans())
    nkeys = draw(st.integers(1, 3))
    sizes = [draw(st.integers(64, 400)) for _ in range(nkeys)]
    seed = draw(st.integers(0, 2**32 - 1))
    return pattern, conds, skip, unmatched, sizes, seed


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(long_cases())
def test_long_keys_match_the_reference_whatever_the_batching(case):
    pattern, conds, skip, unmatched, sizes, seed = case
    rnd = random.Random(seed)
    keys = [[rnd.choice([0, 0, 1, 2, 3, 4]) for _ in range(n)] for n in sizes]
    sql = build_sql(pattern, conds, skip, None, unmatched)
    events, tss = events_for(keys, spacing=3)
    want = {k: reference_sequence(pattern, conds, skip, xs, tss[k], None, None, unmatched) for k, xs in enumerate(keys)}
    check_all_batchings(sql, events, want, rnd, [1, 3, 63, 64, 65, 100, 129, 500])


# ------------------------------------------------------------------ idle sessions: a session is a partition


@st.composite
def session_cases(draw):
    text, pattern = draw(st.sampled_from(LONG))
    present = _vars(pattern)
    conds = {v: draw(st.sampled_from(LONG_CONDS)) for v in sorted(present)}
    unmatched = draw(st.booleans())
    # one or two keys, each of one to three sessions (a gap of more than the TTL between them)
    keys = draw(st.lists(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=10), min_size=1, max_size=3),
                         min_size=1, max_size=2))
    seed = draw(st.integers(0, 2**32 - 1))
    return pattern, conds, unmatched, keys, seed


TTL = 50


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session_cases())
def test_an_idle_session_ends_its_partition(case):
    """``^`` at a session's first row, ``$`` and NEXT's NULL past its last: each session of a key
    is matched as a partition of its own (match numbers start again at 1)."""
    pattern, conds, unmatched, keys, seed = case
    sql = build_sql(pattern, conds, "PAST_LAST_ROW", None, unmatched)
    events, want = [], {}
    for k, sessions in enumerate(keys):
        t, i, seq = k, 0, []
        for xs in sessions:
            ts = [t + 3 * j for j in range(len(xs))]
            events += [{"k": k, "ts": tt, "x": x, "i": i + j} for j, (tt, x) in enumerate(zip(ts, xs))]
            got = reference_sequence(pattern, conds, "PAST_LAST_ROW", xs, ts, None, None, unmatched)
            seq += [(mn, r + i, cls) for mn, r, cls in got]
            t = ts[-1] + TTL + 1 + 7 * k
            i += len(xs)
        want[k] = seq
    events.sort(key=lambda e: e["ts"])
    check_all_batchings(sql, events, want, random.Random(seed), [1, 2, 5, 9], ttl=TTL)


# ------------------------------------------------------------------ hand-checked examples

ORDERS = [100, 90, 80, 95, 120, 50, 40]


def run(sql: str, events: list[dict], **options) -> list[dict]:
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    for k, v in options.items():
        setattr(op, k, v)
    return op.process(events).matches + op.finish().matches


def test_trinos_v_shape_with_unmatched_rows_outputs_every_row_once():
    """Trino's MATCH_RECOGNIZE example, ALL ROWS PER MATCH WITH UNMATCHED ROWS and SKIP PAST LAST
    ROW: exactly one output row per input row; measures RUNNING in the match, NULL outside it."""
    sql = """SELECT * FROM orders MATCH_RECOGNIZE (PARTITION BY custkey ORDER BY orderdate
      MEASURES A.totalprice AS starting_price, LAST(B.totalprice) AS bottom_price,
               LAST(U.totalprice) AS top_price, MATCH_NUMBER() AS mn, CLASSIFIER() AS cls
      ALL ROWS PER MATCH WITH UNMATCHED ROWS AFTER MATCH SKIP PAST LAST ROW
      PATTERN (A B+ C+ D+) SUBSET U = (C, D)
      DEFINE B AS totalprice < PREV(totalprice),
             C AS totalprice > PREV(totalprice) AND totalprice <= A.totalprice,
             D AS totalprice > PREV(totalprice))"""
    events = [{"custkey": 7, "orderdate": d, "totalprice": p} for d, p in enumerate(ORDERS)]
    got = [(r["orderdate"], r["mn"], r["cls"], r["starting_price"], r["bottom_price"], r["top_price"])
           for r in run(sql, events)]
    assert got == [
        (0, 1, "A", 100, None, None),
        (1, 1, "B", 100, 90, None),
        (2, 1, "B", 100, 80, None),
        (3, 1, "C", 100, 80, 95),
        (4, 1, "D", 100, 80, 120),
        (5, None, None, None, None, None),  # unmatched: every measure NULL (MATCH_NUMBER too)
        (6, None, None, None, None, None),
    ]


def test_trinos_nested_navigation_prev_of_first():
    """``PREV(FIRST(A.totalprice, 3), 2)``: the logical step first (the 4th A row), then two rows
    back; NULL when either step leaves the match or the partition."""
    sql = """SELECT * FROM orders MATCH_RECOGNIZE (ORDER BY d
      MEASURES PREV(FIRST(A.p, 3), 2) AS a, NEXT(LAST(A.p, 1), 2) AS b, PREV(FIRST(A.p), 1) AS c,
               NEXT(FINAL LAST(A.p), 1) AS d, PREV(FIRST(A.p, 9), 1) AS e
      PATTERN (A+ B) DEFINE A AS p < 70, B AS p >= 70)"""
    events = [{"d": i, "p": p} for i, p in enumerate([90, 10, 20, 30, 40, 50, 60, 80, 5])]
    (row,) = run(sql, events)
    # A rows 1..6: FIRST(A, 3) is row 4, two back is row 2 (20); LAST(A, 1) is row 5, two on is
    # row 7 (80); FIRST(A) is row 1, one back is row 0 (90); FINAL LAST(A) is row 6, one on is 80
    assert (row["a"], row["b"], row["c"], row["d"], row["e"]) == (20, 80, 90, 80, None)


def test_next_in_define_waits_for_the_next_row_of_its_key():
    """A row's verdict waits until the row after it arrives (k rows for NEXT(x, k)), or the end."""
    sql = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES P.ts AS peak
      PATTERN (P) DEFINE P AS P.x > PREV(P.x) AND P.x > NEXT(P.x))"""
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    assert op.process([{"k": 1, "ts": 0, "x": 1}, {"k": 1, "ts": 1, "x": 3}]).matches == []
    # another key's rows move the watermark but decide nothing for key 1
    assert op.process([{"k": 2, "ts": 50, "x": 0}]).matches == []
    assert op.process([{"k": 1, "ts": 60, "x": 2}]).matches == [{"k": 1, "peak": 1, "rule": "r"}]
    # the held row survives a snapshot
    blob = op.snapshot()
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    op.restore(blob)
    assert op.process([{"k": 1, "ts": 61, "x": 5}]).matches == []
    assert op.process([{"k": 1, "ts": 62, "x": 4}]).matches == [{"k": 1, "peak": 61, "rule": "r"}]
    # x = 7 at the end: NEXT is NULL, the condition unknown, no peak
    assert op.process([{"k": 1, "ts": 63, "x": 7}]).matches == []
    assert op.finish().matches == []


def test_next_in_define_with_within_keeps_partial_matches_the_held_rows_extend():
    """A row held for NEXT comes before any later row: the watermark does not end a partial
    match that the held row may still extend before its deadline."""
    sql = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
      MEASURES FIRST(A.ts) AS t0, LAST(B.ts) AS t1 PATTERN (A B+) WITHIN INTERVAL '10' MILLISECOND
      DEFINE A AS x = 0, B AS x > 0 AND NEXT(x) IS NOT NULL)"""
    events = [{"k": 1, "ts": 0, "x": 0}, {"k": 1, "ts": 5, "x": 1}, {"k": 2, "ts": 100, "x": 9},
              {"k": 1, "ts": 200, "x": 3}]
    want = [{"k": 1, "t0": 0, "t1": 5, "rule": "r"}]
    assert run(sql, events) == want
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    got = [m for e in events for m in op.process([e]).matches]
    assert got + op.finish().matches == want
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    op.process(events[:2])
    assert op.next_deadline() is None  # the held row at 5 decides, not time
    op.process(events[2:3])
    assert op.live_partial_matches() == 1


def test_unmatched_rows_leave_as_soon_as_no_partial_match_can_take_them():
    sql = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES MATCH_NUMBER() AS mn
      ALL ROWS PER MATCH WITH UNMATCHED ROWS PATTERN (A B) DEFINE A AS x = 1, B AS x = 2)"""
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    op.row_ids = True
    seen = lambda out: [(r["ts"], r["mn"], r["_id"]) for r in out.matches]  # noqa: E731
    assert seen(op.process([{"k": "a", "ts": 10, "x": 0}])) == [(10, None, 'r:["a"]:10:u0')]
    assert seen(op.process([{"k": "a", "ts": 11, "x": 1}])) == []  # A: a match may start here
    assert seen(op.process([{"k": "a", "ts": 12, "x": 1}])) == [(11, None, 'r:["a"]:11:u1')]
    assert seen(op.process([{"k": "a", "ts": 13, "x": 2}])) == [
        (12, 1, 'r:["a"]:12:1:0'), (13, 1, 'r:["a"]:12:1:1')]
    assert seen(op.finish()) == []


def test_anchors_at_the_partitions_start_and_end():
    base = "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES FIRST(A.ts) AS t0, LAST(A.ts) AS t1 "
    events = [{"k": 1, "ts": i, "x": x} for i, x in enumerate([1, 1, 0, 1, 1, 1, 0, 1, 1])]
    spans = lambda sql: [(r["t0"], r["t1"]) for r in run(base + sql, events)]  # noqa: E731
    assert spans("PATTERN (A+) DEFINE A AS x = 1)") == [(0, 1), (3, 5), (7, 8)]
    assert spans("PATTERN (^ A+) DEFINE A AS x = 1)") == [(0, 1)]
    assert spans("PATTERN (A+ $) DEFINE A AS x = 1)") == [(7, 8)]
    assert spans("PATTERN (^ A+ $) DEFINE A AS x = 1)") == []
    assert spans("PATTERN (^ A+ $) DEFINE A AS x >= 0)") == [(0, 8)]
    assert spans("AFTER MATCH SKIP TO NEXT ROW PATTERN (A $) DEFINE A AS x = 1)") == [(8, 8)]
    assert spans("PATTERN (A ^) DEFINE A AS x = 1)") == []


def test_end_anchor_on_a_stream_waits_for_the_end_of_input_or_of_the_idle_session():
    sql = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES FIRST(A.ts) AS t0,
      LAST(A.ts) AS t1 PATTERN (A+ $) DEFINE A AS x = 1)"""
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    assert op.process([{"k": 1, "ts": 0, "x": 1}, {"k": 1, "ts": 1, "x": 1}]).matches == []
    assert op.process([{"k": 2, "ts": 10_000, "x": 0}]).matches == []  # time alone is no end
    assert op.finish().matches == [{"k": 1, "t0": 0, "t1": 1, "rule": "r"}]
    # with an idle TTL the key's session ends once the watermark passes its last row + TTL
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    op.idle_state_ttl_ms = 100
    assert op.process([{"k": 1, "ts": 0, "x": 1}, {"k": 1, "ts": 1, "x": 1}]).matches == []
    assert op.process([{"k": 2, "ts": 50, "x": 0}]).matches == []
    assert op.process([{"k": 2, "ts": 500, "x": 0}]).matches == [{"k": 1, "t0": 0, "t1": 1, "rule": "r"}]
    assert op.finish().matches == []


@pytest.mark.parametrize("cond", ["x = 1", "x = 1 AND (NEXT(x) IS NULL OR NEXT(x) = 1)"])
@pytest.mark.parametrize("last_other,want", [(5, [(0, 3)]), (20, [])])
def test_end_anchor_with_within_needs_the_input_to_end_before_the_deadline(cond, last_other, want):
    """The input ends at the last batch's watermark: after the deadline, the match waiting for '$'
    was ended by WITHIN, also when NEXT held its last row back until the end."""
    sql = f"""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES FIRST(A.ts) AS t0,
      LAST(A.ts) AS t1 PATTERN (A+ $) WITHIN INTERVAL '10' MILLISECOND DEFINE A AS {cond})"""
    events = [{"k": 1, "ts": 0, "x": 1}, {"k": 1, "ts": 3, "x": 1}, {"k": 2, "ts": last_other, "x": 0}]
    assert [(r["t0"], r["t1"]) for r in run(sql, events)] == want
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    got = [m for e in events for m in op.process([e]).matches]
    assert [(r["t0"], r["t1"]) for r in got + op.finish().matches] == want


# ------------------------------------------------------------------ event times of held rows

HELD_SQL = ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.v AS a, B.v AS b "
            "{rows} PATTERN (A B) WITHIN INTERVAL '10' SECOND DEFINE A AS NEXT(A.v) = 1, B AS B.v = 1)")


@pytest.mark.parametrize("unit, times", [
    ("ms", [0, 5_000, 20_000, 40_000, 40_500]),
    ("s", [0, 5, 20, 40, 40.5]),
    ("ms", ["2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z", "2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z",
            "2026-01-01T00:00:40.500Z"]),
])
def test_held_rows_judge_within_in_milliseconds_whatever_the_time_field(unit, times):
    """Rows held for NEXT are stepped later; WITHIN must read their time in ms, not the raw field."""
    ev = [{"k": 1, "ts": t, "v": v} for t, v in zip(times, [0, 1, 0, 1, 7])]
    op = PatternOperator(parse_rule_text(HELD_SQL.format(rows="")).compiled, name="r", time_unit=unit)
    got = op.process(ev).matches + op.finish().matches
    # (0, 5 s) is within 10 s; (20 s, 40 s) is not
    assert [(r["a"], r["b"]) for r in got] == [(0, 1)]


def test_unmatched_rows_leave_when_the_watermark_ends_a_quiet_keys_partial_match():
    sql = ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES CLASSIFIER() AS c "
           "ALL ROWS PER MATCH WITH UNMATCHED ROWS PATTERN (A B) WITHIN INTERVAL '10' SECOND "
           "DEFINE A AS v = 0, B AS v = 1)")
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    op.ingest([{"k": 2, "ts": 3_000, "v": 0}], late_before=0)
    assert op.advance_to(3_000).matches == []  # the A row may still start a match
    assert op.live_partial_matches() == 1 and op.next_deadline() == 13_000
    assert op.advance_to(12_999).matches == []
    out = op.advance_to(13_000)  # the key never sends another event
    assert [(r["k"], r["ts"], r["c"]) for r in out.matches] == [(2, 3_000, None)]
    assert op.live_partial_matches() == 0 and op.next_deadline() is None
