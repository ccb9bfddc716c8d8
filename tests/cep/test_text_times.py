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
