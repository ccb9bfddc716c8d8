"""Fault tolerance: stop a query partway (gracefully, or by killing its driver), add input, restart
from the same checkpoint, and find exactly the rows of an uninterrupted run in the sink."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cep.cli import spark as spark_cli
from cep.engine import Engine
from cep.events import read_events
from patterns.rules import parse_rules
from spark_udf.api import SparkRunConfig, apply_rules
from tests.spark_udf.conftest import counted, match_key, sink_rows, write_events
from tests.spark_udf.workload import RULES_YAML, SCHEMA, stream

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

REPO = Path(__file__).resolve().parents[2]


def _uninterrupted(paths: list[Path]) -> Counter:
    """What an uninterrupted stream writes: proven equal to the embedded engine fed file by file."""
    eng = Engine(parse_rules(RULES_YAML))
    out = eng.process([])
    for p in paths:
        for b in read_events(p):
            out.extend(eng.process(b))
    return Counter(match_key(m) for m in out.matches)


def _wait_for(path: Path, seconds: float, proc: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the driver ended (exit {proc.returncode}) before {path.name} appeared")
        if time.monotonic() > end:
            raise AssertionError(f"{path} did not appear within {seconds} s")
        time.sleep(0.05)


def _query(spark: Any, tmp: Path, config: SparkRunConfig | None = None, rules: str = RULES_YAML):
    frame = spark.readStream.schema(SCHEMA + ", _corrupt_record string").option("maxFilesPerTrigger", 1).json(
        str(tmp / "in"))
    result = apply_rules(frame, parse_rules(rules), config or SparkRunConfig(buckets=4))
    return result.write_stream(str(tmp / "out"), str(tmp / "ck"))


def test_graceful_stop_then_restart_writes_each_row_once(spark: Any, tmp_path: Path) -> None:
    files = stream(31, files=5)
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(files[:4])]
    q = _query(spark, tmp_path)
    _wait_for(tmp_path / "ck" / "commits" / "1", 300)
    q.stop()  # partway: batches 0 and 1 committed, later files not yet (or half) processed
    assert not (tmp_path / "ck" / "commits" / "4").exists()
    paths += [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(files[4:], 4)]
    q = _query(spark, tmp_path)
    q.awaitTermination()
    rows = sink_rows(spark, tmp_path / "out")
    assert counted(rows, "match") == _uninterrupted(paths)
    assert sum(1 for r in rows if r["output"] == "late") == 3 * 3  # files 2..4, three rules


def test_killed_driver_then_restart_writes_each_row_once(spark: Any, tmp_path: Path, capsys) -> None:
    files = stream(32, files=4)
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(files[:3])]
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES_YAML)
    args = ["run", str(rules), "--input", str(tmp_path / "in"), "--schema", SCHEMA, "--output", str(tmp_path / "out"),
            "--checkpoint", str(tmp_path / "ck"), "--max-files-per-trigger", "1", "--buckets", "4",
            "--shuffle-partitions", "2"]
    env = dict(os.environ, PYTHONWARNINGS="ignore::FutureWarning")
    proc = subprocess.Popen([sys.executable, "-m", "cep.cli.spark", *args, "--master", "local[1]"], cwd=REPO,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(tmp_path / "ck" / "commits" / "0", 300, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "ck" / "commits" / "3").exists()
    paths += [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(files[3:], 3)]
    assert spark_cli.main(args) == 0  # the same command, restarted in this process
    summary = capsys.readouterr().err
    rows = sink_rows(spark, tmp_path / "out")
    assert counted(rows, "match") == _uninterrupted(paths)
    assert "cep spark run:" in summary and "micro-batches" in summary


RULE_V1 = """
rules:
  - name: within
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, LAST(B.ts) AS t1
        PATTERN (A B+) WITHIN INTERVAL '3' SECOND DEFINE A AS px < 5, B AS px >= 5)
"""


def _fails_with(query) -> str:
    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException) as e:
        query.awaitTermination()
    return str(e.value)


def test_changed_state_encoding_and_changed_rules_are_reported(spark: Any, tmp_path: Path) -> None:
    files = stream(33, files=3, late=False, bad=False)
    write_events(tmp_path / "in", 0, files[0])
    _query(spark, tmp_path, rules=RULE_V1).awaitTermination()
    write_events(tmp_path / "in", 1, files[1])

    msg = _fails_with(_query(spark, tmp_path, SparkRunConfig(buckets=4, state_version=2), RULE_V1))
    assert "StateEncodingError: rule 'within': the checkpoint holds Spark operator state of encoding version 1; " \
           "this build reads version 2" in msg

    changed = RULE_V1.replace("PATTERN (A B+)", "PATTERN (A B+ A)")
    msg = _fails_with(_query(spark, tmp_path, rules=changed))
    assert "RuleChangedError: rule 'within' changed since the checkpoint was written" in msg
    assert "--on-rule-change reset" in msg

    msg = _fails_with(_query(spark, tmp_path, SparkRunConfig(buckets=8), RULE_V1))
    assert "written with 4 key buckets, this run uses 8" in msg

    _query(spark, tmp_path, SparkRunConfig(buckets=4, on_rule_change="reset"), changed).awaitTermination()
    rows = sink_rows(spark, tmp_path / "out")
    resets = [r for r in rows if r["output"] == "error" and r["reason"].startswith("state reset")]
    assert resets and all(r["rule"] == "within" for r in resets)
