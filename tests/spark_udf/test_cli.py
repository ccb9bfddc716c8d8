"""``cep spark run`` and ``cep spark backfill``: arguments, exit codes, counts on stderr."""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cep.cli import spark as spark_cli
from cep.engine import Engine
from cep.events import read_events
from patterns.rules import parse_rules
from tests.spark_udf.conftest import counted, match_key, sink_rows, write_events
from tests.spark_udf.workload import RULES_YAML, stream

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")


def _rules(tmp: Path) -> Path:
    p = tmp / "rules.yaml"
    p.write_text(RULES_YAML)
    return p


def test_add_arguments_builds_run_and_backfill() -> None:
    parser = argparse.ArgumentParser(prog="cep")
    spark_cli.add_arguments(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["spark", "run", "r.yaml", "--input", "in", "--output", "out", "--checkpoint", "ck",
                              "--trigger", "processing-time=10s", "--source-option", "maxFilesPerTrigger=2"])
    assert (args.command, args.spark_command, args.buckets, args.master) == ("spark", "run", 64, "local[*]")
    assert spark_cli._trigger(args.trigger) == "processing-time=10 seconds"
    args = parser.parse_args(["spark", "backfill", "r.yaml", "--input", "in", "--output", "out", "--format", "parquet"])
    assert (args.spark_command, args.format, args.mode) == ("backfill", "parquet", "error")


def test_usage_errors_exit_2_before_spark_starts(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: x\n    sql: SELECT nothing\n")
    assert spark_cli.main(["run", str(bad), "--input", "in", "--output", "o", "--checkpoint", "c"]) == 2
    rules = _rules(tmp_path)
    assert spark_cli.main(["run", str(rules), "--input", "in", "--output", "o", "--checkpoint", "c",
                           "--trigger", "sometimes"]) == 2
    assert "expected available-now, once or processing-time=10s" in capsys.readouterr().err
    assert spark_cli.main(["backfill", str(rules), "--input", "in", "--output", "o", "--source-option", "x"]) == 2
    assert "--source-option 'x': expected KEY=VALUE" in capsys.readouterr().err


@pytest.mark.spark
def test_schema_inference_needs_files(spark: Any, tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    code = spark_cli.main(["run", str(_rules(tmp_path)), "--input", str(tmp_path / "empty"), "--output",
                           str(tmp_path / "o"), "--checkpoint", str(tmp_path / "c"), "--shuffle-partitions", "2"])
    assert code == 2
    assert "pass --schema" in capsys.readouterr().err


@pytest.mark.spark
def test_run_and_backfill_print_the_counts_and_agree(spark: Any, tmp_path: Path, capsys) -> None:
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(stream(41, files=3))]
    rules = _rules(tmp_path)
    common = ["--input", str(tmp_path / "in"), "--shuffle-partitions", "2", "--buckets", "4"]
    assert spark_cli.main(["run", str(rules), *common, "--output", str(tmp_path / "out"),
                           "--checkpoint", str(tmp_path / "ck"), "--max-files-per-trigger", "1"]) == 0
    err = capsys.readouterr().err
    rows = sink_rows(spark, tmp_path / "out")
    m = re.search(r"(\d+) micro-batches, ([\d,]+) input rows, ([\d,]+) complex events, (\d+) late, (\d+) errors", err)
    assert m, err
    assert int(m.group(1)) == 4  # three files and the batch that moves the watermark
    assert int(m.group(2).replace(",", "")) == sum(len(p.read_text().splitlines()) for p in paths)
    assert int(m.group(3).replace(",", "")) == sum(1 for r in rows if r["output"] == "match")
    assert int(m.group(4)) == 3 and int(m.group(5)) == sum(1 for r in rows if r["output"] == "error")
    for name in ("within", "all_rows", "global"):
        n = sum(1 for r in rows if r["output"] == "match" and r["rule"] == name)
        assert f"  {name}: {n:,} complex events" in err

    assert spark_cli.main(["backfill", str(rules), *common, "--output", str(tmp_path / "bf")]) == 0
    err = capsys.readouterr().err
    back = sink_rows(spark, tmp_path / "bf")
    eng = Engine(parse_rules(RULES_YAML))
    exp = eng.run(b for p in paths for b in read_events(p))
    assert counted(back, "match") == Counter(match_key(x) for x in exp.matches)
    assert f"cep spark backfill: {len(exp.matches):,} complex events, {len(exp.late)} late" in err
    # the stream stops at the final watermark; the backfill also flushes what the end of input decides
    assert counted(rows, "match") <= counted(back, "match")
