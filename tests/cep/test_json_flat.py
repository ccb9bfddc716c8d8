"""The compiled flat JSON-lines scanner against the per-line decoder: same columns, or it gives the block back."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.events import batch_from_records, decode_json_line
from cep.json_flat import decode_flat, flat_enabled

pytestmark = pytest.mark.skipif(not flat_enabled(), reason="numba is a dependency: installed with the package")

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def block_of(lines: list[bytes]) -> tuple[bytes, np.ndarray]:
    block = b"".join(x + b"\n" for x in lines)
    return block, np.cumsum([len(x) + 1 for x in lines]).astype(np.int64)


def per_line(lines: list[bytes]) -> dict[str, np.ndarray]:
    recs = [decode_json_line(x, i + 1, "f") for i, x in enumerate(lines)]
    assert all(isinstance(r, dict) for r in recs)
    return batch_from_records(recs, list(range(1, len(lines) + 1)), "f").columns


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        xs, ys = got[k].tolist(), want[k].tolist()
        assert [type(v) for v in xs] == [type(v) for v in ys], k
        assert xs == ys, k
        # floats bit for bit (the sign of a zero too)
        assert [struct.pack("<d", v) for v in xs if isinstance(v, float)] == \
            [struct.pack("<d", v) for v in ys if isinstance(v, float)], k


text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
KINDS = {
    "str": text,
    "pool": st.sampled_from(["/a", "/b", "h\u00e9", "", "x\"y", "tab\there", "\\", "/images/x.gif"]),
    "int": st.integers(-(10**18) + 1, 10**18 - 1),
    "bool": st.booleans(),
    # decimals as prices and measurements are written: few digits, a shortest-form double
    "dec": st.builds(lambda m, k: m / 10**k, st.integers(-(10**12), 10**12), st.integers(0, 8)),
}


@st.composite
def flat_blocks(draw) -> tuple[list[str], list[bytes]]:
    names = draw(st.lists(st.sampled_from(["host", "time", "url", "ok", "n", "k\u00e9y", "a b"]),
                          min_size=1, max_size=5, unique=True))
    kinds = [draw(st.sampled_from(sorted(KINDS))) for _ in names]
    nulls = [draw(st.sampled_from([0.0, 0.0, 0.3, 1.0])) for _ in names]
    n = draw(st.integers(1, 300))
    spaces = draw(st.booleans())  # orjson's compact form, or spaces after ':' and ','
    rows = []
    for _ in range(n):
        row = {}
        for name, kind, p in zip(names, kinds, nulls):
            row[name] = None if draw(st.floats(0, 1)) < p else draw(KINDS[kind])
        rows.append(row)
    lines = [json_line(r, spaces) for r in rows]
    return names, lines


def json_line(row: dict, spaces: bool) -> bytes:
    if not spaces:
        return orjson.dumps(row)
    import json

    return json.dumps(row, ensure_ascii=False).encode("utf-8")


@SETTINGS
@given(flat_blocks())
def test_flat_blocks_decode_as_the_per_line_decoder_does(case):
    _names, lines = case
    block, ends = block_of(lines)
    codes: dict = {}
    got = decode_flat(block, ends, codes)
    assert got is not None  # every line flat and alike: the scanner takes it
    want = per_line(lines)
    assert_same(got, want)
    for name, (c, uniq) in codes.items():  # the dictionary encoding reproduces the column
        col = want[name]
        table = np.append(uniq, None)
        assert table[c].tolist() == col.tolist()
        ref_codes, _ = pd.factorize(col)
        assert ((c < 0) == (ref_codes < 0)).all()


@pytest.mark.parametrize("lines", [
    [b'{"a":1,"b":"x"}', b'{"b":"x","a":1}'],  # another field order
    [b'{"a":1,"b":"x"}', b'{"a":1}'],  # a field missing
    [b'{"a":1,"b":"x"}', b'{"a":1,"b":"x","c":2}'],  # a field more
    [b'{"a":1}', b'{"a":1.5}'],  # an integer and a decimal in a column
    [b'{"a":1.5}', b'{"a":1}'],
    [b'{"a":1}', b'{"a":1e3}'],  # an exponent
    [b'{"a":1.5}', b'{"a":1.7976931348623157e308}'],  # more digits than 2**53
    [b'{"a":1.5}', b'{"a":1e23}'],  # a power of ten past 10**22
    [b'{"a":1.5}', b'{"a":1e-23}'],
    [b'{"a":1.5}', b'{"a":1.}'],  # malformed decimals
    [b'{"a":1.5}', b'{"a":.5}'],
    [b'{"a":1.5}', b'{"a":1e}'],
    [b'{"a":1.5}', b'{"a":1e+}'],
    [b'{"a":1.5}', b'{"a":01.5}'],
    [b'{"a":1.5}', b'{"a":1.5.2}'],
    [b'{"a":1.5}', b'{"a":NaN}'],
    [b'{"a":1.5}', b'{"a":-Infinity}'],
    [b'{"a":1}', b'{"a":"1"}'],  # mixed kinds in a column
    [b'{"a":1}', b'{"a":[1]}'],  # nested
    [b'{"a":1}', b'{"a":123456789012345678901}'],  # beyond int64
    [b'{"a":1}', b'{"a":01}'],  # a leading zero (malformed)
    [b'{"a":1}', b'{"a":1} x'],  # trailing text
    [b'{"a":1}', b''],  # a blank line
    [b'{"a":"x"}', b'{"a":"\xff"}'],  # invalid UTF-8
    [b'{"a":"x"}', b'{"a":"\\q"}'],  # a bad escape
    [b'{"a":"x"}', b'{"a":"x\x01"}'],  # a control character
    [b'\xef\xbb\xbf{"a":1}'],  # a byte-order mark
    [b'{"a":1,"a":2}'],  # a key twice
    [b'{"a":tru}'],
])
def test_anything_else_is_given_back(lines):
    block, ends = block_of(lines)
    assert decode_flat(block, ends) is None


@SETTINGS
@given(st.lists(st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),  # shortest forms, up to 17 digits: some given back
    # decimal texts of any length and exponent (the parse must round as the per-line decoder's does)
    st.builds(lambda sign, whole, frac, ex: f"{sign}{whole}{'.' + frac if frac else ''}{ex}",
              st.sampled_from(["", "-"]), st.sampled_from(["0", "1", "9", "45", "123456789", "9007199254740993"]),
              st.text(alphabet="0123456789", max_size=20),
              st.sampled_from(["", "e0", "e5", "E-7", "e+22", "e-22", "e21", "e-30", "e290"]))),
    min_size=1, max_size=40))
def test_decimals_are_read_exactly_or_given_back(values):
    lines = [b'{"x":' + (orjson.dumps(v) if isinstance(v, float) else v.encode()) + b',"k":"a"}' for v in values]
    block, ends = block_of(lines)
    got = decode_flat(block, ends)
    want = per_line(lines)
    if got is not None:
        assert_same(got, want)
    if all(isinstance(v, float) and v == v and abs(v) < 1e15 and len(repr(v)) <= 12 for v in values):
        assert got is not None  # a few digits: read by the scanner


def test_prices_take_the_scanner():
    lines = [b'{"date":"2013-02-08","open":45.07,"close":45.08,"volume":1824755,"symbol":"A"}',
             b'{"date":"2013-02-08","open":-0.0,"close":1e-7,"volume":8407500,"symbol":"AAL"}',
             b'{"date":"2013-02-11","open":78.34,"close":null,"volume":0,"symbol":"A"}']
    block, ends = block_of(lines)
    got = decode_flat(block, ends)
    assert got is not None
    assert_same(got, per_line(lines))
    assert got["open"].dtype == np.float64 and got["close"].dtype == object
    assert got["open"].tolist() == [45.07, -0.0, 78.34] and got["close"].tolist() == [45.08, 1e-7, None]


def test_escapes_decode_as_json_and_a_last_line_may_lack_its_newline():
    lines = [b'{"u":"\\u00e9\\ud83d\\ude00","n":-0}', b'{"u":"a\\"b\\\\c\\/","n":7}', b'{"u":"\\u00e9\\ud83d\\ude00","n":3}']
    block = b"\n".join(lines)
    ends = np.array([len(lines[0]) + 1, len(lines[0]) + len(lines[1]) + 2, len(block)], dtype=np.int64)
    got = decode_flat(block, ends)
    assert got is not None
    assert_same(got, per_line(lines))
    assert got["u"].tolist() == ["\u00e9\U0001F600", 'a"b\\c/', "\u00e9\U0001F600"]


def test_files_read_with_the_scanner_give_the_batches_of_the_line_decoder(tmp_path, monkeypatch):
    from tests.cep.test_json_blocks import assert_same

    rows = [{"host": f"h{i % 7}", "time": 1_000 * i, "url": f"/u{i % 11}\u00e9", "ok": i % 3 == 0,
             "bytes": None if i % 5 == 0 else i} for i in range(400)]
    lines = [orjson.dumps(r) for r in rows]
    lines[150] = b'{"host": "h1", "time": 5'  # a malformed line: that block goes per line
    lines[260] = b'{"time": 3, "host": "h2"}'  # another field order: that block goes to Arrow
    p = tmp_path / "events.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n")
    monkeypatch.setenv("CEP_FLAT_JSON", "on")
    assert_same(p, (1, 7, 100, 8192))


def test_the_scanner_setting_is_checked(monkeypatch):
    from cep.json_flat import FLAT_MIN_BYTES, flat_for

    monkeypatch.setenv("CEP_FLAT_JSON", "off")
    assert not flat_for(FLAT_MIN_BYTES)
    monkeypatch.setenv("CEP_FLAT_JSON", "on")
    assert flat_for(10)
    monkeypatch.setenv("CEP_FLAT_JSON", "auto")
    assert flat_for(FLAT_MIN_BYTES)
    monkeypatch.setenv("CEP_FLAT_JSON", "fast")
    with pytest.raises(ValueError, match="CEP_FLAT_JSON='fast': expected 'auto'"):
        flat_for(10)


def test_auto_takes_the_scanner_for_smaller_files_once_numba_is_imported(monkeypatch):
    import sys

    import numba  # noqa: F401 - imported, as the rules' compiled paths import it

    import cep.json_flat as jf

    monkeypatch.setenv("CEP_FLAT_JSON", "auto")
    monkeypatch.setattr(jf, "_compiled", {})  # the scanner not loaded yet in this process
    assert jf.flat_for(jf.FLAT_WITH_NUMBA_BYTES)
    assert not jf.flat_for(jf.FLAT_WITH_NUMBA_BYTES - 1)
    assert not jf.flat_for(None)  # (an in-memory file: size unknown)
    monkeypatch.delitem(sys.modules, "numba")
    assert not jf.flat_for(jf.FLAT_WITH_NUMBA_BYTES)
    assert jf.flat_for(jf.FLAT_MIN_BYTES)


def test_newlines_compiled_and_numpy_agree() -> None:
    import cep.json_flat as jf

    jf._kernels()  # the compiled finder is loaded with the scanner
    rng = np.random.default_rng(15)
    for size in (0, 1, 7, 1000, 65_537):
        buf = rng.choice(np.array([10, 32, 97, 123], dtype=np.uint8), size)
        want = np.flatnonzero(buf == 10)
        got = jf.newlines(buf)
        assert got.dtype == np.int64 and got.tolist() == want.tolist()


def test_dictionary_codes_of_long_look_alike_strings() -> None:
    # strings of every length 0-40 sharing long prefixes and differing in one byte anywhere: the
    # hash reads four bytes a step, so words and tails must both tell them apart
    rng = np.random.default_rng(16)
    base = "/shuttle/missions/sts-69/images/KSC-95EC"
    vals = []
    for _ in range(3000):
        s = base[: int(rng.integers(0, len(base) + 1))]
        if s and rng.random() < 0.5:
            j = int(rng.integers(0, len(s)))
            s = s[:j] + "xyz"[int(rng.integers(0, 3))] + s[j + 1:]
        vals.append(s)
    lines = [orjson.dumps({"u": v, "n": i}) for i, v in enumerate(vals)]
    block, ends = block_of(lines)
    codes: dict = {}
    got = decode_flat(block, ends, codes)
    assert got is not None
    want_codes, want_uniq = pd.factorize(np.array(vals, dtype=object))
    assert codes["u"][0].tolist() == want_codes.tolist()
    assert codes["u"][1].tolist() == list(want_uniq)
    assert got["u"].tolist() == vals


def test_a_few_escaped_strings_among_many_plain_ones() -> None:
    # the plain strings of a column are decoded together, the escaped ones one by one: in place
    rng = np.random.default_rng(17)
    vals = []
    for i in range(500):
        r = rng.random()
        vals.append(f"/p{i % 37}\\u00e9" if r < 0.02 else f'/q"{i % 11}' if r < 0.04 else f"/r{i % 53}/\u00e9")
    lines = [orjson.dumps({"u": v}) if "\\u" not in v else b'{"u":"' + v.encode() + b'"}' for v in vals]
    block, ends = block_of(lines)
    assert_same(decode_flat(block, ends), per_line(lines))


def test_a_file_that_switches_to_the_scanner_mid_way_decodes_as_the_line_decoder(tmp_path, monkeypatch):
    """Under auto a file's first block goes to Arrow and, once the rules import numba, the rest to
    the scanner: decimals, integers and columns mixing them across and within blocks, NULLs,
    escaped strings, numbers at 2**53; every batch bit for bit as the line decoder's."""
    import random

    import cep.events as ev

    rnd = random.Random(7)
    lines = []
    for i in range(12_000):
        blk = i // 1000
        if blk % 4 == 1:
            p: object = rnd.randint(-1000, 1000)
        elif blk % 4 == 2 and rnd.random() < 0.01:
            p = rnd.randint(0, 9)  # an integer among decimals: that block goes to Arrow
        else:
            p = round(rnd.uniform(-1000, 1000), rnd.randint(0, 6))
        txt = orjson.dumps(p)
        r = rnd.random()
        if r < 0.01:
            txt = b"null"
        elif r < 0.0103:  # (rare: one of the last two sends its block to Arrow)
            txt = rnd.choice([b"-0.0", b"0.0", b"1E+2", b"1.5e-0", b"9007199254740992e0", b"900719925474099.2",
                              b"1e22", b"1e-22", b"1e23", b"0.1e1", b"12345678901234567890.5"])
        q = rnd.choice([2**53, 2**53 - 1, -(2**53), 7, 0]) if rnd.random() < 0.05 else rnd.randint(-10**6, 10**6)
        sym = rnd.choice(["A", "B\\u00e9", 'C\\"x', "D", "E/F"])
        lines.append(b'{"sym":"' + sym.encode() + b'","p":' + txt + b',"q":' + str(q).encode() + b',"b":'
                     + rnd.choice([b"true", b"false", b"null"]) + b"}")
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    def canon(batches) -> list:
        out = []
        for b in batches:
            for k, c in b.columns.items():
                out.append((k, str(c.dtype), [struct.pack("<d", v) if isinstance(v, float) else (type(v).__name__, v)
                                              for v in c.tolist()]))
            out.append(("lines", b.lines.tolist()))
        return out

    monkeypatch.setenv("CEP_JSONL_DECODER", "lines")
    want = canon(ev.read_events(str(path), 700))
    monkeypatch.setenv("CEP_JSONL_DECODER", "blocks")
    asked = []

    def switching(size):  # Arrow for the first block, the scanner after (numba imported by then)
        asked.append(size)
        return len(asked) > 1

    monkeypatch.setattr(ev, "flat_for", switching)
    got = list(ev.read_events(str(path), 700))
    assert canon(got) == want
    assert not got[0].dict_codes and sum(bool(b.dict_codes) for b in got) >= 3  # (blocks mixing kinds go to Arrow)
    # decimals read by the scanner (an object column where a NULL is among them)
    assert any(b.dict_codes and any(isinstance(v, float) for v in b.columns["p"].tolist()) for b in got)
