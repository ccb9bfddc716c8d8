"""A failed Spark job as one line: the first cause found in what Spark really raised, and what to do.

The texts in tests/fixtures/spark_failures.json are ``str(e)`` of exceptions PySpark 4.3 raised
here: a worker Python without pyarrow, a PYSPARK_PYTHON that does not exist or exits at once, a
missing input path (batch and stream), a Python function raising in a collect, a write and a
streaming query, and a JVM that did not start.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cep.cli.spark_failures import check_master, describe_failure, first_cause

TEXTS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "spark_failures.json").read_text())

DEPENDENCY = ("the Python that Spark's workers run lacks 'pyarrow', a dependency of the engine: install the engine's "
              "dependencies there, or ship a packed virtualenv with --conf spark.archives=ENV.tar.gz#env and "
              "PYSPARK_PYTHON=./env/bin/python (docs/spark.md, 'Executors')")
CANNOT_RUN = ("the executors cannot start the Python worker '/nonexistent/python9': set PYSPARK_PYTHON to an "
              "interpreter every executor has, with the engine's dependencies (docs/spark.md, 'Executors')")
NOT_STARTED = ("set PYSPARK_PYTHON to an interpreter with the engine's dependencies on every executor (in local "
               "mode cep starts its own interpreter unless PYSPARK_PYTHON says otherwise)")
VERBOSE = "rerun with --verbose for Spark's log and the whole error"


@pytest.mark.parametrize("name, cause, todo", [
    ("bin-python3", "ModuleNotFoundError: No module named 'pyarrow'", DEPENDENCY),
    ("nonexistent-python9", 'IOException: Cannot run program "/nonexistent/python9": error=2, No such file or '
     "directory", CANNOT_RUN),
    ("shim-python3", "the Python worker did not start: the python3 on PATH was started", NOT_STARTED),
    ("path", "[PATH_NOT_FOUND] Path does not exist: file:/nonexistent/x.", "check --input (a folder, a file or a glob)"),
    ("path-stream", "[PATH_NOT_FOUND] Path does not exist: /nonexistent/y.", "check --input (a folder, a file or a glob)"),
    ("worker-collect", "ValueError: boom in worker", VERBOSE),
    ("worker-write", "ValueError: boom in worker", VERBOSE),
    ("worker-stream", "ValueError: boom in worker", VERBOSE),
    ("java-gateway", "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number.",
     "Spark's JVM did not start: Spark needs Java 17 (java on PATH, or JAVA_HOME); the lines above are the JVM's own"),
])
def test_spark_failures_read_as_one_line(name: str, cause: str, todo: str) -> None:
    e = RuntimeError(TEXTS[name])
    assert first_cause(e) == cause
    assert describe_failure(e, "the backfill job") == f"the backfill job failed: {cause}; {todo}"


def test_the_engine_missing_on_the_workers_says_to_ship_it() -> None:
    text = TEXTS["bin-python3"].replace("No module named 'pyarrow'", "No module named 'spark_udf'")
    assert describe_failure(RuntimeError(text), "the arrival-order pass") == (
        "the arrival-order pass failed: ModuleNotFoundError: No module named 'spark_udf'; the executors' Python "
        "workers cannot import the engine: let cep ship it (--ship-engine; the default unless --master is local) or "
        "install cep-engine into the Python that PYSPARK_PYTHON names on every executor")


def test_our_own_errors_carry_their_advice_and_long_causes_are_cut() -> None:
    text = "[STREAM_FAILED] ... PythonException: spark_udf.state.RuleChangedError: rule 'r': rename it\n at x"
    assert describe_failure(RuntimeError(text), "the streaming query") == (
        "the streaming query failed: RuleChangedError: rule 'r': rename it")
    long = first_cause(RuntimeError("Traceback (most recent call last):\n  File x\nValueError: " + "x" * 2000))
    assert len(long) == 600 and long.endswith("…")
    assert first_cause(RuntimeError("")) == "RuntimeError"


def test_check_master_takes_the_forms_spark_accepts() -> None:
    for ok in ("local", "local[4]", "local[*]", "local[*, 3]", "local-cluster[2, 1, 1024]", "spark://a:7077",
               "spark://a:7077,b:7077", "yarn", "k8s://https://h:6443"):
        assert check_master(ok) is None, ok
    for bad in ("bogus", "local[x]", "spark:/a", "spark", "yarn-client", ""):
        assert check_master(bad) == (f"--master {bad!r}: expected local, local[N], local[*], spark://HOST:PORT, "
                                     "yarn or k8s://https://HOST:PORT"), bad


def test_a_worker_of_another_python_version_or_one_that_crashed() -> None:
    mismatch = ("An exception was thrown from the Python worker:\nTraceback (most recent call last):\n  File \"w.py\", "
                "line 1, in main\npyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python "
                "in worker has different version: 3.10 than that in driver: 3.11, PySpark cannot run with different "
                "minor versions.")
    assert describe_failure(RuntimeError(mismatch), "the backfill job") == (
        "the backfill job failed: PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] "
        "Python in worker has different version: 3.10 than that in driver: 3.11, PySpark cannot run with different "
        "minor versions.; the executors' Python is another minor version than this driver's: point PYSPARK_PYTHON at "
        "the same Python version on every executor")
    crashed = ("An error occurred while calling o9.collectToPython.\n: org.apache.spark.SparkException: Job aborted due "
               "to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 "
               "(TID 3) (h executor driver): org.apache.spark.SparkException: Python worker exited unexpectedly "
               "(crashed)\n\tat org.apache.spark.api.python.BasePythonRunner")
    assert describe_failure(RuntimeError(crashed), "the backfill job") == (
        "the backfill job failed: SparkException: Python worker exited unexpectedly (crashed); a Python worker died "
        "(often out of memory: raise spark.executor.memory or spark.executor.pyspark.memory, or raise --buckets so a "
        "call holds fewer keys); rerun with --verbose for Spark's log")
