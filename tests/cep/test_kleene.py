"""A columnar comparison's three-valued result (cep.expressions._kleene): 1 true, -1 false, 0 NULL."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cep.expressions import _kleene


@settings(max_examples=60, deadline=None, derandomize=True)
@given(rows=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=0, max_size=300),
       nulls_as=st.sampled_from(["bools", "ints", "none", "false", "true"]))
def test_each_row_is_true_false_or_unknown(rows, nulls_as):
    res = np.array([r for r, _ in rows], dtype=bool)
    null = [n for _, n in rows]
    nulls = {"bools": np.array(null, dtype=bool), "ints": np.array(null, dtype=np.int64), "none": None,
             "false": False, "true": True}[nulls_as]
    got = _kleene(res, nulls)
    assert got.dtype == np.int8 and got.shape == res.shape
    unknown = {"bools": null, "ints": null, "none": [False] * len(rows), "false": [False] * len(rows),
               "true": [True] * len(rows)}[nulls_as]
    assert got.tolist() == [0 if u else (1 if r else -1) for (r, _), u in zip(rows, unknown)]


def test_a_scalar_result_takes_the_shape_of_per_row_nulls():
    """``5 > 3`` against a column's NULLs (a literal compared with a literal, under a NULL-able AND)."""
    assert _kleene(np.bool_(True), np.array([False, True, False])).tolist() == [1, 0, 1]
    assert _kleene(False, np.array([True, False])).tolist() == [0, -1]
    assert _kleene(np.bool_(True), None).tolist() == 1
    assert _kleene(np.array([True, False]), True).tolist() == [0, 0]
