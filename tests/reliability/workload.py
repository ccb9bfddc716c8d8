"""Seeded inputs and rules shared by the reliability tests: a log directory and a rule file."""

from __future__ import annotations

import json
import random
from pathlib import Path

RULES = """
rules:
  - name: rise
    description: three or more rising prices of one symbol within ten seconds
    lateness: 200
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY sym ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, LAST(B.ts) AS t1, COUNT(B.*) AS n, MATCH_NUMBER() AS m
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A B{2,})
        WITHIN INTERVAL '10' SECOND
        DEFINE B AS B.px > PREV(B.px))
  - name: dip
    description: every row of a fall below 90% of the start, all rows per match
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY sym ORDER BY ts
        MEASURES CLASSIFIER() AS cls, FIRST(A.px) AS start_px
        ALL ROWS PER MATCH
        PATTERN (A C*? D)
        WITHIN INTERVAL '5' SECOND
        DEFINE D AS D.px < A.px * 0.9)
  - name: stall
    description: a rise then a drop back within two seconds; attempts the time ends are timeout rows
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY sym ORDER BY ts
        MEASURES A.ts AS t0, LAST(U.px) AS top, D.ts AS t1
        ONE ROW PER MATCH WITH TIMEOUT ROWS
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A U+ D)
        WITHIN INTERVAL '2' SECOND
        DEFINE U AS U.px > PREV(U.px), D AS D.px < A.px)
"""

CHANGED_RULE = """
  - name: big_jump
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY sym ORDER BY ts
        MEASURES A.ts AS t0, B.px - A.px AS jump
        PATTERN (A B)
        DEFINE B AS B.px > A.px * 1.3)
"""


def tick_lines(n: int, seed: int, t0: int = 0, keys: int = 40, bad_every: int = 997) -> list[str]:
    """``n`` JSON lines of ticks, mostly in time order, with late rows and a few bad lines."""
    rng = random.Random(seed)
    out = []
    t = t0
    px = {f"S{k}": 100.0 for k in range(keys)}
    for i in range(n):
        t += rng.choice((0, 5, 20, 50, 100))
        if i % bad_every == bad_every - 1:
            out.append(rng.choice(('{"sym": "S1", "ts": ', "not json", "[1, 2]", '{"sym": "S2", "ts": "yesterday", "px": 1}')))
            continue
        sym = f"S{rng.randrange(keys)}"
        px[sym] = round(max(1.0, px[sym] * rng.uniform(0.85, 1.12)), 2)
        ts = t - rng.choice((0, 0, 0, 0, 0, 0, 0, 100, 300)) if i > 10 else t
        out.append(json.dumps({"sym": sym, "ts": ts, "px": px[sym]}))
    return out


def write_log_dir(root: Path, files: int, lines_per_file: int, seed: int = 7) -> Path:
    """A directory of ``files`` JSON lines files (names in time order) plus a dot-file to ignore."""
    d = root / "logs"
    d.mkdir(parents=True, exist_ok=True)
    t = 0
    for f in range(files):
        lines = tick_lines(lines_per_file, seed + f, t0=t)
        t = json.loads(next(x for x in reversed(lines) if x.startswith('{"sym"')))["ts"]
        (d / f"part-{f:03d}.jsonl").write_text("\n".join(lines) + "\n")
    (d / ".part-999.jsonl.tmp").write_text('{"sym": "S0", "ts": 0, "px": 1}\n' * 10)
    return d


TABLE_RULES = """
tables:
  - name: sectors
    from: sector_changes          # rows tagged "stream": "sector_changes" in the same input
    primary_key: sym
    columns: [sector]
    time_field: ts
    lateness: 300
rules:
  - name: sector_rise
    description: three or more rising prices of one symbol within ten seconds, in one sector all along
    lateness: 200
    sql: |
      SELECT * FROM ticks AS t JOIN sectors FOR SYSTEM_TIME AS OF t.ts AS s ON t.sym = s.sym
      MATCH_RECOGNIZE (
        PARTITION BY sym ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, LAST(B.ts) AS t1, COUNT(B.*) AS n, A.sector AS sector
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A B{2,})
        WITHIN INTERVAL '10' SECOND
        DEFINE B AS B.px > PREV(B.px) AND B.sector = A.sector)
  - name: sector_burst
    description: every 25 ticks of a sector (partitioned by the joined column)
    sql: |
      SELECT * FROM ticks LEFT JOIN sectors FOR SYSTEM_TIME AS OF ticks.ts ON ticks.sym = sectors.sym
      MATCH_RECOGNIZE (
        PARTITION BY sector ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, MAX(A.px) AS top
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A{25})
        DEFINE A AS A.px > 0)
  - name: sector_second
    kind: analytics
    lateness: 200
    sql: |
      SELECT sector, COUNT(*) AS n, MAX(px) AS top, window_start
      FROM ticks AS t JOIN sectors FOR SYSTEM_TIME AS OF t.ts AS s ON t.sym = s.sym
      GROUP BY sector, TUMBLE(ts, INTERVAL '1' SECOND)
  - name: energy_ticks
    kind: search
    from: ticks
    time_field: ts
    lateness: 200
    join: {table: sectors, on: sym}
    fields: [sym, ts, sector]
    query: 'sector:energy AND NOT sym:S0'
"""

SECTORS = ("energy", "tech", "health", "banks")

VIEW_RULES = TABLE_RULES.replace("""rules:
""", """  - name: sector_names
    from: sector_name_changes     # a second changelog in the same input
    primary_key: sector
    columns: [label]
    time_field: ts
    lateness: 300
views:
  - name: sym_labels
    sql: SELECT n.label, s.sector FROM sectors AS s LEFT JOIN sector_names AS n ON s.sector = n.sector
rules:
  - name: labelled_rise
    description: two rising prices of one symbol within five seconds, with its sector's label (joined from the view)
    lateness: 200
    sql: |
      SELECT * FROM ticks AS t JOIN sym_labels FOR SYSTEM_TIME AS OF t.ts AS v ON t.sym = v.sym
      MATCH_RECOGNIZE (
        PARTITION BY sym ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, LAST(B.ts) AS t1, A.label AS label
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A B{3,})
        WITHIN INTERVAL '5' SECOND
        DEFINE B AS B.px > PREV(B.px))
""", 1)
"""TABLE_RULES with a second table (a label per sector), a view joining the sectors table to it, and a rule
joining the view."""


def write_table_log_dir(root: Path, files: int, lines_per_file: int, seed: int = 11, keys: int = 40) -> Path:
    """Ticks with a sector changelog in the same files (rows tagged ``"stream": "sector_changes"``):
    every symbol's first sector at time 0, then a change now and then, some of them late."""
    rng = random.Random(seed)
    d = root / "logs"
    d.mkdir(parents=True, exist_ok=True)
    t = 0
    first = [json.dumps({"stream": "sector_changes", "sym": f"S{k}", "sector": rng.choice(SECTORS), "ts": 0})
             for k in range(keys)]
    for f in range(files):
        lines = tick_lines(lines_per_file, seed + f, t0=t, keys=keys)
        t = json.loads(next(x for x in reversed(lines) if x.startswith('{"sym"')))["ts"]
        mixed = first if f == 0 else []
        for line in lines:
            mixed.append(line)
            if rng.random() < 0.08 and line.startswith('{"sym"'):
                ts = json.loads(line)["ts"] - rng.choice((0, 0, 50, 250, 1000))  # 1000: a late change
                mixed.append(json.dumps({"stream": "sector_changes", "sym": f"S{rng.randrange(keys)}",
                                         "sector": rng.choice(SECTORS), "ts": max(ts, 0)}))
        (d / f"part-{f:03d}.jsonl").write_text("\n".join(mixed) + "\n")
    return d


def write_view_log_dir(root: Path, files: int, lines_per_file: int, seed: int = 11, keys: int = 40) -> Path:
    """:func:`write_table_log_dir` with a changelog of sector labels in the same files (rows tagged
    ``"stream": "sector_name_changes"``): renames now and then (some late, some deleting the label)."""
    d = write_table_log_dir(root, files, lines_per_file, seed, keys)
    rng = random.Random(seed + 1)
    for f, path in enumerate(sorted(d.glob("part-*.jsonl"))):
        lines = path.read_text().splitlines()
        out = [json.dumps({"stream": "sector_name_changes", "sector": s, "label": s.upper(), "ts": 0})
               for s in SECTORS] if f == 0 else []
        for line in lines:
            out.append(line)
            if rng.random() < 0.03 and line.startswith('{"sym"'):
                ts = max(json.loads(line)["ts"] - rng.choice((0, 0, 100, 1000)), 0)
                row = {"stream": "sector_name_changes", "sector": rng.choice(SECTORS), "label": f"L{rng.randrange(9)}",
                       "ts": ts, **({"__deleted": "true"} if rng.random() < 0.1 else {})}
                out.append(json.dumps(row))
        path.write_text("\n".join(out) + "\n")
    return d
