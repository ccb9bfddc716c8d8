"""Two checkouts side by side on the many-rules workload: fresh processes, alternating, same session.

    python benchmarks/ab_many_rules.py --base ../main --rounds 2 --out benchmarks/results/x.json

On a shared machine a figure alone says little: this runs each checkout's own
``benchmarks/bench_many_rules.py`` (``--sizes``, ``--repeat 2 --no-old``, and again with
``--only-batch-dfa``) in fresh processes, base then branch, ``--rounds`` times, and reports each
figure with the best of each side and their ratio (base CPU / branch CPU: above 1, the branch is
faster), with the load average at each round. The first run of a fresh checkout pays numba's
compilation, so one untimed warm-up run of each side goes first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _run(repo: Path, sizes: str, only_dfa: bool) -> dict[str, Any]:
    """One run of ``repo``'s bench_many_rules.py; its points by number of rules run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, str(repo / "benchmarks" / "bench_many_rules.py"), "--sizes", sizes, "--repeat", "2",
               "--no-old", "--out", str(out)] + (["--only-batch-dfa"] if only_dfa else [])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=repo)
        got = json.loads(out.read_text())
    return {str(p["rules"]): {"seconds_cpu": p["seconds_cpu"], "events_per_cpu_s": p["events_per_cpu_s"],
                              "complex_events": p["complex_events"]} for p in got["points"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="the checkout to compare with (e.g. main)")
    ap.add_argument("--branch", type=Path, default=REPO)
    ap.add_argument("--sizes", default="1,50,200")
    ap.add_argument("--dfa-sizes", default="50,200", help="sizes run again with --only-batch-dfa ('' for none)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--what", default="", help="a line saying what the branch changes")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sides = {"base": args.base.resolve(), "branch": args.branch.resolve()}
    for repo in sides.values():  # (numba's compilation cache of a fresh checkout: not timed)
        _run(repo, "1", False)
    runs = []
    for rnd in range(1, args.rounds + 1):
        for side, repo in sides.items():
            load = os.getloadavg()[0]
            row: dict[str, Any] = {"round": rnd, "side": side, "load_average": round(load, 1),
                                   "all_rules": _run(repo, args.sizes, False)}
            if args.dfa_sizes:
                row["only_batch_dfa"] = _run(repo, args.dfa_sizes, True)
            runs.append(row)
            print(json.dumps(row), flush=True)
    best: dict[str, Any] = {}
    for kind in ("all_rules", "only_batch_dfa"):
        for side in sides:
            for r in runs:
                if r["side"] != side or kind not in r:
                    continue
                for n, p in r[kind].items():
                    slot = best.setdefault(kind, {}).setdefault(n, {})
                    if side not in slot or p["seconds_cpu"] < slot[side]["seconds_cpu"]:
                        slot[side] = p
    for kind, by_n in best.items():
        for n, slot in by_n.items():
            b, x = slot["base"], slot["branch"]
            if b["complex_events"] != x["complex_events"]:
                raise SystemExit(f"{kind} {n} rules: {b['complex_events']} complex events on base, "
                                 f"{x['complex_events']} on the branch: the rows differ")
            slot["speedup"] = round(b["seconds_cpu"] / x["seconds_cpu"], 2)
            print(f"{kind:15s} {n:>4} rules: base {b['events_per_cpu_s']:>9,} branch {x['events_per_cpu_s']:>9,} "
                  f"events/cpu-s (x{slot['speedup']})")
    result = {"benchmark": "many_rules_ab", "date": time.strftime("%Y-%m-%d"), "what": args.what,
              "base": str(sides["base"]), "branch": str(sides["branch"]), "machine": {"cpus": os.cpu_count()},
              "rounds": args.rounds, "runs": runs, "best": best}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
