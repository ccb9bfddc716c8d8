"""Percolator benchmark: headlines against 10k / 100k standing queries, next to every-query.

Usage: ``python benchmarks/bench_percolator.py [--quick] [--queries 10000,100000] [--no-peers]
[--no-curve] [--repeats N]``. Writes ``benchmarks/results/percolator.json`` and
``percolator.png``. Times only the hot loops; CPU seconds (``time.process_time``) are the
figures, wall seconds are reported beside them because the machine may be shared. Each
configuration runs in a forked process of its own, so its resident memory and
garbage-collector state are its own.

Measured in one run: for each query count and each scanner configuration, registration and
build time, resident memory, documents/s one at a time and in batches of 1,000 (the default
configuration ``--repeats`` times: the median is the figure, every run is kept), candidates,
verified queries and matches per document; the every-query baseline (``NoFiltering``) on a
prefix of the documents, with its answers compared; saving and loading the built index against
loading the queries and building again; the scanners alone (every Aho-Corasick library that
installs, on the same keys and strings); the curve of documents/s against registered queries
(1,000 to 200,000) with the baseline at each point; and, if they install, two peers: tantivy
(``pip install tantivy``; the usual workaround: index a micro-batch of documents in memory, run
every query) and mokaccino (``pip install mokaccino``; a percolator of term, prefix and boolean
queries, on a term-only query set).
"""

from __future__ import annotations

import argparse
import csv
import gc
import importlib
import json
import multiprocessing
import os
import platform
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cep.percolator import (  # noqa: E402
    NoFiltering,
    Percolator,
    PercolatorConfig,
    available_automata,
)
from patterns.analysis import Analyzer  # noqa: E402
from patterns.lucene import BoolNode, Node, PrefixNode, TermNode  # noqa: E402

__all__ = ["generate_queries", "generate_term_queries", "load_headlines", "main"]

DATA = REPO.parent / "shared" / "data"
RESULTS = REPO / "benchmarks" / "results" / "percolator.json"
CURVE = (1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000)

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


def load_reuters(data: Path = DATA) -> list[dict[str, Any]]:
    """Reuters-21578 articles with a date as documents ``{"publish_date": int,
    "headline_text": title and body}``: the headlines' field names, so that the same query
    generator, tantivy schema and percolator configuration apply to long documents."""
    out = []
    with open(data / "reuters21578.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r.get("date"):
                text = " ".join(x for x in (r.get("title"), r.get("body")) if x)
                out.append({"publish_date": int(r["date"][:10].replace("-", "")),
                            "headline_text": text})
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
        counts.update(sorted(set(t)))  # sorted: ties in most_common independent of str hashes
        bigrams.update(zip(t, t[1:]))
    ranked = [w for w, _ in counts.most_common(3000)]
    words = [w for w in ranked if len(w) > 2]
    content = [w for w in ranked[100:] if len(w) > 2]
    long_words = [w for w in ranked if len(w) >= 6]
    pairs = [b for b, _ in bigrams.most_common(5000)]
    names = [c for c in (_strip(x) for x in company_names(data)) if an.terms(c)]
    # date ranges in the documents' first year (20030200...: the headlines' 2003)
    year = min(d["publish_date"] for d in headlines) // 10_000 * 10_000
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
            lo = year + 200 + rng.randint(1, 28)
            hi = year + 600 + rng.randint(1, 28)
            q = f"headline_text:{rng.choice(words)} AND publish_date:[{lo} TO {hi}]"
        out.append((f"q{i}", q, {"owner": owner}))
    return out


def generate_term_queries(n: int, headlines: list[dict[str, Any]], seed: int = 2,
                          data: Path = DATA) -> list[tuple[str, str, dict[str, Any]]]:
    """``n`` queries of the workload made only of terms, prefixes and booleans (no phrases,
    wildcards or ranges): the query language mokaccino shares with us."""
    check = Percolator()
    out: list[tuple[str, str, dict[str, Any]]] = []
    round_ = 0
    while len(out) < n:
        for _, q, meta in generate_queries(n, headlines, seed=seed + round_, data=data):
            if _term_only(check.compile(q)):
                out.append((f"t{len(out)}", q, meta))
                if len(out) == n:
                    break
        round_ += 1
    return out


def _term_only(node: Node) -> bool:
    if isinstance(node, (TermNode, PrefixNode)):
        return node.field is None
    if isinstance(node, BoolNode):
        return all(map(_term_only, node.must + node.should + node.must_not))
    return False


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


def _rate(docs: int, took: tuple[float, float]) -> dict[str, Any]:
    return {"docs": docs, "cpu_s": round(took[0], 3), "wall_s": round(took[1], 3),
            "docs_per_s": round(docs / took[0]) if took[0] else None}


def _in_child(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run ``fn(*args)`` in a forked process (its own heap, resident memory and GC state)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()

    def run() -> None:
        try:
            queue.put(fn(*args))
        except BaseException as exc:  # report, never hang the parent
            queue.put({"error": f"{type(exc).__name__}: {exc}"})

    proc = ctx.Process(target=run)
    proc.start()
    out = queue.get()
    proc.join()
    return out


def percolate_single(p: Percolator, docs: list[dict[str, Any]]) -> tuple[float, float]:
    """Each document on its own, reading its match ids as a consumer would."""
    t = _clock()
    for doc in docs:
        len(p.percolate(doc).ids)
    return _since(t)


def percolate_batches(p: Percolator, docs: list[dict[str, Any]], size: int,
                      ) -> tuple[tuple[float, float], Counter[str]]:
    """Batches of ``size`` documents; returns the time and the summed batch stats."""
    totals: Counter[str] = Counter()
    t = _clock()
    for i in range(0, len(docs), size):
        out = p.percolate_batch(docs[i:i + size])
        for r in out.results:
            len(r.ids)
        totals.update(candidates=out.stats.candidates, verified=out.stats.verified,
                      matches=out.stats.matches)
    return _since(t), totals


def bench_config(n_queries: int, queries: list[tuple[str, str, dict[str, Any]]],
                 headlines: list[dict[str, Any]], args: argparse.Namespace, scanner: str,
                 automaton: str, tf: dict[str, float], first: bool) -> dict[str, Any]:
    """One index configuration over the headlines (run in a process of its own)."""
    gc.collect()
    rss0 = _rss_mb()
    config = PercolatorConfig(scanner=scanner, automaton=automaton,  # type: ignore[arg-type]
                              term_frequencies=tf)
    p = Percolator(config)
    t = _clock()
    p.register_many(queries)
    register = _since(t)
    t = _clock()
    p.snapshot()
    build = _since(t)
    rss1 = _rss_mb()
    plans = Counter(q.plan.kind for q in p.queries())
    always = sum(len(s.always) for s in p.snapshot().segments)

    single_docs = headlines[: args.single_docs]
    batch_docs = headlines[: args.batch_docs]
    singles, batches = [], []
    for _ in range(args.repeats if first else 1):
        singles.append(percolate_single(p, single_docs))
        took, totals = percolate_batches(p, batch_docs, 1000)
        batches.append(took)
    single = sorted(singles)[len(singles) // 2]  # the median run (by CPU time)
    batch = sorted(batches)[len(batches) // 2]
    out: dict[str, Any] = {
        "queries": n_queries,
        "scanner": scanner if scanner == "dict" else f"{scanner}:{automaton}",
        "automaton": p.snapshot().segments[0].automaton_name,
        "plans": dict(plans),
        "always_checked": always,
        "register_s": round(register[0], 3),
        "build_s": round(build[0], 3),
        "build_total_s": round(register[0] + build[0], 3),
        "rss_mb": round(rss1 - rss0, 1),
        "single": _rate(len(single_docs), single),
        "batch_1000": _rate(len(batch_docs), batch),
        "per_doc": {k: round(totals[k] / len(batch_docs), 2)
                    for k in ("candidates", "verified", "matches")},
    }
    if len(singles) > 1:
        out["single"]["runs"] = [_rate(len(single_docs), t)["docs_per_s"] for t in singles]
        out["batch_1000"]["runs"] = [_rate(len(batch_docs), t)["docs_per_s"] for t in batches]
    if first:
        big, _ = percolate_batches(p, batch_docs[: 5 * 10_000], 10_000)
        out["batch_10000"] = _rate(min(len(batch_docs), 50_000), big)
        out["single_cold_dictionary"] = bench_cold_dictionary(queries, config, single_docs)
        out["baseline"] = bench_baseline(p, config, headlines[: args.baseline_docs], out)
        if args.save:
            out["save_load"] = bench_save_load(p, config, headlines[:2000], out)
    return out


def bench_cold_dictionary(queries: list[tuple[str, str, dict[str, Any]]],
                          config: PercolatorConfig, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One at a time with the term dictionary empty at the start (``prefill_terms=False``):
    every term is resolved on its first sighting, as for terms unknown beforehand."""
    cold = Percolator(PercolatorConfig(scanner=config.scanner, automaton=config.automaton,
                                       term_frequencies=config.term_frequencies,
                                       prefill_terms=False))
    cold.register_many(queries)
    cold.snapshot()
    return _rate(len(docs), percolate_single(cold, docs))


def bench_baseline(p: Percolator, config: PercolatorConfig, docs: list[dict[str, Any]],
                   figures: dict[str, Any]) -> dict[str, Any]:
    """Every query on every document (``NoFiltering``, given the index's parsed queries) on a
    prefix; answers compared."""
    base = NoFiltering(config)
    for q in p.queries():  # the same parsed trees
        base.register_parsed(q.id, q.query, q.node, q.metadata)
    base.percolate_batch(docs[-3:])  # warm up (regexes compiled on first use)
    gc.collect()
    t = _clock()
    want = base.percolate_batch(docs)
    took = _since(t)
    single = [p.percolate(d).ids for d in docs]
    batched = [r.ids for r in p.percolate_batch(docs).results]
    expect = [r.ids for r in want.results]
    rate = len(docs) / took[0]
    return {
        "docs": len(docs), "cpu_s": round(took[0], 3), "docs_per_s": round(rate, 1),
        "agree": single == expect and batched == expect,
        "ratio_single": round(figures["single"]["docs_per_s"] / rate, 1),
        "ratio_batch": round(figures["batch_1000"]["docs_per_s"] / rate, 1),
    }


def bench_save_load(p: Percolator, config: PercolatorConfig, docs: list[dict[str, Any]],
                    figures: dict[str, Any]) -> dict[str, Any]:
    """The built index saved (``save_index``) and loaded, against the queries saved as JSON
    lines (``save``), loaded (parsed again) and built; answers compared on ``docs``."""
    want = [r.ids for r in p.percolate_batch(docs).results]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "queries.jsonl"
        t = _clock()
        p.save(path)
        save = _since(t)
        t = _clock()
        rebuilt = Percolator.load(path)
        rebuilt.snapshot()
        load = _since(t)
        same_json = [r.ids for r in rebuilt.percolate_batch(docs).results] == want
        del rebuilt
        gc.collect()
        ipath = Path(tmp) / "index.bin"
        t = _clock()
        p.save_index(ipath)
        isave = _since(t)
        t = _clock()
        loaded = Percolator.load_index(ipath)
        iload = _since(t)
        same_index = ([r.ids for r in loaded.percolate_batch(docs).results] == want
                      and [loaded.percolate(d).ids for d in docs[:300]] == want[:300])
        return {"json_mb": round(path.stat().st_size / 2**20, 1),
                "json_save_s": round(save[0], 3), "json_load_and_build_s": round(load[0], 3),
                "index_mb": round(ipath.stat().st_size / 2**20, 1),
                "index_save_s": round(isave[0], 3), "index_load_s": round(iload[0], 3),
                "register_and_build_s": figures["build_total_s"],
                "index_load_faster_than_json": round(load[0] / iload[0], 1),
                "same_matches": same_json and same_index}


def bench_curve_point(n: int, headlines: list[dict[str, Any]], tf: dict[str, float],
                      args: argparse.Namespace) -> dict[str, Any]:
    """One point of the curve: ``n`` registered queries, documents/s one at a time and in
    batches of 1,000, and the every-query baseline on a prefix (answers compared)."""
    queries = generate_queries(n, headlines, seed=args.seed)
    gc.collect()
    rss0 = _rss_mb()
    config = PercolatorConfig(term_frequencies=tf)
    p = Percolator(config)
    t = _clock()
    p.register_many(queries)
    p.snapshot()
    build = _since(t)
    rss1 = _rss_mb()
    batch_docs = headlines[: args.curve_batch_docs]
    singles, batches = [], []
    for _ in range(args.repeats):
        singles.append(percolate_single(p, headlines[: args.curve_single_docs]))
        took, totals = percolate_batches(p, batch_docs, 1000)
        batches.append(took)
    single = sorted(singles)[len(singles) // 2]  # the median run (by CPU time)
    batch = sorted(batches)[len(batches) // 2]
    one, many = _rate(args.curve_single_docs, single), _rate(len(batch_docs), batch)
    base = bench_baseline(p, config, headlines[: max(10, min(300, 2_000_000 // n))],
                          {"single": one, "batch_1000": many})
    return {"queries": n, "build_total_s": round(build[0], 3), "rss_mb": round(rss1 - rss0, 1),
            "single": one, "batch_1000": many,
            "per_doc": {k: round(totals[k] / len(batch_docs), 2)
                        for k in ("candidates", "matches")},
            "baseline": base, "ratio_single": base["ratio_single"], "ratio_batch": base["ratio_batch"]}


def bench_scanners(queries: list[tuple[str, str, dict[str, Any]]],
                   headlines: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The scanners alone, behind their common interface: every key of the query set but the
    wildcards (what ``scanner="aho"`` puts in the automaton) over the headlines' token
    strings, one string at a time and in batches of 1,000."""
    from cep.percolator import _SCANNERS  # the benchmark looks inside

    p = Percolator()
    p.register_many(queries)
    keys = sorted({k for q in p.queries() for k in q.plan.all_keys
                   if k[0] is None and k[1] in "tp"})
    words = [f" {text} " if kind == "t" else f" {text}" for _, kind, text in keys]
    an = Analyzer()
    texts = [f" {' '.join(an.terms(d['headline_text']))} "
             for d in headlines[: args.batch_docs]]
    gc.collect()  # registration ran with the collector paused: settle before timing
    out: dict[str, Any] = {"keys": len(words), "strings": len(texts)}
    reference = None
    for name in available_automata():
        t = _clock()
        sc = _SCANNERS[name](words, list(range(len(words))))
        built = _since(t)
        t = _clock()
        found = [sorted(sc.find(s)) for s in texts[: args.single_docs]]
        one = _since(t)
        t = _clock()
        hits = 0
        for i in range(0, len(texts), 1000):
            docs, _ = sc.find_batch(texts[i:i + 1000])
            hits += len(docs)
        many = _since(t)
        reference = found if reference is None else reference
        out[name] = {"build_s": round(built[0], 3),
                     "single": _rate(len(found), one), "batch_1000": _rate(len(texts), many),
                     "hits_per_string": round(hits / len(texts), 2),
                     "agrees": found == reference}
    return out


def bench_tantivy(queries: list[tuple[str, str, dict[str, Any]]],
                  headlines: list[dict[str, Any]], tf: dict[str, float],
                  args: argparse.Namespace) -> dict[str, Any]:
    """The usual workaround: a micro-batch of documents in an in-memory tantivy index, every
    query run against it. Prefix and wildcard queries are left out (tantivy's query parser
    reads ``appl*`` and ``te?m`` differently); ours runs the same subset in the same run."""
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("headline_text", stored=False)
    sb.add_integer_field("publish_date", fast=True, indexed=True)
    schema = sb.build()
    probe = tantivy.Index(schema)
    subset = [(qid, q, m) for qid, q, m in queries if "*" not in q and "?" not in q]
    t = _clock()
    parsed = []
    for qid, q, _ in subset:
        try:
            parsed.append((qid, probe.parse_query(q, ["headline_text"])))
        except ValueError:
            continue
    parse = _since(t)
    ours = Percolator(PercolatorConfig(term_frequencies=tf))
    ours.register_many(subset)
    ours.snapshot()
    gc.collect()  # registration ran with the collector paused: settle before timing
    out: dict[str, Any] = {"queries": len(parsed), "left_out": len(queries) - len(parsed),
                           "parse_s": round(parse[0], 3)}
    reps = max(1, getattr(args, "tantivy_repeats", 1))
    for size, docs in ((1000, args.tantivy_docs), (10_000, max(args.tantivy_docs, 10_000))):
        docs_ = headlines[:docs]

        def theirs() -> list[set[str]]:
            matched: list[set[str]] = []
            for i in range(0, len(docs_), size):
                chunk = docs_[i:i + size]
                index = tantivy.Index(schema)
                writer = index.writer(50_000_000, 1)
                for d in chunk:
                    writer.add_document(tantivy.Document(headline_text=d["headline_text"],
                                                         publish_date=d["publish_date"]))
                writer.commit()
                index.reload()
                searcher = index.searcher()
                got: list[set[str]] = [set() for _ in chunk]
                for qid, query in parsed:
                    for _, address in searcher.search(query, len(chunk)).hits:
                        got[address.doc].add(qid)  # one segment: doc ids in insertion order
                matched.extend(got)
            return matched

        def mine_() -> list[set[str]]:
            return [set(r.ids) for i in range(0, len(docs_), size)
                    for r in ours.percolate_batch(docs_[i:i + size]).results]

        # each side timed ``reps`` times, alternating, the collector settled before each
        # timed pass (objects the other side left would otherwise be traversed in it); the
        # median pass is the figure
        t_runs, o_runs = [], []
        for _ in range(reps):
            gc.collect()
            t = _clock()
            matched = theirs()
            t_runs.append(_since(t))
            gc.collect()
            t = _clock()
            mine = mine_()
            o_runs.append(_since(t))
        took = sorted(t_runs)[len(t_runs) // 2]
        mine_took = sorted(o_runs)[len(o_runs) // 2]
        same = sum(a == b for a, b in zip(matched, mine))
        theirs_pairs = {(i, q) for i, got in enumerate(matched) for q in got}
        ours_pairs = {(i, q) for i, got in enumerate(mine) for q in got}
        differ = {q for _, q in theirs_pairs ^ ours_pairs}
        out[f"batch_{size}"] = {
            "tantivy": {**_rate(len(docs_), took),
                        "runs": [_rate(len(docs_), r)["docs_per_s"] for r in t_runs]},
            "ours": {**_rate(len(docs_), mine_took),
                     "runs": [_rate(len(docs_), r)["docs_per_s"] for r in o_runs]},
            "ratio": round(took[0] / mine_took[0], 1),
            "same_matches_share": round(same / len(docs_), 3),
            # documents differ where one query parses differently (tantivy reads
            # "a AND b AND NOT c" otherwise); the (document, query) pairs and the queries
            # say how much
            "same_pairs_share": round(len(theirs_pairs & ours_pairs)
                                      / max(len(theirs_pairs | ours_pairs), 1), 4),
            "queries_differing": len(differ)}
    return out


def bench_reuters(args: argparse.Namespace) -> dict[str, Any]:
    """Long documents: Reuters-21578 articles (title and body, 136 terms on average) against
    ``args.reuters_queries`` queries of the same workload drawn from their own vocabulary.
    Ours in batches of 1,000 (median of ``args.repeats``) and one at a time, the every-query
    baseline on a prefix (answers compared), and tantivy micro-batches of 1,000 and 10,000
    on the same documents and queries (:func:`bench_tantivy`, answers compared)."""
    docs = load_reuters()[: args.reuters_docs]
    an = Analyzer()
    df: Counter[str] = Counter()
    for d in docs:
        df.update(set(an.terms(d["headline_text"])))
    tf = {w: c / len(docs) for w, c in df.items()}
    queries = generate_queries(args.reuters_queries, docs, seed=args.seed)
    config = PercolatorConfig(term_frequencies=tf)
    p = Percolator(config)
    t = _clock()
    p.register_many(queries)
    p.snapshot()
    build = _since(t)
    gc.collect()
    runs = []
    for _ in range(args.repeats):
        took, totals = percolate_batches(p, docs, 1000)
        runs.append(took)
    batch = sorted(runs)[len(runs) // 2]
    single = percolate_single(p, docs[: args.reuters_single_docs])
    terms = sum(len(an.terms(d["headline_text"])) for d in docs)
    out: dict[str, Any] = {
        "documents": len(docs), "queries": len(queries), "terms_per_doc": round(terms / len(docs), 1),
        "build_s": round(build[0], 3),
        "batch_1000": {**_rate(len(docs), batch),
                       "runs": [_rate(len(docs), r)["docs_per_s"] for r in runs]},
        "single": _rate(args.reuters_single_docs, single),
        "per_doc": {k: round(totals[k] / len(docs), 2)
                    for k in ("candidates", "verified", "matches")},
    }
    out["baseline"] = bench_baseline(p, config, docs[: args.reuters_baseline_docs], out)
    if args.peers and _installed("tantivy"):
        tv_args = argparse.Namespace(**{**vars(args), "tantivy_docs": len(docs),
                                        "tantivy_repeats": args.repeats})
        out["tantivy"] = bench_tantivy(queries, docs, tf, tv_args)
    elif args.peers:
        out["tantivy"] = {"skipped": "tantivy is not installed (pip install tantivy)"}
    return out


def _to_mokaccino(node: Node, field: str) -> Any:
    from mokaccino import Query

    if isinstance(node, TermNode):
        return Query.from_kv(field, node.term)
    if isinstance(node, PrefixNode):
        return Query.from_kprefix(field, node.prefix)
    assert isinstance(node, BoolNode)
    if node.must:
        q = Query.from_and([_to_mokaccino(c, field) for c in node.must])
    else:
        q = Query.from_or([_to_mokaccino(c, field) for c in node.should])
    if node.must_not:
        q = q & ~Query.from_or([_to_mokaccino(c, field) for c in node.must_not])
    return q


def bench_mokaccino(n: int, headlines: list[dict[str, Any]], tf: dict[str, float],
                    args: argparse.Namespace) -> dict[str, Any]:
    """mokaccino (term, prefix and boolean queries) and ours on the same term-only queries,
    one headline at a time; mokaccino's documents are the analysed terms of the headline."""
    from mokaccino import Document
    from mokaccino import Percolator as Mokaccino

    queries = generate_term_queries(n, headlines)
    ours = Percolator(PercolatorConfig(term_frequencies=tf))
    t = _clock()
    ours.register_many(queries)
    ours.snapshot()
    ours_build = _since(t)
    t = _clock()
    moka = Mokaccino()
    qid_of: list[str] = []
    for qid, q, _ in queries:
        moka.add_query_id(_to_mokaccino(ours.compile(q), "text"), len(qid_of))
        qid_of.append(qid)
    moka_build = _since(t)
    gc.collect()
    docs = headlines[: args.single_docs]
    an = Analyzer()

    def moka_one(d: dict[str, Any]) -> list[str]:
        doc = Document()
        for term in set(an.terms(d["headline_text"])):
            doc.add_value("text", term)
        return [qid_of[i] for i in sorted(moka.percolate_list(doc))]

    t = _clock()
    for d in docs:
        moka_one(d)
    moka_single = _since(t)
    prebuilt = []  # the same without building mokaccino's documents in the timed loop
    for d in docs:
        doc = Document()
        for term in set(an.terms(d["headline_text"])):
            doc.add_value("text", term)
        prebuilt.append(doc)
    t = _clock()
    for doc in prebuilt:
        moka.percolate_list(doc)
    moka_bare = _since(t)
    ours_single = percolate_single(ours, docs)
    sample = docs[:2000]
    same = sum(moka_one(d) == ours.percolate(d).ids for d in sample)
    return {"queries": n, "mokaccino": {"build_s": round(moka_build[0], 3),
                                        "single": _rate(len(docs), moka_single),
                                        "single_prebuilt_documents": _rate(len(docs), moka_bare)},
            "ours": {"build_s": round(ours_build[0], 3), "single": _rate(len(docs), ours_single)},
            "ratio_single": round(moka_single[0] / ours_single[0], 2),
            "same_matches_share": round(same / len(sample), 3)}


def plot(report: dict[str, Any], path: Path) -> None:
    """Left: documents/s against registered queries, with the every-query baseline; right: the
    largest query count's figures next to the peers measured in the same run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = [c for c in report.get("curve", []) if "error" not in c]
    fig, axes = plt.subplots(1, 2 if curve else 1, figsize=(13 if curve else 8, 4.8),
                             squeeze=False)
    axes = axes[0] if curve else [None, axes[0][0]]
    ax = axes[0]
    if curve:
        xs = [c["queries"] for c in curve]
        ax.plot(xs, [c["batch_1000"]["docs_per_s"] for c in curve], marker="o", color="#3b7dd8",
                label="indexed, batches of 1,000")
        ax.plot(xs, [c["single"]["docs_per_s"] for c in curve], marker="o", color="#6bb35a",
                label="indexed, one document at a time")
        ax.plot(xs, [c["baseline"]["docs_per_s"] for c in curve], marker="s", color="#d8843b",
                label="every query on every document")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("registered queries")
        ax.set_ylabel("headlines per CPU second (log)")
        ax.set_title("Percolator throughput against the number of queries, one core", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[1]
    main = [r for r in report.get("results", []) if r.get("scanner") == "dict"]
    bars: list[tuple[str, float, str]] = []
    if main:
        top = max(main, key=lambda r: r["queries"])
        n = f"{top['queries']:,}"
        bars += [(f"ours, one at a time ({n} queries)", top["single"]["docs_per_s"], "#6bb35a"),
                 (f"ours, batches of 1,000 ({n})", top["batch_1000"]["docs_per_s"], "#3b7dd8")]
        if "batch_10000" in top:
            bars.append((f"ours, batches of 10,000 ({n})", top["batch_10000"]["docs_per_s"],
                         "#3b7dd8"))
        if "baseline" in top:
            bars.append((f"every query ({n})", top["baseline"]["docs_per_s"], "#d8843b"))
    peers = report.get("peers", {})
    tv = peers.get("tantivy", {})
    for size in ("1000", "10000"):
        got = tv.get(f"batch_{size}")
        if got:
            bars.append((f"tantivy, batches of {int(size):,} ({tv['queries']:,})",
                         got["tantivy"]["docs_per_s"], "#999999"))
            bars.append((f"ours, same queries, batches of {int(size):,}",
                         got["ours"]["docs_per_s"], "#3b7dd8"))
    mk = peers.get("mokaccino", {})
    if "mokaccino" in mk:
        bars.append((f"mokaccino, one at a time ({mk['queries']:,} term-only)",
                     mk["mokaccino"]["single"]["docs_per_s"], "#999999"))
        bars.append(("ours, same queries, one at a time", mk["ours"]["single"]["docs_per_s"],
                     "#6bb35a"))
    rt = report.get("reuters", {})
    for size in ("1000", "10000"):
        got = rt.get("tantivy", {}).get(f"batch_{size}")
        if got:
            bars.append((f"Reuters: tantivy, batches of {int(size):,} ({rt['tantivy']['queries']:,})",
                         got["tantivy"]["docs_per_s"], "#999999"))
            bars.append((f"Reuters: ours, same queries, batches of {int(size):,}",
                         got["ours"]["docs_per_s"], "#3b7dd8"))
            before = report.get("before", {}).get("reuters", {}).get("tantivy", {})
            if f"batch_{size}" in before:
                bars.append((f"Reuters: ours before ({report['before']['code']}), "
                             f"batches of {int(size):,}",
                             before[f"batch_{size}"]["ours"]["docs_per_s"], "#d8843b"))
    if bars:
        labels = [b[0] for b in bars][::-1]
        ax.barh(labels, [b[1] for b in bars][::-1], color=[b[2] for b in bars][::-1])
        vals = [b[1] for b in bars]
        if max(vals) > 20 * min(vals):
            ax.set_xscale("log")
            ax.set_xlabel("documents per CPU second (log)")
        else:  # close figures: a linear axis from zero does not exaggerate them
            ax.set_xlabel("documents per CPU second")
        ax.set_title("Same run: ours, the baseline and the peers", fontsize=10)
        ax.tick_params(axis="y", labelsize=8)
    else:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _installed(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write the JSON results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k queries, fewer documents")
    ap.add_argument("--queries", default="10000,100000", help="comma-separated query counts")
    ap.add_argument("--single-docs", type=int, default=10_000)
    ap.add_argument("--batch-docs", type=int, default=49_999)
    ap.add_argument("--baseline-docs", type=int, default=0,
                    help="documents for the every-query baseline (default: 300 at 10k, 40 more)")
    ap.add_argument("--tantivy-docs", type=int, default=3_000,
                    help="documents for tantivy's batches of 1,000 (10,000 for its big batch)")
    ap.add_argument("--no-peers", dest="peers", action="store_false",
                    help="skip tantivy and mokaccino")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-save", dest="save", action="store_false",
                    help="skip saving and loading the index")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed runs of the default configuration (the median is reported)")
    ap.add_argument("--curve", default=",".join(map(str, CURVE)),
                    help="query counts of the documents/s curve (comma-separated)")
    ap.add_argument("--no-curve", dest="do_curve", action="store_false")
    ap.add_argument("--default-only", action="store_true",
                    help="only the default scanner configuration (no aho ones, no scanners)")
    ap.add_argument("--curve-single-docs", type=int, default=10_000)
    ap.add_argument("--curve-batch-docs", type=int, default=49_999)
    ap.add_argument("--reuters-docs", type=int, default=10_000,
                    help="Reuters articles for the long-document run")
    ap.add_argument("--reuters-queries", type=int, default=2_000)
    ap.add_argument("--reuters-single-docs", type=int, default=1_000)
    ap.add_argument("--reuters-baseline-docs", type=int, default=200)
    ap.add_argument("--parts", default="configs,curve,peers,reuters",
                    help="what to run (comma-separated: configs (with the scanners), curve, "
                         "peers, reuters); a partial run writes percolator_<parts>.json")
    ap.add_argument("--output", type=Path, default=None)
    args = ap.parse_args(argv)
    parts = [x for x in args.parts.split(",") if x]
    unknown = sorted(set(parts) - {"configs", "curve", "peers", "reuters"})
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; known: configs, curve, peers, reuters")
    if args.output is None:
        full = {"configs", "curve", "peers", "reuters"} <= set(parts)
        args.output = RESULTS if full else RESULTS.with_name(f"percolator_{'_'.join(parts)}.json")
    sizes = [int(x) for x in args.queries.split(",")] if "configs" in parts else []
    curve = ([int(x) for x in args.curve.split(",")]
             if args.do_curve and "curve" in parts else [])
    want_peers = args.peers  # (--no-peers) tantivy beside the Reuters run too
    if "peers" not in parts:
        args.peers = False
    if args.quick:
        sizes = [min(sizes)] if sizes else []
        args.single_docs = min(args.single_docs, 2000)
        args.batch_docs = min(args.batch_docs, 10_000)
        args.tantivy_docs = min(args.tantivy_docs, 1000)
        args.repeats = 1
        curve = [n for n in curve if n <= 2_000]
        args.curve_single_docs = min(args.curve_single_docs, 1000)
        args.curve_batch_docs = min(args.curve_batch_docs, 2000)
        args.reuters_docs = min(args.reuters_docs, 2000)
        args.reuters_single_docs = min(args.reuters_single_docs, 300)
    load_at_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    headlines = load_headlines()
    an = Analyzer()
    df: Counter[str] = Counter()
    for d in headlines:
        df.update(set(an.terms(d["headline_text"])))
    tf = {w: c / len(headlines) for w, c in df.items()}  # the presearcher's frequency table
    automata = available_automata()
    configs = [("dict", "auto")] + ([] if args.default_only
                                    else [("aho", name) for name in automata])
    results: list[dict[str, Any]] = []
    scanners: dict[str, Any] = {}
    for n in sizes:
        queries = generate_queries(n, headlines, seed=args.seed)
        base_docs = args.baseline_docs or (300 if n <= 10_000 else 40)
        for i, (scanner, automaton) in enumerate(configs):
            run_args = argparse.Namespace(**{**vars(args), "baseline_docs": base_docs})
            r = _in_child(bench_config, n, queries, headlines, run_args, scanner, automaton, tf,
                          i == 0)
            results.append(r)
            print(json.dumps(r), flush=True)
        if not args.default_only:
            scanners[str(n)] = _in_child(bench_scanners, queries, headlines, args)
            print(json.dumps({"scanners": scanners[str(n)]}), flush=True)
    points: list[dict[str, Any]] = []
    for n in curve:
        points.append({"queries": n, **_in_child(bench_curve_point, n, headlines, tf, args)})
        print(json.dumps({"curve": points[-1]}), flush=True)
    peers: dict[str, Any] = {}
    if args.peers:
        n = max(sizes or [int(x) for x in args.queries.split(",")])
        queries = generate_queries(n, headlines, seed=args.seed)
        for name, fn, fn_args in (
            ("tantivy", bench_tantivy, (queries, headlines, tf, args)),
            ("mokaccino", bench_mokaccino, (n, headlines, tf, args)),
        ):
            if not _installed(name):
                peers[name] = {"skipped": f"{name} is not installed (pip install {name})"}
            else:
                peers[name] = _in_child(fn, *fn_args)
            print(json.dumps({name: peers[name]}), flush=True)
    reuters: dict[str, Any] = {}
    if "reuters" in parts:
        if (DATA / "reuters21578.jsonl").exists():
            reuters = _in_child(bench_reuters,
                                argparse.Namespace(**{**vars(args), "peers": want_peers}))
        else:
            reuters = {"skipped": f"{DATA / 'reuters21578.jsonl'} is absent"}
        print(json.dumps({"reuters": reuters}), flush=True)
    report = {
        "benchmark": "percolator",
        "parts": parts,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "started": started,
        "load_average_at_start": load_at_start,
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "documents": "abcnews_headlines_2003.csv (49,999 headlines)",
        "automata": automata,
        "targets_100k": {"single_docs_per_s": 10_000, "batch_docs_per_s": 30_000,
                         "build_s": 20},
        "results": results,
        "scanners": scanners,
        "curve": points,
        "peers": peers,
        "reuters": reuters,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    png = args.output.with_suffix(".png")
    plot(report, png)
    print(f"wrote {args.output} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
