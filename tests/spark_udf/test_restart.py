"""Fault tolerance: stop a query partway (gracefully, or by killing its driver), add input, restart
from the same checkpoint, and find exactly the rows of an uninterrupted run in the sink."""

from __future__ import annotations

import json
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
from spark_udf.core import GroupCore
from tests.spark_udf.conftest import (
    batches_read,
    counted,
    event_of,
    match_key,
    sink_rows,
    write_events,
)
from tests.spark_udf.simulate import rows_of, run_stream
from tests.spark_udf.workload import COLUMNS, RULES_YAML, SCHEMA, TYPES, events, stream

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

REPO = Path(__file__).resolve().parents[2]


def _embedded(paths: list[Path]) -> Counter:
    """The embedded engine's complex events, fed file by file."""
    eng = Engine(parse_rules(RULES_YAML))
    out = eng.process([])
    for p in paths:
        for b in read_events(p):
            out.extend(eng.process(b))
    return Counter(match_key(m) for m in out.matches)


def _late(rows: list[dict[str, Any]]) -> Counter:
    """Each late row as (rule, key, event time)."""
    return Counter((r["rule"], event_of(r).get("k"), event_of(r).get("ts")) for r in rows if r.get("output") == "late")


def _uninterrupted(files: dict[str, list[Any]], batches: list[list[str]]) -> tuple[Counter, Counter]:
    """The complex events and late events of an uninterrupted query that read these micro-batches
    (file names, from :func:`batches_read`): Spark's contract for the stateful stage played out in
    plain Python (tests/spark_udf/simulate.py).

    Which events are late depends on the micro-batches: Spark judges a batch's rows against the
    largest event time of every *earlier* batch (docs/spark.md, "Watermark and emission"), so the
    reference must read the batches the query read, not the files one by one.
    """
    rules = list(parse_rules(RULES_YAML))
    core, _ = GroupCore.for_rules(rules, TYPES, 4)
    frame, *_ = run_stream(core, rules, [[e for name in b for e in events(files[name])] for b in batches], COLUMNS, 4)
    return counted(rows_of(frame, "match"), "match"), _late(rows_of(frame, "late"))


def _assert_exactly_once(spark: Any, tmp: Path, files: list[list[Any]]) -> list[list[str]]:
    """The sink holds each row of an uninterrupted query that read the same micro-batches once, and
    every input file was read by one micro-batch; returns the micro-batches (file names)."""
    names = [f"events-{i:03d}.json" for i in range(len(files))]
    by_name = dict(zip(names, files))
    batches = batches_read(tmp / "ck")
    assert sorted(n for b in batches for n in b) == names, batches
    # the reference, fed one file a batch, is the embedded engine's answer (a file's own disorder
    # stays within the lateness: docs/spark.md, "Equivalence with the embedded engine")
    per_file, late_per_file = _uninterrupted(by_name, [[n] for n in names])
    assert per_file == _embedded([tmp / "in" / n for n in names])
    assert sum(late_per_file.values()) == 3 * (len(files) - 2)  # files 2.. hold one late event, three rules
    matches, late = _uninterrupted(by_name, batches)
    rows = sink_rows(spark, tmp / "out")
    assert counted(rows, "match") == matches
    assert _late(rows) == late
    return batches


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
    for i, rows in enumerate(files[:4]):
        write_events(tmp_path / "in", i, rows)
    q = _query(spark, tmp_path)
    _wait_for(tmp_path / "ck" / "commits" / "1", 300)
    q.stop()  # partway: batches 0 and 1 committed, later files not yet (or half) processed
    assert not (tmp_path / "ck" / "commits" / "4").exists()
    write_events(tmp_path / "in", 4, files[4])
    q = _query(spark, tmp_path)
    q.awaitTermination()
    # Usually one file a micro-batch, as the embedded engine reads them; but a stop that lands while
    # the query writes offsets/N, after its file source logged batch N's file, makes the restarted
    # query read that file and the next in one batch (see the test after this one)
    _assert_exactly_once(spark, tmp_path, files)


def _log_as_listed(checkpoint: Path, path: Path) -> None:
    """Log ``path`` as the file source's next batch of files, as Spark's FileStreamSource does in
    ``latestOffset`` just before the query writes that batch's ``offsets/N``: the checkpoint a query
    stopped between the two leaves."""
    log = checkpoint / "sources" / "0"
    n = max(int(f.name) for f in log.iterdir() if f.name.isdigit()) + 1
    entry = {"path": path.resolve().as_uri(), "timestamp": path.stat().st_mtime_ns // 1_000_000, "batchId": n}
    (log / str(n)).write_text("v1\n" + json.dumps(entry))


def test_a_restart_reads_the_file_its_stopped_run_had_listed_with_the_next_one(spark: Any, tmp_path: Path) -> None:
    """The graceful stop above, landed where it once failed (while the query wrote offsets/2),
    made deterministic. Spark then restarts with the file its source had logged and the next new
    file in one micro-batch (``maxFilesPerTrigger`` counts the new files only), so that file 3's
    late event comes in the batch of the file it is late behind, and is not late there. The sink
    must still hold each row of an uninterrupted query reading those batches once."""
    files = stream(31, files=5)
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(files[:2])]
    _query(spark, tmp_path).awaitTermination()  # files 0 and 1, one micro-batch each
    paths += [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(files[2:], 2)]
    _log_as_listed(tmp_path / "ck", paths[2])
    _query(spark, tmp_path).awaitTermination()
    batches = _assert_exactly_once(spark, tmp_path, files)
    assert [b for b in batches if b] == [["events-000.json"], ["events-001.json"],
                                         ["events-002.json", "events-003.json"], ["events-004.json"]]
    # the fold changes the rows (what the old comparison with one file a batch failed on)
    by_name = {f"events-{i:03d}.json": rows for i, rows in enumerate(files)}
    assert _uninterrupted(by_name, batches)[0] != _embedded(paths)


def test_killed_driver_then_restart_writes_each_row_once(spark: Any, tmp_path: Path, capsys) -> None:
    files = stream(32, files=4)
    for i, rows in enumerate(files[:3]):
        write_events(tmp_path / "in", i, rows)
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
    write_events(tmp_path / "in", 3, files[3])
    assert spark_cli.main(args) == 0  # the same command, restarted in this process
    summary = capsys.readouterr().err
    # a kill between the file source logging the next file and the query logging the batch folds
    # that file into the restarted query's first batch, as for the graceful stop
    _assert_exactly_once(spark, tmp_path, files)
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
