"""Decoding benchmark: the NASA log x20 as JSON lines, decode only and ``cep run`` end to end.

    python benchmarks/bench_decode.py               # needs ../shared/data/nasa_http_1995-08-01.tsv
    python benchmarks/bench_decode.py --copies 2    # a quick run

Builds (once, untimed, in a temporary directory) the NASA Kennedy Space Center log of 1 August 1995
(30,969 requests) replicated ``--copies`` times (20: 619,380 events), each copy shifted by one day,
as JSON lines (``host``, ``time`` in epoch ms, ``method``, ``url``, ``status``, ``bytes``). Then,
in one run, alternating the two JSON-lines decoders (``CEP_JSONL_DECODER=lines``, the per-line
orjson decoder, and the default block decoder) ``--repeat`` times:

* decode only: :func:`cep.events.read_events` over the file, every batch built;
* end to end (``run``): ``cep run`` (:func:`cep.cli.command.main`, the same code path as the command)
  in this process with one analytics rule, per host and 10-minute tumbling window ``COUNT(*)``,
  ``COUNT(DISTINCT url)`` and ``APPROX_COUNT_DISTINCT(url)``, output written to a file (91,020 rows
  for 20 copies); the rows of both decoders must be equal;
* ``process``: the same command as a process of its own, CPU time of the child (start-up and
  imports, about a second of CPU, included).

Rates are events per CPU second of this process (``time.process_time``), the best of the repeats;
ratios are between the two decoders in the same run. Skips (exit 0) when the data is absent. Writes
``benchmarks/results/decode.json``.
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
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cep.cli.command import main as cep_main  # noqa: E402
from cep.events import read_events  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "nasa_http_1995-08-01.tsv"
RESULTS = REPO / "benchmarks" / "results"
DAY_MS = 86_400_000

RULE = """\
rules:
  - name: host_window_urls
    kind: analytics
    lateness: 1 minute
    max_future_skew: none
    sql: |
      SELECT host, COUNT(*) AS requests, COUNT(DISTINCT url) AS urls, APPROX_COUNT_DISTINCT(url) AS approx_urls,
             window_start, window_end
      FROM requests
      GROUP BY host, TUMBLE(time, INTERVAL '10' MINUTE)
"""

DECODERS = {"lines": "lines", "blocks": "blocks"}  # CEP_JSONL_DECODER values


def build_jsonl(tsv: Path, out: Path, copies: int) -> int:
    """The TSV log as JSON lines, ``copies`` times, each copy one day later; the number of lines."""
    import orjson

    rows: list[dict[str, Any]] = []
    with open(tsv, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            v = dict(zip(header, line.rstrip("\n").split("\t")))
            rows.append({"host": v["host"], "time": int(v["time"]) * 1000, "method": v["method"], "url": v["url"],
                         "status": int(v["response"]), "bytes": int(v["bytes"]) if v["bytes"].isdigit() else None})
    n = 0
    with open(out, "wb") as f:
        for c in range(copies):
            for r in rows:
                f.write(orjson.dumps({**r, "time": int(r["time"]) + c * DAY_MS}) + b"\n")
                n += 1
    return n


def cpu(fn: Callable[[], object]) -> tuple[float, object]:
    c0 = time.process_time()
    got = fn()
    return time.process_time() - c0, got


def decode_only(path: Path, batch: int) -> int:
    n = 0
    for b in read_events(path, batch):
        n += b.n
    return n


def end_to_end(rules: Path, path: Path, out: Path, batch: int) -> int:
    code = cep_main(["run", str(rules), "--input", str(path), "--output", str(out), "--quiet",
                     "--batch-size", str(batch), "--progress", "off"])
    if code != 0:
        raise SystemExit(f"cep run exited {code}")
    return sum(1 for _ in open(out, "rb"))


def one_process(rules: Path, path: Path, out: Path, batch: int, decoder: str) -> float:
    """CPU seconds (user + system) of a whole ``cep run`` process: start-up and imports included."""
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "cep.cli", "run", str(rules), "--input", str(path), "--output", str(out),
                    "--quiet", "--batch-size", str(batch), "--progress", "off"], check=True, cwd=REPO,
                   env={**os.environ, "CEP_JSONL_DECODER": decoder, "PYTHONPATH": str(REPO)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--only", choices=["decode", "run", "process"], default=None)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if not DATA.exists():
        print(f"skipped: {DATA} is absent (see ../shared/data/SOURCES.md)")
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench_decode_"))
    path = tmp / f"nasa_x{args.copies}.jsonl"
    n = build_jsonl(DATA, path, args.copies)
    rules = tmp / "rules.yaml"
    rules.write_text(RULE)
    print(f"{n:,} events, {path.stat().st_size / 1e6:.1f} MB of JSON lines")
    best: dict[str, dict[str, float]] = {k: {} for k in ("decode", "run", "process")}
    rows: dict[str, int] = {}
    outs: dict[str, bytes] = {}
    for _ in range(args.repeat):
        for name, value in DECODERS.items():
            os.environ["CEP_JSONL_DECODER"] = value
            if args.only in (None, "decode"):
                t, got = cpu(lambda: decode_only(path, args.batch))
                assert got == n, (got, n)
                best["decode"][name] = min(best["decode"].get(name, 1e9), t)
                print(f"  decode {name:6s} {n / t:12,.0f} events/cpu-s", flush=True)
            if args.only in (None, "run"):
                out = tmp / f"out_{name}.jsonl"
                t, got = cpu(lambda: end_to_end(rules, path, out, args.batch))
                rows[name] = int(got)  # type: ignore[call-overload]
                outs[name] = b"".join(sorted(open(out, "rb")))
                best["run"][name] = min(best["run"].get(name, 1e9), t)
                print(f"  run    {name:6s} {n / t:12,.0f} events/cpu-s, {got:,} rows", flush=True)
            if args.only in (None, "process"):
                t = one_process(rules, path, tmp / f"proc_{name}.jsonl", args.batch, value)
                best["process"][name] = min(best["process"].get(name, 1e9), t)
                print(f"  process {name:5s} {n / t:12,.0f} events/cpu-s (a whole cep run process)", flush=True)
    os.environ.pop("CEP_JSONL_DECODER", None)
    shutil.rmtree(tmp, ignore_errors=True)
    if len(set(outs.values())) > 1:
        raise SystemExit("the two decoders gave different rows")
    result: dict[str, object] = {
        "events": n, "copies": args.copies, "batch_size": args.batch, "repeats": args.repeat,
        "rows": rows.get("blocks"), "python": platform.python_version(), "load_average": os.getloadavg(),
    }
    for what, times in best.items():
        if not times:
            continue
        rates = {k: round(n / t) for k, t in times.items()}
        result[what] = {"events_per_cpu_s": rates, "ratio_blocks_over_lines": round(rates["blocks"] / rates["lines"], 2)}
        print(f"{what}: lines {rates['lines']:,}  blocks {rates['blocks']:,}  ratio {rates['blocks'] / rates['lines']:.2f}x")
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "decode.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
