"""Events in, as columnar batches: decoding JSON lines, CSV, Parquet, pandas and Arrow; event time."""

from __future__ import annotations

import csv
import datetime as _dt
import io
import math
import os
import re
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import orjson

from patterns.errors import CepError

__all__ = [
    "EventBatch",
    "BadLine",
    "batch_from_records",
    "batch_from_pandas",
    "batch_from_arrow",
    "to_batch",
    "read_events",
    "parse_times",
    "format_time",
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

    def take(self, idx: np.ndarray) -> EventBatch:
        """The rows at ``idx``, keeping their line numbers (bad lines stay with this batch)."""
        lines = self.lines[idx] if self.lines is not None else np.asarray(idx, dtype=np.int64) + 1
        return EventBatch({k: c[idx] for k, c in self.columns.items()}, len(idx), lines, self.source)


def batch_from_records(
    records: list[dict[str, Any]], lines: list[int] | None = None, source: str | None = None
) -> EventBatch:
    """Columns from a list of dicts; a field missing from a record is NULL there.

    Example:
        >>> b = batch_from_records([{"a": 1}, {"a": 2, "b": "x"}])
        >>> b.n, list(b.column("b"))
        (2, [None, 'x'])
    """
    names: dict[str, None] = {}
    for r in records:
        for k in r:
            names.setdefault(k, None)
    cols: dict[str, np.ndarray] = {}
    n = len(records)
    for k in names:
        arr = np.empty(n, dtype=object)
        arr[:] = [r.get(k) for r in records]
        cols[k] = _narrow(arr)
    return EventBatch(cols, n, np.asarray(lines, dtype=np.int64) if lines is not None else None, source)


def _narrow(arr: np.ndarray) -> np.ndarray:
    """A numeric or boolean array where every value has that one type (no NULL), else as is."""
    import pandas as pd

    if not len(arr):
        return arr
    kind = pd.api.types.infer_dtype(arr, skipna=False)
    try:
        if kind == "integer":
            return arr.astype(np.int64)
        if kind == "floating":
            return arr.astype(np.float64)
        if kind == "boolean":
            return arr.astype(bool)
    except (OverflowError, ValueError, TypeError):
        pass
    return arr


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
        elif arr.dtype == object:
            arr = arr.copy()
            mask = s.isna().to_numpy()
            arr[mask] = None
        cols[str(name)] = arr
    return EventBatch(cols, len(df), None, source)


def batch_from_arrow(table: Any, source: str | None = None) -> EventBatch:
    """Columns from a pyarrow Table or RecordBatch (nulls read as NULL; timestamps as epoch ms)."""
    import pyarrow as pa

    cols: dict[str, np.ndarray] = {}
    for name, col in zip(table.schema.names, table.columns):
        t = col.type
        if pa.types.is_timestamp(t) or pa.types.is_date(t):
            cols[name] = _arrow_time_ms(col)
            continue
        if col.null_count or not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            arr = np.asarray(col.to_pylist(), dtype=object) if col.null_count or not pa.types.is_boolean(col.type) else col.to_numpy(zero_copy_only=False)
            if arr.ndim != 1:  # lists/structs: keep Python objects
                tmp = np.empty(len(col), dtype=object)
                tmp[:] = col.to_pylist()
                arr = tmp
        else:
            arr = col.to_numpy(zero_copy_only=False) if hasattr(col, "to_numpy") else np.asarray(col)
        cols[name] = arr
    return EventBatch(cols, table.num_rows, None, source)


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


def _batched(parsed: Iterable[tuple[int, dict] | BadLine], batch_size: int, src: str) -> Iterator[EventBatch]:
    """Group decoded lines into batches; each batch carries the bad lines met while filling it."""
    records: list[dict] = []
    lines: list[int] = []
    bad: list[BadLine] = []
    for item in parsed:
        if item is _FLUSH:
            if records or bad:
                b = batch_from_records(records, lines, src)
                b.bad = bad
                yield b
                records, lines, bad = [], [], []
            continue
        if isinstance(item, BadLine):
            bad.append(item)
            continue
        lines.append(item[0])
        records.append(item[1])
        if len(records) >= batch_size:
            b = batch_from_records(records, lines, src)
            b.bad = bad
            yield b
            records, lines, bad = [], [], []
    if records or bad:
        b = batch_from_records(records, lines, src)
        b.bad = bad
        yield b


_BOM = b"\xef\xbb\xbf"
_FLUSH = object()  # from a live source: nothing more is ready now, so emit what was read


def decode_json_line(raw: bytes, lineno: int, src: str | None, mark_unterminated: bool = False) -> dict | BadLine | None:
    """One line of a JSON lines file: the event, a BadLine saying why not, or None when blank.

    With ``mark_unterminated``, a malformed line without its newline is reported as an
    unterminated last line (a file being written, read while it grows).
    """
    if raw.startswith(_BOM):  # a UTF-8 byte-order mark (editors on Windows write one)
        raw = raw[3:]
    stripped = raw.strip()
    if not stripped:
        return None
    try:
        obj = orjson.loads(stripped)
    except orjson.JSONDecodeError as e:
        text = raw.decode("utf-8", "replace").rstrip("\n")
        what = "malformed JSON (unterminated last line)" if mark_unterminated and not raw.endswith(b"\n") else "malformed JSON"
        return BadLine(lineno, f"{what}: {e}", src, text)
    if not isinstance(obj, dict):
        return BadLine(lineno, f"expected a JSON object per line, found {type(obj).__name__}", src, None)
    return obj


def _jsonl_batches(path: Path, batch_size: int, start_line: int = 0) -> Iterator[EventBatch]:
    src = _source_name(path)

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
                yield lineno, got

    return _batched(parsed(), batch_size, src)


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
                yield raw.decode("utf-8", "replace").removeprefix("\ufeff") if lineno == 1 else raw.decode("utf-8", "replace")

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
    import pyarrow.parquet as pq

    import pyarrow as pa

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
            if lineno == 1 and raw.startswith(_BOM):
                raw = raw[3:]
            if not raw.strip():
                continue
            ev = parse_access_log_line(raw)
            if isinstance(ev, str):
                yield BadLine(lineno, ev, src, raw.decode("utf-8", "replace").rstrip("\n"))
            else:
                yield lineno, ev

    return _batched(parsed(), batch_size, src)


def read_events(path: str | Path, batch_size: int = 8192, fmt: str | None = None) -> Iterator[EventBatch]:
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


def parse_times(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """Event times as int64 epoch milliseconds, from 1900 (inclusive) to 2200 (exclusive).

    Example:
        >>> ms, ok, why = parse_times(np.array([1000, "9999-12-31"], dtype=object))
        >>> ok.tolist(), why[1]
        ([True, False], "'9999-12-31' is after 2200-01-01T00:00:00.000Z, the latest accepted event time")
    """
    out, ok, reasons = _parse_times_unbounded(values)
    bad = ok & ((out < MIN_EVENT_TIME_MS) | (out >= MAX_EVENT_TIME_MS))
    for i in np.flatnonzero(bad):
        v = _short(values[i].item() if isinstance(values[i], np.generic) else values[i])
        if out[i] < MIN_EVENT_TIME_MS:
            reasons[i] = f"{v} is before {format_time(MIN_EVENT_TIME_MS)}, the earliest accepted event time"
        else:
            reasons[i] = f"{v} is after {format_time(MAX_EVENT_TIME_MS)}, the latest accepted event time"
    if bad.any():
        ok = ok & ~bad
    return out, ok, reasons


def _parse_times_unbounded(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """Event times as int64 epoch milliseconds.

    Accepts numbers (epoch milliseconds) and ISO-8601 strings (a date, or a date and time with an
    optional offset; no offset means UTC). Returns ``(ms, ok, reasons)`` where ``reasons[i]``
    explains a value that is not a time.

    Example:
        >>> ms, ok, _ = parse_times(np.array([1000, "1970-01-01T00:00:02Z", "x"], dtype=object))
        >>> ms[:2].tolist(), ok.tolist()
        ([1000, 2000], [True, True, False])
    """
    n = len(values)
    out = np.zeros(n, dtype=np.int64)
    ok = np.zeros(n, dtype=bool)
    reasons: list[str | None] = [None] * n
    if values.dtype.kind in "iu":
        out[:] = values
        ok[:] = True
        return out, ok, reasons
    if values.dtype.kind == "f":
        fin = np.isfinite(values) & (np.abs(values) < 9.2e15)
        out[fin] = values[fin].astype(np.int64)
        ok[:] = fin
        for i in np.flatnonzero(~fin):
            reasons[i] = f"{values[i]!r} is not a finite epoch-millisecond time"
        return out, ok, reasons
    if values.dtype.kind == "M":
        ms_obj = datetime64_to_ms(values)
        ok[:] = ms_obj != None  # noqa: E711 (element-wise)
        out[ok] = ms_obj[ok].astype(np.int64)
        for i in np.flatnonzero(~ok):
            reasons[i] = "missing (NaT)"
        return out, ok, reasons
    str_idx: list[int] = []
    for i, v in enumerate(values.tolist()):
        if isinstance(v, bool) or v is None:
            reasons[i] = "missing (null)" if v is None else f"{v!r} is a boolean, not a time"
        elif isinstance(v, int):
            if -(2**63) < v < 2**63:
                out[i] = v
                ok[i] = True
            else:
                reasons[i] = f"{v!r} is out of range for epoch milliseconds"
        elif isinstance(v, float):
            if math.isfinite(v) and abs(v) < 9.2e15:
                out[i] = int(v)
                ok[i] = True
            else:
                reasons[i] = f"{v!r} is not a finite epoch-millisecond time"
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
        parsed = pd.to_datetime(pd.Series(strs, dtype=object), format="ISO8601", utc=True, errors="coerce")
        na = parsed.isna().to_numpy()
        ms = parsed.to_numpy(dtype="datetime64[ms]", na_value=np.datetime64("NaT")).astype(np.int64)
        for j, i in enumerate(str_idx):
            if na[j]:
                s = strs[j]
                if s.strip().lstrip("-").isdigit():
                    out[i] = int(s)
                    ok[i] = True
                else:
                    reasons[i] = f"{_short(s)} is neither epoch milliseconds nor an ISO-8601 time"
            else:
                out[i] = ms[j]
                ok[i] = True
    return out, ok, reasons


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
    for line in io.StringIO(text):
        line = line.strip()
        if line:
            yield orjson.loads(line)
