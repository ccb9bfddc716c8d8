"""Real workloads: the curated rule files over the full public data sets in ``../shared/data``.

    python benchmarks/bench_real.py            # every workload whose data is present
    python benchmarks/bench_real.py --only sp500,xetra

Each workload reads its data set into event batches once (untimed), then runs a rule file from
``rules/`` through the embedded engine in batches of ``--batch`` events and reports events per CPU
second, complex events per rule, and that every event was processed, late or an error (counts
add up). A second pass in batches of 997 events must give the same pattern and search rows
(sorted): the workload checks itself as it is measured. Writes ``benchmarks/results/real.json``.

Data sets (see ../shared/data/SOURCES.md; none is bundled in the repo by this script):

* ``sp500``: S&P 500 daily bars 2013-2018 (619,040 rows), ``rules/trading.yaml`` and
  ``rules/trends.yaml`` (V-shapes, three rising bars then a drop, streaks, breakouts);
* ``xetra``: Deutsche Boerse Xetra one-minute bars of 28 July 2017 (65,868 rows; non-commercial),
  the same two rule files over the minutes of each instrument;
* ``nasa``: the NASA Kennedy Space Center log of 1 August 1995 (30,969 requests),
  ``rules/weblogs.yaml`` and ``rules/ops.yaml``;
* ``apache``: the semicomplete.com Apache access log of May 2015 (10,000 lines, one of them cut
  off), read as an access log, the same two rule files;
* ``headlines``: ABC news headlines of 2003 (49,999), ``rules/media.yaml`` (company mentions with
  tickers, desk alerts, busy news days);
* ``reuters``: Reuters-21578 (21,578 articles; research use only), ``rules/media.yaml`` over
  title and body.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cep.engine import Engine  # noqa: E402
from cep.events import EventBatch, batch_from_pandas, read_events  # noqa: E402
from patterns.rules import RuleSet, load_rules  # noqa: E402

DATA = REPO.parent / "shared" / "data"
RESULTS = REPO / "benchmarks" / "results"


def _frame_batches(df: pd.DataFrame, size: int, source: str) -> list[EventBatch]:
    return [batch_from_pandas(df.iloc[i : i + size].reset_index(drop=True), source) for i in range(0, len(df), size)]


def sp500(size: int) -> list[EventBatch]:
    df = pd.read_csv(DATA / "sp500_daily_ohlcv_2013_2018.csv").rename(columns={"Name": "symbol"})
    df = df.sort_values(["date", "symbol"], kind="stable")
    return _frame_batches(df, size, "sp500")


def xetra(size: int) -> list[EventBatch]:
    df = pd.read_csv(DATA / "xetra_1min_bars_2017-07-28.csv")
    df = pd.DataFrame({
        "symbol": df["Mnemonic"],
        "date": df["Date"] + "T" + df["Time"] + ":00Z",
        "open": df["StartPrice"], "high": df["MaxPrice"], "low": df["MinPrice"], "close": df["EndPrice"],
        "volume": df["TradedVolume"],
    }).sort_values(["date", "symbol"], kind="stable")
    return _frame_batches(df, size, "xetra")


def nasa(size: int) -> list[EventBatch]:
    df = pd.read_csv(DATA / "nasa_http_1995-08-01.tsv", sep="\t", keep_default_na=False)
    df = pd.DataFrame({
        "host": df["host"], "time": df["time"].astype("int64") * 1000, "method": df["method"], "url": df["url"],
        "status": df["response"].astype("int64"), "bytes": pd.to_numeric(df["bytes"], errors="coerce"),
    })
    return _frame_batches(df, size, "nasa")


def apache(size: int) -> list[EventBatch]:
    return list(read_events(DATA / "apache_access_combined_2015-05.log", batch_size=size))


def headlines(size: int) -> list[EventBatch]:
    df = pd.read_csv(DATA / "abcnews_headlines_2003.csv", dtype={"publish_date": str})
    d = df["publish_date"]
    df = pd.DataFrame({
        "id": [f"abc-{i}" for i in range(len(df))],
        "date": d.str[:4] + "-" + d.str[4:6] + "-" + d.str[6:8],
        "title": df["headline_text"],
    })
    return _frame_batches(df, size, "headlines")


def reuters(size: int) -> list[EventBatch]:
    rows = [json.loads(x) for x in (DATA / "reuters21578.jsonl").read_text().splitlines() if x.strip()]
    df = pd.DataFrame({
        "id": [f"reuters-{r['newid']}" for r in rows],
        "date": [r.get("date") for r in rows],
        "title": [" ".join(x for x in (r.get("title"), r.get("body")) if x) for r in rows],
    }).dropna(subset=["date"]).sort_values("date", kind="stable")
    return _frame_batches(df, size, "reuters")


WORKLOADS: dict[str, tuple[Callable[[int], list[EventBatch]], list[str], str]] = {
    "sp500": (sp500, ["trading.yaml", "trends.yaml"], "sp500_daily_ohlcv_2013_2018.csv"),
    "xetra": (xetra, ["trading.yaml", "trends.yaml"], "xetra_1min_bars_2017-07-28.csv"),
    "nasa": (nasa, ["weblogs.yaml", "ops.yaml"], "nasa_http_1995-08-01.tsv"),
    "apache": (apache, ["weblogs.yaml", "ops.yaml"], "apache_access_combined_2015-05.log"),
    "headlines": (headlines, ["media.yaml"], "abcnews_headlines_2003.csv"),
    "reuters": (reuters, ["media.yaml"], "reuters21578.jsonl"),
}


def run_rules(rules: RuleSet, batches: list[EventBatch]) -> tuple[float, float, list[dict], Engine]:
    eng = Engine(rules)
    rows: list[dict] = []
    w0, c0 = time.perf_counter(), time.process_time()
    for b in batches:
        rows += eng.process(b).matches
    rows += eng.finish().matches
    return time.perf_counter() - w0, time.process_time() - c0, rows, eng


def rules_kind(rules: RuleSet, name: str) -> str:
    return next(r.kind for r in rules if r.name == name)


def rebatch(batches: list[EventBatch], size: int) -> list[EventBatch]:
    """The same events cut into batches of another size (bad lines stay with their batch)."""
    out: list[EventBatch] = []
    for b in batches:
        import numpy as np

        for i in range(0, b.n, size):
            part = b.take(np.arange(i, min(i + size, b.n)))
            if i == 0:
                part.bad = b.bad
            out.append(part)
    return out


def bench(name: str, size: int) -> dict[str, Any]:
    load, files, data_file = WORKLOADS[name]
    batches = load(size)
    events = sum(b.n for b in batches)
    bad = sum(len(b.bad) for b in batches)
    result: dict[str, Any] = {"workload": name, "data": data_file, "events": events, "bad_lines": bad, "rule_files": []}
    for f in files:
        rules = load_rules(REPO / "rules" / f)
        wall, cpu, rows, eng = run_rules(rules, batches)
        _, _, again, _ = run_rules(rules, rebatch(batches, 997))
        # pattern and search rows do not depend on batching; analytics windows over out-of-order
        # input may fire part-way at a batch boundary and be corrected later (docs/analytics.md),
        # so only their final rows per window would compare, which is not checked here
        exact = {r.name for r in rules if r.kind in ("pattern", "search")}
        key = lambda r: json.dumps(r, sort_keys=True, default=str)  # noqa: E731
        same = sorted(key(r) for r in rows if r["rule"] in exact) == sorted(key(r) for r in again if r["rule"] in exact)
        counts = {k: vars(v) for k, v in eng.counts().items()}
        adds_up = all(c["read"] == c["processed"] + c["late"] + c["errors"] + c["buffered"] for c in counts.values())
        result["rule_files"].append({
            "rules": f,
            "seconds_wall": round(wall, 3),
            "seconds_cpu": round(cpu, 3),
            "events_per_cpu_s": round(events / max(cpu, 1e-9)),
            "events_per_s_wall": round(events / max(wall, 1e-9)),
            "complex_events": len(rows),
            "per_rule": {k: {"matches": c["matches"], "late": c["late"], "errors": c["errors"],
                             # pattern rules: the most partial matches one key held, and any drops
                             **({x: c[x] for x in ("partial_matches_peak", "partial_matches_dropped", "budget_dropped")}
                                if rules_kind(rules, k) == "pattern" else {})}
                         for k, c in counts.items()},
            "counts_add_up": adds_up,
            "same_rows_in_batches_of_997": same,
        })
        print(f"{name:>10} {f:<13} {events:>9,} events  {events / max(cpu, 1e-9):>11,.0f} events/cpu-s  "
              f"{len(rows):>7,} complex events  same rows rebatched: {same}  counts add up: {adds_up}", flush=True)
        if not (same and adds_up):
            raise SystemExit(f"{name} / {f}: the check failed")
    return result


# ------------------------------------------------------------------------------------------------
# Windowed analytics end to end from a JSON lines file, next to DuckDB and Polars on the same file

WINDOWS_RULE = """\
rules:
  - name: host_window_urls
    kind: analytics
    lateness: 1 minute
    max_future_skew: none
    sql: |
      SELECT host, COUNT(*) AS requests, COUNT(DISTINCT url) AS urls, APPROX_COUNT_DISTINCT(url) AS approx_urls,
             window_start, window_end
      FROM requests
      GROUP BY host, TUMBLE(time, INTERVAL '10' MINUTE)
"""
WINDOW_MS = 600_000
DAY_MS = 86_400_000
HLL_P = 12  # the rule's hll_precision (the default)

# The child process that times ``cep run`` of one checkout (this one, or --baseline's): imports and a
# warm-up run first (numba's compiled scanner loads from its cache there), then ``repeat`` timed runs
# (the best is the round's figure: on a shared machine one run's CPU time varies by a third).
_CHILD = r"""
import json, sys, time
from cep.cli.command import main
rules, path, out, batch, repeat = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
args = ["run", rules, "--input", path, "--output", out, "--quiet", "--batch-size", batch, "--progress", "off"]
assert main(args) == 0
runs = []
for _ in range(repeat):
    c0 = time.process_time()
    assert main(args) == 0
    runs.append(time.process_time() - c0)
print(json.dumps({"cpu": min(runs), "runs": runs}))
"""


def build_nasa_jsonl(out: Path, copies: int) -> int:
    """The NASA log as JSON lines, ``copies`` times, each copy one day later (``bench_decode.py``'s file)."""
    import orjson

    df = pd.read_csv(DATA / "nasa_http_1995-08-01.tsv", sep="\t", keep_default_na=False, dtype=str)
    rows = [{"host": h, "time": int(t) * 1000, "method": m, "url": u, "status": int(s),
             "bytes": int(b) if b.isdigit() else None}
            for h, t, m, u, s, b in zip(df["host"], df["time"], df["method"], df["url"], df["response"], df["bytes"])]
    n = 0
    with open(out, "wb") as f:
        for c in range(copies):
            f.write(b"".join(orjson.dumps({**r, "time": r["time"] + c * DAY_MS}) + b"\n" for r in rows))
            n += len(rows)
    return n


def _cep_child(repo: Path, rules: Path, path: Path, out: Path, batch: int, inner: int) -> tuple[float, float]:
    """(best CPU seconds of ``inner`` runs of ``cep run`` in one warm process, CPU seconds of one whole
    ``cep run`` process: the child's start-up and its first run, numba's loading included)."""
    import os
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = subprocess.run([sys.executable, "-c", _CHILD, str(rules), str(path), str(out), str(batch), str(inner)],
                         check=True, cwd=repo, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(repo)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    whole = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    told = json.loads(got.stdout.strip().splitlines()[-1])
    return float(told["cpu"]), whole - sum(told.get("runs", [0.0]))


def _cep_rows(out: Path) -> dict[tuple[str, int], tuple[int, int, int]]:
    import orjson

    rows = {}
    with open(out, "rb") as f:
        for line in f:
            r = orjson.loads(line)
            rows[(r["host"], r["window_start"])] = (r["requests"], r["urls"], r["approx_urls"])
    return rows


def _duckdb(path: Path) -> dict[tuple[str, int], tuple[int, int, int]] | None:
    try:
        import duckdb
    except ImportError:
        return None
    con = duckdb.connect()
    got = con.execute(
        "SELECT host, (time // ?) * ? AS window_start, COUNT(*), COUNT(DISTINCT url), APPROX_COUNT_DISTINCT(url) "
        "FROM read_json_auto(?) GROUP BY ALL", [WINDOW_MS, WINDOW_MS, str(path)]).fetchall()
    con.close()
    return {(h, int(w)): (int(a), int(b), int(c)) for h, w, a, b, c in got}


def _polars(path: Path) -> dict[tuple[str, int], tuple[int, int, int]] | None:
    try:
        import polars as pl
    except ImportError:
        return None
    df = (pl.scan_ndjson(path)
          .group_by("host", (pl.col("time") // WINDOW_MS * WINDOW_MS).alias("window_start"))
          .agg(pl.len().alias("n"), pl.col("url").n_unique().alias("d"), pl.col("url").approx_n_unique().alias("a"))
          .collect())
    return {(h, int(w)): (int(a), int(b), int(c)) for h, w, a, b, c in df.iter_rows()}


def _peer_versions() -> dict[str, str]:
    out = {}
    for name in ("duckdb", "polars"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            pass
    return out


def _approx_error(rows: dict[tuple[str, int], tuple[int, int, int]]) -> dict[str, float]:
    """How far each approximate distinct count is from the exact one: the largest absolute difference
    among windows of fewer than 2**p / 4 distinct URLs, and the largest relative one elsewhere."""
    small = [abs(c - b) for _a, b, c in rows.values() if b < (1 << HLL_P) // 4]
    large = [abs(c - b) / b for _a, b, c in rows.values() if b >= (1 << HLL_P) // 4]
    return {"max_abs_below_2p_4": max(small, default=0), "max_rel_above": round(max(large, default=0.0), 4)}


def windowed_analytics(copies: int, repeat: int, batch: int, baseline: Path | None, inner: int = 3) -> dict[str, Any]:
    """``cep run`` with one analytics rule over the NASA log x ``copies`` (JSON lines), with DuckDB
    and Polars over the same file and, with ``baseline``, another checkout's ``cep run``.

    The machine is shared, so the engines are interleaved: ``repeat`` rounds, each engine's turn in a
    round ``inner`` runs of which the best counts (a child process per round for ``cep run``, warm
    after a first run), the order of the engines rotating from round to round. A round's ratios are
    of figures taken side by side; the result gives the best of the rounds for each engine and its
    ratio (best over best), and the median and range of the per-round ratios, the figure least
    moved by a burst of load in one round. Rows are checked equal to DuckDB's and Polars'."""
    import os
    import shutil
    import statistics
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="bench_windows_"))
    try:
        path = tmp / f"nasa_x{copies}.jsonl"
        n = build_nasa_jsonl(path, copies)
        rules = tmp / "rules.yaml"
        rules.write_text(WINDOWS_RULE)
        print(f"nasa_windows: {n:,} events, {path.stat().st_size / 1e6:.1f} MB of JSON lines", flush=True)
        best: dict[str, float] = {}
        whole: dict[str, float] = {}
        rounds: dict[str, list[int]] = {}  # every round's rate: the machine is shared, show the spread
        peers: dict[str, Callable[[Path], Any]] = {"duckdb": _duckdb, "polars": _polars}
        peer_rows: dict[str, Any] = {}
        load = [round(os.getloadavg()[0], 1)]

        def cep_turn(name: str, repo: Path) -> Callable[[], float | None]:
            def run() -> float | None:
                t, w = _cep_child(repo, rules, path, tmp / f"{name}.jsonl", batch, inner)
                whole[name] = min(whole.get(name, 1e18), w)
                return t
            return run

        def peer_turn(name: str, fn: Callable[[Path], Any]) -> Callable[[], float | None]:
            def run() -> float | None:
                times = []
                for _ in range(inner):
                    c0 = time.process_time()
                    got = fn(path)
                    times.append(time.process_time() - c0)
                    if got is None:
                        return None
                    peer_rows[name] = got
                return min(times)
            return run

        engines = [("cep", cep_turn("cep", REPO))] + ([("cep_baseline", cep_turn("cep_baseline", baseline))] if baseline else [])
        engines += [(name, peer_turn(name, fn)) for name, fn in peers.items()]
        for r in range(repeat):
            turn = engines[r % len(engines):] + engines[:r % len(engines)]  # no engine always first or last
            for name, run in turn:
                t = run()
                if t is None:
                    continue
                best[name] = min(best.get(name, 1e18), t)
                rounds.setdefault(name, []).append(round(n / t))
                print(f"  round {r + 1} {name:<13} {n / t:>12,.0f} events/cpu-s", flush=True)
            load.append(round(os.getloadavg()[0], 1))
        ours = _cep_rows(tmp / "cep.jsonl")
        result: dict[str, Any] = {
            "workload": "nasa_windows", "data": "nasa_http_1995-08-01.tsv", "copies": copies, "events": n,
            "rule": WINDOWS_RULE, "batch": batch, "repeats": repeat, "rows": len(ours),
            "inner_runs": inner, "load_average_1min": load,
            "events_per_cpu_s": {k: round(n / t) for k, t in best.items()},
            "events_per_cpu_s_each_round": rounds,
            "whole_process_events_per_cpu_s": {k: round(n / t) for k, t in whole.items()},
            "approx_error": {"cep": _approx_error(ours)},
            "peer_versions": _peer_versions(),
        }
        if baseline:
            result["baseline"] = str(baseline)
            same = _cep_rows(tmp / "cep_baseline.jsonl") == ours
            result["same_rows_as_baseline"] = same
            if not same:
                raise SystemExit("nasa_windows: the baseline checkout gave other rows")
        for name, rows in peer_rows.items():
            exact = {k: v[:2] for k, v in rows.items()} == {k: v[:2] for k, v in ours.items()}
            result[f"same_exact_rows_as_{name}"] = exact
            result["approx_error"][name] = _approx_error(rows)
            if not exact:
                raise SystemExit(f"nasa_windows: COUNT(*) or COUNT(DISTINCT url) differ from {name}'s")
        small = result["approx_error"]["cep"]["max_abs_below_2p_4"]
        if small > 1:  # the sketch is exact to within 1 below 2**p / 4 values (docs/analytics.md)
            raise SystemExit(f"nasa_windows: APPROX_COUNT_DISTINCT off by {small} on a small window")
        for k, v in result["events_per_cpu_s"].items():
            if k != "cep":
                result.setdefault("ratio_cep_over", {})[k] = round(result["events_per_cpu_s"]["cep"] / v, 2)
                each = [a / b for a, b in zip(rounds["cep"], rounds[k])]  # measured side by side in each round
                result.setdefault("ratio_cep_over_each_round", {})[k] = [round(x, 2) for x in each]
                result.setdefault("ratio_cep_over_median_round", {})[k] = round(statistics.median(each), 2)
        print(f"  ratios, best of {repeat}: {result.get('ratio_cep_over')}; median round: "
              f"{result.get('ratio_cep_over_median_round')}", flush=True)
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated workloads (default: all whose data is present)")
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--out", type=Path, default=RESULTS / "real.json")
    ap.add_argument("--copies", type=int, default=20, help="nasa_windows: copies of the NASA log (20: 619,380 events)")
    ap.add_argument("--repeat", type=int, default=3, help="nasa_windows: rounds, the engines interleaved")
    ap.add_argument("--inner", type=int, default=3, help="nasa_windows: runs of each engine per round (its best counts)")
    ap.add_argument("--baseline", type=Path, help="nasa_windows: another checkout whose cep run is timed alongside")
    ap.add_argument("--windows-out", type=Path, default=RESULTS / "real_windows.json")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else [*WORKLOADS, "nasa_windows"]
    if "nasa_windows" in names:
        names.remove("nasa_windows")
        if (DATA / "nasa_http_1995-08-01.tsv").exists():
            got = windowed_analytics(args.copies, args.repeat, args.batch, args.baseline, args.inner)
            args.windows_out.parent.mkdir(parents=True, exist_ok=True)
            args.windows_out.write_text(json.dumps({
                "benchmark": "real_windows", "date": time.strftime("%Y-%m-%d"),
                "machine": {"python": platform.python_version(), "platform": platform.platform()},
                **got}, indent=1) + "\n")
            print(f"wrote {args.windows_out}")
        else:
            print("nasa_windows skipped: the NASA log is absent", flush=True)
        if not names:
            return
    results = []
    for name in names:
        if name not in WORKLOADS:
            raise SystemExit(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
        if not (DATA / WORKLOADS[name][2]).exists():
            print(f"{name:>10} skipped: {DATA / WORKLOADS[name][2]} is absent", flush=True)
            continue
        results.append(bench(name, args.batch))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "real",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "batch": args.batch,
        "workloads": results,
    }, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
