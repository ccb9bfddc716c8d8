"""Fuzzing the parsers of user text: rule files, MATCH_RECOGNIZE, Lucene queries.

Any input gives a result or our own error with a position; never another exception or a hang.
Grammar-aware generators (tests/reliability/fuzzing.py) reach deep into each parser; random
text covers the rest. Inputs that once found a bug are kept in REGRESSIONS below.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patterns.match_recognize import parse_statement
from patterns.rules import parse_rules
from tests.reliability.fuzzing import (
    check_contract,
    mutated_query,
    mutated_statement,
    rule_file,
    statement,
)

try:
    from patterns import lucene
except ImportError:  # pragma: no cover - the search-query parser lands separately
    lucene = None  # type: ignore[assignment]

FUZZ = settings(max_examples=50, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def compile_rule_text(text: str):
    """MATCH_RECOGNIZE text through the whole front end: parse, check, compile."""
    from patterns.rules import parse_rule_text

    return parse_rule_text(text)


# ------------------------------------------------------------------ MATCH_RECOGNIZE

@FUZZ
@given(statement())
def test_match_recognize_grammar(text):
    check_contract(parse_statement, text)
    check_contract(compile_rule_text, text)


@FUZZ
@given(mutated_statement())
def test_match_recognize_mutated(text):
    check_contract(compile_rule_text, text)


@FUZZ
@given(st.text(max_size=200))
def test_match_recognize_random_text(text):
    check_contract(parse_statement, text)
    check_contract(compile_rule_text, "SELECT * FROM t MATCH_RECOGNIZE (" + text)


# ------------------------------------------------------------------ rule files

@FUZZ
@given(rule_file())
def test_rule_files_grammar(text):
    check_contract(parse_rules, text)


@FUZZ
@given(st.text(max_size=300))
def test_rule_files_random_text(text):
    check_contract(parse_rules, text)
    check_contract(parse_rules, "rules:\n  - name: r\n    sql: " + text)


# ------------------------------------------------------------------ search queries

needs_lucene = pytest.mark.skipif(lucene is None, reason="patterns.lucene is not there yet")


@needs_lucene
@FUZZ
@given(mutated_query())
def test_lucene_grammar(text):
    check_contract(lucene.parse, text)
    check_contract(lucene.compile_query, text)


@needs_lucene
@FUZZ
@given(st.text(max_size=120))
def test_lucene_random_text(text):
    check_contract(lucene.parse, text)
    check_contract(lucene.compile_query, text)


# ------------------------------------------------------------------ inputs that found bugs

REGRESSIONS: list[tuple[str, str, str]] = [
    # kind: [] raised TypeError (unhashable list) in patterns.rules.parse_rules
    ("rules", "rules:\n- name: a\n  kind: []\n  sql: x\n", "rule 'a': unknown kind []"),
    ("rules", "%YAML 1.1\n---\nother: 1\nrules:\n- description: 197\n  kind: []\n  lateness: true\n"
              "  max_partial_matches: []\n  name: \"\\xE9\"\n  sql: -4.1018244344923256e+16\n- name: a b\n",
     "unknown kind []"),
    # found by atheris: a quantifier bound written as a decimal raised ValueError from int()
    ("sql", "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A{.4}) DEFINE A AS x > 0)",
     "quantifier bounds must be whole numbers, found '.4'"),
    ("sql", "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A{1,2.5}) DEFINE A AS x > 0)",
     "quantifier bounds must be whole numbers, found '2.5'"),
    ("sql", "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A{1e3}) DEFINE A AS x > 0)",
     "quantifier bounds must be whole numbers, found '1e3'"),
    # a registered kind whose module is not installed raised ModuleNotFoundError
    ("rules", "rules:\n- name: r0\n  kind: search\n  sql: analytics\n", ""),
]


@pytest.mark.parametrize("which,text,message", REGRESSIONS)
def test_regressions(which, text, message):
    fn = {"sql": compile_rule_text, "rules": parse_rules, "lucene": getattr(lucene, "compile_query", None)}[which]
    if fn is None:
        pytest.skip("patterns.lucene is not there yet")
    res = check_contract(fn, text)
    assert message in str(res)
