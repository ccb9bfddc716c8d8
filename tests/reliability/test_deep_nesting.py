"""Deeply nested rules and queries get a caret error, never a RecursionError (issue 13, item 6).

150 nested parentheses in a DEFINE, 250 in a PATTERN and 500 in a Lucene query ended in a
``RecursionError`` traceback with exit code 1, the code ``--fail-on-match`` gives a detection.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cep.cli import main
from cep.engine import Engine
from patterns.ast import MAX_CHAIN, MAX_EXPRESSION_DEPTH, MAX_NESTING
from patterns.errors import CepSyntaxError, RuleErrors
from patterns.lucene import MAX_GROUP_DEPTH, QueryConfig, compile_query, parse
from patterns.rules import parse_rules
from tests.reliability.fuzzing import time_bound


def pattern_rule(define: str = "A.x > 0", pattern: str = "A", measures: str = "A.ts AS t") -> str:
    return ("rules:\n  - name: r\n    sql: |\n      SELECT * FROM s MATCH_RECOGNIZE (ORDER BY ts "
            f"MEASURES {measures} PATTERN ({pattern}) DEFINE A AS {define})\n")


def analytics_rule(where: str) -> str:
    return ("rules:\n  - name: r\n    kind: analytics\n    sql: |\n      SELECT COUNT(*) AS n FROM s "
            f"WHERE {where} GROUP BY TUMBLE(ts, INTERVAL '1' HOUR)\n")


HOSTILE = {
    "define parentheses": pattern_rule(define="(" * 150 + "A.x > 0" + ")" * 150),
    "define NOT": pattern_rule(define="NOT " * 3000 + "A.x > 0"),
    "define signs": pattern_rule(define="A.x > " + "- " * 3000 + "1"),
    "define calls": pattern_rule(define="ABS(" * 300 + "A.x" + ")" * 300 + " > 0"),
    "define CASE": pattern_rule(define="CASE WHEN " * 200 + "TRUE" + " THEN TRUE END" * 200),
    "pattern groups": pattern_rule(pattern="(" * 250 + "A" + ")" * 250),
    "pattern exclusions": pattern_rule(pattern="{- " * 250 + "A" + " -}" * 250),
    "pattern quantifiers": pattern_rule(pattern="A" + "{1}" * 3000),
    "analytics WHERE": analytics_rule("(" * 300 + "x > 0" + ")" * 300),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_deep_rule_text_is_a_caret_error(name: str) -> None:
    with time_bound(10.0), pytest.raises(RuleErrors) as err:
        parse_rules(HOSTILE[name])
    first = err.value.errors[0]
    assert f"more than {MAX_NESTING} levels deep" in first.message, first.message
    assert first.line == 1 + next(i for i, x in enumerate(HOSTILE[name].splitlines()) if "SELECT" in x)
    assert "^" in str(err.value)


def total(n: int, var: str = "") -> str:
    return " + ".join(f"{var}c{i}" for i in range(n))


def events(n: int) -> list[dict]:
    return [{"ts": ts, "k": 1, **{f"c{i}": i + ts for i in range(n)}} for ts in (1, 2, 7200_000)]


def test_a_60_operand_sum_in_define_and_measures_is_flat_and_right() -> None:
    # before: "nested more than 50 levels deep (chained operators, ...)" while a 60-term AND passed
    rules = parse_rules(pattern_rule(define=f"{total(60, 'A.')} > 1800", measures=f"A.ts AS t, {total(60, 'A.')} AS s"))
    out = Engine(rules).process(events(60))
    # sum of i + ts over i < 60 is 1770 + 60 ts: 1830 > 1800 from ts 1 on
    assert [(m["t"], m["s"]) for m in out.matches] == [(ts, 1770 + 60 * ts) for ts in (1, 2, 7200_000)]


def test_a_60_operand_sum_in_an_analytics_select_and_where_is_flat_and_right() -> None:
    rules = parse_rules("rules:\n  - name: r\n    kind: analytics\n    sql: |\n      SELECT SUM("
                        f"{total(60)}) AS s FROM t WHERE {total(60)} > 1800 GROUP BY TUMBLE(ts, INTERVAL '1' HOUR)\n")
    engine = Engine(rules)
    out = engine.process(events(60))
    rows = out.matches + engine.finish().matches
    assert [r["s"] for r in rows] == [(1770 + 60) + (1770 + 120), 1770 + 60 * 7200_000]


def test_a_chain_keeps_its_left_associative_tree() -> None:
    from patterns import ast as A
    from patterns.match_recognize import parse_expression

    e = parse_expression("a - b - c * d / e")
    assert e == A.Binary("-", A.Binary("-", A.Column(None, "a"), A.Column(None, "b")),
                         A.Binary("/", A.Binary("*", A.Column(None, "c"), A.Column(None, "d")), A.Column(None, "e")))


@pytest.mark.parametrize("op", ["+", "*", "||"])
def test_a_chain_longer_than_the_limit_is_a_caret_error_at_the_operator_too_many(op: str) -> None:
    define = "A.x" + f" {op} A.x" * 5000 + " > 0"
    text = pattern_rule(define=define)
    with time_bound(10.0), pytest.raises(RuleErrors) as err:
        parse_rules(text)
    first = err.value.errors[0]
    assert first.message.startswith(f"more than {MAX_CHAIN} operands joined by ")
    assert f"(this {op!r} brings operand {MAX_CHAIN + 1})" in first.message
    line = text.splitlines()[first.line - 1]
    assert line[first.column - 1:].startswith(f"{op} A.x") and line[:first.column - 1].count(" A.x") == MAX_CHAIN
    assert "^" in str(err.value)


def test_a_chain_at_the_limit_parses() -> None:
    parse_rules(pattern_rule(define=f"{total(MAX_CHAIN, 'A.')} > 0"))


def test_chains_stacked_in_parentheses_are_bounded_as_a_whole() -> None:
    chain = total(MAX_CHAIN - 1, "A.")
    define = chain
    for _ in range(3):  # each chain is within the limit, and adds its operators to the tree's left spine
        define = f"({define}) + {chain}"
    with time_bound(10.0), pytest.raises(RuleErrors) as err:
        parse_rules(pattern_rule(define=define + " > 0"))
    first = err.value.errors[0]
    assert f"is more than {MAX_EXPRESSION_DEPTH} levels deep as a tree" in first.message
    # the caret is where the expression starts: the first of the opening parentheses
    line = pattern_rule(define=define + " > 0").splitlines()[first.line - 1]
    assert first.column == line.index("DEFINE A AS ") + len("DEFINE A AS ") + 1
    assert "^" in str(err.value)


def test_running_repeated_past_the_limit_is_a_caret_error_not_a_recursion() -> None:
    with time_bound(10.0), pytest.raises(RuleErrors) as err:
        parse_rules(pattern_rule(define="RUNNING " * 2000 + "LAST(A.x) > 0"))
    assert f"nested more than {MAX_NESTING} levels deep" in err.value.errors[0].message


def test_150_nested_parentheses_around_a_short_sum_are_still_refused() -> None:
    text = pattern_rule(define="(" * 150 + "A.x + A.y" + ")" * 150 + " > 0")
    with pytest.raises(RuleErrors) as err:
        parse_rules(text)
    first = err.value.errors[0]
    assert f"nested more than {MAX_NESTING} levels deep" in first.message
    line = text.splitlines()[first.line - 1]
    assert line[:first.column - 1].endswith("(" * (MAX_NESTING - 1))  # the caret under the first '(' too many


def test_nesting_up_to_the_limit_is_accepted() -> None:
    depth = MAX_NESTING - 5  # a Compare and a Column sit inside the parentheses
    rules = parse_rules(pattern_rule(define="(" * depth + "A.x > 0" + ")" * depth,
                                     pattern="(" * depth + "A" + ")" * depth))
    assert rules.rules[0].name == "r"


@pytest.mark.parametrize("query", ["(" * 500 + "a" + ")" * 500, "(a OR " * 300 + "b" + ")" * 300,
                                   "title:(" * 300 + "x" + ")" * 300])
def test_deep_lucene_query_is_a_caret_error(query: str) -> None:
    with time_bound(10.0), pytest.raises(CepSyntaxError) as err:
        compile_query(query, QueryConfig())
    assert f"more than {MAX_GROUP_DEPTH} levels deep" in err.value.errors[0].message
    opens = [i for i, c in enumerate(query) if c == "("]
    assert err.value.errors[0].column == opens[MAX_GROUP_DEPTH] + 1  # the first '(' too many


def test_lucene_nesting_at_the_limit_parses() -> None:
    parse("(" * MAX_GROUP_DEPTH + "a" + ")" * MAX_GROUP_DEPTH)


def test_cep_check_reports_deep_rules_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(HOSTILE["define parentheses"])
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "levels deep" in err and "deep.yaml:4:" in err and "RecursionError" not in err


def test_cep_percolate_serves_the_other_queries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"id": "deep", "query": "(" * 500 + "a" + ")" * 500}) + "\n"
                       + json.dumps({"id": "fine", "query": "apple"}) + "\n")
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "d1", "text": "an apple a day"}) + "\n")
    out = tmp_path / "out.jsonl"
    code = main(["percolate", "--queries", str(queries), "--input", str(docs), "--output", str(out),
                 "--default-field", "text"])
    err = capsys.readouterr().err
    assert code in (0, 2), err
    assert "levels deep" in err and "RecursionError" not in err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 1 and "fine" in json.dumps(rows[0]) and "deep" not in json.dumps(rows[0])
