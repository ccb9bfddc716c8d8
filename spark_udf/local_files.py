"""A backfill's JSON lines files read by the map tasks themselves, not by Spark's text source; no pyspark.

A key-set backfill of JSON lines decodes the lines with the engine (:mod:`spark_udf.json_lines`).
Fed by ``spark.read.text``, the JVM still reads every line, copies it into a row, then into an
Arrow batch for the Python worker, and its compiler compiles that per-line code on each fresh
JVM: over the S&P file (619,040 lines) that was about 0.7 CPU seconds of the tasks' JVM threads and
most of a second of JIT compilation, more than the engine's decoding. When every input file is
on a file system the workers see as the driver does (``file:`` paths, which Spark itself requires
to be at the same place on every worker) and none is compressed, each map task instead reads its
byte ranges of the files (:func:`read_split`) and hands the engine's decoder whole blocks of
lines; the JVM then carries only the split descriptions (:func:`plan_splits`).

The lines, their files and their order are the text source's (tests/spark_udf/test_local_files.py
compares the two on the same files): a split holds the lines that start after its first byte
and at or before its end, as Hadoop's line reader assigns them; a line ends at ``\\n``, ``\\r\\n``
or a lone ``\\r``; a file's leading UTF-8 byte order mark is skipped; a last line without a
terminator is a line. Splits are cut as Spark's file source cuts them
(``spark.sql.files.maxPartitionBytes``, ``openCostInBytes``, the cores), so each row's block is
the ``_metadata.file_block_start`` Spark would give it.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import unquote, urlparse

import numpy as np

__all__ = ["CODEC_SUFFIXES", "FileSplit", "SplitReader", "byte_size", "engine_reads_input", "flat_ddl", "local_path",
           "plan_files", "plan_splits", "read_split"]

CODEC_SUFFIXES = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".zstd", ".lzo", ".br", ".xz", ".z")
"""Suffixes of files Hadoop's codecs decompress when Spark reads them as text: such a file is left to Spark."""

BLOCK_BYTES = 4 << 20
"""Bytes of lines decoded at once by a map task (a block ends at a line's end)."""

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class FileSplit:
    """Bytes ``start`` to ``end`` of one file: ``path`` as Spark's file source names it, ``local`` on disk."""

    path: str
    local: str
    start: int
    end: int


def local_path(uri: str) -> str | None:
    """The local file a Spark file URI names, or None when it is on another file system or compressed.

    Example:
        >>> local_path("file:///data/a%20b.jsonl"), local_path("s3a://bucket/a.jsonl"), local_path("file:/d/a.json.gz")
        ('/data/a b.jsonl', None, None)
    """
    u = urlparse(uri)
    if u.scheme != "file" or u.netloc not in ("", "localhost"):
        return None
    path = unquote(u.path)
    if path.lower().endswith(CODEC_SUFFIXES):
        return None
    return path


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}


def byte_size(text: str) -> int | None:
    """A Spark size setting in bytes (``134217728``, ``128m``, ``128MB``; units of 1,024), None if not one.

    Example:
        >>> byte_size("128MB"), byte_size("4m"), byte_size("1024"), byte_size("none")
        (134217728, 4194304, 1024, None)
    """
    t = text.strip().lower()
    digits = len(t) - len(t.lstrip("0123456789"))
    unit = _UNITS.get(t[digits:].strip())
    return int(t[:digits]) * unit if digits and unit is not None else None


def plan_files(names: list[str], max_partition_bytes: int, open_cost: int, min_partitions: int
               ) -> list[list[FileSplit]] | None:
    """The map tasks' splits of the files Spark's file source names (``inputFiles()``), named as
    ``_metadata.file_path`` names them, or None when some file is not a local uncompressed one or
    cannot be read here; see :func:`plan_splits`.

    Example:
        >>> plan_files(["s3a://bucket/a.jsonl"], 64, 4, 2) is None
        True
    """
    files = []
    for name in names:
        local = local_path(name)
        if local is None:
            return None
        if name.startswith("file:///"):  # as _metadata.file_path names it (Hadoop's Path: no empty authority)
            name = "file:/" + name[len("file:///"):]
        try:
            files.append((name, local, os.path.getsize(local)))
        except OSError:
            return None
    return plan_splits(sorted(files), max_partition_bytes, open_cost, min_partitions)


def plan_splits(files: list[tuple[str, str, int]], max_partition_bytes: int, open_cost: int,
                min_partitions: int) -> list[list[FileSplit]]:
    """The files' splits, grouped into the map tasks that read them, as Spark's file source plans a scan.

    ``files``: (Spark's name, local path, size). A split is at most ``min(maxPartitionBytes,
    max(openCostInBytes, (bytes + files * openCostInBytes) / cores))`` bytes; the splits, largest
    first, fill tasks up to that size, each costing its bytes and ``openCostInBytes``. Empty files
    have no split. Within a task, splits are in arrival order (path, then offset).

    Example:
        >>> tasks = plan_splits([("file:/a", "/a", 100), ("file:/b", "/b", 10)], 64, 4, 2)
        >>> [[(s.path, s.start, s.end) for s in t] for t in tasks]
        [[('file:/a', 0, 59)], [('file:/a', 59, 100), ('file:/b', 0, 10)]]
    """
    files = [f for f in files if f[2] > 0]
    if not files:
        return []
    total = sum(size + open_cost for _, _, size in files)
    max_split = max(1, min(max_partition_bytes, max(open_cost, total // max(1, min_partitions))))
    splits = [FileSplit(p, loc, s, min(s + max_split, size)) for p, loc, size in files for s in range(0, size, max_split)]
    splits.sort(key=lambda s: s.end - s.start, reverse=True)
    tasks: list[list[FileSplit]] = []
    cur: list[FileSplit] = []
    size = 0
    for s in splits:
        if cur and size + (s.end - s.start) > max_split:
            tasks.append(cur)
            cur, size = [], 0
        cur.append(s)
        size += s.end - s.start + open_cost
    if cur:
        tasks.append(cur)
    return [sorted(t, key=lambda s: (s.path, s.start)) for t in tasks]


def read_split(local: str, start: int, end: int, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """The lines of bytes ``start`` to ``end`` of a file, in blocks of whole lines, each line ending in ``\\n``.

    The split's lines are those starting after byte ``start`` (or at 0) and at or before ``end``
    (the last one read to its end, past ``end``): a line cut by a split's start belongs to the split
    before, as Hadoop's line reader has it. Terminators ``\\r\\n`` and a lone ``\\r`` become ``\\n``.
    Blocks are cut after a ``\\n`` or a ``\\r``: a cut inside ``\\r\\n`` starts the next block with
    a blank line, which, as every blank line, gives no row.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile(delete=False) as f:
        ...     _ = f.write(b'{"a":1}\\r\\n{"a":2}\\n{"a":3}')
        >>> [b"".join(read_split(f.name, 0, 5)), b"".join(read_split(f.name, 5, 23))]
        [b'{"a":1}\\n', b'\\n{"a":2}\\n{"a":3}\\n']
    """
    with open(local, "rb") as f:
        pos = _first_line(f, start)
        # (a file's first line is the first split's, byte order mark or not)
        if pos is None or (start > 0 and pos > end):
            return
        f.seek(pos)
        carry = b""
        while True:
            data = f.read(block_bytes)
            if not data:  # the file's end ends the split's last line
                if carry:
                    yield _lines(carry)
                return
            base = pos - len(carry)  # the file offset of carry's first byte
            buf = carry + data if carry else data
            pos += len(data)
            if pos > end:  # the split's last line ends at the first terminator at or after ``end``
                i = _find_end(buf, max(0, end - base))
                if i >= 0:
                    yield _lines(buf[:i + 1])
                    return
                carry = buf
                continue
            i = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
            if i < 0:  # no line ends in the block yet: read on
                carry = buf
                continue
            carry = buf[i + 1:]
            yield _lines(buf[:i + 1])


def _first_line(f: Any, start: int) -> int | None:
    """Where the first line of a split starting at ``start`` starts (None: none does)."""
    if start == 0:
        return 3 if f.read(3) == _BOM else 0  # Hadoop's line reader skips a file's leading byte order mark
    f.seek(start)
    pos = start
    while True:
        piece = f.read(1 << 16)
        if not piece:
            return None
        i = _find_end(piece, 0)
        if i >= 0:
            return pos + i + 1
        pos += len(piece)


def _find_end(buf: bytes, at: int) -> int:
    """The first line terminator byte (``\\n`` or ``\\r``) at or after ``at``, or -1."""
    i, j = buf.find(b"\n", at), buf.find(b"\r", at)
    return j if i < 0 or 0 <= j < i else i


def _lines(data: bytes) -> bytes:
    """Lines with every terminator as ``\\n`` and a last one added if missing."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return data if data.endswith(b"\n") else data + b"\n"


def line_ends(block: bytes) -> np.ndarray:
    """Where each line of a block of ``\\n``-ended lines ends (after its newline)."""
    return np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10).astype(np.int64) + 1


@dataclass
class SplitReader:
    """Inside a map task: the splits of the tasks named by the input rows (``id``, an index into
    ``tasks``, :func:`plan_splits`) read and decoded, as the batches the text source's lines would
    have given :class:`~spark_udf.json_lines.JsonLinesDecoder` (the file in ``source_col``, the
    split's start in ``block_col``)."""

    decoder: Any
    source_col: str
    block_col: str
    tasks: list[list[FileSplit]]
    block_bytes: int = BLOCK_BYTES

    def decode(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        dicts: dict[str, Any] = {}
        for rb in batches:
            for t in rb.column(rb.schema.get_field_index("id")).to_pylist():
                for split in self.tasks[t]:
                    passed = {self.source_col: pa.scalar(split.path, pa.string()),
                              self.block_col: pa.scalar(split.start, pa.int64())}
                    for block in read_split(split.local, split.start, split.end, self.block_bytes):
                        out = self.decoder.decode_block(block, line_ends(block), passed, dicts)
                        if out.num_rows:
                            yield out


_DDL_TYPES = {"string": "string", "bigint": "bigint", "long": "bigint", "int": "int", "integer": "int",
              "smallint": "smallint", "short": "smallint", "tinyint": "tinyint", "byte": "tinyint",
              "double": "double", "boolean": "boolean"}
# ASCII white space only: Python's \s also matches characters Spark's lexer refuses (\x1c-\x1f, \x85);
# a DDL with any other is left to Spark
_DDL_FIELD = re.compile(r"[ \t\n\r\f\v]*(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)[ \t\n\r\f\v]*:?[ \t\n\r\f\v]+"
                        r"([A-Za-z]+)[ \t\n\r\f\v]*")


def flat_ddl(ddl: str) -> list[tuple[str, str]] | None:
    """The ``(name, Spark type)`` columns of a Spark DDL schema whose every column the engine's JSON
    decoder reads (:func:`spark_udf.json_lines.column_kinds`), or None for any other schema or text
    this reading is not sure of (nested or parameterised types, ``NOT NULL``, comments).

    Example:
        >>> flat_ddl("sym string, `px, last` DOUBLE, n long")
        [('sym', 'string'), ('px, last', 'double'), ('n', 'bigint')]
        >>> flat_ddl("ts timestamp, sym string") is None, flat_ddl("q struct<a: int>") is None
        (True, True)
    """
    fields = []
    at = 0
    while at < len(ddl):
        m = _DDL_FIELD.match(ddl, at)
        if m is None:
            return None
        kind = _DDL_TYPES.get(m.group(2).lower())
        end = m.end()
        if kind is None or (end < len(ddl) and ddl[end] != ","):
            return None
        name = m.group(1)
        fields.append((name[1:-1].replace("``", "`") if name.startswith("`") else name, kind))
        at = end + 1
        if end < len(ddl) and not ddl[at:].strip():
            return None  # a trailing comma
    return fields or None


def _hidden(name: str) -> bool:
    """A file name Spark's file listing leaves out (its ``shouldFilterOutPathName``): ``_`` (unless a
    partition's ``=``) or ``.`` first, or a copy under way."""
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


def _local_input_files(path: str) -> list[str] | None:
    """The files Spark's file source would read for ``path`` (a file, a folder's visible files, a glob),
    when all are local and uncompressed; None otherwise or when unsure (a partition's subfolder,
    ``day=1``; a brace glob or an escape; nothing there)."""
    u = urlparse(path)
    if u.scheme == "file" and u.netloc in ("", "localhost"):
        path = unquote(u.path)
    elif u.scheme or "{" in path:
        return None
    if glob.has_magic(path):
        if "\\" in path:
            return None  # Hadoop's glob escape; Python's glob takes the backslash literally
        # a class negated with ^ as Hadoop's glob reads it (Python's takes the ^ as a member)
        names = sorted(glob.glob(path.replace("[^", "[!")))
    else:
        names = [path]
    files = []
    for name in names:
        if os.path.isdir(name):
            for entry in sorted(os.scandir(name), key=lambda e: e.name):
                if _hidden(entry.name):
                    continue
                if entry.is_dir() and "=" not in entry.name:
                    continue  # an unpartitioned folder's files are those in it: Spark reads no subfolder
                if not entry.is_file():
                    return None  # a partition's folder (its column joins the schema), or no file
                files.append(entry.path)
        elif os.path.isfile(name):
            if not _hidden(os.path.basename(name)):  # a glob's match or a file named itself: Spark skips it too
                files.append(name)
        else:
            return None
    if not files or any(f.lower().endswith(CODEC_SUFFIXES) for f in files):
        return None
    if not any(os.path.getsize(f) for f in files):
        return None  # empty files have no split: no task to read them, Spark's text source plans the scan
    return files


def engine_reads_input(rules: Any, inputs: list[tuple[str | None, str]], fmt: str, schema: str | None,
                       options: dict[str, str], master: str, conf: dict[str, str]) -> bool:
    """Whether ``cep spark backfill`` with these settings will have its map tasks read the input files
    and decode them with the engine (key-set groups over local JSON lines, :class:`SplitReader`), so
    that the JVM reads no input row; decided before Spark starts, for the JVM's options
    (:data:`spark_udf.session.ENGINE_BATCH_JVM_OPTIONS`).

    It answers as the planning will decide (``spark_udf.api``'s key-set, decoder and local-files
    choices; tests/spark_udf/test_jvm_profile.py runs both on the same inputs), and says False when
    unsure: a local master; one unnamed input of JSON lines files, local and uncompressed, without
    ``--source-option``; a ``--schema`` every column of which the decoder reads, none reserved
    (``_cep_``; without one, Spark's reader infers the schema from every row); pattern rules only, no table joined, no view; no
    setting that turns the local read or the decoder off.
    """
    from spark_udf.keyed import joined_table, kind_of
    from spark_udf.schema import RESERVED_PREFIX
    from spark_udf.shipping import is_local_master

    if not is_local_master(master) or fmt.lower() != "json" or options or not schema or len(inputs) != 1:
        return False
    name, path = inputs[0]
    fields = flat_ddl(schema)
    if name is not None or fields is None:
        return False
    if any(n.startswith(RESERVED_PREFIX) for n, _ in fields):
        return False  # a reserved column read from the lines: the decoder passes only the file and the block
    setting = {k: str(v).strip().lower() for k, v in conf.items()}
    if (setting.get("spark.cep.backfill.localFiles", "true") != "true"
            or setting.get("spark.sql.caseSensitive", "true") != "true"
            or setting.get("spark.sql.legacy.json.allowEmptyString.enabled", "false") == "true"
            or setting.get("spark.sql.json.enableExactStringParsing", "true") != "true"):
        return False
    if "spark.sql.json.enableExactStringParsing" not in setting and any(t == "string" for _, t in fields):
        try:  # Spark's reader gives a string column's text exactly as written by default since 4.0
            from importlib.metadata import version

            if int(version("pyspark").split(".")[0]) < 4:
                return False
        except Exception:  # noqa: BLE001 - no package metadata: unsure
            return False
    rule_list = list(rules)
    if not rule_list or getattr(rules, "views", None):
        return False
    if any(kind_of(r) != "pattern" or joined_table(r) is not None for r in rule_list):
        return False
    try:
        return _local_input_files(path) is not None
    except OSError:  # a folder that cannot be listed, a file gone meanwhile: Spark's reading will say
        return False
