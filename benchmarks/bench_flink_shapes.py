"""Every pattern shape of bench_patterns.py and bench_real.py next to Flink 2.3's warm JVM, per CPU-second.

Needs PyFlink in a virtualenv of its own (see benchmarks/flink_oracle.py's docstring) and Java 17::

    python benchmarks/bench_flink_shapes.py                 # every case, writes results/flink_shapes.json
    python benchmarks/bench_flink_shapes.py --only deep_kleene,sp500_v_shape --scale 0.2
    python benchmarks/bench_flink_shapes.py --ours-only --scale 0.5   # ours again, Flink's figures reused

Both engines get the same events. Ours runs each case's statement(s) in one embedded ``Engine``
over the events in Arrow batches of 8,192 in this process and only ``process``/``finish`` is timed, in CPU seconds of this
process (``time.process_time``), after one untimed warm-up run: the engine's steady state. Flink
runs ``INSERT INTO <csv sink> SELECT ... MATCH_RECOGNIZE`` from a CSV file source in one
PyFlink process per run (local mini-cluster, parallelism 1), every case at two input sizes; its
cost per event is the slope between the two sizes, so JVM start-up, planning, job submission and
JIT warm-up cancel out. Two slopes are recorded: wall seconds of the job, and CPU seconds of the
JVM process (utime + stime of every thread, read from ``/proc/<pid>/stat`` before and after each
job). The machine is shared, so the JVM's CPU slope is the headline (wall time is inflated by
other processes; Flink's own background threads, GC and JIT included, are CPU it spends). Both
engines' rows are compared in full (every measure, floats to 6 decimals, sorted): "same matches"
means the same multiset of rows at the big size.

Adaptations, because Flink SQL has no ``PREV`` and its greedy quantifiers neither backtrack nor may
end a pattern:

* ``PREV(x)`` becomes a precomputed column ``prev_x`` (the key's previous row; a key's first row
  gets its own value, so ``x < prev_x`` is false there as ``x < NULL`` is for us);
* a pattern that ends in a greedy quantifier (``UP+``, ``U{5,}``) gets a final variable ``X``
  defined as the negation of the last variable's condition and ``AFTER MATCH SKIP TO LAST X``:
  the match ends on the row that stops the run, which is where our next search starts after
  ``SKIP PAST LAST ROW``; the measures never read ``X``;
* every key gets one sentinel row a year after the last event (close -1, volume 0) in both
  engines' input: it ends each run (ours would end it at end of input, Flink would keep it
  waiting for ever) and can neither start nor extend a match of these patterns;
* no ``AFTER MATCH`` clause means ``SKIP PAST LAST ROW`` for us and ``SKIP TO NEXT ROW`` for Flink,
  so Flink's statement always says ``SKIP PAST LAST ROW``;
* Flink has no ``COUNT(v.*)``: ``COUNT(v.ts)`` counts the same rows;
* the real data's event time is the date (or minute) in epoch milliseconds; many keys share one
  time, so Flink's watermark lags the largest time by one day (one minute on Xetra) and no row is
  late.

``--ours-only`` re-measures only our engine (no PyFlink needed) and reuses Flink's figures from the
results file (``--out``) for the same case, scale and sizes: Flink costs many CPU minutes, and its
figures do not change when ours does. Each reused entry says so (``flink.reused_from``: the date
of the run that measured it). Rows are checked against what that run stored: Flink's row digest
(``rows_sha256``, stored by full runs since it was added) when present, else the match counts of
both engines at both sizes (``same_matches_basis`` says which). Cases not chosen by ``--only`` are
carried over unchanged (``carried_over_from``).

Shapes Flink cannot run are listed in ``not_run`` with the reason (absence ``NOT``, greedy
quantifiers that end the pattern under ``WITHIN``, analytics and search rules).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, NamedTuple

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DATA = REPO.parent / "shared" / "data"
DEFAULT_FLINK_PYTHON = os.environ.get("FLINK_PYTHON") or next(
    (p for p in ("/work/flinkenv/bin/python", "/tmp/flinkenv/bin/python") if os.path.exists(p)),
    "/work/flinkenv/bin/python",
)
DAY_MS = 86_400_000
MIN_SLOPE_CPU_S = 1.0  # below this many JVM CPU seconds between the two sizes a slope is noise


class Case(NamedTuple):
    """One shape: its events (a function of the scale), our statements, Flink's, and two sizes."""

    name: str
    doc: str
    table: Callable[[float], Any]  # scale -> pyarrow.Table (k, ts, value columns, prev_ columns)
    ours: list[str]  # full statements, as our engine takes them
    flink: list[str]  # MATCH_RECOGNIZE bodies (ORDER BY rt); measures in the same order as ours
    adapted: str  # what Flink's statement changes, or ""
    watermark_delay: str = "0' SECOND"
    small_fraction: float = 0.2  # the small size: this fraction of the events
    small_by_prefix: bool = True  # a prefix of the big table, or (with sentinels) a table of its own
    scale: float = 1.0  # times --scale: a case too slow in Flink at full size runs smaller


# ------------------------------------------------------------------ events


def _with_prev(table: Any, cols: list[str]) -> Any:
    """Add ``prev_<col>`` (the key's previous row, its own value on a key's first row)."""
    import numpy as np
    import pyarrow as pa

    k = table.column("k").to_numpy(zero_copy_only=False)
    _, codes = np.unique(k, return_inverse=True)
    order = np.argsort(codes, kind="stable")
    first = np.r_[True, codes[order][1:] != codes[order][:-1]]
    for c in cols:
        x = table.column(c).to_numpy()[order]
        p = np.r_[x[:1], x[:-1]]
        p[first] = x[first]
        out = np.empty_like(p)
        out[order] = p
        table = table.append_column(f"prev_{c}", pa.array(out))
    return table


def _with_sentinels(table: Any, cols: dict[str, float]) -> Any:
    """One row per key a year after the last event, with the given values (see the module doc)."""
    import numpy as np
    import pyarrow as pa

    keys = np.unique(table.column("k").to_numpy(zero_copy_only=False))
    ts = int(table.column("ts").to_numpy().max()) + 365 * DAY_MS
    extra = {"k": pa.array(keys.astype(str)), "ts": pa.array(np.full(len(keys), ts, dtype=np.int64))}
    for name in table.column_names:
        if name not in extra:
            extra[name] = pa.array(np.full(len(keys), cols.get(name, cols.get(name.removeprefix("prev_"), 0.0))))
    return pa.concat_tables([table, pa.table(extra).cast(table.schema)])


def synthetic(n: int, keys: int) -> Callable[[float], Any]:
    def make(scale: float) -> Any:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from bench_patterns import random_walk

        # integer keys, as bench_patterns feeds them (Flink reads them as BIGINT)
        return _with_prev(random_walk(max(1000, int(n * scale)), keys, seed=42), ["price"])

    return make


def _epoch_ms(s: Any) -> Any:
    """Epoch milliseconds of a naive datetime Series, whatever unit pandas parsed it in."""
    import numpy as np

    return s.to_numpy().astype("datetime64[ms]").astype(np.int64)


def sp500(scale: float) -> Any:
    import pandas as pd
    import pyarrow as pa

    df = pd.read_csv(DATA / "sp500_daily_ohlcv_2013_2018.csv").rename(columns={"Name": "k"})
    df = df.sort_values(["date", "k"], kind="stable")
    df = df.iloc[: max(1000, int(len(df) * scale))]
    t = pa.table({"k": df["k"].astype(str).to_numpy(),
                  "ts": _epoch_ms(pd.to_datetime(df["date"])),
                  "close": df["close"].astype(float).to_numpy(), "volume": df["volume"].astype(float).to_numpy()})
    return _with_prev(_with_sentinels(t, {"close": -1.0, "volume": 0.0}), ["close"])


def xetra(copies: int) -> Callable[[float], Any]:
    """Xetra minute bars, ``copies`` days (each copy one day later): 65,868 rows a day."""

    def make(scale: float) -> Any:
        import numpy as np
        import pandas as pd
        import pyarrow as pa

        df = pd.read_csv(DATA / "xetra_1min_bars_2017-07-28.csv")
        ts = _epoch_ms(pd.to_datetime(df["Date"] + "T" + df["Time"] + ":00"))
        base = pd.DataFrame({"k": df["Mnemonic"].astype(str), "ts": ts, "close": df["EndPrice"].astype(float),
                             "volume": df["TradedVolume"].astype(float)})
        df = pd.concat([base.assign(ts=base["ts"] + c * DAY_MS) for c in range(copies)])
        df = df.sort_values(["ts", "k"], kind="stable")
        df = df.iloc[: max(1000, int(len(df) * scale))]
        t = pa.table({c: df[c].to_numpy() for c in ("k", "ts", "close", "volume")})
        t = t.set_column(1, "ts", pa.array(np.asarray(t.column("ts").to_numpy(), dtype=np.int64)))
        return _with_prev(_with_sentinels(t, {"close": -1.0, "volume": 0.0}), ["close"])

    return make


# ------------------------------------------------------------------ statements

SYN_V = ("PARTITION BY k ORDER BY {o} MEASURES A.ts AS t0, LAST(B.ts) AS bottom, C.ts AS t1 "
         "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) DEFINE {d}")
V_OURS = "B AS price < PREV(price), C AS price > PREV(price)"
V_FLINK = "B AS B.price < B.prev_price, C AS C.price > C.prev_price"
SYN_KEYS = ("PARTITION BY k ORDER BY {o} MEASURES A.ts AS t0, C.ts AS t1 "
            "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) DEFINE {d}")


def both(body: str, ours_define: str, flink_define: str) -> tuple[str, str]:
    """(our full statement, Flink's MATCH_RECOGNIZE body) of one body template."""
    return (f"SELECT * FROM t MATCH_RECOGNIZE ({body.format(o='ts', d=ours_define)})",
            _flink_count(body.format(o="rt", d=flink_define)))


def same(body: str) -> tuple[str, str]:
    """(our full statement, Flink's body) when only the ORDER BY column differs."""
    return f"SELECT * FROM t MATCH_RECOGNIZE ({body.format(o='ts')})", _flink_count(body.format(o="rt"))


def _flink_count(body: str) -> str:
    """Flink has no ``COUNT(v.*)``: ``COUNT(v.ts)`` counts the same rows (ts is never NULL)."""
    return body.replace(".*)", ".ts)")


def _pair(pairs: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    return [p[0] for p in pairs], [p[1] for p in pairs]


def many_rules_pairs(n: int) -> list[tuple[str, str]]:
    import numpy as np

    rng = np.random.default_rng(7)  # the thresholds of bench_patterns.many_rules
    out = []
    for _ in range(n):
        th = round(101.8 + rng.random(), 2)
        out.append(same("PARTITION BY k ORDER BY {o} MEASURES A.ts AS t0, C.ts AS t1 AFTER MATCH SKIP PAST LAST ROW "
                        f"PATTERN (A B C) DEFINE A AS price > {th}, B AS price < 100, C AS price > 100"))
    return out


# the real rules (rules/trading.yaml, rules/trends.yaml), event time = ts
V_SHAPE_MEASURES = ("MEASURES FIRST(START_ROW.ts) AS start_ts, LAST(DOWN.ts) AS bottom_ts, LAST(UP.ts) AS end_ts, "
                    "START_ROW.close AS start_close, LAST(DOWN.close) AS bottom_close, LAST(UP.close) AS end_close ")
V_SHAPE = (f"SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts {V_SHAPE_MEASURES}"
           "ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW PATTERN (START_ROW DOWN{2,} UP+) DEFINE "
           "DOWN AS DOWN.close < PREV(DOWN.close), "
           "UP AS UP.close > PREV(UP.close) AND LAST(UP.close) >= START_ROW.close * 1.0)",
           f"PARTITION BY k ORDER BY rt {V_SHAPE_MEASURES}"
           "ONE ROW PER MATCH AFTER MATCH SKIP TO LAST X PATTERN (START_ROW DOWN{2,} UP+ X) DEFINE "
           "DOWN AS DOWN.close < DOWN.prev_close, "
           "UP AS UP.close > UP.prev_close AND UP.close >= START_ROW.close * 1.0, "
           "X AS NOT (X.close > X.prev_close AND X.close >= START_ROW.close * 1.0)")
THREE_UP_MEASURES = ("MEASURES FIRST(R.ts) AS first_up, D.ts AS drop_ts, D.close AS drop_close, "
                     "ROUND(100 * (D.close - LAST(R.close)) / LAST(R.close), 2) AS drop_pct ")
THREE_UP = (f"SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts {THREE_UP_MEASURES}"
            "PATTERN (R{3} D) WITHIN INTERVAL '7' DAY DEFINE R AS R.close > PREV(R.close), "
            "D AS D.close < LAST(R.close) * 0.98)",
            f"PARTITION BY k ORDER BY rt {THREE_UP_MEASURES}"
            "AFTER MATCH SKIP PAST LAST ROW PATTERN (R{3} D) WITHIN INTERVAL '7' DAY "
            "DEFINE R AS R.close > R.prev_close, D AS D.close < LAST(R.close) * 0.98")
STREAK_MEASURES = ("MEASURES S.ts AS start_ts, LAST(U.ts) AS end_ts, COUNT(U.*) AS up_days, "
                   "ROUND(100 * (LAST(U.close) - S.close) / S.close, 2) AS gain_pct ")
STREAK = (f"SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts {STREAK_MEASURES}"
          "AFTER MATCH SKIP PAST LAST ROW PATTERN (S U{5,}) DEFINE U AS U.close > PREV(U.close))",
          f"PARTITION BY k ORDER BY rt {STREAK_MEASURES.replace('.*)', '.ts)')}"
          "AFTER MATCH SKIP TO LAST X PATTERN (S U{5,} X) "
          "DEFINE U AS U.close > U.prev_close, X AS NOT (X.close > X.prev_close)")
BREAKOUT_MEASURES = ("MEASURES S.ts AS range_start, LAST(R.ts) AS range_end, COUNT(R.*) + 1 AS range_days, "
                     "S.close AS base_close, B.ts AS breakout_ts, B.close AS breakout_close, "
                     "ROUND(B.volume / AVG(R.volume), 2) AS volume_ratio ")
BREAKOUT_BODY = ("PARTITION BY k ORDER BY {o} " + BREAKOUT_MEASURES.replace("{", "{{").replace("}", "}}")
                 + "AFTER MATCH SKIP PAST LAST ROW PATTERN (S R{{9,}} B) DEFINE "
                 "R AS R.close BETWEEN S.close * 0.97 AND S.close * 1.03, "
                 "B AS B.close > S.close * 1.03 AND B.volume > 1.5 * AVG(R.volume)")
BREAKOUT = (f"SELECT * FROM t MATCH_RECOGNIZE ({BREAKOUT_BODY.format(o='ts')})",
            BREAKOUT_BODY.format(o="rt").replace(".*)", ".ts)"))

GREEDY_END = "PATTERN (... UP+) ends in a greedy quantifier: + X = NOT(UP's condition), SKIP TO LAST X"


def real_cases(prefix: str, make: Callable[[float], Any], delay: str, src: str) -> list[Case]:
    prev = "PREV(close) -> prev_close column; close quoted (a reserved word in Flink SQL)"
    out = [
        Case(f"{prefix}_v_shape", f"rules/trading.yaml v_shape over {src}", make, [V_SHAPE[0]], [V_SHAPE[1]],
             f"{prev}; {GREEDY_END}", delay),
        Case(f"{prefix}_three_up_then_drop", f"rules/trading.yaml three_up_then_drop over {src}", make,
             [THREE_UP[0]], [THREE_UP[1]], f"{prev}; explicit SKIP PAST LAST ROW", delay),
        Case(f"{prefix}_rising_streak", f"rules/trends.yaml rising_streak over {src}", make, [STREAK[0]], [STREAK[1]],
             f"{prev}; PATTERN (S U{{5,}}) ends in a greedy quantifier: + X = NOT(U's condition), SKIP TO LAST X",
             delay),
        Case(f"{prefix}_range_breakout", f"rules/trends.yaml range_breakout over {src}", make, [BREAKOUT[0]],
             [BREAKOUT[1]], "none (R and B exclude each other, so Flink's non-backtracking greedy R{9,} is exact)",
             delay),
    ]
    # range_breakout on minute bars: long flat runs keep every start row's partial match alive in
    # both engines (quadratic); Flink took over 9 minutes for 34,000 events, so this case is small
    out[3] = out[3]._replace(scale=0.02 if prefix == "xetra" else 1.0)
    return [c._replace(small_by_prefix=False, flink=[re.sub(r"\.close\b", ".`close`", b) for b in c.flink])
            for c in out]


def cases() -> list[Case]:
    v = both(SYN_V, V_OURS, V_FLINK)
    keys = both(SYN_KEYS, V_OURS, V_FLINK)
    sel = same("PARTITION BY k ORDER BY {o} MEASURES A.ts AS t0, C.ts AS t1 AFTER MATCH SKIP PAST LAST ROW "
               "PATTERN (A B C) DEFINE A AS price > 102.33, B AS price < 100, C AS price > 100")
    deep = same("PARTITION BY k ORDER BY {o} MEASURES A.ts AS t0, COUNT(B.*) AS nb, C.ts AS t1 "
                "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) "
                "DEFINE A AS price < 99, B AS price < 102.33, C AS price >= 102.33")
    hist = both("PARTITION BY k ORDER BY {o} MEASURES A.ts AS t0, SUM(B.price) AS s, C.ts AS t1 "
                "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) WITHIN {d} "
                "DEFINE A AS price < 99.5, B AS SUM(B.price) < 600, C AS C.price > A.price + 2",
                "INTERVAL '50' MILLISECOND", "INTERVAL '0.05' SECOND")
    prev = "PREV(price) -> prev_price column"
    many = _pair(many_rules_pairs(50))
    out = [
        Case("selective_first_step", "A B C over 100 keys; A holds for ~1% of events", synthetic(1_000_000, 100),
             [sel[0]], [sel[1]], "explicit SKIP PAST LAST ROW"),
        Case("every_event_advances", "V-shape A B+ C over 100 keys", synthetic(1_000_000, 100), [v[0]], [v[1]], prev),
        Case("deep_kleene", "A B+ C, B holds for ~99% of events", synthetic(1_000_000, 100), [deep[0]], [deep[1]],
             "explicit SKIP PAST LAST ROW"),
        Case("keys_10k", "the V-shape over 10,000 keys", synthetic(1_000_000, 10_000), [keys[0]], [keys[1]], prev),
        Case("keys_1m", "the V-shape over 1,000,000 keys, 3 events per key", synthetic(3_000_000, 1_000_000),
             [keys[0]], [keys[1]], prev, small_fraction=1 / 3),
        Case("history_within", "aggregate conditions with WITHIN 50 ms, 100 keys", synthetic(1_000_000, 100),
             [hist[0]], [hist[1]], "explicit SKIP PAST LAST ROW; B and C overlap, so Flink's greedy B+ that "
             "never backtracks may miss matches the standard finds"),
        Case("many_rules_50", "50 selective A B C rules in one pass, 100 keys", synthetic(200_000, 100),
             many[0], many[1], "one Flink job: UNION ALL of the 50 statements into one sink"),
    ]
    out += real_cases("sp500", sp500, "1' DAY", "the S&P 500 daily bars (619,040 + 505 sentinels)")
    out += real_cases("xetra", xetra(5), "1' MINUTE", "5 days of Xetra minute bars (329,340 + sentinels)")
    return out


NOT_RUN = {
    "nasa/apache not_found_retry_loop, large_download_streak (rules/ops.yaml)":
        "PATTERN (N{3,}) and (L{3,}) with WITHIN end in a greedy quantifier: Flink refuses a greedy end, and "
        "the X-terminated rewrite is not equivalent under WITHIN (the run ends when WITHIN expires, with no row to "
        "end it)",
    "nasa/apache not_found_then_nothing_good, not_found_twice_nothing_between (rules/ops.yaml)":
        "absence (PATTERN (N NOT S) / (N NOT S E)): no Flink SQL equivalent (Flink CEP's notFollowedBy is "
        "DataStream API only)",
    "weblogs.yaml, ops.yaml analytics rules; media.yaml search rules":
        "not patterns (windowed analytics, Lucene queries): outside this comparison",
}


# ------------------------------------------------------------------ ours


def norm(v: Any) -> str:
    if v is None or v == "":
        return ""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return repr(round(f, 6) + 0.0)


def rows_digest(rows: Any) -> str:
    """SHA-256 of a multiset of normalised rows (sorted), so a later run can check rows it cannot rerun."""
    import hashlib

    h = hashlib.sha256()
    for r in sorted(rows):
        h.update(("\x1f".join(r) + "\n").encode())
    return h.hexdigest()


def run_ours(case: Case, table: Any) -> tuple[float, list[tuple]]:
    """CPU seconds of the embedded engine over the table in Arrow batches of 8,192, and its rows.

    The engine (not one operator per statement) because it is what runs a rule file: it decodes
    each batch once for all its rules (many_rules_50 is 3x faster so than with 50 operators).
    """
    from cep.engine import Engine
    from patterns.rules import parse_rule_text

    eng = Engine([parse_rule_text(s, f"r{i}") for i, s in enumerate(case.ours)])
    batches = table.to_batches(max_chunksize=8192)
    rows: list[dict] = []
    c0 = time.process_time()
    for b in batches:
        rows += eng.process(b).matches
    rows += eng.finish().matches
    cpu = time.process_time() - c0
    return cpu, [tuple(norm(v) for k, v in r.items() if k != "rule") for r in rows]


# ------------------------------------------------------------------ Flink (worker side, in the venv)


def _jvm_pid() -> int | None:
    me = os.getpid()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == me and "java" in stat[: stat.rindex(")")]:
                return int(d)
    return None


def _cpu(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def flink_worker(spec: dict) -> None:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", "1")
    pid = _jvm_pid()
    out: dict[str, Any] = {"jvm_pid_found": pid is not None, "cases": {}}

    def job(c: dict, path: str) -> dict:
        sink = tempfile.mkdtemp(prefix="sink_", dir=spec["tmp"])
        env.execute_sql("DROP TEMPORARY TABLE IF EXISTS src")
        env.execute_sql("DROP TEMPORARY TABLE IF EXISTS snk")
        env.execute_sql(f"CREATE TEMPORARY TABLE src ({c['columns']}, rt AS TO_TIMESTAMP_LTZ(ts, 3), "
                        f"WATERMARK FOR rt AS rt - INTERVAL '{c['delay']}) "
                        f"WITH ('connector'='filesystem', 'path'='{path}', 'format'='csv')")
        q = env.sql_query(" UNION ALL ".join(f"SELECT * FROM src MATCH_RECOGNIZE ({b})" for b in c["bodies"]))
        schema = q.get_schema()
        cols = ", ".join(f"`{n}` {t}" for n, t in zip(schema.get_field_names(), schema.get_field_data_types()))
        env.execute_sql(f"CREATE TEMPORARY TABLE snk ({cols}) WITH ('connector'='filesystem', "
                        f"'path'='{sink}', 'format'='csv')")
        w0, c0 = time.perf_counter(), _cpu(pid)
        result = q.execute_insert("snk")
        try:
            result.wait(int(spec["timeout_s"] * 1000))
        except Exception:  # noqa: BLE001 - still running at the timeout: cancelled, reported
            result.get_job_client().cancel().result()
            raise TimeoutError(f"still running after {spec['timeout_s']} s (cancelled)") from None
        wall, cpu = time.perf_counter() - w0, _cpu(pid) - c0
        rows = []
        for d, _, fs in os.walk(sink):
            for f in fs:
                with open(os.path.join(d, f), newline="") as fh:
                    rows += [tuple(r) for r in csv.reader(fh)]
        print(f"flink: {c['name']} {os.path.basename(path)}: {wall:.2f}s wall, {cpu:.2f}s JVM CPU, {len(rows)} rows",
              file=sys.stderr, flush=True)
        return {"wall": wall, "cpu": cpu, "rows": rows}

    first = spec["cases"][0]
    job(first, first["warmup"])  # JIT and class loading, untimed
    for c in spec["cases"]:
        try:
            runs = [job(c, p) for p in c["paths"]]
            out["cases"][c["name"]] = {"runs": runs, "error": None}
        except Exception as e:  # noqa: BLE001 - Flink refuses one case: reported, the rest run
            msg = [ln for ln in str(e).splitlines() if "Encountered" in ln
                   or ("Exception" in ln or "Error" in ln) and not ln.lstrip().startswith("at ")]
            out["cases"][c["name"]] = {"runs": [], "error": (msg[-1] if msg else str(e))[:500]}
            print(f"flink: {c['name']}: {out['cases'][c['name']]['error']}", file=sys.stderr, flush=True)
        Path(spec["out"]).write_text(json.dumps(out))  # after every case: a later failure keeps these


# ------------------------------------------------------------------ driver


def _columns(schema: Any) -> str:
    import pyarrow as pa

    def t(x: Any) -> str:
        return "STRING" if pa.types.is_string(x) or pa.types.is_large_string(x) else (
            "BIGINT" if pa.types.is_integer(x) else "DOUBLE")

    return ", ".join(f"`{f.name}` {t(f.type)}" for f in schema)


def markdown(res: dict[str, Any]) -> str:
    """The README table of a results file: shape, ours, Flink, ratio, same matches."""
    lines = ["| shape | events | ours, events/cpu-s | Flink JVM, events/cpu-s (slope) | ours / Flink | same matches |",
             "|---|---:|---:|---:|---:|---|"]
    for e in res["cases"]:
        f = e["flink"]
        ok = "error" not in f and f["events_per_jvm_cpu_s_slope"] is not None
        flink = (f"{f['events_per_jvm_cpu_s_slope']:,.0f}" if ok else "not run: " + f["error"][:60] if "error" in f
                 else "slope below noise")
        ratio = f"{e['ratio_ours_over_flink_cpu']:.1f}x" if ok else ""
        lines.append(f"| {e['case']} | {e['events'][1]:,} | {e['ours']['events_per_cpu_s']:,.0f} | {flink} | {ratio} | "
                     f"{'yes' if e.get('same_matches') else 'no' if 'error' not in f else ''} |")
    return "\n".join(lines)


def reuse_flink(entry: dict[str, Any], old: dict[str, Any] | None, date: str) -> None:
    """Fill ``entry``'s Flink side from the stored entry ``old`` of the same case (``--ours-only``).

    Reused only at the same sizes (the same events: the tables are a function of case and scale).
    The rows are checked against what the stored run kept: Flink's row digest when it has one,
    else the match counts of both engines at both sizes.
    """
    if old is None or old.get("events") != entry["events"]:
        got = None if old is None else old.get("events")
        entry["flink"] = {"error": f"no stored Flink run of this case at {entry['events']} events (stored: {got})"}
        return
    f = dict(old["flink"])
    f["reused_from"] = f.get("reused_from", date)  # a reuse of a reuse keeps the date Flink ran
    entry["flink"] = f
    ours, was = entry["ours"], old["ours"]
    entry["ours_matches_as_stored"] = ours["matches"] == was["matches"]
    if "rows_sha256" in was:
        entry["ours_rows_as_stored"] = ours["rows_sha256"] == was["rows_sha256"]
    if "error" in f:
        return
    if "rows_sha256" in f:
        entry["same_matches"] = f["rows_sha256"] == ours["rows_sha256"]
        entry["same_matches_basis"] = "rows: Flink's stored row digest at both sizes"
    elif old.get("same_matches"):
        entry["same_matches"] = ours["matches"] == f["matches"]
        entry["same_matches_basis"] = ("match counts: Flink's stored counts at both sizes (its run found the same "
                                       "rows as ours then; Flink's rows were not stored)")
    else:
        entry["same_matches"] = False
        entry["same_matches_basis"] = "the stored run found different rows (Flink's rows were not stored)"
    slope, wall = f.get("events_per_jvm_cpu_s_slope"), f.get("events_per_s_wall_slope")
    entry["ratio_ours_over_flink_cpu"] = None if slope is None else ours["events_per_cpu_s"] / slope
    entry["ratio_ours_over_flink_wall_slope"] = None if wall is None else ours["events_per_cpu_s"] / wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of each case's events (quick runs)")
    ap.add_argument("--repeats", type=int, default=2, help="our runs per case (best CPU time)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds before a Flink job is cancelled")
    ap.add_argument("--flink-python", default=DEFAULT_FLINK_PYTHON)
    ap.add_argument("--out", type=Path, default=RESULTS / "flink_shapes.json")
    ap.add_argument("--ours-only", action="store_true",
                    help="measure only our engine; reuse Flink's figures stored in --out for the same case and scale")
    ap.add_argument("--table", action="store_true", help="print the README table of --out and stop")
    ap.add_argument("--flink-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.table:
        print(markdown(json.loads(args.out.read_text())))
        return 0
    if args.flink_worker:
        flink_worker(json.loads(Path(args.flink_worker).read_text()))
        return 0
    prior: dict[str, Any] = {}
    if args.ours_only:
        if not args.out.exists():
            print(f"--ours-only: no stored results at {args.out} to take Flink's figures from", file=sys.stderr)
            return 2
        prior = json.loads(args.out.read_text())
        if prior.get("scale") != args.scale:
            print(f"--ours-only: {args.out} holds Flink's figures at --scale {prior.get('scale')}, "
                  f"not {args.scale}: run with --scale {prior.get('scale')}", file=sys.stderr)
            return 2
    sys.path.insert(0, str(REPO))
    import pyarrow.csv as pacsv

    all_cases = cases()
    chosen = [c for c in all_cases if not args.only or c.name in args.only.split(",")]
    res: dict[str, Any] = {
        "benchmark": "flink_shapes", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_at_start": os.getloadavg()},
        "scale": args.scale, "cases": [], "not_run": NOT_RUN,
    }
    tmp = tempfile.mkdtemp(prefix="flink_shapes_")
    spec_cases, ours = [], {}
    run_ours(chosen[0], chosen[0].table(0.01))  # warm-up: numba's loops load once, as in a long-running engine
    for c in chosen:
        table = c.table(args.scale * c.scale)
        small = (table.slice(0, int(table.num_rows * c.small_fraction)) if c.small_by_prefix
                 else c.table(args.scale * c.scale * c.small_fraction))
        best: dict[int, tuple[float, list]] = {}
        for t in (small, table):
            for _ in range(args.repeats):
                cpu, rows = run_ours(c, t)
                if t.num_rows not in best or cpu < best[t.num_rows][0]:
                    best[t.num_rows] = (cpu, rows)
        ours[c.name] = best
        paths = []
        if not args.ours_only:
            for t in (small, table):
                p = os.path.join(tmp, f"{c.name}_{t.num_rows}.csv")
                pacsv.write_csv(t, p, pacsv.WriteOptions(include_header=False, quoting_style="none"))
                paths.append(p)
        warm = os.path.join(tmp, f"{c.name}_warm.csv")
        if not args.ours_only:
            pacsv.write_csv(table.slice(0, min(50_000, table.num_rows)), warm,
                            pacsv.WriteOptions(include_header=False, quoting_style="none"))
        spec_cases.append({"name": c.name, "bodies": c.flink, "columns": _columns(table.schema),
                           "delay": c.watermark_delay, "paths": paths, "warmup": warm,
                           "sizes": [small.num_rows, table.num_rows]})
        print(f"ours: {c.name}: {table.num_rows:,} events {best[table.num_rows][0]:.2f} CPU s, "
              f"{len(best[table.num_rows][1]):,} matches", file=sys.stderr, flush=True)
    got: dict[str, Any] = {"jvm_pid_found": False, "cases": {}}
    if args.ours_only:
        # Flink's side as stored: the run-level facts of the run that measured it
        for k, v in prior.items():
            if k in ("flink_version", "flink_process_cpu_seconds", "jvm_cpu_from_proc") or k.startswith("note_"):
                res[k] = v
        res["flink_reused_from"] = prior.get("flink_reused_from", prior["date"])
        res["ours_only"] = True
    else:
        spec = {"cases": spec_cases, "tmp": tmp, "out": os.path.join(tmp, "out.json"), "timeout_s": args.timeout}
        Path(tmp, "spec.json").write_text(json.dumps(spec))
        before = os.times()
        subprocess.run([args.flink_python, __file__, "--flink-worker", os.path.join(tmp, "spec.json")], check=False)
        after = os.times()
        out_path = Path(spec["out"])
        if out_path.exists():
            got = json.loads(out_path.read_text())
        res["flink_version"] = "apache-flink 2.3 (PyFlink, local mini-cluster, parallelism 1)"
        res["flink_process_cpu_seconds"] = (after.children_user - before.children_user) + (
            after.children_system - before.children_system)
        res["jvm_cpu_from_proc"] = got["jvm_pid_found"]
    old_cases = {e["case"]: e for e in prior.get("cases", [])}
    new_cases: dict[str, dict] = {}
    for c, sc in zip(chosen, spec_cases):
        (ns, nb) = sc["sizes"]
        (cs, rs), (cb, rb) = ours[c.name][ns], ours[c.name][nb]
        entry: dict[str, Any] = {
            "case": c.name, "doc": c.doc, "adapted_for_flink": c.adapted, "rules": len(c.ours),
            "ours_statement": c.ours[0], "flink_statement": c.flink[0], "events": [ns, nb],
            "ours": {"cpu_seconds": [cs, cb], "matches": [len(rs), len(rb)],
                     "cpu_us_per_event": 1e6 * cb / nb, "events_per_cpu_s": nb / cb,
                     "events_per_cpu_s_slope": (nb - ns) / max(cb - cs, 1e-9),
                     "rows_sha256": [rows_digest(rs), rows_digest(rb)]},
        }
        f = got["cases"].get(c.name, {"runs": [], "error": "not run"})
        if args.ours_only:
            reuse_flink(entry, old_cases.get(c.name), res["flink_reused_from"])
        elif f["error"]:
            entry["flink"] = {"error": f["error"]}
        else:
            fs, fb = f["runs"]
            wall_slope = (nb - ns) / max(fb["wall"] - fs["wall"], 1e-9)
            cpu_slope = (nb - ns) / max(fb["cpu"] - fs["cpu"], 1e-9)
            noise = fb["cpu"] - fs["cpu"] < MIN_SLOPE_CPU_S  # the sizes' difference drowns in the fixed cost
            frs = [[tuple(norm(v) for v in r) for r in run["rows"]] for run in (fs, fb)]
            same_small = Counter(frs[0]) == Counter(rs)
            same_big = Counter(frs[1]) == Counter(rb)
            entry["flink"] = {"wall_seconds": [fs["wall"], fb["wall"]], "jvm_cpu_seconds": [fs["cpu"], fb["cpu"]],
                              "matches": [len(fs["rows"]), len(fb["rows"])],
                              "rows_sha256": [rows_digest(r) for r in frs],
                              "events_per_s_wall_slope": None if noise else wall_slope,
                              "events_per_jvm_cpu_s_slope": None if noise else cpu_slope,
                              "jvm_cpu_us_per_event_slope": None if noise else 1e6 / cpu_slope}
            entry["same_matches"] = same_small and same_big
            entry["ratio_ours_over_flink_cpu"] = None if noise else entry["ours"]["events_per_cpu_s"] / cpu_slope
            entry["ratio_ours_over_flink_wall_slope"] = None if noise else entry["ours"]["events_per_cpu_s"] / wall_slope
        new_cases[c.name] = entry
        r = entry.get("ratio_ours_over_flink_cpu")
        print(f"{c.name:28s} ours {entry['ours']['events_per_cpu_s']:>11,.0f}/cpu-s  "
              + (f"flink {entry['flink']['events_per_jvm_cpu_s_slope']:>10,.0f}/cpu-s (wall slope "
                 f"{entry['flink']['events_per_s_wall_slope']:,.0f})  x{r:.1f}  same matches {entry['same_matches']}"
                 if r else f"flink: {entry['flink'].get('error', 'slope below noise')}"), flush=True)
    for c in all_cases:  # in the cases' order; with --ours-only, stored cases not chosen are kept as they were
        if c.name in new_cases:
            res["cases"].append(new_cases[c.name])
        elif c.name in old_cases:
            res["cases"].append({**old_cases[c.name],
                                 "carried_over_from": old_cases[c.name].get("carried_over_from", prior["date"])})
    res["machine"]["loadavg_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
