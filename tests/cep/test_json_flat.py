"""The compiled flat JSON-lines scanner against the per-line decoder: same columns, or it gives the block back."""

from __future__ import annotations

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


text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
KINDS = {
    "str": text,
    "pool": st.sampled_from(["/a", "/b", "h\u00e9", "", "x\"y", "tab\there", "\\", "/images/x.gif"]),
    "int": st.integers(-(10**18) + 1, 10**18 - 1),
    "bool": st.booleans(),
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
    [b'{"a":1}', b'{"a":1.5}'],  # a decimal
    [b'{"a":1}', b'{"a":1e3}'],  # an exponent
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
