"""Temporal joins on Spark: what a group's replica of the table costs in the worker core, by table size.

Run ``python benchmarks/bench_spark_tables.py`` (``--quick`` for a smoke run). Writes
``benchmarks/results/spark_tables.json``. Spark-free: it times :meth:`spark_udf.core.GroupCore.stream_group`,
the call Spark makes per group and micro-batch (restore the blob, ingest, release, save the blob), in
CPU seconds of this process (``time.process_time``; the machine is shared). The group keeps a
replica of the table (the layout whose cost grows with the table; a table kept by key costs each
group as a replica of its share of the keys would). Per table size N (integer
keys, a string column ``tier``, loaded by a first micro-batch of N change rows):

* ``blob_bytes``: the group's saved state (operator + replica) after the table is loaded;
* ``change_call_ms``: a call with 10 change rows and no event, the fixed price of the replica that
  every group of a joined rule pays whenever changes arrive;
* ``joined_events_per_s`` / ``prejoined_events_per_s``: a call with 20,000 events (and 10 changes)
  and the next call that releases them, of a joined pattern rule (``LEFT JOIN``, ``PATTERN (A) DEFINE A AS tier = 'gold'``, partitioned by the
  join key), against the same rule without a join over the same events with ``tier`` looked up
  beforehand; ``ratio`` = joined / pre-joined.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from patterns.rules import parse_rules
from spark_udf.core import GroupCore
from spark_udf.tables import table_bindings

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

JOINED = """
tables:
  - {name: accounts, from: changes, primary_key: id, columns: [tier], time_field: ts}
rules:
  - name: gold
    sql: |
      SELECT * FROM payments AS p LEFT JOIN accounts FOR SYSTEM_TIME AS OF p.ts AS a ON p.account = a.id
      MATCH_RECOGNIZE (PARTITION BY account ORDER BY ts MEASURES A.ts AS t PATTERN (A) DEFINE A AS A.tier = 'gold')
"""
PREJOINED = """
rules:
  - name: gold
    sql: |
      SELECT * FROM payments MATCH_RECOGNIZE (PARTITION BY account ORDER BY ts MEASURES A.ts AS t
        PATTERN (A) DEFINE A AS tier = 'gold')
"""
COLUMNS = ["account", "ts", "id", "tier", "stream"]
TYPES = {"account": "bigint", "ts": "bigint", "id": "bigint", "tier": "string", "stream": "string"}


def _core(text: str) -> GroupCore:
    rules = parse_rules(text)
    core, _ = GroupCore.for_rules(list(rules), TYPES, 1)
    for name, b in table_bindings(list(rules), dict(rules.tables), lambda spec: True).items():
        core.specs[name].table = b
    return core


def _frame(rows: dict[str, list]) -> pd.DataFrame:
    n = len(next(iter(rows.values())))
    return pd.DataFrame({c: rows.get(c, [None] * n) for c in COLUMNS})


def measure(n_keys: int, n_events: int, rnd: np.random.Generator) -> dict:
    tiers = np.array(["gold", "silver", "bronze"])[rnd.integers(0, 3, n_keys)]
    load = _frame({"id": list(range(n_keys)), "ts": [0] * n_keys, "tier": tiers.tolist(),
                   "stream": ["changes"] * n_keys})
    t0 = 1_000
    few = _frame({"id": list(range(10)), "ts": [t0 + 10_000] * 10, "tier": ["gold"] * 10, "stream": ["changes"] * 10})
    accounts = rnd.integers(0, n_keys, n_events)
    ts = np.sort(rnd.integers(t0, t0 + 10_000, n_events))
    events = {"account": accounts.tolist(), "ts": ts.tolist(), "stream": ["payments"] * n_events}
    prejoined = dict(events, tier=tiers[accounts].tolist())

    joined = _core(JOINED)
    _, blob, _ = joined.stream_group(("gold", 0), [load], None, 0, False)
    c = time.process_time()
    _, blob2, _ = joined.stream_group(("gold", 0), [few], blob, 0, False)
    change_call = time.process_time() - c
    # the micro-batch with the events (ingested at watermark t0), then the next one, whose watermark
    # releases them (a timeout call): what a group does for them, restore and save included
    c = time.process_time()
    _, blob3, _ = joined.stream_group(("gold", 0), [_frame(events), few], blob, t0, False)
    got, _, _ = joined.stream_group(("gold", 0), [], blob3, t0 + 10_001, True)
    joined_s = time.process_time() - c

    plain = _core(PREJOINED)
    c = time.process_time()
    _, saved, _ = plain.stream_group(("gold", 0), [_frame(prejoined)], None, t0, False)
    want, _, _ = plain.stream_group(("gold", 0), [], saved, t0 + 10_001, True)
    plain_s = time.process_time() - c
    n_match = int((got["output"] == "match").sum())
    assert n_match == int((want["output"] == "match").sum()) > 0, "the joined rule must find the pre-joined matches"
    return {
        "table_keys": n_keys,
        "events": n_events,
        "blob_bytes": len(blob[0]),
        "blob_bytes_per_key": round(len(blob[0]) / n_keys, 1),
        "change_call_ms": round(change_call * 1000, 1),
        "joined_events_per_s": round(n_events / joined_s),
        "prejoined_events_per_s": round(n_events / plain_s),
        "ratio": round(plain_s / joined_s, 2),
        "matches": n_match,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = ap.parse_args()
    rnd = np.random.default_rng(16)
    sizes = [1_000, 5_000] if args.quick else [1_000, 10_000, 100_000]
    n_events = 2_000 if args.quick else 20_000
    _core(JOINED).stream_group(("gold", 0), [_frame({"id": [1], "ts": [0], "tier": ["gold"], "stream": ["changes"]})],
                               None, 0, False)  # warm-up: imports and compiled kernels outside the clock
    rows = [measure(n, n_events, rnd) for n in sizes]
    for r in rows:
        print(json.dumps(r))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / ("spark_tables_quick.json" if args.quick else "spark_tables.json")
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "machine": "shared 2-core", "rows": rows},
                              indent=2) + "\n")


if __name__ == "__main__":
    main()
