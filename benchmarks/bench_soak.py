"""Soak benchmark: a long stream through WITHIN-bounded rules over 100,000 live keys; memory must stay flat.

    python benchmarks/bench_soak.py                      # the full run: 50,000,000 events
    python benchmarks/bench_soak.py --events 5000000     # a shorter one

The key population churns: at any moment 100,000 keys are live (events pick among them
uniformly), and every ``--churn`` events one key goes quiet for good and a new one appears, as
sessions, devices or users do. Rules run with an idle-state TTL (``StateLimits``), so a quiet
key's state is flushed and freed once event time has moved past its last event by the TTL.

Sampled over the run: resident memory (VmRSS from /proc/self/status), keys holding state, live
partial matches, events per second. The baseline, measured in the same process, is the same
stream without the TTL on a shorter prefix (``--baseline-events``): its key count, and with it
memory, grows with every key ever seen. Each run has a process of its own, so one run's heap does
not show in the other's resident memory. Writes ``benchmarks/results/soak.json`` and
``benchmarks/results/soak.png``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cep.engine import Engine, StateLimits  # noqa: E402
from cep.events import EventBatch  # noqa: E402
from patterns.rules import parse_rules  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"

RULES = """
rules:
  - name: brute_force
    description: three failed logins then a success for one user within two minutes
    sql: |
      SELECT * FROM auth MATCH_RECOGNIZE (
        PARTITION BY user ORDER BY ts
        MEASURES FIRST(F.ts) AS first_fail, S.ts AS success_at, COUNT(F.*) AS fails
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (F{3,} S)
        WITHIN INTERVAL '2' MINUTE
        DEFINE F AS ok = 0, S AS ok = 1)
  - name: amount_rise
    description: an amount followed by two larger ones within five minutes
    sql: |
      SELECT * FROM auth MATCH_RECOGNIZE (
        PARTITION BY user ORDER BY ts
        MEASURES A.amount AS a0, LAST(B.amount) AS a2
        PATTERN (A B B)
        WITHIN INTERVAL '5' MINUTE
        DEFINE A AS amount > 50, B AS B.amount > PREV(B.amount))
"""


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def batches(n: int, batch: int, keys: int, churn: int, step_ms: int, seed: int):
    """Seeded columnar batches: user ids from a sliding window of ``keys`` ids, 1 ms per event."""
    rng = np.random.default_rng(seed)
    done = 0
    while done < n:
        m = min(batch, n - done)
        i = np.arange(done, done + m, dtype=np.int64)
        base = i // churn  # the window of live keys slides by one every `churn` events
        user = base + rng.integers(0, keys, m)
        cols = {
            "user": user,
            "ts": i * step_ms,
            "ok": (rng.random(m) < 0.3).astype(np.int64),
            "amount": rng.integers(0, 100, m),
        }
        yield EventBatch(cols, m, lines=i + 1, source="soak")
        done += m


def run(n: int, ttl_ms: int | None, args, label: str) -> dict:
    eng = Engine(parse_rules(RULES))
    if ttl_ms is not None:
        eng.set_state_limits(StateLimits(idle_state_ttl_ms=ttl_ms))
    gc.collect()
    start_rss = rss_mb()
    curve = []
    matches = 0
    t0 = time.perf_counter()
    next_sample = 0
    done = 0
    for b in batches(n, args.batch, args.keys, args.churn, args.step_ms, args.seed):
        matches += len(eng.process(b).matches)
        done += b.n
        if done >= next_sample or done == n:
            ops = eng.operators.values()
            curve.append({
                "events": done,
                "seconds": round(time.perf_counter() - t0, 2),
                "rss_mb": round(rss_mb(), 1),
                "keys_with_state": sum(len(op.states) for op in ops),
                "live_partial_matches": sum(op.live_partial_matches() for op in ops),
                "keys_expired": sum(op.stats.keys_expired for op in ops),
                "matches": matches,
            })
            next_sample += max(n // args.samples, args.batch)
            if not args.quiet:
                c = curve[-1]
                print(f"  {label:>8} {c['events']:>12,} ev  {c['rss_mb']:>8.1f} MB  {c['keys_with_state']:>9,} keys  "
                      f"{c['live_partial_matches']:>8,} partial  {c['events'] / max(c['seconds'], 1e-9):>9,.0f} ev/s",
                      file=sys.stderr, flush=True)
    secs = time.perf_counter() - t0
    matches += len(eng.finish().matches)
    return {"label": label, "events": n, "ttl_ms": ttl_ms, "seconds": round(secs, 2),
            "events_per_second": round(n / secs), "matches": matches, "start_rss_mb": round(start_rss, 1),
            "curve": curve, "counts": {k: vars(v) for k, v in eng.counts().items()}}


def flatness(curve: list[dict], warmup_events: int) -> dict:
    """Memory after warm-up: first and last sample, the largest, and the least-squares slope."""
    after = [c for c in curve if c["events"] >= warmup_events]
    if len(after) < 2:
        return {"samples_after_warmup": len(after)}
    x = np.array([c["events"] for c in after], dtype=float)
    y = np.array([c["rss_mb"] for c in after], dtype=float)
    slope = float(np.polyfit(x, y, 1)[0]) * 1e6
    keys = [c["keys_with_state"] for c in after]
    return {
        "warmup_events": warmup_events,
        "samples_after_warmup": len(after),
        "rss_mb_at_warmup": after[0]["rss_mb"],
        "rss_mb_at_end": after[-1]["rss_mb"],
        "rss_mb_max_after_warmup": float(y.max()),
        "rss_growth_mb_per_million_events": round(slope, 3),
        "keys_with_state_min_max_after_warmup": [min(keys), max(keys)],
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r, style in ((result["run"], "-"), (result.get("baseline"), "--")):
        if not r:
            continue
        xs = [c["events"] / 1e6 for c in r["curve"]]
        ax1.plot(xs, [c["rss_mb"] for c in r["curve"]], style, label=r["label"])
        ax2.plot(xs, [c["keys_with_state"] / 1e3 for c in r["curve"]], style, label=r["label"])
    warm = result["flatness"].get("warmup_events")
    for ax in (ax1, ax2):
        if warm:
            ax.axvline(warm / 1e6, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("events (millions)")
        ax.legend()
        ax.grid(alpha=0.3)
    ax1.set_ylabel("resident memory (MB)")
    ax2.set_ylabel("keys holding state (thousands)")
    p = result["params"]
    fig.suptitle(f"Soak: {p['events']:,} events, {p['keys']:,} live keys, idle-state TTL {p['ttl_ms'] // 1000} s")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def part(which: str, args, n: int | None = None) -> dict:
    """One run in a fresh process (clean resident memory); its result as a dict."""
    cmd = [sys.executable, __file__, "--part", which, "--events", str(n or args.events), "--keys", str(args.keys),
           "--churn", str(args.churn), "--step-ms", str(args.step_ms), "--ttl", str(args.ttl), "--batch", str(args.batch),
           "--samples", str(args.samples), "--seed", str(args.seed)] + (["--quiet"] if args.quiet else [])
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, check=True)
    return json.loads(proc.stdout.decode().rsplit("\n@@RESULT@@\n", 1)[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=50_000_000, help="events in the soak run (default 50,000,000)")
    ap.add_argument("--keys", type=int, default=100_000, help="live keys at any moment (default 100,000)")
    ap.add_argument("--churn", type=int, default=10, help="events between one key going quiet and a new one (default 10)")
    ap.add_argument("--step-ms", type=int, default=1, help="event-time step per event (default 1 ms)")
    ap.add_argument("--ttl", type=int, default=600_000, help="idle-state TTL in ms (default 10 minutes)")
    ap.add_argument("--batch", type=int, default=50_000, help="events per batch (default 50,000)")
    ap.add_argument("--samples", type=int, default=100, help="memory samples over the run (default 100)")
    ap.add_argument("--baseline-events", type=int, default=None,
                    help="events in the no-TTL baseline (default: a tenth of --events, at least 2,000,000; 0 to skip)")
    ap.add_argument("--seed", type=int, default=20240607)
    ap.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--part", choices=("ttl", "baseline"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part:
        res = run(args.events, args.ttl if args.part == "ttl" else None, args, "TTL" if args.part == "ttl" else "no TTL")
        sys.stdout.write("\n@@RESULT@@\n" + json.dumps(res))
        return
    base_n = args.baseline_events if args.baseline_events is not None else min(args.events, max(args.events // 10, 2_000_000))
    # warm-up: the key window has turned over once and the TTL has passed for the first quiet keys
    warmup = min(args.events // 2, args.keys * args.churn + args.ttl // args.step_ms)
    print(f"soak: {args.events:,} events, {args.keys:,} live keys, TTL {args.ttl:,} ms, warm-up {warmup:,} events")
    result: dict = {
        "benchmark": "soak",
        "params": {"events": args.events, "keys": args.keys, "churn": args.churn, "step_ms": args.step_ms,
                   "ttl_ms": args.ttl, "batch": args.batch, "seed": args.seed, "rules": RULES},
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
    }
    result["run"] = part("ttl", args)
    result["flatness"] = flatness(result["run"]["curve"], warmup)
    if base_n:
        result["baseline"] = part("baseline", args, base_n)
        last = result["baseline"]["curve"][-1]
        same = min(result["run"]["curve"], key=lambda c: abs(c["events"] - last["events"]))
        result["baseline_comparison"] = {
            "at_events": last["events"],
            "keys_with_state_no_ttl": last["keys_with_state"],
            "keys_with_state_ttl": same["keys_with_state"],
            "rss_mb_no_ttl": last["rss_mb"],
            "rss_mb_ttl": same["rss_mb"],
            "rss_ratio_ttl_over_no_ttl": round(same["rss_mb"] / last["rss_mb"], 3),
            "events_per_second_no_ttl": result["baseline"]["events_per_second"],
            "events_per_second_ttl": result["run"]["events_per_second"],
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    plot(result, args.out.with_suffix(".png"))
    print(json.dumps({"flatness": result["flatness"], "baseline_comparison": result.get("baseline_comparison"),
                      "events_per_second": result["run"]["events_per_second"]}, indent=1))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
