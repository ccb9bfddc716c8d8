"""The engine's JSON lines decoder of a backfill's map tasks (spark_udf/json_lines.py), without Spark.

Each decoded row is compared with a reading of the same line by ``json.loads`` and the schema's
rules written out here (the reference); tests/spark_udf/test_json_lines_spark.py compares the
decoder with Spark's own reader.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pyarrow as pa
import pytest

from spark_udf.json_lines import JsonLinesDecoder, column_kinds, field_texts

FIELDS = [("s", "string"), ("n", "bigint"), ("i", "int"), ("t", "tinyint"), ("d", "double"), ("b", "boolean")]
RANGES = {"bigint": 2**63, "int": 2**31, "tinyint": 2**7}
SPECIAL = {"NaN", "Infinity", "+Infinity", "+INF", "-Infinity", "-INF"}  # not "INF": Spark's reader refuses it


def _typed(v: Any, typ: str) -> tuple[bool, Any]:
    """(fits, value) of one JSON value in a column of a schema's type (not string), by the rules written out."""
    if typ == "boolean":
        return isinstance(v, bool), v
    if typ == "double":
        if isinstance(v, str) and v in SPECIAL:
            v = float("nan") if v == "NaN" else float("-inf") if v.startswith("-") else float("inf")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False, None
        return True, float(v) if isinstance(v, float) or abs(v) < 2**1024 else math.copysign(math.inf, v)
    lim = RANGES[typ]
    if typ == "tinyint" and isinstance(v, int) and lim <= v < 2 * lim:
        v -= 2 * lim  # 128..255: the byte of the same bits, as Spark's reader (Jackson) reads them
    return not isinstance(v, bool) and isinstance(v, int) and -lim <= v < lim, v


def _reference(line: str) -> tuple[list[Any] | None, str | None] | None:
    """(values, None) for a row that fits, (values, line) for a malformed record (the values that fit,
    Spark's partial result; None for a line that is not a JSON object), None for no row."""
    if not line.strip():
        return None
    try:
        pairs = json.loads(line, object_pairs_hook=list)
        rec = json.loads(line)
    except ValueError:
        return None, line
    if not isinstance(rec, dict):
        return None, line
    out: list[Any] = []
    fits = True
    for name, typ in FIELDS:
        if typ == "string":
            v = rec.get(name)
            out.append(v if v is None or isinstance(v, str) else field_texts(line)[name])
            continue
        got = None
        for key, v in pairs:  # each value of a repeated name in turn: one that fits replaces the last
            if key != name:
                continue
            ok, x = _typed(v, typ) if v is not None else (True, None)
            fits &= ok
            got = x if ok else got
        out.append(got)
    return out, None if fits else line


def _decode(lines: list[str], cuts: list[int], corrupt: str | None = "_c", dictionary: bool = False) -> list[dict[str, Any]]:
    dec = JsonLinesDecoder(FIELDS, corrupt, ("seq",), dictionary=dictionary)
    batches = []
    bounds = [0, *cuts, len(lines)]
    for a, b in zip(bounds, bounds[1:]):
        batches.append(pa.RecordBatch.from_pydict({"value": lines[a:b], "seq": list(range(a, b))}))
    out = list(dec.decode(iter(batches)))
    # every batch of one schema (the packer joins them), strings as dictionaries when asked
    assert all(rb.schema == out[0].schema for rb in out)
    assert not out or pa.types.is_dictionary(out[0].schema.field("s").type) == dictionary
    return [row for rb in out for row in rb.to_pylist()]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


def _check(lines: list[str], got: list[dict[str, Any]], corrupt: str | None = "_c") -> None:
    expected = [(seq, ref) for seq, line in enumerate(lines) if (ref := _reference(line)) is not None]
    assert [r["seq"] for r in got] == [seq for seq, _ in expected]
    for row, (seq, (values, bad)) in zip(got, expected):
        if corrupt:
            assert row[corrupt] == bad, (seq, row)
        for j, (name, _) in enumerate(FIELDS):
            want = None if values is None else values[j]
            assert (row[name] is None and want is None) or _same(row[name], want), (seq, name, row[name], want, lines[seq])


def _value(rng: random.Random, typ: str, fit: bool) -> Any:
    if rng.random() < 0.1:
        return None
    if typ == "string":
        return rng.choice(["a", "b\\\"q", "é😀", "x" * rng.randint(0, 12), "\\u00e9\\ud83d\\ude00", "tab\\t"]) if fit \
            else rng.choice([12, -0.0, 1.5e300, True, [1, {"a": 2}], {"k": [None]}])
    if typ == "boolean":
        return rng.random() < 0.5 if fit else rng.choice([1, "true", 0.0])
    if typ == "double":
        return rng.choice([rng.uniform(-1e6, 1e6), rng.randint(-2**62, 2**62), 0.1, -0.0, 5e-324, "NaN", "-INF"]) if fit \
            else rng.choice(["1.5", True, "inf", [1.0]])
    lim = RANGES[typ]
    return rng.choice([rng.randint(-lim, lim - 1), -lim, lim - 1, 0]) if fit else rng.choice([lim, -lim - 1, 1.0, "3", False])


def _line(rng: random.Random, fit: bool) -> str:
    parts = []
    for name, typ in FIELDS:
        if rng.random() < 0.08:
            continue  # a missing field
        v = _value(rng, typ, fit or rng.random() < 0.8)
        text = json.dumps(v) if not isinstance(v, str) or "\\" not in v else '"' + v + '"'
        parts.append(f'"{name}": {text}')
    if rng.random() < 0.05:
        parts.append('"extra": [1, 2]')
    return "{" + ", ".join(parts) + "}"


@pytest.mark.parametrize("seed", range(6))
def test_every_row_as_json_and_the_schema_read_it(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CEP_FLAT_JSON", "on")
    rng = random.Random(seed)
    lines = []
    for _ in range(rng.randint(200, 600)):
        r = rng.random()
        lines.append(_line(rng, fit=r < 0.85) if r < 0.96 else rng.choice(["", "   ", "[1, 2]", "3", '{"s": "x", ', "nope"]))
    cuts = sorted(rng.sample(range(1, len(lines)), 3))
    for dictionary in (False, True):
        _check(lines, _decode(lines, cuts, dictionary=dictionary))
        _check(lines, _decode(lines, cuts, corrupt=None, dictionary=dictionary), corrupt=None)


def test_flat_blocks_and_per_line_blocks_share_the_string_dictionaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CEP_FLAT_JSON", "on")
    rng = random.Random(7)
    flat = [json.dumps({"s": rng.choice(["p", "q", "r"]), "n": i, "d": i / 4, "b": i % 2 == 0}) for i in range(300)]
    # the second batch has a fraction in the bigint column (per line), the third is flat again with new strings
    mixed = [json.dumps({"s": "q", "n": 1.5})] + flat[:50]
    more = [json.dumps({"s": f"new{i % 7}", "n": -i, "d": 1, "b": True}) for i in range(200)]
    lines = flat + mixed + more
    _check(lines, _decode(lines, [300, 351]))
    _check(lines, _decode(lines, [300, 351], dictionary=True))


def test_values_that_do_not_fit_make_the_row_malformed() -> None:
    lines = ['{"s": "ok", "n": 9223372036854775807, "i": -2147483648, "t": 127, "d": 1, "b": false}',
             '{"n": 9223372036854775808}', '{"i": 2147483648}', '{"t": -129}', '{"n": 2.0}', '{"n": "12"}',
             '{"d": "1.5"}', '{"d": true}', '{"b": 1}', '{"b": "true"}', '{"d": "NaN", "s": 1.50}',
             '{"s": [1, {"a": 2}], "d": "-INF"}']
    rows = _decode(lines, [])
    assert [r["_c"] is None for r in rows] == [True] + [False] * 9 + [True, True]
    assert rows[0]["n"] == 2**63 - 1 and rows[0]["i"] == -(2**31) and rows[0]["t"] == 127 and rows[0]["d"] == 1.0
    assert math.isnan(rows[10]["d"]) and rows[10]["s"] == "1.50"  # a number in a string column: its text as written
    assert rows[11]["s"] == '[1, {"a": 2}]' and rows[11]["d"] == float("-inf")
    _check(lines, rows)


def test_field_texts_reads_each_value_as_written() -> None:
    assert field_texts('{"a": 1.50, "b": [1, 2], "c": "x", "a": -0}') == {"a": "-0", "b": "[1, 2]", "c": '"x"'}
    assert field_texts(' {"k" : {"x": [true, null]} , "e":1e3}') == {"k": '{"x": [true, null]}', "e": "1e3"}
    assert field_texts('{"q\\"uote": "a\\"b"}') == {'q"uote': '"a\\"b"'}
    assert field_texts("[1]") == {} and field_texts("{}") == {}


def test_values_nested_deeper_than_pythons_recursion_limit_are_read_without_recursion() -> None:
    # orjson (the engine's decoder) takes 1,024 levels; Python's json module recursed once per level
    # and a task failed with a RecursionError: a text value in a string column, a repeated typed
    # name (each value read in turn), a nested value in a column outside the schema
    deep = "[" * 1000 + '"]{"' + "]" * 1000
    lines = ['{"s": %s, "n": 1}' % deep, '{"n": 1, "n": 2, "s": %s}' % deep, '{"n": 1, "x": {"y": %s}, "n": 3}' % deep,
             '{"n": 1, "n": %s}' % deep, '{"s": ["]", "{", "\\"]"], "n": 1, "n": 4}']
    rows = _decode(lines, [])
    assert [(r["s"], r["n"], r["_c"]) for r in rows] == [
        (deep, 1, None), (deep, 2, None), (None, 3, None), (None, 1, lines[3]), ('["]", "{", "\\"]"]', 4, None)]
    assert field_texts('{"a": %s, "b" : {"c": "}"} }' % deep) == {"a": deep, "b": '{"c": "}"}'}


def test_only_flat_schemas_are_decoded_by_the_engine() -> None:
    assert column_kinds([("a", "string"), ("b", "double"), ("c", "smallint"), ("d", "boolean")]) is not None
    for typ in ("float", "decimal(10,2)", "timestamp", "date", "array<int>", "struct<a:int>", "binary"):
        assert column_kinds([("a", "string"), ("b", typ)]) is None, typ


def test_a_flat_block_is_read_by_the_scanner_and_checked_column_by_column(monkeypatch: pytest.MonkeyPatch) -> None:
    from cep.json_flat import decode_flat

    monkeypatch.setenv("CEP_FLAT_JSON", "on")
    per_line: list[int] = []
    lines_of = JsonLinesDecoder._lines
    monkeypatch.setattr(JsonLinesDecoder, "_lines", lambda self, block, ends: (per_line.append(len(ends)),
                                                                              lines_of(self, block, ends))[1])
    scanner = decode_flat(b'{"a":1}\n', [8]) is not None  # None where numba is absent: then every block goes per line
    # integers in a double column (beyond float32's 24 bits), in range in the integer columns
    ok = [json.dumps({"s": "x", "n": 2**50 + i, "i": -i, "t": i % 100, "d": 2**40 + i, "b": True}) for i in range(100)]
    rows = _decode(ok, [])
    _check(ok, rows)
    assert rows[5]["d"] == float(2**40 + 5) and isinstance(rows[5]["d"], float)
    assert per_line == ([] if scanner else [100])
    # one integer beyond tinyint's range: the block goes per line, that row alone is malformed
    per_line.clear()
    wide = ok[:50] + [json.dumps({"s": "x", "n": 1, "i": 1, "t": 300, "d": 1, "b": True})] + ok[50:]
    rows = _decode(wide, [])
    _check(wide, rows)
    assert [i for i, r in enumerate(rows) if r["_c"] is not None] == [50]
    assert per_line == [101]
    # a column of one kind that is not the schema's in every line: every row malformed
    for col, val in (("n", 0.5), ("b", 1), ("n", "12"), ("d", False), ("i", 2**40)):
        lines = [json.dumps({"s": "x", col: val}) for i in range(20)]
        rows = _decode(lines, [])
        _check(lines, rows)
        assert all(r["_c"] is not None for r in rows), (col, val)


@pytest.mark.parametrize("text_type", [pa.string(), pa.large_string()])
def test_a_sliced_or_large_text_batch_reads_its_own_lines(text_type: pa.DataType) -> None:
    lines = [json.dumps({"s": f"v{i}", "n": i}) for i in range(40)]
    rb = pa.RecordBatch.from_pydict({"value": pa.array(lines, text_type), "seq": list(range(40))}).slice(7, 20)
    rows = JsonLinesDecoder(FIELDS, "_c", ("seq",)).decode_batch(rb, {}).to_pylist()
    assert [(r["s"], r["n"], r["seq"]) for r in rows] == [(f"v{i}", i, i) for i in range(7, 27)]
