"""Hostile wildcards: a 10,000-letter token against a 50-star pattern, timed against a one-star baseline.

Run ``python benchmarks/bench_wildcards.py``. Writes ``benchmarks/results/wildcards.json``.

``patterns.glob.Glob`` finds the parts between stars in order, each at its leftmost place, so a
pattern with many stars costs about one pass over the text per part; a backtracking regular
expression needed minutes for ``a*a*...*c`` against 60 letters. Each case is the best of
``--repeat`` timings of ``fullmatch`` (the hot loop only: the pattern is compiled once), and its
ratio to the baseline ``a*c`` against the same token, measured in the same run.
tests/reliability/test_wildcards.py keeps a loose 1 s guard against backtracking; the figure lives here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from patterns.glob import Glob  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
TOKEN = "a" * 10_000

#: name -> (pattern, text, whether it matches)
CASES: dict[str, tuple[str, str, bool]] = {
    "baseline a*c, no match": ("a*c", TOKEN, False),
    "50 stars (a*)x50 c, no match": ("a*" * 50 + "c", TOKEN, False),
    "50 stars (a*)x50 c, match": ("a*" * 50 + "c", TOKEN + "c", True),
    "50 stars (*a?a*)x25 c, no match": ("*a?a*" * 25 + "c", TOKEN, False),
}


def best_seconds(glob: Glob, text: str, want: bool, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        got = glob.fullmatch(text) is not None
        best = min(best, time.perf_counter() - start)
        if got != want:
            raise AssertionError(f"{glob!r} on {len(text):,} letters: expected {want}, got {got}")
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=20, help="timings per case; the best counts (default 20)")
    args = ap.parse_args()
    rows = []
    baseline = None
    for name, (pattern, text, want) in CASES.items():
        seconds = best_seconds(Glob(pattern), text, want, args.repeat)
        baseline = baseline if baseline is not None else seconds
        rows.append({"case": name, "pattern_stars": pattern.count("*"), "text_letters": len(text),
                     "matches": want, "seconds": round(seconds, 6),
                     "ratio_to_baseline": round(seconds / baseline, 1) if baseline else None})
        print(f"{name:<34} {seconds * 1e6:9.1f} us  x{rows[-1]['ratio_to_baseline']} of the baseline")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "wildcards.json"
    out.write_text(json.dumps({"python": sys.version.split()[0], "repeat": args.repeat, "cases": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
