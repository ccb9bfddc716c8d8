"""JSON integers beyond 64 bits reach rules as exact ints on every decoder path (blocks flat, Arrow, lines, stdin)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.cli import main
from cep.events import BadLine, EventBatch, _jsonl_batches, decode_json_line, read_events
from cep.json_blocks import BlockHints, decode_block
from cep.json_exact import loads_exact
from cep.json_flat import FLAT_ENV, decode_flat, flat_enabled

# beside and just past each end of what orjson keeps exactly (int64 below, uint64 above)
WIDE = [2**64, 2**64 + 1, -(2**63) - 1, -(2**63) - 2, 10**30, -(10**30), 3 * 10**19, 10**200, -(10**200)]
EDGE = [2**64 - 1, 2**63, 2**63 - 1, -(2**63), 2**53 + 1, 0, -1]  # orjson's own ints: unchanged


def same(a: Any, b: Any) -> bool:
    """Equal values of equal types, at every depth (1 == 1.0 == True are told apart)."""
    return repr(a) == repr(b) and type(a) is type(b)


# ------------------------------------------------------------------ one document


@pytest.mark.parametrize("v", WIDE + EDGE)
def test_an_integer_literal_is_the_exact_int_top_level_and_nested(v):
    doc = f'{{"id": {v}, "n": {{"deep": [{v}, {{"x": {v}}}]}}, "s": "{v}"}}'.encode()
    got = loads_exact(doc)
    assert same(got, {"id": v, "n": {"deep": [v, {"x": v}]}, "s": str(v)})
    assert same(loads_exact(str(v).encode()), v)  # a bare number too


@pytest.mark.parametrize("text", [b"1e19", b"1.5e20", b"-1e19", b"18446744073709551616.0", b"12345678901234567890.5",
                                  b"-9223372036854775809.0", b"1E300"])
def test_floats_written_as_floats_stay_floats(text):
    got = loads_exact(b'{"f": ' + text + b', "i": 18446744073709551616}')
    assert same(got["f"], float(text)) and same(got["i"], 2**64)


def test_long_digit_runs_in_strings_cost_a_look_but_change_nothing():
    doc = b'{"card": "12345678901234567890123", "neg": "-9999999999999999999", "t": 1700000000000000000}'
    assert same(loads_exact(doc), orjson.loads(doc))


def test_what_orjson_refuses_stays_refused_with_its_reason():
    for doc in [b'{"a": 1e400}', b'{"a": NaN}', b'{"a": 1' + b"0" * 400 + b', "b": NaN}',
                b'{"a": 1' + b"0" * 400 + b', "b": 1e400}', b'{"a": 1' + b"0" * 400 + b', "b": "\\ud800"}',
                b'{"a": 0123}', b'{"a": 18446744073709551616']:
        with pytest.raises(orjson.JSONDecodeError) as e:
            loads_exact(doc)
        with pytest.raises(orjson.JSONDecodeError) as ref:
            orjson.loads(doc)
        assert str(e.value) == str(ref.value)


def test_an_integer_past_a_double_is_exact_and_past_pythons_digit_limit_a_bad_line_saying_so():
    big = 7 * 10**400 + 3
    assert same(loads_exact(f'{{"a": [{big}, {-big}]}}'.encode()), {"a": [big, -big]})
    got = decode_json_line(b'{"a": ' + b"9" * 5000 + b"}\n", 4, "f.jsonl")
    assert isinstance(got, BadLine) and got.line == 4
    assert got.reason.startswith("malformed JSON: an integer of more than 4,300 digits (Python's limit")


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.text(alphabet="0123456789-x", max_size=30),
              st.integers(min_value=-(10**40), max_value=10**40), st.sampled_from(WIDE + EDGE),
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_any_document_decodes_as_the_standard_library_decodes_it(v):
    doc = json.dumps(v).encode()
    assert same(loads_exact(doc), json.loads(doc))


# ------------------------------------------------------------------ every decoder of cep run

ROWS = [{"k": f"h{i % 3}", "ts": i, "id": i * 7, "v": f"u{i}"} for i in range(12)]


def jsonl(rows: list[dict], wide_at: dict[int, int]) -> bytes:
    """JSON lines of ``rows`` with row i's id the literal ``wide_at[i]`` (orjson cannot write ints past 64 bits)."""
    out = []
    for i, r in enumerate(rows):
        line = json.dumps({**r, "id": wide_at.get(i, r["id"])}, separators=(",", ":"))
        out.append(line.encode())
    return b"\n".join(out) + b"\n"


def all_paths(path: Path, batch_size: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[EventBatch]]:
    """The batches of every decoder of a JSON lines file: blocks (flat scanner first, or Arrow first), lines, stdin."""
    got = {}
    for name, decoder, flat in [("flat", "blocks", "on"), ("arrow", "blocks", "off"), ("lines", "lines", "off")]:
        monkeypatch.setenv(FLAT_ENV, flat)
        got[name] = list(_jsonl_batches(path, batch_size, decoder=decoder))
    with open(path, "rb") as f:
        monkeypatch.setattr(sys, "stdin", f)
        got["stdin"] = list(_jsonl_batches(Path("-"), batch_size))
    monkeypatch.delenv(FLAT_ENV)
    return got


def values(batches: list[EventBatch], name: str) -> list[Any]:
    return [v for b in batches for v in b.column(name).tolist()]


@pytest.mark.parametrize("wide", WIDE)
@pytest.mark.parametrize("batch_size", [1, 5, 100])
def test_every_decoder_gives_the_exact_ints_mixed_with_ordinary_rows(tmp_path, monkeypatch, wide, batch_size):
    wide_at = {3: wide, 4: 2**63, 7: -wide, 11: wide + 1}
    p = tmp_path / "e.jsonl"
    p.write_bytes(jsonl(ROWS, wide_at))
    want = [wide_at.get(i, r["id"]) for i, r in enumerate(ROWS)]
    per_path = all_paths(p, batch_size, monkeypatch)
    for name, batches in per_path.items():
        got = values(batches, "id")
        assert [repr(v) for v in got] == [repr(v) for v in want], name
        assert [b.lines.tolist() for b in batches] == [b.lines.tolist() for b in per_path["lines"]], name
        assert all(not b.bad for b in batches), name
        assert values(batches, "v") == [r["v"] for r in ROWS], name


def test_the_block_decoders_keep_a_block_with_wide_ints_the_flat_scanner_hands_it_to_arrow(tmp_path):
    block = jsonl(ROWS, {2: 2**64, 5: -(2**63) - 1, 9: 10**30})
    ends = np.cumsum([len(x) + 1 for x in block.split(b"\n")[:-1]])
    cols = decode_block(block, ends, BlockHints())  # Arrow: a double column, its whole values read from their lines
    assert cols is not None
    assert [repr(v) for v in cols["id"].tolist()] == [repr(v) for v in [0, 7, 2**64, 21, 28, -(2**63) - 1, 42, 49,
                                                                          56, 10**30, 70, 77]]
    if flat_enabled():  # numba present: the scanner takes ordinary blocks and refuses this one (>18 digits)
        assert decode_flat(block, ends) is None
        plain = jsonl(ROWS, {})
        assert decode_flat(plain, np.cumsum([len(x) + 1 for x in plain.split(b"\n")[:-1]])) is not None


def test_nested_wide_ints_are_exact_in_the_events_of_every_path(tmp_path, monkeypatch):
    lines = [b'{"k":"a","ts":1,"user":{"id":18446744073709551616,"tags":[-9223372036854775809, 1e19]}}',
             b'{"k":"a","ts":2,"user":{"id":18446744073709551617,"tags":[]}}']
    p = tmp_path / "n.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n")
    for name, batches in all_paths(p, 10, monkeypatch).items():
        users = [b.record(i)["user"] for b in batches for i in range(b.n)]
        assert same(users, [{"id": 2**64, "tags": [-(2**63) - 1, 1e19]}, {"id": 2**64 + 1, "tags": []}]), name



@pytest.mark.parametrize("decoder", ["blocks", "lines"])
def test_a_wide_int_among_floats_strings_or_nulls_of_its_column_is_exact(tmp_path, decoder):
    # a float64 column (prices), an object column of strings, one of ints with NULLs: each looked at its own way
    lines = [b'{"px":1.5,"s":"a","n":null}', b'{"px":18446744073709551616,"s":18446744073709551617,"n":3}',
             b'{"px":2.0,"s":"b","n":-9223372036854775809}', b'{"px":1e19,"s":"c","n":4}']
    p = tmp_path / "m.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n")
    (b,) = list(_jsonl_batches(p, 10, decoder=decoder))
    assert same(b.column("px").tolist(), [1.5, 2**64, 2.0, 1e19])
    assert same(b.column("s").tolist(), ["a", 2**64 + 1, "b", "c"])
    assert same(b.column("n").tolist(), [None, 3, -(2**63) - 1, 4])


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.integers(0, 39), st.sampled_from(WIDE + EDGE), max_size=8), st.sampled_from([1, 3, 8, 16, 64]))
def test_wide_ints_anywhere_in_batches_that_split_the_file(tmp_path_factory, wide_at, batch_size):
    rows = [{"k": f"h{i % 4}", "ts": i, "id": i, "v": f"u{i % 5}"} for i in range(40)]
    p = tmp_path_factory.mktemp("split") / "e.jsonl"
    p.write_bytes(jsonl(rows, wide_at))
    ref = [json.loads(x) for x in p.read_bytes().splitlines()]  # the standard library: exact ints
    for decoder in ("blocks", "lines"):
        batches = list(_jsonl_batches(p, batch_size, decoder=decoder))
        assert [b.n for b in batches][:-1] == [batch_size] * (len(batches) - 1)
        assert same(values(batches, "id"), [r["id"] for r in ref]), decoder


# ------------------------------------------------------------------ a rule tells them apart, end to end

RULE = """
rules:
  - name: same_id
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, B.ts AS t1, B.id AS id
        AFTER MATCH SKIP TO NEXT ROW
        PATTERN (A B)
        DEFINE B AS B.id = A.id)
"""


def brute_force(rows: list[dict]) -> list[tuple[int, int]]:
    """(t0, t1) of each pair of consecutive rows of a key with equal ids, as Python compares them."""
    out = []
    for k in sorted({r["k"] for r in rows}):
        mine = sorted((r for r in rows if r["k"] == k), key=lambda r: r["ts"])
        out += [(a["ts"], b["ts"]) for a, b in zip(mine, mine[1:]) if a["id"] == b["id"]]
    return sorted(out)


@pytest.mark.parametrize("how", ["blocks", "lines", "stdin", "csv", "durable"])
def test_a_rule_tells_apart_ids_that_differ_only_beyond_float_precision(tmp_path, monkeypatch, capsys, how):
    ids = [2**64, 2**64 + 1, 2**64 + 1, 2**64, -(2**63) - 1, -(2**63) - 2, -(2**63) - 2, 10**30, 10**30 + 1,
           1e19, 1e19]  # the last two are floats: equal
    rows = [{"k": "x" if i < 7 else "y", "ts": i, "id": v} for i, v in enumerate(ids)]
    assert float(ids[0]) == float(ids[1])  # what a decoder that rounds would have compared
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE)
    if how == "csv":
        p = tmp_path / "e.csv"
        p.write_text("k,ts,id\n" + "".join(f"{r['k']},{r['ts']},{r['id']}\n" for r in rows))
    else:
        p = tmp_path / "e.jsonl"
        p.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows))
        monkeypatch.setenv("CEP_JSONL_DECODER", "lines" if how == "lines" else "blocks")
    out = tmp_path / "out.jsonl"
    if how == "stdin":
        f = open(p, "rb")
        monkeypatch.setattr(sys, "stdin", f)
        code = main(["run", str(rules), "--input", "-", "--output", str(out), "--quiet"])
        f.close()
    else:
        state = ["--state", str(tmp_path / "state")] if how == "durable" else []  # durable runs read lines themselves
        code = main(["run", str(rules), "--input", str(p), "--output", str(out), "--quiet", *state])
    assert code == 0, capsys.readouterr().err
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted((r["t0"], r["t1"]) for r in got) == brute_force(rows) == [(1, 2), (5, 6), (9, 10)]
    # an int past 64 bits is written out as its exact digits (a JSON string: orjson writes no wider int)
    assert sorted(str(r["id"]) for r in got) == sorted([str(2**64 + 1), str(-(2**63) - 2), str(1e19)])


def test_read_events_of_a_file_with_wide_ints_counts_no_bad_line(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_bytes(jsonl(ROWS, {0: 2**64}))
    batches = list(read_events(p))
    assert sum(b.n for b in batches) == len(ROWS) and not any(b.bad for b in batches)


def test_an_error_row_keeps_its_event_an_object_with_the_wide_ints_exact(tmp_path, capsys):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE)
    p = tmp_path / "e.jsonl"
    p.write_bytes(b'{"k":"x","ts":18446744073709551616,"id":1,"n":{"deep":[-9223372036854775809]}}\n'
                  b'{"k":"x","ts":2,"id":18446744073709551617}\n')
    errs, out = tmp_path / "errors.jsonl", tmp_path / "out.jsonl"
    assert main(["run", str(rules), "--input", str(p), "--output", str(out), "--errors", str(errs), "--quiet"]) == 0
    (row,) = [json.loads(x) for x in errs.read_text().splitlines()]
    assert row["line"] == 1 and "18446744073709551616 is out of range for epoch milliseconds" in row["reason"]
    assert row["event"] == {"k": "x", "ts": 18446744073709551616, "id": 1, "n": {"deep": [-9223372036854775809]}}
    assert out.read_text() == ""
