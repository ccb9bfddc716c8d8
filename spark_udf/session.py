"""The Spark session of the ``cep spark`` commands: quiet logs, the right Python, the engine shipped."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from spark_udf.shipping import ENGINE_ZIP_NAME, engine_zip, is_local_master, worker_python

__all__ = ["local_session", "private_dir", "DEFAULT_SHUFFLE_PARTITIONS", "BATCH_JVM_OPTIONS", "ENGINE_BATCH_JVM_OPTIONS",
           "driver_java_options"]

DEFAULT_SHUFFLE_PARTITIONS = 4
"""Spark's default of 200 makes every micro-batch schedule 200 tasks per stateful stage (an empty
batch then costs seconds); a checkpoint fixes the count at its first run, so it is chosen here."""

BATCH_JVM_OPTIONS: tuple[str, ...] = ("-XX:+UseSerialGC", "-XX:Tier4InvocationThreshold=50000",
                                      "-XX:Tier4MinInvocationThreshold=6000", "-XX:Tier4CompileThreshold=150000",
                                      "-XX:Tier4BackEdgeThreshold=400000")
"""JVM options of a session started for a batch job (``cep spark backfill``), added to the driver's
(which in local mode runs the whole job).

* The serial collector does its work on the thread that needs memory, with no concurrent or
  parallel collector threads: on a short job over a small heap and 2 cores this cost about a fifth
  less CPU than Java's default (G1) in interleaved runs of ``benchmarks/bench_spark_backfill.py``.
  What it trades: every collection stops the job, and pauses grow with the heap, which is why a
  stream (``cep spark run``, long-lived, latency-bound) keeps G1.
* The optimising compiler (C2) takes a method after ten times Java's default invocation and loop
  counts: a backfill's JIT threads compiled about a second of CPU per run of the S&P file, most of
  it Spark's planning and serialisation code that runs a few thousand times; the code that runs
  per row still reaches C2 within the first few hundred thousand rows. In three alternated pairs of
  every backfill form: 0.75x the session start's CPU, 0.87-0.92x the rule groups' and key-set
  groups' (docs/spark.md, "The JVM of a backfill"). C1 alone (``-XX:TieredStopAtLevel=1``) was
  1.4x slower on the forms whose JVM reads every row.

The user's own ``spark.driver.extraJavaOptions`` replaces these (``--conf
spark.driver.extraJavaOptions=-XX:+UseG1GC``)."""

ENGINE_BATCH_JVM_OPTIONS: tuple[str, ...] = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
"""JVM options of a batch job whose input the engine reads and decodes itself, in local mode: a
key-set backfill of local JSON lines files (:func:`spark_udf.local_files.engine_reads_input`).

The JVM then reads no input row: it carries the map tasks' packed groups (about 70 bytes a row)
from the map side to the reduce side and writes the output rows. Such code runs a few thousand times per
job, so the optimising compiler (C2) costs more than it gives back: in a backfill of the S&P file
its threads compiled about 0.35 CPU s in every run, while the executor threads used 0.4-0.5 s.
With C1 only, the JIT threads' CPU fell to 0.1-0.16 s and the executor threads' did not grow;
three alternated pairs of ``benchmarks/bench_spark_backfill.py --forms key-set`` (2026-11-28,
C1 alone against the options above): the first run 1.10-1.31 s against 1.22-1.32 s, 1.85-2.17 CPU
s against 2.21-2.35 (docs/spark.md, "The JVM of a backfill"). Where the JVM reads every row
(Spark's readers, rule groups) C1 alone is 1.4-1.75x slower, which is why it is chosen only when
the engine reads the input."""

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


def driver_java_options(log4j_file: str, batch: bool = False, engine_reads: bool = False) -> str:
    """The driver JVM's options the session sets when the caller's conf sets none: the log
    configuration, and for a batch job :data:`BATCH_JVM_OPTIONS`, or :data:`ENGINE_BATCH_JVM_OPTIONS`
    when the engine reads its input (``engine_reads``).

    Example:
        >>> driver_java_options("/tmp/x/log4j2.properties", batch=True).split()[:2]
        ['-Dlog4j2.configurationFile=file:/tmp/x/log4j2.properties', '-XX:+UseSerialGC']
        >>> driver_java_options("/tmp/x/log4j2.properties", batch=True, engine_reads=True).split()[1:]
        ['-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1']
        >>> driver_java_options("/tmp/x/log4j2.properties")
        '-Dlog4j2.configurationFile=file:/tmp/x/log4j2.properties'
    """
    options = (ENGINE_BATCH_JVM_OPTIONS if engine_reads else BATCH_JVM_OPTIONS) if batch else ()
    return " ".join((f"-Dlog4j2.configurationFile=file:{log4j_file}", *options))


def local_session(
    master: str = "local[*]",
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
    app_name: str = "cep",
    packages: list[str] | None = None,
    conf: dict[str, str] | None = None,
    ship_engine: bool | None = None,
    verbose: bool = False,
    batch: bool = False,
    engine_reads: bool = False,
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

    ``batch`` (``cep spark backfill``): a job with an end; the driver's JVM starts with
    :data:`BATCH_JVM_OPTIONS` (:data:`ENGINE_BATCH_JVM_OPTIONS` with ``engine_reads``: the engine reads
    the input, the JVM none of its rows) unless ``conf`` sets ``spark.driver.extraJavaOptions`` (which
    then replaces every option set here, the log configuration's too). With ``engine_reads`` a
    session this call starts also runs without adaptive query execution unless ``conf`` sets
    ``spark.sql.adaptive.enabled``: a key-set backfill's one shuffle has the partitions it chose.

    When a session already runs in this process it is reused and only the runtime settings
    (shuffle partitions) and the shipped engine apply.
    """
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    conf = dict(conf or {})
    fresh = SparkContext._active_spark_context is None
    b = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", driver_java_options(_log4j_file(verbose), batch, engine_reads))
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
    if batch and engine_reads and fresh and "spark.sql.adaptive.enabled" not in conf:
        # its one shuffle has as many partitions as the backfill chose (nothing to coalesce) and
        # adaptive execution re-planned the reduce stage after the map stage: 30-55 ms per backfill
        spark.conf.set("spark.sql.adaptive.enabled", "false")
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
