"""``cep bench``: measure a rule file on your own events (throughput, matches, state, time split).

The input is decoded once (timed on its own; several inputs merged in event time, as ``cep run``
merges them), then the engine runs every rule together ``--repeat`` times and each rule alone, on
the same in-memory batches; the best repeat counts. Partial matches alive are counted over every
key after each batch (outside the clock): the peak, and the count at the end of the input before
the final flush. A last pass under ``tracemalloc`` gives the peak memory of Python objects. Each
table of the rule file (``tables:``) is reported at the end of the input: changes applied and
late, keys, versions, rows and its memory (the store's estimate, bytes per live key). Times
are wall-clock on this machine: read the ratios between rules, not the absolute figures, when the
machine is shared.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cep.cli.progress import Progress
from cep.events import DEFAULT_BATCH_SIZE
from patterns.errors import count_noun

__all__ = ["add_arguments", "run", "bench", "BenchResult"]


@dataclass
class RuleFigures:
    """What one rule did in the best repeat of the all-rules run (and its own run alone)."""

    rule: str
    kind: str
    events_per_s_alone: float
    matches: int
    late: int
    errors: int
    timeouts: int  # timed-out partial matches (ONE ROW PER MATCH WITH TIMEOUT ROWS)
    partial_matches_peak: int  # alive over every key, after the busiest batch
    partial_matches_end: int  # alive over every key when the input ended, before the final flush
    seconds_ingest: float
    seconds_predicates: float
    seconds_automaton: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchResult:
    """The whole measurement, as written by ``--json``."""

    rules_file: str
    inputs: list[str]
    events: int
    bad_lines: int
    decode_seconds: float
    decode_events_per_s: float
    all_rules_seconds: float
    all_rules_events_per_s: float
    repeats: int
    peak_python_bytes: int
    rules: list[RuleFigures]
    timeline: list[dict[str, float]]  # per batch of the best repeat: events, seconds, partial matches
    warnings: list[str] = field(default_factory=list)  # what cep check warns about in the rules
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)  # per table: Engine.table_stats() at the end
    views: dict[str, dict[str, Any]] = field(default_factory=dict)  # per view: Engine.view_stats() at the end


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("rules", help="rule file (.yaml/.yml or .sql)")
    p.add_argument("--input", "-i", required=True, action="append", metavar="[NAME=]PATH",
                   help="event file: JSON lines, CSV, Parquet or a web-server access log (.log). Repeat for "
                   "several files, merged in event time as by 'cep run'; NAME=PATH names a stream")
    p.add_argument("--time-field", help="event-time field used to merge several inputs "
                   "(default: the rules' ORDER BY column)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs of the whole rule set, after an untimed one over the "
                   "first batch; the best counts (default 3)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                   help=f"events per batch (default {DEFAULT_BATCH_SIZE}, as cep run)")
    p.add_argument("--json", metavar="OUT", help="write every figure as JSON here")
    p.add_argument("--plot", metavar="OUT.png", help="plot throughput and partial matches alive after each "
                   "batch (one point per batch: pass a --batch-size below the input's size for a curve)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto", help="progress bar on stderr")


def _live(engine) -> dict[str, int]:
    """Partial matches alive now, per rule, over every key (rules of kinds without any: 0)."""
    return {name: op.live_partial_matches() if hasattr(op, "live_partial_matches") else 0
            for name, op in engine.operators.items()}


def bench(rules_path: str, inputs: list[str], repeat: int = 3, batch_size: int = DEFAULT_BATCH_SIZE, progress: bool = False,
          time_field: str | None = None) -> BenchResult:
    """Measure ``rules_path`` over ``inputs``; see the module docstring for the method.

    ``inputs`` are paths or ``NAME=PATH`` stream specs, as ``cep run --input`` takes them.

    Raises:
        ValueError: several inputs, rules ordering by different fields and no ``time_field``.
    """
    from cep.cli.inputs import _parse_inputs, input_batches
    from cep.engine import Engine
    from patterns.rules import RuleSet, load_rules

    rules = load_rules(rules_path)
    import pandas  # noqa: F401  (imported before the clock starts: decoding uses it)

    specs = _parse_inputs(inputs)
    streams = [name for name, _ in specs if name]
    t0 = time.perf_counter()
    batches = list(input_batches(rules, specs, time_field, None, batch_size))
    decode = time.perf_counter() - t0
    bad = sum(len(b.bad) for b, _ in batches)
    n = sum(b.n for b, _ in batches)
    total_work = repeat * n + len(rules) * n
    bar = Progress(total_work, progress)
    done = 0

    if batches:
        # one untimed pass over the first batch: the first use of the compiled kernels loads them
        # (from numba's cache, or compiles them), which no timed run should count; with --repeat 1
        # it was the whole timed run's cost (1,255 bars: 3,280 events/s together against
        # 709,095 and 1,129,320 alone)
        warm = Engine(rules, streams=streams)
        warm.process(*batches[0])
        warm.finish()

    best: tuple[float, Any, list[dict[str, float]], dict[str, int], dict[str, int]] | None = None
    for _ in range(max(repeat, 1)):
        eng = Engine(rules, streams=streams)
        timeline = []
        peak: dict[str, int] = dict.fromkeys(eng.operators, 0)
        live: dict[str, int] = dict(peak)
        seen = 0
        paused = 0.0  # counting partial matches and drawing the bar: not the engine's time
        start = time.perf_counter()
        for b, stream in batches:
            eng.process(b, stream)
            stop = time.perf_counter()
            seen += b.n
            done += b.n
            live = _live(eng)
            for name, k in live.items():
                peak[name] = max(peak[name], k)
            timeline.append({"events": seen, "seconds": stop - start - paused, "partial_matches": sum(live.values())})
            bar.update(done, done, 0)
            paused += time.perf_counter() - stop
        eng.finish()
        secs = time.perf_counter() - start - paused
        if best is None or secs < best[0]:
            best = (secs, eng, timeline, peak, live)
    assert best is not None
    secs, eng, timeline, peak, live = best

    alone: dict[str, float] = {}
    for rule in rules:
        e1 = Engine(RuleSet((rule,), rules.path, tables=rules.tables, views=rules.views), streams=streams)  # its table too
        start = time.perf_counter()
        for b, stream in batches:
            e1.process(b, stream)
            done += b.n
            bar.update(done, done, 0)
        e1.finish()
        alone[rule.name] = n / max(time.perf_counter() - start, 1e-9)
    bar.close()

    tracemalloc.start()
    e2 = Engine(rules, streams=streams)
    for b, stream in batches:
        e2.process(b, stream)
    e2.finish()
    peak_bytes = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    figures = []
    counts = eng.counts()
    for rule in rules:
        op = eng.operators[rule.name]
        st = op.stats
        c = counts[rule.name]
        extra = {k: v for k, v in asdict(st).items() if k not in RuleFigures.__dataclass_fields__} if hasattr(st, "__dataclass_fields__") else {}
        if rule.kind == "pattern":
            extra["partial_matches_peak_per_key"] = c.partial_matches_peak
        figures.append(
            RuleFigures(
                rule=rule.name,
                kind=rule.kind,
                events_per_s_alone=alone[rule.name],
                matches=c.matches,
                late=c.late,
                errors=c.errors,
                timeouts=c.timeouts,
                partial_matches_peak=peak[rule.name],
                partial_matches_end=live[rule.name],
                seconds_ingest=getattr(st, "seconds_ingest", 0.0),
                seconds_predicates=getattr(st, "seconds_predicates", 0.0),
                seconds_automaton=getattr(st, "seconds_automaton", 0.0),
                extra=extra,
            )
        )
    return BenchResult(
        rules_file=str(rules_path),
        inputs=list(inputs),
        events=n,
        bad_lines=bad,
        decode_seconds=decode,
        decode_events_per_s=n / max(decode, 1e-9),
        all_rules_seconds=secs,
        all_rules_events_per_s=n / max(secs, 1e-9),
        repeats=repeat,
        peak_python_bytes=peak_bytes,
        rules=figures,
        timeline=timeline,
        warnings=[w.format() for w in rules.warnings],
        tables=eng.table_stats(),
        views=eng.view_stats(),
    )


def _kind_figures(f: RuleFigures) -> str:
    """What matters for a rule of this kind beyond the shared columns (search, analytics)."""
    x = f.extra
    if f.kind == "search" and x.get("documents"):
        return (f"{x.get('candidates', 0) / x['documents']:.1f} candidates/doc, "
                f"{f.matches / x['documents']:.2f} matches/doc")
    if f.kind == "analytics" and "windows" in x:
        return f"{x['windows']:,} windows, {x.get('corrections', 0):,} corrections"
    if f.kind == "pattern":
        dropped = [f"{x[k]:,} {what}" for k, what in (("partial_matches_dropped", "at the cap"),
                                                       ("budget_dropped", "by the work budget")) if x.get(k)]
        return f"partial matches dropped: {', '.join(dropped)}" if dropped else ""
    return ""


def _table(res: BenchResult) -> str:
    head = ["rule", "kind", "events/s alone", "matches", "timeouts", "late", "errors", "peak partial", "end partial",
            "ingest", "predicates", "automaton", "kind figures"]
    rows = []
    for f in res.rules:
        t = f.seconds_ingest + f.seconds_predicates + f.seconds_automaton
        split = [f"{x / t:.0%}" for x in (f.seconds_ingest, f.seconds_predicates, f.seconds_automaton)] if t else ["-"] * 3
        rows.append([f.rule, f.kind, f"{f.events_per_s_alone:,.0f}", f"{f.matches:,}", f"{f.timeouts:,}", f"{f.late:,}", f"{f.errors:,}",
                     f"{f.partial_matches_peak:,}", f"{f.partial_matches_end:,}", *split, _kind_figures(f)])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    lines = ["  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    for r in rows:
        lines.append("  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))))
    summary = (
        f"{res.events:,} events ({res.bad_lines:,} bad lines); decode {res.decode_events_per_s:,.0f} events/s; "
        f"all {count_noun(len(res.rules), 'rule')} together {res.all_rules_events_per_s:,.0f} events/s (best of {res.repeats}); "
        f"peak Python memory {res.peak_python_bytes / 2**20:,.1f} MiB"
    )
    tables = [
        f"table {name}: {t['applied']:,} changes applied ({t['late']:,} late, {t['errors']:,} errors, "
        f"{t['snapshot_rows']:,} snapshot rows); {t['live_keys']:,} live keys of {t['keys']:,}, {t['versions']:,} "
        f"versions, {t['rows']:,} rows; {t['bytes'] / 2**20:,.1f} MiB, about {t['bytes_per_row']:,.0f} bytes per row"
        for name, t in res.tables.items()
    ] + [
        f"view {name}: {v['inserts']:,} inserts, {v['updates']:,} updates, {v['deletes']:,} deletes; "
        f"{v['live_keys']:,} live keys of {v['keys']:,}, {v['versions']:,} versions, {v['rows']:,} rows; "
        f"{v['bytes'] / 2**20:,.1f} MiB, about {v['bytes_per_row']:,.0f} bytes per row"
        for name, v in res.views.items()
    ]
    return "\n".join(lines + ["", summary, *tables])


def _plot(res: BenchResult, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = res.timeline
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [p["events"] for p in tl]
    rates = []
    prev_e, prev_s = 0.0, 0.0
    for p in tl:
        de, ds = p["events"] - prev_e, p["seconds"] - prev_s
        rates.append(de / ds if ds > 0 else 0.0)
        prev_e, prev_s = p["events"], p["seconds"]
    a1.plot(xs, rates, marker="o", markersize=3)
    a1.set_xlabel("events processed")
    a1.set_ylabel("events/s (per batch)")
    a1.set_title("Throughput over the run (all rules)")
    a1.set_ylim(bottom=0)
    a2.plot(xs, [p["partial_matches"] for p in tl], color="#d8843b", marker="o", markersize=3)
    a2.set_xlabel("events processed")
    a2.set_ylabel("partial matches alive")
    a2.set_title("Partial matches over the run")
    a2.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def run(args) -> int:
    from cep.cli.inputs import _parse_inputs
    from patterns.errors import RuleErrors

    for _, path in _parse_inputs(args.input):
        if not Path(path).exists():
            print(f"cep bench: input file not found: {path}", file=sys.stderr)
            return 2
    for option, out in (("--json", args.json), ("--plot", args.plot)):
        if out and not Path(out).resolve().parent.is_dir():
            print(f"cep bench: cannot write {option} {out!r}: its folder does not exist", file=sys.stderr)
            return 2
    if args.batch_size < 1:
        print(f"cep bench: --batch-size must be at least 1, got {args.batch_size}", file=sys.stderr)
        return 2
    enabled = args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty())
    try:
        res = bench(args.rules, args.input, args.repeat, args.batch_size, enabled, args.time_field)
    except RuleErrors as e:
        print(str(e), file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"cep bench: {e}", file=sys.stderr)
        return 2
    for w in res.warnings:
        print(w, file=sys.stderr)
    print(_table(res))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(res), indent=2))
    if args.plot:
        _plot(res, args.plot)
        if len(res.timeline) < 3:
            print(f"cep bench: the plot has {len(res.timeline)} point{'s' if len(res.timeline) != 1 else ''}, "
                  f"one per batch of {args.batch_size:,} events; pass a smaller --batch-size for a curve",
                  file=sys.stderr)
    return 0
