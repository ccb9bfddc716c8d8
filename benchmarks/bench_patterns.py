"""Pattern-engine benchmark: named stress shapes and scaling curves, each next to a naive baseline.

Run ``python benchmarks/bench_patterns.py`` (add ``--quick`` for a smoke run, ``--curves`` for the
scaling curves). Writes ``benchmarks/results/patterns.json`` and ``benchmarks/results/patterns.png``,
and with ``--curves`` also ``benchmarks/results/patterns_curves.png``.

Every workload is seeded. The engine is fed Arrow record batches (the columnar path) and only the
processing loop is timed, in wall seconds (``time.perf_counter``) and in CPU seconds of this
process (``time.process_time``). The machine may be shared, so CPU time is what "events/s on one
core" means: ``events_per_cpu_s`` is the headline figure and every speedup is a ratio of CPU
times; ``events_per_s`` (wall) is reported beside it and is only a lower bound under load.

The baseline is a naive matcher that tries every start row of every partition with backtracking
(tests/reference.py), measured on a prefix of the same events; the engine is measured again on
that prefix, and each comparison checks that both find the same number of matches there.
Memory: the peak of Python allocations (tracemalloc) on a 200,000-event prefix per shape, and a
long run (10,000,000 events by default, in a process of its own) that samples resident memory
(VmRSS) and the interpreter's allocated blocks, with the least-squares slope of RSS after a
warm-up (the first 20%) in MiB per million events.

Scaling curves (``--curves``): throughput against the number of rules (1-200), the number of keys
(10-1,000,000), the ``WITHIN`` length (10 ms-10 s over a 1 ms event stream, with the peak of live
partial matches) and the selectivity of the first variable (0.1%-100%), each point with its
baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import cep.batch_dfa as batch_dfa  # noqa: E402
from cep.operator import PatternOperator  # noqa: E402
from patterns.rules import parse_rule_text  # noqa: E402
from tests.reference import reference_matches  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"

# A condition for the reference matcher: (prices of the partition, row index, assignment so far
# including this row) -> holds.  An assignment is a tuple of (row, variable, excluded).
Cond = Callable[[list[float], int, tuple], bool]


class Baseline(NamedTuple):
    """One rule as the reference matcher runs it: statement, conditions, WITHIN in ms (or None)."""

    sql: str
    cond: dict[str, Cond]
    within_ms: int | None = None


class Timed(NamedTuple):
    """What one timed run produced: wall and CPU seconds of the hot loop, matches, live peak."""

    wall: float
    cpu: float
    matches: int
    peak_live: int = 0
    batch_path: bool = False  # every rule stepped its keys with cep/batch_dfa.py


# ------------------------------------------------------------------ workloads


def random_walk(n: int, keys: int, seed: int, step_ms: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    k = rng.integers(0, keys, n)
    price = np.round(100 + rng.normal(0, 1, n), 2)
    return pa.table({"k": k, "ts": np.arange(n, dtype=np.int64) * step_ms, "price": price})


def _of(x: list[float], asg: tuple, var: str) -> list[float]:
    """The prices of the rows the assignment gives to ``var``."""
    return [x[r] for r, v, _ in asg if v == var]


V_SHAPE_SQL = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, LAST(B.ts) AS bottom, C.ts AS t1 PATTERN (A B+ C)
              DEFINE B AS price < PREV(price), C AS price > PREV(price))"""
V_SHAPE_COND: dict[str, Cond] = {
    "A": lambda x, i, a: True,
    "B": lambda x, i, a: i > 0 and x[i] < x[i - 1],
    "C": lambda x, i, a: i > 0 and x[i] > x[i - 1],
}

KEYS_SQL = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, C.ts AS t1 PATTERN (A B+ C)
              DEFINE B AS price < PREV(price), C AS price > PREV(price))"""

SHAPES: dict[str, dict[str, Any]] = {
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
        sql=V_SHAPE_SQL,
        keys=100,
        cond=V_SHAPE_COND,
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
        sql=KEYS_SQL,
        keys=10_000,
        cond=V_SHAPE_COND,
    ),
    "keys_1m": dict(
        doc="the V-shape over 1,000,000 keys, 3 events per key on average (3,000,000 events)",
        sql=KEYS_SQL,
        keys=1_000_000,
        events_per_key=3,
        cond=V_SHAPE_COND,
    ),
    "history_within": dict(
        doc="back-referencing conditions (aggregate over the match) with WITHIN 50 ms, 100 keys",
        sql="""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, SUM(B.price) AS s, C.ts AS t1 PATTERN (A B+ C) WITHIN INTERVAL '50' MILLISECOND
              DEFINE A AS price < 99.5, B AS SUM(B.price) < 600, C AS C.price > A.price + 2)""",
        keys=100,
        cond={"A": lambda x, i, a: x[i] < 99.5,
              "B": lambda x, i, a: sum(_of(x, a, "B")) < 600,
              "C": lambda x, i, a: x[i] > _of(x, a, "A")[0] + 2},
        within_ms=50,
    ),
}


def _above(th: float) -> Cond:
    return lambda x, i, a: x[i] > th


def many_rules(n: int) -> list[Baseline]:
    """``n`` selective A B C rules with different thresholds on A (seeded), with their conditions."""
    rng = np.random.default_rng(7)
    out = []
    for _ in range(n):
        th = round(101.8 + rng.random(), 2)
        sql = f"""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, C.ts AS t1 PATTERN (A B C)
              DEFINE A AS price > {th}, B AS price < 100, C AS price > 100)"""
        cond: dict[str, Cond] = {"A": _above(th), "B": lambda x, i, a: x[i] < 100, "C": lambda x, i, a: x[i] > 100}
        out.append(Baseline(sql, cond))
    return out


def many_rules_sqls(n: int) -> list[str]:
    return [b.sql for b in many_rules(n)]


def within_rule(within_ms: int) -> Baseline:
    """A history rule whose runs end by ``WITHIN`` rather than by its conditions.

    B's running average stays below its bound on almost every row and C (a rise of 3.5 over A's
    price) holds for under 1% of rows, so with greedy ``B+`` every run lives until ``WITHIN``
    closes it: live partial matches grow with the window.
    """
    sql = f"""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, AVG(B.price) AS avg_b, C.ts AS t1 PATTERN (A B+ C)
              WITHIN INTERVAL '{within_ms}' MILLISECOND
              DEFINE A AS price < 99.5, B AS AVG(B.price) < 100.5, C AS C.price > A.price + 3.5)"""

    def avg_b(x: list[float], i: int, a: tuple) -> bool:
        b = _of(x, a, "B")
        return sum(b) / len(b) < 100.5

    cond: dict[str, Cond] = {"A": lambda x, i, a: x[i] < 99.5, "B": avg_b,
                             "C": lambda x, i, a: x[i] > _of(x, a, "A")[0] + 3.5}
    return Baseline(sql, cond, within_ms)


def selectivity_rule(table: pa.Table, selectivity: float) -> tuple[Baseline, float]:
    """The selective A B C rule with A's threshold set so A holds for ``selectivity`` of the rows.

    The threshold is a price from the table itself (two decimals, so the SQL literal and the
    baseline's float are the same number); returns the rule and the fraction actually selected.
    """
    price = np.sort(table.column("price").to_numpy())
    n = len(price)
    q = float(price[max(0, n - max(1, math.ceil(selectivity * n)))])
    sql = f"""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
              MEASURES A.ts AS t0, C.ts AS t1 PATTERN (A B C)
              DEFINE A AS price >= {q:.2f}, B AS price < 100, C AS price > 100)"""
    cond: dict[str, Cond] = {"A": lambda x, i, a: x[i] >= q,
                             "B": lambda x, i, a: x[i] < 100, "C": lambda x, i, a: x[i] > 100}
    return Baseline(sql, cond), float(np.mean(price >= q))


# ------------------------------------------------------------------ measuring


def run_engine(sqls: list[str], table: pa.Table, batch: int = 8192, live: bool = False) -> Timed:
    """Every rule over the table in Arrow batches; times only ``process``/``finish``.

    With ``live``, the live partial matches of all rules are counted after every batch (untimed)
    and their peak is returned.
    """
    ops = [PatternOperator(parse_rule_text(s).compiled, name=f"r{i}") for i, s in enumerate(sqls)]
    batches = table.to_batches(max_chunksize=batch)
    matches = peak = 0
    wall = cpu = 0.0
    for b in batches:
        w0, c0 = time.perf_counter(), time.process_time()
        for op in ops:
            matches += len(op.process(b).matches)
        wall += time.perf_counter() - w0
        cpu += time.process_time() - c0
        if live:
            peak = max(peak, sum(op.live_partial_matches() for op in ops))
    w0, c0 = time.perf_counter(), time.process_time()
    for op in ops:
        matches += len(op.finish().matches)
    wall += time.perf_counter() - w0
    cpu += time.process_time() - c0
    return Timed(wall, cpu, matches, peak, all(op._keyed is not None for op in ops))


def run_automaton(sqls: list[str], table: pa.Table) -> Timed:
    """:func:`run_engine` with the batch DFA path switched off: every key stepped by the automaton."""
    batch_dfa.USE_BATCH_DFA = False
    try:
        return run_engine(sqls, table)
    finally:
        batch_dfa.USE_BATCH_DFA = True


def warm_up() -> float:
    """Load numba and the batch path's compiled loops (from numba's cache, or compile them) once,
    untimed, as a long-running engine does at its first batch; its CPU seconds."""
    c0 = time.process_time()
    run_engine([V_SHAPE_SQL], random_walk(2000, 10, seed=1))
    return time.process_time() - c0


def run_baseline(sql: str, table: pa.Table, cond: dict[str, Cond], within_ms: int | None = None) -> Timed:
    """The reference matcher over every partition of the table (the partitioning is timed too)."""
    from patterns.match_recognize import parse_statement

    stmt = parse_statement(sql)
    k = table.column("k").to_numpy()
    price = table.column("price").to_numpy()
    ts = table.column("ts").to_numpy()
    w0, c0 = time.perf_counter(), time.process_time()
    order = np.argsort(k, kind="stable")
    ks, ps, tss = k[order], price[order], ts[order]
    bounds = np.flatnonzero(np.diff(ks)) + 1
    matches = 0
    for seg, tseg in zip(np.split(ps, bounds), np.split(tss, bounds)):
        xs = seg.tolist()

        def c(var: str, i: int, asg: tuple, xs: list[float] = xs) -> bool:
            return cond[var](xs, i, asg)

        matches += len(reference_matches(len(xs), stmt.pattern, c, stmt.skip.mode,
                                         ts=tseg.tolist() if within_ms is not None else None,
                                         within=within_ms))
    return Timed(time.perf_counter() - w0, time.process_time() - c0, matches)


def run_baselines(rules: list[Baseline], table: pa.Table) -> Timed:
    """The reference matcher for every rule in turn over the same events (times summed)."""
    wall = cpu = 0.0
    matches = 0
    for r in rules:
        t = run_baseline(r.sql, table, r.cond, r.within_ms)
        wall, cpu, matches = wall + t.wall, cpu + t.cpu, matches + t.matches
    return Timed(wall, cpu, matches)


def _rate(events: int, seconds: float) -> float:
    return events / max(seconds, 1e-9)


def measure(sqls: list[str], table: pa.Table, base_n: int, baseline: list[Baseline] | None,
            live: bool = False, compare_automaton: bool = False) -> dict[str, Any]:
    """The engine over the whole table, and, when there is a baseline, both on a prefix of it."""
    n = table.num_rows
    e = run_engine(sqls, table, live=live)
    res: dict[str, Any] = {
        "events": n,
        "rules": len(sqls),
        "seconds": e.wall,
        "cpu_seconds": e.cpu,
        "events_per_s": _rate(n, e.wall),
        "events_per_cpu_s": _rate(n, e.cpu),
        "matches": e.matches,
    }
    if live:
        res["peak_live_partial_matches"] = e.peak_live
    res["batch_dfa_path"] = e.batch_path
    if e.batch_path and compare_automaton:
        # the same events through the per-key automaton (the path before cep/batch_dfa.py), same run
        au = run_automaton(sqls, table)
        res.update(automaton_cpu_seconds=au.cpu, automaton_events_per_cpu_s=_rate(n, au.cpu),
                   speedup_vs_automaton=au.cpu / max(e.cpu, 1e-9), same_matches_as_automaton=au.matches == e.matches)
    if baseline:
        m = min(base_n, n)
        sub = table.slice(0, m)
        b = run_baselines(baseline, sub)
        ep = run_engine(sqls, sub)
        res.update(
            baseline_events=m,
            baseline_seconds=b.wall,
            baseline_cpu_seconds=b.cpu,
            baseline_events_per_s=_rate(m, b.wall),
            baseline_events_per_cpu_s=_rate(m, b.cpu),
            engine_events_per_s_same_prefix=_rate(m, ep.wall),
            engine_events_per_cpu_s_same_prefix=_rate(m, ep.cpu),
            speedup_vs_baseline=b.cpu / max(ep.cpu, 1e-9),
            speedup_vs_baseline_wall=b.wall / max(ep.wall, 1e-9),
            baseline_matches=b.matches,
            engine_matches_same_prefix=ep.matches,
            same_matches_as_baseline=b.matches == ep.matches,
        )
    return res


def peak_memory(sqls: list[str], table: pa.Table) -> int:
    tracemalloc.start()
    run_engine(sqls, table)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def bench_shape(name: str, n: int, base_n: int) -> dict[str, Any]:
    if name == "many_rules_50":
        rules = many_rules(50)
        spec: dict[str, Any] = {"doc": "50 selective rules (A B C, different thresholds) in one pass, 100 keys",
                                "keys": 100}
        base_n = max(1, base_n // 5)  # the baseline runs all 50 rules on its prefix
    else:
        spec = SHAPES[name]
        rules = [Baseline(spec["sql"], spec["cond"], spec.get("within_ms"))]
    sqls = [r.sql for r in rules]
    keys = spec["keys"]
    if "events_per_key" in spec:
        keys = keys if n >= 1_000_000 else max(1000, n // 10)  # --quick: the same shape, smaller
        n = keys * spec["events_per_key"]
    table = random_walk(n, keys, seed=42)
    res = {"shape": name, "doc": spec["doc"], "keys": keys}
    res.update(measure(sqls, table, base_n, rules, compare_automaton=True))
    res["peak_python_bytes"] = peak_memory(sqls, table.slice(0, min(n, 200_000)))
    return res


# ------------------------------------------------------------------ memory over a long run


def rss_bytes() -> int:
    """Resident memory of this process now (VmRSS), or -1 where /proc is not available."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1


def slope_per_million(xs: list[int], ys: list[float]) -> float | None:
    """Least-squares slope of ``ys`` per million of ``xs`` (None with fewer than two points)."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    return float(np.polyfit(np.asarray(xs, dtype=float) / 1e6, np.asarray(ys, dtype=float), 1)[0])


def bench_soak(n: int, every: int, keys: int = 100, warmup: float = 0.2) -> dict[str, Any]:
    """Memory over a long run of the ``history_within`` rule: RSS and allocated blocks as events flow.

    Every ``every`` events (rounded to whole chunks of input) it samples VmRSS, the interpreter's
    allocated blocks (``sys.getallocatedblocks``) and the live partial matches. The slope of RSS
    over the samples after the warm-up (the first ``warmup`` fraction of the run) says whether
    memory grows with the stream: with WITHIN it should be ~0 MB per million events. Only
    ``process``/``finish`` are timed (the events are generated chunk by chunk in between).
    """
    op = PatternOperator(parse_rule_text(SHAPES["history_within"]["sql"]).compiled)
    chunk = max(1, min(100_000, every))
    samples = [{"events": 0, "rss_bytes": rss_bytes(), "allocated_blocks": sys.getallocatedblocks(),
                "live_partial_matches": 0}]
    done = matches = 0
    next_at = every
    wall = cpu = 0.0
    while done < n:
        m = min(chunk, n - done)
        table = random_walk(m, keys, seed=done)
        table = table.set_column(1, "ts", pa.array(np.arange(done, done + m, dtype=np.int64)))
        w0, c0 = time.perf_counter(), time.process_time()
        for b in table.to_batches(max_chunksize=8192):
            matches += len(op.process(b).matches)
        wall += time.perf_counter() - w0
        cpu += time.process_time() - c0
        done += m
        if done >= next_at or done == n:
            samples.append({"events": done, "rss_bytes": rss_bytes(), "allocated_blocks": sys.getallocatedblocks(),
                            "live_partial_matches": op.live_partial_matches()})
            next_at += every
    w0, c0 = time.perf_counter(), time.process_time()
    matches += len(op.finish().matches)
    wall += time.perf_counter() - w0
    cpu += time.process_time() - c0
    after = [s for s in samples if s["events"] >= warmup * n]
    xs = [s["events"] for s in after]
    rss = [s["rss_bytes"] / 2**20 for s in after]
    return {
        "events": n,
        "keys": keys,
        "every": every,
        "warmup_events": int(warmup * n),
        "seconds": wall,
        "cpu_seconds": cpu,
        "events_per_s": _rate(n, wall),
        "events_per_cpu_s": _rate(n, cpu),
        "matches": matches,
        "samples": samples,
        "memory_curve": [[s["events"], s["rss_bytes"]] for s in samples],  # resident bytes
        "rss_mb_after_warmup_min_max": [min(rss), max(rss)] if rss else None,
        "rss_slope_mb_per_million_events": slope_per_million(xs, rss) if samples[0]["rss_bytes"] >= 0 else None,
        "allocated_blocks_slope_per_million_events": slope_per_million(xs, [s["allocated_blocks"] for s in after]),
    }


def soak_in_subprocess(n: int, every: int) -> dict[str, Any]:
    """:func:`bench_soak` in a fresh interpreter: this one's heap, grown by the shapes and curves
    before it, would otherwise absorb (and hide) growth in memory it has freed but kept."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--soak-only",
           "--soak-events", str(n), "--soak-every", str(every)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0 or SOAK_MARK not in proc.stdout:
        raise SystemExit(f"memory run failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    res = json.loads(proc.stdout.rsplit(SOAK_MARK, 1)[1])
    res["process"] = "separate"
    return res


SOAK_MARK = "\n@@SOAK@@\n"


# ------------------------------------------------------------------ scaling curves


def curve_rules(counts: list[int], n: int, budget: int, base_n: int) -> list[dict[str, Any]]:
    """Throughput against the number of rules, all in one pass over the same 100-key stream.

    A point runs ``budget / rules`` events (within [2,000, n]) so the big rule counts stay short;
    the baseline runs the reference matcher once per rule on the first ``base_n`` events.
    """
    out = []
    for r in counts:
        rules = many_rules(r)
        events = min(n, max(2_000, budget // r))
        res = {"rules": r, **measure([b.sql for b in rules], random_walk(events, 100, seed=42), base_n, rules)}
        out.append(res)
        _print_point(f"rules={r}", res)
    return out


def curve_keys(counts: list[int], n: int, base_n: int) -> list[dict[str, Any]]:
    """Throughput of the V-shape (every event starts or extends a run) against the number of keys.

    A point runs max(n, 3 x keys) events, so every key sees a few events on average; the
    baseline's prefix stays ``base_n`` events.
    """
    out = []
    for keys in counts:
        events = max(n, 3 * keys)
        res = {"keys": keys, **measure([V_SHAPE_SQL], random_walk(events, keys, seed=42), base_n,
                                       [Baseline(V_SHAPE_SQL, V_SHAPE_COND)])}
        out.append(res)
        _print_point(f"keys={keys:,}", res)
    return out


def curve_within(windows_ms: list[int], n: int, base_n: int) -> list[dict[str, Any]]:
    """Throughput and peak live partial matches against the ``WITHIN`` length (1 ms events, 100 keys).

    The baseline's prefix (``base_n`` events, i.e. ``base_n`` ms of event time) spans several of
    the longest windows in a full run (50 s against 10 s).
    """
    out = []
    table = random_walk(n, 100, seed=42)
    for w in windows_ms:
        rule = within_rule(w)
        res = {"within_ms": w, **measure([rule.sql], table, base_n, [rule], live=True)}
        out.append(res)
        _print_point(f"within={w:,}ms", res, f", peak live {res['peak_live_partial_matches']:,}")
    return out


def curve_selectivity(fractions: list[float], n: int, base_n: int) -> list[dict[str, Any]]:
    """Throughput of A B C (100 keys) against the fraction of events on which A holds."""
    out = []
    table = random_walk(n, 100, seed=42)
    for s in fractions:
        rule, actual = selectivity_rule(table, s)
        res = {"selectivity": s, "measured_selectivity": actual, **measure([rule.sql], table, base_n, [rule])}
        out.append(res)
        _print_point(f"selectivity={s:.1%}", res)
    return out


def _print_point(label: str, r: dict[str, Any], extra: str = "") -> None:
    base = ""
    if "speedup_vs_baseline" in r:
        same = "" if r["same_matches_as_baseline"] else " (MATCH COUNTS DIFFER)"
        base = (f", baseline {r['baseline_events_per_cpu_s']:>10,.0f}/cpu-s on {r['baseline_events']:,}"
                f", x{r['speedup_vs_baseline']:.2f}{same}")
    print(f"  {label:22s} {r['events_per_cpu_s']:>11,.0f} events/cpu-s ({r['events_per_s']:,.0f}/s wall)"
          f" {r['matches']:>8,} matches{base}{extra}", flush=True)


def bench_curves(quick: bool, n: int, base_n: int) -> dict[str, list[dict[str, Any]]]:
    print("curves:", flush=True)
    if quick:
        return {
            "rules": curve_rules([1, 10, 50], n, 200_000, 2_000),
            "keys": curve_keys([10, 1_000, 10_000], n, base_n),
            "within": curve_within([10, 100, 1_000, 10_000], n, base_n),
            "selectivity": curve_selectivity([0.001, 0.01, 0.1, 0.5, 1.0], n, base_n),
        }
    return {
        "rules": curve_rules([1, 10, 50, 100, 200], n, 2_000_000, 10_000),
        "keys": curve_keys([10, 100, 1_000, 10_000, 100_000, 1_000_000], n, base_n),
        "within": curve_within([10, 30, 100, 300, 1_000, 3_000, 10_000], n, base_n),
        "selectivity": curve_selectivity([0.001, 0.01, 0.1, 0.5, 1.0], n, base_n),
    }


# ------------------------------------------------------------------ end to end


def bench_cli(n: int) -> dict[str, Any]:
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
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "cep.cli", "run", str(rules), "--input", str(ev), "-o", str(Path(d) / "o.jsonl"), "-q"],
                       check=True, cwd=REPO)
        secs = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"shape": "cli_jsonl_end_to_end", "doc": "JSON lines through `cep run`, process start included",
            "events": n, "seconds": secs, "cpu_seconds": cpu,
            "events_per_s": _rate(n, secs), "events_per_cpu_s": _rate(n, cpu)}


# ------------------------------------------------------------------ plots


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = [r for r in results["shapes"] if "events_per_cpu_s" in r]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    ax = axes[0]
    names = [r["shape"] for r in shapes]
    ax.barh(names, [r["events_per_cpu_s"] for r in shapes], color="#3b7dd8", label="engine (Arrow batches)")
    base = [r.get("baseline_events_per_cpu_s", 0) for r in shapes]
    ax.barh(names, base, color="#d8843b", label="naive backtracking baseline", height=0.4)
    ax.set_xscale("log")
    ax.set_xlabel("events per CPU second (log)")
    ax.set_title("Pattern throughput by shape, one core")
    ax.legend(loc="upper right", fontsize=8)
    ax = axes[1]
    samples = results.get("soak", {}).get("samples", [])
    if samples:
        xs = [s["events"] / 1e6 for s in samples]
        ax.plot(xs, [s["rss_bytes"] / 2**20 for s in samples], marker="o", ms=3, color="#3b7dd8",
                label="resident memory (MiB)")
        ax.set_xlabel("events processed (millions)")
        ax.set_ylabel("resident memory (MiB)")
        ax.set_ylim(bottom=0)
        ax2 = ax.twinx()
        ax2.plot(xs, [s["allocated_blocks"] / 1e3 for s in samples], color="#d8843b", lw=1,
                 label="allocated blocks (thousands)")
        ax2.set_ylabel("allocated blocks (thousands)")
        ax2.set_ylim(bottom=0)
        slope = results["soak"].get("rss_slope_mb_per_million_events")
        note = f", RSS slope {slope:+.2f} MiB per million events" if slope is not None else ""
        ax.set_title(f"Memory over a long run with WITHIN (100 keys){note}", fontsize=9)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_curves(curves: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("rules", "rules", "number of rules (one pass)", lambda v: v),
        ("keys", "keys", "number of keys", lambda v: v),
        ("within", "within_ms", "WITHIN (ms), 1 ms between events", lambda v: v),
        ("selectivity", "selectivity", "fraction of events where A holds (%)", lambda v: 100 * v),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    for ax, (name, key, label, fx) in zip(axes.flat, panels):
        pts = curves.get(name, [])
        if not pts:
            ax.set_visible(False)
            continue
        xs = [fx(p[key]) for p in pts]
        ax.plot(xs, [p["events_per_cpu_s"] for p in pts], marker="o", color="#3b7dd8", label="engine")
        with_base = [(x, p) for x, p in zip(xs, pts) if "baseline_events_per_cpu_s" in p]
        if with_base:
            ax.plot([x for x, _ in with_base], [p["engine_events_per_cpu_s_same_prefix"] for _, p in with_base],
                    ls=":", marker=".", color="#3b7dd8", alpha=0.7, label="engine on the baseline's prefix")
            ax.plot([x for x, _ in with_base], [p["baseline_events_per_cpu_s"] for _, p in with_base],
                    marker="s", color="#d8843b", label="naive baseline (same prefix)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("events per CPU second")
        ax.grid(True, which="both", alpha=0.25)
        ax.set_title(f"throughput vs {name}")
        if name == "within":
            ax2 = ax.twinx()
            ax2.plot(xs, [p["peak_live_partial_matches"] for p in pts], ls="--", marker="^", color="#5a9e4b",
                     label="peak live partial matches")
            ax2.set_yscale("symlog")
            ax2.set_ylabel("peak live partial matches")
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = ax2.get_legend_handles_labels()
            ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower left")
        else:
            ax.legend(fontsize=7, loc="lower left")
    fig.suptitle("Pattern engine scaling, each point next to the naive baseline measured in the same run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------ main


def merge_shapes(results: dict[str, Any]) -> None:
    """Put the shapes of a ``--shapes`` run into patterns.json in place of their old entries
    (new shapes after the last one measured by a full run), noting when each was measured."""
    path = RESULTS / "patterns.json"
    old = json.loads(path.read_text()) if path.exists() else {"shapes": []}
    for r in results["shapes"]:
        r["measured"] = f"{results['date']} (--shapes run, load average {results['load_average_before'][0]:.2f})"
        r["warm_up_cpu_seconds"] = results["warm_up_cpu_seconds"]
        names = [x["shape"] for x in old["shapes"]]
        if r["shape"] in names:
            old["shapes"][names.index(r["shape"])] = r
        else:
            at = max((i for i, x in enumerate(old["shapes"]) if x["shape"] in SHAPES or x["shape"].startswith("many_rules")),
                     default=len(old["shapes"]) - 1)
            old["shapes"].insert(at + 1, r)
    path.write_text(json.dumps(old, indent=2) + "\n")
    plot(old, RESULTS / "patterns.png")
    print(f"merged {', '.join(r['shape'] for r in results['shapes'])} into {path}")



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small inputs (a smoke run)")
    ap.add_argument("--curves", action="store_true", help="also the scaling curves (rules, keys, WITHIN, selectivity)")
    ap.add_argument("--events", type=int, default=1_000_000, help="events per shape (default 1,000,000)")
    ap.add_argument("--curve-events", type=int, default=300_000, help="events per curve point (default 300,000)")
    ap.add_argument("--soak-events", type=int, default=10_000_000, help="events in the memory run (default 10,000,000)")
    ap.add_argument("--soak-every", type=int, default=100_000, help="events between memory samples (default 100,000)")
    ap.add_argument("--soak-only", action="store_true", help=argparse.SUPPRESS)  # the memory run's own process
    ap.add_argument("--shapes", default="", help="only these shapes (comma-separated), merged into the existing "
                    "patterns.json (no CLI run, curves or memory run)")
    args = ap.parse_args()
    if args.soak_only:
        sys.stdout.write(SOAK_MARK + json.dumps(bench_soak(args.soak_events, args.soak_every)))
        return
    n = 50_000 if args.quick else args.events
    base_n = 5_000 if args.quick else 50_000
    curve_n = 20_000 if args.quick else args.curve_events
    soak = 500_000 if args.quick else args.soak_events
    every = 25_000 if args.quick else args.soak_every
    results: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "quick": args.quick,
        "load_average_before": os.getloadavg(),
        "shapes": [],
    }
    results["warm_up_cpu_seconds"] = warm_up()
    chosen = [x for x in args.shapes.split(",") if x]
    for name in chosen or list(SHAPES) + ["many_rules_50"]:
        r = bench_shape(name, n if name != "many_rules_50" else n // 5, base_n)
        results["shapes"].append(r)
        extra = f", baseline x{r['speedup_vs_baseline']:.1f} (cpu)" if "speedup_vs_baseline" in r else ""
        if not r.get("same_matches_as_baseline", True):
            extra += " MATCH COUNTS DIFFER"
        if "speedup_vs_automaton" in r:
            extra += f", automaton {r['automaton_events_per_cpu_s']:,.0f} (x{r['speedup_vs_automaton']:.1f})"
        print(f"{name:24s} {r['events_per_cpu_s']:>12,.0f} events/cpu-s ({r['events_per_s']:,.0f}/s wall)"
              f"  {r['matches']:>8,} matches{extra}", flush=True)
    if chosen:
        merge_shapes(results)
        return
    results["shapes"].append(bench_cli(n // 5))
    cli = results["shapes"][-1]
    print(f"{'cli_jsonl_end_to_end':24s} {cli['events_per_cpu_s']:>12,.0f} events/cpu-s ({cli['events_per_s']:,.0f}/s wall)",
          flush=True)
    if args.curves:
        results["curves"] = bench_curves(args.quick, curve_n, base_n)
    results["soak"] = soak_res = soak_in_subprocess(soak, every)
    slope = soak_res["rss_slope_mb_per_million_events"]
    lo, hi = soak_res["rss_mb_after_warmup_min_max"] or (float("nan"), float("nan"))
    print(f"memory run: {soak:,} events at {soak_res['events_per_cpu_s']:,.0f} events/cpu-s, RSS "
          f"{lo:,.1f}-{hi:,.1f} MiB after warm-up, slope "
          f"{'n/a' if slope is None else f'{slope:+.3f}'} MiB per million events", flush=True)
    results["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    results["load_average_after"] = os.getloadavg()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "patterns.json").write_text(json.dumps(results, indent=2) + "\n")
    plot(results, RESULTS / "patterns.png")
    written = "patterns.json and patterns.png"
    if args.curves:
        plot_curves(results["curves"], RESULTS / "patterns_curves.png")
        written += " and patterns_curves.png"
    print(f"wrote {written} in {RESULTS}")


if __name__ == "__main__":
    main()
