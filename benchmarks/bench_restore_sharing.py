"""Many rules after a restore: the CPU of the batches after ``Engine.restore`` against the same batches unrestored.

    python benchmarks/bench_restore_sharing.py                 # 200 rules, restore at the middle
    python benchmarks/bench_restore_sharing.py --rules 50 --repeat 3

The rules and data of ``bench_many_rules.py`` (N generated rules of five shapes over the S&P 500
daily bars, first 60 tickers), by default only those that step on the batch DFA (the rules whose
sharing the saved history brings back; ``--all-rules`` keeps every rule, which adds the first
batch after a restore of the lane rules, cep/lanes.py, whose runs are restored on the general
path: about 1 cpu-s for 50 rules, the same with or without the history). The engine processes the first half of the batches, takes a
snapshot, and then the second half is run three ways, each in a fresh engine built from the same
snapshot bytes except the first:

- ``unrestored``: the engine that processed the first half goes on (the baseline);
- ``restored``: a fresh engine restored from the snapshot (batch-DFA rules get their stepped
  history back, ``cep.sharing.rejoin_histories``);
- ``restored_no_rejoin``: the same with the history left unknown after the restore (the engine
  before the history was saved: every restored rule falls back to value signatures).

Only the second half's ``process`` calls and ``finish`` are timed, in CPU seconds of this process
(``time.process_time``); the three ways are interleaved ``--repeat`` times and the best of each
counts. The three must give the same rows (the benchmark checks itself). Writes
``benchmarks/results/restore_sharing.json``.
"""

from __future__ import annotations

import argparse
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

from bench_many_rules import RESULTS, batch_dfa_rules, load_batches, rule_set  # noqa: E402

import cep.engine as engine_mod  # noqa: E402
from cep.engine import Engine  # noqa: E402


def _key(r: dict) -> str:
    return json.dumps(r, sort_keys=True, default=str)


def _second_half(eng: Engine, batches: list) -> tuple[float, list[str]]:
    c0 = time.process_time()
    outs = [eng.process(b) for b in batches]
    outs.append(eng.finish())
    cpu = time.process_time() - c0
    return cpu, [_key(r) for o in outs for r in o.matches]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sample", action="store_true", help="the bundled sample even when the full data is present")
    ap.add_argument("--all-rules", action="store_true",
                    help="every generated rule, not only those on the batch DFA (cep/batch_dfa.py)")
    ap.add_argument("--out", type=Path, default=RESULTS / "restore_sharing.json")
    args = ap.parse_args()
    batches, data = load_batches(args.batch, args.sample)
    rules = rule_set(args.rules)
    if not args.all_rules:
        rules = batch_dfa_rules(rules, batches[0])
    half = len(batches) // 2
    first, second = batches[:half], batches[half:]
    print(f"{data}: {sum(b.n for b in batches):,} events, {len(batches)} batches of {args.batch}; "
          f"restore after {half}", flush=True)

    def prefix() -> Engine:
        eng = Engine(rules)
        for b in first:
            eng.process(b)
        return eng

    snap = prefix().snapshot()
    real = engine_mod.rejoin_histories

    def way(name: str) -> Engine:
        if name == "unrestored":
            return prefix()
        eng = Engine(rules)
        if name == "restored_no_rejoin":
            engine_mod.rejoin_histories = lambda states: 0  # type: ignore[assignment]
        try:
            eng.restore(snap)
        finally:
            engine_mod.rejoin_histories = real
        return eng

    ways = ("unrestored", "restored", "restored_no_rejoin")
    cpu: dict[str, list[float]] = {w: [] for w in ways}
    rows: dict[str, list[str]] = {}
    for r in range(args.repeat):
        for w in ways[r % 3:] + ways[: r % 3]:  # the order rotates: no way always runs first
            c, got = _second_half(way(w), second)
            cpu[w].append(c)
            if rows.setdefault(w, got) != got or got != rows.get("unrestored", got):
                raise SystemExit(f"{w}: other rows than the unrestored run")
    best = {w: min(v) for w, v in cpu.items()}
    events = sum(b.n for b in second)
    res: dict[str, Any] = {
        "benchmark": "restore_sharing",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "data": data,
        "generated": args.rules,
        "rules": len(rules),
        "only_batch_dfa": not args.all_rules,
        "batch": args.batch,
        "events_after_restore": events,
        "complex_events_after_restore": len(rows["unrestored"]),
        "repeat": args.repeat,
        "seconds_cpu": {w: round(v, 4) for w, v in best.items()},
        "events_per_cpu_s": {w: round(events / v) for w, v in best.items()},
        "restored_over_unrestored": round(best["restored"] / best["unrestored"], 3),
        "restored_no_rejoin_over_unrestored": round(best["restored_no_rejoin"] / best["unrestored"], 3),
        "same_rows": True,
    }
    for w in ways:
        print(f"  {w:<20} {best[w]:.3f} cpu-s  {events / best[w]:>9,.0f} events/cpu-s  "
              f"x{best[w] / best['unrestored']:.3f} of unrestored", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
