"""Spark operator benchmark: throughput next to the embedded engine, micro-batch latency, state size.

Run ``python benchmarks/bench_spark.py`` (``--quick`` for a smoke run). Writes
``benchmarks/results/spark.json``.

Workload: a seeded random walk (``k``, ``ts`` in ms, ``price``) written as Parquet files, one
file per micro-batch, and a 3-variable pattern (``A B C``, each condition on the current row).
For every key count and shuffle-partition count, the same events go

* through Spark: ``spark_udf.apply_rules`` on a file stream (``maxFilesPerTrigger=1``,
  ``availableNow``), sink = Parquet files partitioned like ``cep spark run``'s; the figure is
  events / time of the micro-batches with data after the first (the first one also starts the
  Python workers), and events / wall-clock of the whole query;
* through the embedded engine, in the same process, fed the same files as Arrow tables.

Spark's own ceiling: the same stream, grouping, state and timeout with a function that only
counts its rows (2 shuffle partitions), measured in the same run.

Latency: a stream of small files (one per micro-batch), the median duration of a micro-batch.
State: bytes of Spark state (all buckets) per key once the watermark passed every event
(idle keys), from the state operator's progress and from the blobs' own sizes.
The machine's load average is recorded next to the numbers: other jobs on the machine slow Spark
(several processes, a JVM) more than the single-threaded embedded engine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")

from cep.engine import Engine  # noqa: E402
from patterns.rules import parse_rules  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"

RULES = parse_rules("""
rules:
  - name: abc
    description: a 3-variable pattern; A holds for ~1% of events
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, C.ts AS t1, C.price - A.price AS move
        PATTERN (A B C)
        DEFINE A AS price > 102.33, B AS price < 100, C AS price > 100)
""")
SCHEMA = "k long, ts long, price double"


def write_files(folder: Path, events: int, keys: int, per_file: int, seed: int) -> list[pa.Table]:
    """Seeded random-walk events as Parquet files, modification times in order."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    tables = []
    for i, start in enumerate(range(0, events, per_file)):
        n = min(per_file, events - start)
        t = pa.table({
            "k": rng.integers(0, keys, n),
            "ts": np.arange(start, start + n, dtype=np.int64) + 1_000,
            "price": np.round(100 + rng.normal(0, 1, n), 2),
        })
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(t, path)
        os.utime(path, (1_600_000_000 + i, 1_600_000_000 + i))
        tables.append(t)
    return tables


def embedded(tables: list[pa.Table]) -> dict[str, Any]:
    eng = Engine(RULES)
    t0 = time.perf_counter()
    matches = 0
    for t in tables:
        matches += len(eng.process(t).matches)
    seconds = time.perf_counter() - t0
    events = sum(t.num_rows for t in tables)
    return {"seconds": seconds, "events_per_s": events / seconds, "matches_before_finish": matches}


def spark_run(spark: Any, folder: Path, work: Path, partitions: int, buckets: int) -> dict[str, Any]:
    from spark_udf.api import SparkRunConfig, apply_rules

    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    frame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(folder))
    result = apply_rules(frame, RULES, SparkRunConfig(buckets=buckets))
    t0 = time.perf_counter()
    q = result.write_stream(str(work / "out"), str(work / "ck"), format="parquet")
    q.awaitTermination()
    wall = time.perf_counter() - t0
    prog = q.recentProgress
    data = [p for p in prog if p["numInputRows"]]
    steady = data[1:] or data
    steady_s = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
    steady_events = sum(p["numInputRows"] for p in steady)
    events = sum(p["numInputRows"] for p in prog)
    matches = sum(p["observedMetrics"]["cep"]["matches"] for p in prog if p.get("observedMetrics"))
    last = prog[-1]["stateOperators"][0]
    state_bytes = int(last["customMetrics"].get("stateOnCurrentVersionSizeBytes", last["memoryUsedBytes"]))
    blob_bytes = spark.read.format("statestore").load(str(work / "ck")).selectExpr(
        "sum(length(value.groupState.state)) AS b").collect()[0].b if _has_state_reader(spark) else None
    return {
        "events": events,
        "micro_batches": len(prog),
        "wall_seconds": wall,
        "events_per_s_wall": events / wall,
        "events_per_s": steady_events / steady_s,
        "batch_ms_median": statistics.median(p["durationMs"]["triggerExecution"] for p in steady),
        "first_batch_ms": data[0]["durationMs"]["triggerExecution"] if data else None,
        "matches": matches,
        "state_bytes": state_bytes,
        "state_blob_bytes": blob_bytes,
    }


def _has_state_reader(spark: Any) -> bool:
    try:
        spark.read.format("statestore")
        return True
    except Exception:  # noqa: BLE001
        return False


def trivial_run(spark: Any, folder: Path, work: Path, partitions: int, buckets: int) -> dict[str, Any]:
    """Spark's own ceiling: the same grouping and state, a function that only counts rows."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    x = (
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(folder))
        .withColumn("t", F.timestamp_millis("ts")).withWatermark("t", "0 seconds")
        .withColumn("b", F.pmod(F.xxhash64("k"), F.lit(buckets)).cast("int"))
    )

    def count(key, pdfs, state):
        n = sum(len(p) for p in pdfs)
        state.update((b"x", 1))
        yield pd.DataFrame({"b": [key[0]], "n": [n]})

    q = (
        x.groupBy("b").applyInPandasWithState(count, "b int, n long", "state binary, version int", "append",
                                              GroupStateTimeout.EventTimeTimeout)
        .writeStream.format("noop").option("checkpointLocation", str(work / "ck")).trigger(availableNow=True).start()
    )
    q.awaitTermination()
    data = [p for p in q.recentProgress if p["numInputRows"]][1:]
    seconds = sum(p["durationMs"]["triggerExecution"] for p in data) / 1000
    return {"events_per_s": sum(p["numInputRows"] for p in data) / seconds}


def latency_run(spark: Any, root: Path, keys: int, files: int, per_file: int) -> dict[str, Any]:
    folder = root / "lat-in"
    write_files(folder, files * per_file, keys, per_file, seed=7)
    r = spark_run(spark, folder, root / "lat", 2, 64)
    return {"keys": keys, "events_per_batch": per_file, "batch_ms_median": r["batch_ms_median"],
            "micro_batches": r["micro_batches"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--per-file", type=int, default=500_000, help="events per micro-batch")
    ap.add_argument("--keys", type=int, nargs="*", default=[10, 10_000, 1_000_000])
    ap.add_argument("--partitions", type=int, nargs="*", default=[2, 8])
    ap.add_argument("--buckets", type=int, default=64)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--out", default=str(RESULTS / "spark.json"))
    args = ap.parse_args()
    if args.quick:
        args.events, args.per_file, args.keys, args.partitions = 200_000, 50_000, [10, 10_000], [2]

    from cep.operator import PatternOperator
    from spark_udf.session import local_session

    spark = local_session(args.master, 2)
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    runs = []
    try:
        # warm-up: start the Python workers once, outside every measurement
        write_files(root / "warm", 20_000, 100, 10_000, seed=0)
        spark_run(spark, root / "warm", root / "warm-q", 2, args.buckets)
        for keys in args.keys:
            folder = root / f"in-{keys}"
            tables = write_files(folder, args.events, keys, args.per_file, seed=keys)
            base = embedded(tables)
            ceiling = trivial_run(spark, folder, root / f"t-{keys}", 2, args.buckets)["events_per_s"]
            print(f"keys {keys:>9,}: Spark's ceiling (a stateful function that only counts) {ceiling:,.0f} ev/s",
                  flush=True)
            for parts in args.partitions:
                work = root / f"q-{keys}-{parts}"
                r = spark_run(spark, folder, work, parts, args.buckets)
                r.update(keys=keys, shuffle_partitions=parts, buckets=args.buckets,
                         embedded_events_per_s=base["events_per_s"],
                         embedded_matches=base["matches_before_finish"],
                         same_matches_as_embedded=r["matches"] == base["matches_before_finish"],
                         spark_counting_only_events_per_s=ceiling,
                         ratio_to_counting_only=r["events_per_s"] / ceiling,
                         ratio_to_embedded=r["events_per_s"] / base["events_per_s"],
                         state_bytes_per_key=r["state_bytes"] / keys,
                         state_blob_bytes_per_key=(r["state_blob_bytes"] / keys) if r["state_blob_bytes"] else None)
                runs.append(r)
                print(f"keys {keys:>9,} partitions {parts}: spark {r['events_per_s']:>10,.0f} ev/s "
                      f"(wall {r['events_per_s_wall']:,.0f}), embedded {base['events_per_s']:>10,.0f} ev/s, "
                      f"batch {r['batch_ms_median']:,.0f} ms, state {r['state_bytes'] / keys:,.0f} B/key",
                      flush=True)
                shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(folder, ignore_errors=True)
        latency = latency_run(spark, root, 10_000, 6 if not args.quick else 3, 1_000)
        print(f"latency: median micro-batch {latency['batch_ms_median']:,.0f} ms for 1,000 events", flush=True)
        # state of one idle key, measured on the operator's own snapshot
        op = PatternOperator.from_rule(RULES.rules[0])
        empty = len(op.snapshot())
        n, k = 200_000, 10_000
        rng = np.random.default_rng(1)
        op.ingest(pa.table({"k": rng.integers(0, k, n), "ts": np.arange(n), "price": 100 + rng.normal(0, 1, n)}), 0)
        op.advance_to(n + 1)
        idle = (len(op.snapshot()) - empty) / op.key_count()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "master": args.master,
        "date": time.strftime("%Y-%m-%d"),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "rule": RULES.rules[0].source.strip(),
        "events": args.events,
        "events_per_micro_batch": args.per_file,
        "runs": runs,
        "latency": latency,
        "idle_key_state_bytes": idle,
        "target": {"events_per_s_10k_keys": 200_000, "idle_key_state_bytes": 200},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"idle key state: {idle:.0f} B; wrote {args.out}")


if __name__ == "__main__":
    main()
