"""Shared fixtures of the Spark tests: one local SparkSession, event files, the embedded engine's rows."""

from __future__ import annotations

import json
import math
import os
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Iterable

import pytest

# Spark tests: the session is shared with tests/sketches (getOrCreate returns whichever started first).
SPARK_MASTER = "local[2]"
SPARK_CONF = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session for every Spark test (getOrCreate reuses a running one)."""
    pyspark_sql = pytest.importorskip("pyspark.sql")
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")  # the Python workers' pandas warning
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\..*")
    builder = pyspark_sql.SparkSession.builder.master(SPARK_MASTER)
    for k, v in SPARK_CONF.items():
        builder = builder.config(k, v)
    session = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session


@pytest.fixture
def case_sensitive(spark: Any) -> Iterator[Any]:
    """The shared session reading column names with case, as ``cep spark`` sets it (the engine's JSON
    lines decoder of a backfill needs it), for one test."""
    key = "spark.sql.caseSensitive"
    before = spark.conf.get(key, "false")
    spark.conf.set(key, "true")
    try:
        yield spark
    finally:
        spark.conf.set(key, before)


def write_events(folder: Path, index: int, rows: Iterable[Any]) -> Path:
    """Write one JSON-lines file of a stream; its modification time orders it after earlier ones.

    A row that is a string is written as is (a malformed line); the file source picks files in
    modification-time order, which a fast test would otherwise leave tied.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"events-{index:03d}.json"
    # written beside the folder, then renamed in: a running stream never lists a half-written file
    tmp = folder.parent / f".{folder.name}-{path.name}.tmp"
    with open(tmp, "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    stamp = 1_600_000_000 + index
    os.utime(tmp, (stamp, stamp))
    os.replace(tmp, path)
    return path


def _plain(v: Any) -> Any:
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return v  # keep floats floats: JSON round trips them as doubles
    return v


def match_key(row: dict[str, Any]) -> tuple:
    """A complex event as a hashable, order-free value (NULL fields left out)."""
    return tuple(sorted((k, _plain(v)) for k, v in row.items() if v is not None and k not in ("output", "kind")))


def sink_rows(spark: Any, path: Path) -> list[dict[str, Any]]:
    """Every row of a file sink, read back through Spark (which lists files from _spark_metadata)."""
    return [r.asDict() for r in spark.read.json(str(path)).collect()]


def counted(rows: Iterable[dict[str, Any]], output: str) -> Counter:
    return Counter(match_key(r) for r in rows if r.get("output") == output)


def event_of(row: dict[str, Any]) -> dict[str, Any]:
    ev = row.get("event")
    return json.loads(ev) if isinstance(ev, str) else ev
