"""Seeded streams and rules shared by the Spark operator tests."""

from __future__ import annotations

import random
from typing import Any

RULES_YAML = """
rules:
  - name: within
    lateness: 1500
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, LAST(B.ts) AS t1, COUNT(B.*) AS nb, AVG(B.px) AS avg_px, A.tag AS tag
        PATTERN (A B+) WITHIN INTERVAL '3' SECOND
        DEFINE A AS px < 5, B AS px >= 5)
  - name: all_rows
    lateness: 1500
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts
        MEASURES CLASSIFIER() AS cls, MATCH_NUMBER() AS mn, COUNT(*) AS n
        ALL ROWS PER MATCH
        PATTERN (A B C)
        DEFINE A AS px < 4, B AS px > PREV(px), C AS px > PREV(px))
  - name: global
    lateness: 2500
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        ORDER BY ts
        MEASURES X.k AS hot_key, Y.k AS cold_key, Y.ts - X.ts AS gap
        PATTERN (X Z* Y)
        DEFINE X AS tag = 'hot', Z AS tag <> 'cold', Y AS tag = 'cold')
"""

SCHEMA = "k string, ts long, px long, tag string"
COLUMNS = ["k", "ts", "px", "tag"]
TYPES = {"k": "string", "ts": "bigint", "px": "bigint", "tag": "string"}


def stream(seed: int, files: int = 4, per_file: int = 40, keys: str = "abcd", late: bool = True,
           bad: bool = True, start: int = 1_000_000) -> list[list[Any]]:
    """Files of events: times rise with up to 1 s of disorder (inside every rule's lateness).

    From the third file on, one event is 5 s behind everything before its file (late for every
    rule in every engine); with ``bad``, the second file holds a row without a key, a row
    without a time and a malformed line.
    """
    rng = random.Random(seed)
    base = start
    out: list[list[Any]] = []
    seen_max = 0
    for f in range(files):
        rows: list[Any] = []
        for _ in range(per_file):
            base += rng.randint(0, 400)
            ts = base + rng.randint(0, 1000)
            rows.append({"k": rng.choice(keys), "ts": ts, "px": rng.randint(0, 9),
                         "tag": rng.choice(["hot", "cold", "warm", "warm"])})
        if late and f >= 2:
            rows.insert(rng.randint(0, len(rows)), {"k": rng.choice(keys), "ts": seen_max - 5000, "px": 1, "tag": "warm"})
        if bad and f == 1:
            rows.insert(3, {"k": None, "ts": rows[2]["ts"], "px": 2, "tag": "warm"})
            rows.insert(7, {"k": "a", "ts": None, "px": 2, "tag": "warm"})
            rows.insert(9, '{"k": "a", "ts": 12, ')
        seen_max = max([seen_max] + [r["ts"] for r in rows if isinstance(r, dict) and r.get("ts") is not None])
        out.append(rows)
    return out


def events(rows: list[Any]) -> list[dict[str, Any]]:
    """The well-formed rows of a file, as the engine gets them from JSON (NULL fields left out)."""
    return [{k: v for k, v in r.items() if v is not None} for r in rows if isinstance(r, dict)]
