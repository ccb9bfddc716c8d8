"""Absence benchmark: "order placed, not shipped within 2 days" over many orders, one core.

Run ``python benchmarks/bench_absence.py`` (``--quick`` for 100,000 events). Writes
``benchmarks/results/absence.json`` (``absence_quick.json`` with ``--quick``).

The workload is seeded: ``keys`` orders of ``per_key`` events each (placed, updates, shipped;
one order in ten ships after more than two days), merged in event-time order. The rule is
``PATTERN (A NOT B) WITHIN INTERVAL '2' DAY`` partitioned by order. Every order keeps a live
partial match for up to two days of event time, so most rows step a live key. The engine is fed
Arrow record batches of 8,192 rows; CPU seconds of this process (``time.process_time``) over the
processing loop give events per CPU-second. Beside it, in the same run: the strict pattern
``A B`` on the same stream (no absence, partial matches die at the next row), which is the cost of
the same events without anything waiting on time; and the absence rule again through the general
automaton (``cep.absence.USE_ABSENCE_PATH`` off), the path rules of other shapes take. Memory: resident size (VmRSS) sampled every
tenth of the stream, to show it does not grow with the number of orders already closed.
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

import cep.absence  # noqa: E402
from cep.operator import PatternOperator  # noqa: E402
from patterns.rules import parse_rule_text  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
DAY = 86_400_000

ABSENCE = """SELECT * FROM orders MATCH_RECOGNIZE (PARTITION BY order_id ORDER BY ts
  MEASURES A.ts AS placed_at PATTERN (A NOT B) WITHIN INTERVAL '2' DAY
  DEFINE A AS A.status = 'placed', B AS B.status = 'shipped')"""
STRICT = """SELECT * FROM orders MATCH_RECOGNIZE (PARTITION BY order_id ORDER BY ts
  MEASURES A.ts AS placed_at PATTERN (A B) WITHIN INTERVAL '2' DAY
  DEFINE A AS A.status = 'placed', B AS B.status = 'shipped')"""


def orders(keys: int, per_key: int = 10, seed: int = 1) -> tuple[pa.Table, int]:
    """The event stream and how many orders ship late (the absences expected)."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 30 * DAY, keys)
    late = rng.random(keys) < 0.1
    ship = np.where(late, rng.integers(2 * DAY, 4 * DAY, keys), rng.integers(1, 2 * DAY, keys))
    m = per_key - 2
    upd = (np.sort(rng.random((keys, m)), axis=1) * ship[:, None]).astype(np.int64)
    ts = np.concatenate([start[:, None], start[:, None] + upd, (start + ship)[:, None]], axis=1).ravel()
    kinds = np.array(["placed"] + ["updated"] * m + ["shipped"], dtype=object)
    ids = np.repeat(np.arange(keys), per_key)
    order = np.argsort(ts, kind="stable")
    table = pa.table({"order_id": ids[order], "ts": ts[order], "status": pa.array(np.tile(kinds, keys)[order].tolist())})
    return table, int(late.sum())


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run(sql: str, table: pa.Table, batch: int = 8192) -> dict:
    op = PatternOperator(parse_rule_text(sql).compiled, name="r", max_future_skew_ms=None)
    batches = table.to_batches(batch)
    every = max(1, len(batches) // 10)
    rss = []
    matches = 0
    c0, w0 = time.process_time(), time.perf_counter()
    for i, b in enumerate(batches):
        matches += len(op.process(b).matches)
        if i % every == 0:
            rss.append(round(rss_mib(), 1))
    matches += len(op.finish().matches)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    n = table.num_rows
    return {"events": n, "matches": matches, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
            "events_per_cpu_s": round(n / cpu), "rss_mib_samples": rss, "keys_left": op.key_count()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10,000 orders (100,000 events)")
    ap.add_argument("--keys", type=int, default=None, help="orders (default 100,000)")
    args = ap.parse_args()
    keys = args.keys or (10_000 if args.quick else 100_000)
    table, late = orders(keys)
    absence = run(ABSENCE, table)
    assert absence["matches"] == late, (absence["matches"], late)  # every late order, and only those
    strict = run(STRICT, table)
    cep.absence.USE_ABSENCE_PATH = False
    automaton = run(ABSENCE, table)
    cep.absence.USE_ABSENCE_PATH = True
    assert automaton["matches"] == late
    result = {"keys": keys, "events": table.num_rows, "late_orders": late, "absence": absence, "strict_a_b": strict,
              "absence_automaton": automaton,
              "absence_vs_strict": round(absence["events_per_cpu_s"] / strict["events_per_cpu_s"], 3),
              "column_wise_vs_automaton": round(absence["events_per_cpu_s"] / automaton["events_per_cpu_s"], 3)}
    print(f"{table.num_rows:,} events, {keys:,} orders, {late:,} shipped late")
    for name in ("absence", "absence_automaton", "strict_a_b"):
        r = result[name]
        print(f"  {name:17s} {r['events_per_cpu_s']:>10,} events/cpu-s  {r['matches']:>7,} rows  "
              f"RSS {r['rss_mib_samples'][0]}..{max(r['rss_mib_samples'])} MiB")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / ("absence_quick.json" if args.quick else "absence.json")).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
