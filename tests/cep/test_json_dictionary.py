"""String dictionaries kept across a file's blocks: the same columns as the per-line decoder, codes stable across blocks, same analytics rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.json_flat as jf
from cep.events import read_events
from cep.json_flat import StringDictionary, decode_flat, flat_enabled
from tests.cep.test_json_flat import assert_same, block_of, per_line

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

needs_numba = pytest.mark.skipif(not flat_enabled(), reason="numba is a dependency: installed with the package")

# plain, escaped and look-alike spellings; "é" and "\u00e9" are one string spelt two ways
POOL = ["/a", "/b", "", "h\u00e9", "/images/KSC-95EC-0423.jpg", "/images/KSC-95EC-0424.jpg", 'q"x', "\\", "tab\there"]


def line(u: str | None, h: str, i: int, escaped: bool) -> bytes:
    if escaped and u is not None and "\u00e9" in u:
        return b'{"host":' + orjson.dumps(h) + b',"url":"' + u.replace("\u00e9", "\\u00e9").encode() + b'","n":' + str(i).encode() + b"}"
    return orjson.dumps({"host": h, "url": u, "n": i})


@st.composite
def files(draw) -> tuple[list[bytes], list[int]]:
    """Lines whose strings recur across blocks, new ones arriving late, NULLs and escapes; and the block cuts."""
    n = draw(st.integers(1, 400))
    fresh = draw(st.integers(0, 3))  # how often a never-seen URL comes
    lines = []
    for i in range(n):
        r = draw(st.integers(0, 9))
        u: str | None = None if r == 0 else f"/new/{i}" if r <= fresh else draw(st.sampled_from(POOL))
        lines.append(line(u, f"h{draw(st.integers(0, 40))}", i, draw(st.booleans())))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(n - 1, 1)), max_size=12))) - {n})
    return lines, cuts


@needs_numba
@SETTINGS
@given(files(), st.sampled_from([None, 7, 64]))
def test_blocks_sharing_dictionaries_decode_as_the_per_line_decoder(case, max_codes):
    with pytest.MonkeyPatch.context() as mp:
        if max_codes is not None:  # small limits: dictionaries start afresh in the middle of the file
            mp.setattr(jf, "DICT_MAX_CODES", max_codes)
        check_blocks(*case, max_codes)


def check_blocks(lines: list[bytes], cuts: list[int], max_codes: int | None) -> None:
    dicts: dict[str, StringDictionary] = {}
    seen: dict[int, tuple[StringDictionary, dict[int, str]]] = {}  # per dictionary (held): each code's string
    for lo, hi in zip([0, *cuts], [*cuts, len(lines)]):
        part = lines[lo:hi]
        block, ends = block_of(part)
        codes: dict = {}
        got = decode_flat(block, ends, codes, dicts)
        assert got is not None
        assert_same(got, per_line(part))
        for name, (c, uniq) in codes.items():
            d = dicts[name]
            assert uniq.tolist() == d.values().tolist()  # this block's strings are the dictionary's so far
            table = np.append(uniq, None)
            assert table[c].tolist() == got[name].tolist()
            mine = seen.setdefault(id(d), (d, {}))[1]
            for j in np.flatnonzero(c >= 0).tolist():  # a code, once given, keeps its string
                mine.setdefault(int(c[j]), got[name][j])
                assert uniq[c[j]] == mine[int(c[j])]
            assert len(uniq) <= max(max_codes or jf.DICT_MAX_CODES, hi - lo)


@needs_numba
def test_a_dictionary_grows_past_its_first_room_and_keeps_its_codes():
    d = StringDictionary()
    rng = np.random.default_rng(15)
    vals = [f"/u{int(v)}" for v in rng.integers(0, 3000, 6000)]
    block, ends = block_of([orjson.dumps({"u": v}) for v in vals])
    codes: dict = {}
    got = decode_flat(block, ends, codes, {"u": d})
    assert got is not None and got["u"].tolist() == vals
    first = list(dict.fromkeys(vals))  # first-seen order
    assert d.values().tolist() == first and len(d) > 512
    again: dict = {}
    decode_flat(block, ends, again, {"u": d})
    assert again["u"][0].tolist() == codes["u"][0].tolist() and len(d) == len(first)


@needs_numba
def test_an_undecodable_string_gives_the_block_back_and_the_next_block_starts_afresh():
    dicts: dict[str, StringDictionary] = {}
    good, ends = block_of([b'{"u":"/a"}', b'{"u":"/b"}'])
    assert decode_flat(good, ends, {}, dicts) is not None
    d = dicts["u"]
    bad, bends = block_of([b'{"u":"/a"}', b'{"u":"\xff"}'])  # invalid UTF-8
    assert decode_flat(bad, bends, {}, dicts) is None
    assert "u" not in dicts  # codes without strings are not kept
    codes: dict = {}
    assert decode_flat(good, ends, codes, dicts) is not None
    assert dicts["u"] is not d and codes["u"][1].tolist() == ["/a", "/b"]


@needs_numba
def test_a_file_read_with_the_scanner_shares_one_dictionary_per_column(tmp_path, monkeypatch):
    monkeypatch.setenv("CEP_FLAT_JSON", "on")
    p = tmp_path / "events.jsonl"
    p.write_bytes(b"".join(orjson.dumps({"host": f"h{i % 9}", "time": i, "url": f"/u{i % 13}"}) + b"\n" for i in range(500)))
    batches = list(read_events(p, batch_size=64))
    ds = {id(b.dictionary("url")) for b in batches}
    assert len(ds) == 1 and None not in {b.dictionary("url") for b in batches}
    for b in batches:
        codes, uniq = b.encoded("url")
        assert uniq[codes].tolist() == b.column("url").tolist()
    sub = batches[1].take(np.array([3, 1]))
    assert sub.dictionary("url") is batches[1].dictionary("url")
    sub.columns["url"] = sub.columns["url"].copy()  # a replaced column has no codes, nor a dictionary
    assert sub.encoded("url") is None and sub.dictionary("url") is None


RULE = """\
rules:
  - name: per_host
    kind: analytics
    lateness: 5 seconds
    sql: |
      SELECT host, COUNT(*) AS n, COUNT(DISTINCT url) AS urls, APPROX_COUNT_DISTINCT(url) AS approx,
             window_start
      FROM requests
      GROUP BY host, TUMBLE(time, INTERVAL '10' SECOND)
  - name: per_url
    kind: analytics
    sql: |
      SELECT url, COUNT(DISTINCT host) AS hosts, window_start
      FROM requests
      GROUP BY url, TUMBLE(time, INTERVAL '20' SECOND)
"""


def _run(tmp_path: Path, data: Path, tag: str) -> bytes:
    from cep.cli import main

    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE)
    out = tmp_path / f"out_{tag}.jsonl"
    assert main(["run", str(rules), "--input", str(data), "-q", "-o", str(out), "--batch-size", "97"]) == 0
    return out.read_bytes()


def test_analytics_rows_are_the_same_with_file_wide_dictionaries_and_without(tmp_path, monkeypatch):
    # hosts and URLs recur across batches, new ones keep coming, some late, NULL and empty URLs,
    # one URL spelt with and without an escape: every path gives the same bytes
    rng = np.random.default_rng(16)
    rows = []
    for i in range(3000):
        t = 1000 * (i // 3) - (4000 if rng.random() < 0.05 else 0)
        r = rng.random()
        url = None if r < 0.03 else "" if r < 0.06 else f"/n{i}" if r < 0.2 else f"/p{int(rng.integers(0, 60))}\u00e9"
        rows.append(line(url, f"h{int(rng.integers(0, 30))}", t, bool(rng.random() < 0.3)).replace(b'"n":', b'"time":'))
    data = tmp_path / "log.jsonl"
    data.write_bytes(b"\n".join(rows) + b"\n")
    outputs = {}
    for tag, env in [("flat", {"CEP_FLAT_JSON": "on"}), ("arrow", {"CEP_FLAT_JSON": "off"}),
                     ("no_numba", {"CEP_FLAT_JSON": "on", "CEP_NO_NUMBA": "1"}), ("reset", {"CEP_FLAT_JSON": "on"})]:
        monkeypatch.delenv("CEP_NO_NUMBA", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setattr(jf, "DICT_MAX_CODES", 50 if tag == "reset" else 1 << 18)
        outputs[tag] = _run(tmp_path, data, tag)
    assert outputs["flat"].count(b"\n") > 300
    assert outputs["flat"] == outputs["arrow"] == outputs["no_numba"] == outputs["reset"]


def test_hashes_kept_per_dictionary_are_the_sketches_hashes():
    from cep.analytics.kernels import _StringHashes
    from sketches import hash128

    cache = _StringHashes()
    d1, d2 = object(), object()
    strings = np.array(["/a", "", "/b", "h\u00e9", "/c", "/a"], dtype=object)
    for d, m in [(d1, 2), (d1, 5), (d2, 3), (d1, 4), (d1, 6)]:  # growing, another dictionary, an older prefix
        h0, h1, nonempty = cache.of_dictionary(d, strings[:m])
        want = hash128(np.array([s if s else "x" for s in strings[:m]], dtype=object))
        full = [s != "" for s in strings[:m]]
        assert nonempty.tolist() == full
        assert h0[nonempty].tolist() == want.h0[np.array(full)].tolist()
        assert h1[nonempty].tolist() == want.h1[np.array(full)].tolist()
