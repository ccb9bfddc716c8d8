"""The block JSON-lines decoder (Arrow) against the per-line decoder (orjson): same batches, same bad lines."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.cli import main
from cep.events import EventBatch, _jsonl_batches, read_events
from cep.json_blocks import DECODER_ENV, jsonl_decoder

REPO = Path(__file__).resolve().parents[2]
BATCH_SIZES = (1, 3, 7, 100, 8192)


def decoded(path: Path, batch_size: int, decoder: str) -> list[EventBatch]:
    return list(_jsonl_batches(path, batch_size, decoder=decoder))


def assert_same(path: Path, batch_sizes: tuple[int, ...] = BATCH_SIZES) -> list[EventBatch]:
    """Both decoders give the same batches: columns (order, dtype, values and their Python types),
    line numbers, bad lines (line, reason, text)."""
    for size in batch_sizes:
        old, new = decoded(path, size, "lines"), decoded(path, size, "blocks")
        assert len(old) == len(new), size
        for a, b in zip(old, new):
            assert (a.n, a.source, list(a.columns)) == (b.n, b.source, list(b.columns))
            for k in a.columns:
                x, y = a.columns[k], b.columns[k]
                assert x.dtype == y.dtype, k
                xs, ys = x.tolist(), y.tolist()
                assert [type(v) for v in xs] == [type(v) for v in ys], k
                assert repr(xs) == repr(ys), k  # repr: NaN-free, and -0.0 apart from 0.0
            assert a.lines.tolist() == b.lines.tolist()
            assert [x.to_dict() for x in a.bad] == [x.to_dict() for x in b.bad]
    return old


def write(tmp_path: Path, lines: list[bytes], end: bytes = b"\n") -> Path:
    p = tmp_path / "events.jsonl"
    p.write_bytes(b"\n".join(lines) + end)
    return p


def good(i: int) -> bytes:
    return orjson.dumps({"host": f"h{i % 5}", "time": 1_000 * i, "url": f"/u{i % 7}", "bytes": i})


@pytest.mark.parametrize("where", [0, 4, 9])
def test_a_malformed_line_at_the_start_middle_or_end_of_a_block_is_an_error_row_with_its_line(tmp_path, where):
    lines = [good(i) for i in range(10)]
    lines[where] = b'{"host": "h1", "time": 5'
    p = write(tmp_path, lines)
    batches = assert_same(p)
    got = decoded(p, 10, "blocks")
    assert [(b.line, b.source, b.reason[:14], b.text) for x in got for b in x.bad] == [
        (where + 1, str(p), "malformed JSON", '{"host": "h1", "time": 5')]
    assert sum(b.n for b in batches) == 9


def test_every_kind_of_awkward_line(tmp_path):
    long = orjson.dumps({"host": "h", "time": 1, "url": "/" + "x" * 3_000_000})
    lines = [
        good(0),
        b"\xef\xbb\xbf" + good(1),  # a byte order mark mid-stream (files cat'ed together)
        b'{"host": "h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "time": 2, "url": "\\u00e9\\ud83d\\ude00"}',  # unicode
        b'{"time": 3}',  # missing fields
        b'{"host": "h", "time": 9223372036854775808}',  # beyond int64
        b'{"host": "h", "time": 18446744073709551616}',  # beyond uint64 (orjson: a float)
        b'{"host": "h", "time": 4.0, "bytes": 1e3}',  # whole decimals
        b'{"host": "h", "time": 5, "nested": {"a": [1, 2.5, "x"]}}',  # nested
        b"",  # blank
        b"   \t",  # white space
        b"[1, 2]",  # not an object
        b'{"host": "h", "time": NaN}',  # orjson refuses NaN, Arrow reads it
        b'{"host": "h", "time": 6, "time": 7}',  # a key twice
        b'{"host": "h\xff", "time": 8}',  # invalid UTF-8
        b'{"host": "\\ud800", "time": 9}',  # lone surrogate
        b'{"host": 5, "time": "2017-01-01"}',  # mixed types; a date-like string
        b'{"host": "h", "time": "2017-01-01T00:00:00Z", "flag": true}',
        b'{"host": null, "time": 10, "flag": false}',
        long,
        b'{"host": "h", "time": 11}\r',
        b'{"host": "h", "time": 12',  # unterminated last line, no newline
    ]
    p = write(tmp_path, lines, end=b"")
    assert_same(p)


def test_number_columns_keep_ints_floats_and_nulls_as_the_line_decoder_does(tmp_path):
    lines = [b'{"a": 1, "b": 1.5, "c": 1, "d": true, "e": null}', b'{"a": 2, "b": 2, "c": null, "d": null}',
             b'{"a": 3, "b": -0.0, "c": 3, "d": false, "e": 2.5}']
    p = write(tmp_path, lines)
    [b] = assert_same(p, (10,))
    assert b.column("a").dtype == np.int64 and b.column("b").tolist() == [1.5, 2, -0.0]
    assert [type(v) for v in b.column("b").tolist()] == [float, int, float]


def test_strings_that_look_like_times_stay_strings(tmp_path):
    p = write(tmp_path, [orjson.dumps({"id": i, "date": f"2003-02-{19 + i % 3}"}) for i in range(50)])
    for b in assert_same(p, (7, 100)):
        assert all(isinstance(v, str) for v in b.column("date").tolist())


def test_blank_lines_and_a_missing_last_newline(tmp_path):
    p = write(tmp_path, [good(0), b"", good(1), b"", b"", good(2)], end=b"")
    batches = assert_same(p)
    assert [n for b in batches for n in b.lines.tolist()] == [1, 3, 6]


def test_the_decoder_switch(monkeypatch, tmp_path):
    assert jsonl_decoder() == "blocks"
    monkeypatch.setenv(DECODER_ENV, "lines")
    assert jsonl_decoder() == "lines"
    monkeypatch.setenv(DECODER_ENV, "arrow")
    with pytest.raises(ValueError, match="expected 'blocks'"):
        jsonl_decoder()


def test_the_bundled_data_decodes_the_same():
    for path in sorted((REPO / "rules" / "data").glob("*.jsonl")):
        assert_same(path, (7, 8192))


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
    st.sampled_from(["2017-01-01", "2017-01-01T10:00:00Z", "1e5", ""]),
)
_values = st.one_of(_scalars, st.lists(_scalars, max_size=3), st.dictionaries(st.text(max_size=3), _scalars, max_size=2))
_field = st.sampled_from(["a", "b", "time", "é", "x y"])
_records = st.lists(st.one_of(
    st.dictionaries(_field, _scalars, max_size=4),
    st.dictionaries(_field, _values, max_size=4),
    st.sampled_from([b"", b"{", b"[1]", b"nul", b'{"a": NaN}', b"\xef\xbb\xbf{}"]),
), max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=_records, typed=st.sampled_from(["mixed", "ints", "floats", "strings"]))
def test_random_json_lines_decode_the_same(tmp_path, records, typed):
    lines = []
    for r in records:
        if isinstance(r, dict) and typed != "mixed":  # columns of one type: the fast path's own ground
            r = {k: (hash(str(v)) % 1000 if typed == "ints" else float(len(str(v))) + 0.5 if typed == "floats"
                     else str(v)) for k, v in r.items()}
        lines.append(r if isinstance(r, bytes) else json.dumps(r).encode())
    p = write(tmp_path, lines)
    assert_same(p, (1, 4, 100))


def readme_commands() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in (REPO / "README.md").read_text().splitlines():
        m = re.search(r"`(cep run rules/[^`]+)`", line) if line.startswith("| [`rules/") else None
        if m:
            args = shlex.split(m.group(1))[1:]
            out[Path(args[1]).name] = [str(REPO / a) if a.startswith("rules/") else
                                       a.partition("=")[0] + "=" + str(REPO / a.partition("=")[2])
                                       if "=rules/" in a else a for a in args]
    return out


def test_every_example_rule_file_gives_the_same_rows_with_either_decoder(tmp_path, monkeypatch):
    commands = readme_commands()
    assert len(commands) == len(list((REPO / "rules").glob("*.yaml"))) - len(list((REPO / "rules").glob("*.test.yaml")))
    for name, args in commands.items():
        got = {}
        for decoder in ("lines", "blocks"):
            monkeypatch.setenv(DECODER_ENV, decoder)
            out, errs = tmp_path / f"{name}.{decoder}.jsonl", tmp_path / f"{name}.{decoder}.errors.jsonl"
            assert main(args + ["--output", str(out), "--errors", str(errs), "--quiet"]) == 0, name
            got[decoder] = (out.read_bytes(), errs.read_bytes())
        assert got["lines"] == got["blocks"], name
        assert got["blocks"][0], name


def test_read_events_uses_blocks_for_files_only(tmp_path):
    p = write(tmp_path, [good(i) for i in range(5)])
    [b] = list(read_events(p, 100))
    assert b.lines.tolist() == [1, 2, 3, 4, 5] and b.column("time").dtype == np.int64


@pytest.mark.parametrize("line", [b"null", b"true", b"5", b'"s"', b"[]", b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
                                  b'{"a": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_000 + b"}", b'{"a": 1} null'])
def test_lines_that_crash_arrows_parser_go_to_the_line_decoder(tmp_path, line):
    """pyarrow 26's JSON reader crashes the process on a first line ``null`` and on deep nesting."""
    for lines in ([line, good(1)], [good(0), line, good(2)]):
        p = write(tmp_path, lines)
        assert_same(p, (1, 100))


def test_reading_on_from_a_line_number(tmp_path):
    p = write(tmp_path, [good(i) for i in range(20)] + [b"oops"] + [good(i) for i in range(20, 30)])
    for start in (0, 5, 20, 21, 40):
        old = list(_jsonl_batches(p, 7, start, decoder="lines"))
        new = list(_jsonl_batches(p, 7, start, decoder="blocks"))
        assert [b.lines.tolist() for b in old] == [b.lines.tolist() for b in new]
        assert [[x.line for x in b.bad] for b in old] == [[x.line for x in b.bad] for b in new]


def test_a_file_that_goes_per_line_for_a_while_comes_back_to_blocks(tmp_path):
    nested = [orjson.dumps({"time": i, "tags": ["a", i]}) for i in range(40)]
    p = write(tmp_path, nested + [good(i) for i in range(100)] + nested[:5])
    assert_same(p, (3, 7))


@pytest.mark.parametrize("compiled", [False, True])
def test_line_blocks_take_the_same_lines_with_either_newline_finder(monkeypatch, compiled: bool) -> None:
    import io

    import cep.json_flat as jf
    from cep.json_blocks import LineBlocks

    if compiled:
        if not jf.flat_enabled():
            pytest.skip("numba is a dependency: installed with the package")
        jf._kernels()
    else:
        monkeypatch.setattr(jf, "_compiled", {})  # numpy's finder, as without numba
    rng = np.random.default_rng(18)
    lines = [b"x" * int(rng.integers(0, 40)) for _ in range(3000)]
    data = b"\n".join(lines)  # the last line without its newline
    monkeypatch.setattr("cep.json_blocks._READ_BYTES", 997)  # reads that cut lines
    blocks = LineBlocks(io.BytesIO(data))
    got: list[bytes] = []
    while True:
        _first, block, ends = blocks.take(int(rng.integers(1, 50)))
        if not len(ends):
            break
        starts = np.concatenate(([0], ends[:-1]))
        got += [block[a:b].rstrip(b"\n") for a, b in zip(starts.tolist(), ends.tolist())]
    assert got == lines
