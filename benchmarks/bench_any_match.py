"""Skip-till-any-match under a flood: ``A ANY B ANY C`` with ``AFTER MATCH NO SKIP``.

Run ``python benchmarks/bench_any_match.py`` (``--quick`` for 3,000 events). Writes
``benchmarks/results/any_match.json`` (``any_match_quick.json`` with ``--quick``).

One key, one event per millisecond, a share ``p`` of the events are ``B`` (the rest ``A`` one in
fifty, ``C`` one in a hundred, filler otherwise), ``WITHIN`` one second. Every open ``A`` keeps one
branch per ``B`` row, so live partial matches and matches grow with ``p``; the per-key cap
(``max_partial_matches``) bounds the branches. For each ``p`` and cap: events per CPU-second, matches,
the peak of live partial matches, and the branches the cap dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cep.operator import PatternOperator  # noqa: E402
from patterns.rules import parse_rule_text  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
SQL = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS a, B.ts AS b, C.ts AS c
  AFTER MATCH NO SKIP PATTERN (A ANY B ANY C) WITHIN INTERVAL '1' SECOND
  DEFINE A AS kind = 'a', B AS kind = 'b', C AS kind = 'c')"""


def stream(n: int, p_b: float, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    u = rng.random(n)
    kind = np.where(u < p_b, "b", np.where(u < p_b + 0.02, "a", np.where(u < p_b + 0.03, "c", "x")))
    return pa.table({"k": np.zeros(n, dtype=np.int64), "ts": np.arange(n, dtype=np.int64), "kind": kind.tolist()})


def run(table: pa.Table, cap: int) -> dict:
    op = PatternOperator(parse_rule_text(SQL).compiled, name="any", max_partial_matches=cap, max_future_skew_ms=None)
    matches = 0
    c0 = time.process_time()
    for b in table.to_batches(8192):
        matches += len(op.process(b).matches)
    matches += len(op.finish().matches)
    cpu = time.process_time() - c0
    s = op.stats
    return {"events_per_cpu_s": round(table.num_rows / cpu), "matches": matches, "peak_partial_matches": s.partial_matches_peak,
            "dropped": s.partial_matches_dropped, "cap_hits": s.cap_hits, "cpu_s": round(cpu, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3,000 events instead of 20,000")
    args = ap.parse_args()
    n = 3_000 if args.quick else 20_000
    rows = []
    for p_b in (0.01, 0.05, 0.2):
        table = stream(n, p_b)
        for cap in (100, 1_000, 10_000):
            r = {"events": n, "share_b": p_b, "cap": cap, **run(table, cap)}
            rows.append(r)
            print(f"B {p_b:>5.0%}  cap {cap:>6,}: {r['events_per_cpu_s']:>9,} events/cpu-s  {r['matches']:>10,} matches  "
                  f"peak {r['peak_partial_matches']:>6,}  dropped {r['dropped']:>9,}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / ("any_match_quick.json" if args.quick else "any_match.json")).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
