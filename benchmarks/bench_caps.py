"""Pathological patterns on 1,000,000 events: partial matches stay within the caps and the work budget.

    python benchmarks/bench_caps.py                    # 1,000,000 events per pattern
    python benchmarks/bench_caps.py --events 100000    # a shorter run
    python benchmarks/bench_caps.py --shapes alternation_in_loop   # the work budget only
    python benchmarks/bench_caps.py --shapes alternation_in_loop --budgets 16,32,64,128,256

Two patterns whose partial matches grow with every row when nothing bounds them:

* ``every_step_optional``: ``A? B* C*? D`` where A, B and C always hold (conditions on aggregates
  over the match, so they run on the general path) and D never does, inside a one-hour WITHIN;
* ``any_match_long_window``: ``A B* C`` with ``AFTER MATCH SKIP TO NEXT ROW`` (every row starts a
  run and every run stays alive), B always true, C never, inside a one-hour WITHIN: the
  any-match contiguity of other CEP engines.

Each runs twice, with the per-key cap (``max_partial_matches``) and with a rule-wide cap
(``max_partial_matches_total``) on top, both with drop_oldest. After every batch the live partial
matches are counted; the run fails (exit 1) if any count exceeds its cap. Reports peak live
partial matches, caps hit, partial matches dropped, resident memory and events/s.

A third shape measures the work budget (``max_steps_per_event``), with the rule's default options:

* ``alternation_in_loop``: ``(A|B)* C`` where A and B always hold (each on a sum over the match)
  and C never does, ``AFTER MATCH SKIP TO NEXT ROW``, one key: every row can double the runs of
  every start row, so the partial matches are 2^n without a bound (``cep check`` warns about it).
  Events per CPU second over ``--budget-events`` events under the default budget, next to the same
  rule without the budget (``max_steps_per_event`` far above the cap: the engine before the budget)
  on ``--baseline-events`` events, and under each budget of ``--budgets``. Fails if the live
  partial matches ever exceed the budget after a batch.

Writes ``benchmarks/results/caps.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cep.engine import Engine, StateLimits  # noqa: E402
from cep.events import EventBatch  # noqa: E402
from patterns.rules import parse_rules  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_soak import rss_mb  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"

PATTERNS = {
    "every_step_optional": """
rules:
  - name: r
    max_partial_matches: {per_key}
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(*) AS n
        PATTERN (A? B* C*? D) WITHIN INTERVAL '1' HOUR
        DEFINE A AS COUNT(A.*) >= 0, B AS COUNT(B.*) >= 0, C AS COUNT(C.*) >= 0, D AS x < 0)
""",
    "alternation_in_loop": """
rules:
  - name: r
    {options}
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES FIRST(A.ts) AS t0
        AFTER MATCH SKIP TO NEXT ROW
        PATTERN ((A|B)* C)
        DEFINE A AS SUM(A.x) >= 0, B AS SUM(B.x) >= 0, C AS C.x < 0)
""",
    "any_match_long_window": """
rules:
  - name: r
    max_partial_matches: {per_key}
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(*) AS n
        AFTER MATCH SKIP TO NEXT ROW
        PATTERN (A B* C) WITHIN INTERVAL '1' HOUR
        DEFINE A AS x >= 0, B AS x >= 0, C AS x < 0)
""",
}


def run(shape: str, n: int, keys: int, per_key: int, total: int | None, batch: int) -> dict:
    eng = Engine(parse_rules(PATTERNS[shape].format(per_key=per_key)))
    if total is not None:
        eng.set_state_limits(StateLimits(max_partial_matches_total=total))
    op = eng.operators["r"]
    peak = 0
    peak_rss = rss_mb()
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        m = min(batch, n - start)
        i = np.arange(start, start + m, dtype=np.int64)
        # 1 ms apart: the whole run is 1,000 s of event time, inside the one-hour WITHIN
        eng.process(EventBatch({"k": i % keys, "ts": i, "x": np.ones(m, dtype=np.int64)}, m))
        live = op.live_partial_matches()
        peak = max(peak, live)
        peak_rss = max(peak_rss, rss_mb())
        cap = total if total is not None else per_key * keys
        if live > cap:
            raise SystemExit(f"{shape}: {live:,} live partial matches after {start + m:,} events, cap {cap:,}")
    secs = time.perf_counter() - t0
    eng.finish()
    c = eng.counts()["r"]
    return {
        "shape": shape,
        "events": n,
        "keys": keys,
        "max_partial_matches": per_key,
        "max_partial_matches_total": total,
        "peak_live_partial_matches": peak,
        "cap_hits": c.cap_hits,
        "partial_matches_dropped": c.partial_matches_dropped,
        "peak_rss_mb": round(peak_rss, 1),
        "seconds": round(secs, 2),
        "events_per_second": round(n / secs),
    }


def run_budget(n: int, steps: int | None, batch: int) -> dict:
    """``alternation_in_loop`` on one key: ``steps`` None is the default budget."""
    options = f"max_steps_per_event: {steps}" if steps is not None else ""
    eng = Engine(parse_rules(PATTERNS["alternation_in_loop"].format(options=options)))
    op = eng.operators["r"]
    budget = op.automaton.max_steps
    peak_rss = rss_mb()
    cpu = 0.0
    for start in range(0, n, batch):
        m = min(batch, n - start)
        i = np.arange(start, start + m, dtype=np.int64)
        b = EventBatch({"k": np.zeros(m, dtype=np.int64), "ts": i, "x": np.ones(m, dtype=np.int64)}, m)
        c0 = time.process_time()
        eng.process(b)
        cpu += time.process_time() - c0
        live = op.live_partial_matches()
        peak_rss = max(peak_rss, rss_mb())
        if budget is not None and live > budget:
            raise SystemExit(f"alternation_in_loop: {live:,} live partial matches after {start + m:,} events, "
                             f"budget {budget:,}")
    c0 = time.process_time()
    eng.finish()
    cpu += time.process_time() - c0
    c = eng.counts()["r"]
    return {
        "shape": "alternation_in_loop",
        "events": n,
        "keys": 1,
        "max_steps_per_event": budget,
        "max_partial_matches": op.automaton.max_partial_matches,
        "peak_live_partial_matches_per_key": c.partial_matches_peak,
        "budget_hits": c.budget_hits,
        "budget_dropped": c.budget_dropped,
        "cap_hits": c.cap_hits,
        "partial_matches_dropped": c.partial_matches_dropped,
        "peak_rss_mb": round(peak_rss, 1),
        "cpu_seconds": round(cpu, 2),
        "events_per_cpu_second": round(n / cpu),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--per-key", type=int, default=50, help="max_partial_matches per key (default 50)")
    ap.add_argument("--total", type=int, default=2_000, help="rule-wide cap for the second run (default 2,000)")
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--budget-events", type=int, default=100_000,
                    help="events of alternation_in_loop under the default work budget (default 100,000)")
    ap.add_argument("--baseline-events", type=int, default=1_000,
                    help="events of alternation_in_loop without the budget (default 1,000: it runs at tens of events/s)")
    ap.add_argument("--budgets", default="", help="alternation_in_loop under these max_steps_per_event too "
                    "(comma-separated, e.g. 16,32,64,128,256)")
    ap.add_argument("--shapes", default=",".join(PATTERNS), help=f"comma-separated, of: {', '.join(PATTERNS)}")
    ap.add_argument("--out", type=Path, default=RESULTS / "caps.json")
    args = ap.parse_args()
    shapes = args.shapes.split(",")
    for shape in shapes:
        if shape not in PATTERNS:
            raise SystemExit(f"unknown shape {shape!r}; known: {', '.join(PATTERNS)}")
    runs = []
    budget: dict = {}
    if "alternation_in_loop" in shapes:
        run_budget(2_000, None, 1_000)  # warm-up: the first batches import and compile lazily
        with_budget = run_budget(args.budget_events, None, 1_000)
        without = run_budget(args.baseline_events, 10**9, 1_000)
        sweep = [run_budget(args.budget_events, int(b), 1_000) for b in args.budgets.split(",") if b]
        budget = {"date": time.strftime("%Y-%m-%d"), "with_budget": with_budget, "without_budget": without,
                  "ratio": round(with_budget["events_per_cpu_second"] / max(without["events_per_cpu_second"], 1), 1),
                  "sweep": sweep}
        for label, r in [("default budget", with_budget), ("no budget", without)] + [
                (f"budget {r['max_steps_per_event']}", r) for r in sweep]:
            print(f"   alternation_in_loop  {label:>26}  peak {r['peak_live_partial_matches_per_key']:>7,}  dropped "
                  f"{r['budget_dropped'] + r['partial_matches_dropped']:>12,}  {r['peak_rss_mb']:>7.1f} MB  "
                  f"{r['events_per_cpu_second']:>8,} ev/cpu-s", flush=True)
    for shape in [s for s in shapes if s != "alternation_in_loop"]:
        for total in (None, args.total):
            r = run(shape, args.events, args.keys, args.per_key, total, args.batch)
            runs.append(r)
            cap = f"total {total:,}" if total else f"per key {args.per_key:,} x {args.keys} keys"
            print(f"{shape:>22}  {cap:>26}  peak {r['peak_live_partial_matches']:>7,}  dropped "
                  f"{r['partial_matches_dropped']:>12,}  {r['peak_rss_mb']:>7.1f} MB  {r['events_per_second']:>8,} ev/s",
                  flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    date = time.strftime("%Y-%m-%d")
    if args.out.exists() and set(shapes) != set(PATTERNS):
        # a partial run keeps the other shapes' figures and their date (the budget has its own)
        old = json.loads(args.out.read_text())
        kept = [r for r in old.get("runs", []) if r.get("shape") not in shapes]
        if kept:
            date = old.get("date", date)
        runs = kept + runs
        if not budget:
            budget = old.get("budget", {})
    args.out.write_text(json.dumps({
        "benchmark": "caps",
        "date": date,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "runs": runs,
        "budget": budget,
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
