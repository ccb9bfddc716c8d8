"""Many rules over one stream: N generated pattern rules of five shapes over the S&P 500 daily bars.

    python benchmarks/bench_many_rules.py                 # N = 1, 10, 50, 100, 200
    python benchmarks/bench_many_rules.py --sizes 1,200 --repeat 3 --cli

The workload of issue 15: a seeded generator writes N rules of five mixed shapes (V-shapes,
rises then drops with ``WITHIN``, volume spikes, streaks, level crossings) with random thresholds
(drawn from round figures, as people write them, so some conditions repeat across rules). Most
rules are selective; about a third of the V-shapes start on any row (their first variable has no
condition), as ``rules/trading.yaml``'s does.

Data: the first 60 tickers (alphabetically) of ``../shared/data/sp500_daily_ohlcv_2013_2018.csv``
(74,129 bars, see ../shared/data/SOURCES.md) when that file is present, else the bundled sample
``rules/data/sp500_daily_2017_sample.jsonl`` (1,255 bars of five stocks). Events are decoded into
batches of ``--batch`` once, untimed (the dates stay text, as ``cep run`` reads them); only the
engine's ``process``/``finish`` are timed, in CPU seconds of this process (``time.process_time``).

Each N is run with the engine's work sharing off (``cep.engine.SHARE_WORK = False``, the old
path) and on, interleaved, ``--repeat`` times; the best CPU time of each counts. Every figure is
reported next to its baselines measured in the same run: the ratio of N rules' CPU time to one
rule's (how the cost grows with N) and the speedup over the old path. Both paths must give the
same rows, late rows, errors and counters: the benchmark checks itself as it measures.
``--old-path no-batch-dfa`` compares with the per-key automaton instead (``cep.batch_dfa.USE_BATCH_DFA`` off).
``--only-batch-dfa`` keeps, of each N generated rules, those that step on the batch DFA (the
figures of cep/batch_dfa.py alone); ``--only-lanes`` the others (of 200: the 11 V-shapes on the
compiled lane path, cep/lanes.py). ``--cli`` also times ``cep run`` end to end (the children's CPU time) over a JSON-lines copy of
the events for the largest N and one rule. Writes ``benchmarks/results/many_rules.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import cep.batch_dfa as batch_dfa  # noqa: E402
import cep.engine as engine_mod  # noqa: E402
from cep.engine import Engine  # noqa: E402
from cep.events import DEFAULT_BATCH_SIZE, EventBatch, batch_from_pandas, read_events  # noqa: E402
from patterns.rules import Rule, parse_rule_text  # noqa: E402

DATA = REPO.parent / "shared" / "data"
FULL = DATA / "sp500_daily_ohlcv_2013_2018.csv"
SAMPLE = REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl"
RESULTS = REPO / "benchmarks" / "results"
TICKERS = 60

SHAPES = ("v_shape", "rise_drop", "volume_spike", "streak", "level_cross")

_HEAD = "SELECT * FROM bars MATCH_RECOGNIZE (\n  PARTITION BY symbol ORDER BY date\n"


def _pct(rng: np.random.Generator, choices: list[float]) -> float:
    return float(rng.choice(choices))


def rule_sql(shape: str, rng: np.random.Generator) -> str:
    """One rule of ``shape`` with thresholds drawn by ``rng``."""
    if shape == "v_shape":
        d = _pct(rng, [0.0, 0.01, 0.015, 0.02, 0.03])
        k = int(rng.integers(2, 4))
        if rng.random() < 1 / 3:
            # starts on any row: the first variable has no condition (rules/trading.yaml)
            return (_HEAD + "  MEASURES FIRST(S.date) AS start_date, LAST(D.date) AS bottom_date, "
                    "LAST(U.date) AS end_date, S.close AS start_close\n"
                    f"  AFTER MATCH SKIP PAST LAST ROW\n  PATTERN (S D{{{k},}} U+)\n"
                    f"  DEFINE D AS D.close < PREV(D.close) * {1 - d:g},\n"
                    "         U AS U.close > PREV(U.close) AND LAST(U.close) >= S.close)")
        return (_HEAD + "  MEASURES FIRST(D.date) AS start_date, LAST(D.date) AS bottom_date, "
                "LAST(U.date) AS end_date\n"
                f"  AFTER MATCH SKIP PAST LAST ROW\n  PATTERN (D{{{k},}} U{{2,}})\n"
                f"  DEFINE D AS D.close < PREV(D.close) * {1 - max(d, 0.01):g},\n"
                f"         U AS U.close > PREV(U.close))")
    if shape == "rise_drop":
        r = _pct(rng, [0.005, 0.01, 0.015, 0.02])
        n = int(rng.integers(2, 5))
        drop = _pct(rng, [0.01, 0.02, 0.03, 0.05])
        days = int(rng.choice([5, 7, 10, 14]))
        return (_HEAD + "  MEASURES FIRST(R.date) AS first_up, D.date AS drop_date, D.close AS drop_close\n"
                f"  PATTERN (R{{{n}}} D)\n  WITHIN INTERVAL '{days}' DAY\n"
                f"  DEFINE R AS R.close > PREV(R.close) * {1 + r:g},\n"
                f"         D AS D.close < LAST(R.close) * {1 - drop:g})")
    if shape == "volume_spike":
        x = _pct(rng, [2.0, 2.5, 3.0, 4.0, 5.0])
        if rng.random() < 0.5:
            return (_HEAD + "  MEASURES S.date AS spike_date, S.volume AS volume, S.close AS close\n"
                    "  PATTERN (S)\n"
                    f"  DEFINE S AS S.volume > PREV(S.volume) * {x:g})")
        move = _pct(rng, [0.0, 0.01, 0.02])
        return (_HEAD + "  MEASURES S.date AS spike_date, F.date AS follow_date, F.close AS follow_close\n"
                "  PATTERN (S F)\n"
                f"  DEFINE S AS S.volume > PREV(S.volume) * {x:g} AND S.close > S.open,\n"
                f"         F AS F.close > S.close * {1 + move:g})")
    if shape == "streak":
        n = int(rng.integers(3, 7))
        up = rng.random() < 0.6
        th = _pct(rng, [0.005, 0.01, 0.015, 0.02])
        cmp, f = (">", 1 + th) if up else ("<", 1 - th)
        return (_HEAD + "  MEASURES FIRST(U.date) AS start_date, LAST(U.date) AS end_date, COUNT(U.*) AS days\n"
                f"  AFTER MATCH SKIP PAST LAST ROW\n  PATTERN (U{{{n},}})\n"
                f"  DEFINE U AS U.close {cmp} PREV(U.close) * {f:g})")
    if shape == "level_cross":
        level = int(rng.choice(np.arange(20, 400, 5)))
        if rng.random() < 0.5:
            return (_HEAD + "  MEASURES A.date AS cross_date, A.close AS close\n  PATTERN (A)\n"
                    f"  DEFINE A AS A.close >= {level} AND PREV(A.close) < {level})")
        return (_HEAD + "  MEASURES B.date AS below_date, A.date AS cross_date\n  PATTERN (B A)\n"
                f"  DEFINE B AS B.close < {level} AND B.close > {level * 0.97:g},\n"
                f"         A AS A.close >= {level})")
    raise ValueError(f"unknown shape {shape!r}")


def rule_set(n: int, seed: int = 15) -> list[Rule]:
    """``n`` rules cycling through the five shapes, thresholds from ``seed``."""
    rng = np.random.default_rng(seed)
    return [parse_rule_text(rule_sql(SHAPES[i % len(SHAPES)], rng), f"{SHAPES[i % len(SHAPES)]}_{i}")
            for i in range(n)]


# ------------------------------------------------------------------ data


def load_batches(size: int, sample: bool = False) -> tuple[list[EventBatch], str]:
    """The events in batches of ``size``, and which data they are."""
    if FULL.exists() and not sample:
        import pandas as pd

        df = pd.read_csv(FULL).rename(columns={"Name": "symbol"})
        keep = sorted(df["symbol"].unique())[:TICKERS]
        df = df[df["symbol"].isin(keep)].sort_values(["date", "symbol"], kind="stable").reset_index(drop=True)
        return [batch_from_pandas(df.iloc[i : i + size].reset_index(drop=True), "sp500")
                for i in range(0, len(df), size)], f"{FULL.name} (first {TICKERS} tickers)"
    return list(read_events(SAMPLE, batch_size=size)), SAMPLE.name


def write_jsonl(batches: list[EventBatch], path: Path) -> None:
    with path.open("w") as f:
        for b in batches:
            for i in range(b.n):
                f.write(json.dumps(b.record(i)) + "\n")


# ------------------------------------------------------------------ measuring


def _key(r: dict) -> str:
    return json.dumps(r, sort_keys=True, default=str)


def run(rules: list[Rule], batches: list[EventBatch], share: bool, batch_path: bool = True) -> tuple[float, dict[str, Any]]:
    """CPU seconds of ``process`` over every batch then ``finish``, and what came out (``batch_path``
    False: every key stepped by the automaton, ``cep.batch_dfa.USE_BATCH_DFA`` off)."""
    engine_mod.SHARE_WORK = share
    batch_dfa.USE_BATCH_DFA = batch_path
    try:
        eng = Engine(rules)
        outs = []
        c0 = time.process_time()
        for b in batches:
            outs.append(eng.process(b))
        outs.append(eng.finish())
        cpu = time.process_time() - c0
    finally:
        engine_mod.SHARE_WORK = True
        batch_dfa.USE_BATCH_DFA = True
    got = {
        "matches": [_key(r) for o in outs for r in o.matches],
        "late": [_key(r) for o in outs for r in o.late],
        "errors": [_key(r) for o in outs for r in o.errors],
        "counts": {k: vars(v) for k, v in eng.counts().items()},
    }
    # where the time went (the operators' own timers, wall seconds): per part, and stepping per shape
    parts = {"ingest": 0.0, "predicates": 0.0, "automaton": 0.0}
    by_shape = dict.fromkeys(SHAPES, 0.0)
    for name, op in eng.operators.items():
        st = op.stats
        parts["ingest"] += st.seconds_ingest
        parts["predicates"] += st.seconds_predicates
        parts["automaton"] += st.seconds_automaton
        by_shape[name.rsplit("_", 1)[0]] += st.seconds_automaton
    got["_timers"] = {"parts": {k: round(v, 3) for k, v in parts.items()},
                      "automaton_by_shape": {k: round(v, 3) for k, v in by_shape.items()}}
    return cpu, got


def bench_n(n: int, batches: list[EventBatch], repeat: int, old: bool, old_path: str = "no-sharing",
            only_batch_dfa: bool = False, only_lanes: bool = False) -> dict[str, Any]:
    rules = rule_set(n)
    if only_batch_dfa:
        rules = batch_dfa_rules(rules, batches[0])
    elif only_lanes:
        on_dfa = {r.name for r in batch_dfa_rules(rules, batches[0])}
        rules = [r for r in rules if r.name not in on_dfa]
    events = sum(b.n for b in batches)
    cpu_new, cpu_old = [], []
    ref = None
    timers: dict[str, Any] = {}
    # the old path: sharing off (the engine before cep/sharing.py), or the per-key automaton
    # instead of cep/batch_dfa.py
    old_args = (False, True) if old_path == "no-sharing" else (True, False)
    run(rules, batches[:1], True)  # warm-up (lazy imports, caches) of both paths, untimed
    if old:
        run(rules, batches[:1], *old_args)
    for _ in range(repeat):
        c, got = run(rules, batches, True)
        cpu_new.append(c)
        timers = got.pop("_timers")
        if old:
            c, ref = run(rules, batches, *old_args)
            cpu_old.append(c)
            ref.pop("_timers")
            if got != ref:
                diff = [k for k in got if got[k] != ref[k]]
                raise SystemExit(f"{n} rules: the old path ({old_path}) gave other output ({', '.join(diff)})")
    res: dict[str, Any] = {
        "rules": len(rules),
        "shapes": {s: sum(1 for r in rules if r.name.startswith(s)) for s in SHAPES},
        "complex_events": len(got["matches"]),
        "seconds_cpu": round(min(cpu_new), 4),
        "events_per_cpu_s": round(events / min(cpu_new)),
        "seconds_wall_by_part": timers["parts"],
        "seconds_wall_stepping_by_shape": timers["automaton_by_shape"],
        "rules_on_batch_dfa_path": batch_rules(rules, batches[0]),
    }
    if old:
        res["old_path"] = old_path
        res["old_seconds_cpu"] = round(min(cpu_old), 4)
        res["old_events_per_cpu_s"] = round(events / min(cpu_old))
        res["speedup_vs_old"] = round(min(cpu_old) / min(cpu_new), 2)
        res["same_output_as_old"] = True
    return res


def batch_dfa_rules(rules: list[Rule], batch: EventBatch) -> list[Rule]:
    """The rules that step their keys with cep/batch_dfa.py (chosen at the first batch)."""
    eng = Engine(rules)
    eng.process(batch)
    return [r for r in rules if getattr(eng.operators[r.name], "_keyed", None) is not None]


def batch_rules(rules: list[Rule], batch: EventBatch) -> int:
    """How many of the rules step their keys with cep/batch_dfa.py (chosen at the first batch)."""
    eng = Engine(rules)
    eng.process(batch)
    return sum(1 for op in eng.operators.values() if getattr(op, "_keyed", None) is not None)


def _cep_run_cpu(rules_file: Path, events: Path, out: Path, batch_size: int | None = None) -> float:
    """CPU seconds (user + system) of one ``cep run`` child process (``batch_size`` None: its default)."""
    out.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    size = [] if batch_size is None else ["--batch-size", str(batch_size)]
    subprocess.run([sys.executable, "-m", "cep.cli", "run", str(rules_file), "--input", str(events),
                    "--output", str(out), *size],
                   check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_cli(rules: list[Rule], batches: list[EventBatch], sizes: list[int], repeat: int = 3,
              also_batch: int | None = None) -> list[dict[str, Any]]:
    """``cep run`` end to end over a JSON-lines file: CPU seconds of the child process, at its
    default batch size; the largest size also at ``also_batch`` events per batch (the old default,
    8,192, as a baseline measured in the same run), the runs of both interleaved.

    Two figures per size: the whole process (Python start, imports, numba's cache, compiling the
    rules included), and issue 15's measure, the marginal rate over a 10% prefix: (CPU of the whole
    file - CPU of its first 10%) / (events - prefix events), which leaves out what a process pays
    once and keeps the decoding, the rules and the writing of every further event. Each is the
    best of ``repeat`` runs, the prefix and the whole file alternating."""
    import yaml

    out = []
    with tempfile.TemporaryDirectory() as d:
        events = Path(d) / "bars.jsonl"
        write_jsonl(batches, events)
        n_events = sum(b.n for b in batches)
        lines = events.read_bytes().splitlines(keepends=True)
        n_prefix = n_events // 10
        prefix = Path(d) / "prefix.jsonl"
        prefix.write_bytes(b"".join(lines[:n_prefix]))
        for n in sizes:
            rf = Path(d) / f"rules_{n}.yaml"
            rf.write_text(yaml.safe_dump({"rules": [{"name": r.name, "sql": r.source} for r in rule_set(n)]}))
            runs: list[int | None] = [None] + ([also_batch] if also_batch and n == max(sizes) else [])
            whole: dict[int | None, list[float]] = {b: [] for b in runs}
            part: dict[int | None, list[float]] = {b: [] for b in runs}
            for _ in range(repeat):
                for b in runs:
                    part[b].append(_cep_run_cpu(rf, prefix, Path(d) / "out_prefix.jsonl", b))
                    whole[b].append(_cep_run_cpu(rf, events, Path(d) / f"out_{n}_{b}.jsonl", b))
            if len(runs) > 1:  # the same complex events at either size (in the order of their batches)
                got = [sorted((Path(d) / f"out_{n}_{b}.jsonl").read_bytes().splitlines()) for b in runs]
                assert got[0] == got[1], "cep run gave other rows at another batch size"
            for b in runs:
                cpu, marginal = min(whole[b]), min(whole[b]) - min(part[b])
                rate = round((n_events - n_prefix) / marginal) if marginal > 0 else None
                pairs = sorted(round((n_events - n_prefix) / (w - p)) for p, w in zip(part[b], whole[b]) if w > p)
                out.append({"rules": n, "batch_size": b or DEFAULT_BATCH_SIZE, "seconds_cpu": round(cpu, 3),
                            "events_per_cpu_s": round(n_events / cpu), "prefix_events": n_prefix,
                            "prefix_seconds_cpu": round(min(part[b]), 3), "marginal_events_per_cpu_s": rate,
                            "marginal_per_pair": pairs})
                print(f"  cep run {n:>4} rules, batches of {b or DEFAULT_BATCH_SIZE:>6,}: {n_events / cpu:>10,.0f} "
                      f"events/cpu-s (process start included), marginal over a 10% prefix {rate or 0:>10,} "
                      f"events/cpu-s (each pair: {pairs})", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,10,50,100,200", help="numbers of rules (comma-separated)")
    ap.add_argument("--batch", type=int, default=DEFAULT_BATCH_SIZE, help="events per batch (default: cep run's)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sample", action="store_true", help="the bundled sample even when the full data is present")
    ap.add_argument("--no-old", action="store_true", help="skip the old path (no speedup, no output check)")
    ap.add_argument("--old-path", choices=["no-sharing", "no-batch-dfa"], default="no-sharing",
                    help="what the old path is: sharing off (default), or the per-key automaton instead of the batch DFA")
    ap.add_argument("--cli", action="store_true", help="also time `cep run` end to end")
    ap.add_argument("--only-batch-dfa", action="store_true",
                    help="of each N generated rules, run only those on the batch DFA path (cep/batch_dfa.py)")
    ap.add_argument("--only-lanes", action="store_true",
                    help="of each N generated rules, run only those not on the batch DFA path (the lane path's)")
    ap.add_argument("--out", type=Path, default=RESULTS / "many_rules.json")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    batches, data = load_batches(args.batch, args.sample)
    events = sum(b.n for b in batches)
    print(f"{data}: {events:,} events in batches of {args.batch}", flush=True)
    points = []
    for n in sizes:
        if args.only_batch_dfa and args.only_lanes:
            raise SystemExit("--only-batch-dfa and --only-lanes exclude each other")
        r = bench_n(n, batches, args.repeat, not args.no_old, args.old_path, args.only_batch_dfa, args.only_lanes)
        r["generated"] = n
        points.append(r)
    one = next((p for p in points if p["generated"] == 1), None)
    for p in points:
        if one is not None:
            p["cost_vs_1_rule"] = round(p["seconds_cpu"] / one["seconds_cpu"], 2)
            if "old_seconds_cpu" in p:
                p["old_cost_vs_1_rule"] = round(p["old_seconds_cpu"] / one["old_seconds_cpu"], 2)
        old = (f"  old {p['old_events_per_cpu_s']:>9,} ev/cpu-s (x{p.get('old_cost_vs_1_rule', '-')})"
               f"  speedup {p['speedup_vs_old']:.2f}" if "old_seconds_cpu" in p else "")
        print(f"{p['rules']:>4} rules: {p['events_per_cpu_s']:>9,} events/cpu-s (cost x{p.get('cost_vs_1_rule', '-')} "
              f"of 1 rule), {p['complex_events']:,} complex events{old}", flush=True)
    result: dict[str, Any] = {
        "benchmark": "many_rules",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "data": data,
        "events": events,
        "batch": args.batch,
        "repeat": args.repeat,
        "old_path": args.old_path,
        "only_batch_dfa": args.only_batch_dfa,
        "only_lanes": args.only_lanes,
        "points": points,
    }
    if args.cli:
        result["cep_run"] = bench_cli(rule_set(max(sizes)), batches, sorted({1, max(sizes)}), max(args.repeat, 2),
                                      also_batch=8192)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
