"""JSON lines of many rows written in one call: the same bytes as one row at a time."""

from __future__ import annotations

import numpy as np
import orjson
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from cep.durable.sinks import dumps_row, dumps_rows

# strings rich in the bytes of a row boundary, so that some rows hold "},{" inside
_TEXT = st.text(alphabet=st.sampled_from(list('},{"\\ab\n\u00e9')), max_size=8)
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), _TEXT,
                    st.floats(allow_nan=False), st.binary(max_size=4))
_VALUE = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(_TEXT, inner, max_size=3)), max_leaves=4)
_ROW = st.dictionaries(_TEXT, _VALUE, max_size=4)


@seed(15)
@settings(max_examples=40, deadline=None)
@given(st.lists(_ROW, min_size=2, max_size=8))
def test_rows_in_one_call_equal_each_row_alone(rows: list[dict]) -> None:
    assert dumps_rows(rows) == b"".join(map(dumps_row, rows))


def test_boundary_inside_a_row_is_not_cut() -> None:
    rows = [{"url": "/a},{b"}, {"n": 1}, {"m": [{"x": 1}, {"y": 2}]}]
    got = dumps_rows(rows)
    assert got.split(b"\n")[:-1] == [orjson.dumps(r) for r in rows]


def test_numpy_values_and_a_row_too_deep_for_a_list() -> None:
    deep: dict = {}
    d = deep
    for _ in range(253):  # written alone; one level more inside the list is too deep for orjson
        d["a"] = {}
        d = d["a"]
    rows = [{"n": np.int64(3), "f": np.float32(0.5)}, deep, {"b": b"\x01"}]
    assert dumps_rows(rows) == b"".join(map(dumps_row, rows))


def test_a_value_at_any_depth_near_the_limit_is_written() -> None:
    """A row holding a value nested d deep is one line of JSON (the value shortened to text when too
    deep for a row), whatever d is near orjson's depth limit."""
    for depth in range(248, 260):
        value: dict = {}
        d = value
        for _ in range(depth):
            d["a"] = {}
            d = d["a"]
        line = dumps_row({"line": 1, "event": value})
        back = orjson.loads(line)
        assert back["line"] == 1 and line.endswith(b"\n") and line.count(b"\n") == 1
        assert dumps_rows([{"n": 1}, {"event": value}]) == dumps_row({"n": 1}) + dumps_row({"event": value})
