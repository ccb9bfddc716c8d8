"""``cep explain`` shows what ``cep run`` runs: the rewritten conditions, the stepping path and why a faster one was declined."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cep.absence as absence_path
import cep.batch_dfa as batch_dfa
import cep.lanes as lanes
import cep.nfa as nfa
from cep.cli import main
from cep.explain.paths import stepping_path
from cep.operator import PatternOperator
from patterns.rules import load_rules, parse_rule_text

REPO = Path(__file__).resolve().parents[2]
TRADING = str(REPO / "rules" / "trading.yaml")
BARS = str(REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl")


def _rule(body: str, measures: str = "MEASURES FIRST(ts) AS t0", name: str = "r"):
    return parse_rule_text(f"SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts {measures} {body})", name)


# (rule body, measures or None, the path, the declined paths with a word of each reason)
CASES = {
    "row_local": ("PATTERN (A B+ C) DEFINE A AS v = 0, B AS v > PREV(v), C AS v < PREV(v)", None,
                  "batch_dfa", {}),
    "rewritten": ("PATTERN (R{3} D) WITHIN INTERVAL '7' DAY DEFINE R AS R.v > PREV(R.v), D AS D.v < LAST(R.v) * 0.98",
                  None, "batch_dfa", {}),
    "within_varying": ("PATTERN (A B+ C) WITHIN INTERVAL '1' SECOND DEFINE A AS v = 0, B AS v > PREV(v), C AS v < 3",
                       None, "lazy_dfa", {"batch_dfa": "different lengths"}),
    "next": ("PATTERN (A B) DEFINE A AS v < NEXT(v), B AS v > 0", None, "general",
             {"lazy_dfa": "a later row (A: v < NEXT(v))", "lanes": "NEXT"}),
    "measure": ("PATTERN (A B+) DEFINE A AS v = 0, B AS v > PREV(v)", "MEASURES AVG(B.v) AS avg_v",
                "lazy_dfa", {"batch_dfa": "measure"}),
    "absence": ("PATTERN (A NOT B) WITHIN INTERVAL '1' SECOND DEFINE A AS v = 0, B AS v = 1", None, "absence", {}),
    "lanes": ("PATTERN (S R{3,} B) DEFINE R AS R.v < S.v, B AS B.v > S.v", None, "lanes",
              {"lazy_dfa": "reads the match"}),
    "general": ("PATTERN (A (B | C)+ D) DEFINE A AS v = 0, B AS B.v > A.v, C AS SUM(C.v) < 9, D AS D.v > LAST(B.v)",
                None, "general", {"lazy_dfa": "reads the match", "lanes": "work budget of 64"}),
    "not_linear": ("PATTERN (A B+ C D) DEFINE A AS v = 0, B AS B.v > A.v, C AS v < 3, D AS D.v > FIRST(B.v)",
                   None, "general", {"lazy_dfa": "reads the match", "lanes": "S R{n,m} B"}),
    "anchored": ("PATTERN (^ A B) DEFINE A AS v = 0, B AS v > 0", None, "general",
                 {"lazy_dfa": "anchor", "lanes": "anchors"}),
}


def _engine_path(op: PatternOperator) -> str:
    """What the operator itself decides at its first batch (PatternOperator._match)."""
    a = op.automaton
    if absence_path.USE_ABSENCE_PATH and op._absence_plan is not None:
        return "absence"
    if op._batch_ok():
        return "batch_dfa"
    if a.dfa:
        return "lazy_dfa"
    return "lanes" if a.lanes is not None else "general"


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_path_and_the_reasons(name):
    body, measures, path, declined = CASES[name]
    rule = _rule(body, measures) if measures else _rule(body)
    got = stepping_path(rule)
    assert got.path == path == _engine_path(PatternOperator.from_rule(rule))
    assert [p for p, _ in got.declined] == list(declined)
    for (_, why), word in zip(got.declined, declined.values()):
        assert word in why, why


def test_every_example_rules_path_is_the_engines():
    seen = set()
    for f in sorted((REPO / "rules").glob("*.yaml")):
        if f.name.endswith(".test.yaml"):  # the files' tests, not rules
            continue
        for rule in load_rules(f):
            if getattr(rule, "kind", "pattern") != "pattern" or getattr(rule, "compiled", None) is None:
                continue
            if getattr(rule.compiled.statement, "join", None) is not None:
                continue
            got = stepping_path(rule)
            assert got.path == _engine_path(PatternOperator.from_rule(rule)), (f.name, rule.name)
            seen.add(got.path)
    assert {"batch_dfa", "general"} <= seen


def test_switches_decline_with_their_names(monkeypatch):
    monkeypatch.setattr(batch_dfa, "USE_BATCH_DFA", False)
    got = stepping_path(_rule(CASES["row_local"][0]))
    assert got.path == "lazy_dfa" and "CEP_BATCH_DFA=0" in got.declined[0][1]
    monkeypatch.setattr(lanes, "USE_LANES", False)
    got = stepping_path(_rule(CASES["lanes"][0]))
    assert got.path == "general" and "CEP_LANES=0" in got.declined[1][1]


def test_the_rewrite_is_shown_with_the_written_form():
    got = stepping_path(_rule(CASES["rewritten"][0]))
    assert got.rewritten == [("D", "D.v < LAST(R.v) * 0.98", "D.v < PREV(D.v) * 0.98")]
    notes = got.notes()
    assert "D is evaluated as D.v < PREV(D.v) * 0.98 (written: D.v < LAST(R.v) * 0.98;" in notes[1]


def _cep(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["explain", *args])
    got = capsys.readouterr()
    return code, got.out, got.err


def test_cli_text_shows_the_conditions_cep_run_evaluates_and_its_path(capsys):
    code, out, err = _cep(capsys, TRADING, "--input", BARS, "--rule", "three_up_then_drop", "--key", "AAPL",
                          "--from", "2017-01-11", "--to", "2017-01-18", "--color", "never")
    assert code == 0, err
    # each row's verdict on D is the rewritten, row-local condition, with the values it read
    assert "D: D.close 119.75 < PREV(D.close) * 0.98 116.7278: false" in out
    assert "LAST(R.close)" not in out.split("note:")[0]
    notes = [line[len("note: "):] for line in out.splitlines() if line.startswith("note: ")]
    assert notes[0].startswith("cep run steps this rule on the batch DFA (cep/batch_dfa.py)")
    assert ("D is evaluated as D.close < PREV(D.close) * 0.98 (written: D.close < LAST(R.close) * 0.98; "
            "an exact rewrite") in notes[1]


def test_cli_json_notes_name_the_path_and_why_not_faster(capsys, monkeypatch):
    code, out, err = _cep(capsys, TRADING, "--input", BARS, "--rule", "v_shape", "--key", "AAPL", "--json")
    assert code == 0, err
    ex = json.loads(out)
    # START_ROW DOWN{2,} UP+ is a lane shape: UP reads the start row, which lanes keep per start row
    assert ex["notes"][0].startswith("cep run steps this rule on lanes (cep/lanes.py)")
    assert ex["notes"][1].startswith(
        "not the lazy DFA: a condition reads the match so far or a later row (UP: LAST(UP.close) >= START_ROW.close")
    # with the lanes switched off the general path steps it, and the notes say why
    monkeypatch.setattr(lanes, "USE_LANES", False)
    code, out, err = _cep(capsys, TRADING, "--input", BARS, "--rule", "v_shape", "--key", "AAPL", "--json")
    assert code == 0, err
    ex = json.loads(out)
    assert ex["notes"][0] == "cep run steps this rule on the general path (cep/nfa.py): each partial match with its matched rows, as explain does"
    assert ex["notes"][2] == "not lanes: switched off in this process (CEP_LANES=0)"


def test_cli_with_the_rewrite_off_shows_the_conditions_as_written(capsys, monkeypatch):
    monkeypatch.setattr(nfa, "REWRITE_CONDITIONS", False)
    code, out, err = _cep(capsys, TRADING, "--input", BARS, "--rule", "three_up_then_drop", "--key", "AAPL",
                          "--from", "2017-01-11", "--to", "2017-01-18", "--color", "never")
    assert code == 0, err
    assert "D: per partial match: D.close < LAST(R.close) * 0.98" in out
    assert "is evaluated as" not in out
    # without the rewrite D reads the match: the rule keeps node chains (cep run's path says so)
    assert "note: cep run steps this rule on the general path" in out
