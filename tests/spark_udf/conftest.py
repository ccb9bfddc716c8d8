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


def batches_read(checkpoint: Path) -> list[list[str]]:
    """The input files each committed micro-batch of a file-source query read, in batch order (names only).

    Read from the checkpoint as Spark replays it: ``offsets/N`` ends batch N at a file-source log
    offset, and batch N reads the files logged in ``sources/0`` after the previous batch's offset up to
    its own (``FileStreamSource.getBatch``). A batch without data reads none. Usually each batch reads
    ``maxFilesPerTrigger`` files, but not always: a query stopped after its source logged the next
    batch's files and before the query logged that batch's offsets restarts with those files and the
    next ones in one batch (see docs/spark.md, "State and restarts").
    """
    logged: dict[int, list[str]] = {}
    for f in (checkpoint / "sources" / "0").iterdir():
        if not f.name.split(".")[0].isdigit():
            continue  # N (one log entry's files) or N.compact (every entry up to N); not .N.crc checksums
        for line in f.read_text().splitlines()[1:]:  # after the "v1" header, one JSON entry a line
            entry = json.loads(line)
            names = logged.setdefault(int(entry["batchId"]), [])
            if Path(entry["path"]).name not in names:
                names.append(Path(entry["path"]).name)
    ends = {}
    for f in (checkpoint / "offsets").iterdir():
        if f.name.isdigit() and (checkpoint / "commits" / f.name).exists():
            ends[int(f.name)] = json.loads(f.read_text().splitlines()[2])["logOffset"]
    out, start = [], -1
    for batch in sorted(ends):
        out.append([name for i in range(start + 1, ends[batch] + 1) for name in logged.get(i, [])])
        start = ends[batch]
    return out


def event_of(row: dict[str, Any]) -> dict[str, Any]:
    ev = row.get("event")
    return json.loads(ev) if isinstance(ev, str) else ev
