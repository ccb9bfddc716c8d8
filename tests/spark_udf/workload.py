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
           bad: bool = True, start: int = 1_000_000, step: int = 400, disorder: int = 1000,
           late_from: int = 2, late_by: int = 5000, users: int = 0, sort_files: bool = False) -> list[list[Any]]:
    """Files of events: times rise by up to ``step`` ms an event, with up to ``disorder`` ms of
    disorder (1 s: inside every pattern rule's lateness).

    From file ``late_from`` on, one event is ``late_by`` ms behind everything before its file
    (late for every rule in every engine); with ``bad``, the second file holds a row without a
    key, a row without a time and a malformed line. ``users`` adds a field ``u`` with that many
    values; ``sort_files`` orders each file by time (disorder only across files).
    """
    rng = random.Random(seed)
    base = start
    out: list[list[Any]] = []
    seen_max = 0
    for f in range(files):
        rows: list[Any] = []
        for _ in range(per_file):
            base += rng.randint(0, step)
            ts = base + rng.randint(0, disorder)
            rows.append({"k": rng.choice(keys), "ts": ts, "px": rng.randint(0, 9),
                         "tag": rng.choice(["hot", "cold", "warm", "warm"])})
            if users:
                rows[-1]["u"] = f"u{rng.randint(0, users - 1)}"
        if late and f >= late_from:
            rows.insert(rng.randint(0, len(rows)), {"k": rng.choice(keys), "ts": seen_max - late_by, "px": 1,
                                                    "tag": "warm", **({"u": "u0"} if users else {})})
        if sort_files:
            rows.sort(key=lambda r: r["ts"])
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


def embedded(rules: Any, files: list[list[Any]], finish: bool = False) -> Any:
    """The embedded engine's output over the files, one batch each; unfinished (a stream has no
    end, so both engines stop at the final watermark) unless ``finish``."""
    from cep.engine import Engine

    eng = Engine(rules)
    out = eng.process([])
    for rows in files:
        out.extend(eng.process(events(rows)))
    if finish:
        out.extend(eng.finish())
    return out
