"""The committed rows of a Spark file sink, read without Spark from its ``_spark_metadata`` log.

A streaming query writes each micro-batch's part files first and commits them by adding the
batch to the sink's log, ``OUTPUT/_spark_metadata/N``: a version line (``v1``) and one JSON
line per file (``{"path": ..., "action": "add", ...}``). Every tenth batch (Spark's
``spark.sql.streaming.fileSink.log.compactInterval``) is written as ``N.compact``, holding every
file committed so far; older batch files may then be deleted. A part file the log does not list
belongs to a micro-batch that never committed (the query died mid-batch) and is redone on
restart, so reading every part file shows rows twice. A backfill (a batch write) has no log: its
files count once the job wrote ``_SUCCESS``. No pyspark import: this is plain file reading.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import gzip
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from patterns.errors import CepError

__all__ = ["SinkLogError", "NotASinkError", "committed_files", "partition_values", "read_rows"]

LOG_DIR = "_spark_metadata"
_BATCH = re.compile(r"(\d+)(\.compact)?")
_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


class SinkLogError(CepError):
    """The sink's log cannot be read, or lists a file that is gone."""


class NotASinkError(CepError):
    """The folder is not the output of a Spark file sink or batch write."""


def _local(root: str | os.PathLike[str]) -> Path:
    text = os.fspath(root)
    if "://" in text and not text.startswith("file:"):
        raise NotASinkError(f"{text!r} is not a local folder; read it with Spark (spark.read.json(path) lists "
                            "the committed files)")
    if text.startswith("file:"):
        text = unquote(urlparse(text).path)
    return Path(text)


def _log_entries(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise SinkLogError(f"cannot read the sink log file {str(path)!r}: {e.strerror or e}") from None
    if not lines or not re.fullmatch(r"v\d+", lines[0].strip()):
        raise SinkLogError(f"{str(path)!r}: expected a version line such as 'v1' first, found "
                           f"{(lines[0] if lines else '')!r}")
    if lines[0].strip() != "v1":
        raise SinkLogError(f"{str(path)!r}: log version {lines[0].strip()!r} is newer than the 'v1' this reads; "
                           "read the output with Spark")
    out = []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            raise SinkLogError(f"{str(path)!r} line {n}: not JSON ({e.msg}): {line[:80]!r}") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise SinkLogError(f"{str(path)!r} line {n}: expected an object with a 'path', found {line[:80]!r}")
        out.append(entry)
    return out


def _log_files(meta: Path) -> list[Path]:
    """The log files to read, oldest first: the latest compaction, then the batches after it."""
    plain: dict[int, Path] = {}
    compact: dict[int, Path] = {}
    for p in meta.iterdir():
        m = _BATCH.fullmatch(p.name)  # skips .crc files, temp files and anything else
        if m:
            (compact if m.group(2) else plain)[int(m.group(1))] = p
    if not plain and not compact:
        return []
    latest = max([*plain, *compact])
    start = max((b for b in compact if b <= latest), default=-1)
    files = [compact[start]] if start >= 0 else []
    for b in range(start + 1, latest + 1):
        if b not in plain:
            raise SinkLogError(f"{str(meta)!r}: the log of batch {b} is missing (batches up to {latest} were "
                               "committed and no compaction file covers it); the output cannot be read reliably")
        files.append(plain[b])
    return files


def _resolve(root: Path, logged: str) -> Path:
    """A logged file URI as a local path; a moved output folder is looked up by its relative part."""
    u = urlparse(logged)
    if u.scheme not in ("", "file"):
        raise NotASinkError(f"the sink log lists {logged!r}, not a local file; read the output with Spark")
    path = Path(unquote(u.path))
    if path.exists():
        return path
    parts, i = path.parts, len(path.parts) - 1
    while i > 1 and "=" in parts[i - 1]:  # the partition folders above the file
        i -= 1
    moved = root.joinpath(*parts[i:])
    if moved.exists():  # part files are named with a UUID: no other file has the name
        return moved
    raise SinkLogError(f"the sink log of {str(root)!r} lists {str(path)!r}, which is missing: the output was "
                       "changed after it was written")


def _hidden(name: str) -> bool:
    return name.startswith(("_", "."))


def committed_files(output: str | os.PathLike[str]) -> list[Path]:
    """The part files of ``output`` that count, in commit order.

    A streaming output: the files its ``_spark_metadata`` log adds (in batch order; a file the
    log never lists is left out). A batch output (a backfill): every part file outside hidden
    folders, once ``_SUCCESS`` shows the job finished.
    """
    root = _local(output)
    if not root.is_dir():
        raise NotASinkError(f"{str(root)!r} is not a folder")
    meta = root / LOG_DIR
    if meta.is_dir():
        order: dict[str, None] = {}
        for log_file in _log_files(meta):
            for entry in _log_entries(log_file):
                if entry.get("action", "add") == "delete":
                    order.pop(entry["path"], None)
                elif not entry.get("isDir"):
                    order[entry["path"]] = None
        return [_resolve(root, p) for p in order]
    if not (root / "_SUCCESS").exists():
        if any(p.name.startswith("part-") for p in root.rglob("part-*")):
            raise SinkLogError(f"{str(root)!r} has part files but neither a _spark_metadata log nor _SUCCESS: the "
                               "job that wrote it did not finish (run a backfill again with --mode overwrite)")
        raise NotASinkError(f"{str(root)!r} is not the output of 'cep spark run' or 'cep spark backfill' (no "
                            "_spark_metadata log, no _SUCCESS)")
    files: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not _hidden(d))
        files.extend(Path(folder) / n for n in sorted(names) if not _hidden(n) and not n.endswith(".crc"))
    return files


def partition_values(root: Path, file: Path) -> dict[str, str | None]:
    """The ``name=value`` folders between ``root`` and ``file``, unescaped as Spark escaped them.

    Example:
        >>> partition_values(Path("/o"), Path("/o/output=match/rule=a%3Db/part-0.json"))
        {'output': 'match', 'rule': 'a=b'}
        >>> partition_values(Path("/o"), Path("/o/output=error/rule=__HIVE_DEFAULT_PARTITION__/p.json"))
        {'output': 'error', 'rule': None}
    """
    try:
        parts = file.parent.relative_to(root).parts
    except ValueError:
        parts = file.parent.parts
    out: dict[str, str | None] = {}
    for part in parts:
        name, sep, value = part.partition("=")
        if sep:
            out[unquote(name)] = None if value == _NULL_PARTITION else unquote(value)
    return out


def _json_default(v: Any) -> Any:
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    raise TypeError(f"cannot write {type(v).__name__} as JSON")


def _lines(path: Path, extra: str) -> Iterator[bytes]:
    """A JSON-lines part file's rows as they are, with the partition fields appended."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        for raw in f:
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            if not extra:
                yield line
            elif line.rstrip().endswith(b"}"):
                body = line.rstrip()[:-1].rstrip()
                yield body + (b"" if body.endswith(b"{") else b",") + extra.encode() + b"}"
            else:  # not an object: leave it as Spark wrote it
                yield line


def _parquet_lines(path: Path, fields: dict[str, str | None]) -> Iterator[bytes]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches():
        for row in batch.to_pylist():
            row = {k: v for k, v in row.items() if v is not None}  # as Spark's JSON writer leaves NULLs out
            row.update({k: v for k, v in fields.items() if v is not None})
            yield json.dumps(row, default=_json_default, separators=(",", ":"), ensure_ascii=False).encode()


def read_rows(output: str | os.PathLike[str], outputs: Iterable[str] = (),
              rules: Iterable[str] = ()) -> Iterator[bytes]:
    """The committed rows of ``output`` as JSON lines (bytes, no newline), with ``output`` and ``rule``.

    ``outputs`` / ``rules`` keep only those partitions (match, late, error, ...; rule names).
    JSON part files are passed through line by line (the partition fields appended, as Spark's
    reader appends partition columns); Parquet part files are converted.
    """
    root = _local(output)
    want_out, want_rule = set(outputs), set(rules)
    for path in committed_files(root):
        fields = partition_values(root, path)
        if want_out and fields.get("output") not in want_out:
            continue
        if want_rule and fields.get("rule") not in want_rule:
            continue
        if path.name.endswith((".parquet", ".parq")):
            yield from _parquet_lines(path, fields)
        else:
            extra = ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in fields.items() if v is not None)
            yield from _lines(path, extra)
