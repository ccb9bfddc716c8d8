"""Seeded streams and analytics rules for the Spark tests of windowed analytics rules."""

from __future__ import annotations

from typing import Any

from tests.spark_udf.workload import stream

ANALYTICS_YAML = """
rules:
  - name: tumble
    kind: analytics
    lateness: 1500
    sql: |
      SELECT k, COUNT(*) AS n, SUM(px) AS total, AVG(px) AS mean, MIN(tag) AS first_tag, MAX(px) AS top,
             COUNT(DISTINCT u) AS users, APPROX_COUNT_DISTINCT(u) AS approx_users, window_start, window_end
      FROM ticks
      GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)
      HAVING COUNT(*) >= 2 AND MAX(px) < 9
  - name: hop
    kind: analytics
    lateness: 1000
    sql: |
      SELECT k, COUNT(*) AS n, PREV_WINDOW(COUNT(*)) AS n_before, APPROX_TOP_K(tag, 2) AS tags,
             APPROX_COUNT(tag, 'hot') AS hot, window_start
      FROM ticks
      WHERE px > 1
      GROUP BY k, HOP(ts, INTERVAL '500' MILLISECOND, INTERVAL '2' SECOND)
      HAVING COUNT(*) > PREV_WINDOW(COUNT(*))
  - name: session
    kind: analytics
    lateness: 1500
    sql: |
      SELECT k, COUNT(*) AS n, FIRST_SEEN(u) AS new_users, MAX(ts) AS last_ts,
             (window_end - window_start) / 1000 AS seconds, window_start, window_end
      FROM ticks
      GROUP BY k, SESSION(ts, INTERVAL '600' MILLISECOND)
      HAVING COUNT(*) >= 2
  - name: slide
    kind: analytics
    lateness: 1000
    sql: |
      SELECT k, COUNT(*) AS n, SUM(px) AS total, APPROX_COUNT_DISTINCT(u) AS users, px, window_end AS at
      FROM ticks
      GROUP BY k, SLIDE(ts, INTERVAL '1' SECOND)
      HAVING COUNT(*) >= 3
  - name: overall
    kind: analytics
    sql: |
      SELECT COUNT(*) AS n, APPROX_COUNT_DISTINCT(k) AS keys, FIRST_SEEN(u) AS new_users,
             APPROX_TOP_K(k, 3) AS busiest, window_start
      FROM ticks
      GROUP BY TUMBLE(ts, INTERVAL '2' SECOND)
"""
"""Five analytics rules over one stream: TUMBLE with retractions (HAVING MAX(px) < 9 can turn
false), HOP with WHERE, PREV_WINDOW, heavy hitters and Count-Min, SESSION with FIRST_SEEN,
SLIDE, and a rule without keys (one group) with lateness 0."""

SCHEMA = "k string, ts long, px long, tag string, u string"
COLUMNS = ["k", "ts", "px", "tag", "u"]
TYPES = {"k": "string", "ts": "bigint", "px": "bigint", "tag": "string", "u": "string"}


def analytics_stream(seed: int, files: int = 4, sort_files: bool = False, disorder: int = 1200) -> list[list[Any]]:
    """Files of 60 events over keys a, b, c with a user field ``u`` (26 values), rising about
    75 ms an event with up to ``disorder`` ms of disorder (1.2 s: inside most rules' lateness).

    From the second file on, one event is 6 s behind everything before its file (late for every
    rule); the second file holds a row without a key, a row without a time and a malformed line.
    ``sort_files`` orders each file by time (disorder only across files).
    """
    return stream(seed, files, per_file=60, keys="abc", step=150, disorder=disorder, late_from=1, late_by=6000,
                  users=26, sort_files=sort_files)
