"""JSON lines decoded by the engine inside a backfill's map tasks, not by Spark's JSON reader; no pyspark.

A key-set backfill (:mod:`spark_udf.backfill`) of a JSON lines input can read the files as text
(``spark.read.text``) and decode each task's lines with the engine's own decoders, the ones
``cep run`` uses (:func:`cep.json_flat.decode_flat` for a block of flat lines, the per-line
decoder for the rest), then hand the :class:`~spark_udf.backfill.Packer` the same Arrow batches
Spark's reader would have (the schema's columns, typed as it types them, the malformed record's
column, the row's file and block). Spark's JSON parser is the largest single cost of a backfill
(about 1.1 of 5-6 CPU seconds over the S&P file, and most of the first run's JIT compilation);
the engine's scanner decodes the same lines in about 0.2.

The rows are Spark's reader's with the given schema wherever the two decoders agree, which is
every line both read as a JSON object; where they do not, the engine's reading wins,
as ``cep run`` has it (docs/spark.md, "Engine-decoded JSON lines"). What Spark's permissive reader
does, and this decoder with it (tests/spark_udf/test_json_lines_spark.py compares the two):

* a value that does not fit its column's type makes the row a malformed record, and the column
  NULL while the row's other columns keep their values (Spark's partial results): a fraction or text
  in an integer column, an integer beyond the column's range, a boolean or text other than ``NaN``,
  ``Infinity``, ``+Infinity``, ``+INF``, ``-Infinity``, ``-INF`` in a ``double`` column (not ``INF``),
  anything but ``true``/``false`` in a ``boolean`` column;
* a ``tinyint`` column reads 128 to 255 as the byte of the same bits (200 is -56): Jackson's byte
  reading, which Spark's reader uses, takes unsigned bytes too;
* an integer beyond a double's range in a ``double`` column is an infinity of its sign;
* a number, boolean, array or object in a ``string`` column becomes its text as written in the
  line, as Spark's reader gives it;
* a repeated name is read in turn: each value that fits replaces the one before, and any that does
  not makes the row malformed (the last fitting value stays);
* without a malformed-record column (``corrupt=None``) such a row is kept with what fitted, a line
  that is not JSON as a row of NULLs; blank and whitespace-only lines give no row.

Where the engine's decoder differs: a line it refuses is a malformed record with every column NULL,
as ``cep run`` reports it, where Spark's reader reads it: ``NaN``, ``Infinity`` or ``1e400``
unquoted (Spark: a double), a lone surrogate escape (Spark: ``?``), single-quoted strings or
names, text after the object's closing brace (Spark reads the object and ignores the rest), and a
line holding an array (Spark: a row per object in it, none for ``[]``). The other way round, Spark's
reader (Jackson's read limits) makes a malformed record of a line with a number of more than 1,000
characters, a string of more than 20,000,000 or a value nested more than 1,000 levels deep, which
the engine reads as ``cep run`` does (integers to 4,300 digits, orjson's 1,024 levels). Invalid
UTF-8 is a malformed record in both.

Only flat schemas take this path: ``string``, ``bigint``, ``int``, ``smallint``, ``tinyint``,
``double`` and ``boolean`` columns (:func:`column_kinds`). ``float`` (rounded to 32 bits),
decimals (rounded to their scale), dates, timestamps and nested types stay with Spark's reader.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

__all__ = ["JsonLinesDecoder", "column_kinds", "field_texts", "TEXT_COL"]

TEXT_COL = "value"  # spark.read.text's column: one line per row

_INT_RANGES = {"bigint": (-(2**63), 2**63 - 1), "int": (-(2**31), 2**31 - 1), "smallint": (-(2**15), 2**15 - 1),
               "tinyint": (-(2**7), 2**7 - 1)}
_ARROW = {"bigint": "int64", "int": "int32", "smallint": "int16", "tinyint": "int8", "double": "float64",
          "boolean": "bool", "string": "string"}
# the quoted texts Spark's JSON reader reads as a double
# (JacksonParser: allowNonNumericNumbers; "INF" unsigned is not among them)
_SPECIAL_DOUBLES = {"NaN": float("nan"), "Infinity": float("inf"), "+Infinity": float("inf"), "+INF": float("inf"),
                    "-Infinity": float("-inf"), "-INF": float("-inf")}
_MISFIT = object()  # a value that does not fit its column's type


def column_kinds(fields: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
    """The schema's ``(name, Spark type)`` columns if every one can be decoded by the engine, else None.

    Example:
        >>> column_kinds([("sym", "string"), ("px", "double"), ("n", "bigint")])
        [('sym', 'string'), ('px', 'double'), ('n', 'bigint')]
        >>> column_kinds([("ts", "timestamp")]) is None
        True
    """
    if any(t not in _ARROW for _, t in fields):
        return None
    return list(fields)


def field_texts(line: str) -> dict[str, str]:
    """Each top-level field of a JSON object line as the text of its value, as written (the last of a
    repeated name wins, as in Spark's reader and the engine's decoder).

    Example:
        >>> field_texts('{"a": 1.50, "b": [1, 2], "c": "x", "a": -0}')
        {'a': '-0', 'b': '[1, 2]', 'c': '"x"'}
    """
    return {key: line[s:e] for key, s, e in _top_level(line)}


_WS = " \t\n\r"
_DECODER = json.JSONDecoder()
_NESTING = re.compile(r'["\[\]{}]')  # what a nested value's end depends on


def _top_level(line: str) -> Iterator[tuple[str, int, int]]:
    """Each top-level field of a JSON object line: its name and where its value's text starts and ends.

    A value's end is found by json's C decoder, or, for a value nested deeper than Python's recursion
    limit lets it read (the engine's decoder takes some thousand levels, orjson's limit is 1024; a
    task would fail with a RecursionError), by counting brackets outside strings. The line is one
    the engine's decoder read as an object; a line that is not raises ValueError."""
    n = len(line)
    i = 0
    while i < n and line[i] in _WS:
        i += 1
    if i >= n or line[i] != "{":
        return
    i += 1
    while i < n:
        while i < n and line[i] in _WS + ",":
            i += 1
        if i >= n or line[i] == "}":
            return
        if line[i] != '"':
            raise ValueError(f"a JSON object's name expected at {i}: {line[:80]!r}")
        key, i = json.decoder.scanstring(line, i + 1)  # type: ignore[attr-defined]
        while i < n and line[i] in _WS + ":":
            i += 1
        start = i
        if i >= n:
            raise ValueError(f"a value expected at {i}: {line[:80]!r}")
        try:  # json's C decoder finds where the value ends; it recurses once per level of nesting
            _, i = _DECODER.raw_decode(line, start)
        except RecursionError:  # an array or object nested deeper than it reads: count the brackets
            i = _nested_end(line, start)
        yield key, start, i


def _nested_end(line: str, start: int) -> int:
    """Where the array or object starting at ``start`` ends, counting brackets outside strings
    (no recursion, whatever the depth)."""
    depth, i = 0, start
    while True:
        m = _NESTING.search(line, i)
        if m is None:
            raise ValueError(f"an unterminated value at {start}: {line[:80]!r}")
        i = m.start()
        if line[i] == '"':
            _, i = json.decoder.scanstring(line, i + 1)  # type: ignore[attr-defined]
            continue
        depth += 1 if line[i] in "[{" else -1
        i += 1
        if depth == 0:
            return i


@dataclass
class JsonLinesDecoder:
    """Text batches (a line per row, plus pass-through columns) to the batches Spark's JSON reader gives.

    ``fields``: the schema's data columns in order, ``(name, Spark type)`` (:func:`column_kinds`);
    ``corrupt``: the output column that holds a malformed record's line (None: no such column, a
    malformed record's row is kept without it, as Spark's reader keeps it); ``passed``: columns of the text
    batches copied as they are (the file path, the block offset). Blank lines give no row, as in
    Spark's reader and ``cep run``.
    """

    fields: list[tuple[str, str]]
    corrupt: str | None
    passed: tuple[str, ...] = ()
    text_col: str = TEXT_COL
    dictionary: bool = False
    """String columns as Arrow dictionaries (codes into the distinct strings, as the flat scanner
    encodes them) instead of plain strings: a consumer that reads them as Python objects makes one
    string per distinct value, not per row (:func:`cep.events.batch_from_arrow`)."""
    _typed_names: list[bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # the typed columns' names as a line writes them plainly, to see whether one is repeated
        self._typed_names = [json.dumps(n, ensure_ascii=False).encode() for n, t in self.fields if t != "string"]

    def decode(self, batches: Iterator[Any]) -> Iterator[Any]:
        """The decoded batch of every non-empty text batch, in order."""
        dicts: dict[str, Any] = {}  # the string columns' dictionaries, kept across the task's blocks
        for rb in batches:
            if rb.num_rows:
                out = self.decode_batch(rb, dicts)
                if out.num_rows:
                    yield out

    def schema(self) -> Any:
        import pyarrow as pa

        cols = [pa.field(n, self._type(t)) for n, t in self.fields]
        if self.corrupt:
            cols.append(pa.field(self.corrupt, pa.string()))
        return cols

    def _type(self, typ: str) -> Any:
        """The Arrow type of a column of Spark type ``typ`` in the decoded batches."""
        import pyarrow as pa

        if typ == "string" and self.dictionary:
            return pa.dictionary(pa.int32(), pa.string())
        return pa.type_for_alias(_ARROW[typ])

    def decode_batch(self, rb: Any, dicts: dict[str, Any] | None = None) -> Any:
        """One text batch decoded: the flat scanner over the whole block when it takes it, else line by line."""
        import pyarrow as pa
        import pyarrow.compute as pc

        text = rb.column(rb.schema.get_field_index(self.text_col))
        # each line followed by a newline, in one buffer: the block the engine's decoders read
        empty, newline = pa.scalar("", text.type), pa.scalar("\n", text.type)
        joined = pc.binary_join_element_wise(text.fill_null(empty), empty, newline)
        wide = pa.types.is_large_string(joined.type) or pa.types.is_large_binary(joined.type)
        offs = np.frombuffer(joined.buffers()[1], dtype=np.int64 if wide else np.int32)
        offs = offs[joined.offset:joined.offset + len(joined) + 1].astype(np.int64)
        block = joined.buffers()[2].slice(int(offs[0]), int(offs[-1] - offs[0])).to_pybytes()
        passed = {name: rb.column(rb.schema.get_field_index(name)) for name in self.passed}
        return self.decode_block(block, offs[1:] - offs[0], passed, dicts)

    def decode_block(self, block: bytes, ends: np.ndarray, passed: dict[str, Any],
                     dicts: dict[str, Any] | None = None) -> Any:
        """A block of lines, each followed by a newline (``ends``: where each ends), decoded as an Arrow batch.

        ``passed``: each of :attr:`passed`'s columns, an Arrow array of a value per line, or one
        Arrow scalar for every line (a file read directly: its path and block)."""
        import pyarrow as pa

        from cep.json_flat import decode_flat

        codes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        cols = decode_flat(block, ends, codes, dicts) if len(ends) else None
        got = self._flat(cols, codes, len(ends)) if cols is not None else None
        if got is None:
            keep, arrays = self._lines(block, ends)
        else:
            keep, arrays = None, got
        n = len(ends) if keep is None else len(keep)
        if self.dictionary:  # the line-by-line reading's strings encoded too: every batch of one schema
            arrays = [a.dictionary_encode().cast(self._type(t)) if t == "string" and not pa.types.is_dictionary(a.type)
                      else a for a, (_, t) in zip(arrays, self.fields)] + list(arrays[len(self.fields):])
        out = dict(zip([name for name, _ in self.fields], arrays[:len(self.fields)]))
        if self.corrupt:
            out[self.corrupt] = arrays[len(self.fields)]
        types = []
        for name in self.passed:
            col = passed[name]
            types.append(pa.field(name, col.type))
            if isinstance(col, pa.Scalar):
                out[name] = pa.array([col.as_py()], col.type).take(pa.array(np.zeros(n, dtype=np.int32)))
            else:
                out[name] = col if keep is None else col.take(pa.array(keep))
        return pa.RecordBatch.from_pydict(out, schema=pa.schema(self.schema() + types))

    def _flat(self, cols: dict[str, np.ndarray], codes: dict[str, tuple[np.ndarray, np.ndarray]], n: int) -> list[Any] | None:
        """The scanner's columns as typed Arrow arrays, or None when some column needs a line's own
        reading (a value that does not fit its type, a non-string in a string column)."""
        import pyarrow as pa

        out = []
        for name, typ in self.fields:
            col = cols.get(name)
            atype = self._type(typ)
            if col is None:
                out.append(pa.nulls(n, atype))
                continue
            if name in codes:  # strings (and NULLs), dictionary-coded by the scanner
                if typ != "string":
                    return None
                vc, uniq = codes[name]
                coded = pa.DictionaryArray.from_arrays(pa.array(vc.astype(np.int32), mask=vc < 0), pa.array(uniq, pa.string()))
                out.append(coded if self.dictionary else coded.cast(pa.string()))
                continue
            if col.dtype == object:  # NULLs among numbers or booleans, or NULLs only (one kind: the scanner's)
                mask = np.equal(col, None).astype(bool)
                vals = col[~mask]
                if not len(vals):
                    out.append(pa.nulls(n, atype))
                    continue
                kind = type(vals[0])
                dense = np.zeros(n, dtype=np.float64 if kind is float else np.int64 if kind is int else bool)
                dense[~mask] = vals.astype(dense.dtype)
            else:
                kind = float if col.dtype == np.float64 else bool if col.dtype == bool else int
                mask, dense = None, col
            if typ == "boolean":
                if kind is not bool:
                    return None
            elif typ == "double":
                if kind is bool:
                    return None
                dense = dense.astype(np.float64)
            elif typ in _INT_RANGES:
                lo, hi = _INT_RANGES[typ]
                if kind is not int or (len(dense) and (dense.min() < lo or dense.max() > hi)):
                    return None
            else:  # a number or boolean in a string column: its text as written, per line
                return None
            out.append(pa.array(dense, type=atype, mask=mask))
        if self.corrupt:
            out.append(pa.nulls(n, pa.string()))
        return out

    def _lines(self, block: bytes, ends: np.ndarray) -> tuple[list[int], list[Any]]:
        """Line by line, with the engine's per-line decoder: the rows kept (blank lines give none) and
        the columns, a line whose values do not all fit the schema a malformed record."""
        import pyarrow as pa

        from cep.events import BadLine, decode_json_line

        keep: list[int] = []
        values: list[list[Any]] = [[] for _ in self.fields]
        bad: list[str | None] = []
        start = 0
        for i, end in enumerate(ends.tolist()):
            raw = block[start:end]
            start = end
            raw = raw[:-1] if raw.endswith(b"\n") else raw
            got = decode_json_line(raw, i + 1, None)
            if got is None:
                continue
            keep.append(i)
            if isinstance(got, BadLine):
                row, fits = [None] * len(self.fields), False
            else:
                row, fits = self._row(got, raw)
            for v, x in zip(values, row):
                v.append(x)
            bad.append(None if fits else raw.decode("utf-8", errors="replace"))
        arrays = [pa.array(v, type=pa.type_for_alias(_ARROW[t])) for v, (_, t) in zip(values, self.fields)]
        if self.corrupt:
            arrays.append(pa.array(bad, type=pa.string()))
        return keep, arrays

    def _row(self, rec: dict[str, Any], raw: bytes) -> tuple[list[Any], bool]:
        """One decoded object's values for the schema's columns, and whether they all fit their types.

        As in Spark's permissive reader, a value that does not fit leaves its column as it was (NULL,
        or the value of the same name before it) and the row's other columns keep theirs."""
        pairs = self._pairs(raw) if self._repeats(raw) else None
        row: list[Any] = [None] * len(self.fields)
        fits = True
        texts: dict[str, str] | None = None
        for j, (name, typ) in enumerate(self.fields):
            if pairs is not None and typ != "string":  # each value in turn, each that fits replacing the last
                for v in pairs.get(name, ()):
                    got = None if v is None else _fit(v, typ)
                    if got is _MISFIT:
                        fits = False
                    else:
                        row[j] = got
                continue
            v = rec.get(name)  # a string column takes every value: the last one stands
            if v is None:
                continue
            if typ == "string":
                if type(v) is not str:
                    if texts is None:
                        texts = field_texts(raw.decode("utf-8-sig"))  # a BOM the engine's decoder skipped
                    v = texts[name]
            elif not (typ == "double" and type(v) is float):  # the common case, checked first
                v = _fit(v, typ)
                if v is _MISFIT:
                    fits = False
                    continue
            row[j] = v
        return row, fits

    def _repeats(self, raw: bytes) -> bool:
        """Whether a typed column's name may be repeated in the line: written twice, or some name
        spelled with an escape (the decoded object holds only each name's last value)."""
        if b"\\" in raw:
            return bool(self._typed_names)
        for q in self._typed_names:
            if raw.count(q) > 1:
                return True
        return False

    @staticmethod
    def _pairs(raw: bytes) -> dict[str, list[Any]]:
        """Every value of each top-level name, in the line's order (no typed column takes an array or
        an object, so what one becomes does not matter)."""
        out: dict[str, list[Any]] = {}
        # the engine's decoder took the line, so Python's reads it alike (nested objects become lists of pairs)
        try:
            pairs = json.loads(raw, object_pairs_hook=list)
        except RecursionError:  # nested deeper than Python's json reads (orjson takes 1,024 levels)
            line = raw.decode("utf-8-sig")  # (a BOM the engine's decoder skipped)
            pairs = [(name, [] if line[s] in "[{" else json.loads(line[s:e])) for name, s, e in _top_level(line)]
        for name, v in pairs:
            out.setdefault(name, []).append(v)
        return out


def _fit(v: Any, typ: str) -> Any:
    """A JSON value read into a column of Spark type ``typ`` (not string) as Spark's reader reads it, or _MISFIT."""
    if typ == "boolean":
        return v if isinstance(v, bool) else _MISFIT
    if typ == "double":
        if isinstance(v, str):
            return _SPECIAL_DOUBLES.get(v, _MISFIT)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return _MISFIT
        try:
            return float(v)
        except OverflowError:  # an integer beyond a double's range: Spark's reader (BigInteger.doubleValue) rounds it to infinity
            return float("inf") if v > 0 else float("-inf")
    if isinstance(v, bool) or not isinstance(v, int):
        return _MISFIT
    lo, hi = _INT_RANGES[typ]
    if typ == "tinyint" and hi < v <= 255:
        return v - 256  # Jackson's getByteValue, which Spark's reader calls, takes an unsigned byte too
    return v if lo <= v <= hi else _MISFIT
