"""A quiet Spark session for the ``cep spark`` commands: few shuffle partitions, errors-only logs."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["local_session", "DEFAULT_SHUFFLE_PARTITIONS"]

DEFAULT_SHUFFLE_PARTITIONS = 4
"""Spark's default of 200 makes every micro-batch schedule 200 tasks per stateful stage (an empty
batch then costs seconds); a checkpoint fixes the count at its first run, so it is chosen here."""

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
"""


def _log4j_file() -> str:
    path = Path(tempfile.gettempdir()) / "cep-spark-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J:
        path.write_text(_LOG4J)
    return str(path)


def local_session(
    master: str = "local[*]",
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
    app_name: str = "cep",
    packages: list[str] | None = None,
    conf: dict[str, str] | None = None,
) -> Any:
    """Get or create the Spark session the ``cep spark`` commands use.

    Logs at error level from the JVM's first line (a log4j2 file passed to the driver), no
    console progress bar, no web UI unless ``conf`` asks for one, and the pandas-version
    warnings of the Python workers silenced. ``packages`` are Maven coordinates for
    ``spark.jars.packages`` (e.g. the Kafka connector). When a session already runs in this
    process it is reused and only the runtime settings (shuffle partitions) apply.
    """
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{_log4j_file()}")
    )
    if packages:
        b = b.config("spark.jars.packages", ",".join(packages))
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    return spark
