"""Wildcards and LIKE patterns match in linear time, with the answers of a regular expression (issue 13, item 7).

``a*a*a*a*a*a*a*a*a*a*a*a*c`` against a headline holding one 40-letter token took a minute with a
backtracking regular expression, in ``cep percolate`` and in search rules.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from cep.engine import Engine
from cep.percolator import NoFiltering, Percolator, PercolatorConfig
from patterns.glob import Glob
from patterns.lucene import QueryConfig
from patterns.rules import parse_rules
from tests.reliability.fuzzing import time_bound

EVIL = "a*a*a*a*a*a*a*a*a*a*a*a*c"


def reference(pattern: str, many: str = "*", one: str = "?") -> re.Pattern[str]:
    body = "".join(".*" if c == many else "." if c == one else re.escape(c) for c in pattern)
    return re.compile(body, re.DOTALL)


def test_glob_agrees_with_the_regular_expression_on_random_patterns() -> None:
    rng = random.Random(13)
    for _ in range(20_000):
        pattern = "".join(rng.choice("ab*?") for _ in range(rng.randint(0, 8)))
        text = "".join(rng.choice("abc") for _ in range(rng.randint(0, 10)))
        want = reference(pattern).fullmatch(text) is not None
        assert (Glob(pattern).fullmatch(text) is not None) == want, (pattern, text)


def test_like_syntax_agrees_with_the_regular_expression() -> None:
    rng = random.Random(7)
    for _ in range(5_000):
        pattern = "".join(rng.choice("ab%_*") for _ in range(rng.randint(0, 8)))
        text = "".join(rng.choice("ab*") for _ in range(rng.randint(0, 10)))
        want = reference(pattern, "%", "_").fullmatch(text) is not None
        assert (Glob(pattern, many="%", one="_").fullmatch(text) is not None) == want, (pattern, text)


def test_a_long_token_against_many_stars_is_immediate() -> None:
    token = "a" * 10_000
    fifty = "a*" * 50 + "c"
    with time_bound(2.0):
        start = time.perf_counter()
        assert Glob(fifty).fullmatch(token) is None
        assert Glob(fifty).fullmatch(token + "c") is True
        assert Glob("*a?a*" * 25 + "c").fullmatch(token) is None
        elapsed = time.perf_counter() - start
    assert elapsed < 1.0  # generous: the backtracking expression needed minutes for 60 letters


@pytest.mark.parametrize("cls", [Percolator, NoFiltering])
def test_percolator_answers_the_backtracking_query_at_once(cls) -> None:
    p = cls(PercolatorConfig(query=QueryConfig(default_fields=("text",))))
    p.register("evil", EVIL)
    p.register("fine", "a*c")
    docs = [{"text": "headline with " + "a" * 40}, {"text": "headline with " + "a" * 60 + "c"}]
    with time_bound(5.0):
        got = [p.percolate(d).ids for d in docs]
        batch = [r.ids for r in p.percolate_batch(docs * 10).results]
    assert got == [[], ["evil", "fine"]]
    assert batch == got * 10


def test_search_rule_and_like_condition_do_not_backtrack() -> None:
    rules = parse_rules(f"""
rules:
  - name: evil_search
    kind: search
    from: s
    time_field: ts
    default_fields: [text]
    fields: [ts]
    queries:
      - id: evil
        query: '{EVIL}'
  - name: evil_like
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (
        ORDER BY ts MEASURES A.ts AS t PATTERN (A)
        DEFINE A AS A.text LIKE '{EVIL.replace("*", "%")}')
""")
    events = [{"ts": i, "text": "a" * 60 + ("c" if i % 2 else "")} for i in range(20)]
    with time_bound(5.0):
        out = Engine(rules).run([events])
    by_rule: dict[str, int] = {}
    for m in out.matches:
        by_rule[m["rule"]] = by_rule.get(m["rule"], 0) + 1
    assert by_rule == {"evil_search": 10, "evil_like": 10}
