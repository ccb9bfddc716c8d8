"""Tables: as-of lookups of 1,000,000 events against a table of 1,000,000 keys, and memory per row.

Run ``python benchmarks/bench_tables.py`` (``--quick`` for a smoke run). Writes
``benchmarks/results/tables.json``. Seeded workload: a table of N integer keys with two columns
(a float and a string of 16 categories), loaded as a snapshot plus a changelog of N/4 updates and
N/20 deletes at random times; E events with random keys (10% not in the table) and random times.

Figures, each per CPU second of this process (``time.process_time``, the machine is shared):

* ``lookup``: the vectorised as-of lookup of the events' (key, time) and the gather of both
  columns (:meth:`cep.tables.VersionedTable.lookup` + ``gather``), the hot loop of a join;
* ``baseline``: pandas ``merge_asof(by=key)`` on the same data (sorting included), the reference of
  the tests, on the same events, with the same answers;
* ``apply``: changes applied per CPU second (the changelog, merged into the sorted versions);
* ``engine``: a pattern rule joined to the table end to end (``PATTERN (A)`` over every event), in
  batches of 65,536 (ingest, release, lookup, match);
* ``engine_analytics``: an analytics rule joined to the table (``GROUP BY segment``, a joined
  column, ``TUMBLE`` of one minute; ``COUNT``, ``AVG(score)``), end to end in the same batches, next
  to the same rule without a join over the events the join keeps, their columns looked up
  beforehand (outside the clock): the ratio is what the join costs (lookups, the arrival queue);
  both rates count every input event;
* ``view``: a foreign-key view of two tables (N/10 companies, 1,000 sectors) kept incrementally
  while their changelogs arrive, against the same changes fed to the tables alone;
* memory: :meth:`VersionedTable.stats` (bytes, bytes per live key) and the resident growth;
  ``category_strings``: what sharing the strings of a category column saves when they come as a
  decoded changelog gives them (an object per row), measured with tracemalloc in the same run.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd

from cep.tables import MIN_TIME, VersionedTable

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def workload(n_keys: int, n_events: int, seed: int = 7):
    rng = np.random.default_rng(seed)
    cats = np.array([f"segment-{i:02d}" for i in range(16)], dtype=object)
    keys = np.arange(n_keys, dtype=np.int64)
    score = rng.random(n_keys)
    seg = cats[rng.integers(0, 16, n_keys)]
    n_up, n_del = n_keys // 4, n_keys // 20
    up_keys = rng.integers(0, n_keys, n_up)
    up_times = np.sort(rng.integers(0, 1_000_000, n_up))
    del_keys = rng.integers(0, n_keys, n_del)
    del_times = np.sort(rng.integers(0, 1_000_000, n_del))
    ev_keys = rng.integers(0, int(n_keys * 1.1), n_events)
    ev_times = rng.integers(0, 1_000_000, n_events)
    return dict(keys=keys, score=score, seg=seg, up_keys=up_keys, up_times=up_times, up_score=rng.random(n_up),
                up_seg=cats[rng.integers(0, 16, n_up)], del_keys=del_keys, del_times=del_times,
                ev_keys=ev_keys, ev_times=ev_times)


def build(w) -> tuple[VersionedTable, float]:
    t = VersionedTable(("id",), ("score", "segment"))
    c0 = time.process_time()
    n = len(w["keys"])
    t.apply(w["keys"], np.full(n, MIN_TIME), np.zeros(n, dtype=bool), {"score": w["score"], "segment": w["seg"]})
    t.apply(w["up_keys"], w["up_times"], np.zeros(len(w["up_keys"]), dtype=bool),
            {"score": w["up_score"], "segment": w["up_seg"]})
    t.apply(w["del_keys"], w["del_times"], np.ones(len(w["del_keys"]), dtype=bool), {})
    t.lookup(w["keys"][:1], np.zeros(1, dtype=np.int64))  # merge the changes into the sorted versions
    return t, time.process_time() - c0


def baseline(w) -> tuple[np.ndarray, float]:
    """merge_asof per key (deletes as tombstone rows), the tests' reference."""
    c0 = time.process_time()
    n = len(w["keys"])
    ch = pd.DataFrame({
        "key": np.concatenate((w["keys"], w["up_keys"], w["del_keys"])),
        "t": np.concatenate((np.full(n, MIN_TIME), w["up_times"], w["del_times"])),
        "seq": np.arange(n + len(w["up_keys"]) + len(w["del_keys"])),
        "deleted": np.concatenate((np.zeros(n + len(w["up_keys"]), dtype=bool), np.ones(len(w["del_keys"]), dtype=bool))),
        "score": np.concatenate((w["score"], w["up_score"], np.full(len(w["del_keys"]), np.nan))),
    }).sort_values(["t", "seq"], kind="stable")
    ev = pd.DataFrame({"key": w["ev_keys"], "t": w["ev_times"], "i": np.arange(len(w["ev_keys"]))}).sort_values("t")
    m = pd.merge_asof(ev, ch[["key", "t", "deleted", "score"]], on="t", by="key", direction="backward")
    m = m.sort_values("i")
    score = np.where(m["deleted"].fillna(True).astype(bool), np.nan, m["score"].to_numpy())
    return score, time.process_time() - c0


def engine_rate(w, n_events: int) -> dict:
    from cep import Engine
    from cep.events import EventBatch
    from patterns.rules import parse_rules

    rules = parse_rules("""
tables:
  - {name: accounts, from: account_changes, primary_key: id, columns: [score, segment], time_field: ts}
rules:
  - name: hot
    sql: |
      SELECT * FROM events JOIN accounts FOR SYSTEM_TIME AS OF events.ts ON events.account = accounts.id
      MATCH_RECOGNIZE (ORDER BY ts MEASURES A.ts AS ts PATTERN (A) DEFINE A AS score > 0.999)
""")
    eng = Engine(rules, streams=["events"])  # the changelog is not an input: the table is static
    table = eng.tables["accounts"]
    table.store, _ = build(w)
    order = np.argsort(w["ev_times"][:n_events], kind="stable")
    keys, times = w["ev_keys"][:n_events][order], w["ev_times"][:n_events][order]
    c0 = time.process_time()
    matches = 0
    for lo in range(0, n_events, 65536):
        b = EventBatch({"account": keys[lo:lo + 65536], "ts": times[lo:lo + 65536] + 1_500_000_000_000}, len(keys[lo:lo + 65536]))
        matches += len(eng.process(b, stream="events").matches)
    matches += len(eng.finish().matches)
    cpu = time.process_time() - c0
    return {"events": n_events, "cpu_s": round(cpu, 3), "events_per_cpu_s": round(n_events / cpu), "matches": matches,
            "dropped_unmatched": eng.operators["hot"].join.counts["dropped"]}


ANALYTICS = """
  - name: per_segment
    kind: analytics
    sql: |
      SELECT segment, COUNT(*) AS n, AVG(score) AS score, window_start
      FROM events {join}
      GROUP BY segment, TUMBLE(ts, INTERVAL '1' MINUTE)
"""


def analytics_rate(w, n_events: int) -> dict:
    """A joined analytics rule against the same rule over events joined beforehand."""
    from cep import Engine
    from cep.events import EventBatch
    from patterns.rules import parse_rules

    table_decl = """
tables:
  - {name: accounts, from: account_changes, primary_key: id, columns: [score, segment], time_field: ts}
rules:"""
    joined = parse_rules(table_decl + ANALYTICS.format(
        join="JOIN accounts FOR SYSTEM_TIME AS OF events.ts ON events.account = accounts.id"))
    plain = parse_rules("rules:" + ANALYTICS.format(join=""))
    order = np.argsort(w["ev_times"][:n_events], kind="stable")
    keys, times = w["ev_keys"][:n_events][order], w["ev_times"][:n_events][order] + 1_500_000_000_000
    figures: dict = {}
    for name, rules in (("joined", joined), ("prejoined_baseline", plain)):
        eng = Engine(rules, streams=["events"])  # the changelog is not an input: the table is static
        cols: dict = {"account": keys, "ts": times}
        if name == "joined":
            eng.tables["accounts"].store, _ = build(w)
        else:
            table, _ = build(w)
            rows = table.lookup(keys, times - 1_500_000_000_000)
            hit = rows >= 0  # what the inner join keeps, looked up outside the clock
            cols = {"account": keys[hit], "ts": times[hit], **table.gather(rows[hit])}
        c0 = time.process_time()
        matches = 0
        m = len(cols["ts"])
        for lo in range(0, m, 65536):
            b = EventBatch({k: v[lo:lo + 65536] for k, v in cols.items()}, len(cols["ts"][lo:lo + 65536]))
            matches += len(eng.process(b, stream="events").matches)
        matches += len(eng.finish().matches)
        cpu = time.process_time() - c0
        figures[name] = {"cpu_s": round(cpu, 3), "events_per_cpu_s": round(n_events / cpu), "rows": matches}
    figures["joined_vs_baseline"] = round(figures["joined"]["events_per_cpu_s"]
                                          / figures["prejoined_baseline"]["events_per_cpu_s"], 2)
    return figures


VIEW_RULES = """
tables:
  - {name: companies, from: company_changes, primary_key: id, columns: [sector, score], time_field: ts}
  - {name: sectors, from: sector_changes, primary_key: id, columns: [label], time_field: ts}
views:
  - name: company_sectors
    sql: SELECT c.score, s.label FROM companies AS c LEFT JOIN sectors AS s ON c.sector = s.id
rules: []
"""


def view_rate(n_left: int, n_right: int = 1000, seed: int = 11) -> dict:
    """A foreign-key view kept incrementally: ``n_left`` companies (one row each at time 0, then n/4
    updates, some of them moving sector) and ``n_right`` sectors (n/100 relabels, each changing every
    company of its sector), interleaved in time and fed in batches of 10,000 changes. Next to it, the
    same changes fed to the two tables without the view (the ratio is what keeping the view costs);
    the view's own rows and memory."""
    from cep import Engine
    from cep.events import EventBatch
    from patterns.rules import parse_rules

    rng = np.random.default_rng(seed)
    n_up, n_rel = n_left // 4, max(n_left // 100, 1)
    left = {"id": np.concatenate([np.arange(n_left), rng.integers(0, n_left, n_up)]),
            "sector": np.concatenate([rng.integers(0, n_right, n_left), rng.integers(0, n_right, n_up)]),
            "score": rng.random(n_left + n_up),
            "ts": np.concatenate([np.zeros(n_left, dtype=np.int64), np.sort(rng.integers(1, 1_000_000, n_up))])}
    right = {"id": np.concatenate([np.arange(n_right), rng.integers(0, n_right, n_rel)]),
             "label": np.array([f"sector-{i % 97}" for i in range(n_right + n_rel)], dtype=object),
             "ts": np.concatenate([np.zeros(n_right, dtype=np.int64), np.sort(rng.integers(1, 1_000_000, n_rel))])}
    # one arrival order: by time, each stream's own order kept; batches of 10,000 rows of one stream
    feed = []
    for name, cols in (("company_changes", left), ("sector_changes", right)):
        for lo in range(0, len(cols["ts"]), 10_000):
            part = {k: v[lo:lo + 10_000] for k, v in cols.items()}
            feed.append((int(part["ts"][0]), name, part))
    feed.sort(key=lambda x: x[0])
    figures: dict = {"companies": n_left, "sectors": n_right, "changes": len(left["ts"]) + len(right["ts"])}
    for label, text in (("with_view", VIEW_RULES), ("tables_only", VIEW_RULES.split("views:")[0] + "rules: []\n")):
        eng = Engine(parse_rules(text), streams=["company_changes", "sector_changes"])
        c0 = time.process_time()
        emitted = 0
        for _, name, part in feed:
            emitted += len(eng.process(EventBatch(dict(part), len(part["ts"])), stream=name).matches)
        emitted += len(eng.finish().matches)
        cpu = time.process_time() - c0
        figures[label] = {"cpu_s": round(cpu, 3), "changes_per_cpu_s": round(figures["changes"] / cpu)}
        if label == "with_view":
            v = eng.view_stats()["company_sectors"]
            figures[label].update(view_changes=emitted, inserts=v["inserts"], updates=v["updates"],
                                  deletes=v["deletes"], view_table={k: v[k] for k in (
                                      "keys", "live_keys", "versions", "rows", "bytes", "bytes_per_row")})
    figures["view_vs_tables_only"] = round(figures["with_view"]["cpu_s"] / figures["tables_only"]["cpu_s"], 2)
    return figures


def shared_strings(n: int) -> dict:
    """Memory of a category column as a decoded changelog gives it (a new string object per row, 16
    distinct values), held by a table with its strings shared and, in the same run, kept as they came
    (the sharing turned off): bytes retained per row, by tracemalloc."""
    import tracemalloc

    rng = np.random.default_rng(5)
    cats = [f"segment-{i:02d}" for i in range(16)]
    picks = rng.integers(0, 16, n).tolist()
    figures: dict = {}
    for label in ("as_decoded", "shared"):
        t = VersionedTable(("id",), ("seg",))
        if label == "as_decoded":
            t._share_strings = lambda name, chunk: chunk  # type: ignore[method-assign]
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        col = np.empty(n, dtype=object)
        col[:] = ["".join(cats[i]) for i in picks]  # one object per row, as json.loads makes them
        t.apply(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), {"seg": col})
        t.column("seg")
        del col
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        figures[label] = {"bytes_per_row": round(held / n, 1), "estimate_bytes_per_row": round(t.stats().bytes_per_row, 1)}
    figures["saved_bytes_per_row"] = round(figures["as_decoded"]["bytes_per_row"] - figures["shared"]["bytes_per_row"], 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 keys and events")
    args = parser.parse_args()
    n = 100_000 if args.quick else 1_000_000
    w = workload(n, n)
    rss0 = rss_mb()
    table, build_cpu = build(w)
    rss1 = rss_mb()
    stats = table.stats()
    best = None
    for _ in range(3):
        c0 = time.process_time()
        rows = table.lookup(w["ev_keys"], w["ev_times"])
        vals = table.gather(rows)
        cpu = time.process_time() - c0
        best = cpu if best is None else min(best, cpu)
    ref, base_cpu = baseline(w)
    same = bool(np.array_equal(np.isnan(ref), np.isnan(vals["score"].astype(float)))
                and np.allclose(np.nan_to_num(ref), np.nan_to_num(vals["score"].astype(float))))
    changes = n + len(w["up_keys"]) + len(w["del_keys"])
    result = {
        "quick": args.quick,
        "keys": n,
        "events": n,
        "lookup": {"cpu_s": round(best or 0, 4), "events_per_cpu_s": round(n / (best or 1e-9))},
        "baseline_merge_asof": {"cpu_s": round(base_cpu, 3), "events_per_cpu_s": round(n / base_cpu)},
        "lookup_vs_baseline": round(base_cpu / (best or 1e-9), 1),
        "same_answers_as_baseline": same,
        "apply": {"changes": changes, "cpu_s": round(build_cpu, 3), "changes_per_cpu_s": round(changes / build_cpu)},
        "table": stats.to_dict(),
        "resident_growth_mb": round(rss1 - rss0, 1),
        "engine": engine_rate(w, n),
        "engine_analytics": analytics_rate(w, n),
        "view": view_rate(n // 10),
        "category_strings": shared_strings(n),
        "target_events_per_s": 1_000_000,
    }
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / ("tables_quick.json" if args.quick else "tables.json")).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
