"""Windowed-analytics benchmark: 1,000,000 events over 10,000 keys, each shape next to a naive baseline.

Run ``python benchmarks/bench_analytics.py`` (``--quick`` for a 200,000-event smoke run). Writes
``benchmarks/results/analytics.json``.

The workload is seeded: an hour of logins, 10,000 user ids (``user00042``), each user's IP
addresses drawn from a heavy-tailed distribution (strings ``10.a.b.c``), in time order. The
engine is fed Arrow record batches of 65,536 rows through :class:`cep.engine.Engine` (the whole
path: Arrow decoding, validation, lateness, panes, sketches, HAVING, output rows) and only the
``process``/``finish`` loop is timed. The baseline is the naive per-event Python program one
would write first: a dict from (user, window) to a ``set`` of IPs, windows emitted as the clock
passes their end; it is exact, so each shape also checks the engine against it (same rows for
exact aggregates; the HyperLogLog estimates within 3 standard errors).

Rates are reported both as events per second of wall time and per second of this process's
CPU time: on a shared machine the wall-time figure is only a lower bound (the load average at
the time of the run is recorded). Memory: peak Python allocations (tracemalloc) on a shorter
pass, and the size of the operator's snapshot when the stream ends.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import tracemalloc
from collections import defaultdict, deque
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cep.engine import Engine  # noqa: E402
from patterns.rules import parse_rules  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
BATCH = 65_536
HOUR = 3_600_000
MINUTE = 60_000


# ------------------------------------------------------------------ workload


def logins(n: int, keys: int, seed: int = 7) -> pa.Table:
    """n logins over one hour: user ids and IPs as strings, times in epoch ms, sorted."""
    rng = np.random.default_rng(seed)
    user = rng.integers(0, keys, n)
    ipn = (user * 7919 + rng.zipf(1.5, n)) % 1_000_000
    ts = np.sort(rng.integers(0, HOUR, n)).astype(np.int64) + 1_700_000_000_000
    return pa.table({
        "user": pa.array(np.char.add("user", np.char.zfill(user.astype(str), 5)).astype(object)),
        "ts": ts,
        "ip": pa.array([f"10.{(x >> 16) & 255}.{(x >> 8) & 255}.{x & 255}" for x in ipn.tolist()]),
    })


# ------------------------------------------------------------------ naive baselines (exact)


def naive_windows(rows, size: int, slide: int, threshold: int) -> list[tuple]:
    """Per event: add the IP to the set of every (user, window) holding it; emit windows the clock passed."""
    sets: dict[tuple, set] = defaultdict(set)
    out = []
    clock = None
    open_ends: dict[int, list] = defaultdict(list)
    for user, ts, ip in rows:
        if clock is None or ts > clock:
            clock = ts
            for end in sorted(e for e in open_ends if e <= clock):
                for key in open_ends.pop(end):
                    s = sets.pop(key)
                    if len(s) > threshold:
                        out.append((key[0], key[1], len(s)))
        k = (ts - size) // slide + 1
        while k * slide <= ts:
            key = (user, k * slide)
            if key not in sets:
                open_ends[k * slide + size].append(key)
            sets[key].add(ip)
            k += 1
    for end in sorted(open_ends):
        for key in open_ends[end]:
            s = sets.pop(key)
            if len(s) > threshold:
                out.append((key[0], key[1], len(s)))
    return out


def naive_sessions(rows, gap: int, threshold: int) -> list[tuple]:
    """Per event: extend the user's session set or close it and start a new one."""
    cur: dict[str, list] = {}
    out = []
    for user, ts, ip in rows:
        s = cur.get(user)
        if s is not None and ts - s[1] < gap:
            s[1] = ts
            s[2].add(ip)
            continue
        if s is not None and len(s[2]) > threshold:
            out.append((user, s[0], len(s[2])))
        cur[user] = [ts, ts, {ip}]
    for user, s in cur.items():
        if len(s[2]) > threshold:
            out.append((user, s[0], len(s[2])))
    return out


def naive_slide(rows, size: int, threshold: int) -> list[tuple]:
    """Per event: a deque of the user's recent times; emit when it holds more than the threshold."""
    recent: dict[str, deque] = defaultdict(deque)
    out = []
    for user, ts, _ip in rows:
        d = recent[user]
        d.append(ts)
        while d[0] <= ts - size:
            d.popleft()
        if len(d) > threshold:
            out.append((user, ts, len(d)))
    return out


# ------------------------------------------------------------------ shapes


SHAPES: dict[str, dict] = {
    "tumble_approx_distinct": dict(
        doc="APPROX_COUNT_DISTINCT(ip) per user and 1-minute TUMBLE window, HAVING > 4 (~1% of windows; the target shape)",
        sql="SELECT user, APPROX_COUNT_DISTINCT(ip) AS ips, window_start FROM logins "
            "GROUP BY user, TUMBLE(ts, INTERVAL '1' MINUTE) HAVING APPROX_COUNT_DISTINCT(ip) > 4",
        baseline=lambda rows: naive_windows(rows, MINUTE, MINUTE, 4), approx=True, start="window_start", value="ips",
    ),
    "tumble_exact_distinct_every_window": dict(
        doc="COUNT(DISTINCT ip) per user and 1-minute window, every (user, window) emitted (~490,000 rows: output-bound)",
        sql="SELECT user, COUNT(DISTINCT ip) AS ips, window_start FROM logins "
            "GROUP BY user, TUMBLE(ts, INTERVAL '1' MINUTE)",
        baseline=lambda rows: naive_windows(rows, MINUTE, MINUTE, 0), approx=False, start="window_start", value="ips",
    ),
    "hop_approx_distinct": dict(
        doc="APPROX_COUNT_DISTINCT(ip) per user over 10-minute windows every minute (10 panes merged per window), HAVING > 14 (~1% of windows)",
        sql="SELECT user, APPROX_COUNT_DISTINCT(ip) AS ips, window_start FROM logins "
            "GROUP BY user, HOP(ts, INTERVAL '1' MINUTE, INTERVAL '10' MINUTE) HAVING APPROX_COUNT_DISTINCT(ip) > 14",
        baseline=lambda rows: naive_windows(rows, 10 * MINUTE, MINUTE, 14), approx=True, start="window_start", value="ips",
    ),
    "session_exact_distinct": dict(
        doc="COUNT(DISTINCT ip) per user SESSION (gap 1 minute), HAVING > 8 (~5% of sessions)",
        sql="SELECT user, COUNT(DISTINCT ip) AS ips, window_start FROM logins "
            "GROUP BY user, SESSION(ts, INTERVAL '1' MINUTE) HAVING COUNT(DISTINCT ip) > 8",
        baseline=lambda rows: naive_sessions(rows, MINUTE, 8), approx=False, start="window_start", value="ips",
    ),
    "slide_burst": dict(
        doc="per event, COUNT(*) of the user's logins in the preceding 30 seconds, HAVING > 4 (bursts)",
        sql="SELECT user, COUNT(*) AS n, window_end FROM logins "
            "GROUP BY user, SLIDE(ts, INTERVAL '30' SECOND) HAVING COUNT(*) > 4",
        baseline=lambda rows: naive_slide(rows, 30_000, 4), approx=False, start="window_end", value="n",
    ),
}


def engine_for(sql: str) -> Engine:
    return Engine(parse_rules(f"rules:\n  - name: bench\n    kind: analytics\n    sql: \"{sql}\"\n"))


def timed(fn: Callable[[], object]) -> tuple[object, float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    got = fn()
    return got, time.perf_counter() - w0, time.process_time() - c0


def run_shape(name: str, shape: dict, table: pa.Table, rows: list[tuple], mem_events: int) -> dict:
    batches = table.to_batches(max_chunksize=BATCH)
    eng = engine_for(shape["sql"])

    def go():
        out = []
        for b in batches:
            out += eng.process(b).matches
        state = len(eng.snapshot())
        out += eng.finish().matches
        return out, state

    (matches, state_bytes), wall, cpu = timed(go)
    base, bwall, bcpu = timed(lambda: shape["baseline"](rows))
    n = table.num_rows
    # the engine against the exact baseline
    got = {(m["user"], m[shape["start"]]): m[shape["value"]] for m in matches}
    want = {(u, s): v for u, s, v in base}
    if shape["approx"]:
        p = 12
        bound = 3 * 1.04 / (2**p) ** 0.5
        common = set(got) & set(want)
        worst = max((abs(got[k] - want[k]) / want[k] for k in common), default=0.0)
        agree = worst <= bound and len(common) >= 0.95 * len(want) and len(common) >= 0.95 * len(got)
        check = {"rows": len(matches), "baseline_rows": len(base), "rows_in_both": len(common),
                 "worst_relative_error": round(worst, 4), "bound_3_sigma": round(bound, 4), "ok": bool(agree)}
    else:
        check = {"rows": len(matches), "baseline_rows": len(base), "ok": got == want}
    # memory on a shorter pass
    short = table.slice(0, mem_events).to_batches(max_chunksize=BATCH)
    eng2 = engine_for(shape["sql"])
    tracemalloc.start()
    for b in short:
        eng2.process(b)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    res = {
        "doc": shape["doc"],
        "sql": shape["sql"],
        "events": n,
        "engine_events_per_s_wall": round(n / wall),
        "engine_events_per_s_cpu": round(n / cpu),
        "baseline_events_per_s_wall": round(n / bwall),
        "baseline_events_per_s_cpu": round(n / bcpu),
        "speedup_cpu": round(bcpu / cpu, 2),
        "seconds_wall": round(wall, 3),
        "seconds_cpu": round(cpu, 3),
        "state_bytes_before_finish": state_bytes,
        f"peak_python_alloc_bytes_{mem_events}_events": peak,
        "check": check,
    }
    print(f"{name:36s} engine {res['engine_events_per_s_cpu']:>11,}/s cpu {res['engine_events_per_s_wall']:>11,}/s wall | "
          f"baseline {res['baseline_events_per_s_cpu']:>9,}/s cpu | x{res['speedup_cpu']:<6} rows {len(matches):>7,} "
          f"check {'ok' if check['ok'] else 'FAILED'}", flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="200,000 events, for a smoke run")
    ap.add_argument("--events", type=int, default=None)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES), help="run only these shapes")
    args = ap.parse_args(argv)
    n = args.events or (200_000 if args.quick else 1_000_000)
    table = logins(n, args.keys)
    rows = list(zip(table.column("user").to_pylist(), table.column("ts").to_pylist(), table.column("ip").to_pylist()))
    print(f"{n:,} events, {args.keys:,} keys, Arrow batches of {BATCH:,}; load average {os.getloadavg()}", flush=True)
    results = {}
    for name in args.shape or list(SHAPES):
        results[name] = run_shape(name, SHAPES[name], table, rows, min(n, 200_000))
    out = {
        "benchmark": "analytics",
        "events": n,
        "keys": args.keys,
        "batch_rows": BATCH,
        "target_events_per_s": 500_000,
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "shapes": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / ("analytics_quick.json" if args.quick else "analytics.json")
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path.relative_to(REPO)}")
    return 0 if all(r["check"]["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
