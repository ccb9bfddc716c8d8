"""JSON lines decoded a block of lines at a time by Arrow's columnar reader, line by line where it must.

Arrow's JSON reader (C++) parses a block of lines into columns at once; this module turns its
columns into exactly the values and dtypes the per-line decoder gives
(:func:`cep.events.decode_json_line` then :func:`cep.events.batch_from_records`), and hands a block
to the per-line decoder whenever that cannot be guaranteed: a line Arrow refuses (malformed JSON, a
line that is not an object, a key given twice, a column whose types are mixed), blank lines, a byte
order mark, nested objects or arrays, NaN or Infinity (which orjson refuses), invalid UTF-8. So a bad
line is reported with its file, line number and reason exactly as before, and batches hold the same
events: ``batch_size`` good events each, bad lines with the batch being filled when they were met.

Numbers: Arrow reads a column that mixes integers and decimals as doubles, where the per-line
decoder keeps the integers as ints (and integers beyond int64 too, of any size: see
:mod:`cep.json_exact`); rows of a double column with a whole value are therefore decoded again from
their line, as the per-line decoder decodes it. Strings that look like times
(Arrow infers timestamps) are read as strings: such a column is named in the file's schema hints
and read as text from then on.
"""

from __future__ import annotations

import io
import os
from typing import Any, BinaryIO

import numpy as np
import orjson

from cep.json_exact import holds_rounded, loads_exact, loads_fast
from cep.json_flat import StringDictionary, decode_flat, newlines

__all__ = ["DECODER_ENV", "jsonl_decoder", "LineBlocks", "BlockHints", "decode_block", "split_lines", "narrow_column"]

DECODER_ENV = "CEP_JSONL_DECODER"
"""Environment variable choosing the JSON-lines decoder of files: ``blocks`` (default) or ``lines``."""

_READ_BYTES = 1 << 22  # bytes read from the file at a time
RETRY_EVERY = 8
"""A file whose blocks keep going per line (nested fields in every line) tries Arrow again every this many blocks."""
_BOM = b"\xef\xbb\xbf"


def jsonl_decoder() -> str:
    """The JSON-lines decoder in use: ``blocks`` (Arrow, the default) or ``lines`` (orjson per line).

    Example:
        >>> jsonl_decoder() in ("blocks", "lines")
        True
    """
    got = os.environ.get(DECODER_ENV, "blocks").strip().lower() or "blocks"
    if got not in ("blocks", "lines"):
        raise ValueError(f"{DECODER_ENV}={got!r}: expected 'blocks' (Arrow, the default) or 'lines' (one line at a time)")
    return got


class LineBlocks:
    """Whole lines of a binary file, taken ``n`` at a time as one block of bytes."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.buf = b""
        self.nl = np.zeros(0, dtype=np.int64)  # positions of the newlines in buf at or after pos
        self.k = 0  # index into nl of the first newline at or after pos
        self.pos = 0
        self.eof = False
        self.lineno = 0  # lines taken so far

    def _fill(self, n: int) -> None:
        while not self.eof and len(self.nl) - self.k < n:
            chunk = self.f.read(_READ_BYTES)
            if not chunk:
                self.eof = True
                break
            rest = self.buf[self.pos:]
            self.buf = rest + chunk
            self.pos = 0
            arr = np.frombuffer(self.buf, dtype=np.uint8)
            self.nl = newlines(arr)
            self.k = 0

    def take(self, n: int) -> tuple[int, bytes, np.ndarray]:
        """Up to ``n`` lines: (number of the first, their bytes, where each line ends in them)."""
        self._fill(n)
        first = self.lineno + 1
        have = len(self.nl) - self.k
        if have >= n:
            end = int(self.nl[self.k + n - 1]) + 1
            ends = self.nl[self.k:self.k + n] + 1 - self.pos
            self.k += n
        else:  # end of file: every line left, the last one perhaps without its newline
            end = len(self.buf)
            ends = self.nl[self.k:] + 1 - self.pos
            self.k = len(self.nl)
            if end > self.pos and (not len(ends) or self.pos + int(ends[-1]) < end):
                ends = np.append(ends, end - self.pos)
        block = self.buf[self.pos:end]
        self.pos = end
        self.lineno += len(ends)
        return first, block, ends


def split_lines(block: bytes, ends: np.ndarray) -> list[bytes]:
    starts = np.concatenate(([0], ends[:-1])).tolist()
    return [block[s:e] for s, e in zip(starts, ends.tolist())]


class BlockHints:
    """What earlier blocks of a file taught: the fields to read as text (Arrow would make times of them)."""

    def __init__(self) -> None:
        self.strings: dict[str, None] = {}


def _read_table(block: bytes, hints: BlockHints) -> Any:
    import pyarrow as pa
    import pyarrow.json as pj

    ro = pj.ReadOptions(use_threads=False, block_size=max(len(block) + 1, 1 << 16))
    po = None
    if hints.strings:
        po = pj.ParseOptions(explicit_schema=pa.schema([(k, pa.string()) for k in hints.strings]),
                             unexpected_field_behavior="infer")
    return pj.read_json(io.BytesIO(block), read_options=ro, parse_options=po)


def decode_block(block: bytes, ends: np.ndarray, hints: BlockHints,
                 codes: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
                 flat: bool = False, dicts: dict[str, StringDictionary] | None = None) -> dict[str, np.ndarray] | None:
    """The columns of a block of whole lines (``ends``: where each line ends in it), as the per-line
    decoder builds them, or None when the per-line decoder must decide. ``codes`` receives the
    string columns the flat scanner dictionary-encoded (see :func:`cep.json_flat.decode_flat`,
    which keeps ``dicts`` across a file's blocks), which reads the block first when ``flat``
    (see :func:`cep.json_flat.flat_for`)."""
    import pyarrow as pa

    got = decode_flat(block, ends, codes, dicts) if flat else None  # a line opening with a byte-order mark is refused there
    if got is not None:  # every line flat and alike: the compiled scanner (cep.json_flat) read it
        return got
    if _BOM in block:
        return None
    n = len(ends)
    if not _safe_for_arrow(block, ends):
        return None
    try:
        table = _read_table(block, hints)
        times = [f.name for f in table.schema if pa.types.is_timestamp(f.type)]
        if times:
            for name in times:
                hints.strings[name] = None
            table = _read_table(block, hints)
    except (pa.ArrowException, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    if table.num_rows != n:  # blank lines (skipped by Arrow): line numbers would not follow rows
        return None
    try:
        names = _first_seen(block, ends, table.schema.names)
    except (orjson.JSONDecodeError, UnicodeDecodeError):  # invalid UTF-8, which Arrow let through
        return None
    cols: dict[str, np.ndarray] = {}
    for name in names:
        col = table.column(name)
        try:
            arr = _column(name, col, block, ends)
        except (pa.ArrowException, UnicodeDecodeError, ValueError):
            return None
        if arr is None:
            return None
        cols[name] = arr
    return cols


_MAX_OPENINGS = 256  # '{' and '[' in one line (strings included) up to which Arrow's parser is handed it


def _safe_for_arrow(block: bytes, ends: np.ndarray) -> bool:
    """Whether Arrow's reader may parse the block: every line starts with '{' and none nests deeply.

    Arrow's parser (pyarrow 26) crashes the process on a first line that is ``null`` and on nesting
    some 100,000 deep; orjson reports both as bad lines. A line with few openings nests little."""
    arr = np.frombuffer(block, dtype=np.uint8)
    starts = np.concatenate(([0], ends[:-1]))
    if not (arr[starts] == 0x7B).all():
        return False
    if block.count(b"{") + block.count(b"[") <= len(ends):  # one '{' per line: flat, the usual case
        return True
    opens = ((arr == 0x7B) | (arr == 0x5B)).astype(np.int32)
    return int(np.add.reduceat(opens, starts).max()) <= _MAX_OPENINGS


def _first_seen(block: bytes, ends: np.ndarray, names: list[str]) -> list[str]:
    """``names`` in the order the lines first give them, as the per-line decoder orders its columns.

    Arrow puts the fields of an explicit schema first; the first line usually names every field."""
    want = set(names)
    order: dict[str, None] = {}
    start = 0
    for end in ends.tolist():
        for k in orjson.loads(block[start:end]):
            if k not in order:
                order[k] = None
        if len(order) == len(want):
            break
        start = end
    return list(order)


def _column(name: str, col: Any, block: bytes, ends: np.ndarray) -> np.ndarray | None:
    """One Arrow column as the per-line decoder's column (None: not representable, decode per line)."""
    import pyarrow as pa

    t = col.type
    n = len(col)
    if pa.types.is_null(t):
        return np.full(n, None, dtype=object)
    if pa.types.is_string(t):
        col.validate(full=True)  # invalid UTF-8 raises here (orjson refuses the line), not later in a rule
        return _strings(col)
    if t == pa.int64() or pa.types.is_boolean(t):
        if col.null_count == 0:
            return col.to_numpy(zero_copy_only=False)
        return narrow_column(_objects(col.to_pylist()))
    if t == pa.float64():
        vals = col.to_numpy(zero_copy_only=False)
        valid = (np.ones(n, dtype=bool) if not col.null_count
                 else np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool))
        with np.errstate(invalid="ignore"):
            if not np.isfinite(vals[valid]).all():  # NaN or Infinity: Arrow reads them, orjson refuses them
                return None
            whole = valid & (vals == np.floor(vals))
        if not whole.any() and not col.null_count:
            return vals
        obj = vals.astype(object)
        if col.null_count:
            obj[~valid] = None
        idx = np.flatnonzero(whole)
        if len(idx):  # an integer or a decimal with a whole value: the line says which
            starts = np.concatenate(([0], ends[:-1]))
            for i in idx.tolist():
                line = block[int(starts[i]):int(ends[i])]
                v = loads_fast(line)[name]
                obj[i] = loads_exact(line)[name] if holds_rounded(v) else v  # 2**64 and up: orjson rounds it too
        return narrow_column(obj)
    return None  # nested objects, arrays, anything else: per line


def _strings(col: Any) -> np.ndarray:
    """A string column as an object array of str and None, each distinct string made once.

    Most event fields repeat (hosts, URLs, symbols): building one Python string per distinct value
    and indexing is several times cheaper than one per row, and repeated values share one object
    (whose hash Python then computes once)."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(col).combine_chunks()
    if len(enc.dictionary) * 2 > len(enc):
        return col.to_numpy(zero_copy_only=False)
    uniq = enc.dictionary.to_numpy(zero_copy_only=False)
    if not enc.indices.null_count:
        return uniq[enc.indices.to_numpy()]
    with_null = np.empty(len(uniq) + 1, dtype=object)
    with_null[:-1] = uniq
    return with_null[enc.indices.fill_null(len(uniq)).to_numpy()]


def _objects(values: list[Any]) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def narrow_column(arr: np.ndarray, kind: str | None = None) -> np.ndarray:
    """A numeric or boolean array where every value has that one type (no NULL), else as is.

    ``kind``: pandas' ``infer_dtype(arr, skipna=False)`` when the caller has it already."""
    import pandas as pd

    if not len(arr):
        return arr
    if kind is None:
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
