"""Rule files: YAML and .sql, options, and errors that point at the file's own line and column."""

from __future__ import annotations

import pytest

from patterns.errors import RuleErrors
from patterns.rules import load_rules, parse_rules

GOOD = """\
rules:
  - name: rise
    lateness: 5 seconds
    max_partial_matches: 100
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY sym ORDER BY ts
        PATTERN (A B+)
        DEFINE B AS B.px > PREV(B.px))
  - name: off
    enabled: false
    sql: SELECT * FROM ticks MATCH_RECOGNIZE (ORDER BY ts PATTERN (A))
  - name: fall
    sql: "SELECT * FROM ticks MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) DEFINE B AS B.px < A.px)"
"""


def test_yaml_rule_file_with_options():
    rs = parse_rules(GOOD, "good.yaml")
    assert rs.names() == ["rise", "fall"]
    rise = rs.rules[0]
    assert rise.lateness_ms == 5000
    assert rise.max_partial_matches == 100
    assert rise.stream == "ticks"


def test_sql_file_is_a_rule_file(tmp_path):
    p = tmp_path / "spike.sql"
    p.write_text("SELECT * FROM s MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS x > 10)")
    rs = load_rules(p)
    assert rs.names() == ["spike"]


def errors_of(text: str, file: str = "r.yaml") -> list:
    with pytest.raises(RuleErrors) as ei:
        parse_rules(text, file)
    return ei.value.errors


def test_error_inside_block_sql_points_at_the_file_line_and_column():
    text = """\
rules:
  - name: bad
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (
        ORDER BY ts
        PATTERN (A B)
        DEFINE B AS B.x >> 1)
"""
    (err,) = errors_of(text)
    assert err.line == 7
    assert err.column == 26  # the second '>' on "        DEFINE B AS B.x >> 1)"
    assert err.format().startswith("r.yaml:7:26: expected an expression")


def test_error_inside_quoted_sql_points_at_the_file_column():
    text = 'rules:\n  - name: q\n    sql: "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A*))"\n'
    (err,) = errors_of(text)
    assert err.line == 3
    assert "can match an empty sequence" in err.message
    assert err.column == text.splitlines()[2].index("A*") + 1


def test_every_error_is_collected():
    text = """\
rules:
  - name: one
    sql: SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A*))
  - name: one
    sql: SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A))
  - name: two
    lateness: soon
    sql: SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE Z AS TRUE)
  - name: three
    colour: blue
  - sql: SELECT 1
"""
    errs = errors_of(text)
    messages = [e.message for e in errs]
    assert any("can match an empty sequence" in m for m in messages)
    assert any("duplicate rule name 'one' (first defined on line 2)" in m for m in messages)
    assert any("cannot read 'soon' as an interval" in m for m in messages)
    assert any("DEFINE Z: 'Z' does not occur in PATTERN" in m for m in messages)
    assert any("unknown key 'colour' for a pattern rule" in m for m in messages)
    assert any("rule 'three' has no 'sql' statement" in m for m in messages)
    assert any("rule has no 'name'" in m for m in messages)
    dup = next(e for e in errs if "duplicate" in e.message)
    assert dup.line == 4


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "empty rule file"),
        ("rules: 3\n", "expected a top-level 'rules:' holding a list"),
        ("rulez: []\n", "unknown top-level key 'rulez'"),
        ("rules: [\n", "not a valid YAML rule file"),
        ("rules:\n  - 7\n", "each rule must be a mapping"),
        ("rules:\n  - name: x\n    kind: weird\n    sql: s\n", "unknown kind 'weird'; expected one of: pattern, analytics, search"),
        ("rules:\n  - name: x\n    max_partial_matches: 0\n    sql: s\n", "max_partial_matches must be at least 1"),
        ("rules:\n  - name: x\n    lateness: -5\n    sql: s\n", "must not be negative"),
    ],
)
def test_file_level_errors(text, message):
    errs = errors_of(text)
    assert any(message in e.message for e in errs), [e.message for e in errs]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(RuleErrors, match="rule file not found"):
        load_rules(tmp_path / "nope.yaml")


def test_yaml_is_loaded_safely():
    # a Python-object tag is refused by the safe loader, never constructed
    errs = errors_of("rules: !!python/object/apply:os.system ['echo hacked']\n")
    assert any("each rule must be a mapping" in e.message for e in errs)
    errs = errors_of("rules:\n  - name: x\n    sql: !!python/name:os.system\n")
    assert any("could not determine a constructor" in e.message for e in errs), [e.message for e in errs]
