"""PREV/NEXT in MEASURES whatever the batching: long keys, batch cuts past the 64-row runs, restore.

The automaton materialises a key's rows in runs of 64 while stepping, so a batch that holds more
than 64 of one key's rows is where a measure reading rows after the match (NEXT) could look
before its rows were there (issue 14: NULL instead of the next row). These tests feed keys with
hundreds of rows, check every NEXT/PREV value against the brute-force reference matcher and
against feeding one event at a time, on both stepping paths (the lazy DFA when every condition
is row-local, the general history path otherwise).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.cli import main
from cep.operator import PatternOperator
from patterns import ast as A
from patterns.rules import parse_rule_text
from tests.reference import reference_matches
from tests.replay import replay

ISSUE_SQL = (
    "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY key ORDER BY ts "
    "MEASURES A.i AS a_i, NEXT(A.i) AS next_i PATTERN (A) DEFINE A AS {cond})"
)
# the same rule on each stepping path: FIRST(A.i) in DEFINE looks at the match, so no lazy DFA
PATHS = {"dfa": "A.x = 1", "history": "A.x = 1 AND A.i >= FIRST(A.i)"}


def issue_events() -> list[dict]:
    return [{"key": "K", "ts": 1000 * i, "x": 1 if i in (0, 63) else 0, "i": i} for i in range(65)]


def feed(sql: str, events: list[dict], cuts: list[int], restore_at: int | None = None) -> list[dict]:
    """Run ``events`` cut into batches at ``cuts``; snapshot and restore after batch ``restore_at``."""
    # each operator from a fresh parse: a snapshot must not lean on the identity of compiled objects
    return replay(lambda: PatternOperator(parse_rule_text(sql).compiled, name="r"), events, cuts, restore_at)[0]


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("batch", [8192, 100, 65, 64, 1])
def test_issue_14_next_after_a_64_row_run(path, batch):
    sql = ISSUE_SQL.format(cond=PATHS[path])
    assert PatternOperator(parse_rule_text(sql).compiled).automaton.dfa == (path == "dfa")
    events = issue_events()
    got = feed(sql, events, list(range(batch, len(events), batch)))
    assert [(r["a_i"], r["next_i"]) for r in got] == [(0, 1), (63, 64)]


@pytest.mark.parametrize("batch", ["8192", "100", "65", "64", "1"])
def test_issue_14_on_the_command_line(tmp_path, batch):
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - name: nx\n    sql: " + json.dumps(ISSUE_SQL.format(cond="A.x = 1")) + "\n")
    data = tmp_path / "bars.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in issue_events()))
    out = tmp_path / "out.jsonl"
    assert main(["run", str(rules), "--input", str(data), "--output", str(out), "--batch-size", batch]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["a_i"], r["next_i"]) for r in rows] == [(0, 1), (63, 64)]


# ------------------------------------------------------------------ property tests

# pattern text and its AST for the reference matcher
PATTERNS = [
    ("A", A.PVar("A")),
    ("A B+", A.PSeq((A.PVar("A"), A.PQuant(A.PVar("B"), 1, None, True)))),
    ("A B*? C", A.PSeq((A.PVar("A"), A.PQuant(A.PVar("B"), 0, None, False), A.PVar("C")))),
    ("(A | B) C{1,3}", A.PSeq((A.PAlt((A.PVar("A"), A.PVar("B"))), A.PQuant(A.PVar("C"), 1, 3, True)))),
    ("A+ B", A.PSeq((A.PQuant(A.PVar("A"), 1, None, True), A.PVar("B")))),
]
# per variable: (DEFINE sql, python condition over (i, assignment, xs), looks at the match?)
CONDS = [
    ("{V}.x = 1", lambda V, i, asg, xs: xs[i] == 1, False),
    ("{V}.x >= 2", lambda V, i, asg, xs: xs[i] >= 2, False),
    ("{V}.x > PREV({V}.x)", lambda V, i, asg, xs: i > 0 and xs[i] > xs[i - 1], False),
    ("{V}.x <> 0", lambda V, i, asg, xs: xs[i] != 0, False),
    ("SUM({V}.x) <= 5", lambda V, i, asg, xs: sum(xs[r] for r, v, _ in asg if v == V) <= 5, True),
    ("COUNT(*) < 6", lambda V, i, asg, xs: len(asg) < 6, True),
]
SKIPS = {"PAST_LAST_ROW": "AFTER MATCH SKIP PAST LAST ROW", "TO_NEXT_ROW": "AFTER MATCH SKIP TO NEXT ROW"}
SPLITS = [1, 3, 63, 64, 65, 100, 128, 129, 200, 500, 5000]


def pattern_vars(p: A.Pattern) -> list[str]:
    if isinstance(p, A.PVar):
        return [p.name]
    if isinstance(p, A.PSeq):
        return [v for x in p.items for v in pattern_vars(x)]
    if isinstance(p, A.PAlt):
        return [v for x in p.options for v in pattern_vars(x)]
    assert isinstance(p, A.PQuant)
    return pattern_vars(p.item)


@st.composite
def cases(draw):
    text, pattern = draw(st.sampled_from(PATTERNS))
    names = sorted(set(pattern_vars(pattern)))
    conds = {v: draw(st.integers(0, len(CONDS) - 1)) for v in names}
    nav = draw(st.sampled_from(names))
    offsets = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2, unique=True))
    all_rows = draw(st.booleans())
    skip = draw(st.sampled_from(sorted(SKIPS)))
    # one to three keys of 64 to 400 rows; x mostly 0 so matches are spread out
    nkeys = draw(st.integers(1, 3))
    sizes = [draw(st.integers(64, 400)) for _ in range(nkeys)]
    seed = draw(st.integers(0, 2**32 - 1))
    return text, pattern, conds, nav, offsets, all_rows, skip, sizes, seed


def case_sql(text: str, conds: dict[str, int], nav: str, offsets: list[int], all_rows: bool, skip: str) -> str:
    measures = ["MATCH_NUMBER() AS mn", f"{nav}.i AS nav_i"]
    for k in offsets:
        measures += [f"NEXT({nav}.i, {k}) AS next{k}", f"PREV({nav}.i, {k}) AS prev{k}"]
    measures.append(f"FINAL COUNT({nav}.i) AS n_nav")
    defines = ", ".join(f"{v} AS {CONDS[c][0].format(V=v)}" for v, c in sorted(conds.items()))
    rows = "ALL ROWS PER MATCH" if all_rows else "ONE ROW PER MATCH"
    return (
        f"SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES {', '.join(measures)} "
        f"{rows} {SKIPS[skip]} PATTERN ({text}) DEFINE {defines})"
    )


def case_events(sizes: list[int], seed: int) -> tuple[list[dict], list[list[int]]]:
    import random

    rnd = random.Random(seed)
    xs = [[rnd.choice([0, 0, 0, 1, 2, 3]) for _ in range(n)] for n in sizes]
    events = [{"k": k, "ts": 3 * i + k, "x": x, "i": i} for k, col in enumerate(xs) for i, x in enumerate(col)]
    events.sort(key=lambda e: e["ts"])
    return events, xs


def expected_rows(pattern, conds, nav, offsets, all_rows, skip, xs) -> list[tuple]:
    """(key, match number, row or None, nav_i, next_k..., prev_k..., final count) from the reference."""
    n = len(xs)

    def cond(V, i, asg):
        return CONDS[conds[V]][1](V, i, asg, xs)

    out = []
    for mn, asg in enumerate(reference_matches(n, pattern, cond, skip), start=1):
        count = sum(1 for _, v, _ in asg if v == nav)
        ends = [j for j in range(len(asg))] if all_rows else [len(asg) - 1]
        for j in ends:
            last = [r for r, v, _ in asg[: j + 1] if v == nav]  # RUNNING: the rows so far
            r = last[-1] if last else None
            vals = [r]
            for k in offsets:
                vals.append(r + k if r is not None and r + k < n else None)
                vals.append(r - k if r is not None and r - k >= 0 else None)
            out.append((mn, asg[j][0] if all_rows else None, *vals, count))
    return out


def engine_rows(rows: list[dict], key: int, offsets: list[int], all_rows: bool) -> list[tuple]:
    got = []
    for r in rows:
        if r["k"] != key:
            continue
        vals = [r["nav_i"]]
        for k in offsets:
            vals += [r[f"next{k}"], r[f"prev{k}"]]
        got.append((r["mn"], r["i"] if all_rows else None, *vals, r["n_nav"]))
    return got


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.lists(st.sampled_from(SPLITS), min_size=1, max_size=12), st.integers(0, 11))
def test_next_prev_measures_match_the_reference_whatever_the_batching(case, splits, restore_at):
    text, pattern, conds, nav, offsets, all_rows, skip, sizes, seed = case
    sql = case_sql(text, conds, nav, offsets, all_rows, skip)
    events, xs = case_events(sizes, seed)
    cuts, at = [], 0
    for s in splits:
        at += s
        if at >= len(events):
            break
        cuts.append(at)
    batched = feed(sql, events, cuts, restore_at=restore_at if restore_at < len(cuts) else None)
    one_by_one = feed(sql, events, list(range(1, len(events))))
    for k, col in enumerate(xs):
        want = expected_rows(pattern, conds, nav, offsets, all_rows, skip, col)
        assert engine_rows(batched, k, offsets, all_rows) == want, (sql, k, cuts)
        assert engine_rows(one_by_one, k, offsets, all_rows) == want, (sql, k)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_every_next_is_filled_in_a_long_key(path):
    # 1,006 rows of one key in one batch (the daily-bars shape): a match on every 7th row
    sql = ISSUE_SQL.format(cond=PATHS[path]).replace("NEXT(A.i) AS next_i", "NEXT(A.i) AS next_i, NEXT(A.i, 3) AS next3")
    events = [{"key": "K", "ts": i, "x": int(i % 7 == 0), "i": i} for i in range(1006)]
    got = feed(sql, events, [])
    assert [(r["a_i"], r["next_i"], r["next3"]) for r in got] == [
        (i, i + 1 if i + 1 < 1006 else None, i + 3 if i + 3 < 1006 else None) for i in range(0, 1006, 7)
    ]
