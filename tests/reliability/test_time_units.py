"""Event times from pandas, Arrow and numpy are read by their own unit and zone (issue 13, item 1).

pandas 3 parses strings to ``datetime64[us]``; reading such a column as nanoseconds made every
event time 1,000 times too small, so ``WITHIN INTERVAL '5' MINUTE`` matched events 10 minutes
apart and hourly windows merged, without a word.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from cep.engine import Engine
from cep.events import parse_times, to_batch
from patterns.rules import parse_rules

UNITS = ["s", "ms", "us", "ns"]
ISO = ["2017-07-28T07:00:00Z", "2017-07-28T07:10:00Z", "1969-12-31T23:59:59Z"]
WANT = [1_501_225_200_000, 1_501_225_800_000, -1_000]

WITHIN = """
rules:
  - name: quick_pair
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (
        ORDER BY ts MEASURES A.v AS a, B.v AS b
        PATTERN (A B) WITHIN INTERVAL '5' MINUTE
        DEFINE A AS A.v = 1, B AS B.v = 2)
"""

HOURLY = """
rules:
  - name: per_hour
    kind: analytics
    sql: |
      SELECT COUNT(*) AS n, window_start FROM s GROUP BY TUMBLE(ts, INTERVAL '1' HOUR)
"""


def frames(unit: str) -> dict[str, pd.DataFrame]:
    utc = pd.Series(pd.to_datetime(ISO, utc=True)).astype(f"datetime64[{unit}, UTC]")
    return {
        "naive": pd.DataFrame({"ts": utc.dt.tz_localize(None)}),
        "utc": pd.DataFrame({"ts": utc}),
        "berlin": pd.DataFrame({"ts": utc.dt.tz_convert("Europe/Berlin")}),
    }


@pytest.mark.parametrize("unit", UNITS)
def test_pandas_columns_of_every_unit_and_zone_give_epoch_ms(unit: str) -> None:
    for name, df in frames(unit).items():
        assert df["ts"].dt.unit == unit
        ms, ok, _ = parse_times(to_batch(df).column("ts"))
        assert ok.all() and ms.tolist() == WANT, (unit, name)


def test_pandas_default_parse_is_microseconds_and_reads_right() -> None:
    df = pd.DataFrame({"ts": pd.to_datetime(ISO[:2])})  # what a user writes; [us] under pandas 3
    ms, ok, _ = parse_times(to_batch(df).column("ts"))
    assert ms.tolist() == WANT[:2]


@pytest.mark.parametrize("unit", UNITS)
def test_arrow_timestamps_of_every_unit_and_zone_give_epoch_ms(unit: str) -> None:
    for tz in (None, "UTC", "America/New_York"):
        arr = pa.array(WANT, pa.timestamp("ms", tz=tz)).cast(pa.timestamp(unit, tz=tz))
        table = pa.table({"ts": pa.concat_arrays([arr, pa.nulls(1, arr.type)])})
        col = to_batch(table).column("ts")
        assert col.tolist() == WANT + [None], (unit, tz)


def test_arrow_dates_and_sub_millisecond_times_round_down() -> None:
    table = pa.table({
        "d32": pa.array([dt.date(2017, 7, 28), dt.date(1969, 12, 31)], pa.date32()),
        "d64": pa.array([dt.date(2017, 7, 28), dt.date(1969, 12, 31)], pa.date64()),
        "us": pa.array([1_500, -1_500], pa.timestamp("us")),
    })
    b = to_batch(table)
    assert b.column("d32").tolist() == b.column("d64").tolist() == [1_501_200_000_000, -86_400_000]
    assert b.column("us").tolist() == [1, -2]  # floor, as Arrow's and Spark's own casts


@pytest.mark.parametrize("unit", UNITS)
def test_numpy_datetime64_arrays_and_objects(unit: str) -> None:
    arr = np.array([s.rstrip("Z") for s in ISO], dtype=f"datetime64[{unit}]")
    assert parse_times(arr)[0].tolist() == WANT
    records = [{"ts": v} for v in arr]  # numpy scalars inside Python records
    assert parse_times(to_batch(records).column("ts"))[0].tolist() == WANT


def test_python_datetimes_dates_and_timestamps_in_records() -> None:
    berlin = dt.timezone(dt.timedelta(hours=2))
    values = [dt.datetime(2017, 7, 28, 7), dt.datetime(2017, 7, 28, 9, 10, tzinfo=berlin),
              pd.Timestamp("1969-12-31T23:59:59Z"), dt.date(2017, 7, 28), pd.NaT]
    ms, ok, why = parse_times(to_batch([{"ts": v} for v in values]).column("ts"))
    assert ms[:4].tolist() == [WANT[0], WANT[1], WANT[2], 1_501_200_000_000]
    assert ok.tolist() == [True] * 4 + [False] and "NaT" in why[4]


@pytest.mark.parametrize("unit", UNITS)
def test_within_five_minutes_does_not_match_events_ten_minutes_apart(unit: str) -> None:
    times = ["2017-07-28T07:00", "2017-07-28T07:10", "2017-07-28T07:20", "2017-07-28T07:21"]
    df = pd.DataFrame({"ts": pd.to_datetime(times).as_unit(unit), "v": [1, 2, 1, 2]})
    out = Engine(parse_rules(WITHIN)).run([df])
    assert [(m["a"], m["b"]) for m in out.matches] == [(1, 2)]  # 07:20 -> 07:21 only


@pytest.mark.parametrize("unit", ["s", "us"])
def test_hourly_windows_stay_hourly(unit: str) -> None:
    hours = pd.date_range("2017-07-28T07:00", periods=6 * 60, freq="min").as_unit(unit)
    out = Engine(parse_rules(HOURLY)).run([pd.DataFrame({"ts": hours})])
    assert sorted((r["window_start"], r["n"]) for r in out.matches) == [
        (1_501_225_200_000 + h * 3_600_000, 60) for h in range(6)]
