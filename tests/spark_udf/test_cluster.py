"""``cep spark`` on a real standalone cluster whose workers' Python does not have the engine.

The cluster (one master, one worker, 127.0.0.1) is started from the pyspark wheel's
``spark-class`` and stopped at the end; the jobs run through the command line in
subprocesses, so the suite's shared local SparkSession is left alone. The workers start an
interpreter with numpy, pandas and pyarrow but without the project (``python_without_engine``):
only the engine zip that ``cep spark`` ships lets them run the rules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from cep.cli import main as cep_main
from spark_udf.sink_log import read_rows
from tests.spark_udf.cluster import REPO, python_without_engine, standalone_cluster
from tests.spark_udf.conftest import match_key

pytestmark = pytest.mark.spark

RULES = REPO / "rules" / "trading.yaml"
BARS = REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl"


def _cep(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cep.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=400)


def _matches(output: Path) -> Counter:
    return Counter(match_key(json.loads(line)) for line in read_rows(output, ["match"]))


def test_backfill_and_stream_on_a_cluster_whose_workers_lack_the_engine(tmp_path: Path) -> None:
    python = python_without_engine(tmp_path / "worker-python")
    # the workers' interpreter has the dependencies, not the engine
    deps = subprocess.run([str(python), "-c", "import numpy, pandas, pyarrow, pyspark, orjson, yaml, ahocorasick"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert deps.returncode == 0, deps.stderr
    engine = subprocess.run([str(python), "-c", "import spark_udf"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert "No module named 'spark_udf'" in engine.stderr

    plain = tmp_path / "plain.jsonl"
    assert cep_main(["run", str(RULES), "--input", str(BARS), "--output", str(plain), "--quiet"]) == 0
    expected = Counter(match_key(json.loads(line)) for line in plain.read_text().splitlines())
    assert len(expected) > 10

    events = tmp_path / "in"
    events.mkdir()
    (events / "bars.json").write_bytes(BARS.read_bytes())
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": str(python)}
    with standalone_cluster(tmp_path / "cluster") as master:
        common = ["--input", str(events), "--master", master, "--shuffle-partitions", "2", "--buckets", "4",
                  "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=512m"]
        # without the shipped engine the workers fail in the first job with Python, the backfill's: one line, exit 3
        failed = _cep(["spark", "backfill", str(RULES), *common, "--output", str(tmp_path / "nope"),
                       "--no-ship-engine"], env, tmp_path)
        back = _cep(["spark", "backfill", str(RULES), *common, "--output", str(tmp_path / "bf")], env, tmp_path)
        stream = _cep(["spark", "run", str(RULES), *common, "--output", str(tmp_path / "out"),
                       "--checkpoint", str(tmp_path / "ck")], env, tmp_path)
    assert failed.returncode == 3, failed.stderr
    lines = [x for x in failed.stderr.splitlines() if x.startswith("cep spark")]
    assert lines == [
        "cep spark backfill: the backfill job failed: ModuleNotFoundError: No module named 'spark_udf'; "
        "the executors' Python workers cannot import the engine: let cep ship it (--ship-engine; the default "
        "unless --master is local) or install cep-engine into the Python that PYSPARK_PYTHON names on every "
        "executor"], failed.stderr
    assert "Traceback" not in failed.stderr
    assert back.returncode == 0, back.stderr
    assert stream.returncode == 0, stream.stderr
    assert _matches(tmp_path / "bf") == expected
    # the stream's final watermark decides every one of these matches (nothing waits for an end of input)
    assert _matches(tmp_path / "out") == expected
    assert f"cep spark run: 2 micro-batches, 1,255 input rows, {sum(expected.values())} complex events" in stream.stderr
