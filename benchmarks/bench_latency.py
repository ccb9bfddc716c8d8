"""Event-to-output latency of a durable ``cep run --follow``: write time of an event to its complex event's row.

    python benchmarks/bench_latency.py                         # 1,000 and 50,000 events/s, dense and sparse output
    python benchmarks/bench_latency.py --code /tmp/old --label before   # the same against another checkout
    python benchmarks/bench_latency.py --quick                 # short runs: checks the script works

A writer thread appends events at a fixed rate to a JSON lines file in a followed directory, in
ticks of 1 ms; every event carries ``wt``, the wall-clock time (ns) at which its line was written.
The consumer is the real command, in a process of its own: ``cep run RULES --input DIR --state
STATE --output OUT --follow --checkpoint-seconds 30``. A reader thread reads OUT as it grows
(every 1 ms) and notes, for every complex event, the time it saw the row's line; the row carries
the ``wt`` of the event that completed it, so *latency = seen - wt*. Only events written after a
warm-up (the consumer's start-up) count. Once the writer stops, the run waits up to
``checkpoint_seconds + 5`` s for the remaining rows (an engine that writes rows only at
checkpoints delivers them then), then stops the consumer with SIGTERM; rows still missing then are
reported as ``undelivered`` (they come with the final checkpoint, after the measurement).

The rule, ``A B`` per key (``A.v = 1``, then ``B.v = 2`` on the key's next event), completes a
match with the event that carries B, so nothing waits for a later event or a watermark: what is
measured is the engine's path from the input file to the output file. The writer knows which
events complete a match, so the expected count is exact. ``--alerts`` sets how many complex
events per second the data holds: dense output (200/s) and sparse alerts (5/s, the fraud or
outage case, where an output buffer that flushes when full holds rows back longest).

Writes ``benchmarks/results/latency.json`` (one entry per ``--label``; other labels already in the
file are kept, so a "before" run from another checkout and an "after" run sit side by side).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

RULES = """
rules:
  - name: pair
    description: an A event followed by a B event of the same key (the B event completes it)
    sql: |
      SELECT * FROM ev MATCH_RECOGNIZE (
        PARTITION BY key ORDER BY ts
        MEASURES A.ts AS t0, B.ts AS t1, B.wt AS wt
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A B)
        DEFINE A AS A.v = 1, B AS B.v = 2)
"""


class Writer(threading.Thread):
    """Appends ``rate`` events/s to ``path`` in 1 ms ticks; remembers the ``wt`` of each match-completing event."""

    def __init__(self, path: Path, rate: int, seconds: float, keys: int, seed: int, alerts: float):
        super().__init__(daemon=True)
        self.path, self.rate, self.seconds, self.keys = path, rate, seconds, keys
        self.rng = random.Random(seed)
        # P(v = 2); v = 1 half the time, so about `alerts` complex events per second
        self.q = min(0.2, 2.0 * alerts / rate)
        self.completing: list[int] = []  # wt of every event that completes a match
        self.written = 0
        self.started_ns = 0
        self.stopped_ns = 0

    def run(self) -> None:
        last = [0] * self.keys
        rng, q = self.rng, self.q
        with open(self.path, "ab", buffering=0) as fh:
            t0 = time.monotonic()
            self.started_ns = time.time_ns()
            while True:
                el = time.monotonic() - t0
                if el >= self.seconds:
                    break
                due = int(self.rate * el) - self.written
                if due > 0:
                    wt = time.time_ns()
                    ts = wt // 1_000_000
                    parts = []
                    for _ in range(due):
                        k = rng.randrange(self.keys)
                        r = rng.random()
                        v = 2 if r < q else (1 if r < 0.5 + q / 2 else 0)
                        if v == 2 and last[k] == 1:
                            self.completing.append(wt)
                            last[k] = 0  # SKIP PAST LAST ROW: the B row starts nothing
                        else:
                            last[k] = v
                        parts.append(f'{{"key":"k{k}","ts":{ts},"v":{v},"wt":{wt}}}\n')
                    fh.write("".join(parts).encode())
                    self.written += due
                time.sleep(0.001)
            self.stopped_ns = time.time_ns()


class Reader(threading.Thread):
    """Reads the output file as it grows; for every row, (wt, the time its line was seen)."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path = path
        self.seen: list[tuple[int, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        off, buf = 0, b""
        fh = None
        while not self.stop.is_set():
            if fh is None:
                try:
                    fh = open(self.path, "rb")
                except FileNotFoundError:
                    time.sleep(0.001)
                    continue
            fh.seek(off)
            data = fh.read()
            if data:
                now = time.time_ns()
                off += len(data)
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    self.seen.append((json.loads(line)["wt"], now))
            else:
                time.sleep(0.001)
        if fh is not None:
            fh.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def measure(code: Path, rate: int, seconds: float, warmup: float, checkpoint_seconds: float, keys: int,
            seed: int, extra: list[str], alerts: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench_latency_") as tmp:
        d = Path(tmp)
        (d / "rules.yaml").write_text(RULES)
        logs = d / "logs"
        logs.mkdir()
        out = d / "out.jsonl"
        cmd = [sys.executable, "-m", "cep.cli", "run", str(d / "rules.yaml"), "--input", str(logs),
               "--state", str(d / "state"), "--output", str(out), "--follow",
               "--checkpoint-seconds", str(checkpoint_seconds), "-q", *extra]
        env = {**os.environ, "PYTHONPATH": str(code)}
        proc = subprocess.Popen(cmd, cwd=str(code), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        reader = Reader(out)
        reader.start()
        writer = Writer(logs / "events-000.jsonl", rate, seconds + warmup, keys, seed, alerts)
        writer.start()
        time.sleep(warmup)
        cpu0 = cpu_seconds(proc.pid)
        cut = time.time_ns()  # events written from here on are measured
        writer.join()
        cpu1 = cpu_seconds(proc.pid)
        want = [w for w in writer.completing if w >= cut]
        wanted = set(want)
        deadline = time.monotonic() + checkpoint_seconds + 5
        while time.monotonic() < deadline:
            got = {w for w, _ in reader.seen if w >= cut}
            if got >= wanted:
                break
            time.sleep(0.05)
        t_stop = time.time_ns()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        time.sleep(0.05)
        reader.stop.set()
        reader.join()
        if proc.returncode != 0:
            raise SystemExit(f"consumer failed ({proc.returncode}): {err.decode()[-2000:]}")
        first_seen: dict[int, int] = {}
        for w, t in reader.seen:
            first_seen.setdefault(w, t)
        lat = [(first_seen[w] - w) / 1e6 for w in want if w in first_seen]
        late = sum(1 for w in want if w not in first_seen or first_seen[w] > t_stop)
        return {
            "rate_events_per_s": rate,
            "complex_events_per_s_target": alerts,
            "seconds_measured": seconds,
            "events_written": writer.written,
            "complex_events_expected": len(want),
            "complex_events_seen": len(lat),
            "undelivered_before_stop": late,
            "latency_ms": {
                "p50": pct(lat, 50), "p90": pct(lat, 90), "p99": pct(lat, 99), "max": max(lat) if lat else None,
                "mean": sum(lat) / len(lat) if lat else None,
            },
            "consumer_cpu_seconds_per_second": (cpu1 - cpu0) / seconds,
            # the slowest rows: seconds after the measurement began, and latency in ms
            "slowest": sorted(([round((w - cut) / 1e9, 3), round((first_seen[w] - w) / 1e6, 1)] for w in want
                               if w in first_seen), key=lambda x: -x[1])[:10],
            "checkpoint_seconds": checkpoint_seconds,
            "keys": keys,
            "extra_args": extra,
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="1000,50000", help="events per second, comma-separated")
    ap.add_argument("--alerts", default="200,5", help="complex events per second, comma-separated: dense "
                    "output, and sparse alerts (which an output buffer holds back longest)")
    ap.add_argument("--seconds", type=float, default=40.0, help="measured seconds per rate (after the warm-up)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring (consumer start-up)")
    ap.add_argument("--checkpoint-seconds", type=float, default=30.0)
    ap.add_argument("--code", default=str(REPO), help="checkout whose cep runs the consumer (default: this one)")
    ap.add_argument("--label", default="after", help="name of this measurement in the JSON file")
    ap.add_argument("--extra", default="", help="more `cep run` options for the consumer, space-separated")
    ap.add_argument("--json", default=str(RESULTS / "latency.json"))
    ap.add_argument("--quick", action="store_true", help="5 s per run, checkpoints every 5 s")
    ap.add_argument("--seed", type=int, default=14)
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup, args.checkpoint_seconds = 5.0, 3.0, 5.0
        args.json = str(RESULTS / "latency_quick.json")
    runs = []
    for alerts in [float(x) for x in args.alerts.split(",")]:
        for rate in [int(x) for x in args.rates.split(",")]:
            keys = 100 if rate <= 5000 else 1000
            load0 = os.getloadavg()
            r = measure(Path(args.code), rate, args.seconds, args.warmup, args.checkpoint_seconds, keys, args.seed,
                        args.extra.split(), alerts)
            r["load_average_before_after"] = [load0, os.getloadavg()]
            lat = r["latency_ms"]
            per_s = r["complex_events_expected"] / args.seconds
            print(f"{args.label}: {rate:,} events/s, {per_s:.0f} complex events/s: {r['complex_events_seen']:,} of "
                  f"{r['complex_events_expected']:,} seen; latency p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms, "
                  f"max {lat['max']:.1f} ms; consumer CPU {r['consumer_cpu_seconds_per_second']:.2f} s/s", flush=True)
            runs.append(r)
    path = Path(args.json)
    doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    doc.setdefault("runs", {})[args.label] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "code": args.code,
        "machine": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "results": runs,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
