"""The engine's JSON lines decoder (spark_udf/json_lines.py) against Spark's own JSON reader, row for row.

Each file is read by Spark's reader with the schema and a malformed-record column (PERMISSIVE, as
``cep spark backfill`` reads it) and, as Spark's text reader splits it into lines, by
:class:`~spark_udf.json_lines.JsonLinesDecoder` in several text batches (so that both the flat
scanner's block path and the per-line path run); the rows must be equal field for field, a
malformed record in one a malformed record in the other with the same text. The lines the
decoder deliberately reads otherwise (its module docstring) are pinned on both sides apart.
tests/spark_udf/test_json_lines_decoder.py checks the decoder against ``json.loads`` without Spark.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_udf.json_lines import JsonLinesDecoder

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

# every type the decoder takes, and two names that differ only in case (the session reads with case)
FIELDS = [("s", "string"), ("S", "bigint"), ("n", "bigint"), ("i", "int"), ("h", "smallint"), ("t", "tinyint"),
          ("d", "double"), ("b", "boolean")]
DDL = ", ".join(f"`{n}` {t}" for n, t in FIELDS)
CORRUPT = "_corrupt_record"

# JSON texts of values: those that fit each type, and those that do not (a string column takes
# every value: a number, boolean, array or object as its text)
FIT: dict[str, list[str]] = {
    "string": ['"plain"', '""', '"a\\"b"', '"back\\\\slash"', '"\\u00e9\\ud83d\\ude00"', '"é😀 ü"', '"tab\\tnew\\nline"',
               '"\\/\\b\\f\\r"', '"NaN"', '"  spaced  "', '"\\u0000"'],
    "bigint": ["0", "-0", "1", "-1", str(2**63 - 1), str(-(2**63)), str(2**62 + 12345), str(2**53 + 1)],
    "int": ["0", "-0", str(2**31 - 1), str(-(2**31)), "65536", "-7"],
    "smallint": ["0", str(2**15 - 1), str(-(2**15)), "-300"],
    "tinyint": ["0", "127", "-128", "-1", "128", "200", "255"],  # 128..255: the byte of the same bits, as Spark reads it
    "double": ["0", "-0", "0.0", "-0.0", "1.5", "-2.25e-7", "1E+300", "1e-320", "5e-324", "1.7976931348623157e308",
               "3.14159265358979323846264338327950288", "0.1000000000000000055511151231257827", str(2**53 + 1),
               str(2**64 + 3), "1" + "0" * 400, "-1" + "0" * 400, '"NaN"', '"Infinity"', '"+Infinity"', '"+INF"',
               '"-Infinity"', '"-INF"', "123456789012345678901234567890.5e-10"],
    "boolean": ["true", "false"],
}
MISFIT: dict[str, list[str]] = {
    "string": ["1.50", "-0", "1e5", "-1.0E+10", "true", "false", "[1, {\"a\": 2}]", '{"k": [null]}', "[]", "{}",
               str(2**70)],
    "bigint": [str(2**63), str(-(2**63) - 1), "1.0", "1e2", '"5"', "true", "[1]", '{"a": 1}', '""'],
    "int": [str(2**31), str(-(2**31) - 1), "2.5", '"7"', "false"],
    "smallint": [str(2**15), str(-(2**15) - 1), "65535", "0.5"],
    "tinyint": ["256", "-129", "1000", "1.0", '"1"'],
    "double": ['"INF"', '"inf"', '"-NaN"', '"1.5"', '" 1.5"', '""', "true", "[1.0]", "{}", '"Infinity "'],
    "boolean": ["1", "0", '"true"', '"false"', "0.0", "[]", '"yes"'],
}

HAND_WRITTEN = [
    '{"s": "plain", "S": 1, "n": 2, "i": 3, "h": 4, "t": 5, "d": 6.5, "b": true}',
    '{"s": "x", "S": 7}', '{"S": 8, "s": "y"}', '{"s": 1.50, "n": 1}', '{"s": [ 1 ,2 ], "d": "NaN"}',
    '{"s": {"a" : 1}}', '{"s": -0, "d": -0}', '{"d": -0.0}', '{"n": -0}',
    '{"s": "x", "s": "y"}', '{"s": "x", "s": null}', '{"s": null, "s": 3}', '{"n": 1, "n": 2}',
    '{"n": 1, "n": 1.5}', '{"n": 1.5, "n": 1}', '{"b": 3, "b": true}', '{"b": true, "b": 3}',
    '{"d": "Infinity", "d": "INF"}', '{"n": 5, "n": null}', '{"n": null, "n": 5}', '{"\\u006e": 1.5, "n": 2}',
    '{"\\u0073": "escaped name"}', '{"s": "a", "n": 1.5, "i": 3}', '{"t": 200, "h": 40000, "b": false}',
    '{"s": "x", "extra": [1, 2], "more": {"n": "no"}}', '{}', "", "   ", "\t", "[1,2]", "3", '"str"', "null",
    "true", '{"s": "x", ', '{"s": "x"', '{"s": [1, 2', "{", "}", '{"s": "x",}', '{,}', '{"n": 01}', '{"n": +1}',
    '{"d": .5}', '{"d": 1.}', '{"s": nul}', '{"s": "tab\tinside"}', '{"s": "ctl\x01"}', '  {"s" : "sp" , "n" : 5 }  ',
    '{"s": "trailing"}   ', '\t{"s": "leading"}', "\ufeff" + '{"s": 12.0, "n": 1}', '{"d": 1e-400}', '{"d": -1e-400}',
    '{"d": 2.4703282292062328e-324}', '{"d": 4.9e-324}', '{"S": "case", "s": 5}', '{"s": "\\u00e9\\ud83d\\ude00"}',
]


def _write(path: Path, lines: list[str], crlf: set[int] = frozenset()) -> str:  # type: ignore[assignment]
    with open(path, "wb") as f:
        for k, line in enumerate(lines):
            f.write(line.encode("utf-8") + (b"\r\n" if k in crlf else b"\n"))
    return str(path)


def _line(rng: random.Random) -> str:
    """A line of random fields: missing, NULL, fitting or not, repeated, in random order, with extras."""
    parts = []
    for name, typ in FIELDS:
        r = rng.random()
        if r < 0.12:
            continue
        text = "null" if r < 0.2 else rng.choice(MISFIT[typ] if r > 0.9 else FIT[typ])
        parts.append((name, text))
        if rng.random() < 0.04:  # a repeated name: each value read in turn
            parts.append((name, rng.choice(FIT[typ] + MISFIT[typ] + ["null"])))
    if rng.random() < 0.1:
        parts.append(("extra", rng.choice(["[1, 2]", '{"n": 1.5}', '"x"'])))
    rng.shuffle(parts)
    sep = rng.choice([", ", ",", " , "])
    return "{" + sep.join(f'"{k}": {v}' for k, v in parts) + "}"


def _flat_run(rng: random.Random, n: int) -> list[str]:
    """``n`` lines the flat scanner takes: the same fields in the same order, one kind of value each."""
    names = [f for f in FIELDS if rng.random() < 0.8] or FIELDS[:1]
    lines = []
    for _ in range(n):
        vals = []
        for name, typ in names:
            if rng.random() < 0.05:
                v: Any = None
            elif typ == "string":
                v = rng.choice(["p", "q", "r", "é", f"k{rng.randint(0, 9)}"])
            elif typ == "boolean":
                v = rng.random() < 0.5
            elif typ == "double":
                v = rng.choice([rng.randint(-1000, 1000) / 8, round(rng.uniform(-1e4, 1e4), 2), 0.5])
            else:
                # (the scanner gives back integers from 2**60 on: the limits are in the random lines)
                lim = {"bigint": 2**52, "int": 2**31, "smallint": 2**15, "tinyint": 2**7}[typ]
                v = rng.randint(-lim, lim - 1)
            vals.append(f'"{name}": {json.dumps(v, ensure_ascii=False)}')
        lines.append("{" + ", ".join(vals) + "}")
    return lines


def _random_lines(seed: int) -> list[str]:
    rng = random.Random(seed)
    lines: list[str] = []
    while len(lines) < 700:
        r = rng.random()
        if r < 0.3:
            lines.extend(_flat_run(rng, rng.randint(20, 90)))
        elif r < 0.9:
            lines.append(_line(rng))
        elif r < 0.95:
            cut = _line(rng)
            lines.append(cut[:rng.randint(1, max(1, len(cut) - 1))])  # a truncated line
        else:
            lines.append(rng.choice(["", "  ", "[1, 2]", "3", "null", '"x"', "{}"]))
    return lines


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


def _decoded(lines: list[str], cuts: list[int], corrupt: str | None) -> list[dict[str, Any]]:
    dec = JsonLinesDecoder(FIELDS, corrupt)
    bounds = [0, *cuts, len(lines)]
    batches = [pa.RecordBatch.from_pydict({"value": pa.array(lines[a:b], pa.string())}) for a, b in zip(bounds, bounds[1:])]
    return [row for rb in dec.decode(iter(batches)) for row in rb.to_pylist()]


def _compare(spark: Any, path: str, cuts: list[int]) -> None:
    """Spark's reader and the decoder row for row over one file, with and without a malformed-record column."""
    lines = [r.value for r in spark.read.text(path).collect()]  # the lines as the map tasks get them
    for corrupt in (CORRUPT, None):
        ddl = DDL + (f", {corrupt} string" if corrupt else "")
        want = [r.asDict() for r in spark.read.schema(ddl).json(path).collect()]
        got = _decoded(lines, cuts, corrupt)
        assert len(got) == len(want), (corrupt, len(got), len(want))
        for k, (g, w) in enumerate(zip(got, want)):
            assert list(g) == list(w)
            bad = [c for c in w if not ((g[c] is None and w[c] is None) or _same(g[c], w[c]))]
            assert not bad, (k, bad, g, w)


def test_hand_written_lines_read_as_spark_reads_them(case_sensitive: Any, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CEP_FLAT_JSON", "on")
    path = _write(tmp_path / "hand.json", HAND_WRITTEN, crlf={3, 30})
    _compare(case_sensitive, path, [5, 17, 40])
    # some rows are malformed, some partial (a value that fits kept beside one that does not)
    rows = [r.asDict() for r in case_sensitive.read.schema(DDL + f", {CORRUPT} string").json(path).collect()]
    assert sum(r[CORRUPT] is not None for r in rows) > 20
    assert any(r[CORRUPT] is not None and r["s"] == "a" for r in rows)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_lines_read_as_spark_reads_them(case_sensitive: Any, tmp_path: Path, seed: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from cep.json_flat import decode_flat

    monkeypatch.setenv("CEP_FLAT_JSON", "on")
    flat: list[bool] = []
    flat_of = JsonLinesDecoder._flat
    monkeypatch.setattr(JsonLinesDecoder, "_flat", lambda self, cols, codes, n: (
        lambda got: (flat.append(got is not None), got)[1])(flat_of(self, cols, codes, n)))
    lines = _random_lines(seed)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(lines)), 12))
    path = _write(tmp_path / "random.json", lines, crlf=set(rng.sample(range(len(lines)), 5)))
    _compare(case_sensitive, path, cuts)
    # a flat batch (a run's lines, cut in its middle) went through the scanner, where numba is present
    run = _flat_run(random.Random(seed), 60)
    flat.clear()
    path = _write(tmp_path / "flat.json", run)
    _compare(case_sensitive, path, [25])
    scanner = decode_flat(b'{"a":1}\n', [8]) is not None
    assert flat == ([True, True] * 2 if scanner else [])


def test_lines_the_engine_refuses_are_malformed_where_spark_reads_them(case_sensitive: Any, tmp_path: Path) -> None:
    spark = case_sensitive
    lines = [b'{"d": NaN}', b'{"d": Infinity}', b'{"d": -Infinity}', b'{"d": 1e400}', b'{"s": "\\ud83d"}',
             b'{"s": "\\udc00x"}', b"{'s': 'x'}", b'{"s": "x"} junk', b'{"s": "x"}{"s": "y"}', b'[{"s": "a"}, {"s": "b"}]',
             b"[]", b'{"s": "bad \xff utf8"}', b'{"s": "ok", "d": 1}']
    path = tmp_path / "refused.json"
    path.write_bytes(b"\n".join(lines) + b"\n")
    ddl = "s string, d double"
    spark_rows = [(r.s, r.d, r[CORRUPT]) for r in spark.read.schema(f"{ddl}, {CORRUPT} string").json(str(path)).collect()]
    nan = spark_rows[0][1]
    assert math.isnan(nan)
    inf = float("inf")
    # Spark's reader: the non-numbers and the overflow as doubles, a lone surrogate as '?', single
    # quotes, text after the object ignored, a row per object of an array (none for []); invalid UTF-8 malformed
    assert spark_rows[1:] == [(None, inf, None), (None, -inf, None), (None, inf, None), ("?", None, None),
                              ("?x", None, None), ("x", None, None), ("x", None, None), ("x", None, None),
                              ("a", None, None), ("b", None, None), (None, None, '{"s": "bad \ufffd utf8"}'),
                              ("ok", 1.0, None)]
    # the decoder, in a Spark task over the lines as Spark's text reader gives them (the bytes as
    # they are): each a malformed record with every column NULL, as cep run reports them
    dec = JsonLinesDecoder([("s", "string"), ("d", "double")], CORRUPT)
    got = [(r.s, r.d, r[CORRUPT]) for r in spark.read.text(str(path)).mapInArrow(
        dec.decode, f"{ddl}, {CORRUPT} string").collect()]
    texts = [line.decode("utf-8", errors="replace") for line in lines]
    assert got == [(None, None, t) for t in texts[:-1]] + [("ok", 1.0, None)]


def test_lines_past_jacksons_limits_are_malformed_in_spark_and_read_by_the_engine(case_sensitive: Any,
                                                                                  tmp_path: Path) -> None:
    # Spark's reader (Jackson's StreamReadConstraints) refuses a number of more than 1,000 characters
    # and a value nested more than 1,000 levels deep; the engine's decoder reads them as cep run does
    # (orjson nests to 1,024 levels; the per-line decoder reads integers to 4,300 digits): the rows
    # differ, as docs/spark.md says. (A string of more than 20,000,000 characters is the third limit.)
    spark = case_sensitive
    long_int, long_fraction, deep = "1" + "0" * 1500, "0." + "1" * 1500, "[" * 1000 + "]" * 1000
    lines = [f'{{"s": {long_int}, "n": 1}}', f'{{"d": {long_fraction}, "n": 2}}', f'{{"s": {deep}, "n": 3}}',
             '{"s": "ok", "n": 4}']
    path = _write(tmp_path / "limits.json", lines)
    ddl = "s string, d double, n bigint"
    spark_rows = [(r.s, r.d, r.n, r[CORRUPT] is not None)
                  for r in spark.read.schema(f"{ddl}, {CORRUPT} string").json(path).collect()]
    assert [r[3] for r in spark_rows] == [True, True, True, False] and spark_rows[3] == ("ok", None, 4, False)
    dec = JsonLinesDecoder([("s", "string"), ("d", "double"), ("n", "bigint")], CORRUPT)
    rows = next(dec.decode(iter([pa.RecordBatch.from_pydict({"value": lines})]))).to_pylist()
    got = [(r["s"], r["d"], r["n"], r[CORRUPT]) for r in rows]
    assert got == [(long_int, None, 1, None), (None, float(long_fraction), 2, None), (deep, None, 3, None),
                   ("ok", None, 4, None)]
