"""Event times parsed per distinct string (the flat scanner's codes, a file's dictionary) against parse_times per row."""

from __future__ import annotations

import random

import numpy as np
import orjson
import pytest

from cep.events import batch_times, parse_times, read_events
from cep.json_flat import flat_enabled

TEXTS = ["2017-01-02", "2017-01-03", "2017-01-02T10:00:00Z", "2017-01-02T10:00:00+02:00", "2017-01-02 10:00:00.250",
         "not a date", "now", "today", "1483315200000", "1483315200", "2199-12-31", "1969-07-20", "", " 2017-01-04 "]


def _same(got, want) -> None:
    ms, ok, why = got
    ms2, ok2, why2 = want
    assert ok.tolist() == ok2.tolist()
    assert ms[ok].tolist() == ms2[ok2].tolist()
    assert why == why2


@pytest.mark.skipif(not flat_enabled(), reason="numba is a dependency: installed with the package")
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("unit", ["ms", "s"])
def test_times_by_code_are_the_times_of_every_row(tmp_path, monkeypatch, seed, unit):
    rnd = random.Random(seed)
    pool = rnd.sample(TEXTS, rnd.randint(1, len(TEXTS)))
    nulls = rnd.choice([0.0, 0.0, 0.1])
    # new strings keep coming (the file's dictionary grows between batches) and old ones recur
    rows = []
    for i in range(rnd.randint(1, 3000)):
        if rnd.random() < nulls:
            t = None
        elif rnd.random() < 0.3:
            t = f"2017-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00Z"
        else:
            t = rnd.choice(pool)
        rows.append({"t": t, "k": f"s{i % 7}", "x": i})
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    monkeypatch.setenv("CEP_FLAT_JSON", "on")
    size = rnd.choice([1, 50, 700, 8192])
    batches = list(read_events(str(path), size))  # every batch decoded first: the dictionary at its largest
    if nulls == 0.0 or all(r["t"] is not None for r in rows):
        assert any(b.encoded("t") is not None for b in batches)  # (the scanner coded the column)
    order = batches if seed % 2 else batches[::-1]  # batches asked in either order share the file's cache
    for b in order:
        want = parse_times(b.column("t"), unit, converted=b.epoch_ms.get("t"))
        _same(batch_times(b, "t", unit), want)
        _same(batch_times(b, "t", unit), want)  # (the second time from the cache)


def test_a_batch_without_codes_is_parsed_as_it_is():
    from cep.events import batch_from_records

    b = batch_from_records([{"t": "2017-01-02"}, {"t": None}, {"t": 5}])
    assert b.encoded("t") is None
    _same(batch_times(b, "t", "s"), parse_times(b.column("t"), "s"))
    assert batch_times(b, "t", "s")[0][2] == 5000


@pytest.mark.parametrize("seed", range(8))
def test_plain_dates_parse_as_pandas_iso_parse_does(monkeypatch, seed):
    """The plain-date shortcut (cep.events._plain_dates) against the ISO-8601 parse it skips."""
    import cep.events as ev

    rnd = random.Random(seed)

    def text() -> str:
        r = rnd.random()
        if r < 0.6:  # a date of the shape, valid or not (month 13, day 31 of a short month, 1899, 2200)
            return f"{rnd.choice([1899, 1900, 1970, 2016, 2017, 2199, 2200, 9999])}-{rnd.randint(0, 13):02d}-{rnd.randint(0, 31):02d}"
        if r < 0.8:  # ten characters of the alphabet
            return "".join(rnd.choice("0123456789-/ T:+aZ") for _ in range(10))
        return rnd.choice(["today", "now", "2017-01-02T00:00Z", "2017-1-2", "٢٠١٧-٠١-٠٢", "2017-01-02 "])

    for _ in range(30):
        values = np.array([text() for _ in range(rnd.randint(1, 6))], dtype=object)
        got = parse_times(values, "ms")
        with monkeypatch.context() as m:
            m.setattr(ev, "_plain_dates", lambda texts: None)
            want = parse_times(values, "ms")
        _same(got, want)
    # and the shortcut is taken for plain dates
    assert ev._plain_dates(np.array(["2017-01-02", "1900-01-01", "2199-12-31"], dtype=object)) is not None
