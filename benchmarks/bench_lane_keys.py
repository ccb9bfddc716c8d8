"""The lane path over many keys of a few rows each: this tree against another commit, alternating, per CPU-second.

    python benchmarks/bench_lane_keys.py --against main            # 3 rounds, scale 0.5
    python benchmarks/bench_lane_keys.py --against c742efd --rounds 2 --only xetra_v_shape

Cases (each runs in a fresh process per side and round, the two sides alternating so that a busy
machine weighs on both alike; best CPU seconds of the hot loop, ``time.process_time``):

- ``xetra_v_shape`` and ``sp500_v_shape``: ``bench_flink_shapes.py``'s cases (``rules/trading.yaml``'s
  ``v_shape``, ``PATTERN (START_ROW DOWN{2,} UP+)``) at ``--scale`` of their events, in Arrow batches
  of 8,192 through one ``Engine``. Xetra's 2,500 instruments give each key a few rows per batch,
  so the per-key cost of the compiled lane path is most of the time there.
- ``many_rules_lanes``: the rules of ``bench_many_rules.py``'s ``rule_set(200)`` that take the lane
  path (the 11 V-shapes ``S D{k,} U+``), together in one ``Engine`` over its batches of 8,192.

Both sides must give the same rows (a digest of the output rows). Writes
``benchmarks/results/lane_keys.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
CASES = ("xetra_v_shape", "sp500_v_shape", "many_rules_lanes")


def _digest(rows: list[dict]) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()


def worker(case: str, scale: float, repeats: int) -> dict[str, Any]:
    """Run ``case`` with the engine on ``sys.path`` (the tree under test): best CPU seconds, rows."""
    sys.path.insert(1, str(REPO / "benchmarks"))  # (the case definitions: this tree's)
    from cep.engine import Engine
    from patterns.rules import parse_rule_text

    if case == "many_rules_lanes":
        path = list(sys.path)
        import bench_many_rules as M

        sys.path[:] = path  # (it puts this tree first: the engine stays the tree's under test)

        rules = M.rule_set(200)
        batches, _ = M.load_batches(8192)
        probe = Engine(rules)
        rules = [r for r in rules if getattr(getattr(probe.operators[r.name], "automaton", None), "lanes", None)
                 is not None]
        events = sum(b.n for b in batches)
    else:
        import bench_flink_shapes as F

        c = next(x for x in F.cases() if x.name == case)
        table = c.table(scale * c.scale)
        batches = table.to_batches(max_chunksize=8192)
        rules = [parse_rule_text(s, f"r{i}") for i, s in enumerate(c.ours)]
        events = table.num_rows

    def run() -> list[dict]:
        eng = Engine(rules)
        out: list[dict] = []
        for b in batches:
            out += eng.process(b).matches
        out += eng.finish().matches
        return out

    run()  # (warm-up: numba's loops load once, as in a long-running engine)
    best = float("inf")
    for _ in range(repeats):
        c0 = time.process_time()
        rows = run()
        best = min(best, time.process_time() - c0)
    return {"cpu_seconds": best, "events": events, "rules": len(rules), "matches": len(rows), "rows_sha256": _digest(rows)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default="main", help="the commit to compare with (git rev)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per case")
    ap.add_argument("--repeats", type=int, default=1, help="runs per process (best CPU time)")
    ap.add_argument("--scale", type=float, default=0.5, help="fraction of the V-shape cases' events")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--out", type=Path, default=RESULTS / "lane_keys.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        sys.path.insert(0, args.tree)
        print(json.dumps(worker(args.worker, args.scale, args.repeats)))
        return 0
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.against], check=True,
                         capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    old_tree = tempfile.mkdtemp(prefix="lane_keys_")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", old_tree], input=archive, check=True)
    sides = {"before": old_tree, "after": str(REPO)}
    chosen = [c for c in CASES if not args.only or c in args.only.split(",")]
    res: dict[str, Any] = {
        "benchmark": "lane_keys", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_at_start": os.getloadavg()},
        "before": rev, "after": f"{head} (working tree)", "rounds": args.rounds, "scale": args.scale, "cases": [],
    }
    for case in chosen:
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for r in range(args.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for side in order:
                env = dict(os.environ, PYTHONPATH=sides[side])
                out = subprocess.run([sys.executable, __file__, "--worker", case, "--tree", sides[side],
                                      "--scale", str(args.scale), "--repeats", str(args.repeats)],
                                     check=True, capture_output=True, text=True, env=env, cwd=sides[side])
                got = json.loads(out.stdout.strip().splitlines()[-1])
                runs[side].append(got)
                print(case, side, f"{got['cpu_seconds']:.3f} s", got["matches"], file=sys.stderr)
        entry: dict[str, Any] = {"case": case, "events": runs["after"][0]["events"], "rules": runs["after"][0]["rules"]}
        for side in ("before", "after"):
            cpu = [x["cpu_seconds"] for x in runs[side]]
            entry[side] = {"cpu_seconds": cpu, "best_events_per_cpu_s": entry["events"] / min(cpu),
                           "matches": runs[side][0]["matches"]}
        entry["ratio_after_over_before"] = entry["after"]["best_events_per_cpu_s"] / entry["before"]["best_events_per_cpu_s"]
        entry["same_rows"] = len({x["rows_sha256"] for x in runs["before"] + runs["after"]}) == 1
        res["cases"].append(entry)
        print(f"{case}: {entry['before']['best_events_per_cpu_s']:,.0f} -> {entry['after']['best_events_per_cpu_s']:,.0f}"
              f" events/cpu-s ({entry['ratio_after_over_before']:.2f}x), same rows: {entry['same_rows']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    return 0 if all(c["same_rows"] for c in res["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
