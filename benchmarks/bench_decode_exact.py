"""Exact wide integers in JSON input: decoding cost with and without the check, measured in one run.

    python benchmarks/bench_decode_exact.py               # needs ../shared/data/nasa_http_1995-08-01.tsv
    python benchmarks/bench_decode_exact.py --copies 1    # a quick run

The check (per batch of the per-line decoder, column by column in :func:`cep.events.json_batch` with
:func:`cep.json_exact.rounded_rows`, the rows it names read again by the standard library; per row
of Arrow's double columns with a whole value, :func:`cep.json_exact.holds_rounded`) against no check
(the decoders before it: every batch taken as orjson decoded it, Arrow's whole values read again by
plain ``orjson.loads``), over JSON lines
files built once, untimed, from the NASA log of 1 August 1995 (30,969 requests, ``--copies`` times):

* ``nasa``: the log as ``bench_decode.py`` writes it (host, time in epoch ms, method, url, status, bytes);
* ``nasa_ns_ids``: each line also carries ``id``, a 19-digit nanosecond-like integer (within int64),
  and ``ref``, a 20-digit string;
* ``nasa_wide_1pct``: one line in a hundred has an ``id`` of 2**64 + i (orjson rounds it: re-read).

Each file is decoded by :func:`cep.events.read_events` with both JSON-lines decoders (``lines``:
orjson per line; ``blocks``: the flat scanner or Arrow, whole doubles re-read per line), before and
after alternating ``--repeat`` times; CPU time of this process (``time.process_time``), best of the
repeats; the ratio is after over before (1.00: no cost). Writes ``benchmarks/results/decode_exact.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import orjson  # noqa: E402

import cep.events as events  # noqa: E402
import cep.json_blocks as json_blocks  # noqa: E402
from benchmarks.bench_decode import DATA, build_jsonl  # noqa: E402
from cep.json_exact import holds_rounded, loads_fast, rounded_rows  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


def variants(base: Path, tmp: Path) -> dict[str, Path]:
    """The three files (see the module docstring), built from the plain NASA JSON lines."""
    ns, wide = tmp / "ns.jsonl", tmp / "wide.jsonl"
    with open(base, "rb") as f, open(ns, "wb") as a, open(wide, "wb") as b:
        for i, line in enumerate(f):
            body = line.rstrip(b"\n")[:-1]
            a.write(body + b',"id":%d,"ref":"%020d"}\n' % (1_700_000_000_000_000_000 + i, i))
            b.write(body + (b',"id":%d}\n' % (2**64 + i) if i % 100 == 0 else b',"id":%d}\n' % i))
    return {"nasa": base, "nasa_ns_ids": ns, "nasa_wide_1pct": wide}


def decode(path: Path, batch: int) -> int:
    return sum(b.n for b in events.read_events(path, batch))


def _no_rows(columns: object) -> list[int]:
    return []


def _nothing(value: object) -> bool:
    return False


def use(check: bool) -> None:
    """Put the check in place, or take it out (the baseline: the decoders before it)."""
    events.rounded_rows = rounded_rows if check else _no_rows  # type: ignore[attr-defined]
    json_blocks.loads_fast = loads_fast if check else orjson.loads  # type: ignore[attr-defined]
    json_blocks.holds_rounded = holds_rounded if check else _nothing  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if not DATA.exists():
        print(f"skipped: {DATA} is absent (see ../shared/data/SOURCES.md)")
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench_exact_"))
    base = tmp / "nasa.jsonl"
    n = build_jsonl(DATA, base, args.copies)
    files = variants(base, tmp)
    result: dict[str, object] = {"events": n, "copies": args.copies, "batch_size": args.batch, "repeats": args.repeat,
                                 "python": platform.python_version(), "load_average": os.getloadavg()}
    try:
        for fname, path in files.items():
            for decoder in ("lines", "blocks"):
                os.environ["CEP_JSONL_DECODER"] = decoder
                best = {"before": 1e9, "after": 1e9}
                for _ in range(args.repeat):
                    for label, check in (("before", False), ("after", True)):
                        use(check)
                        c0 = time.process_time()
                        got = decode(path, args.batch)
                        best[label] = min(best[label], time.process_time() - c0)
                        assert got == n, (got, n)
                rates = {k: round(n / t) for k, t in best.items()}
                ratio = round(best["after"] / best["before"], 3)
                result[f"{fname}/{decoder}"] = {"events_per_cpu_s": rates, "cpu_ratio_after_over_before": ratio}
                print(f"{fname:15s} {decoder:6s} before {rates['before']:>10,}  after {rates['after']:>10,} events/cpu-s"
                      f"  cpu after/before {ratio:.3f}", flush=True)
    finally:
        use(True)
        os.environ.pop("CEP_JSONL_DECODER", None)
        shutil.rmtree(tmp, ignore_errors=True)
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "decode_exact.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
