"""Parser and checker of MATCH_RECOGNIZE: every clause, and every error message with its position."""

from __future__ import annotations

import pytest

from patterns import ast as A
from patterns.compiler import compile_statement, nullable
from patterns.errors import CepSyntaxError, RuleError
from patterns.match_recognize import parse_expression, parse_interval_ms, parse_statement


def mr(body: str, select: str = "*") -> str:
    return f"SELECT {select} FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts {body})"


def test_whole_clause_parses():
    stmt = parse_statement(
        mr(
            """MEASURES FIRST(A.x) AS fx, LAST(B.x, 1) AS lb, PREV(A.x, 2) AS pa, NEXT(B.x) AS nb,
               SUM(B.x) AS s, COUNT(*) AS c, COUNT(B.*) AS cb, AVG(B.x) AS a, MIN(B.x) AS mi,
               MAX(B.x) AS ma, CLASSIFIER() AS cls, MATCH_NUMBER() AS mn, FINAL LAST(B.x) AS fl,
               RUNNING COUNT(*) AS rc, CASE WHEN A.x > 1 THEN 'hi' ELSE 'lo' END AS cs,
               (A.x + 2) * 3 - 1 AS arith, A.x IS NULL AS isn
            ALL ROWS PER MATCH AFTER MATCH SKIP TO FIRST B
            PATTERN (A B+? (C | D){2,3} PERMUTE(E, F) {- G -} H*) WITHIN INTERVAL '5' MINUTE
            SUBSET U = (A, B)
            DEFINE A AS A.x BETWEEN 1 AND 3 AND A.y IN ('a', 'b'), B AS B.x > PREV(B.x) OR B.y LIKE 'x%',
                   C AS NOT C.z, D AS U.x <> LAST(A.x)"""
        )
    )
    assert stmt.partition_by == ("k",)
    assert stmt.order_by == "ts"
    assert stmt.rows_per_match == "ALL"
    assert stmt.skip == A.Skip("TO_FIRST", "B")
    assert stmt.within_ms == 300_000
    assert [m.name for m in stmt.measures][:3] == ["fx", "lb", "pa"]
    assert stmt.subsets == (("U", ("A", "B")),)
    fl = stmt.measures[12].expr
    assert isinstance(fl, A.Nav) and fl.semantics == "FINAL"
    seq = stmt.pattern
    assert isinstance(seq, A.PSeq)
    assert seq.items[1] == A.PQuant(A.PVar("B"), 1, None, greedy=False)
    assert seq.items[2] == A.PQuant(A.PAlt((A.PVar("C"), A.PVar("D"))), 2, 3)
    assert isinstance(seq.items[3], A.PPermute) and isinstance(seq.items[4], A.PExclude)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("A", A.PVar("A")),
        ("A*", A.PQuant(A.PVar("A"), 0, None)),
        ("A+?", A.PQuant(A.PVar("A"), 1, None, False)),
        ("A??", A.PQuant(A.PVar("A"), 0, 1, False)),
        ("A{3}", A.PQuant(A.PVar("A"), 3, 3)),
        ("A{2,}", A.PQuant(A.PVar("A"), 2, None)),
        ("A{,4}", A.PQuant(A.PVar("A"), 0, 4)),
        ("A{1,4}?", A.PQuant(A.PVar("A"), 1, 4, False)),
        ("A | B C", A.PAlt((A.PVar("A"), A.PSeq((A.PVar("B"), A.PVar("C")))))),
        ("(A B)+", A.PQuant(A.PSeq((A.PVar("A"), A.PVar("B"))), 1, None)),
    ],
)
def test_quantifiers_and_grouping(text, expected):
    assert parse_statement(mr(f"PATTERN ({text}) DEFINE A AS TRUE")).pattern == expected


def test_select_list_and_alias():
    stmt = parse_statement(mr("MEASURES A.x AS ax PATTERN (A) DEFINE A AS x > 0", select="k, ax") + " AS m;")
    assert stmt.select == ("k", "ax")


def test_expression_precedence():
    e = parse_expression("a + b * c > 3 OR NOT d = 1 AND e IS NOT NULL")
    assert isinstance(e, A.Logical) and e.op == "OR"
    left = e.args[0]
    assert isinstance(left, A.Compare) and isinstance(left.left, A.Binary) and left.left.op == "+"
    right = e.args[1]
    assert isinstance(right, A.Logical) and right.op == "AND"


def test_simple_case_becomes_searched_case():
    e = parse_expression("CASE x WHEN 1 THEN 'one' WHEN 2 THEN 'two' END")
    assert isinstance(e, A.Case) and isinstance(e.whens[0][0], A.Compare)


def test_intervals():
    assert parse_interval_ms("INTERVAL '1' HOUR") == 3_600_000
    assert parse_interval_ms("250 ms") == 250
    assert parse_interval_ms("2 days") == 172_800_000


def test_nullable():
    p = parse_statement(mr("PATTERN (A* | B?) DEFINE A AS TRUE")).pattern
    assert nullable(p)
    assert not nullable(parse_statement(mr("PATTERN (A* B) DEFINE A AS TRUE")).pattern)


# ------------------------------------------------------------------ syntax errors: message and column

SYNTAX_ERRORS = [
    ("SELEC * FROM t", "expected SELECT at the start of the statement", 1),
    ("SELECT * t", "expected FROM after the SELECT list, found 't'", 10),
    ("SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A) DEFINE A AS TRUE)", "expected ORDER BY <event-time column>", 34),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts DESC PATTERN (A))", "DESC is not supported", 46),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts, x PATTERN (A))", "ORDER BY takes one event-time column", 45),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN ())", "empty PATTERN ()", 55),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B)", "expected ')' to close MATCH_RECOGNIZE", 59),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B+ DEFINE B AS TRUE))",
     "expected a pattern variable, '(', '|' or ')', found 'DEFINE'; is the ')' that closes the pattern missing?", 60),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A{3,1}))", "the upper bound is below the lower", 56),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A{0}))", "matches nothing", 56),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (^+ A))", "a quantifier cannot follow the anchor '^'", 56),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A ${2}))", "a quantifier cannot follow the anchor '$'", 58),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) WITHIN INTERVAL '0' SECOND)", "it must be positive", 74),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) WITHIN INTERVAL '5' WEEK)", "expected an interval unit", 78),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) WITHIN INTERVAL 'x' SECOND)", "bad interval amount 'x'", 74),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS x >> 1)", "expected an expression, found '>'", 73),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS FOO(x))", "unknown function 'FOO'", 70),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS ABS(x, y))", "ABS takes 1 argument(s), got 2", 70),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS PREV(x, y))", "offset must be a whole number", 78),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS SUM(*))", "SUM(*) is not allowed", 74),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS x = 'abc)", "unterminated string literal", 74),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS x # 1)", "unexpected character '#'", 72),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS RUNNING x)", "RUNNING applies to", 70),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts MEASURES A.x PATTERN (A))", "expected AS after a measure expression", 59),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts AFTER MATCH SKIP SOMEWHERE PATTERN (A))", "expected PAST LAST ROW or TO", 63),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS SUM(DISTINCT x))", "SUM(DISTINCT ...) is not supported; only COUNT(DISTINCT ...)", 74),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts ALL ROWS PER MATCH WITH UNMATCHED PATTERN (A))",
     "expected ROWS in ALL ROWS PER MATCH WITH UNMATCHED ROWS, found 'PATTERN'", 80),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A)) extra junk", "after the end of the statement", 65),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS x = 1 /* open", "unterminated comment", 76),
    ("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS B.*)", "A.* is only allowed inside COUNT", 72),
]


@pytest.mark.parametrize("text,message,column", SYNTAX_ERRORS)
def test_syntax_error_message_and_position(text, message, column):
    with pytest.raises(CepSyntaxError) as ei:
        parse_statement(text, "rule.sql")
    err = ei.value.first
    assert message in err.message
    assert (err.line, err.column) == (1, column), err.format()
    formatted = err.format()
    assert formatted.startswith(f"rule.sql:1:{column}: ")
    caret_line = formatted.splitlines()[-1]
    assert caret_line.index("^") == column - 1


# ------------------------------------------------------------------ semantic errors (collected)

CHECK_ERRORS = [
    ("PATTERN (A*) DEFINE A AS TRUE", "can match an empty sequence of rows"),
    ("PATTERN (A B) DEFINE C AS TRUE", "DEFINE C: 'C' does not occur in PATTERN"),
    ("PATTERN (A) DEFINE A AS TRUE, A AS FALSE", "variable 'A' is defined twice"),
    ("MEASURES Z.x AS zx PATTERN (A)", "Z.x: 'Z' is not a pattern variable or subset"),
    ("PATTERN (A B) DEFINE B AS B.x > Q.x", "Q.x: 'Q' is not a pattern variable"),
    ("MEASURES A.x AS m, B.x AS m PATTERN (A B)", "measure name 'm' is used twice"),
    ("AFTER MATCH SKIP TO LAST Z PATTERN (A)", "AFTER MATCH SKIP TO 'Z'"),
    ("PATTERN (A) SUBSET A = (A) DEFINE A AS TRUE", "SUBSET name 'A' is already a pattern variable"),
    ("PATTERN (A) SUBSET U = (A, Z)", "SUBSET U names 'Z'"),
    ("PATTERN (A B) DEFINE B AS PREV(FINAL LAST(A.x)) > 1", "FINAL cannot be used in DEFINE"),
    ("PATTERN (A B) DEFINE B AS FINAL LAST(A.x) > 1", "FINAL cannot be used in DEFINE"),
    ("PATTERN (A B) DEFINE B AS MATCH_NUMBER() > 1", "MATCH_NUMBER() cannot be used in DEFINE"),
    ("MEASURES SUM(A.x + B.x) AS s PATTERN (A B)", "all columns must refer to one pattern variable"),
    ("MEASURES PREV(LAST(A.x) + 1) AS s PATTERN (A B)",
     "LAST(...) inside PREV(...) is not supported: only FIRST/LAST nest, as the whole first argument of PREV/NEXT"),
    ("MEASURES LAST(PREV(A.x)) AS s PATTERN (A B)",
     "PREV(...) inside LAST(...) is not supported: physical navigation (PREV, NEXT) cannot be nested"),
    ("MEASURES NEXT(PREV(A.x)) AS s PATTERN (A B)", "PREV(...) inside NEXT(...) is not supported"),
    ("MEASURES FIRST(LAST(A.x)) AS s PATTERN (A B)", "LAST(...) inside FIRST(...) is not supported"),
    ("MEASURES PREV(LAST(A.x + B.x)) AS s PATTERN (A B)", "all columns must refer to one pattern variable"),
    ("ALL ROWS PER MATCH WITH UNMATCHED ROWS PATTERN (A {- B -} C)", "exclusion {- -} cannot be used with ALL ROWS PER MATCH WITH UNMATCHED ROWS"),
    ("PATTERN (^) DEFINE A AS TRUE", "can match an empty sequence of rows"),
    ("MEASURES SUM(PREV(A.x)) AS s PATTERN (A B)", "PREV(...) inside SUM(...) is not supported"),
    ("MEASURES FIRST(1) AS s PATTERN (A B)", "FIRST(...) needs a column reference"),
    ("MEASURES CLASSIFIER(Z) AS s PATTERN (A B)", "CLASSIFIER(Z): not a pattern variable"),
    ("MEASURES COUNT(Z.*) AS s PATTERN (A B)", "COUNT(Z.*): 'Z' is not a pattern variable"),
    ("MEASURES A.x AS k PATTERN (A B)", "measure 'k' has the name of a PARTITION BY column"),
    ("PATTERN (PERMUTE(A, B, C, D, E, F, G, H))", "PERMUTE of 8 items"),
]


@pytest.mark.parametrize("body,message", CHECK_ERRORS)
def test_check_error_messages(body, message):
    with pytest.raises(RuleError) as ei:
        compile_statement(parse_statement(mr(body)))
    assert any(message in e.message for e in ei.value.errors), str(ei.value)


def test_select_of_unknown_column_is_reported():
    with pytest.raises(RuleError) as ei:
        compile_statement(parse_statement(mr("MEASURES A.x AS ax PATTERN (A)", select="k, nope")))
    assert "SELECT 'nope': not an output column" in str(ei.value)


def test_several_errors_are_collected():
    with pytest.raises(RuleError) as ei:
        compile_statement(parse_statement(mr("MEASURES Z.x AS zx PATTERN (A*) DEFINE C AS TRUE")))
    assert len(ei.value.errors) == 3


def test_large_bounded_quantifier_is_refused():
    with pytest.raises(RuleError, match="more than 20000 automaton steps"):
        compile_statement(parse_statement(mr("PATTERN ((A B C D){1,6000}) DEFINE A AS TRUE")))
