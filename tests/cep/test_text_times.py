"""Event times that are all text are parsed one distinct text at a time, with the per-value loop's results."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cep.events import parse_times

# dates, times with fractions and offsets, numeric text, and texts that are not times
TEXTS = st.sampled_from([
    "2013-02-08", "2017-12-29", "2013-02-08T10:00:00Z", "2013-02-08T10:00:00+01:00",
    "2017-12-29T23:59:59.999Z", "2020-02-29T00:00:00-05:30", "1970-01-01T00:00:02Z",
    "1500", "-20", "not a time", "2013-13-40", "",
])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(texts=st.lists(TEXTS, min_size=1, max_size=40))
def test_all_text_batch_equals_the_per_value_loop(texts):
    """A trailing integer sends the same texts down the loop: every time, flag and reason agree."""
    fast = parse_times(np.array(texts, dtype=object))
    loop = parse_times(np.array(texts + [0], dtype=object))
    assert fast[0].tolist() == loop[0][:-1].tolist()
    assert fast[1].tolist() == loop[1][:-1].tolist()
    assert fast[2] == loop[2][:-1]


def test_repeated_dates_and_a_bad_text():
    ms, ok, why = parse_times(np.array(["2013-02-08", "2013-02-08", "2013-02-11", "x"], dtype=object))
    assert ms[:3].tolist() == [1360281600000, 1360281600000, 1360540800000]
    assert ok.tolist() == [True, True, True, False]
    assert why[3] == "'x' is neither epoch milliseconds nor an ISO-8601 time"


@pytest.mark.parametrize("word", ["now", "today"])
def test_now_and_today_are_not_event_times(word):
    """pandas reads "now" and "today" as the wall clock: as event times they would be the time of
    parsing (a different time on each run), so they are refused with the reason any bad text gets,
    on the all-text path and on the per-value loop alike."""
    for values in ([word, "2013-02-08"], [word, "2013-02-08", 0]):
        ms, ok, why = parse_times(np.array(values, dtype=object))
        assert ok.tolist()[:2] == [False, True]
        assert why[0] == f"{word!r} is neither epoch milliseconds nor an ISO-8601 time"
        assert ms[1] == 1360281600000


@pytest.mark.parametrize("tail", [[], [0]])
def test_strings_of_digits_are_numbers_in_the_unit(tail):
    """docs/semantics.md: a string of digits is a number in the rule's time unit, also when
    ISO-8601 could read it as a year or a basic date ("2000", "20130208", "-20"); on both paths."""
    texts = ["2000", "20130208", "-20", " 1500 ", "1360281600000"]
    ms, ok, why = parse_times(np.array(texts + tail, dtype=object))
    assert ms[:5].tolist() == [2000, 20130208, -20, 1500, 1360281600000]
    assert ok[:5].all() and why[:5] == [None] * 5
    ms, ok, _ = parse_times(np.array(texts + tail, dtype=object), "s")
    assert ms[:5].tolist() == [2_000_000, 20_130_208_000, -20_000, 1_500_000, 1360281600000 * 1000]
    assert ok[:4].all() and not ok[4]  # (the last is past 2200 as seconds)


@pytest.mark.parametrize("text", ["²", "1²", "--5", "-", "٣"])
def test_odd_digit_texts_get_a_reason_not_an_exception(text):
    """Texts that look like digits to str.isdigit but are not integers to int() ("²", "--5") are
    bad event times with a reason, not an exception that stops the batch; other decimal digits
    ("٣", Arabic-Indic three) are read as int() reads them."""
    ms, ok, why = parse_times(np.array([text, "2013-02-08"], dtype=object))
    assert ok[1] and ms[1] == 1360281600000
    if text == "٣":
        assert ok[0] and ms[0] == 3
    else:
        assert not ok[0] and why[0] == f"{text!r} is neither epoch milliseconds nor an ISO-8601 time"


def test_an_odd_digit_text_in_an_engine_is_one_bad_event():
    """Through the engine (the unit hint looks at the first batch's numeric texts too): the row
    is reported with its reason and counted, the other rows match."""
    from cep.engine import Engine
    from patterns.rules import parse_rules

    rules = parse_rules("""
rules:
  - name: up
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0, B.ts AS t1
        PATTERN (A B) DEFINE B AS x > PREV(x))
""")
    eng = Engine(rules)
    out = eng.process([{"k": 0, "ts": "1²", "x": 0}, {"k": 0, "ts": "--5", "x": 0},
                       {"k": 0, "ts": "1000", "x": 1}, {"k": 0, "ts": "2000", "x": 2}])
    rows = out.matches + eng.finish().matches
    assert [r["reason"] for r in out.errors] == [
        "event-time field 'ts': '1²' is neither epoch milliseconds nor an ISO-8601 time",
        "event-time field 'ts': '--5' is neither epoch milliseconds nor an ISO-8601 time"]
    assert [(r["t0"], r["t1"]) for r in rows] == [("1000", "2000")]
    assert eng.counts()["up"].errors == 2
