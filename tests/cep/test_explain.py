"""``cep explain`` for pattern rules: its verdicts are the engine's, on the examples and by hand.

The key test replays every pattern rule of the example rule files over its bundled data and, for
several keys each, checks that the matches (and timeout rows) in the explanation are exactly the
rows ``cep run``'s Engine emits for that key. Hand-made inputs then pin each verdict kind, the
nearest miss, and the command's output and error messages.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.cli import main
from cep.cli.explain import concat_batches, parse_key, parse_time_bound, rule_events
from cep.cli.inputs import _parse_inputs, input_batches
from cep.engine import Engine
from cep.events import batch_from_records
from cep.explain import ExplainError, Explanation
from cep.explain.pattern import expr_sql, explain_pattern
from cep.explain.render import render_json, render_text
from patterns.rules import load_rules, parse_rule_text

REPO = Path(__file__).resolve().parents[2]

# the examples' bundled inputs, as the README's table runs them
EXAMPLES = {
    "fraud.yaml": ["transactions=rules/data/transactions.jsonl", "authorisations=rules/data/authorisations.jsonl"],
    "trading.yaml": ["rules/data/sp500_daily_2017_sample.jsonl"],
    "trends.yaml": ["rules/data/sp500_daily_2017_sample.jsonl"],
    "ops.yaml": ["rules/data/nasa_http_sample.jsonl"],
    "sessions.yaml": ["searches=rules/data/searches.jsonl", "clicks=rules/data/clicks.jsonl"],
    "orders.yaml": ["rules/data/orders.jsonl"],
}


def _jsonable(row: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in row.items()}, sort_keys=True, default=str)


def _run_example(name: str) -> tuple[Any, Any, set[str], Any]:
    rules = load_rules(REPO / "rules" / name)
    inputs = [(n, str(REPO / p)) for n, p in _parse_inputs(EXAMPLES[name])]
    batches = list(input_batches(rules, inputs, None, None, 8192))
    named = {n for n, _ in inputs if n}
    engine = Engine(rules, streams=named)
    out = [engine.process(b, s) for b, s in batches]
    fin = engine.finish()
    matches = [r for o in out for r in o.matches] + fin.matches
    timeouts = [r for o in out for r in o.timeouts] + fin.timeouts
    tagged = []
    for b, s in batches:
        if s is not None and "stream" not in b.columns:
            b.columns["stream"] = np.full(b.n, s, dtype=object)
        tagged.append(b)
    return rules, concat_batches(tagged), named, (matches, timeouts, engine)


@pytest.fixture(scope="module")
def examples() -> dict[str, Any]:
    return {name: _run_example(name) for name in EXAMPLES}


def _pattern_rules() -> list[tuple[str, str]]:
    return [(name, r.name) for name in EXAMPLES for r in load_rules(REPO / "rules" / name) if r.kind == "pattern"]


def _key_of(row: dict[str, Any], cols: list[str]) -> tuple:
    return tuple(row.get(c) for c in cols)


def _chosen_keys(events, cols: list[str], rows: list[dict[str, Any]]) -> list[tuple]:
    """Up to five keys: the two with most rows, the one with fewest, and two with none if any."""
    per = Counter(_key_of(r, cols) for r in rows)
    every = list(dict.fromkeys(zip(*[events.column(c).tolist() for c in cols]))) if cols else [()]
    every = [k for k in every if not any(v is None for v in k)]
    ranked = [k for k, _ in per.most_common()]
    none = [k for k in every if k not in per]
    chosen = ranked[:2] + ranked[-1:] + none[:2]
    return list(dict.fromkeys(chosen)) or every[:1]


@pytest.mark.parametrize("name, rule_name", _pattern_rules(), ids=lambda x: x)
def test_explained_matches_are_the_engine_rows_of_the_key(examples, name, rule_name):
    rules, batch, named, (matches, timeouts, _engine) = examples[name]
    rule = next(r for r in rules if r.name == rule_name)
    cols = list(rule.compiled.statement.partition_by)
    mine = [r for r in matches if r["rule"] == rule_name]
    mine_t = [r for r in timeouts if r["rule"] == rule_name]
    events = rule_events(rule, batch, named)
    keys = _chosen_keys(events, cols, mine)
    assert keys
    for key in keys:
        ex = explain_pattern(rule, events, dict(zip(cols, key)), None, None)
        got = [r for v in ex.outcome if v.kind == "match" for r in v.data["rows"]]
        want = [r for r in mine if _key_of(r, cols) == key]
        assert [_jsonable(r) for r in got] == [_jsonable(r) for r in want], (rule_name, key)
        got_t = [r for v in ex.outcome if v.kind == "deadline" for r in v.data.get("timeout_rows", [])]
        want_t = [r for r in mine_t if _key_of(r, cols) == key]
        assert sorted(map(_jsonable, got_t)) == sorted(map(_jsonable, want_t)), (rule_name, key)
        assert ex.matched == bool(want)
        if not want:
            assert [v.kind for v in ex.outcome if v.kind != "deadline"] == ["nearest_miss"]
