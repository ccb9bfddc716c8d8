"""Rule files and search queries are data, never code.

A rule or query that reaches for Python builtins, attributes or imports is refused with a clear
error or read as plain data (a column, a term); YAML is loaded safely; and no module of the
runtime or the languages evaluates text.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cep.engine import Engine
from patterns.errors import CepSyntaxError, RuleErrors
from patterns.rules import parse_rule_text, parse_rules
from tests.reliability.fuzzing import time_bound

REPO = Path(__file__).resolve().parents[2]
SQL = "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES {m} AS out PATTERN (A) DEFINE A AS {d})"


@pytest.mark.parametrize("measure,define,message", [
    ("A.x", "__import__('os')", "unknown function '__import__'; known functions: ABS"),
    ("A.x", "__import__('os').system('true')", "unknown function '__import__'"),
    ("A.x", "eval('1 + 1')", "unknown function 'eval'"),
    ("A.x", "exec('import os')", "unknown function 'exec'"),
    ("A.x", "getattr(x, '__class__')", "unknown function 'getattr'"),
    ("A.x", "open('/etc/passwd') IS NOT NULL", "unknown function 'open'"),
    ("__import__('os')", "TRUE", "unknown function '__import__'"),
    ("A.x", "x.__class__ IS NOT NULL", "'x' is not a pattern variable or subset (variables: A)"),
    ("A.x", "A.__class__.__bases__ IS NULL", "expected ')' to close MATCH_RECOGNIZE"),
    ("A.x", "x[0] = 1", "unexpected character '['"),
    ("A.x", "lambda: 1", "unexpected character ':'"),
])
def test_code_in_a_pattern_is_refused_with_a_clear_error(measure, define, message):
    with pytest.raises(CepSyntaxError) as exc:
        parse_rule_text(SQL.format(m=measure, d=define))
    assert message in str(exc.value)
    assert "^" in str(exc.value)  # with a caret under the offending token


def test_dunder_names_are_plain_columns_and_strings_plain_text():
    rule = parse_rule_text(SQL.format(m="A.__class__", d="`__builtins__` = '__import__(\"os\")'"))
    eng = Engine([rule])
    events = [
        {"k": 1, "ts": 1, "__class__": "c1", "__builtins__": '__import__("os")'},
        {"k": 1, "ts": 2, "__class__": "c2", "__builtins__": "other"},
        {"k": 1, "ts": 3},
    ]
    out = eng.process(events).matches + eng.finish().matches
    assert out == [{"k": 1, "out": "c1", "rule": "rule"}]


@pytest.mark.parametrize("text,message", [
    ("rules:\n  - name: a\n    sql: !!python/object/apply:os.system ['true']\n",
     "could not determine a constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'"),
    ("rules:\n  - name: a\n    lateness: !!python/object/apply:time.sleep [10]\n    sql: SELECT 1\n",
     "could not determine a constructor for the tag 'tag:yaml.org,2002:python/object/apply:time.sleep'"),
    ("rules:\n  - !!python/object/apply:os.system ['true']\n", "each rule must be a mapping with 'name' and 'sql'"),
    ("rules: !!python/object/new:os.system [echo]\n", "each rule must be a mapping with 'name' and 'sql'"),
    ("!!python/object/new:os.system [echo]\n", "expected a top-level 'rules:' holding a list of rules"),
    ("rules:\n  - name: !!python/name:os.system\n    sql: x\n", "rule has no 'name'"),
])
def test_yaml_python_tags_are_refused(text, message):
    with pytest.raises(RuleErrors) as exc:
        parse_rules(text)
    assert message in str(exc.value)


def test_yaml_alias_bombs_stay_small_and_fast():
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        lines.append(f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [{','.join(['*' + prev] * 9)}]")
    text = "\n".join(lines) + "\nrules:\n  - name: r\n    description: *i\n    sql: SELECT\n"
    with time_bound(5.0), pytest.raises(RuleErrors):
        parse_rules(text)


def test_search_queries_that_look_like_code_are_terms():
    lucene = pytest.importorskip("patterns.lucene")
    for q in ["__import__('os')", "__class__:x", "x.__class__", "eval(1)", "body:__builtins__"]:
        lucene.compile_query(q)  # parses as terms and fields, nothing more
    assert str(lucene.parse("__class__:x")) == "__class__:x"


# ------------------------------------------------------------------ the code base itself

SCANNED = ("cep", "patterns", "sketches", "spark_udf")
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
UNSAFE_YAML = {"load", "full_load", "unsafe_load", "load_all", "full_load_all", "unsafe_load_all"}


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                yield node, None, f.id
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                yield node, f.value.id, f.attr


def test_no_module_evaluates_text():
    problems = []
    for pkg in SCANNED:
        for path in sorted((REPO / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            # state (snapshots, checkpoints, saved indexes, Spark state) is unpickled only through
            # cep.safe_pickle, which admits plain values and the engine's own classes: a crafted
            # file runs nothing (tests/reliability/test_crafted_state.py)
            for node, owner, name in _calls(tree):
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                if owner is None and name in FORBIDDEN_CALLS:
                    problems.append(f"{where}: {name}()")
                if owner == "builtins" and name in FORBIDDEN_CALLS:
                    problems.append(f"{where}: builtins.{name}()")
                if owner == "yaml" and name in UNSAFE_YAML:
                    loader = {k.arg: k.value for k in node.keywords}.get("Loader")
                    if not (isinstance(loader, ast.Attribute) and loader.attr in ("SafeLoader", "CSafeLoader")):
                        problems.append(f"{where}: yaml.{name} without a safe loader")
                if owner == "pickle" and name in ("loads", "load", "Unpickler"):
                    problems.append(f"{where}: pickle.{name}: unpickle through cep.safe_pickle.loads")
    assert problems == []
