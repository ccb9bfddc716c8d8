"""The growth analysis: which loops multiply their runs, and which conditions are exclusive."""

from __future__ import annotations

import time

import pytest

from patterns.compiler import compile_statement
from patterns.growth import MAX_LOOP_STATES, exclusive, find_growth
from patterns.match_recognize import parse_statement


def growth(pattern: str, define: str):
    sql = f"SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN ({pattern}) DEFINE {define})"
    g = find_growth(compile_statement(parse_statement(sql)))
    return g and (sql[g.group.pos : g.group.end], g.vars, g.looks_back)


@pytest.mark.parametrize(
    ("pattern", "define", "expected"),
    [
        ("(A|B)* C", "A AS SUM(A.x) >= 0, C AS C.x < 0", ("(A|B)*", ("A", "B"), "A")),
        ("(A|B)*? C", "B AS B.x > LAST(A.x), C AS C.x < 0", ("(A|B)*?", ("A", "B"), "B")),
        ("S (A|B){3,} C", "A AS COUNT(*) > 0", ("(A|B){3,}", ("A", "B"), "A")),
        ("S ((A|B)+ X)* C", "A AS COUNT(*) > 0, X AS X.x = 0, B AS B.x > 0", ("(A|B)+", ("A", "B"), "A")),
        ("(A (B|C)*)+ D", "A AS SUM(A.x) >= 0, B AS B.x > 0, C AS C.x < 0", ("(A (B|C)*)+", ("A", "B"), "A")),
        ("PERMUTE(A, B)+ C", "A AS FIRST(A.x) > 0", ("PERMUTE(A, B)+", ("A", "B"), "A")),
        # a loop nested in a loop, over one variable: the same rows split in many ways
        ("(A A*)* C", "A AS SUM(A.x) >= 0", ("(A A*)*", ("A", "A"), "A")),
        # the current-row parts of the conditions overlap
        ("(A|B)* C", "A AS A.x > 0 AND COUNT(*) > 0, B AS B.x > 0", ("(A|B)*", ("A", "B"), "A")),
    ],
)
def test_growing_loops_are_found_and_named(pattern, define, expected) -> None:
    assert growth(pattern, define) == expected


@pytest.mark.parametrize(
    ("pattern", "define"),
    [
        # conditions on the current row only: the engine merges runs in one state (lazy DFA)
        ("(A|B)* C", "A AS A.x > 0, C AS C.x < 0"),
        # exclusive on the current row, whatever the aggregates say
        ("(A|B)* C", "A AS A.x > 0 AND SUM(A.x) < 10, B AS B.x <= 0"),
        ("(A|B)* C", "A AS A.x > PREV(A.x), B AS B.x <= PREV(B.x) AND COUNT(*) < 9"),
        ("(A|B)* C", "A AS A.kind = 'buy', B AS B.kind IN ('sell', 'hold') AND COUNT(*) < 9"),
        ("(A|B)* C", "A AS A.kind LIKE 'b%' AND COUNT(*) < 9, B AS B.kind NOT LIKE 'b%'"),
        ("(A|B)* C", "A AS A.x BETWEEN 1 AND 5 AND COUNT(*) < 9, B AS B.x > 5"),
        ("(A|B)* C", "A AS A.x IS NULL AND COUNT(*) < 9, B AS B.x >= 0"),
        ("(A|B)* C", "A AS A.ok AND COUNT(*) < 9, B AS NOT B.ok"),
        ("(A|B|D)* C", "A AS A.x = 1 AND COUNT(*) < 9, B AS B.x = 2, D AS D.x = 3 OR D.x = 4"),
        # no loop that a row can take twice
        ("A+ B+ C", "A AS SUM(A.x) >= 0"),
        ("(A B)* C", "A AS SUM(A.x) >= 0"),
        ("(A{2})* C", "A AS SUM(A.x) >= 0"),
        ("S (A|B){2,5} C", "A AS SUM(A.x) >= 0"),
        ("S X*? C", "C AS C.x > FIRST(S.x)"),
    ],
)
def test_loops_that_cannot_multiply_their_runs_are_not_warned_about(pattern, define) -> None:
    assert growth(pattern, define) is None


def test_a_loop_too_large_to_analyse_is_skipped_quickly() -> None:
    big = MAX_LOOP_STATES // 2 + 1
    t0 = time.perf_counter()
    assert growth(f"(A{{{big}}}|B{{{big}}})* C", "A AS SUM(A.x) >= 0") is None
    assert time.perf_counter() - t0 < 5  # generous: a hang would be minutes


def test_a_loop_at_the_size_limit_is_analysed() -> None:
    half = MAX_LOOP_STATES // 2
    assert growth(f"(A{{{half}}}|A B{{{half - 1}}})* C", "A AS SUM(A.x) >= 0")[1] == ("A", "A")


def _excl(a: str, b: str) -> bool:
    mr = parse_statement(f"SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) DEFINE A AS {a}, B AS {b})")
    return exclusive([mr.defines[0].expr], "A", [mr.defines[1].expr], "B", {}, {"A": 0, "B": 1})


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("A.x > 5", "B.x < 3", True),
        ("A.x > 5", "B.x < 7", False),
        ("A.x >= 5", "B.x <= 5", False),
        ("A.x > 5", "B.x <= 5", True),
        ("A.x = 5", "B.x <> 5", True),
        ("A.x = 5", "B.x = 5.0", False),
        ("A.x = 'a'", "B.x = 'b'", True),
        ("A.x = TRUE", "B.x = FALSE", True),
        ("A.x IN (1, 2)", "B.x IN (2, 3)", False),
        ("A.x IN (1, 2)", "B.x NOT IN (1, 2)", True),
        ("A.x IN (1, 2)", "B.x > 2", True),
        ("A.x BETWEEN 1 AND 5", "B.x NOT BETWEEN 1 AND 5", True),
        ("A.x IS NULL", "B.x IS NOT NULL", True),
        ("A.x IS NULL", "B.x = 1", True),
        ("A.x > PREV(A.x)", "B.x <= PREV(B.x)", True),
        ("A.x > A.y", "B.y > B.x", True),
        ("A.x > A.y", "B.y >= B.x", True),
        ("A.x >= A.y", "B.y >= B.x", False),
        ("A.ok", "NOT B.ok", True),
        ("NOT (A.x > 5)", "B.x > 5", True),
        ("A.x > 5 OR A.y = 1", "B.x < 3", False),
        ("A.x > 5 OR A.x < 0", "B.x BETWEEN 1 AND 4", True),
        ("A.x = 1 AND A.y = 2", "B.y = 3", True),
        ("A.name LIKE 'a%'", "B.name NOT LIKE 'a%'", True),
        ("A.name LIKE 'a%'", "B.name LIKE 'b%'", False),  # (the text is not read into)
        ("A.x > 5", "B.y < 3", False),
        ("ABS(A.x) > 5", "ABS(B.x) <= 5", True),
        ("A.x > 5", "B.x > 'a'", False),  # not comparable: unsure
    ],
)
def test_exclusive_conditions(a: str, b: str, expected: bool) -> None:
    assert _excl(a, b) is expected
    assert _excl(b.replace("B.", "A."), a.replace("A.", "B.")) is expected
