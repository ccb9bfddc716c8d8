"""Pathological patterns on 1,000,000 events: partial matches stay within the caps.

    python benchmarks/bench_caps.py                    # 1,000,000 events per pattern
    python benchmarks/bench_caps.py --events 100000    # a shorter run

Two patterns whose partial matches grow with every row when nothing bounds them:

* ``every_step_optional``: ``A? B* C*? D`` where A, B and C always hold (conditions on aggregates
  over the match, so they run on the general path) and D never does, inside a one-hour WITHIN;
* ``any_match_long_window``: ``A B* C`` with ``AFTER MATCH SKIP TO NEXT ROW`` (every row starts a
  run and every run stays alive), B always true, C never, inside a one-hour WITHIN: the
  any-match contiguity of other CEP engines.

Each runs twice, with the per-key cap (``max_partial_matches``) and with a rule-wide cap
(``max_partial_matches_total``) on top, both with drop_oldest. After every batch the live partial
matches are counted; the run fails (exit 1) if any count exceeds its cap. Reports peak live
partial matches, caps hit, partial matches dropped, resident memory and events/s, and writes
``benchmarks/results/caps.json``.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--per-key", type=int, default=50, help="max_partial_matches per key (default 50)")
    ap.add_argument("--total", type=int, default=2_000, help="rule-wide cap for the second run (default 2,000)")
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--out", type=Path, default=RESULTS / "caps.json")
    args = ap.parse_args()
    runs = []
    for shape in PATTERNS:
        for total in (None, args.total):
            r = run(shape, args.events, args.keys, args.per_key, total, args.batch)
            runs.append(r)
            cap = f"total {total:,}" if total else f"per key {args.per_key:,} x {args.keys} keys"
            print(f"{shape:>22}  {cap:>26}  peak {r['peak_live_partial_matches']:>7,}  dropped "
                  f"{r['partial_matches_dropped']:>12,}  {r['peak_rss_mb']:>7.1f} MB  {r['events_per_second']:>8,} ev/s",
                  flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "caps",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "runs": runs,
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
