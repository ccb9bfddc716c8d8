"""Golden cases: one readable file per case in tests/fixtures/golden (rule, events, expected rows)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cep.engine import Engine
from patterns.rules import parse_rule_text

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
CASES = sorted(GOLDEN.glob("*.yaml"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden_case(path):
    case = yaml.safe_load(path.read_text())
    engine = Engine([parse_rule_text(case["sql"], name=path.stem)])
    rows = engine.run([case["events"]]).matches
    for r in rows:
        assert r.pop("rule") == path.stem
    assert rows == case["expected"], case.get("source")


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden_case_one_event_at_a_time(path):
    case = yaml.safe_load(path.read_text())
    engine = Engine([parse_rule_text(case["sql"], name=path.stem)])
    rows = engine.run([[e] for e in case["events"]]).matches
    assert [{k: v for k, v in r.items() if k != "rule"} for r in rows] == case["expected"]


def test_there_are_golden_cases():
    assert len(CASES) >= 9
