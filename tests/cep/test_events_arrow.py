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
