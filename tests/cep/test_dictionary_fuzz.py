"""Differential fuzzing of the file-wide string dictionaries: cep run over several files, small blocks and dictionaries, bad lines, against the per-line decoder."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.json_flat as jf
from cep.json_flat import flat_enabled

SETTINGS = settings(max_examples=3, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

needs_numba = pytest.mark.skipif(not flat_enabled(), reason="numba is a dependency: installed with the package")

# one pool for every column: the same string in the host, url, a and b columns, escaped or not
POOL = ["x", "y", "", "h\u00e9", "/p/1", "/p/2", 'q"x', "z" * 40]

RULES = """
rules:
  - name: by_four
    kind: analytics
    lateness: 3 seconds
    sql: |
      SELECT host, url, a, b, COUNT(*) AS n, COUNT(DISTINCT url) AS urls, COUNT(DISTINCT a) AS avals,
             APPROX_COUNT_DISTINCT(b) AS approx, window_start
      FROM requests
      GROUP BY host, url, a, b, TUMBLE(time, INTERVAL '5' SECOND)
  - name: by_host
    kind: analytics
    sql: |
      SELECT host, COUNT(DISTINCT url) AS urls, COUNT(DISTINCT b) AS bs, APPROX_COUNT_DISTINCT(a) AS approx,
             window_start
      FROM requests WHERE b <> 'y' OR b IS NULL
      GROUP BY host, TUMBLE(time, INTERVAL '10' SECOND)
  - name: sketches
    kind: analytics
    sql: |
      SELECT a, APPROX_TOP_K(url, 2) AS top, APPROX_COUNT(b, 'x') AS xs, MIN(url) AS lo, MAX(b) AS hi,
             COUNT(DISTINCT host) AS hosts, window_start
      FROM requests
      GROUP BY a, HOP(time, INTERVAL '2' SECOND, INTERVAL '6' SECOND)
  - name: same_url_twice
    sql: |
      SELECT * FROM requests MATCH_RECOGNIZE (PARTITION BY host ORDER BY time
        MEASURES A.url AS url, B.a AS a, LAST(B.time) AS t
        PATTERN (A B) WITHIN INTERVAL '4' SECOND
        DEFINE B AS B.url = A.url)
"""


def _value(rnd: random.Random, i: int) -> str | None:
    r = rnd.randrange(12)
    if r == 0:
        return None
    if r == 1:
        return f"/new/{i}"
    return rnd.choice(POOL)


def _line(rec: dict, escape: bool, bad: bool) -> bytes:
    raw = orjson.dumps(rec)
    if escape:  # the same string spelt with an escape: one value, two spellings
        raw = raw.replace("\u00e9".encode(), b"\\u00e9")
    if bad:  # an undecodable byte inside a string: the per-line decoder reports the line
        raw = raw.replace(b'"host":"', b'"host":"\xff', 1)
    return raw


def _file(rnd: random.Random, f: int, n: int, bad_every: int) -> list[bytes]:
    """Lines whose strings recur and arrive new, NULLs, escapes, a few late rows and bad lines."""
    lines = []
    for i in range(n):
        rec = {"host": _value(rnd, i), "url": _value(rnd, i), "a": _value(rnd, i), "b": _value(rnd, i),
               "time": 1000 * (i // 2) + 137 * f - (2500 if rnd.randrange(16) == 0 else 0)}
        bad = rec["host"] is not None and bad_every > 0 and rnd.randrange(bad_every) == 0
        lines.append(_line(rec, rnd.random() < 0.5, bad))
    return lines


@st.composite
def inputs(draw) -> list[list[bytes]]:
    rnd = random.Random(draw(st.integers(0, 1 << 30)))
    # one file most often: several files are merged into batches without the decoder's codes
    nfiles = draw(st.sampled_from([1, 1, 2, 3]))
    bad_every = draw(st.sampled_from([0, 0, 400]))  # a bad line sends its block to the per-line decoder
    return [_file(rnd, f, draw(st.integers(1, 250)), bad_every) for f in range(nfiles)]


def _run(tmp: Path, paths: list[Path], tag: str, batch: int) -> tuple[bytes, bytes]:
    from cep.cli import main

    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    out, err = tmp / f"out_{tag}.jsonl", tmp / f"err_{tag}.jsonl"
    args = ["run", str(rules), "-q", "-o", str(out), "--errors", str(err), "--batch-size", str(batch), "--overwrite"]
    for p in paths:
        args += ["--input", str(p)]
    assert main(args) in (0, 1)
    return out.read_bytes(), err.read_bytes() if err.exists() else b""


@needs_numba
@SETTINGS
@given(inputs(), st.sampled_from([37, 100, 200]), st.sampled_from([3, 17, 1 << 18]))
def test_cep_run_rows_match_across_decoders_files_and_dictionary_resets(tmp_path, monkeypatch, files, batch, max_codes):
    paths = []
    for k, lines in enumerate(files):
        p = tmp_path / f"in{k}.jsonl"
        p.write_bytes(b"\n".join(lines) + b"\n")
        paths.append(p)
    got = {}
    for tag, env in [("arrow", {"CEP_FLAT_JSON": "off"}), ("flat", {"CEP_FLAT_JSON": "on"}),
                     ("no_numba", {"CEP_FLAT_JSON": "on", "CEP_NO_NUMBA": "1"})]:
        monkeypatch.delenv("CEP_NO_NUMBA", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setattr(jf, "DICT_MAX_CODES", max_codes)
        got[tag] = _run(tmp_path, paths, tag, batch)
    assert got["flat"] == got["arrow"], "flat scanner with file-wide dictionaries differs from the per-line decoder"
    assert got["no_numba"] == got["arrow"]


def test_four_key_columns_with_large_file_wide_dictionaries_keep_their_groups_apart():
    """A file-wide dictionary holds up to 2**18 strings per column, so the key columns' codes
    combined in mixed radix pass 2**63 with four of them: two keys must still be two groups."""
    from cep.analytics import WindowOperator
    from cep.events import EventBatch
    from patterns.analytics import compile_analytics

    spec = compile_analytics("SELECT a, b, c, d, COUNT(*) AS n FROM t GROUP BY a, b, c, d, "
                             "TUMBLE(ts, INTERVAL '4' MILLISECOND)")
    size = 1 << 17  # 2**68 combinations: 0 and 2**13 in the first column meet modulo 2**64
    uniq = np.array([f"s{i}" for i in range(size)], dtype=object)
    codes = {"a": [0, 8192, 8192, 1], "b": [0, 0, 0, 5], "c": [0, 0, 0, 7], "d": [0, 0, 0, size - 1]}
    cols, enc = {}, {}
    for k, c in codes.items():
        code = np.array(c, dtype=np.int64)
        cols[k] = uniq[code]
        enc[k] = (cols[k], code, uniq)
    cols["ts"] = np.array([1, 2, 3, 3], dtype=np.int64)
    op = WindowOperator(spec, name="r")
    rows = op.process(EventBatch(cols, 4, None, "x", dict_codes=enc)).matches + op.finish().matches
    got = sorted((r["a"], r["b"], r["c"], r["d"], r["n"]) for r in rows)
    # the reference: the same rows counted by their values
    want: dict[tuple, int] = {}
    for i in range(4):
        t = tuple(cols[k][i] for k in "abcd")
        want[t] = want.get(t, 0) + 1
    assert got == sorted((*t, n) for t, n in want.items())


def test_hashes_stay_kept_for_more_dictionaries_than_the_old_limit_and_go_with_them(monkeypatch):
    """Ten string columns of one file: ten live dictionaries, used in turn each batch. Before, an
    operator kept eight and cleared them all at the ninth, so every batch hashed every column's
    dictionary again from its start (2.2x the CPU of a run over ten COUNT(DISTINCT) columns);
    a dictionary no longer held anywhere (its file done, or replaced) leaves the cache."""
    import gc

    from cep.analytics.kernels import _StringHashes
    from cep.json_flat import StringDictionary

    cache = _StringHashes()
    dicts = [StringDictionary() for _ in range(10)]
    strings = np.array([f"s{i}" for i in range(50)], dtype=object)
    asked: list[int] = []
    get = _StringHashes.get

    def counting(self, uniq):
        asked.append(len(uniq))
        return get(self, uniq)

    monkeypatch.setattr(_StringHashes, "get", counting)
    for m in (10, 20, 30):  # three batches, each growing every dictionary by ten strings
        for d in dicts:
            h0, _h1, _ne = cache.of_dictionary(d, strings[:m])
            assert len(h0) == m
    assert asked == [10] * 30  # only the strings new to each dictionary: nothing asked twice
    assert len(cache.dicts) == 10
    del dicts[:5], d
    gc.collect()
    nxt = StringDictionary()  # the next file's: the freed ones' entries go when it comes
    cache.of_dictionary(nxt, strings[:30])
    assert len(cache.dicts) == 6
