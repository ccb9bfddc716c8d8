"""Table-table views on Spark give the embedded engine's rows: the view's changelog and a rule joining the
view, over three file streams restarted from their checkpoint, and as a backfill; the state reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cep.cli import spark as spark_cli
from cep.engine import Engine
from patterns.rules import parse_rules
from spark_udf.api import SparkRunConfig, apply_rules
from tests.spark_udf.conftest import sink_rows, write_events
from tests.spark_udf.test_views_core import (
    RULES,
    STREAMS,
    embedded,
    engine_side,
    spark_side,
    workload,
)

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

SCHEMAS = {"payments": "account long, ts long, amount long",
           "account_changes": "id long, ts long, tier string, region string, __deleted string",
           "region_changes": "region string, ts long, country string, __deleted string"}


def _stream(spark: Any, tmp: Path, rules: Any) -> None:
    inputs = {s: spark.readStream.schema(SCHEMAS[s]).option("maxFilesPerTrigger", 1).json(str(tmp / s))
              for s in STREAMS}
    q = apply_rules(inputs, rules, SparkRunConfig(buckets=2)).write_stream(str(tmp / "out"), str(tmp / "ck"))
    q.awaitTermination()


def test_a_view_on_a_stream_restarted_from_its_checkpoint_gives_the_embedded_rows(spark: Any, tmp_path: Path,
                                                                                  capsys: Any) -> None:
    rules = parse_rules(RULES)
    batches = workload(2, 2)  # 3 micro-batches: 2, then a restart, then 1
    for i, b in enumerate(batches):
        if i == 2:
            _stream(spark, tmp_path, rules)
        for s in STREAMS:
            write_events(tmp_path / s, i, b[s])
    _stream(spark, tmp_path, rules)
    got = spark_side(sink_rows(spark, tmp_path / "out"))
    want = engine_side(embedded(rules, batches))
    assert got == want
    assert {op for _, op, *_ in want[0]} >= {"c", "u", "d"} and want[1]

    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(RULES)
    assert spark_cli.main(["state", "--checkpoint", str(tmp_path / "ck"), "--rules", str(rules_file), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert any("view 'account_regions': its changelog group holds" in n for n in view["notes"])
    shown = {r["name"]: r for r in view["rules"]}
    assert any("rows held in 2 groups" in n for n in shown["gold_payment"]["notes"])  # a replica in each group


def test_a_view_as_a_backfill_gives_the_rows_of_cep_run(spark: Any, tmp_path: Path, capsys: Any) -> None:
    batches = workload(8, 2)
    (tmp_path / "rules.yaml").write_text(RULES)
    args = ["backfill", str(tmp_path / "rules.yaml"), "--output", str(tmp_path / "out"), "--buckets", "2",
            "--shuffle-partitions", "2"]
    eng = Engine(parse_rules(RULES), streams=list(STREAMS))
    out = eng.process([])
    for s in STREAMS:
        rows = [r for b in batches for r in b[s]]
        (tmp_path / f"{s}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        args += ["--input", f"{s}={tmp_path / (s + '.jsonl')}"]
        out.extend(eng.process(rows, stream=s))
    out.extend(eng.finish())
    assert spark_cli.main(args) == 0, capsys.readouterr().err
    got = spark_side(sink_rows(spark, tmp_path / "out"))
    assert got == engine_side(out)
    assert {op for _, op, *_ in got[0]} >= {"c", "u", "d"} and got[1]
