"""Relaxed contiguity (Flink CEP's ``followedBy``, SASE's skip-till-next-match) as ``X*?`` gaps.

``MATCH_RECOGNIZE`` is strictly contiguous: the rows of a match are consecutive rows of the
partition. Relaxed contiguity is written with an undefined (always true) variable that the
pattern skips reluctantly: ``A X*? B`` is "A, then the first later B". docs/semantics.md
("Contiguity") states the mapping; this file checks it against a skip-till-next-match matcher
written here, independently of the engine and of ``tests/reference.py``: from each start row
that satisfies A, take the first later row that satisfies the next variable, and so on; a
one-or-more variable (``(X*? B)+``, Flink's ``oneOrMore()`` with its default relaxed inner
contiguity) takes each next B row in turn, as many as the rest of the pattern allows.

They agree when each condition reads the current row (its columns, ``PREV``) and the start row
``A``, the class the property test draws from; where a condition reads a later variable, or a
strict step follows a relaxed one, the standard backtracks and skip-till-next does not (the
last tests pin that difference down, as the doc states it).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.operator import PatternOperator
from patterns.rules import parse_rule_text
from tests.replay import replay

# ------------------------------------------------------------------ the skip-till-next reference

# (DEFINE text, python condition over (xs, ys, row, start row), reads the start row A?)
CONDS = [
    ("{V}.x = 1", lambda xs, ys, j, a: xs[j] == 1, False),
    ("{V}.x >= 2", lambda xs, ys, j, a: xs[j] >= 2, False),
    ("{V}.x <> 0", lambda xs, ys, j, a: xs[j] != 0, False),
    ("{V}.x IN (1, 3)", lambda xs, ys, j, a: xs[j] in (1, 3), False),
    ("{V}.x > PREV({V}.x)", lambda xs, ys, j, a: j > 0 and xs[j] > xs[j - 1], False),
    ("{V}.y > A.y", lambda xs, ys, j, a: ys[j] > ys[a], True),
    ("{V}.x = A.x AND {V}.y <> A.y", lambda xs, ys, j, a: xs[j] == xs[a] and ys[j] != ys[a], True),
]
ROW_LOCAL = [k for k, c in enumerate(CONDS) if not c[2]]


def skip_till_next(comps, cond, ts, within, skip) -> list[list[tuple[int, str]]]:
    """Every match of one partition under skip-till-next-match, as [(row, variable), ...].

    ``comps`` is ``[(variable, one_or_more), ...]``, the first one the start variable (not a
    loop). ``cond(var, row, start)`` says whether ``row`` satisfies ``var`` for the match that
    started at ``start``. ``skip`` is ``"TO_NEXT_ROW"`` (every start row, Flink's NO_SKIP for
    patterns without loops) or ``"PAST_LAST_ROW"`` (the next start after the match's last row).
    """
    n = len(ts)

    def rows_of(var, start, after):
        """The rows after ``after`` that satisfy ``var``, in order, inside the start's window."""
        for j in range(after + 1, n):
            if within is not None and ts[j] - ts[start] >= within:
                return
            if cond(var, j, start):
                yield j

    def complete(k, start, pos):
        """The rest of the match from component ``k`` on, after row ``pos``; None if none."""
        if k == len(comps):
            return []
        var, loop = comps[k]
        first = next(rows_of(var, start, pos), None)
        if first is None:
            return None
        if not loop:
            rest = complete(k + 1, start, first)
            return None if rest is None else [(first, var), *rest]
        # one or more, relaxed inside: each next `var` row in turn; greedy, so the loop ends at
        # the last of them after which the rest still completes (it does for a prefix of them)
        taken = list(rows_of(var, start, pos))
        ok = [complete(k + 1, start, b) is not None for b in taken]
        if not ok[0]:
            return None
        m = ok.index(False) if False in ok else len(ok)
        assert not any(ok[m:])  # conditions read the row and the start only: a prefix completes
        return [(b, var) for b in taken[:m]] + complete(k + 1, start, taken[m - 1])

    out, s = [], 0
    while s < n:
        rest = complete(1, s, s) if cond(comps[0][0], s, s) else None
        if rest is None:
            s += 1
            continue
        out.append([(s, comps[0][0]), *rest])
        s = s + 1 if skip == "TO_NEXT_ROW" else out[-1][-1][0] + 1
    return out


def test_the_reference_on_flinks_examples():
    # Flink's docs: "a b" over a c b1 b2 with followedBy gives {a b1}
    xs = ["a", "c", "b", "b"]
    c = lambda v, j, a: xs[j] == v.lower()  # noqa: E731
    assert skip_till_next([("A", False), ("B", False)], c, [0, 1, 2, 3], None, "TO_NEXT_ROW") == [[(0, "A"), (2, "B")]]
    # C D A1 A2 A3 D A4 B, C followedBy A.oneOrMore() followedBy B: the longest of Flink's four
    xs = ["c", "d", "a", "a", "a", "d", "a", "b"]
    got = skip_till_next([("C", False), ("A", True), ("B", False)], c, list(range(8)), None, "TO_NEXT_ROW")
    assert got == [[(0, "C"), (2, "A"), (3, "A"), (4, "A"), (6, "A"), (7, "B")]]


# ------------------------------------------------------------------ the same as MATCH_RECOGNIZE


def mr_pattern(comps, exclude: bool, form: str) -> str:
    """``A X*? B (X*? C)+ ...`` (form ``X``: an undefined X skipped reluctantly before each later
    variable) or ``A NB* B (NC* C)+ ...`` (form ``N``: the rows that are not the next variable)."""
    parts = [comps[0][0]]
    for var, loop in comps[1:]:
        gap = "X*?" if form == "X" else f"N{var}*"
        if exclude:
            gap = f"{{- {gap} -}}"
        parts.append(f"({gap} {var})+" if loop else f"{gap} {var}")
    return " ".join(parts)


def mr_sql(comps, conds, within, skip, all_rows, form) -> str:
    names = [v for v, _ in comps]
    if all_rows:
        measures = "CLASSIFIER() AS cls, MATCH_NUMBER() AS mn"
        rows = "ALL ROWS PER MATCH"
    else:
        ms = ["MATCH_NUMBER() AS mn", "A.i AS a_i"]
        for v in names[1:]:
            ms += [f"FIRST({v}.i) AS {v}_first", f"LAST({v}.i) AS {v}_last", f"COUNT({v}.i) AS {v}_n",
                   f"SUM({v}.i) AS {v}_sum"]
        measures, rows = ", ".join(ms), "ONE ROW PER MATCH"
    skip_sql = {"TO_NEXT_ROW": "AFTER MATCH SKIP TO NEXT ROW", "PAST_LAST_ROW": "AFTER MATCH SKIP PAST LAST ROW"}[skip]
    within_sql = f" WITHIN INTERVAL '{within // 1000}' SECOND" if within is not None else ""
    defines = [f"{v} AS {CONDS[conds[v]][0].format(V=v)}" for v in names]
    if form == "N":
        defines += [f"N{v} AS NOT ({CONDS[conds[v]][0].format(V='N' + v)})" for v in names[1:]]
    return (f"SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES {measures} {rows} "
            f"{skip_sql} PATTERN ({mr_pattern(comps, all_rows, form)}){within_sql} DEFINE {', '.join(defines)})")


def feed(sql: str, events: list[dict], cuts: list[int], restore_at: int | None, budget: int | None = None) -> list[dict]:
    """Run ``events`` in batches cut at ``cuts``; snapshot and restore into a fresh operator after
    batch ``restore_at``. ``budget``: the rule's ``max_steps_per_event``."""
    # each operator from a fresh parse: a snapshot must not lean on the identity of compiled objects
    return replay(lambda: PatternOperator(parse_rule_text(sql).compiled, name="r", max_steps_per_event=budget),
                  events, cuts, restore_at)[0]


def as_matches(rows: list[dict], key: int, names: list[str], all_rows: bool) -> list[list[tuple[int, str]]]:
    """The engine's rows of one key as matches [(row, variable), ...], in match-number order."""
    by: dict[int, list[tuple[int, str]]] = {}
    for r in rows:
        if r["k"] != key:
            continue
        if all_rows:
            by.setdefault(r["mn"], []).append((r["i"], r["cls"]))
        else:
            by[r["mn"]] = [(r["a_i"], "A")] + [
                (r[f"{v}_first"], v, r[f"{v}_last"], r[f"{v}_n"], r[f"{v}_sum"]) for v in names[1:]]
    return [by[mn] for mn in sorted(by)]


def summarise(match: list[tuple[int, str]], names: list[str]) -> list[tuple]:
    """A reference match in the ONE ROW PER MATCH shape of :func:`as_matches`."""
    out: list[tuple] = [(match[0][0], "A")]
    for v in names[1:]:
        rows = [j for j, w in match if w == v]
        out.append((rows[0], v, rows[-1], len(rows), sum(rows)))
    return out


@st.composite
def cases(draw):
    ncomp = draw(st.integers(2, 4))
    names = ["A", "B", "C", "D"][:ncomp]
    comps = [("A", False)] + [(v, draw(st.booleans())) for v in names[1:]]
    conds = {"A": draw(st.sampled_from(ROW_LOCAL))}
    pool = ROW_LOCAL if draw(st.booleans()) else list(range(len(CONDS)))
    for v in names[1:]:
        conds[v] = draw(st.sampled_from(pool))
    within = draw(st.sampled_from([None, None, 8_000, 30_000, 120_000]))
    skip = draw(st.sampled_from(["TO_NEXT_ROW", "PAST_LAST_ROW"]))
    all_rows = draw(st.booleans())
    # a relaxed loop whose run can be told apart by what it matched (a condition reads A) would
    # multiply its partial matches in the X form (cep check warns; the work budget then decides):
    # the N form is the one to write there (docs/semantics.md)
    reads_match = any(CONDS[c][2] for c in conds.values())
    form = "N" if reads_match and any(loop for _, loop in comps) else draw(st.sampled_from("XN"))
    sizes = [draw(st.integers(60, 320)) for _ in range(draw(st.integers(1, 3)))]
    seed = draw(st.integers(0, 2**32 - 1))
    return comps, conds, within, skip, all_rows, form, sizes, seed


def case_events(sizes: list[int], seed: int):
    """Keys of the given sizes, x mostly 0, times 1-4 s apart per key, merged in time order."""
    rnd = random.Random(seed)
    events, cols = [], []
    for k, n in enumerate(sizes):
        xs = [rnd.choice([0, 0, 0, 1, 2, 3]) for _ in range(n)]
        ys = [rnd.randrange(5) for _ in range(n)]
        ts, t = [], rnd.randrange(1000)
        for _ in range(n):
            t += rnd.randint(1, 4) * 1000
            ts.append(t)
        events += [{"k": k, "ts": ts[i], "x": xs[i], "y": ys[i], "i": i} for i in range(n)]
        cols.append((xs, ys, ts))
    events.sort(key=lambda e: e["ts"])
    return events, cols


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.lists(st.integers(1, 300), min_size=1, max_size=10), st.integers(0, 9))
def test_gaps_skipped_reluctantly_are_skip_till_next_match(case, splits, restore_at):
    comps, conds, within, skip, all_rows, form, sizes, seed = case
    names = [v for v, _ in comps]
    sql = mr_sql(comps, conds, within, skip, all_rows, form)
    growth = PatternOperator(parse_rule_text(sql).compiled).automaton.growth
    # the X form is never flagged here; the N form is when a loop variable's condition reads A
    # (cep check cannot prove NOT (B.y > A.y) and B.y > A.y exclusive), though its runs do not
    # multiply: there the rule sets a work budget no key reaches
    assert growth is None or (form == "N" and CONDS[conds[growth.vars[1]]][2]), sql
    budget = None if growth is None else 1_000_000
    events, cols = case_events(sizes, seed)
    cuts, at = [], 0
    for s in splits:
        at += s
        if at >= len(events):
            break
        cuts.append(at)
    got = feed(sql, events, cuts, restore_at if restore_at < len(cuts) else None, budget)
    for k, (xs, ys, ts) in enumerate(cols):
        def cond(v, j, a):
            return CONDS[conds[v]][1](xs, ys, j, a)

        want = skip_till_next(comps, cond, ts, within, skip)
        if not all_rows:
            want = [summarise(m, names) for m in want]
        assert as_matches(got, k, names, all_rows) == want, (sql, k, cuts)


# ------------------------------------------------------------------ the mapping, case by case


def run(sql: str, xs: list[str]) -> list[list[tuple[int, str]]]:
    """Rows of one key, x = the letters; the matches as [(row, classifier), ...]."""
    rows = feed(sql, [{"k": 0, "ts": 1000 * i, "x": x, "y": 0, "i": i} for i, x in enumerate(xs)], [], None)
    return as_matches(rows, 0, [], True)


def letters(pattern: str, vars_: str, skip: str = "TO NEXT ROW", within: str = "") -> str:
    defines = ", ".join(f"{v} AS {v}.x = '{v.lower()}'" for v in vars_)
    return (f"SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES CLASSIFIER() AS cls, "
            f"MATCH_NUMBER() AS mn ALL ROWS PER MATCH AFTER MATCH SKIP {skip} PATTERN ({pattern}){within} "
            f"DEFINE {defines})")


def test_followed_by_is_the_first_later_b():
    # Flink's docs: "a b" over a c b1 b2: next gives nothing, followedBy gives {a b1}
    assert run(letters("A B", "AB"), list("acbb")) == []
    assert run(letters("A {- X*? -} B", "AB"), list("acbb")) == [[(0, "A"), (2, "B")]]


def test_one_or_more_relaxed_inside_gives_the_longest_of_flinks_matches():
    # Flink's docs: C followedBy A.oneOrMore() followedBy B over C D A1 A2 A3 D A4 B gives
    # {C A1 B}, {C A1 A2 B}, {C A1 A2 A3 B}, {C A1 A2 A3 A4 B}; one row per start row here,
    # greedy the longest, reluctant the shortest
    xs = list("cdaaadab")
    assert run(letters("C ({- X*? -} A)+ {- X*? -} B", "CAB"), xs) == [
        [(0, "C"), (2, "A"), (3, "A"), (4, "A"), (6, "A"), (7, "B")]]
    assert run(letters("C ({- X*? -} A)+? {- X*? -} B", "CAB"), xs) == [[(0, "C"), (2, "A"), (7, "B")]]
    # consecutive(): A+ strict inside, relaxed before and after: {C A1 A2 A3 B} (Flink: its prefixes too)
    assert run(letters("C {- X*? -} A+ {- X*? -} B", "CAB"), xs) == [[(0, "C"), (2, "A"), (3, "A"), (4, "A"), (7, "B")]]


def test_no_skip_is_skip_to_next_row_and_skip_past_last_row_loses_overlaps():
    # a1 a2 b: Flink's default NO_SKIP gives {a1 b} and {a2 b}; so does SKIP TO NEXT ROW; the
    # standard's default SKIP PAST LAST ROW resumes after b and gives {a1 b} only
    pat = "A {- X*? -} B"
    assert run(letters(pat, "AB", "TO NEXT ROW"), list("aab")) == [[(0, "A"), (2, "B")], [(1, "A"), (2, "B")]]
    assert run(letters(pat, "AB", "PAST LAST ROW"), list("aab")) == [[(0, "A"), (2, "B")]]


def test_within_bounds_the_gap():
    # rows 1 s apart: b is 3 s after a, so a 3-second WITHIN is too short and a 4-second one is not
    assert run(letters("A {- X*? -} B", "AB", within=" WITHIN INTERVAL '3' SECOND"), list("accb")) == []
    assert run(letters("A {- X*? -} B", "AB", within=" WITHIN INTERVAL '4' SECOND"), list("accb")) == [
        [(0, "A"), (3, "B")]]


def test_where_the_standard_backtracks_and_skip_till_next_does_not():
    # C AS C.y > B.y reads B: skip-till-next takes the first B (y=5) and waits for a C above 5;
    # the standard backtracks to the second B (y=1) and finds the C (y=3)
    sql = ("SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES CLASSIFIER() AS cls, "
           "MATCH_NUMBER() AS mn ALL ROWS PER MATCH PATTERN (A {- X*? -} B {- X*? -} C) "
           "DEFINE A AS A.x = 'a', B AS B.x = 'b', C AS C.x = 'c' AND C.y > B.y)")
    ys = [0, 5, 1, 3]
    rows = feed(sql, [{"k": 0, "ts": 1000 * i, "x": x, "y": ys[i], "i": i} for i, x in enumerate("abbc")], [], None)
    assert as_matches(rows, 0, [], True) == [[(0, "A"), (2, "B"), (3, "C")]]

    def cond(v, j, a):
        return "abbc"[j] == v.lower() and (v != "C" or ys[j] > 5)  # C against the first B

    assert skip_till_next([("A", False), ("B", False), ("C", False)], cond, [0, 1, 2, 3], None, "PAST_LAST_ROW") == []
    # a strict step after a relaxed one (followedBy B, then next C): the same difference
    assert run(letters("A {- X*? -} B C", "ABC"), list("abdbc")) == [[(0, "A"), (3, "B"), (4, "C")]]


@pytest.mark.parametrize("skip", ["TO NEXT ROW", "PAST LAST ROW"])
def test_a_row_that_is_both_b_and_c_goes_to_the_loop_while_a_c_follows(skip):
    # B AS x IN ('b', 'z'), C AS x IN ('c', 'z'): a 'z' row is both; the greedy loop takes it
    # while a later C remains, and the last C-capable row after the loop's last row ends it
    sql = letters("A ({- X*? -} B)+ {- X*? -} C", "A", skip).replace(
        "DEFINE A AS A.x = 'a'", "DEFINE A AS A.x = 'a', B AS B.x IN ('b', 'z'), C AS C.x IN ('c', 'z')")
    assert run(sql, list("abzdzc")) == [[(0, "A"), (1, "B"), (2, "B"), (4, "B"), (5, "C")]]
    assert run(sql, list("abzd")) == [[(0, "A"), (1, "B"), (2, "C")]]


def test_a_relaxed_loop_whose_later_condition_reads_the_match_is_written_with_negations():
    # A (X*? B)+ X*? C with C AS C.y > A.y: a B row may be taken as B or skipped as X, C reads
    # the match, so runs are not merged and double on each B row (cep check warns; the default
    # work budget then drops runs). A (NB* B)+ NC* C, NB and NC the rows that are not B and not
    # C, says the same without the ambiguity: no warning, and skip-till-next's rows
    def sql(pattern, extra=""):
        return ("SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES CLASSIFIER() AS cls, "
                f"MATCH_NUMBER() AS mn ALL ROWS PER MATCH AFTER MATCH SKIP TO NEXT ROW PATTERN ({pattern}) "
                f"DEFINE A AS A.x = 1, B AS B.x = 1, C AS C.y > A.y{extra})")

    x_form = sql("A ({- X*? -} B)+ {- X*? -} C")
    n_form = sql("A ({- NB* -} B)+ {- NC* -} C", ", NB AS NOT (NB.x = 1), NC AS NOT (NC.y > A.y)")
    growth = PatternOperator(parse_rule_text(x_form).compiled).automaton.growth
    assert growth is not None and set(growth.vars) == {"X", "B"}
    assert PatternOperator(parse_rule_text(n_form).compiled).automaton.growth is None
    events, cols = case_events([300], 0)
    xs, ys, ts = cols[0]

    def cond(v, j, a):
        return xs[j] == 1 if v in "AB" else ys[j] > ys[a]

    want = skip_till_next([("A", False), ("B", True), ("C", False)], cond, ts, None, "TO_NEXT_ROW")
    assert len(want) == 35
    assert as_matches(feed(n_form, events, [97, 180], 1), 0, [], True) == want


# ------------------------------------------------------------------ A NOT B C: relaxed, with a veto


def not_between(cond, ts, within, skip, vetoes) -> list[list[tuple[int, str]]]:
    """``A NOT B C`` (or ``NOT (B | D)``) under skip-till-next: from each A row, the first later C
    row, unless a row of a veto variable (not a C row) comes first; inside the window."""
    out, s, n = [], 0, len(ts)
    while s < n:
        end = None
        if cond("A", s, s):
            for j in range(s + 1, n):
                if within is not None and ts[j] - ts[s] >= within:
                    break
                if cond("C", j, s):
                    end = j
                    break
                if any(cond(v, j, s) for v in vetoes):
                    break
        if end is None:
            s += 1
            continue
        out.append([(s, "A"), (end, "C")])
        s = s + 1 if skip == "TO_NEXT_ROW" else end + 1
    return out


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(ROW_LOCAL) - 1), st.lists(st.integers(0, len(CONDS) - 1), min_size=3, max_size=3),
       st.booleans(), st.sampled_from([None, 8_000, 30_000]), st.sampled_from(["TO_NEXT_ROW", "PAST_LAST_ROW"]),
       st.lists(st.integers(60, 320), min_size=1, max_size=3), st.integers(0, 2**32 - 1),
       st.lists(st.integers(1, 300), min_size=1, max_size=8), st.integers(0, 7))
def test_not_between_is_skip_till_next_with_a_veto(a, bcd, two, within, skip, sizes, seed, splits, restore_at):
    conds = {"A": ROW_LOCAL[a], "B": bcd[0], "C": bcd[1], "D": bcd[2]}
    vetoes = ["B", "D"] if two else ["B"]
    names = ["A", "C", *vetoes]
    skip_sql = {"TO_NEXT_ROW": "AFTER MATCH SKIP TO NEXT ROW", "PAST_LAST_ROW": "AFTER MATCH SKIP PAST LAST ROW"}[skip]
    within_sql = f" WITHIN INTERVAL '{within // 1000}' SECOND" if within is not None else ""
    veto_sql = "NOT (B | D)" if two else "NOT B"
    defines = ", ".join(f"{v} AS {CONDS[conds[v]][0].format(V=v)}" for v in names)
    sql = (f"SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES CLASSIFIER() AS cls, "
           f"MATCH_NUMBER() AS mn ALL ROWS PER MATCH {skip_sql} PATTERN (A {veto_sql} C){within_sql} DEFINE {defines})")
    events, cols = case_events(sizes, seed)
    cuts, at = [], 0
    for s in splits:
        at += s
        if at >= len(events):
            break
        cuts.append(at)
    got = feed(sql, events, cuts, restore_at if restore_at < len(cuts) else None)
    for k, (xs, ys, ts) in enumerate(cols):
        def cond(v, j, a):
            return CONDS[conds[v]][1](xs, ys, j, a)

        assert as_matches(got, k, [], True) == not_between(cond, ts, within, skip, vetoes), (sql, k, cuts)
