"""Which event fields a pattern rule reads (:func:`spark_udf.backfill.columns_read`), against the engine.

A key-set backfill whose map tasks read the files themselves sends each key set's rows with only
the fields its rules read; so every field a rule's operator takes from a batch must be among them.
Checked two ways over every pattern rule of ``rules/`` on its own test events and over rules that
reach each part of the language (navigation, aggregates, subsets, CASE, functions, time-outs):
the fields the operator asks a batch for are among them, and the rule gives the same matches and
time-outs when every other field is taken out of the events.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from cep.engine import Engine
from cep.events import EventBatch
from patterns.rules import load_rules, parse_rules
from spark_udf.backfill import columns_read

REPO = Path(__file__).resolve().parents[2]

LANGUAGE = """
rules:
  - name: nav
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts
        MEASURES FIRST(A.a) AS fa, LAST(B.b) AS lb, NEXT(A.c) AS nc, CLASSIFIER() AS cls, MATCH_NUMBER() AS mn
        PATTERN (A B+ C)
        DEFINE B AS B.b > PREV(B.b) AND B.a IS NOT NULL, C AS C.c < NEXT(C.d) OR C.e LIKE 'x%')
  - name: aggregates
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (
        PARTITION BY k, g ORDER BY ts
        MEASURES SUM(U.a) AS sa, AVG(U.b) AS ab, COUNT(U.*) AS n, MAX(U.f) AS mf
        PATTERN (U{2,} V)
        SUBSET UV = (U, V)
        DEFINE U AS COALESCE(U.c, 0) + ABS(U.d) < 15, V AS AVG(UV.a) > 4 AND V.e IN ('xa', 'yb'))
  - name: cases
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (
        ORDER BY ts
        MEASURES CASE WHEN X.h > 3 THEN X.a ELSE Y.b END AS pick
        PATTERN (X Y)
        WITHIN INTERVAL '5' SECOND
        DEFINE X AS X.h BETWEEN 2 AND 8, Y AS Y.i = X.i)
  - name: timeouts
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts
        MEASURES P.a AS pa, Q.j AS qj
        ONE ROW PER MATCH WITH TIMEOUT ROWS
        PATTERN (P Q)
        WITHIN INTERVAL '2' SECOND
        DEFINE P AS P.j > 5, Q AS Q.j < 2)
"""


def _language_events(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out, t = [], 1_000_000
    for _ in range(600):
        t += rng.randint(0, 900)
        row: dict[str, Any] = {"k": rng.choice("pq"), "g": rng.choice("xy"), "ts": t}
        for f in "abcdfhij":
            if rng.random() < 0.9:
                row[f] = rng.randint(0, 12)
        row["e"] = rng.choice(["xa", "yb", "zz", None])
        row["unread"] = rng.random()
        out.append(row)
    return out


def _cases() -> list[Any]:
    """(rule, events) for every pattern rule of rules/ with each of its test cases' events, and the language rules."""
    out = []
    for test_file in sorted((REPO / "rules").glob("*.test.yaml")):
        rules = {r.name: r for r in load_rules(test_file.with_name(test_file.name.replace(".test.yaml", ".yaml")))}
        for case in yaml.safe_load(test_file.read_text())["tests"]:
            if "events" in case:
                events = case["events"]
            elif "events_file" in case:
                lines = (test_file.parent / case["events_file"]).read_text().splitlines()
                events = [json.loads(x) for x in lines if x.strip()]
            else:
                continue
            for name in case.get("rules") or list(rules):
                if rules[name].kind == "pattern":
                    out.append(pytest.param(rules[name], events, id=f"{test_file.name.split('.')[0]}:{case['name'][:40]}:{name}"))
    for r in parse_rules(LANGUAGE).rules:
        out.append(pytest.param(r, _language_events(len(r.name)), id=f"language:{r.name}"))
    return out


def _run(rule: Any, events: list[dict[str, Any]]) -> Any:
    eng = Engine([rule])
    out = eng.process(events)
    out.extend(eng.finish())
    return out


def _rows(out: Any) -> tuple[list[str], list[str]]:
    def key(rows: list[dict[str, Any]]) -> list[str]:
        return sorted(json.dumps({k: v for k, v in r.items() if k != "_id"}, sort_keys=True, default=str) for r in rows)
    return key(out.matches), key(out.timeouts)


@pytest.mark.parametrize("rule,events", _cases())
def test_a_rule_reads_only_the_fields_columns_read_names(rule: Any, events: list[dict[str, Any]],
                                                          monkeypatch: Any) -> None:
    fields = columns_read(rule)
    assert fields is not None  # (ALL ROWS PER MATCH keeps whole events: test_all_rows_keep_whole_events)
    asked: set[str] = set()
    column = EventBatch.column

    def spy(self: EventBatch, name: str) -> Any:
        asked.add(name)
        return column(self, name)

    monkeypatch.setattr(EventBatch, "column", spy)
    full = _run(rule, events)
    monkeypatch.setattr(EventBatch, "column", column)
    assert asked <= fields, sorted(asked - fields)
    narrow = [{k: v for k, v in e.items() if k in fields} if isinstance(e, dict) else e for e in events]
    thin = _run(rule, narrow)
    assert _rows(thin) == _rows(full)
    assert [(r.get("reason"), r.get("line")) for r in thin.late + thin.errors] == \
        [(r.get("reason"), r.get("line")) for r in full.late + full.errors]


def test_the_cases_reach_every_rule_file_and_find_matches() -> None:
    """The check above is not vacuous: it covers every rule file with pattern rules, and most cases match."""
    cases = _cases()
    files = {c.id.split(":")[0] for c in cases}
    assert files == {"ops", "orders", "trading", "trends", "language"}  # (fraud and sp500 test named inputs)
    matched = sum(1 for c in cases if any(_rows(_run(*c.values))))
    assert matched >= len(cases) // 2, (matched, len(cases))


def test_all_rows_keep_whole_events() -> None:
    sql = ("SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.a AS x ALL ROWS PER MATCH "
           "PATTERN (A B) DEFINE B AS B.a > A.a)")
    assert columns_read(parse_rules(sql).rules[0]) is None
    assert columns_read(parse_rules(sql.replace("ALL ROWS PER MATCH ", "")).rules[0]) == {"k", "ts", "a"}
