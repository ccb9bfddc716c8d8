"""Percolator benchmark: headlines against 10k / 100k standing queries, next to every-query.

Usage: ``python benchmarks/bench_percolator.py [--quick] [--queries 10000,100000]``.
Writes ``benchmarks/results/percolator.json``. Times only the hot loops; CPU seconds
(``time.process_time``) are the figures, wall seconds are reported beside them because the
machine may be shared.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import pickle
import platform
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cep.percolator import NoFiltering, Percolator, PercolatorConfig  # noqa: E402
from patterns.analysis import Analyzer  # noqa: E402

__all__ = ["generate_queries", "load_headlines", "main"]

DATA = REPO.parent / "shared" / "data"
RESULTS = REPO / "benchmarks" / "results" / "percolator.json"

_SUFFIX = re.compile(
    r"[,.]?\s+(inc|incorporated|corp|corporation|co|company|ltd|limited|plc|holdings?|group|"
    r"lp|llc|sa|nv|ag|the|trust|fund|etf|acquisition|class [a-z])\.?$",
    re.IGNORECASE,
)


def _strip(name: str) -> str:
    prev = None
    while prev != name:
        prev, name = name, _SUFFIX.sub("", name).strip()
    return name


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def company_names(data: Path = DATA) -> list[str]:
    """S&P 500 ``Security`` names and NASDAQ ``Company Name`` values."""
    out = []
    with open(data / "sp500_companies.csv", newline="", encoding="utf-8") as fh:
        out += [r["Security"] for r in csv.DictReader(fh)]
    with open(data / "nasdaq_listed_symbols.csv", newline="", encoding="utf-8") as fh:
        out += [r["Company Name"] for r in csv.DictReader(fh) if r.get("Company Name")]
    return out


def load_headlines(data: Path = DATA) -> list[dict[str, Any]]:
    """The news headlines as documents ``{"publish_date": int, "headline_text": str}``."""
    with open(data / "abcnews_headlines_2003.csv", newline="", encoding="utf-8") as fh:
        return [{"publish_date": int(r["publish_date"]), "headline_text": r["headline_text"]}
                for r in csv.DictReader(fh)]


def generate_queries(n: int, headlines: list[dict[str, Any]], seed: int = 1,
                     data: Path = DATA) -> list[tuple[str, str, dict[str, Any]]]:
    """Seeded workload: ``(id, query, metadata)``.

    Shares: 25% company names (a term or an exact phrase; suffixes like "Inc." removed),
    5% company-name prefixes, 15% one content word, 10% OR of 2-3 content words, 15% AND of two
    headline words, 5% AND NOT, 5% ``+w +(w OR w)``, 7% headline bigram phrases (30% sloppy),
    5% company phrase AND word, 4% wildcards (``poli?e*``), 4% field + date range.
    "Content words" skip the 100 most frequent headline words.
    """
    rng = random.Random(seed)
    an = Analyzer()
    counts: Counter[str] = Counter()
    bigrams: Counter[tuple[str, str]] = Counter()
    for d in headlines:
        t = an.terms(d["headline_text"])
        counts.update(set(t))
        bigrams.update(zip(t, t[1:]))
    ranked = [w for w, _ in counts.most_common(3000)]
    words = [w for w in ranked if len(w) > 2]
    content = [w for w in ranked[100:] if len(w) > 2]
    long_words = [w for w in ranked if len(w) >= 6]
    pairs = [b for b, _ in bigrams.most_common(5000)]
    names = [c for c in (_strip(x) for x in company_names(data)) if an.terms(c)]
    out = []
    for i in range(n):
        r = rng.random()
        owner = f"user{rng.randrange(1000)}"
        if r < 0.25:
            name = rng.choice(names)
            t = an.terms(name)
            q = t[0] if len(t) == 1 else _quote(name)
        elif r < 0.30:
            t = [x for x in an.terms(rng.choice(names)) if len(x) >= 5] or ["compan"]
            q = t[0][: max(4, len(t[0]) - 2)] + "*"
        elif r < 0.45:
            q = rng.choice(content)
        elif r < 0.55:
            q = " OR ".join(rng.choice(content) for _ in range(rng.randint(2, 3)))
        elif r < 0.70:
            q = f"{rng.choice(words)} AND {rng.choice(words)}"
        elif r < 0.75:
            q = f"{rng.choice(words)} AND {rng.choice(words)} AND NOT {rng.choice(words)}"
        elif r < 0.80:
            q = f"+{rng.choice(words)} +({rng.choice(words)} OR {rng.choice(words)})"
        elif r < 0.87:
            a, b = rng.choice(pairs)
            q = f'"{a} {b}"' + (f"~{rng.randint(1, 3)}" if rng.random() < 0.3 else "")
        elif r < 0.92:
            q = f"{_quote(rng.choice(names))} AND {rng.choice(words)}"
        elif r < 0.96:
            x = rng.choice(long_words)
            k = rng.randint(3, len(x) - 2)
            q = x[:k] + "?" + x[k + 1:] + ("*" if rng.random() < 0.5 else "")
        else:
            lo = 20030200 + rng.randint(1, 28)
            hi = 20030600 + rng.randint(1, 28)
            q = f"headline_text:{rng.choice(words)} AND publish_date:[{lo} TO {hi}]"
        out.append((f"q{i}", q, {"owner": owner}))
    return out


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # pragma: no cover - not Linux
        return float("nan")


def _clock() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    return time.process_time() - start[0], time.perf_counter() - start[1]


def bench_size(n_queries: int, headlines: list[dict[str, Any]], args: argparse.Namespace,
               scanner: str, tf: dict[str, float]) -> dict[str, Any]:
    queries = generate_queries(n_queries, headlines, seed=args.seed)
    gc.collect()
    rss0 = _rss_mb()
    config = PercolatorConfig(scanner=scanner, term_frequencies=tf)
    p = Percolator(config)
    t = _clock()
    for qid, q, meta in queries:
        p.register(qid, q, meta)
    register = _since(t)
    t = _clock()
    p.snapshot()
    build = _since(t)
    rss1 = _rss_mb()
    plans = Counter(q.plan.kind for q in p.queries())
    always = sum(len(s.always) for s in p.snapshot().segments)

    single_docs = headlines[: args.single_docs]
    t = _clock()
    for doc in single_docs:
        p.percolate(doc)
    single = _since(t)

    batch_docs = headlines[: args.batch_docs]
    cand = ver = match = 0
    t = _clock()
    for i in range(0, len(batch_docs), 1000):
        st = p.percolate_batch(batch_docs[i:i + 1000]).stats
        cand += st.candidates
        ver += st.verified
        match += st.matches
    batch = _since(t)

    # The same loops with the index (and the loaded documents) frozen out of the cyclic
    # garbage collector's full scans: gc.freeze() after building, as a long-running service
    # would do. Reported beside the default figures, not instead of them.
    gc.freeze()
    t = _clock()
    for doc in single_docs:
        p.percolate(doc)
    single_frozen = _since(t)
    t = _clock()
    for i in range(0, len(batch_docs), 1000):
        p.percolate_batch(batch_docs[i:i + 1000])
    batch_frozen = _since(t)
    gc.unfreeze()

    out: dict[str, Any] = {
        "queries": n_queries,
        "scanner": scanner,
        "plans": dict(plans),
        "always_checked": always,
        "register_s": round(register[0], 3),
        "build_s": round(build[0], 3),
        "build_total_s": round(register[0] + build[0], 3),
        "rss_mb": round(rss1 - rss0, 1),
        "single": {"docs": len(single_docs), "cpu_s": round(single[0], 3),
                   "wall_s": round(single[1], 3),
                   "docs_per_s": round(len(single_docs) / single[0])},
        "batch_1000": {"docs": len(batch_docs), "cpu_s": round(batch[0], 3),
                       "wall_s": round(batch[1], 3),
                       "docs_per_s": round(len(batch_docs) / batch[0])},
        "gc_frozen": {"single_docs_per_s": round(len(single_docs) / single_frozen[0]),
                      "batch_docs_per_s": round(len(batch_docs) / batch_frozen[0])},
        "per_doc": {"candidates": round(cand / len(batch_docs), 2),
                    "verified": round(ver / len(batch_docs), 2),
                    "matches": round(match / len(batch_docs), 2)},
    }
    if args.baseline_docs and scanner == args.scanners[0]:
        base = NoFiltering(config)
        for qid, q, meta in queries:
            base.register(qid, q, meta)
        sub = headlines[: args.baseline_docs]
        t = _clock()
        want = base.percolate_batch(sub)
        baseline = _since(t)
        got = p.percolate_batch(sub)
        agree = [r.ids for r in got.results] == [r.ids for r in want.results]
        base_rate = len(sub) / baseline[0]
        out["baseline"] = {
            "docs": len(sub), "cpu_s": round(baseline[0], 3), "docs_per_s": round(base_rate, 1),
            "agree": agree,
            "ratio_single": round(out["single"]["docs_per_s"] / base_rate, 1),
            "ratio_batch": round(out["batch_1000"]["docs_per_s"] / base_rate, 1),
        }
        del base
    if args.save and scanner == args.scanners[0]:
        out["save_load"] = bench_save_load(p, queries, config)
    del p
    gc.collect()
    return out


def bench_save_load(p: Percolator, queries: list[tuple[str, str, dict[str, Any]]],
                    config: PercolatorConfig) -> dict[str, Any]:
    """``save``/``load`` (JSON lines, parsed again) versus the alternative we measured and
    dropped: a pickle of the parsed trees and plans, rebuilt without parsing."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "queries.jsonl"
        t = _clock()
        p.save(path)
        save = _since(t)
        t = _clock()
        Percolator.load(path).snapshot()
        load = _since(t)
        ppath = Path(tmp) / "queries.pickle"
        t = _clock()
        with open(ppath, "wb") as fh:
            pickle.dump([(q.id, q.query, dict(q.metadata), q.node, q.plan)
                         for q in p.queries()], fh, protocol=pickle.HIGHEST_PROTOCOL)
        psave = _since(t)
        t = _clock()
        again = Percolator(config)
        with open(ppath, "rb") as fh:
            for qid, text, meta, node, plan in pickle.load(fh):
                again._add(qid, text, meta, node, plan)
        again.snapshot()
        pload = _since(t)
        return {"json_mb": round(path.stat().st_size / 2**20, 1),
                "json_save_s": round(save[0], 3), "json_load_and_build_s": round(load[0], 3),
                "pickle_mb": round(ppath.stat().st_size / 2**20, 1),
                "pickle_save_s": round(psave[0], 3),
                "pickle_load_and_build_s": round(pload[0], 3)}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write the JSON results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k queries, fewer documents")
    ap.add_argument("--queries", default="10000,100000", help="comma-separated query counts")
    ap.add_argument("--scanners", default="dict,aho", help="scanners to compare")
    ap.add_argument("--single-docs", type=int, default=10_000)
    ap.add_argument("--batch-docs", type=int, default=49_999)
    ap.add_argument("--baseline-docs", type=int, default=0,
                    help="documents for the every-query baseline (default: 300 at 10k, 40 more)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-save", dest="save", action="store_false")
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    args.scanners = args.scanners.split(",")
    sizes = [int(x) for x in args.queries.split(",")]
    if args.quick:
        sizes = [min(sizes)]
        args.single_docs = min(args.single_docs, 2000)
        args.batch_docs = min(args.batch_docs, 10_000)
    headlines = load_headlines()
    an = Analyzer()
    df: Counter[str] = Counter()
    for d in headlines:
        df.update(set(an.terms(d["headline_text"])))
    tf = {w: c / len(headlines) for w, c in df.items()}  # the presearcher's frequency table
    results = []
    for n in sizes:
        base_docs = args.baseline_docs
        for scanner in args.scanners:
            args.baseline_docs = base_docs or (300 if n <= 10_000 else 40)
            r = bench_size(n, headlines, args, scanner, tf)
            args.baseline_docs = base_docs
            results.append(r)
            print(json.dumps(r), flush=True)
    report = {
        "benchmark": "percolator",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "documents": "abcnews_headlines_2003.csv (49,999 headlines)",
        "targets_100k": {"single_docs_per_s": 10_000, "batch_docs_per_s": 30_000,
                         "build_s": 20},
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
