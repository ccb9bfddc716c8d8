"""The Spark session of the ``cep spark`` commands: quiet logs, the right Python, the engine shipped."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from spark_udf.shipping import ENGINE_ZIP_NAME, engine_zip, is_local_master, worker_python

__all__ = ["local_session", "private_dir", "DEFAULT_SHUFFLE_PARTITIONS"]

DEFAULT_SHUFFLE_PARTITIONS = 4
"""Spark's default of 200 makes every micro-batch schedule 200 tasks per stateful stage (an empty
batch then costs seconds); a checkpoint fixes the count at its first run, so it is chosen here."""

_LOG4J = """\
rootLogger.level = {root}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = {root}
"""

# A failed task, write or query reaches the command as an exception, which it reports in one
# line; Spark's own reports of the same failure (stack traces at ERROR) would bury that line.
# (Not org.apache.spark.api.python as a whole: a level on PythonGatewayServer's parent other
# than the root's makes Spark print "Setting default log level to ...".)
_QUIET_FAILURES = """\
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = off
logger.taskset.name = org.apache.spark.scheduler.TaskSetManager
logger.taskset.level = off
logger.writer.name = org.apache.spark.sql.execution.datasources.FileFormatWriter
logger.writer.level = off
logger.streaming.name = org.apache.spark.sql.execution.streaming
logger.streaming.level = off
logger.python.name = org.apache.spark.api.python.PythonRunner
logger.python.level = off
"""

_PRIVATE: list[Path] = []


def private_dir() -> Path:
    """A folder of this process alone (mode 0700, a fresh name), removed when the process exits.

    The session's log configuration and the engine's zip live there: a fixed name in the shared
    temporary folder could be a directory, or another user's file, and break every run.
    """
    if not _PRIVATE:
        d = Path(tempfile.mkdtemp(prefix="cep-spark-"))
        atexit.register(shutil.rmtree, d, True)
        _PRIVATE.append(d)
    return _PRIVATE[0]


def _log4j_file(verbose: bool = False) -> str:
    path = private_dir() / ("log4j2-verbose.properties" if verbose else "log4j2.properties")
    if not path.exists():
        text = _LOG4J.format(root="warn" if verbose else "error")
        path.write_text(text if verbose else text + _QUIET_FAILURES)
    return str(path)


def local_session(
    master: str = "local[*]",
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
    app_name: str = "cep",
    packages: list[str] | None = None,
    conf: dict[str, str] | None = None,
    ship_engine: bool | None = None,
    verbose: bool = False,
) -> Any:
    """Get or create the Spark session the ``cep spark`` commands use, local or on a cluster.

    Logs at error level from the JVM's first line (a log4j2 file passed to the driver; Spark's
    reports of a failed task are left to the caller's exception), or at warning level with
    ``verbose``; no console progress bar, no web UI unless ``conf`` asks for one, and the
    pandas-version warnings of the Python workers silenced. ``packages`` are Maven coordinates
    for ``spark.jars.packages`` (e.g. the Kafka connector).

    The Python workers: in local mode they run this interpreter (``sys.executable``) unless
    ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` says otherwise. ``ship_engine`` (default:
    on unless the master is local) adds the engine's own packages as a zip of Python files
    (``SparkContext.addPyFile``), so executors need only its dependencies.

    When a session already runs in this process it is reused and only the runtime settings
    (shuffle partitions) and the shipped engine apply.
    """
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    from pyspark.sql import SparkSession

    conf = dict(conf or {})
    b = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{_log4j_file(verbose)}")
    )
    if packages:
        b = b.config("spark.jars.packages", ",".join(packages))
    for k, v in conf.items():
        b = b.config(k, v)
    # PySpark reads the workers' interpreter from the environment when the context starts
    python = worker_python(master, os.environ, conf)
    before = os.environ.get("PYSPARK_PYTHON")
    if python:
        os.environ["PYSPARK_PYTHON"] = python
    try:
        spark = b.getOrCreate()
    finally:
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before
    spark.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if "spark.sql.caseSensitive" not in conf:
        # field names are case-sensitive in rules, as in cep run: 'Symbol' of one input is not
        # 'symbol' of another (Spark's default would merge them when the inputs are unioned)
        spark.conf.set("spark.sql.caseSensitive", "true")
    sc = spark.sparkContext
    if ship_engine is None:
        ship_engine = not is_local_master(sc.master or master)
    if ship_engine and ENGINE_ZIP_NAME not in (getattr(sc, "_python_includes", None) or []):
        sc.addPyFile(str(engine_zip(private_dir())))
    return spark
