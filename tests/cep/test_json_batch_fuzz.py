"""Fuzz: JSON-lines batches (per-line and block decoders) against the standard library, line by line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from cep.events import _jsonl_batches, batch_from_records

KEYS = ["a", "b", "c", "0", "ü"]

# integers around every boundary orjson and int64 have, floats that are whole or huge
ints = st.one_of(
    st.integers(-10, 10),
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1, -2**63, -2**63 - 1, 10**30, -10**30, 10**320]),
    st.integers(-2**70, 2**70),
)
floats = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1.0, -0.0, 0.0, 2.0**63, 2.0**64, 1e19]))
scalars = st.one_of(st.none(), st.booleans(), ints, floats, st.text(max_size=4),
                    st.sampled_from(["1", "18446744073709551617", "-0", "true", "1.0", ""]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)),
                      max_leaves=5)
objects = st.dictionaries(st.sampled_from(KEYS), values, max_size=4)


def _text(v: Any) -> str:
    # -0 written as an int literal too: the decoders must read it as the int 0
    return json.dumps(v, ensure_ascii=False)


lines = st.one_of(
    objects.map(lambda o: _text(o).encode()),
    objects.map(lambda o: b"\xef\xbb\xbf" + _text(o).encode()),
    objects.map(lambda o: b"  " + _text(o).encode() + b" \r"),
    st.sampled_from([b"", b"   ", b"nope", b"[1, 2]", b"3", b'{"a": 1', b'{"a": -0}', b'{"a": 1.0}', b'{"a": 1E400}',
                     b'{"a": NaN}', b'{"a": ' + b"9" * 400 + b"}"]),
)


def _expected(raw: bytes) -> Any:
    """The standard library's reading of one line: a dict, 'bad', or None for blank."""
    s = raw.removeprefix(b"\xef\xbb\xbf").strip()
    if not s:
        return None
    try:
        v = json.loads(s.decode(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError:
        return "bad"
    if any(isinstance(x, float) and not np.isfinite(x) for x in _leaves(v)):
        return "bad"
    return v if isinstance(v, dict) else "bad"


def _leaves(v: Any) -> list:
    out, stack = [], [v]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
        else:
            out.append(x)
    return out


def _typed(v: Any) -> Any:
    """A value with its exact type at every depth (1 and 1.0 and True differ; -0.0 and 0.0 differ)."""
    if isinstance(v, dict):
        return ("dict", tuple((k, _typed(x)) for k, x in v.items()))
    if isinstance(v, list):
        return ("list", tuple(_typed(x) for x in v))
    if isinstance(v, (np.generic,)):
        v = v.item()
    return (type(v).__name__, repr(v))


@seed(20261127)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(lines, min_size=1, max_size=40), st.integers(1, 9), st.sampled_from(["lines", "blocks"]))
def test_batches_match_the_standard_library(tmp_path: Path, raws: list[bytes], batch_size: int, decoder: str) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(raws) + b"\n")
    expect = {i: _expected(r) for i, r in enumerate(raws, 1)}
    seen_rows: dict[int, dict] = {}
    seen_bad: set[int] = set()
    for b in _jsonl_batches(path, batch_size, decoder=decoder):
        seen_bad.update(x.line for x in b.bad)
        lines_ = b.lines.tolist()
        recs = [expect[i] for i in lines_]
        assert all(isinstance(r, dict) for r in recs), (lines_, recs)
        ref = batch_from_records(recs, lines_, "x")
        assert set(b.columns) == set(ref.columns), lines_
        for k, col in ref.columns.items():
            got = b.column(k)
            if decoder == "lines":  # the per-line path builds its columns as batch_from_records did
                assert got.dtype == col.dtype, (k, got.dtype, col.dtype, lines_)
            assert [_typed(x) for x in got.tolist()] == [_typed(x) for x in col.tolist()], (k, lines_)
        for j, i in enumerate(lines_):
            seen_rows[i] = {k: b.column(k)[j] for k in b.columns}
    assert seen_bad == {i for i, e in expect.items() if e == "bad"}
    assert set(seen_rows) == {i for i, e in expect.items() if isinstance(e, dict)}
