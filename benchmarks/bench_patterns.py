"""Pattern-engine benchmark: named stress shapes, each next to a naive baseline in the same run.

Run ``python benchmarks/bench_patterns.py`` (add ``--quick`` for a smoke run). Writes
``benchmarks/results/patterns.json`` and ``benchmarks/results/patterns.png``.

Every shape is seeded. The engine is fed Arrow record batches (the columnar path) and only the
processing loop is timed. The baseline is a naive matcher that tries every start row of every
partition with backtracking (tests/reference.py), measured on a prefix of the same events; each
shape also checks that engine and baseline find the same number of matches on that prefix.
Memory is the peak of Python allocations (tracemalloc) in a separate, shorter pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cep.operator import PatternOperator  # noqa: E402
from patterns.rules import parse_rule_text  # noqa: E402
from tests.reference import reference_matches  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


# ------------------------------------------------------------------ workloads


def random_walk(n: int, keys: int, seed: int, step_ms: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    k = rng.integers(0, keys, n)
    price = np.round(100 + rng.normal(0, 1, n), 2)
    return pa.table({"k": k, "ts": np.arange(n, dtype=np.int64) * step_ms, "price": price})


SHAPES: dict[str, dict] = {
    "selective_first_step": dict(
        doc="A B C over 100 keys; A's condition holds for ~1% of events",
        sql="""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, C.ts AS t1 PATTERN (A B C)
              DEFINE A AS price > 102.33, B AS price < 100, C AS price > 100)""",
        keys=100,
        cond={"A": lambda x, i, a: x[i] > 102.33, "B": lambda x, i, a: x[i] < 100, "C": lambda x, i, a: x[i] > 100},
    ),
    "every_event_advances": dict(
        doc="V-shape A B+ C over 100 keys: every event starts or extends a partial match",
        sql="""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, LAST(B.ts) AS bottom, C.ts AS t1 PATTERN (A B+ C)
              DEFINE B AS price < PREV(price), C AS price > PREV(price))""",
        keys=100,
        cond={"A": lambda x, i, a: True, "B": lambda x, i, a: i > 0 and x[i] < x[i - 1],
              "C": lambda x, i, a: i > 0 and x[i] > x[i - 1]},
    ),
    "deep_kleene": dict(
        doc="A B+ C where B holds for ~99% of events: runs of hundreds of rows before C",
        sql="""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, COUNT(B.*) AS nb, C.ts AS t1 PATTERN (A B+ C)
              DEFINE A AS price < 99, B AS price < 102.33, C AS price >= 102.33)""",
        keys=100,
        cond={"A": lambda x, i, a: x[i] < 99, "B": lambda x, i, a: x[i] < 102.33, "C": lambda x, i, a: x[i] >= 102.33},
    ),
    "keys_10k": dict(
        doc="the V-shape over 10,000 keys",
        sql="""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, C.ts AS t1 PATTERN (A B+ C)
              DEFINE B AS price < PREV(price), C AS price > PREV(price))""",
        keys=10_000,
        cond={"A": lambda x, i, a: True, "B": lambda x, i, a: i > 0 and x[i] < x[i - 1],
              "C": lambda x, i, a: i > 0 and x[i] > x[i - 1]},
    ),
    "history_within": dict(
        doc="back-referencing conditions (aggregate over the match) with WITHIN 50 ms, 100 keys",
        sql="""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, SUM(B.price) AS s, C.ts AS t1 PATTERN (A B+ C) WITHIN INTERVAL '50' MILLISECOND
              DEFINE A AS price < 99.5, B AS SUM(B.price) < 600, C AS C.price > A.price + 2)""",
        keys=100,
        cond=None,  # checked by the property tests; the baseline here runs without conditions' history
    ),
}


def many_rules_sqls(n: int) -> list[str]:
    rng = np.random.default_rng(7)
    out = []
    for _ in range(n):
        th = round(101.8 + rng.random(), 2)
        out.append(f"""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, C.ts AS t1 PATTERN (A B C)
              DEFINE A AS price > {th}, B AS price < 100, C AS price > 100)""")
    return out


# ------------------------------------------------------------------ measuring


def run_engine(sqls: list[str], table: pa.Table, batch: int = 8192) -> tuple[float, int]:
    ops = [PatternOperator(parse_rule_text(s).compiled, name=f"r{i}") for i, s in enumerate(sqls)]
    batches = table.to_batches(max_chunksize=batch)
    matches = 0
    t0 = time.perf_counter()
    for b in batches:
        for op in ops:
            matches += len(op.process(b).matches)
    for op in ops:
        matches += len(op.finish().matches)
    return time.perf_counter() - t0, matches


def run_baseline(sql: str, table: pa.Table, cond: dict[str, Callable]) -> tuple[float, int]:
    from patterns.match_recognize import parse_statement

    stmt = parse_statement(sql)
    k = table.column("k").to_numpy()
    price = table.column("price").to_numpy()
    t0 = time.perf_counter()
    order = np.argsort(k, kind="stable")
    ks, ps = k[order], price[order]
    bounds = np.flatnonzero(np.diff(ks)) + 1
    matches = 0
    for seg in np.split(ps, bounds):
        xs = seg.tolist()

        def c(var, i, asg, xs=xs):
            return cond[var](xs, i, asg)

        matches += len(reference_matches(len(xs), stmt.pattern, c, stmt.skip.mode))
    return time.perf_counter() - t0, matches


def peak_memory(sqls: list[str], table: pa.Table) -> int:
    tracemalloc.start()
    run_engine(sqls, table)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def bench_shape(name: str, n: int, base_n: int) -> dict:
    if name == "many_rules_50":
        sqls = many_rules_sqls(50)
        spec = {"doc": "50 selective rules (A B C, different thresholds) in one pass, 100 keys", "keys": 100}
        cond = None
    else:
        spec = SHAPES[name]
        sqls = [spec["sql"]]
        cond = spec["cond"]
    table = random_walk(n, spec["keys"], seed=42)
    secs, matches = run_engine(sqls, table)
    res = {
        "shape": name,
        "doc": spec["doc"],
        "events": n,
        "rules": len(sqls),
        "seconds": secs,
        "events_per_s": n / secs,
        "matches": matches,
    }
    if cond is not None:
        sub = table.slice(0, base_n)
        b_secs, b_matches = run_baseline(sqls[0], sub, cond)
        e_secs, e_matches = run_engine(sqls, sub)
        res.update(
            baseline_events=base_n,
            baseline_events_per_s=base_n / b_secs,
            engine_events_per_s_same_prefix=base_n / e_secs,
            speedup_vs_baseline=(base_n / e_secs) / (base_n / b_secs),
            same_matches_as_baseline=b_matches == e_matches,
        )
    res["peak_python_bytes"] = peak_memory(sqls, table.slice(0, min(n, 200_000)))
    return res


def bench_soak(n: int, every: int) -> dict:
    """Memory over a long run with WITHIN: Python allocations sampled as events flow."""
    sql = SHAPES["history_within"]["sql"]
    op = PatternOperator(parse_rule_text(sql).compiled)
    tracemalloc.start()
    curve = []
    done = 0
    t0 = time.perf_counter()
    chunk = 100_000
    while done < n:
        table = random_walk(chunk, 100, seed=done)
        table = table.set_column(1, "ts", pa.array(np.arange(done, done + chunk, dtype=np.int64)))
        for b in table.to_batches(max_chunksize=8192):
            op.process(b)
        done += chunk
        if done % every == 0:
            curve.append((done, tracemalloc.get_traced_memory()[0]))
    op.finish()
    secs = time.perf_counter() - t0
    tracemalloc.stop()
    return {"events": n, "seconds_traced": secs, "memory_curve": curve}


def bench_cli(n: int) -> dict:
    """End to end: ``cep run`` over a JSON lines file (decode, match, encode), timed as a process."""
    import tempfile

    table = random_walk(n, 100, seed=3)
    with tempfile.TemporaryDirectory() as d:
        ev = Path(d) / "events.jsonl"
        with open(ev, "w") as f:
            for row in table.to_pylist():
                f.write(json.dumps(row) + "\n")
        rules = Path(d) / "r.sql"
        rules.write_text(SHAPES["every_event_advances"]["sql"])
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "cep.cli", "run", str(rules), "--input", str(ev), "-o", str(Path(d) / "o.jsonl"), "-q"],
                       check=True, cwd=REPO)
        secs = time.perf_counter() - t0
    return {"shape": "cli_jsonl_end_to_end", "events": n, "seconds": secs, "events_per_s": n / secs}


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = [r for r in results["shapes"] if "events_per_s" in r]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    ax = axes[0]
    names = [r["shape"] for r in shapes]
    ax.barh(names, [r["events_per_s"] for r in shapes], color="#3b7dd8", label="engine (Arrow batches)")
    base = [r.get("baseline_events_per_s", 0) for r in shapes]
    ax.barh(names, base, color="#d8843b", label="naive backtracking baseline", height=0.4)
    ax.set_xscale("log")
    ax.set_xlabel("events/s (log)")
    ax.set_title("Pattern throughput by shape, one core")
    ax.legend(loc="lower right", fontsize=8)
    ax = axes[1]
    curve = results.get("soak", {}).get("memory_curve", [])
    if curve:
        ax.plot([c[0] / 1e6 for c in curve], [c[1] / 2**20 for c in curve], marker="o")
        ax.set_xlabel("events processed (millions)")
        ax.set_ylabel("Python heap in use (MiB)")
        ax.set_ylim(bottom=0)
        ax.set_title("Memory over a long run with WITHIN (100 keys)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small inputs (a smoke run)")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--soak-events", type=int, default=10_000_000)
    args = ap.parse_args()
    n = 50_000 if args.quick else args.events
    base_n = 5_000 if args.quick else 50_000
    soak = 500_000 if args.quick else args.soak_events
    results = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "shapes": [],
    }
    for name in list(SHAPES) + ["many_rules_50"]:
        r = bench_shape(name, n if name != "many_rules_50" else n // 5, base_n)
        results["shapes"].append(r)
        extra = f", baseline x{r['speedup_vs_baseline']:.0f}" if "speedup_vs_baseline" in r else ""
        print(f"{name:24s} {r['events_per_s']:>12,.0f} events/s  {r['matches']:>8,} matches{extra}", flush=True)
    results["shapes"].append(bench_cli(n // 5))
    print(f"{'cli_jsonl_end_to_end':24s} {results['shapes'][-1]['events_per_s']:>12,.0f} events/s", flush=True)
    results["soak"] = bench_soak(soak, max(soak // 10, 100_000))
    results["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "patterns.json").write_text(json.dumps(results, indent=2))
    plot(results, RESULTS / "patterns.png")
    print(f"wrote {RESULTS / 'patterns.json'} and patterns.png")


if __name__ == "__main__":
    main()
