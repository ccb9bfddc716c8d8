"""Events in, as columnar batches: decoding JSON lines, CSV, Parquet, pandas and Arrow; event time.

One concept over about 1,310 lines, so one module: every reader ends in the same
:class:`EventBatch` with the same value and dtype rules (numbers narrowed alike, dates left as
text, bad lines kept with their file and line), and event time is read from those columns. The
block JSON-lines parsers that need none of this live apart in :mod:`cep.json_blocks` and
:mod:`cep.json_flat`.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import math
import os
import re
import time
import weakref
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator

import numpy as np
import orjson

from cep.json_blocks import (
    RETRY_EVERY,
    BlockHints,
    LineBlocks,
    decode_block,
    jsonl_decoder,
    split_lines,
)
from cep.json_blocks import narrow_column as _narrow
from cep.json_exact import PLAIN_KINDS, after_refusal, holds_rounded, loads_exact, rounded_rows
from cep.json_flat import StringDictionary, flat_for
from patterns.errors import CepError
from patterns.files import strip_bom
from patterns.rules import DEFAULT_MAX_FUTURE_SKEW_MS, TIME_UNITS

__all__ = [
    "EventBatch",
    "BadLine",
    "batch_from_records",
    "json_batch",
    "batch_from_pandas",
    "batch_from_arrow",
    "to_batch",
    "read_events",
    "parse_times",
    "event_times",
    "future_guard",
    "unit_hint",
    "UnitHint",
    "TIME_UNITS",
    "DEFAULT_MAX_FUTURE_SKEW_MS",
    "Clock",
    "FixedClock",
    "wall_clock_ms",
    "clock_now",
    "format_time",
    "format_duration",
]


@dataclass
class BadLine:
    """An input line that could not be decoded into an event."""

    line: int
    reason: str
    source: str | None = None
    text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "line": self.line, "reason": self.reason}
        if self.text is not None:
            out["text"] = self.text[:200]
        return out


@dataclass
class EventBatch:
    """A batch of events as columns (numpy object or numeric arrays), with where they came from."""

    columns: dict[str, np.ndarray]
    n: int
    lines: np.ndarray | None = None
    source: str | None = None
    bad: list[BadLine] = field(default_factory=list)
    # columns (True) or rows of columns (a mask) that hold epoch ms converted from date/time
    # values (pandas, Arrow, access logs): a rule's time_unit does not apply to them
    epoch_ms: dict[str, np.ndarray | bool] = field(default_factory=dict)
    # string columns the decoder dictionary-encoded: name -> (the column, a code per row, -1 for
    # NULL, the distinct values in first-seen order), so that keys and hashes are made per value
    dict_codes: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    # of those, the columns whose codes index a dictionary kept across the file's batches
    # (cep.json_flat.StringDictionary): what a consumer derives per code carries over by its identity
    dictionaries: dict[str, Any] = field(default_factory=dict)

    def encoded(self, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(codes, distinct values) of column ``name`` as the decoder encoded it, or None.

        None too when the column was replaced since (the codes describe the decoded column only)."""
        got = self.dict_codes.get(name)
        if got is None or self.columns.get(name) is not got[0]:
            return None
        return got[1], got[2]

    def dictionary(self, name: str) -> Any:
        """The file-wide dictionary (:class:`cep.json_flat.StringDictionary`) whose strings
        :meth:`encoded` gives for column ``name``, or None (then they are this batch's own)."""
        if self.encoded(name) is None:
            return None
        return self.dictionaries.get(name)

    def column(self, name: str) -> np.ndarray:
        """The column ``name``, or an all-NULL column when the batch has no such field."""
        col = self.columns.get(name)
        if col is None:
            col = np.full(self.n, None, dtype=object)
        return col

    def record(self, i: int) -> dict[str, Any]:
        """Row ``i`` as a dict (NULL fields left out)."""
        out = {}
        for k, col in self.columns.items():
            v = col[i]
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            out[k] = v.item() if isinstance(v, np.generic) else v
        return out

    def line_of(self, i: int) -> int:
        return int(self.lines[i]) if self.lines is not None else i + 1

    def take(self, idx: np.ndarray | slice) -> EventBatch:
        """The rows at ``idx`` (positions, or a slice: views of the columns), keeping their line
        numbers (bad lines stay with this batch)."""
        if isinstance(idx, slice):
            n = len(range(*idx.indices(self.n)))
            lines = self.lines[idx] if self.lines is not None else np.arange(self.n, dtype=np.int64)[idx] + 1
        else:
            n = len(idx)
            lines = self.lines[idx] if self.lines is not None else np.asarray(idx, dtype=np.int64) + 1
        conv = {k: m[idx] if isinstance(m, np.ndarray) else m for k, m in self.epoch_ms.items()}
        cols = {k: c[idx] for k, c in self.columns.items()}
        codes = {}
        for k in self.dict_codes:
            got = self.encoded(k)
            if got is not None:
                codes[k] = (cols[k], got[0][idx], got[1])
        dicts = {k: d for k, d in self.dictionaries.items() if k in codes}
        return EventBatch(cols, n, lines, self.source, epoch_ms=conv, dict_codes=codes, dictionaries=dicts)


def batch_from_records(
    records: list[dict[str, Any]], lines: list[int] | None = None, source: str | None = None
) -> EventBatch:
    """Columns from a list of dicts; a field missing from a record is NULL there.

    Example:
        >>> b = batch_from_records([{"a": 1}, {"a": 2, "b": "x"}])
        >>> b.n, list(b.column("b"))
        (2, [None, 'x'])
    """
    cols = {k: _narrow(arr) for k, arr in _record_columns(records)}
    return EventBatch(cols, len(records), np.asarray(lines, dtype=np.int64) if lines is not None else None, source)


def _record_columns(records: list[dict[str, Any]]) -> Iterator[tuple[str, np.ndarray]]:
    """Each field of ``records`` (in order of first appearance) with its values as an object
    array, None where a record lacks it."""
    names: dict[str, None] = {}
    for r in records:
        for k in r:
            names.setdefault(k, None)
    n = len(records)
    for k in names:
        arr = np.empty(n, dtype=object)
        arr[:] = [r.get(k) for r in records]
        yield k, arr




def batch_from_pandas(df: Any, source: str | None = None) -> EventBatch:
    """Columns from a pandas DataFrame (NaN and NaT read as NULL; datetimes as epoch ms).

    Example:
        >>> import pandas as pd
        >>> df = pd.DataFrame({"ts": pd.to_datetime(["1970-01-01T00:00:01.5Z"])})
        >>> batch_from_pandas(df).column("ts").tolist()
        [1500]
    """
    import pandas as pd

    cols: dict[str, np.ndarray] = {}
    conv: dict[str, np.ndarray | bool] = {}
    for name in df.columns:
        s = df[name]
        arr = s.to_numpy()
        if arr.dtype.kind in "fc" and np.isnan(arr).any():
            obj = arr.astype(object)
            obj[np.isnan(arr)] = None
            arr = obj
        elif arr.dtype.kind == "M" or isinstance(s.dtype, pd.DatetimeTZDtype):
            # by the column's own unit (pandas 3 gives [us] for parsed strings); tz-aware as UTC
            if isinstance(s.dtype, pd.DatetimeTZDtype):
                arr = s.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
            arr = datetime64_to_ms(arr)
            conv[str(name)] = True
        elif arr.dtype == object:
            arr = arr.copy()
            mask = s.isna().to_numpy()
            arr[mask] = None
        cols[str(name)] = arr
    return EventBatch(cols, len(df), None, source, epoch_ms=conv)


def batch_from_arrow(table: Any, source: str | None = None) -> EventBatch:
    """Columns from a pyarrow Table or RecordBatch (nulls read as NULL; timestamps as epoch ms; a
    dictionary-encoded string column with its codes, :meth:`EventBatch.encoded`)."""
    import pyarrow as pa

    cols: dict[str, np.ndarray] = {}
    conv: dict[str, np.ndarray | bool] = {}
    codes: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for name, col in zip(table.schema.names, table.columns):
        t = col.type
        if pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
            # strings with their codes: the column gathered from the distinct strings (one Python
            # string each, not one per row), the codes kept for what is derived per value (times)
            arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            if isinstance(arr, pa.ChunkedArray):  # no chunks at all
                arr = pa.array([], t)
            uniq = arr.dictionary.to_numpy(zero_copy_only=False)
            code = arr.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            if arr.dictionary.null_count:  # a NULL among the values (legal Arrow): its rows' code is -1 too,
                # as consumers of the codes (analytics keys: "missing (null)") read a NULL only as -1
                null_value = np.append(arr.dictionary.is_null().to_numpy(zero_copy_only=False), False)
                code = np.where(null_value[code], -1, code)
            with_null = np.empty(len(uniq) + 1, dtype=object)
            with_null[:-1] = uniq
            with_null[-1] = None
            cols[name] = with_null[code]
            codes[name] = (cols[name], code, uniq)
            continue
        if pa.types.is_timestamp(t) or pa.types.is_date(t):
            cols[name] = _arrow_time_ms(col)
            conv[name] = True
            continue
        if (pa.types.is_string(t) or pa.types.is_large_string(t)) and len(col):
            # Arrow builds the object array of str (None for nulls) itself: half the time of
            # to_pylist then np.asarray, and every key column of a keyed rule is read this way
            cols[name] = col.to_numpy(zero_copy_only=False)
            continue
        if col.null_count and (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
            # numbers or booleans with NULLs: Python values and None, made column-wise (the NULLs
            # filled first, so integers stay exact integers, never floats with NaN)
            import pyarrow.compute as pc

            mask = col.is_null().to_numpy(zero_copy_only=False)
            arr = pc.fill_null(col, False if pa.types.is_boolean(t) else 0).to_numpy(zero_copy_only=False).astype(object)
            arr[mask] = None
        elif col.null_count or not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            arr = np.asarray(col.to_pylist(), dtype=object) if col.null_count or not pa.types.is_boolean(col.type) else col.to_numpy(zero_copy_only=False)
            if arr.ndim != 1:  # lists/structs: keep Python objects
                tmp = np.empty(len(col), dtype=object)
                tmp[:] = col.to_pylist()
                arr = tmp
        else:
            arr = col.to_numpy(zero_copy_only=False) if hasattr(col, "to_numpy") else np.asarray(col)
        cols[name] = arr
    return EventBatch(cols, table.num_rows, None, source, epoch_ms=conv, dict_codes=codes)


_MS_PER_UNIT = {"D": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
_UNITS_PER_MS = {"us": 1_000, "ns": 1_000_000, "ps": 1_000_000_000}


def datetime64_to_ms(arr: np.ndarray) -> np.ndarray:
    """A numpy ``datetime64`` array of any unit as an object array of epoch ms (NaT as None).

    Times between milliseconds round down (towards the past), as Arrow's and Spark's casts do.

    Example:
        >>> datetime64_to_ms(np.array(["1970-01-01T00:00:01.5009", "NaT"], dtype="datetime64[us]")).tolist()
        [1500, None]
        >>> datetime64_to_ms(np.array(["2017-07-28"], dtype="datetime64[s]")).tolist()
        [1501200000000]
    """
    unit, count = np.datetime_data(arr.dtype)
    raw = arr.view(np.int64)
    nat = np.isnat(arr)
    if unit in _MS_PER_UNIT:
        ms = raw * (_MS_PER_UNIT[unit] * count)
    elif unit in _UNITS_PER_MS:
        per = _UNITS_PER_MS[unit]
        ms = raw // per if count == 1 else (raw * count) // per
    else:
        # weeks, months, years: calendar units, let numpy do the calendar
        ms = np.where(nat, 0, arr.astype("datetime64[ms]").view(np.int64))
    out = ms.astype(object)
    out[nat] = None
    return out


def _arrow_time_ms(col: Any) -> np.ndarray:
    """An Arrow timestamp or date column as epoch ms, whatever its unit and zone (nulls as None)."""
    import pyarrow as pa

    if pa.types.is_date(col.type):
        col = col.cast(pa.timestamp("ms"))  # exact: a date is whole days
    unit = col.type.unit  # a timestamp's stored value is UTC in its unit, with a zone or without
    raw = np.asarray(col.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    ms = datetime64_to_ms(raw.view(f"datetime64[{unit}]"))
    if col.null_count:
        ms[np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)] = None
        return ms
    return ms.astype(np.int64)


def to_batch(events: Any, source: str | None = None) -> EventBatch:
    """Accept an EventBatch, a list of dicts, a dict, a pandas DataFrame or an Arrow table/batch."""
    if isinstance(events, EventBatch):
        return events
    if isinstance(events, dict):
        return batch_from_records([events], source=source)
    if isinstance(events, list):
        return batch_from_records(events, source=source)
    mod = type(events).__module__
    if mod.startswith("pandas"):
        return batch_from_pandas(events, source)
    if mod.startswith("pyarrow"):
        return batch_from_arrow(events, source)
    raise TypeError(
        f"cannot read events from {type(events).__name__}: expected a dict, a list of dicts, "
        "a pandas DataFrame or a pyarrow Table / RecordBatch"
    )


# ------------------------------------------------------------------ files


def _batched(parsed: Iterable[tuple[int, dict] | tuple[int, dict, bytes] | BadLine], batch_size: int,
             src: str) -> Iterator[EventBatch]:
    """Group decoded lines into batches; each batch carries the bad lines met while filling it.

    An item ``(line, event, raw)`` carries the line's bytes: its integers are made exact from them
    (:func:`json_batch`)."""
    records: list[dict] = []
    lines: list[int] = []
    raws: list[bytes] = []
    bad: list[BadLine] = []

    def batch() -> EventBatch:
        b = json_batch(records, lines, src, raws) if raws else batch_from_records(records, lines, src)
        return _with_bad(b, bad)

    for item in parsed:
        if item is _FLUSH:
            if records or bad:
                yield batch()
                records, lines, raws, bad = [], [], [], []
            continue
        if isinstance(item, BadLine):
            bad.append(item)
            continue
        lines.append(item[0])
        records.append(item[1])
        if len(item) > 2:
            raws.append(item[2])  # type: ignore[misc]
        if len(records) >= batch_size:
            yield batch()
            records, lines, raws, bad = [], [], [], []
    if records or bad:
        yield batch()


def json_batch(records: list[dict], lines: list[int], src: str | None, raws: list[bytes]) -> EventBatch:
    """The batch of JSON-lines events decoded by :func:`decode_json_line` (``raws``: their lines),
    with every integer exact: the few rows that may hold an integer orjson rounded (a float of
    magnitude 2**63 or more, see :mod:`cep.json_exact`) are decoded again from their line. A row
    that cannot be (nested too deep) is left out and named in the batch's ``bad`` (callers add
    theirs with :func:`_with_bad`).

    Example:
        >>> raws = [b'{"id": 1}', b'{"id": 18446744073709551617}']
        >>> json_batch([decode_json_line(r, i, "f") for i, r in enumerate(raws, 1)], [1, 2], "f", raws).column("id").tolist()
        [1, 18446744073709551617]
    """
    import pandas as pd

    cols: dict[str, np.ndarray] = {}
    n = len(records)
    again: set[int] = set()
    for k, arr in _record_columns(records):  # as batch_from_records builds them, each column's type inferred once for both uses
        kind = pd.api.types.infer_dtype(arr, skipna=False)
        cols[k] = _narrow(arr, kind)
        if kind not in PLAIN_KINDS:  # a float, a container or a NULL among the values: look closer
            again.update(rounded_rows({k: cols[k]}))
    b = EventBatch(cols, n, np.asarray(lines, dtype=np.int64), src)
    if not again:
        return b
    changed: dict[str, None] = {}
    refused: dict[int, BadLine] = {}
    for i in again:
        try:
            exact = loads_exact(strip_bom(raws[i]).strip())
        except orjson.JSONDecodeError as e:  # nested too deep to read exactly: reported, never rounded
            refused[i] = BadLine(lines[i], f"malformed JSON: {e}", src, raws[i].decode("utf-8", "replace").rstrip("\n"))
            continue
        changed.update((k, None) for k, v in records[i].items() if holds_rounded(v))
        records[i] = exact
    if refused:  # (rare) the batch without those rows, built again whole
        keep = [i for i in range(n) if i not in refused]
        b = batch_from_records([records[i] for i in keep], [lines[i] for i in keep], src)
        b.bad = [refused[i] for i in sorted(refused)]
        return b
    for k in changed:  # only the columns that held a rounded value are built again
        arr = np.empty(len(records), dtype=object)
        arr[:] = [r.get(k) for r in records]
        b.columns[k] = _narrow(arr)
    return b


def _with_bad(b: EventBatch, bad: list[BadLine]) -> EventBatch:
    """``b`` with the bad lines met while filling it, besides any :func:`json_batch` found, in line order."""
    b.bad = sorted(bad + b.bad, key=lambda x: x.line) if b.bad else bad
    return b


# events per batch when the caller names no size (``cep run``, ``cep bench``, read_events): each
# rule pays a fixed cost per batch (about 0.1 ms for a batch-DFA rule), so with hundreds of rules
# larger batches are cheaper per event, while a rule's state is sized by what it keeps, not by
# the batch (cep/batch_dfa.py). 16,384 rows: 200 rules 1.36x the events per CPU-second of 8,192
# rows in one process, the process no larger; a live pipe is cut into batches by what is ready
# (_FLUSH), so its latency does not depend on it
DEFAULT_BATCH_SIZE = 16384
_FLUSH = object()  # from a live source: nothing more is ready now, so emit what was read


def decode_json_line(raw: bytes, lineno: int, src: str | None, mark_unterminated: bool = False) -> dict | BadLine | None:
    """One line of a JSON lines file: the event, a BadLine saying why not, or None when blank.

    An integer beyond 64 bits may be a float in the event (orjson's): :func:`json_batch` makes the
    batch of such events exact.

    With ``mark_unterminated``, a malformed line without its newline is reported as an
    unterminated last line (a file being written, read while it grows).
    """
    raw = strip_bom(raw)  # editors on Windows write one; a file cat'ed after another has it mid-stream
    stripped = raw.strip()
    if not stripped:
        return None
    try:
        try:
            obj = orjson.loads(stripped)  # called here, not through loads_fast: a call costs 2% of a line
        except orjson.JSONDecodeError as e:
            obj = after_refusal(stripped, e)  # an integer past a double's range is read exactly
    except orjson.JSONDecodeError as e:
        text = raw.decode("utf-8", "replace").rstrip("\n")
        what = "malformed JSON (unterminated last line)" if mark_unterminated and not raw.endswith(b"\n") else "malformed JSON"
        return BadLine(lineno, f"{what}: {e}", src, text)
    if not isinstance(obj, dict):
        return BadLine(lineno, f"expected a JSON object per line, found {type(obj).__name__}", src, None)
    return obj


def _jsonl_batches(path: Path, batch_size: int, start_line: int = 0, decoder: str | None = None) -> Iterator[EventBatch]:
    """A JSON lines file's batches: a file a block of lines at a time (:mod:`cep.json_blocks`), unless
    ``decoder`` (default: :func:`cep.json_blocks.jsonl_decoder`) is ``lines``; standard input one line
    at a time, so that a live pipe's events are processed as they come."""
    src = _source_name(path)
    if str(path) != STDIN and (decoder or jsonl_decoder()) == "blocks":
        def blocks() -> Iterator[EventBatch]:
            with open(path, "rb") as f:
                yield from _block_batches(f, batch_size, src, start_line)

        return blocks()

    def parsed() -> Iterator[Any]:
        for lineno, raw in _numbered_lines(path):
            if raw is _FLUSH:
                yield _FLUSH
                continue
            if lineno <= start_line:
                continue
            got = decode_json_line(raw, lineno, src)
            if isinstance(got, BadLine):
                yield got
            elif got is not None:
                yield lineno, got, raw

    return _batched(parsed(), batch_size, src)


def _block_batches(f: BinaryIO, batch_size: int, src: str | None, start_line: int = 0) -> Iterator[Any]:
    """The events of a JSON lines file as batches of ``batch_size``, a block of lines at a time by
    Arrow's reader (:mod:`cep.json_blocks`), exactly as the per-line decoder batches them.

    Example:
        >>> b = next(_block_batches(io.BytesIO(b'{"a": 1}\\n{"a": 2.5}\\nnope\\n{"a": "x"}\\n'), 10, "f"))
        >>> b.column("a").tolist(), b.lines.tolist(), [(x.line, x.reason[:14]) for x in b.bad]
        ([1, 2.5, 'x'], [1, 2, 4], [(3, 'malformed JSON')])
    """
    lines = LineBlocks(f)
    hints = BlockHints()
    try:
        size: int | None = os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):  # an in-memory file
        size = None
    if start_line:
        while lines.lineno < start_line:
            _, _, ends = lines.take(start_line - lines.lineno)
            if not len(ends):
                return
    misses = 0  # blocks in a row that went to the per-line decoder
    dicts: dict[str, StringDictionary] = {}  # string columns' dictionaries, kept across the blocks
    while True:
        first, block, ends = lines.take(batch_size)
        if not len(ends):
            return
        # a file whose blocks keep going per line (nested fields in every line) is tried again only
        # every RETRY_EVERY blocks: a refused parse costs a third of the per-line decoding
        if misses < 2 or misses % RETRY_EVERY == 0:
            codes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
            # (asked at every block: the rules may have imported numba since the last one)
            cols = decode_block(block, ends, hints, codes, flat_for(size), dicts)
            if cols is not None:
                misses = 0
                enc = {k: (cols[k], c, u) for k, (c, u) in codes.items()}
                yield EventBatch(cols, len(ends), np.arange(first, first + len(ends), dtype=np.int64), src,
                                 dict_codes=enc, dictionaries={k: dicts[k] for k in enc if k in dicts})
                continue
        misses += 1
        # per line, as the line decoder does: fill the batch with lines after the block if needed
        records: list[dict] = []
        nums: list[int] = []
        raws: list[bytes] = []
        bad: list[BadLine] = []
        while True:
            for j, raw in enumerate(split_lines(block, ends)):
                got = decode_json_line(raw, first + j, src)
                if isinstance(got, BadLine):
                    bad.append(got)
                elif got is not None:
                    records.append(got)
                    nums.append(first + j)
                    raws.append(raw)
            if len(records) >= batch_size:
                break
            first, block, ends = lines.take(batch_size - len(records))
            if not len(ends):
                break
        if records or bad:
            yield _with_bad(json_batch(records, nums, src, raws), bad)


STDIN = "-"
"""The input path that means standard input (JSON lines, CSV or access-log lines)."""


def _source_name(path: Path) -> str:
    return "<stdin>" if str(path) == STDIN else str(path)


def _numbered_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, raw line) of a file; from standard input also ``(n, _FLUSH)`` whenever
    nothing more is ready, so that a live pipe's events are processed as they come."""
    if str(path) != STDIN:
        with open(path, "rb") as f:
            yield from enumerate(f, 1)
        return
    import select
    import sys

    fd = sys.stdin.fileno()
    lineno = 0
    pending = b""
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            if pending:
                lineno += 1
                yield lineno, pending
            return
        parts = (pending + chunk).split(b"\n")
        pending = parts.pop()
        for part in parts:
            lineno += 1
            yield lineno, part + b"\n"
        try:
            ready = bool(select.select([fd], [], [], 0)[0])
        except (OSError, ValueError):  # not selectable: read on, batch by size
            ready = True
        if not ready:
            yield lineno, _FLUSH


def _convert_csv_value(v: str) -> Any:
    if v == "":
        return None
    try:
        return int(v)
    except ValueError:
        pass
    try:
        f = float(v)
        return f if math.isfinite(f) else v
    except ValueError:
        return v


def _csv_batches(path: Path, batch_size: int) -> Iterator[EventBatch]:
    src = _source_name(path)

    def parsed() -> Iterator[Any]:
        flush = [False]

        def text_lines() -> Iterator[str]:  # decoded lines; a BOM before the header is dropped
            for lineno, raw in _numbered_lines(path):
                if raw is _FLUSH:
                    flush[0] = True
                    continue
                yield (strip_bom(raw) if lineno == 1 else raw).decode("utf-8", "replace")

        lines = text_lines()
        first = next(lines, None)
        if first is None:
            return
        delim = "\t" if first.count("\t") > first.count(",") else ","
        reader = csv.reader(chain([first], lines), delimiter=delim)
        header = next(reader, None)
        if header is None:
            return
        for row in reader:
            lineno = reader.line_num
            if len(row) != len(header):
                yield BadLine(lineno, f"expected {len(header)} fields, found {len(row)}", src, delim.join(row))
            else:
                yield lineno, {h: _convert_csv_value(v) for h, v in zip(header, row)}
            if flush[0]:
                flush[0] = False
                yield _FLUSH

    return _batched(parsed(), batch_size, src)


def _parquet_batches(path: Path, batch_size: int) -> Iterator[EventBatch]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if str(path) == STDIN:
        raise CepError("Parquet cannot be read from standard input (it needs to seek): pass the file's path")
    try:
        pf = pq.ParquetFile(path)
        offset = 0
        for rb in pf.iter_batches(batch_size=batch_size):
            b = batch_from_arrow(rb, str(path))
            b.lines = np.arange(offset + 1, offset + rb.num_rows + 1, dtype=np.int64)
            offset += rb.num_rows
            yield b
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise CepError(f"{path}: not a readable Parquet file ({_short_text(str(e))}): is it truncated or still "
                       "being written? Events before the damage were processed") from None


# Apache / NGINX access logs, Common Log Format with the optional "combined" referrer and agent
_CLF = re.compile(
    rb'^(\S+) (\S+) (\S+) \[(\d{2})/([A-Za-z]{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})\] '
    rb'"([^"\\]*(?:\\.[^"\\]*)*)" (\d{3}) (\d+|-)(?: "([^"\\]*(?:\\.[^"\\]*)*)" "([^"\\]*(?:\\.[^"\\]*)*)")?\s*$'
)
_MONTHS = {m: i for i, m in enumerate(
    (b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"), 1)}


def parse_access_log_line(raw: bytes) -> dict[str, Any] | str:
    """One access-log line as an event, or the reason it is not one.

    Fields: ``host``, ``ident``, ``user`` (None for ``-``), ``time`` (epoch ms, UTC), ``method``,
    ``url``, ``protocol``, ``status`` (int), ``bytes`` (int, None for ``-``), and for the combined
    format ``referrer`` and ``agent`` (None for ``-``).

    Example:
        >>> e = parse_access_log_line(b'1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET /a HTTP/1.1" 404 12 "-" "curl"')
        >>> e["host"], e["time"], e["method"], e["url"], e["status"], e["bytes"], e["referrer"], e["agent"]
        ('1.2.3.4', 1431857103000, 'GET', '/a', 404, 12, None, 'curl')
        >>> parse_access_log_line(b'hello')
        'not an access-log line: expected host ident user [dd/Mon/yyyy:hh:mm:ss +zzzz] "request" status bytes'
    """
    m = _CLF.match(raw.rstrip(b"\r\n"))
    if m is None:
        return 'not an access-log line: expected host ident user [dd/Mon/yyyy:hh:mm:ss +zzzz] "request" status bytes'
    g = m.groups()
    month = _MONTHS.get(g[4])
    if month is None:
        return f"unknown month {g[4].decode('ascii', 'replace')!r} in the time field"
    import datetime as dt

    try:
        when = dt.datetime(int(g[5]), month, int(g[3]), int(g[6]), int(g[7]), int(g[8]), tzinfo=dt.timezone.utc)
    except ValueError as e:
        return f"bad time in the time field: {e}"
    offset = (int(g[10]) * 60 + int(g[11])) * 60_000 * (1 if g[9] == b"+" else -1)
    request = g[12].decode("utf-8", "replace")
    parts = request.split(" ")
    method, url, protocol = (parts + [None, None])[:3] if len(parts) <= 3 else (parts[0], " ".join(parts[1:-1]), parts[-1])

    def text(b: bytes | None) -> str | None:
        return None if b is None or b == b"-" else b.decode("utf-8", "replace")

    ev: dict[str, Any] = {
        "host": g[0].decode("utf-8", "replace"),
        "ident": text(g[1]),
        "user": text(g[2]),
        "time": int(when.timestamp() * 1000) - offset,
        "method": method or None,
        "url": url,
        "protocol": protocol,
        "status": int(g[13]),
        "bytes": None if g[14] == b"-" else int(g[14]),
    }
    if g[15] is not None:
        ev["referrer"] = text(g[15])
        ev["agent"] = text(g[16])
    return ev


def _access_log_batches(path: Path, batch_size: int) -> Iterator[EventBatch]:
    src = _source_name(path)

    def parsed() -> Iterator[Any]:
        for lineno, raw in _numbered_lines(path):
            if raw is _FLUSH:
                yield _FLUSH
                continue
            if lineno == 1:
                raw = strip_bom(raw)
            if not raw.strip():
                continue
            ev = parse_access_log_line(raw)
            if isinstance(ev, str):
                yield BadLine(lineno, ev, src, raw.decode("utf-8", "replace").rstrip("\n"))
            else:
                yield lineno, ev

    for b in _batched(parsed(), batch_size, src):
        b.epoch_ms["time"] = True  # parsed from the log's date: milliseconds whatever the rule's time_unit
        yield b


def read_events(path: str | Path, batch_size: int = DEFAULT_BATCH_SIZE, fmt: str | None = None) -> Iterator[EventBatch]:
    """Read a JSON lines (default), CSV/TSV, Parquet or web-server access-log file as batches.

    The format follows ``fmt`` or the file's ending (.jsonl/.json, .csv/.tsv, .parquet, .log for
    an Apache/NGINX access log in the common or combined format, see
    :func:`parse_access_log_line`).
    """
    p = Path(path)
    kind = (fmt or ("jsonl" if str(path) == STDIN else p.suffix.lstrip("."))).lower()
    if kind in ("parquet", "pq"):
        return _parquet_batches(p, batch_size)
    if kind in ("log", "clf", "access-log"):
        return _access_log_batches(p, batch_size)
    if kind in ("csv", "tsv"):
        return _csv_batches(p, batch_size)
    return _jsonl_batches(p, batch_size)


# ------------------------------------------------------------------ event time


# Event times outside these bounds are refused as errors: one far-future time would otherwise move
# the watermark so far that every later event is late (and a far-past one is late at once).
MIN_EVENT_TIME_MS = -2_208_988_800_000  # 1900-01-01T00:00:00Z
MAX_EVENT_TIME_MS = 7_258_118_400_000  # 2200-01-01T00:00:00Z

_SCALE = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}  # ms = value * mul / div
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
_UNIT_NOUN = {"s": "second", "ms": "millisecond", "us": "microsecond", "ns": "nanosecond"}
_MS_LIMIT = 9_200_000_000_000_000  # |epoch ms| below this fits int64 with room (year 291,000)

Clock = Callable[[], int]
"""A wall clock: a function returning the time now as epoch milliseconds."""


def wall_clock_ms() -> int:
    """The machine's wall clock as epoch milliseconds (the future guard's default clock)."""
    return time.time_ns() // 1_000_000


def clock_now(clock: Clock | None) -> int:
    """``clock()``, or the machine's wall clock (:func:`wall_clock_ms`, read here at each call) for None."""
    return (clock or wall_clock_ms)()


@dataclass(frozen=True)
class FixedClock:
    """A clock that always reads ``ms``: tests, and the one reading every task of a Spark backfill shares.

    Example:
        >>> FixedClock(1_000)()
        1000
    """

    ms: int

    def __call__(self) -> int:
        return self.ms


def parse_times(
    values: np.ndarray,
    unit: str = "ms",
    *,
    converted: np.ndarray | bool | None = None,
    now_ms: int | None = None,
    max_future_skew_ms: int | None = None,
) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """Event times as int64 epoch milliseconds, from 1900 (inclusive) to 2200 (exclusive).

    Numbers and numeric strings are read in ``unit`` (``s``, ``ms``, ``us`` or ``ns``); ISO-8601
    strings, dates and datetimes carry their own unit, and so do the rows ``converted`` marks
    (True: every row) as epoch ms already converted from date/time values. With ``now_ms`` and
    ``max_future_skew_ms``, a time more than the skew ahead of ``now_ms`` is refused too (the
    future guard: one such event would move the watermark past every real event). Returns
    ``(ms, ok, reasons)``; ``reasons[i]`` says why value ``i`` is not usable.

    Example:
        >>> ms, ok, why = parse_times(np.array([1000, "9999-12-31"], dtype=object))
        >>> ok.tolist(), why[1]
        ([True, False], "'9999-12-31' is after 2200-01-01T00:00:00.000Z, the latest accepted event time")
        >>> parse_times(np.array([807256800, 807256800.5]), "s")[0].tolist()
        [807256800000, 807256800500]
        >>> ms, ok, why = parse_times(np.array([5_000_000, 90_000_000]), now_ms=0, max_future_skew_ms=86_400_000)
        >>> ok.tolist(), why[1][:80]
        ([True, False], 'event time in the future: 90000000 (1970-01-02T01:00:00.000Z) is more than 1 day')
    """
    if unit not in _SCALE:
        raise ValueError(f"unknown time unit {unit!r}; expected one of {', '.join(TIME_UNITS)}")
    if converted is True or unit == "ms":
        out, ok, reasons = _parse_times_unbounded(values, "ms")
    else:
        out, ok, reasons = _parse_times_unbounded(values, unit)
        if converted is not None and converted is not False and np.any(converted):
            idx = np.flatnonzero(converted)
            ms2, ok2, why2 = _parse_times_unbounded(values[idx], "ms")
            out[idx], ok[idx] = ms2, ok2
            for j, row in enumerate(idx.tolist()):
                reasons[row] = why2[j]
    bad = ok & ((out < MIN_EVENT_TIME_MS) | (out >= MAX_EVENT_TIME_MS))
    for i in np.flatnonzero(bad):
        v = _short(values[i].item() if isinstance(values[i], np.generic) else values[i])
        if out[i] < MIN_EVENT_TIME_MS:
            reasons[i] = f"{v} is before {format_time(MIN_EVENT_TIME_MS)}, the earliest accepted event time"
        else:
            reasons[i] = f"{v} is after {format_time(MAX_EVENT_TIME_MS)}, the latest accepted event time"
    if bad.any():
        ok = ok & ~bad
    if now_ms is not None and max_future_skew_ms is not None:
        ok, reasons = future_guard(values, out, ok, reasons, now_ms, max_future_skew_ms)
    return out, ok, reasons


def future_guard(values: np.ndarray, ms: np.ndarray, ok: np.ndarray, reasons: list[str | None], now_ms: int,
                 skew_ms: int) -> tuple[np.ndarray, list[str | None]]:
    """``(ok, reasons)`` with the times more than ``skew_ms`` ahead of ``now_ms`` refused.

    The arguments are not changed: when a time is refused, new ``ok`` and ``reasons`` are returned,
    so times parsed once (:func:`parse_times` without a clock) can be judged by each rule's clock.

    Example:
        >>> ms, ok, why = parse_times(np.array([5_000_000, 90_000_000]))
        >>> ok2, why2 = future_guard(np.array([5_000_000, 90_000_000]), ms, ok, why, 0, 86_400_000)
        >>> ok.tolist(), ok2.tolist(), why2[1][:25]
        ([True, True], [True, False], 'event time in the future:')
    """
    ahead = ok & (ms > now_ms + skew_ms)
    if not ahead.any():
        return ok, reasons
    reasons = list(reasons)
    for a in np.flatnonzero(ahead).tolist():
        reasons[a] = _future_reason(values[a], int(ms[a]), now_ms, skew_ms)
    return ok & ~ahead, reasons


def _future_reason(value: Any, ms: int, now_ms: int, skew_ms: int) -> str:
    """Why an event time ahead of the clock is refused, and what to do about it."""
    v = _short(value.item() if isinstance(value, np.generic) else value)
    return (f"event time in the future: {v} ({format_time(ms)}) is more than {format_duration(skew_ms)} ahead of the clock "
            f"({format_time(now_ms)}): check the event's time and the rule's time_unit; for data dated in the "
            "future (a synthetic replay) raise the rule's max_future_skew or set it to none")


def event_times(
    batch: EventBatch,
    field: str,
    unit: str = "ms",
    max_future_skew_ms: int | None = DEFAULT_MAX_FUTURE_SKEW_MS,
    clock: Clock | None = None,
) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """A rule's event times in one batch, judged as every operator judges them (:func:`parse_times`).

    ``clock`` (default :func:`wall_clock_ms`) is read once per batch for the future guard;
    ``max_future_skew_ms=None`` turns the guard off.

    Example:
        >>> b = batch_from_records([{"ts": 1_000}, {"ts": "2199-12-31"}])
        >>> ms, ok, why = event_times(b, "ts", clock=FixedClock(0))
        >>> ok.tolist(), why[1][:60]
        ([True, False], "event time in the future: '2199-12-31' (2199-12-31T00:00:00.")
    """
    now = None
    if max_future_skew_ms is not None:
        now = clock_now(clock)
    return parse_times(batch.column(field), unit, converted=batch.epoch_ms.get(field), now_ms=now,
                       max_future_skew_ms=max_future_skew_ms)


# a file's dictionary (StringDictionary) -> {unit: (ms, ok, reasons) per code}, while the dictionary lives
_CODE_TIMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def batch_times(batch: EventBatch, field: str, unit: str = "ms") -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """:func:`parse_times` of a batch's field (without the future guard), each distinct text once.

    A column the flat JSON scanner dictionary-encoded (:meth:`EventBatch.encoded`) is parsed per
    distinct string and gathered by code, and with a file-wide dictionary
    (:meth:`EventBatch.dictionary`) each string is parsed once per file, not once per batch: a
    batch of daily bars holds a few dates, each many times, and the next batch most of the same
    ones. The values, validity and reasons are those :func:`parse_times` gives the column (it
    reads each value on its own).

    Example:
        >>> b = batch_from_records([{"ts": "2017-01-02"}, {"ts": None}])
        >>> ms, ok, why = batch_times(b, "ts")
        >>> ms[0].item(), ok.tolist(), why[1]
        (1483315200000, [True, False], 'missing (null)')
    """
    conv = batch.epoch_ms.get(field)
    enc = batch.encoded(field) if conv is None or conv is False else None
    if enc is None:
        return parse_times(batch.column(field), unit, converted=conv)
    codes, uniq = enc
    d = batch.dictionary(field)
    if d is None:
        ms_u, ok_u, why_u = parse_times(uniq, unit)
    else:
        by_unit = _CODE_TIMES.setdefault(d, {})
        have = by_unit.get(unit)
        done = 0 if have is None else len(have[0])
        if done < len(uniq):  # (the dictionary only grows: a code keeps its string)
            new = parse_times(uniq[done:], unit)
            have = new if have is None else (np.concatenate((have[0], new[0])), np.concatenate((have[1], new[1])),
                                             have[2] + new[2])
            by_unit[unit] = have
        ms_u, ok_u, why_u = have
    null = codes < 0
    if null.any():  # NULL (code -1) as parse_times reads None
        ms_n, ok_n, why_n = parse_times(np.array([None], dtype=object), unit)
        at = np.where(null, len(ms_u), codes)
        ms_u, ok_u, why_u = np.append(ms_u, ms_n), np.append(ok_u, ok_n), list(why_u) + why_n
    else:
        at = codes
    ms, ok = ms_u[at], ok_u[at]
    if ok.all():
        return ms, ok, [None] * len(at)
    return ms, ok, [why_u[c] for c in at.tolist()]


def _scale_ints(raw: np.ndarray, unit: str) -> tuple[np.ndarray, np.ndarray]:
    """Integers in ``unit`` as epoch ms (division rounds towards the past) and which fit."""
    mul, div = _SCALE[unit]
    if raw.dtype.kind == "u":
        fits = raw < np.uint64(_MS_LIMIT // mul)
        raw = np.where(fits, raw, 0).astype(np.int64)
    else:
        raw = raw.astype(np.int64, copy=False)
        fits = np.abs(raw) < _MS_LIMIT // mul if mul > 1 else raw > np.iinfo(np.int64).min
    if mul > 1:
        return np.where(fits, raw, 0) * mul, fits
    return (raw // div if div > 1 else raw.copy()), fits


def _scale_floats(raw: np.ndarray, unit: str) -> tuple[np.ndarray, np.ndarray]:
    """Floats in ``unit`` as epoch ms and which are finite and in range.

    Milliseconds are truncated; other units are rounded to the microsecond first (807256800.123 s
    is 807256800123 ms, not ...122 through binary rounding), then floored.
    """
    mul, div = _SCALE[unit]
    with np.errstate(over="ignore", invalid="ignore"):
        x = raw if unit == "ms" else raw * mul / div
        fits = np.isfinite(x) & (np.abs(x) < _MS_LIMIT)
        y = np.where(fits, x, 0.0)
        if unit != "ms":
            y = np.floor(np.round(y, 3))
    return y.astype(np.int64), fits


def _int_ms(v: int, unit: str) -> int | None:
    mul, div = _SCALE[unit]
    ms = v * mul // div
    return ms if -_MS_LIMIT < ms < _MS_LIMIT else None


def _parse_times_unbounded(values: np.ndarray, unit: str = "ms") -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """Event times as int64 epoch milliseconds, numbers and numeric strings read in ``unit``.

    Accepts numbers and ISO-8601 strings (a date, or a date and time with an optional offset;
    no offset means UTC). Returns ``(ms, ok, reasons)`` where ``reasons[i]`` explains a value
    that is not a time.

    Example:
        >>> ms, ok, _ = parse_times(np.array([1000, "1970-01-01T00:00:02Z", "x"], dtype=object))
        >>> ms[:2].tolist(), ok.tolist()
        ([1000, 2000], [True, True, False])
    """
    n = len(values)
    out = np.zeros(n, dtype=np.int64)
    ok = np.zeros(n, dtype=bool)
    reasons: list[str | None] = [None] * n
    words, noun = _UNIT_WORDS[unit], _UNIT_NOUN[unit]
    if values.dtype.kind in "iu":
        out, ok = _scale_ints(values, unit)
        for i in np.flatnonzero(~ok):
            reasons[i] = f"{values[i].item()!r} is out of range for epoch {words}"
        return out, ok, reasons
    if values.dtype.kind == "f":
        out, ok = _scale_floats(values, unit)
        for i in np.flatnonzero(~ok):
            reasons[i] = f"{values[i].item()!r} is not a finite epoch-{noun} time"
        return out, ok, reasons
    if values.dtype.kind == "M":
        ms_obj = datetime64_to_ms(values)
        ok[:] = ms_obj != None  # noqa: E711 (element-wise)
        out[ok] = ms_obj[ok].astype(np.int64)
        for i in np.flatnonzero(~ok):
            reasons[i] = "missing (NaT)"
        return out, ok, reasons
    if n:
        import pandas as pd

        if pd.api.types.infer_dtype(values, skipna=False) == "string":
            # every value text (ISO dates, as a CSV or JSON source gives them): parsed in one call,
            # the same call the loop below makes for its strings; when one does not parse, the loop
            # below gives each its reason
            # each distinct text once (a batch of daily bars holds a few dates, each many times)
            codes, uniques = pd.factorize(values)
            days = _plain_dates(uniques)
            if days is not None:
                return days[codes], np.ones(n, dtype=bool), reasons
            parsed = _iso_times(uniques)
            if not parsed.isna().any():
                ms_all = parsed.to_numpy(dtype="datetime64[ms]").astype(np.int64)[codes]
                return ms_all, np.ones(n, dtype=bool), reasons
    str_idx: list[int] = []
    mul, div = _SCALE[unit]
    for i, v in enumerate(values.tolist()):
        if isinstance(v, bool) or v is None:
            reasons[i] = "missing (null)" if v is None else f"{v!r} is a boolean, not a time"
        elif isinstance(v, int):
            ms_i = v if mul == div else v * mul // div
            if -_MS_LIMIT < ms_i < _MS_LIMIT:
                out[i] = ms_i
                ok[i] = True
            else:
                reasons[i] = f"{v!r} is out of range for epoch {words}"
        elif isinstance(v, float):
            x = v if mul == div else v * mul / div
            if math.isfinite(x) and abs(x) < _MS_LIMIT:
                out[i] = int(x) if mul == div else math.floor(np.round(x, 3))  # as _scale_floats
                ok[i] = True
            else:
                reasons[i] = f"{v!r} is not a finite epoch-{noun} time"
        elif isinstance(v, str):
            str_idx.append(i)
        elif isinstance(v, (_dt.datetime, _dt.date, np.datetime64)):
            ms_v = _datetime_ms(v)
            if ms_v is None:
                reasons[i] = f"{_short(v)} is not a time (NaT)"
            else:
                out[i] = ms_v
                ok[i] = True
        else:
            reasons[i] = f"{_short(v)} is a {type(v).__name__}, not a time"
    if str_idx:
        import pandas as pd

        strs = [values[i] for i in str_idx]
        parsed = _iso_times(strs)
        na = parsed.isna().to_numpy()
        ms = parsed.to_numpy(dtype="datetime64[ms]", na_value=np.datetime64("NaT")).astype(np.int64)
        for j, i in enumerate(str_idx):
            if na[j]:
                s = strs[j]
                if _integer_text(s):
                    got = _int_ms(int(s), unit)
                    if got is not None:
                        out[i] = got
                        ok[i] = True
                    else:
                        reasons[i] = f"{_short(s)} is out of range for epoch {words}"
                else:
                    reasons[i] = f"{_short(s)} is neither epoch {words} nor an ISO-8601 time"
            else:
                out[i] = ms[j]
                ok[i] = True
    return out, ok, reasons


_DIGIT_AT = np.array([0, 1, 2, 3, 5, 6, 8, 9])
_DAY_MS = 86_400_000
_DATES_FROM = np.datetime64("1900-01-01")  # MIN_EVENT_TIME_MS
_DATES_TO = np.datetime64("2200-01-01")  # MAX_EVENT_TIME_MS


def _plain_dates(texts: np.ndarray) -> np.ndarray | None:
    """Epoch ms of texts that are all plain dates, ``YYYY-MM-DD`` (UTC midnight), from 1900 to 2199;
    None when one is anything else (then pandas' ISO-8601 parse and the per-value reasons decide).

    What pandas' parse gives them, without its fixed cost per call (about a millisecond, paid per
    batch and rule-file time field on daily bars). numpy reads the words ``today`` and ``now`` as
    dates too, so each text is first checked to be digits and dashes in that shape.

    Example:
        >>> _plain_dates(np.array(["2017-01-02", "1970-01-01"], dtype=object)).tolist()
        [1483315200000, 0]
        >>> _plain_dates(np.array(["2017-02-30"], dtype=object)) is None  # no such day
        True
    """
    if not len(texts) or not all(type(t) is str and len(t) == 10 for t in texts.tolist()):
        return None
    chars = texts.astype("U10").view(np.uint32).reshape(len(texts), 10)
    digits = chars[:, _DIGIT_AT]
    if not (((digits >= 48) & (digits <= 57)).all() and (chars[:, 4] == 45).all() and (chars[:, 7] == 45).all()):
        return None
    try:
        days = texts.astype("datetime64[D]")
    except ValueError:  # a month or day out of range: pandas' parse says so
        return None
    if not ((days >= _DATES_FROM) & (days < _DATES_TO)).all():
        return None
    return days.astype(np.int64) * _DAY_MS


def _integer_text(s: str) -> bool:
    """Whether ``s`` is an integer as text: spaces around, an optional minus, decimal digits (what
    ``int()`` reads; ``str.isdigit`` also takes superscripts such as "²", which ``int()`` refuses)."""
    t = s.strip()
    return (t[1:] if t[:1] == "-" else t).isdecimal()


def _iso_times(texts: Any) -> Any:
    """ISO-8601 texts as a pandas Series of UTC times, NaT where one does not parse."""
    import pandas as pd

    ser = pd.Series(texts, dtype=object)
    # pandas reads the words "now" and "today" as its wall clock: as event times they would be
    # the moment of parsing (another time on every run), so they do not parse. An integer as
    # text is a number in the rule's unit (docs/semantics.md), though ISO-8601 reads "2000" as a
    # year and "20130208" as a date: left NaT here, the caller reads it as a number
    odd = ser.isin(("now", "today")) | ser.map(_integer_text).astype(bool)
    return pd.to_datetime(ser.mask(odd), format="ISO8601", utc=True, errors="coerce")


# where a median read in the rule's unit says "wrong unit", and where another unit's reading is believable
_YEAR_1971 = 31_536_000_000
_YEAR_1990 = 631_152_000_000
_YEAR_2100 = 4_102_444_800_000


@dataclass(frozen=True)
class UnitHint:
    """Numeric event times that look like another unit than the one a rule reads them in."""

    field: str
    unit: str  # the rule's time_unit
    looks_like: str  # the unit that puts them between 1990 and 2100
    median: float  # of the numeric values checked

    def message(self, rules: Iterable[str]) -> str:
        """The warning, naming the rules that read the field in the wrong unit.

        Example:
            >>> print(UnitHint("time", "ms", "s", 807256800.0).message(["per_hour"]))
            warning: rule 'per_hour' reads the numeric event times in 'time' as epoch milliseconds, but they look like epoch seconds: their median 807,256,800 read as milliseconds is 1970-01-10T08:14:16.800Z, read as seconds 1995-08-01T06:00:00.000Z. If they are seconds, set 'time_unit: s' on the rule (cep run: --time-unit s); docs/semantics.md, "Event time"
        """
        names = list(rules)
        who = (f"rule {names[0]!r}" if len(names) == 1
               else "rules " + ", ".join(repr(n) for n in names))
        read = _hint_ms(self.median, self.unit)
        other = _hint_ms(self.median, self.looks_like)
        as_read = format_time(int(read)) if MIN_EVENT_TIME_MS <= read < MAX_EVENT_TIME_MS else "out of range (before 1900 or after 2200)"
        words, other_words = _UNIT_WORDS[self.unit], _UNIT_WORDS[self.looks_like]
        verb = "reads" if len(names) == 1 else "read"
        return (f"warning: {who} {verb} the numeric event times in {self.field!r} as epoch {words}, but they "
                f"look like epoch {other_words}: their median {self.median:,.0f} read as {words} is {as_read}, "
                f"read as {other_words} {format_time(int(other))}. If they are {other_words}, set "
                f"'time_unit: {self.looks_like}' on the rule (cep run: --time-unit {self.looks_like}); "
                'docs/semantics.md, "Event time"')


def _hint_ms(value: float, unit: str) -> float:
    mul, div = _SCALE[unit]
    return value * mul / div


def unit_hint(batch: EventBatch, field: str, unit: str = "ms", sample: int = 10_000) -> UnitHint | None:
    """Whether a batch's numeric event times look like another unit than ``unit`` (one look per rule).

    The median of the first ``sample`` numeric values (numbers and numeric strings; converted
    date/time rows and ISO strings are left out) is wrong when, read in ``unit``, it falls in 1970
    (seconds read as milliseconds) or outside 1900-2200 (microseconds or nanoseconds read as
    milliseconds), and another unit reads it between 1990 and 2100.

    Example:
        >>> unit_hint(batch_from_records([{"time": 807256800}, {"time": 807256801}]), "time")
        UnitHint(field='time', unit='ms', looks_like='s', median=807256800.0)
        >>> unit_hint(batch_from_records([{"time": 807256800000}]), "time") is None
        True
    """
    conv = batch.epoch_ms.get(field)
    if conv is True:
        return None
    col = batch.column(field)[:sample]
    if conv is not None and conv is not False:
        col = col[~np.asarray(conv)[:sample]]
    if col.dtype.kind in "iuf":
        nums = col.astype(np.float64)
    else:
        picked = []
        for v in col.tolist():
            if isinstance(v, bool):
                continue
            if isinstance(v, (int, float)):
                picked.append(float(v))
            elif isinstance(v, str) and _integer_text(v):
                picked.append(float(v))
        nums = np.asarray(picked, dtype=np.float64)
    nums = nums[np.isfinite(nums)]
    if not len(nums):
        return None
    median = float(np.sort(nums)[(len(nums) - 1) // 2])  # the lower median: one of the values
    read = _hint_ms(median, unit)
    if not (0 <= read < _YEAR_1971 or read < MIN_EVENT_TIME_MS or read >= MAX_EVENT_TIME_MS):
        return None
    for other in TIME_UNITS:
        if other != unit and _YEAR_1990 <= _hint_ms(median, other) < _YEAR_2100:
            return UnitHint(field, unit, other, median)
    return None


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_MS = _dt.timedelta(milliseconds=1)


def _datetime_ms(v: Any) -> int | None:
    """Epoch ms of a datetime (naive read as UTC), a date (its midnight UTC) or a datetime64."""
    if isinstance(v, np.datetime64):
        got = datetime64_to_ms(np.asarray([v]))[0]
        return None if got is None else int(got)
    if isinstance(v, _dt.datetime):
        if v != v:  # pandas NaT is a datetime that equals nothing
            return None
        return ((v if v.tzinfo is not None else v.replace(tzinfo=_dt.timezone.utc)) - _EPOCH) // _MS
    return (v - _EPOCH.date()).days * 86_400_000


def _short_text(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def format_duration(ms: int) -> str:
    """A duration in the largest whole unit that states it exactly, for messages.

    Example:
        >>> format_duration(86_400_000), format_duration(7_200_000), format_duration(90_000), format_duration(1_500)
        ('1 day', '2 hours', '90 seconds', '1500 ms')
    """
    for size, word in ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1_000, "second")):
        if ms and ms % size == 0:
            n = ms // size
            return f"{n} {word}" + ("" if n == 1 else "s")
    return f"{ms} ms"


def format_time(ms: int) -> str:
    """ISO-8601 UTC text of epoch milliseconds, for messages.

    Example:
        >>> format_time(0)
        '1970-01-01T00:00:00.000Z'
    """
    import datetime as dt

    try:
        t = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def iter_jsonl_text(text: str) -> Iterable[dict]:
    """Events from JSON lines held in a string (tests and examples)."""
    for line in io.StringIO(strip_bom(text)):
        line = line.strip()
        if line:
            yield loads_exact(line.encode("utf-8"))
