"""``cep spark state``: a stream's checkpoint read with Spark's state data source shows what the embedded engine holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cep import Engine
from cep.cli import spark as spark_cli
from cep.cli.command import main as cep_main
from cep.state_view import engine_views, key_text
from patterns.rules import parse_rules

from .conftest import write_events

REPO = Path(__file__).resolve().parents[2]
BARS = REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl"

V_SHAPE = (REPO / "rules" / "trading.yaml").read_text().split("  - name: three_up_then_drop")[0]
RULES = V_SHAPE + """
  - name: weekly
    kind: analytics
    sql: |
      SELECT symbol, COUNT(*) AS days, APPROX_COUNT_DISTINCT(close) AS closes, MAX(high) AS top
      FROM bars
      GROUP BY symbol, TUMBLE(date, INTERVAL '7' DAY)
"""


def _pattern(rule: dict[str, Any]) -> dict[str, Any]:
    return {key_text(k["key"]): [(pm["start_row"], pm["waiting_for"], pm["deadline"],
                                  [(r["variable"], r["row"], r["values"]) for r in pm["rows"]])
                                 for pm in k["partial_matches"]]
            for k in rule["keys"] if k["partial_matches"]}


def _windows(rule: dict[str, Any]) -> dict[str, Any]:
    return {key_text(k["key"]): [(w["window_start"], w["window_end"], w["status"], w["events"],
                                  [(a["name"], a["value"], a.get("sketch")) for a in w["aggregates"]])
                                 for w in k["windows"]]
            for k in rule["keys"]}


def test_not_a_checkpoint_is_said_before_spark_starts(tmp_path: Path, capsys) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(RULES)
    assert spark_cli.main(["state", "--checkpoint", str(tmp_path / "nope"), "--rules", str(rules)]) == 2
    assert capsys.readouterr().err == (f"cep spark state: --checkpoint {tmp_path / 'nope'} does not exist; give "
                                       "the --checkpoint of 'cep spark run'\n")
    (tmp_path / "empty").mkdir()
    assert spark_cli.main(["state", "--checkpoint", str(tmp_path / "empty"), "--rules", str(rules)]) == 2
    assert capsys.readouterr().err == (
        f"cep spark state: {tmp_path / 'empty'} is not the checkpoint of a streaming query that committed a "
        "micro-batch (no commits/ and offsets/ logs); give the --checkpoint of 'cep spark run'\n")


@pytest.mark.spark
def test_spark_state_shows_the_embedded_engines_partial_matches_and_windows(spark: Any, tmp_path: Path,
                                                                             capsys) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    lines = BARS.read_text().splitlines()[:100]  # 20 trading days of five symbols, through 2017-01-31
    events = [json.loads(x) for x in lines]
    write_events(tmp_path / "in", 0, events)
    assert spark_cli.main(["run", str(rules), "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                           "--checkpoint", str(tmp_path / "ck"), "--shuffle-partitions", "2", "--buckets", "4",
                           "-q"]) == 0
    capsys.readouterr()
    assert spark_cli.main(["state", "--checkpoint", str(tmp_path / "ck"), "--rules", str(rules), "--json",
                           "--limit", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # the embedded engine fed the same micro-batch, without the end of input: the stream's state
    eng = Engine(parse_rules(RULES))
    eng.process(events)
    embedded = {v.name: v.to_json() for v in engine_views(eng)}
    got = {r["name"]: r for r in doc["rules"]}
    assert doc["kind"] == "spark" and doc["watermark"] == embedded["v_shape"]["watermark"]
    assert doc["offsets"]["0"]["files"] == [(tmp_path / "in" / "events-000.json").as_uri()]
    assert 2 <= doc["groups"] <= 8  # two rules, each with its symbols in up to four buckets
    assert _pattern(got["v_shape"]) == _pattern(embedded["v_shape"])
    amzn = next(k for k in got["v_shape"]["keys"] if k["key"] == {"symbol": "AMZN"})
    assert [(r["variable"], r["values"]["date"]) for r in amzn["partial_matches"][0]["rows"]] == [
        ("START_ROW", "2017-01-26"), ("DOWN", "2017-01-27"), ("DOWN", "2017-01-30"), ("DOWN", "2017-01-31")]
    assert got["v_shape"]["totals"]["partial_matches"] == embedded["v_shape"]["totals"]["partial_matches"]
    assert _windows(got["weekly"]) == _windows(embedded["weekly"]) != {}
    # and what 'cep state' shows of a durable run over the same file
    assert cep_main(["run", str(rules), "--input", str(tmp_path / "in" / "events-000.json"), "--state",
                     str(tmp_path / "st"), "--output", str(tmp_path / "durable.jsonl"), "-q"]) == 0
    capsys.readouterr()
    assert cep_main(["state", str(tmp_path / "st"), "--json", "--limit", "0"]) == 0
    durable = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rules"]}
    assert _pattern(got["v_shape"]) == _pattern(durable["v_shape"])
    assert _windows(got["weekly"]) == _windows(durable["weekly"])

    # the same text, 'cep state'-style
    assert spark_cli.main(["state", "--checkpoint", str(tmp_path / "ck"), "--rules", str(rules),
                           "--rule", "v_shape", "--key", "AMZN"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"checkpoint {tmp_path / 'ck'}: batch 1, query watermark 2017-01-31T00:00:00.000Z")
    assert '      DOWN       row 19  {"symbol":"AMZN","date":"2017-01-31","close":823.48}' in out

    # a rule changed since: refused by name, as the restart would refuse it
    changed = tmp_path / "changed.yaml"
    changed.write_text(RULES.replace("PATTERN (START_ROW DOWN{2,} UP+)", "PATTERN (START_ROW DOWN{3,} UP+)"))
    assert spark_cli.main(["state", "--checkpoint", str(tmp_path / "ck"), "--rules", str(changed)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cep spark state: rule 'v_shape' changed since the checkpoint was written in a way its "
                          "saved partial matches cannot survive")
