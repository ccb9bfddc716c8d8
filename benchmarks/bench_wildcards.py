"""Hostile wildcards: a 10,000-letter token against a 50-star pattern, timed against a one-star baseline.

Run ``python benchmarks/bench_wildcards.py``. Writes ``benchmarks/results/wildcards.json``.

``patterns.glob.Glob`` finds the parts between stars in order, each at its leftmost place, so a
pattern with many stars costs about one pass over the text per part; a backtracking regular
expression needed minutes for ``a*a*...*c`` against 60 letters. Each case is the best of
``--repeat`` timings of ``fullmatch`` (the hot loop only: the pattern is compiled once), and its
ratio to the baseline ``a*c`` against the same text (matching or not, as the case), measured in
the same run.
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

#: name -> (pattern, text, whether it matches, the baseline case it is compared with)
CASES: dict[str, tuple[str, str, bool, str]] = {
    "baseline a*c, no match": ("a*c", TOKEN, False, "baseline a*c, no match"),
    "baseline a*c, match": ("a*c", TOKEN + "c", True, "baseline a*c, match"),
    "50 stars (a*)x50 c, no match": ("a*" * 50 + "c", TOKEN, False, "baseline a*c, no match"),
    "50 stars (a*)x50 c, match": ("a*" * 50 + "c", TOKEN + "c", True, "baseline a*c, match"),
    "50 stars (*a?a*)x25 c, no match": ("*a?a*" * 25 + "c", TOKEN, False, "baseline a*c, no match"),
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
    ap.add_argument("--out", default="wildcards.json", help="file name under benchmarks/results/")
    args = ap.parse_args()
    rows = []
    measured: dict[str, float] = {}
    for name, (pattern, text, want, against) in CASES.items():
        seconds = measured[name] = best_seconds(Glob(pattern), text, want, args.repeat)
        base = measured[against]
        rows.append({"case": name, "pattern_stars": pattern.count("*"), "text_letters": len(text),
                     "matches": want, "nanoseconds": round(seconds * 1e9), "baseline": against,
                     "ratio_to_baseline": round(seconds / base, 1) if base else None})
        print(f"{name:<34} {seconds * 1e6:9.2f} us  x{rows[-1]['ratio_to_baseline']} of {against}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / args.out
    out.write_text(json.dumps({"python": sys.version.split()[0], "repeat": args.repeat, "cases": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
