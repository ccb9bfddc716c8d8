"""Run the whole benchmark suite, one script per process, then write ``results/SUMMARY.md``.

    python benchmarks/run_all.py                    # every benchmark, full sizes
    python benchmarks/run_all.py --quick            # every benchmark on small inputs (a smoke run)
    python benchmarks/run_all.py --soak --peers     # also the soak run and Flink as a peer
    python benchmarks/run_all.py --only patterns,caps
    python benchmarks/run_all.py --summary-only     # rebuild SUMMARY.md from the JSON already there

Each benchmark runs as its own subprocess (its own heap, so one run's memory does not show in
the next one's) and writes its own JSON and plots into ``benchmarks/results/``, exactly as when
run by hand; its output is echoed with its name in front. ``--quick`` is passed to the scripts
that take it; the others get a small size instead (see ``STEPS``). The soak run and PyFlink
(``flink_oracle.py --throughput``) only run with ``--soak`` / ``--peers``; a benchmark whose
prerequisite is missing (the shared data set, Spark's Java, the PyFlink virtualenv) is skipped
with the reason. A failing benchmark does not stop the suite; the exit code is 1 if any failed.

At the end, ``results/run_all.json`` records each step (command, status, seconds) with the
machine, the date and the load average, and ``results/SUMMARY.md`` gets one table per benchmark,
read from each benchmark's JSON as that script writes it (a section says when its file was
written, so a figure from an older run is visible as such).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
RESULTS = BENCH / "results"
DATA = REPO.parent / "shared" / "data"

__all__ = ["STEPS", "Step", "main", "write_summary"]


# ------------------------------------------------------------------ prerequisites


def _need_data() -> str | None:
    f = DATA / "abcnews_headlines_2003.csv"
    return None if f.exists() else f"the shared data set is absent ({f})"


def _need_spark() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return "no Java on the PATH (Spark needs it)"
    return None


def _flink_python() -> str:
    # the same lookup as flink_oracle.py's default for --flink-python
    return os.environ.get("FLINK_PYTHON") or next(
        (p for p in ("/work/flinkenv/bin/python", "/tmp/flinkenv/bin/python") if os.path.exists(p)),
        "/work/flinkenv/bin/python",
    )


def _need_flink() -> str | None:
    if not os.path.exists(_flink_python()):
        return f"no PyFlink virtualenv ({_flink_python()}; see flink_oracle.py's docstring, or set FLINK_PYTHON)"
    if not shutil.which("java"):
        return "no Java on the PATH (PyFlink needs it)"
    return None


# ------------------------------------------------------------------ the steps


@dataclass(frozen=True)
class Step:
    """One benchmark script as the suite runs it."""

    name: str
    script: str
    args: tuple[str, ...]  # a full run
    quick_args: tuple[str, ...]  # a smoke run: --quick, or a small size for scripts without it
    outputs: tuple[str, ...]  # what it writes into results/ (a full run)
    quick_outputs: tuple[str, ...] | None = None  # when a smoke run writes elsewhere
    flag: str | None = None  # run only when this run_all flag is given
    needs: Callable[[], str | None] | None = None  # a reason to skip, or None

    def command(self, quick: bool) -> list[str]:
        return [sys.executable, str(BENCH / self.script), *(self.quick_args if quick else self.args)]

    def files(self, quick: bool) -> tuple[str, ...]:
        return self.quick_outputs if quick and self.quick_outputs is not None else self.outputs


STEPS: tuple[Step, ...] = (
    Step("patterns", "bench_patterns.py", ("--curves",), ("--quick", "--curves"),
         ("patterns.json", "patterns.png", "patterns_curves.png")),
    Step("absence", "bench_absence.py", (), ("--quick",), ("absence.json",), quick_outputs=("absence_quick.json",)),
    Step("any_match", "bench_any_match.py", (), ("--quick",), ("any_match.json",),
         quick_outputs=("any_match_quick.json",)),
    Step("wildcards", "bench_wildcards.py", (), ("--repeat", "3", "--out", "wildcards_quick.json"), ("wildcards.json",),
         quick_outputs=("wildcards_quick.json",)),
    Step("sketches", "bench_sketches.py", (), ("--quick",), ("sketches.json", "sketches.png")),
    Step("percolator", "bench_percolator.py", (), ("--quick",), ("percolator.json", "percolator.png"),
         needs=_need_data),
    Step("analytics", "bench_analytics.py", (), ("--quick",), ("analytics.json",),
         quick_outputs=("analytics_quick.json",)),
    Step("spark", "bench_spark.py", (), ("--quick",), ("spark.json", "spark.png"), needs=_need_spark,
         quick_outputs=("spark_quick.json", "spark_quick.png")),
    # no --quick: a short run instead
    Step("caps", "bench_caps.py", (), ("--events", "20000", "--budget-events", "20000", "--baseline-events", "200"),
         ("caps.json",)),
    Step("real", "bench_real.py", (), ("--only", "nasa,apache"), ("real.json", "real_windows.json"), needs=_need_data,
         quick_outputs=("real.json",)),
    Step("latency", "bench_latency.py", (), ("--quick",), ("latency.json",), quick_outputs=("latency_quick.json",)),
    # the full S&P 500 data when present (the bundled sample otherwise); quick: the sample, 1 and 10 rules
    Step("many_rules", "bench_many_rules.py", (),
         ("--sample", "--sizes", "1,10", "--repeat", "1", "--out", str(RESULTS / "many_rules_quick.json")),
         ("many_rules.json",), quick_outputs=("many_rules_quick.json",)),
    Step("soak", "bench_soak.py", (),
         ("--events", "200000", "--keys", "2000", "--ttl", "20000", "--samples", "10",
          "--baseline-events", "100000"),
         ("soak.json", "soak.png"), flag="soak"),
    Step("flink_peer", "flink_oracle.py", ("--throughput",), ("--throughput", "--events", "100000", "--repeats", "1"),
         ("flink_peer.json",), flag="peers", needs=_need_flink),
)


# ------------------------------------------------------------------ running


def machine() -> dict[str, Any]:
    """The machine the numbers come from."""
    cpu = platform.processor() or platform.machine()
    mem = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 2**20, 1)
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem, "python": platform.python_version(),
            "platform": platform.platform()}


def run_step(step: Step, quick: bool, timeout: float | None) -> dict[str, Any]:
    """Run one benchmark, echoing its output line by line; its status, exit code and duration."""
    cmd = step.command(quick)
    rec: dict[str, Any] = {"name": step.name, "command": _cmdline(step, quick), "outputs": list(step.files(quick))}
    print(f"=== {step.name}: {rec['command']}", flush=True)
    tail: collections.deque[str] = collections.deque(maxlen=15)
    t0 = time.perf_counter()
    # a session of its own, so a timeout or Ctrl-C stops the script and what it started (a JVM)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, start_new_session=True)
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        _stop(proc)

    timer = threading.Timer(timeout, expire) if timeout is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            print(f"[{step.name}] {line}", end="", flush=True)
        proc.wait()
    except KeyboardInterrupt:
        _stop(proc)
        raise
    finally:
        if timer is not None:
            timer.cancel()
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    rec["exit_code"] = proc.returncode
    if timed_out.is_set():
        rec["status"] = "timeout"
        rec["reason"] = f"stopped after {timeout:.0f} s (--timeout)"
    elif proc.returncode == 0:
        rec["status"] = "ok"
    else:
        rec["status"] = "failed"
        rec["reason"] = tail[-1] if tail else f"exit code {proc.returncode}"
        rec["output_tail"] = list(tail)
    print(f"=== {step.name}: {rec['status']} in {rec['seconds']:,.1f} s", flush=True)
    return rec


def _cmdline(step: Step, quick: bool) -> str:
    return " ".join(["python", f"benchmarks/{step.script}", *step.command(quick)[2:]])


def _stop(proc: subprocess.Popen) -> None:
    """Stop a benchmark this script started, and its children (its process group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ------------------------------------------------------------------ the summary


def _num(v: Any, digits: int = 0) -> str:
    """A figure for a table: thousands separators, ``digits`` decimals, '-' when absent."""
    if v is None or v == "":
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v != v:  # NaN
            return "-"
        return f"{v:,.{digits}f}"
    return str(v)


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table; columns whose cells are all numbers are right-aligned."""
    def numeric(j: int) -> bool:
        cells = [r[j] for r in rows if r[j] not in ("-", "")]
        return bool(cells) and all(c.replace(",", "").replace(".", "").replace("-", "").replace("x", "")
                                   .replace("+", "").strip().isdigit() for c in cells)

    cells = [[c if isinstance(c, str) else _num(c) for c in r] for r in rows]
    rows = cells
    out = ["| " + " | ".join(headers) + " |",
           "| " + " | ".join("---:" if numeric(j) else "---" for j in range(len(headers))) + " |"]
    out += ["| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in r) + " |" for r in rows]
    return out


def _when(d: dict[str, Any], f: Path) -> str:
    """When a results file was made: its own date field if it has one, else the file's mtime."""
    for v in (d.get("date"), (d.get("meta") or {}).get("when")):
        if isinstance(v, str) and v:
            return f"run {v}"
    # a checkout sets the mtime too, so this only says "no later than"
    return "file modified " + dt.datetime.fromtimestamp(f.stat().st_mtime).strftime("%Y-%m-%d %H:%M")


def _load(v: Any) -> str:
    return " / ".join(f"{x:.2f}" for x in v) if isinstance(v, (list, tuple)) and v else "-"


def _mib(v: Any) -> str:
    return "-" if v is None else f"{v / 2**20:,.1f}"


def _patterns(d: dict[str, Any]) -> list[str]:
    out = [f"Machine {d.get('machine', '-')}"
           + (f"; load average before {_load(d.get('load_average_before'))}, after {_load(d.get('load_average_after'))}"
              if d.get("load_average_before") else "")
           + (" (quick smoke run)" if d.get("quick") else "") + ".", ""]
    rows = []
    for r in d.get("shapes", []):
        rows.append([r["shape"], _num(r.get("events")), _num(r.get("events_per_cpu_s")), _num(r.get("events_per_s")),
                     _num(r.get("baseline_events_per_cpu_s", r.get("baseline_events_per_s"))),
                     _num(r.get("engine_events_per_cpu_s_same_prefix", r.get("engine_events_per_s_same_prefix"))),
                     _num(r.get("baseline_events")),
                     f"x{r['speedup_vs_baseline']:.2f}" if "speedup_vs_baseline" in r else "-",
                     _num(r.get("same_matches_as_baseline")), _num(r.get("matches")), _mib(r.get("peak_python_bytes"))])
    out += _table(["shape", "events", "engine events/cpu-s", "events/s (wall)", "baseline events/cpu-s",
                   "engine on the prefix", "prefix", "speedup (CPU)", "same matches", "matches", "peak Python MiB"],
                  rows)
    soak = d.get("soak") or {}
    if "samples" in soak:
        mm = soak.get("rss_mb_after_warmup_min_max") or [None, None]
        slope = soak.get("rss_slope_mb_per_million_events")
        out += ["", f"Memory run (`history_within`, {soak.get('keys', 100)} keys, own process): "
                f"{_num(soak.get('events'))} events at {_num(soak.get('events_per_cpu_s'))} events/cpu-s; "
                f"resident memory {_num(mm[0], 1)}-{_num(mm[1], 1)} MiB after the first "
                f"{_num(soak.get('warmup_events'))} events, slope "
                f"{'-' if slope is None else f'{slope:+.3f}'} MiB per million events; allocated blocks slope "
                f"{_num(soak.get('allocated_blocks_slope_per_million_events'), 0)} per million events."]
    elif soak.get("memory_curve"):
        heap = [c[1] for c in soak["memory_curve"]]
        out += ["", f"Memory run: {_num(soak.get('events'))} events, Python heap "
                f"{min(heap) / 2**20:.1f}-{max(heap) / 2**20:.1f} MiB over the samples."]
    curves = d.get("curves") or {}
    for name, key, label in (("rules", "rules", "rules"), ("keys", "keys", "keys"),
                             ("within", "within_ms", "WITHIN ms"), ("selectivity", "selectivity", "A holds for")):
        pts = curves.get(name)
        if not pts:
            continue
        rows = []
        for p in pts:
            x = f"{p[key]:.1%}" if name == "selectivity" else _num(p[key])
            extra = (_num(p.get("peak_live_partial_matches")) if name == "within"
                     else f"{p.get('measured_selectivity', 0):.2%}" if name == "selectivity" else "")
            rows.append([x, _num(p.get("events")), _num(p.get("events_per_cpu_s")), _num(p.get("events_per_s")),
                         _num(p.get("baseline_events_per_cpu_s")), _num(p.get("engine_events_per_cpu_s_same_prefix")),
                         _num(p.get("baseline_events")),
                         f"x{p['speedup_vs_baseline']:.2f}" if "speedup_vs_baseline" in p else "-",
                         _num(p.get("same_matches_as_baseline")), _num(p.get("matches"))]
                        + ([extra] if extra else []))
        hdr = [label, "events", "engine events/cpu-s", "events/s (wall)", "baseline events/cpu-s",
               "engine on the prefix", "prefix", "speedup (CPU)", "same matches", "matches"]
        hdr += (["peak live partial matches"] if name == "within" else ["measured"] if name == "selectivity" else [])
        out += ["", f"Scaling with {name}:", ""] + _table(hdr, rows)
    for img in ("patterns.png", "patterns_curves.png"):
        if (RESULTS / img).exists():
            out += ["", f"![{img}]({img})"]
    return out


def _sketches(d: dict[str, Any]) -> list[str]:
    meta = d.get("meta", {})
    out = [("Quick smoke run; " if meta.get("quick") else "")
           + f"{_num(meta.get('n_ints'))} integers, {_num(meta.get('n_strings'))} strings, "
           f"baselines on {_num(meta.get('n_baseline'))}.", ""]
    targets = d.get("targets", {})
    largest = d.get("rates_at_largest_batch", {})
    rows = [[k, _num(v), _num(largest.get(k)), _num(targets.get(k, {}).get("target")),
             _num(targets[k]["met"]) if k in targets else "-"] for k, v in d.get("best_rates", {}).items()]
    out += _table(["update / lookup", "best items/s", "items/s at the largest batch", "target", "met"], rows)
    if d.get("ratios"):
        out += ["", "Ratios to the baselines (same run):", ""]
        out += _table(["ratio", "value"], [[k, f"x{v:,.2f}"] for k, v in d["ratios"].items() if v is not None])
    if (RESULTS / "sketches.png").exists():
        out += ["", "![sketches.png](sketches.png)"]
    return out


def _percolator(d: dict[str, Any]) -> list[str]:
    out = [f"Documents: {d.get('documents', '-')}; load average {_load(d.get('load_average'))}.", ""]
    rows = []
    for r in d.get("results", []):
        single = r.get("single", {})
        batch: dict[str, Any] = next((v for k, v in r.items() if k.startswith("batch")), {})
        per_doc, base = r.get("per_doc", {}), r.get("baseline", {})
        rows.append([_num(r.get("queries")), r.get("scanner", "-"), _num(r.get("build_total_s"), 2),
                     _num(r.get("rss_mb"), 1), _num(single.get("docs_per_s")), _num(batch.get("docs_per_s")),
                     _num(per_doc.get("candidates"), 2), _num(per_doc.get("matches"), 2),
                     _num(base.get("docs_per_s"), 1),
                     f"x{base['ratio_single']:,.0f}" if base.get("ratio_single") else "-",
                     _num(base.get("agree"))])
    out += _table(["queries", "scanner", "build s", "RSS MiB", "docs/s (single)", "docs/s (batches)",
                   "candidates/doc", "matches/doc", "every-query docs/s", "ratio", "agrees"], rows)
    curve = [c for c in d.get("curve", []) if "error" not in c]
    if curve:
        out += ["", "Documents/s against registered queries (default configuration):", ""]
        out += _table(["queries", "build s", "docs/s (single)", "docs/s (batches of 1,000)",
                       "every-query docs/s", "ratio (batches)", "agrees"],
                      [[_num(c.get("queries")), _num(c.get("build_total_s"), 2),
                        _num(c["single"].get("docs_per_s")), _num(c["batch_1000"].get("docs_per_s")),
                        _num(c["baseline"].get("docs_per_s"), 1),
                        f"x{c['ratio_batch']:,.0f}" if c.get("ratio_batch") else "-",
                        _num(c["baseline"].get("agree"))] for c in curve])
    if (RESULTS / "percolator.png").exists():
        out += ["", "![percolator.png](percolator.png)"]
    return out


def _analytics(d: dict[str, Any]) -> list[str]:
    m = d.get("machine", {})
    out = [f"{_num(d.get('events'))} events, {_num(d.get('keys'))} keys, batches of {_num(d.get('batch_rows'))}; "
           f"load average at the end {_load(m.get('load_average_at_end'))}.", ""]
    rows = []
    for name, r in (d.get("shapes") or {}).items():
        rows.append([name, _num(r.get("engine_events_per_s_cpu")), _num(r.get("engine_events_per_s_wall")),
                     _num(r.get("baseline_events_per_s_cpu")),
                     f"x{r['speedup_cpu']:.2f}" if r.get("speedup_cpu") is not None else "-",
                     _num(r.get("state_bytes_before_finish")), _num((r.get("check") or {}).get("ok"))])
    out += _table(["shape", "engine events/cpu-s", "events/s (wall)", "baseline events/cpu-s", "speedup (CPU)",
                   "state bytes", "same rows as baseline"], rows)
    return out


def _spark(d: dict[str, Any]) -> list[str]:
    out = [f"Machine {d.get('machine', '-')}, master {d.get('master', '-')}; "
           f"{_num(d.get('events'))} events, {_num(d.get('events_per_micro_batch'))} per micro-batch; load average "
           f"before {_load(d.get('load_average_before'))}, after {_load(d.get('load_average_after'))}.", ""]
    rows = []
    for r in d.get("runs", []):
        rows.append([_num(r.get("keys")), _num(r.get("shuffle_partitions")), _num(r.get("events_per_s")),
                     _num(r.get("events_per_s_wall")), _num(r.get("embedded_events_per_s")),
                     _num(r.get("ratio_to_embedded"), 2), _num(r.get("spark_counting_only_events_per_s")),
                     _num(r.get("ratio_to_counting_only"), 2), _num(r.get("batch_ms_median")),
                     _num(r.get("state_bytes_per_key"), 0), _num(r.get("same_matches_as_embedded"))])
    out += _table(["keys", "partitions", "Spark events/s", "wall", "embedded events/s", "ratio",
                   "Spark counting-only events/s", "ratio to counting-only", "median batch ms", "state B/key",
                   "same matches"], rows)
    sweep = d.get("partition_sweep") or {}
    if sweep.get("events_per_s"):
        per = ", ".join(f"{p}: {_num(v)}" for p, v in sorted(sweep["events_per_s"].items(), key=lambda kv: int(kv[0])))
        out += ["", f"Pattern rule over {_num(sweep.get('keys'))} keys, Spark events/s by shuffle partitions: {per}."]
    an = d.get("analytics") or {}
    if an:
        out += ["", f"Analytics rule (COUNT(*) and APPROX_COUNT_DISTINCT per key, one-minute TUMBLE) over "
                f"{_num(an.get('keys'))} keys, {_num(an.get('shuffle_partitions'))} partitions: Spark "
                f"{_num(an.get('events_per_s'))} events/s (wall {_num(an.get('events_per_s_wall'))}), embedded "
                f"{_num(an.get('embedded_events_per_s'))} (ratio {_num(an.get('ratio_to_embedded'), 2)}), counting-only "
                f"{_num(an.get('spark_counting_only_events_per_s'))}; rows {_num(an.get('matches'))}, same as embedded: "
                f"{_num(an.get('same_rows_as_embedded'))}."]
    lat = d.get("latency") or {}
    out += ["", f"Latency: median micro-batch {_num(lat.get('batch_ms_median'))} ms for "
            f"{_num(lat.get('events_per_batch'))} events; idle key state {_num(d.get('idle_key_state_bytes'), 1)} B."]
    if sweep.get("events_per_s"):
        out += ["", "![spark.png](spark.png)"]
    return out


def _caps(d: dict[str, Any]) -> list[str]:
    rows = []
    for r in d.get("runs", []):
        total = r.get("max_partial_matches_total")
        cap = f"total {total:,}" if total else f"{_num(r.get('max_partial_matches'))} per key x {_num(r.get('keys'))} keys"
        rows.append([r.get("shape", "-"), _num(r.get("events")), cap, _num(r.get("peak_live_partial_matches")),
                     _num(r.get("cap_hits")), _num(r.get("partial_matches_dropped")), _num(r.get("peak_rss_mb"), 1),
                     _num(r.get("events_per_second"))])
    out = _table(["pattern", "events", "cap", "peak live partial matches", "cap hits", "dropped", "peak RSS MiB",
                   "events/s"], rows)
    budget = d.get("budget") or {}
    if budget:
        rows = []
        runs = [("default budget", budget.get("with_budget") or {}), ("no budget", budget.get("without_budget") or {})]
        runs += [(f"budget {r.get('max_steps_per_event')}", r) for r in budget.get("sweep", [])]
        for label, r in runs:
            rows.append([f"alternation_in_loop, {label}", _num(r.get("events")), _num(r.get("max_steps_per_event")),
                         _num(r.get("peak_live_partial_matches_per_key")), _num(r.get("budget_dropped")),
                         _num(r.get("partial_matches_dropped")), _num(r.get("peak_rss_mb"), 1),
                         _num(r.get("events_per_cpu_second"))])
        when = f", run {budget['date']}" if budget.get("date") else ""
        out += ["", f"Work budget (alternation_in_loop, one key; events per CPU second{when}):", ""]
        out += _table(["pattern", "events", "max_steps_per_event", "peak partial matches per key",
                       "dropped by the budget", "dropped at the cap", "peak RSS MiB", "events/cpu-s"], rows)
        out += ["", f"Ratio with / without the budget: {_num(budget.get('ratio'), 1)}."]
    return out


def _latency(d: dict[str, Any]) -> list[str]:
    rows = []
    for label, run in sorted(d.get("runs", {}).items()):
        for r in run.get("results", []):
            lat = r.get("latency_ms", {})
            per_s = (r.get("complex_events_seen") or 0) / (r.get("seconds_measured") or 1)
            rows.append([label, _num(r.get("rate_events_per_s")), _num(per_s, 0),
                         _num(r.get("complex_events_seen")), _num(lat.get("p50"), 1), _num(lat.get("p99"), 1),
                         _num(lat.get("max"), 1), _num(r.get("consumer_cpu_seconds_per_second"), 2)])
    return _table(["code", "events/s", "complex events/s", "seen", "p50 ms", "p99 ms", "max ms",
                   "consumer CPU s/s"], rows)


def _soak(d: dict[str, Any]) -> list[str]:
    p, run, fl = d.get("params", {}), d.get("run", {}), d.get("flatness", {})
    out = [f"{_num(p.get('events'))} events, {_num(p.get('keys'))} live keys, TTL {_num(p.get('ttl_ms'))} ms.", ""]
    rows = [[run.get("label", "TTL"), _num(run.get("events")), _num(run.get("events_per_second")),
             _num(fl.get("rss_mb_at_warmup"), 1), _num(fl.get("rss_mb_at_end"), 1),
             _num(fl.get("rss_growth_mb_per_million_events"), 3)]]
    base = d.get("baseline")
    cmp_ = d.get("baseline_comparison") or {}
    if base:
        rows.append([base.get("label", "no TTL"), _num(base.get("events")), _num(base.get("events_per_second")),
                     "-", _num(cmp_.get("rss_mb_no_ttl"), 1), "-"])
    out += _table(["run", "events", "events/s", "RSS MiB after warm-up", "RSS MiB at the end",
                   "growth MiB per million events"], rows)
    if cmp_:
        out += ["", f"At {_num(cmp_.get('at_events'))} events: keys with state {_num(cmp_.get('keys_with_state_ttl'))} "
                f"with the TTL against {_num(cmp_.get('keys_with_state_no_ttl'))} without; RSS ratio "
                f"{_num(cmp_.get('rss_ratio_ttl_over_no_ttl'), 3)}."]
    if (RESULTS / "soak.png").exists():
        out += ["", "![soak.png](soak.png)"]
    return out


def _flink_peer(d: dict[str, Any]) -> list[str]:
    ours, fl = d.get("ours", {}), d.get("flink", {})
    out = [f"{fl.get('version', 'Flink')}; {_num(d.get('events'))} events, {_num(d.get('keys'))} keys.", ""]
    rows = [["ours (embedded, one core)", _num(ours.get("events_per_s_slope", ours.get("events_per_s"))), "-"]]
    for k, v in fl.items():
        if k.startswith("parallelism") and isinstance(v, dict):
            rows.append([f"Flink, {k.replace('_', ' ')}", _num(v.get("events_per_s_slope")),
                         _num(v.get("same_matches_as_ours"))])
    out += _table(["engine", "events/s", "same matches as ours"], rows)
    ratio = d.get("ratio_ours_over_flink") or {}
    if ratio.get("vs_flink_slope"):
        out += ["", f"Ours over Flink: x{ratio['vs_flink_slope']:.2f}."]
    return out


def _flink_diff(d: dict[str, Any]) -> list[str]:
    out = [f"{_num(d.get('cases'))} random cases (seed {d.get('seed', '-')}), not run by run_all "
           "(`flink_oracle.py --cases N`).", ""]
    out += _table(["outcome", "count"], [[k, _num(v)] for k, v in (d.get("summary") or {}).items()])
    return out


def _real(d: dict[str, Any]) -> list[str]:
    rows = []
    for w in d.get("workloads", []):
        for f in w.get("rule_files", []):
            rows.append([w.get("workload", "-"), f.get("rules", "-"), _num(w.get("events")), _num(f.get("events_per_cpu_s")),
                         _num(f.get("complex_events")), "yes" if f.get("counts_add_up") else "no",
                         "yes" if f.get("same_rows_in_batches_of_997") else "no"])
    return _table(["workload", "rule file", "events", "events/cpu-s", "complex events", "counts add up",
                   "same rows in batches of 997"], rows)


def _many_rules(d: dict[str, Any]) -> list[str]:
    out = [f"{d.get('data', '-')}: {_num(d.get('events'))} events in batches of {_num(d.get('batch'))}; "
           "old = the engine without work shared across rules, in the same run.", ""]
    rows = [[_num(p.get("rules")), _num(p.get("events_per_cpu_s")), _num(p.get("cost_vs_1_rule"), 1),
             _num(p.get("old_events_per_cpu_s")), _num(p.get("old_cost_vs_1_rule"), 1), _num(p.get("speedup_vs_old"), 2)]
            for p in d.get("points", [])]
    return out + _table(["rules", "events/cpu-s", "cost vs 1 rule", "old events/cpu-s", "old cost vs 1 rule",
                         "speedup"], rows)


SECTIONS: tuple[tuple[str, str, str, Callable[[dict[str, Any]], list[str]]], ...] = (
    # (step name, title, results file, table builder)
    ("patterns", "Patterns", "patterns.json", _patterns),
    ("sketches", "Sketches", "sketches.json", _sketches),
    ("percolator", "Percolator", "percolator.json", _percolator),
    ("analytics", "Windowed analytics", "analytics.json", _analytics),
    ("spark", "Spark operators", "spark.json", _spark),
    ("caps", "Partial-match caps", "caps.json", _caps),
    ("real", "Real workloads", "real.json", _real),
    ("latency", "Event-to-output latency (--follow)", "latency.json", _latency),
    ("many_rules", "Many rules over one stream", "many_rules.json", _many_rules),
    ("soak", "Soak", "soak.json", _soak),
    ("flink_peer", "Flink as a peer", "flink_peer.json", _flink_peer),
    ("flink_diff", "Flink as an oracle", "flink_diff.json", _flink_diff),
)


def write_summary(run: dict[str, Any] | None, quick: bool, path: Path = RESULTS / "SUMMARY.md") -> Path:
    """SUMMARY.md from the results files in ``results/`` (and this run's record, when there is one)."""
    steps = {s.name: s for s in STEPS}
    m = (run or {}).get("machine") or machine()
    lines = ["# Benchmark results", ""]
    if run:
        lines.append(f"Run by `python benchmarks/run_all.py{' ' + ' '.join(run['flags']) if run['flags'] else ''}` "
                     f"from {run['started']} to {run['finished']}.")
    lines.append(f"Machine: {m['cpu']}, {m['cores']} cores, {m.get('memory_gib', '-')} GiB, Python {m['python']}, "
                 f"{m['platform']}.")
    if run:
        lines.append(f"Load average (1 / 5 / 15 min): {_load(run.get('load_average_before'))} before, "
                     f"{_load(run.get('load_average_after'))} after.")
    else:
        lines.append(f"Summary rebuilt {time.strftime('%Y-%m-%d %H:%M')} from the files below, without running them; "
                     f"load average now (1 / 5 / 15 min): {_load(os.getloadavg())}.")
    if quick:
        lines += ["", "**Quick smoke run**: small inputs; the figures check that the scripts work and are not "
                  "comparable with a full run."]
    lines += ["", "CPU time (`time.process_time`) is the figure where a script records it: on a shared machine "
              "wall-clock rates are only lower bounds. Each ratio compares figures measured in the same run."]
    if run:
        lines += ["", "## Steps", ""]
        lines += _table(["benchmark", "command", "status", "seconds", "note"],
                        [[s["name"], f"`{s['command']}`", s["status"], _num(s.get("seconds"), 1), s.get("reason", "")]
                         for s in run["steps"]])
    for name, title, default, build in SECTIONS:
        step = steps.get(name)
        fname = step.files(quick)[0] if step else default
        f = RESULTS / fname
        if not f.exists():
            continue
        lines += ["", f"## {title}", ""]
        try:
            d = json.loads(f.read_text())
            ran = {x["name"] for x in run["steps"] if x["status"] == "ok"} if run else None
            stale = " Not written by this run: the figures come from an earlier one." if ran is not None and name not in ran else ""
            lines.append(f"From `{fname}`, {_when(d, f)}.{stale}")
            body = build(d)
        except Exception as e:  # one file in an unexpected layout must not cost the others their section
            body = [f"Could not read this file's layout ({type(e).__name__}: {e}); see the JSON itself."]
        lines += [""] + body
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="steps: " + ", ".join(s.name + (f" (--{s.flag})" if s.flag else "") for s in STEPS))
    ap.add_argument("--quick", action="store_true", help="small inputs: --quick, or a small size, for every script")
    ap.add_argument("--soak", action="store_true", help="also the soak run (bench_soak.py; 50M events at full size)")
    ap.add_argument("--peers", action="store_true", help="also Flink as a peer (flink_oracle.py --throughput)")
    ap.add_argument("--only", help="comma-separated steps to run (default: all enabled)")
    ap.add_argument("--timeout", type=float, help="stop a step after this many seconds")
    ap.add_argument("--summary-only", action="store_true",
                    help="run nothing; rebuild SUMMARY.md from the JSON files in results/")
    args = ap.parse_args(argv)
    if args.summary_only:
        print(f"wrote {write_summary(None, args.quick)}")
        return 0
    only = set(args.only.split(",")) if args.only else None
    unknown = (only or set()) - {s.name for s in STEPS}
    if unknown:
        ap.error(f"--only: unknown step(s) {sorted(unknown)!r}; expected some of {[s.name for s in STEPS]}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    flags = [f for f, on in (("--quick", args.quick), ("--soak", args.soak), ("--peers", args.peers)) if on]
    if args.only:
        flags.append(f"--only {args.only}")
    run: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "flags": flags, "quick": args.quick,
                           "machine": machine(), "load_average_before": os.getloadavg(), "steps": []}
    for step in STEPS:
        if only is not None and step.name not in only:
            continue
        if step.flag and not getattr(args, step.flag) and not (only and step.name in only):
            run["steps"].append({"name": step.name, "command": _cmdline(step, args.quick),
                                 "status": "skipped", "reason": f"needs --{step.flag}"})
            continue
        reason = (step.needs() if step.needs else None) or (
            None if (BENCH / step.script).exists() else f"{step.script} is not in benchmarks/")
        if reason:
            print(f"=== {step.name}: skipped, {reason}", flush=True)
            run["steps"].append({"name": step.name, "command": _cmdline(step, args.quick),
                                 "status": "skipped", "reason": reason})
            continue
        run["steps"].append(run_step(step, args.quick, args.timeout))
    run["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    run["load_average_after"] = os.getloadavg()
    (RESULTS / "run_all.json").write_text(json.dumps(run, indent=2) + "\n")
    path = write_summary(run, args.quick)
    failed = [s["name"] for s in run["steps"] if s["status"] in ("failed", "timeout")]
    for s in run["steps"]:
        print(f"{s['name']:12s} {s['status']:8s} {_num(s.get('seconds'), 1):>8s} s  {s.get('reason', '')}")
    print(f"wrote {path} and {RESULTS / 'run_all.json'}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
