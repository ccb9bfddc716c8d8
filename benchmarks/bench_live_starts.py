"""Many live start rows: ``rules/trends.yaml``'s ``range_breakout`` over the Xetra minute bars, three paths.

    python benchmarks/bench_live_starts.py                 # the whole day, all three paths
    python benchmarks/bench_live_starts.py --batches 4     # a short run while iterating

``PATTERN (S R{9,} B)`` where ``S`` has no condition: every minute bar starts a partial match,
and each lives while the price stays within 3% of its start, so a quiet instrument holds hundreds
of live start rows. The lane path (``cep/lanes.py``) keeps them as arrays: its compiled loop
(``cep/_lanes_kernel.py``, numba) steps a key's rows of a batch with each condition's bytecode run
over all live start rows; its numpy stepping evaluates each condition as numpy expressions per
row; the general path evaluates it once per partial match. All three run in this process on the
same batches (decoded once, untimed, as ``bench_real.py`` reads the file), in turn, and must give
the same rows and counters. CPU seconds of this process (``time.process_time``). Writes
``benchmarks/results/live_starts.json``.

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
from cep.compiled import numba_allowed  # noqa: E402
from cep.engine import Engine  # noqa: E402
from patterns.rules import load_rules  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


def run(rules, batches, use: bool, kernel: bool = True) -> tuple[float, list[dict], dict]:
    old = lanes.USE_LANES, lanes.USE_KERNEL
    lanes.USE_LANES, lanes.USE_KERNEL = use, kernel
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
        assert not use or (op.automaton.lanes.kernel is not None) == kernel
        counts = {k: vars(v) for k, v in eng.counts().items()}
        return cpu, rows, counts
    finally:
        lanes.USE_LANES, lanes.USE_KERNEL = old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--batches", type=int, default=0, help="only the first N batches (0: all)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--skip-general", action="store_true", help="leave out the general path (minutes on the whole day)")
    ap.add_argument("--out", type=Path, default=RESULTS / "live_starts.json")
    args = ap.parse_args()
    rules = load_rules(REPO / "rules" / "trends.yaml")
    rules = dataclasses.replace(rules, rules=tuple(r for r in rules if r.name == "range_breakout"))
    batches = bench_real.xetra(args.batch)
    if args.batches:
        batches = batches[: args.batches]
    events = sum(b.n for b in batches)
    if not numba_allowed():
        raise SystemExit("numba is turned off (CEP_NO_NUMBA): the compiled loop cannot be measured")
    run(rules, batches[:1], True)  # warm-up (lazy imports, numba's cache), untimed
    ker_cpu, new_cpu, old_cpu = [], [], []
    for _ in range(args.repeat):
        c, rows_ker, counts_ker = run(rules, batches, True)
        ker_cpu.append(c)
        c, rows_new, counts_new = run(rules, batches, True, kernel=False)
        new_cpu.append(c)
        if not args.skip_general:
            c, rows_old, counts_old = run(rules, batches, False)
            old_cpu.append(c)
            if rows_new != rows_old or counts_new != counts_old:
                raise SystemExit("the lane path gave other rows or counters than the general path")
        if rows_ker != rows_new or counts_ker != counts_new:
            raise SystemExit("the compiled loop gave other rows or counters than the numpy stepping")
    ker, new = min(ker_cpu), min(new_cpu)
    old = min(old_cpu) if old_cpu else float("nan")
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
        "kernel_seconds_cpu": round(ker, 3),
        "kernel_events_per_cpu_s": round(events / ker),
        "lanes_seconds_cpu": round(new, 3),
        "lanes_events_per_cpu_s": round(events / new),
        "kernel_vs_lanes": round(new / ker, 2),
        "same_rows_and_counters": True,
    }
    if old_cpu:
        res.update({
            "general_seconds_cpu": round(old, 3),
            "general_events_per_cpu_s": round(events / old),
            "speedup": round(old / new, 2),
            "kernel_speedup": round(old / ker, 2),
        })
    general = f", general {events / old:,.0f} (kernel x{old / ker:.1f})" if old_cpu else ""
    print(f"range_breakout on Xetra: {events:,} events, {len(rows_new)} matches, peak "
          f"{stats['partial_matches_peak']} partial matches; compiled loop {events / ker:,.0f} events/cpu-s, "
          f"numpy lanes {events / new:,.0f} (x{new / ker:.2f}){general}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
