"""Sketch benchmark: batched update rates, memory, and ratios to reference packages.

Run ``python benchmarks/bench_sketches.py`` (add ``--quick`` for a smoke run). Writes
``benchmarks/results/sketches.json`` and ``benchmarks/results/sketches.png`` (update rate
against batch size).

Everything is seeded and runs on one core (numpy's elementwise kernels are single-threaded).
Only the update or lookup loop is timed, best of a few repeats, with the input already built:
numpy int64 arrays for integers, and for short strings both a Python ``list[str]`` (what most
callers hold; its conversion to Arrow is inside the timed loop) and a pyarrow array.
The baselines run in the same process on a prefix of the same data, one Python call per item,
as their APIs require: ``datasketch.HyperLogLog`` (fed pre-encoded bytes, encoding untimed),
``hyperloglog.HyperLogLog`` (also its ``add_bulk``, which still hashes item by item), the Apache ``datasketches`` binding when installed, and the exact
``set`` / ``collections.Counter``. Memory is the growth of traced allocations (tracemalloc)
while a structure is built and fed, in a separate untimed pass.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sketches import BloomFilter, CountMinSketch, HyperLogLog, TopK  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
SEED = 20240601

TARGETS = {
    "hll_update_ints": 50e6,
    "hll_update_short_strings_list": 5e6,
    "bloom_insert_ints": 15e6,
    "bloom_lookup_ints": 15e6,
}


# ------------------------------------------------------------------ workloads


def make_workloads(n_ints: int, n_strings: int) -> dict[str, Any]:
    rng = np.random.default_rng(SEED)
    ints = rng.integers(0, 2**63 - 1, n_ints, dtype=np.int64)
    absent = rng.integers(0, 2**63 - 1, n_ints, dtype=np.int64)
    ids = rng.integers(0, 10 * n_strings, n_strings)
    strings = [f"user{i}" for i in ids.tolist()]  # 5 to 12 ASCII characters
    zipf = (rng.zipf(1.2, n_ints) % 1_000_000).astype(np.int64)
    return {
        "ints": ints,
        "absent": absent,
        "strings": strings,
        "strings_arrow": pa.array(strings),
        "zipf": zipf,
    }


# ------------------------------------------------------------------ timing


def best_seconds(run: Callable[[], None], setup: Callable[[], Any], repeats: int) -> float:
    """Best wall time of run() over repeats, each after an untimed setup()."""
    best = float("inf")
    for _ in range(repeats):
        setup()
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def time_batches(
    make: Callable[[], Any],
    act: Callable[[Any, Any], Any],
    prepare: Callable[[Any], None] | None,
    batches: list[Any],
    repeats: int,
) -> float:
    """Best time to apply act to every batch, on a fresh (and prepared) sketch each repeat."""
    holder: dict[str, Any] = {}

    def setup() -> None:
        holder["s"] = make()
        if prepare is not None:
            prepare(holder["s"])

    def run() -> None:
        sketch = holder["s"]
        for batch in batches:
            act(sketch, batch)

    return best_seconds(run, setup, repeats)


def sweep(
    name: str,
    make: Callable[[], Any],
    act: Callable[[Any, Any], Any],
    data: Any,
    sizes: list[int],
    max_calls: int,
    repeats: int,
    prepare: Callable[[Any], None] | None = None,
) -> list[dict[str, float]]:
    """Items/s of act(sketch, batch) over consecutive batches of each size."""
    rows = []
    for size in sizes:
        total = min(len(data), size * max_calls)
        total -= total % size
        if total == 0:
            continue
        batches = [data[i : i + size] for i in range(0, total, size)]
        seconds = time_batches(make, act, prepare, batches, repeats)
        rows.append({"batch": size, "items": total, "seconds": seconds, "rate": total / seconds})
        print(f"  {name:<28} batch {size:>10,}: {total / seconds / 1e6:9.2f} M items/s", flush=True)
    return rows


def per_item_rate(
    make: Callable[[], Any], feed: Callable[[Any], None], items: int, repeats: int
) -> float:
    holder: dict[str, Any] = {}

    def setup() -> None:
        holder["s"] = make()

    return items / best_seconds(lambda: feed(holder["s"]), setup, repeats)


def traced_bytes(build: Callable[[], Any]) -> int:
    """Growth of traced allocations while build() runs and its result is alive."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    keep = build()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del keep
    return after - before


def per_value_rates(w: dict[str, Any], calls: int, repeats: int) -> dict[str, float]:
    """Calls/s of update/contains/estimate with one Python int or str per call."""
    ints = w["ints"][:calls].tolist()
    strings = w["strings"][:calls]
    warm = w["ints"][: 1 << 16]

    def dense_hll() -> HyperLogLog:
        hll = HyperLogLog(p=14)
        hll.update(warm)
        return hll

    cases: dict[str, tuple[Callable[[], Any], Callable[[Any, Any], Any], list[Any]]] = {
        "hll_update_int_sparse": (lambda: HyperLogLog(p=14), lambda s, v: s.update(v), ints),
        "hll_update_int_dense": (dense_hll, lambda s, v: s.update(v), ints),
        "hll_update_str_dense": (dense_hll, lambda s, v: s.update(v), strings),
        "bloom_update_int": (lambda: BloomFilter(1_000_000, 0.01), lambda s, v: s.update(v), ints),
        "bloom_contains_int": (
            lambda: BloomFilter(1_000_000, 0.01),
            lambda s, v: s.contains(v),
            ints,
        ),
        "countmin_update_int": (
            lambda: CountMinSketch.from_error(0.001, 0.01),
            lambda s, v: s.update(v),
            ints,
        ),
        "countmin_estimate_int": (
            lambda: CountMinSketch.from_error(0.001, 0.01),
            lambda s, v: s.estimate(v),
            ints,
        ),
        "topk_update_int": (lambda: TopK(256), lambda s, v: s.update(v), ints),
    }
    out = {}
    for name, (make, act, values) in cases.items():
        out[name] = len(values) / time_batches(make, act, None, values, repeats)
    return out


# ------------------------------------------------------------------ baselines


def baselines(
    w: dict[str, Any], n_base: int, repeats: int
) -> tuple[dict[str, float], dict[str, Any]]:
    ints = w["ints"][:n_base].tolist()
    ints_bytes = [v.to_bytes(8, "little", signed=True) for v in ints]
    strings = w["strings"][:n_base]
    strings_bytes = [s.encode() for s in strings]
    rates: dict[str, float] = {}
    extra: dict[str, Any] = {}

    import datasketch
    import hyperloglog

    def feed_datasketch(data: list[bytes]) -> Callable[[Any], None]:
        def feed(h: Any) -> None:
            update = h.update
            for v in data:
                update(v)

        return feed

    def feed_hyperloglog(data: list[Any]) -> Callable[[Any], None]:
        def feed(h: Any) -> None:
            add = h.add
            for v in data:
                add(v)

        return feed

    rates["datasketch_hll_ints"] = per_item_rate(
        lambda: datasketch.HyperLogLog(p=14), feed_datasketch(ints_bytes), n_base, repeats
    )
    rates["datasketch_hll_strings"] = per_item_rate(
        lambda: datasketch.HyperLogLog(p=14), feed_datasketch(strings_bytes), n_base, repeats
    )
    # hyperloglog.HyperLogLog(0.01) picks p=14, 2**14 registers.
    rates["hyperloglog_hll_ints"] = per_item_rate(
        lambda: hyperloglog.HyperLogLog(0.01), feed_hyperloglog(ints), n_base, repeats
    )
    rates["hyperloglog_hll_strings"] = per_item_rate(
        lambda: hyperloglog.HyperLogLog(0.01), feed_hyperloglog(strings), n_base, repeats
    )
    rates["hyperloglog_add_bulk_ints"] = per_item_rate(
        lambda: hyperloglog.HyperLogLog(0.01), lambda h: h.add_bulk(ints), n_base, repeats
    )
    try:
        import datasketches as apache
    except ImportError:
        extra["apache_datasketches"] = "not installed"
    else:

        def feed_apache(data: list[Any]) -> Callable[[Any], None]:
            def feed(h: Any) -> None:
                update = h.update
                for v in data:
                    update(v)

            return feed

        def make_apache() -> Any:
            return apache.hll_sketch(14, apache.tgt_hll_type.HLL_8)

        rates["apache_datasketches_hll_ints"] = per_item_rate(
            make_apache, feed_apache(ints), n_base, repeats
        )
        rates["apache_datasketches_hll_strings"] = per_item_rate(
            make_apache, feed_apache(strings), n_base, repeats
        )
    # Exact structures, fed whole lists (their fastest path).
    big = w["ints"].tolist()
    rates["set_update_ints"] = len(big) / best_seconds(
        lambda: set().update(big), lambda: None, repeats
    )
    probe = set(big)
    absent = w["absent"].tolist()
    rates["set_lookup_ints"] = len(absent) / best_seconds(
        lambda: [v in probe for v in absent], lambda: None, repeats
    )
    try:
        import rbloom  # a Rust Bloom filter: bulk update from a Python iterable, lookups one by one
    except ImportError:
        extra["rbloom"] = "not installed"
    else:
        rates["rbloom_insert_ints"] = len(big) / best_seconds(
            lambda: rbloom.Bloom(len(big), 0.01).update(big), lambda: None, repeats
        )
        rb = rbloom.Bloom(len(big), 0.01)
        rb.update(big)
        rates["rbloom_lookup_ints"] = len(absent) / best_seconds(
            lambda: [v in rb for v in absent], lambda: None, repeats
        )
    zipf = w["zipf"].tolist()
    rates["counter_update_ints"] = len(zipf) / best_seconds(
        lambda: Counter(zipf), lambda: None, repeats
    )
    rates["set_update_short_strings"] = len(w["strings"]) / best_seconds(
        lambda: set(w["strings"]), lambda: None, repeats
    )
    return rates, extra


# ------------------------------------------------------------------ accuracy and memory


def accuracy_and_memory(w: dict[str, Any], n_base: int) -> tuple[dict[str, Any], dict[str, int]]:
    import datasketch
    import hyperloglog

    ints = w["ints"]
    exact = len(np.unique(ints))
    ours = HyperLogLog(p=14)
    ours.update(ints)
    accuracy: dict[str, Any] = {
        "items": len(ints),
        "exact_distinct": exact,
        "ours_hll_p14_relative_error": ours.estimate() / exact - 1,
        "standard_error_p14": ours.standard_error,
    }
    base = w["ints"][:n_base].tolist()
    ds = datasketch.HyperLogLog(p=14)
    for v in base:
        ds.update(v.to_bytes(8, "little", signed=True))
    hl = hyperloglog.HyperLogLog(0.01)
    for v in base:
        hl.add(v)
    exact_base = len(set(base))
    accuracy["baseline_items"] = len(base)
    accuracy["datasketch_relative_error"] = ds.count() / exact_base - 1
    accuracy["hyperloglog_relative_error"] = len(hl) / exact_base - 1
    small = HyperLogLog(p=14)
    small.update(w["ints"][:n_base])
    accuracy["ours_relative_error_on_baseline_items"] = small.estimate() / exact_base - 1

    n_mem = min(len(ints), 1_000_000)
    data = ints[:n_mem]
    data_list = data.tolist()
    memory = {
        "items_fed": n_mem,
        "ours_hll_p14": traced_bytes(lambda: _fed(HyperLogLog(p=14), data)),
        "ours_hll_p14_nbytes": _fed(HyperLogLog(p=14), data).nbytes,
        "datasketch_hll_p14": traced_bytes(
            lambda: _fed_each(datasketch.HyperLogLog(p=14), data_list[:n_base], True)
        ),
        "hyperloglog_hll_p14": traced_bytes(
            lambda: _fed_each(hyperloglog.HyperLogLog(0.01), data_list[:n_base], False)
        ),
        "ours_bloom_1M_1pct": traced_bytes(lambda: _fed(BloomFilter(1_000_000, 0.01), data)),
        "ours_bloom_1M_1pct_nbytes": BloomFilter(1_000_000, 0.01).nbytes,
        "ours_countmin_eps1e-3_delta1e-2": CountMinSketch.from_error(0.001, 0.01).nbytes,
        "ours_topk_256": traced_bytes(lambda: _fed(TopK(256), w["zipf"][:n_mem])),
        "set_of_items": traced_bytes(lambda: set(data_list)),
        "counter_of_zipf_items": traced_bytes(lambda: Counter(w["zipf"][:n_mem].tolist())),
    }
    return accuracy, memory


def _fed(sketch: Any, data: Any) -> Any:
    sketch.update(data)
    return sketch


def _fed_each(sketch: Any, data: list[int], as_bytes: bool) -> Any:
    for v in data:
        if as_bytes:
            sketch.update(v.to_bytes(8, "little", signed=True))
        else:
            sketch.add(v)
    return sketch


# ------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    args = parser.parse_args()
    quick = args.quick
    n_ints = 1_000_000 if quick else 10_000_000
    n_strings = 200_000 if quick else 1_000_000
    n_base = 20_000 if quick else 200_000
    repeats = 1 if quick else 3
    sizes = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000] + ([] if quick else [10_000_000])
    max_calls = 300 if quick else 3_000

    w = make_workloads(n_ints, n_strings)
    print(f"workloads: {n_ints:,} ints, {n_strings:,} short strings; baselines on {n_base:,}")

    bloom_capacity = 1_000_000

    def filled_bloom(b: BloomFilter) -> None:
        b.update(w["ints"][:bloom_capacity])

    sweeps: dict[str, list[dict[str, float]]] = {}
    print("sweeps (batch size -> items/s):")
    sweeps["hll_update_ints"] = sweep(
        "hll update ints",
        lambda: HyperLogLog(p=14),
        lambda s, b: s.update(b),
        w["ints"],
        sizes,
        max_calls,
        repeats,
    )
    sweeps["hll_update_short_strings_list"] = sweep(
        "hll update strings (list)",
        lambda: HyperLogLog(p=14),
        lambda s, b: s.update(b),
        w["strings"],
        sizes,
        max_calls,
        repeats,
    )
    sweeps["hll_update_short_strings_arrow"] = sweep(
        "hll update strings (arrow)",
        lambda: HyperLogLog(p=14),
        lambda s, b: s.update(b),
        w["strings_arrow"],
        sizes,
        max_calls,
        repeats,
    )
    sweeps["bloom_insert_ints"] = sweep(
        "bloom insert ints",
        lambda: BloomFilter(bloom_capacity, 0.01),
        lambda s, b: s.update(b),
        w["ints"][:bloom_capacity],
        sizes,
        max_calls,
        repeats,
    )
    sweeps["bloom_lookup_ints"] = sweep(
        "bloom lookup ints (50% hits)",
        lambda: BloomFilter(bloom_capacity, 0.01),
        lambda s, b: s.contains(b),
        np.where(np.arange(n_ints) % 2 == 0, w["ints"], w["absent"])[: max(n_ints, 1)],
        sizes,
        max_calls,
        repeats,
        prepare=filled_bloom,
    )
    sweeps["countmin_update_ints"] = sweep(
        "count-min update zipf ints",
        lambda: CountMinSketch.from_error(0.001, 0.01),
        lambda s, b: s.update(b),
        w["zipf"],
        sizes,
        max_calls,
        repeats,
    )
    sweeps["topk_update_ints"] = sweep(
        "topk update zipf ints",
        lambda: TopK(256),
        lambda s, b: s.update(b),
        w["zipf"],
        sizes,
        max_calls,
        repeats,
    )

    print("one Python value per call (the per-event path, plain-Python hashing):")
    scalar_rates = per_value_rates(w, 2_000 if quick else 20_000, repeats)
    for name, rate in scalar_rates.items():
        print(f"  {name:<34} {rate / 1e3:9.1f} k calls/s ({1e6 / rate:.1f} us a call)")

    rates = {name: max(r["rate"] for r in rows) for name, rows in sweeps.items()}
    largest = {name: rows[-1]["rate"] for name, rows in sweeps.items()}

    print("baselines (one Python call per item):", flush=True)
    base, extra = baselines(w, n_base, repeats)
    for name, rate in base.items():
        print(f"  {name:<34} {rate / 1e6:9.3f} M items/s")
    ratios = {
        "hll_ints_vs_datasketch": largest["hll_update_ints"] / base["datasketch_hll_ints"],
        "hll_ints_vs_hyperloglog": largest["hll_update_ints"] / base["hyperloglog_hll_ints"],
        "hll_strings_list_vs_datasketch": largest["hll_update_short_strings_list"]
        / base["datasketch_hll_strings"],
        "hll_strings_list_vs_hyperloglog": largest["hll_update_short_strings_list"]
        / base["hyperloglog_hll_strings"],
        "hll_ints_vs_exact_set": largest["hll_update_ints"] / base["set_update_ints"],
        "bloom_insert_vs_exact_set": largest["bloom_insert_ints"] / base["set_update_ints"],
        "bloom_lookup_vs_exact_set": largest["bloom_lookup_ints"] / base["set_lookup_ints"],
        "countmin_vs_counter": largest["countmin_update_ints"] / base["counter_update_ints"],
        "topk_vs_counter": largest["topk_update_ints"] / base["counter_update_ints"],
    }
    if "rbloom_insert_ints" in base:
        ratios["bloom_insert_vs_rbloom"] = largest["bloom_insert_ints"] / base["rbloom_insert_ints"]
        ratios["bloom_lookup_vs_rbloom"] = largest["bloom_lookup_ints"] / base["rbloom_lookup_ints"]
    if "apache_datasketches_hll_ints" in base:
        ratios["hll_ints_vs_apache_datasketches"] = (
            largest["hll_update_ints"] / base["apache_datasketches_hll_ints"]
        )
    print("ratios (ours at the largest batch / baseline):")
    for name, ratio in ratios.items():
        print(f"  {name:<34} {ratio:9.1f}x")

    accuracy, memory = accuracy_and_memory(w, n_base)
    print("accuracy:", json.dumps(accuracy, indent=None))
    print("memory bytes:", json.dumps(memory, indent=None))

    targets = {
        name: {"target": target, "measured": largest[name], "met": largest[name] >= target}
        for name, target in TARGETS.items()
    }
    for name, t in targets.items():
        print(
            f"target {name:<32} {t['measured'] / 1e6:8.2f} M/s vs {t['target'] / 1e6:.0f} M/s: "
            f"{'met' if t['met'] else 'MISSED'}"
        )

    import numpy
    import pyarrow

    result = {
        "meta": {
            "quick": quick,
            "seed": SEED,
            "python": platform.python_version(),
            "numpy": numpy.__version__,
            "pyarrow": pyarrow.__version__,
            "machine": platform.machine(),
            "processor": platform.processor(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "n_ints": n_ints,
            "n_strings": n_strings,
            "n_baseline": n_base,
        },
        "sweeps": sweeps,
        "best_rates": rates,
        "rates_at_largest_batch": largest,
        "per_value_calls_per_second": scalar_rates,
        "baselines": base,
        "baseline_notes": extra,
        "ratios": ratios,
        "accuracy": accuracy,
        "memory_bytes": memory,
        "targets": targets,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sketches.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(sweeps, base, RESULTS / "sketches.png")
    print(f"wrote {RESULTS / 'sketches.json'} and {RESULTS / 'sketches.png'}")


def plot(sweeps: dict[str, list[dict[str, float]]], base: dict[str, float], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot written (pip install matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for name, rows in sweeps.items():
        ax.plot([r["batch"] for r in rows], [r["rate"] for r in rows], marker="o", label=name)
    for name, style in (("datasketch_hll_ints", ":"), ("hyperloglog_hll_ints", "--")):
        if name in base:
            ax.axhline(base[name], color="grey", linestyle=style, label=f"{name} (per item)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size (items per update call)")
    ax.set_ylabel("items per second (one core)")
    ax.set_title("sketches: batched update rate")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
