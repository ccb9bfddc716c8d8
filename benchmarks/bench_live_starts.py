"""Many live start rows: ``rules/trends.yaml``'s ``range_breakout`` over the Xetra minute bars, lanes on and off.

    python benchmarks/bench_live_starts.py                 # the whole day, both paths
    python benchmarks/bench_live_starts.py --batches 4     # a short run while iterating

``PATTERN (S R{9,} B)`` where ``S`` has no condition: every minute bar starts a partial match,
and each lives while the price stays within 3% of its start, so a quiet instrument holds hundreds
of live start rows. The lane path (``cep/lanes.py``) keeps them as numpy arrays and evaluates
each condition for all of them at once; the general path evaluates it once per partial match.
Both run in this process on the same batches (decoded once, untimed, as ``bench_real.py`` reads
the file), alternating, and must give the same rows and counters. CPU seconds of this process
(``time.process_time``). Writes ``benchmarks/results/live_starts.json``.

Data: ``../shared/data/xetra_1min_bars_2017-07-28.csv`` (Deutsche Boerse public data set, one-
minute bars of 28 July 2017; see ../shared/data/SOURCES.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_real  # noqa: E402

import cep.lanes as lanes  # noqa: E402
from cep.engine import Engine  # noqa: E402
from patterns.rules import load_rules  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


def run(rules, batches, use: bool) -> tuple[float, list[dict], dict]:
    old = lanes.USE_LANES
    lanes.USE_LANES = use
    try:
        eng = Engine(rules)
        rows: list[dict] = []
        c0 = time.process_time()
        for b in batches:
            rows += eng.process(b).matches
        rows += eng.finish().matches
        cpu = time.process_time() - c0
        op = eng.operators["range_breakout"]
        assert (op.automaton.lanes is not None) == use
        counts = {k: vars(v) for k, v in eng.counts().items()}
        return cpu, rows, counts
    finally:
        lanes.USE_LANES = old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--batches", type=int, default=0, help="only the first N batches (0: all)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS / "live_starts.json")
    args = ap.parse_args()
    rules = load_rules(REPO / "rules" / "trends.yaml")
    rules = dataclasses.replace(rules, rules=tuple(r for r in rules if r.name == "range_breakout"))
    batches = bench_real.xetra(args.batch)
    if args.batches:
        batches = batches[: args.batches]
    events = sum(b.n for b in batches)
    run(rules, batches[:1], True)  # warm-up (lazy imports), untimed
    new_cpu, old_cpu = [], []
    for _ in range(args.repeat):
        c, rows_new, counts_new = run(rules, batches, True)
        new_cpu.append(c)
        c, rows_old, counts_old = run(rules, batches, False)
        old_cpu.append(c)
        if rows_new != rows_old or counts_new != counts_old:
            raise SystemExit("the lane path gave other rows or counters than the general path")
    new, old = min(new_cpu), min(old_cpu)
    stats = counts_new["range_breakout"]
    res: dict[str, Any] = {
        "benchmark": "live_starts",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "data": "xetra_1min_bars_2017-07-28.csv",
        "rule": "rules/trends.yaml range_breakout",
        "events": events,
        "batch": args.batch,
        "repeat": args.repeat,
        "complex_events": len(rows_new),
        "partial_matches_peak": stats["partial_matches_peak"],
        "lanes_seconds_cpu": round(new, 3),
        "lanes_events_per_cpu_s": round(events / new),
        "general_seconds_cpu": round(old, 3),
        "general_events_per_cpu_s": round(events / old),
        "speedup": round(old / new, 2),
        "same_rows_and_counters": True,
    }
    print(f"range_breakout on Xetra: {events:,} events, {len(rows_new)} matches, peak "
          f"{stats['partial_matches_peak']} partial matches; lanes {events / new:,.0f} events/cpu-s, "
          f"general {events / old:,.0f}, x{old / new:.2f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
