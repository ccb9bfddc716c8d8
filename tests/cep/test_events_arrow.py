"""Arrow string columns read as object arrays of str with None for nulls, as the row-by-row reading gives."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from cep.events import batch_from_arrow

_TEXT = st.one_of(st.none(), st.text(max_size=6))


def _by_rows(col: pa.ChunkedArray | pa.Array) -> list:
    return col.to_pylist()


@settings(max_examples=30, derandomize=True, deadline=None)
@given(values=st.lists(_TEXT, max_size=40), split=st.integers(0, 40), large=st.booleans())
def test_string_columns_match_the_row_reading(values: list, split: int, large: bool) -> None:
    typ = pa.large_string() if large else pa.string()
    cut = min(split, len(values))
    col = pa.chunked_array([pa.array(values[:cut], typ), pa.array(values[cut:], typ)], typ)
    table = pa.table({"s": col, "x": pa.array(np.arange(len(values)), pa.int64())})
    got = batch_from_arrow(table).columns["s"]
    assert got.dtype == object and got.ndim == 1
    assert got.tolist() == _by_rows(col)
    assert all(v is None or type(v) is str for v in got)


def test_record_batch_and_empty_string_column() -> None:
    rb = pa.record_batch({"s": pa.array(["a", None, "b"])})
    assert batch_from_arrow(rb).columns["s"].tolist() == ["a", None, "b"]
    empty = pa.table({"s": pa.array([], pa.string())})
    assert batch_from_arrow(empty).columns["s"].tolist() == []


@settings(max_examples=30, derandomize=True, deadline=None)
@given(values=st.lists(_TEXT, max_size=40), split=st.integers(0, 40), large=st.booleans())
def test_dictionary_columns_read_as_their_strings_with_their_codes(values: list, split: int, large: bool) -> None:
    """A dictionary of strings (chunks with dictionaries of their own, a string repeated in one, NULLs):
    the strings the row reading gives, and codes that give them back, which per-value work reads."""
    typ = pa.large_string() if large else pa.string()
    cut = min(split, len(values))
    first = pa.array(values[:cut], typ).dictionary_encode()
    # the second chunk's dictionary holds its strings in reverse order, each twice
    rest = values[cut:]
    uniq = list(dict.fromkeys(v for v in rest if v is not None))[::-1]
    words = uniq + uniq
    idx = [None if v is None else uniq.index(v) + (len(uniq) if i % 2 else 0) for i, v in enumerate(rest)]
    second = pa.DictionaryArray.from_arrays(pa.array(idx, pa.int32()), pa.array(words, typ))
    col = pa.chunked_array([first.cast(pa.dictionary(pa.int32(), typ)), second])
    batch = batch_from_arrow(pa.table({"s": col}))
    got = batch.columns["s"]
    assert got.dtype == object and got.tolist() == values
    codes, strings = batch.encoded("s")
    assert [None if c < 0 else strings[c] for c in codes.tolist()] == values
    assert all(v is None or type(v) is str for v in got)


_NUMS = {
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "uint64": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "float64": (pa.float64(), st.floats(allow_nan=True, allow_infinity=True)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "bool": (pa.bool_(), st.booleans()),
}


@settings(max_examples=60, derandomize=True, deadline=None)
@given(kind=st.sampled_from(sorted(_NUMS)), data=st.data(), split=st.integers(0, 30))
def test_numbers_with_nulls_read_as_the_row_reading(kind: str, data: st.DataObject, split: int) -> None:
    """Numbers or booleans with NULLs: the Python values and None that ``to_pylist`` gives, exact
    (integers beyond 2**53 stay integers, -0.0 and NaN stay as they are)."""
    typ, values = _NUMS[kind]
    vals = data.draw(st.lists(st.one_of(st.none(), values), min_size=1, max_size=30))
    if all(v is not None for v in vals):
        vals[0] = None
    cut = min(split, len(vals))
    col = pa.chunked_array([pa.array(vals[:cut], typ), pa.array(vals[cut:], typ)], typ)
    got = batch_from_arrow(pa.table({"x": col})).columns["x"]
    want = col.to_pylist()
    assert got.dtype == object and len(got) == len(want)
    for g, w in zip(got.tolist(), want):
        assert type(g) is type(w) and (g == w or (g != g and w != w)), (g, w)
        if isinstance(w, float) and w == 0:
            assert str(g) == str(w)  # the sign of zero


def test_a_null_among_a_dictionarys_values_reads_as_a_null_code() -> None:
    """A dictionary holding NULL as a value (legal Arrow) and a string twice: NULL rows get code -1, as
    consumers of the codes read NULL, so an analytics rule reports the missing key, as for plain strings."""
    from cep.analytics.operator import WindowOperator
    from patterns.analytics import compile_analytics

    col = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 0, None, 2], pa.int32()), pa.array(["a", "a", None]))
    batch = batch_from_arrow(pa.table({"k": col}))
    codes, strings = batch.encoded("k")
    assert codes.tolist()[2:] == [-1, 0, -1, -1] and [strings[c] for c in codes[:2]] == ["a", "a"]
    ts = pa.array(range(6), pa.int64())
    sql = "SELECT k, COUNT(*) AS n FROM t GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)"
    got = []
    for k in (col, col.cast(pa.string())):
        op = WindowOperator(compile_analytics(sql), name="r")
        out = op.process(batch_from_arrow(pa.table({"k": k, "ts": ts})))
        out.extend(op.advance_to(100))
        got.append((sorted(str(m) for m in out.matches), [e["reason"] for e in out.errors]))
    assert got[0] == got[1] and got[0][0] == ["{'k': 'a', 'n': 3, 'rule': 'r', 'correction': False}"]
