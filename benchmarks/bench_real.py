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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated workloads (default: all whose data is present)")
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--out", type=Path, default=RESULTS / "real.json")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(WORKLOADS)
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
