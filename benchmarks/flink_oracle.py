"""Apache Flink's MATCH_RECOGNIZE as an independent oracle and as a performance peer.

Not part of the CI test suite: it needs PyFlink (~840 MB with its JVM jars) in a virtualenv of its
own, outside the repository, and Java 17 on the PATH. Nothing is added to pyproject.toml.

Install (once, ~3 minutes; pip caches the wheels)::

    python3 -m venv /work/flinkenv            # or /tmp/flinkenv if /work is not writable
    /work/flinkenv/bin/pip install 'apache-flink==2.3.*'

Run (from the repository, with the project's own interpreter; PyFlink runs in a subprocess of the
venv's interpreter and the two exchange JSON and CSV files in a temporary directory)::

    python3 benchmarks/flink_oracle.py --cases 300 --seed 1          # differential mode
    python3 benchmarks/flink_oracle.py --throughput                  # performance peer
    python3 benchmarks/flink_oracle.py ... --flink-python /tmp/flinkenv/bin/python
    python3 benchmarks/flink_oracle.py --cases 300 --seed 3 --exclusive-reluctant   # see below
    python3 benchmarks/flink_oracle.py --cases 300 --seed 2 --shrink     # minimise disagreements
    python3 benchmarks/flink_oracle.py --repro case.json   # {"sql": ..., "events": [[k, ts, price, prev_price], ...]}

Each Flink job costs a few seconds of planning and scheduling, so cases run 40-75 to a job
(UNION ALL of one MATCH_RECOGNIZE per case, each over its own CSV-backed table, measures packed
with JSON_ARRAY); a job that fails is re-run case by case. 300 cases take about 5 minutes.

Differential mode generates random sorted event streams (a few keys, integer prices, event time
in epoch ms, strictly increasing over the whole stream so that a zero-delay watermark never makes
a row late in Flink) and random patterns in the subset where Flink follows the SQL standard:

* concatenation of distinct variables, quantifiers ``+ * {n} {n,} {n,m}`` and reluctant ``*? +?``;
  no greedy ``?``, no ``|``, no PERMUTE or exclusion; always an explicit AFTER MATCH SKIP clause
  (``TO FIRST v`` / ``TO LAST v`` only for a variable that must match and that some mandatory
  variable precedes, so the skip never lands on the match's first row);
* no greedy quantifier that can end the match (a mandatory variable must follow it);
* Flink's greedy quantifiers never backtrack (a row that satisfies the loop is never given to the
  next variable), so every variable that can directly follow a greedy one has a condition that
  excludes the greedy one's: each condition is ``price BETWEEN lo AND hi AND (...)`` and those
  ranges are disjoint for such pairs;
* conditions: current-row comparisons (Flink has no PREV, so both engines get a precomputed
  ``prev_price`` column, the key's previous price; a key's first row has prev_price = price),
  ``LAST(v.price, n)``, ``FIRST(v.x)``, aggregates SUM/COUNT/AVG/MIN/MAX over a variable, and
  references to other variables (possibly not yet matched: NULL); SQL three-valued logic;
* MEASURES: FIRST/LAST of variables' ts and price, COUNT, SUM (sometimes AVG/MIN/MAX);
  optional ``WITHIN INTERVAL 'n' SECOND``.

Prices are integers; Flink's column is DOUBLE (Flink's AVG over an integer column is an integer:
a documented deviation this harness keeps out of the way).

End of input. Our engine ends every partial match at end of input and reports each start row's
best match so far; Flink keeps partial matches waiting for ever and, because it releases a match
only when no partial match that started earlier is still alive, can also hold back completed
matches. Comparing only matches that end before each key's last event is *not* exact: a pending
partial match at the end changes which matches Flink releases, and our end-of-input flush changes
where the next search starts (AFTER MATCH SKIP), which can change earlier-ending matches too.
Instead, every key gets a final sentinel event (price -1) that no variable accepts (every
condition requires price >= 0): it kills every partial match in both engines, so after it neither
engine has anything pending and both outputs are final. The sentinel itself can neither start nor
extend a match, so it changes no match of the standard's semantics.

Each case also goes through the brute-force reference matcher of the test suite
(tests/reference.py, the standard by backtracking) with conditions evaluated by this file's own
small evaluator, which shares no code with either engine. A disagreement is classified by who
agrees with the reference: ours != reference -> suspected bug here; Flink != reference and
ours == reference -> a Flink deviation (or a harness issue to check by hand).

Known Flink deviation found this way (not in docs/semantics.md's table): reluctant quantifiers.
Flink runs every branch of ``*?`` / ``+?`` and, per start row, releases whichever match it
completes (or releases) first; when several matches of one start row are released together (they
end on the same row, or they wait behind a partial match that started earlier and is still
alive) it picks the one where the reluctant variable took the most rows, not the fewest. Minimal
repros (price column; prev_price unused; B/C exclusive so the greedy B+ is safe)::

    PATTERN (A*? B+ C) DEFINE A AS A.price >= 0, B AS B.price >= 5, C AS C.price <= 4 AND C.price >= 0
    prices 5, 5, 1, -1: standard A={}, B={r1,r2}, C=r3; Flink A={r1}, B={r2}, C=r3

    PATTERN (A+? B) DEFINE A AS A.price >= 1, B AS B.price >= 0 AND FIRST(A.price) >= 5
    prices 1, 5, 5, 5, 5, 5, 4, -1 (SKIP PAST LAST ROW): standard (A=r1,B=r2) (A=r3,B=r4)
    (A=r5,B=r6); Flink (A=r1,B=r2) (A={r3,r4},B=r5): the partial match from r0 never completes
    but stays alive until the sentinel, so later matches wait and Flink then prefers more A rows.

``run_flink_model`` models the first kind (earliest end, ties to the most reluctant rows) and
labels matching disagreements. ``--exclusive-reluctant`` also makes a reluctant variable exclude
its followers, which keeps the deviation out (the subset where Flink agrees with the standard).

Throughput mode: ``A B+ C`` (B: price < prev_price, C: price > prev_price, mutually exclusive)
over 100 keys and 1,000,000 events (integer random walks). Flink reads the events from a CSV
file and writes matches to a CSV file sink (no Python round trip per row); its events/s is the
slope between two input sizes (JVM start-up and job submission cancel out). Ours runs the same
events as Arrow batches. Both must find the same number of matches. Writes
benchmarks/results/flink_peer.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_FLINK_PYTHON = os.environ.get("FLINK_PYTHON") or next(
    (p for p in ("/work/flinkenv/bin/python", "/tmp/flinkenv/bin/python") if os.path.exists(p)),
    "/work/flinkenv/bin/python",
)

# ===================================================================== expressions
# A tiny expression tree rendered to SQL and evaluated here (SQL three-valued logic: None = NULL).
# ("col", var|None, col) ("last", var, col, n) ("first", var, col) ("agg", fn, var, col)
# ("const", c) ("add"|"sub", a, b) ("cmp", op, a, b) ("isnull", a) ("and"|"or", a, b)


def sql(e: tuple) -> str:
    t = e[0]
    if t == "col":
        return f"{e[1]}.{e[2]}" if e[1] else e[2]
    if t == "last":
        return f"LAST({e[1]}.{e[2]}, {e[3]})" if e[3] else f"LAST({e[1]}.{e[2]})"
    if t == "first":
        return f"FIRST({e[1]}.{e[2]})"
    if t == "agg":
        return f"{e[1]}({e[2]}.{e[3]})"
    if t == "const":
        return str(e[1])
    if t in ("add", "sub"):
        return f"{sql(e[1])} {'+' if t == 'add' else '-'} {sql(e[2])}"
    if t == "cmp":
        return f"{sql(e[2])} {e[1]} {sql(e[3])}"
    if t == "isnull":
        return f"{sql(e[1])} IS NULL"
    if t in ("and", "or"):
        return f"({sql(e[1])} {t.upper()} {sql(e[2])})"
    raise ValueError(e)


_OPS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "=": lambda a, b: a == b, "<>": lambda a, b: a != b}


def evaluate(e: tuple, rows: list[dict], by_var: dict[str, list[int]], cur: int | None) -> Any:
    """Value of e; by_var maps a variable to its rows (running: includes the current row)."""
    t = e[0]
    if t == "col":
        if e[1] is None:
            return rows[cur][e[2]]
        idx = by_var.get(e[1], [])
        return rows[idx[-1]][e[2]] if idx else None
    if t == "last":
        idx = by_var.get(e[1], [])
        return rows[idx[-1 - e[3]]][e[2]] if len(idx) > e[3] else None
    if t == "first":
        idx = by_var.get(e[1], [])
        return rows[idx[0]][e[2]] if idx else None
    if t == "agg":
        vals = [rows[i][e[3]] for i in by_var.get(e[2], [])]
        fn = e[1]
        if fn == "COUNT":
            return len(vals)
        if not vals:
            return None
        return {"SUM": sum, "MIN": min, "MAX": max, "AVG": lambda v: sum(v) / len(v)}[fn](vals)
    if t == "const":
        return e[1]
    if t in ("add", "sub"):
        a, b = evaluate(e[1], rows, by_var, cur), evaluate(e[2], rows, by_var, cur)
        if a is None or b is None:
            return None
        return a + b if t == "add" else a - b
    if t == "cmp":
        a, b = evaluate(e[2], rows, by_var, cur), evaluate(e[3], rows, by_var, cur)
        return None if a is None or b is None else _OPS[e[1]](a, b)
    if t == "isnull":
        return evaluate(e[1], rows, by_var, cur) is None
    if t == "and":
        a, b = evaluate(e[1], rows, by_var, cur), evaluate(e[2], rows, by_var, cur)
        if a is False or b is False:
            return False
        return None if a is None or b is None else True
    if t == "or":
        a, b = evaluate(e[1], rows, by_var, cur), evaluate(e[2], rows, by_var, cur)
        if a is True or b is True:
            return True
        return None if a is None or b is None else False
    raise ValueError(e)


# ===================================================================== case generation

QUANTS = {  # text -> (low, high, greedy)
    "": (1, 1, True), "+": (1, None, True), "*": (0, None, True), "*?": (0, None, False),
    "+?": (1, None, False),
}
VARS = ["A", "B", "C", "D"]


def quant_of(q: str) -> tuple[int, int | None, bool]:
    if q in QUANTS:
        return QUANTS[q]
    inner = q.strip("{}")
    if "," not in inner:
        return int(inner), int(inner), True
    lo, hi = inner.split(",")
    return int(lo), (int(hi) if hi else None), True


def is_greedy_choice(q: str) -> bool:
    lo, hi, greedy = quant_of(q)
    return greedy and (hi is None or hi > lo)


def gen_pattern(rng: random.Random) -> list[tuple[str, str]]:
    while True:
        n = rng.choice([1, 2, 2, 3, 3, 3, 4, 4])
        names = VARS[:n]
        qs = []
        for i in range(n):
            last = i == n - 1
            opts = ["", "", "", "+?", "*?"] + ([] if last else ["+", "+", "*", "{n,}", "{n,m}"]) + ["{n}"]
            q = rng.choice(opts)
            if q == "{n}":
                q = "{%d}" % rng.randint(1, 3)
            elif q == "{n,}":
                q = "{%d,}" % rng.randint(0, 2)
            elif q == "{n,m}":
                lo = rng.randint(0, 2)
                q = "{%d,%d}" % (lo, lo + rng.randint(1, 3))
            qs.append(q)
        pat = list(zip(names, qs))
        mins = [quant_of(q)[0] for _, q in pat]
        if sum(mins) == 0:
            continue
        # a greedy choice needs a mandatory variable right after it (Flink refuses a greedy
        # quantifier at the end and "Optional pattern cannot be preceded by greedy pattern")
        if any(is_greedy_choice(q) and (i + 1 == n or mins[i + 1] == 0) for i, (_, q) in enumerate(pat)):
            continue
        return pat


def followers(pat: list[tuple[str, str]], i: int) -> list[str]:
    """Variables that can take the row right after a row of pat[i] (other than pat[i] itself)."""
    out = []
    for v, q in pat[i + 1:]:
        out.append(v)
        if quant_of(q)[0] > 0:
            break
    return out


def gen_guards(rng: random.Random, pat: list[tuple[str, str]], pmax: int,
               exclusive_reluctant: bool = False) -> dict[str, tuple[int, int]] | None:
    excl = [(v, w) for i, (v, q) in enumerate(pat)
            if is_greedy_choice(q) or (exclusive_reluctant and q.endswith("?")) for w in followers(pat, i)]
    for _ in range(200):
        g = {}
        for v, _ in pat:
            if rng.random() < 0.5:
                g[v] = (0, pmax)
            else:
                w = rng.randint(pmax // 3, pmax)
                a = rng.randint(0, pmax - w)
                g[v] = (a, a + w)
        for v, w in excl:
            (a1, b1), (a2, b2) = g[v], g[w]
            if b1 < a2 or b2 < a1:
                continue
            lo, hi = max(a1, a2), min(b1, b2)
            c = rng.randint(lo, hi + 1)  # v below c, w from c (or the other way round)
            if rng.random() < 0.5:
                g[v], g[w] = (a1, min(b1, c - 1)), (max(a2, c), b2)
            else:
                g[v], g[w] = (max(a1, c), b1), (a2, min(b2, c - 1))
        if all(lo <= hi for lo, hi in g.values()) and all(
            g[v][1] < g[w][0] or g[w][1] < g[v][0] for v, w in excl
        ):
            return g
    return None


def gen_term(rng: random.Random, v: str, others: list[str], before: list[str], pmax: int) -> tuple:
    op = rng.choice(["<", "<=", ">", ">=", "<>", "="] if rng.random() < 0.2 else ["<", "<=", ">", ">="])
    c = ("const", rng.randint(0, pmax))
    # usually a variable matched before v; sometimes a later one (NULL while not matched yet)
    u = rng.choice(before) if before and rng.random() < 0.9 else (rng.choice(others) if others else v)
    kinds = ["cur", "cur", "const", "last", "lastnull", "lastnull", "agg", "agg"]
    kinds += ["ref", "ref", "ref", "ts"] if before else ["ref"]
    kind = rng.choice(kinds)
    me = ("col", v if rng.random() < 0.8 else None, "price")
    if kind == "cur":
        return ("cmp", op, me, ("col", v if me[1] else None, "prev_price"))
    if kind == "const":
        return ("cmp", op, me, c)
    if kind == "last":
        return ("cmp", op, ("col", v, "price"), ("last", v, "price", rng.randint(1, 2)))
    if kind == "lastnull":
        prev = ("last", v, "price", 1)
        return ("or", ("isnull", prev), ("cmp", op, ("col", v, "price"), prev))
    if kind == "agg":
        fn = rng.choice(["SUM", "COUNT", "AVG", "MIN", "MAX"])
        w = v if rng.random() < 0.7 else u
        if fn == "SUM":
            bound = ("const", rng.randint(pmax, 4 * pmax))
        elif fn == "COUNT":
            bound = ("const", rng.randint(1, 4))
        else:
            bound = c
        return ("cmp", op, ("agg", fn, w, "price"), bound)
    if kind == "ref":
        form = rng.random()
        if form < 0.4:
            return ("cmp", op, me, ("col", u, "price"))
        if form < 0.7:
            return ("cmp", op, me, ("add", ("first", u, "price"), ("const", rng.randint(-3, 3))))
        return ("cmp", op, me, ("sub", ("col", u, "price"), ("const", rng.randint(0, 3))))
    # ts: time since another variable's first row
    return ("cmp", "<", ("sub", ("col", v, "ts"), ("first", u, "ts")), ("const", rng.randint(500, 4000)))


def gen_case(rng: random.Random, cid: int, exclusive_reluctant: bool = False) -> dict | None:
    pat = gen_pattern(rng)
    pmax = rng.choice([6, 10, 20])
    guards = gen_guards(rng, pat, pmax, exclusive_reluctant)
    if guards is None:
        return None
    names = [v for v, _ in pat]
    define = {}
    for i, v in enumerate(names):
        gl, gh = guards[v]
        g = ("and", ("cmp", ">=", ("col", v, "price"), ("const", gl)), ("cmp", "<=", ("col", v, "price"), ("const", gh)))
        r = rng.random()
        others, before = [w for w in names if w != v], names[:i]
        if r < 0.35:
            extra = None
        elif r < 0.8:
            extra = gen_term(rng, v, others, before, pmax)
        else:
            extra = (rng.choice(["and", "or", "or"]), gen_term(rng, v, others, before, pmax),
                     gen_term(rng, v, others, before, pmax))
        define[v] = g if extra is None else ("and", g, extra)
    measures = []
    for v in names:
        for m in (("first", v, "ts"), ("last", v, "ts"), ("first", v, "price"), ("last", v, "price"),
                  ("agg", "COUNT", v, "price"), ("agg", "SUM", v, "price"), ("agg", "AVG", v, "price"),
                  ("agg", "MIN", v, "price"), ("agg", "MAX", v, "price")):
            if rng.random() < (0.35 if m[0] != "agg" or m[1] in ("COUNT", "SUM") else 0.1):
                measures.append(("last", v, m[2], 0) if m[0] == "last" else m)
    if len(measures) < 2:
        measures = [("first", names[0], "ts"), ("last", names[-1], "ts", 0)] + measures
    mins = [quant_of(q)[0] for _, q in pat]
    skips = ["PAST LAST ROW", "PAST LAST ROW", "TO NEXT ROW", "TO NEXT ROW"]
    for i, v in enumerate(names):
        if mins[i] > 0 and any(m > 0 for m in mins[:i]):
            skips += [f"TO FIRST {v}", f"TO LAST {v}"]
    skip = rng.choice(skips)
    within = rng.choice([None, None, None, rng.randint(1, 8) * 1000])
    # events
    nkeys = rng.choice([1, 1, 2, 3])
    keys = [f"k{j}" for j in range(nkeys)]
    counts = {k: rng.randint(4, 40) for k in keys}
    order = [k for k in keys for _ in range(counts[k])]
    rng.shuffle(order)
    events, last_price, t = [], {}, 1000
    walk = rng.random() < 0.5
    for k in order:
        t += rng.randint(1, 1500)
        if walk and k in last_price:
            p = min(pmax, max(0, last_price[k] + rng.randint(-3, 3)))
        else:
            p = rng.randint(0, pmax)
        events.append({"k": k, "ts": t, "price": p, "prev_price": last_price.get(k, p)})
        last_price[k] = p
    for k in keys:  # the sentinel: no variable accepts price -1
        t += rng.randint(1, 1500)
        events.append({"k": k, "ts": t, "price": -1, "prev_price": last_price[k]})
    return {"cid": cid, "pattern": pat, "define": define, "measures": measures, "skip": skip,
            "within": within, "events": events}


def pattern_text(pat) -> str:
    return " ".join(v + q for v, q in pat)


def mr_body(case: dict, order_col: str) -> str:
    meas = ", ".join(f"{sql(m)} AS m{i}" for i, m in enumerate(case["measures"]))
    within = f" WITHIN INTERVAL '{case['within'] // 1000}' SECOND" if case["within"] else ""
    define = ", ".join(f"{v} AS {sql(c)}" for v, c in case["define"].items())
    return (f"PARTITION BY k ORDER BY {order_col} MEASURES {meas} AFTER MATCH SKIP {case['skip']} "
            f"PATTERN ({pattern_text(case['pattern'])}){within} DEFINE {define}")


def ours_sql(case: dict) -> str:
    return f"SELECT * FROM ev MATCH_RECOGNIZE ({mr_body(case, 'ts')})"


def flink_sql(case: dict, table: str = "ev") -> str:
    return f"SELECT * FROM {table} MATCH_RECOGNIZE ({mr_body(case, 'rt')})"


# ===================================================================== the three matchers


def norm(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return round(float(v), 6) + 0.0
    return v


def norm_row(k: str, vals: list) -> tuple:
    return (k, *(norm(v) for v in vals))


def run_ours(case: dict, batches: int = 1, seed: int = 0) -> list[tuple]:
    from cep.engine import Engine
    from patterns.rules import parse_rule_text

    eng = Engine([parse_rule_text(ours_sql(case), "r")])
    ev = case["events"]
    rows = []
    if batches <= 1:
        out = eng.process(ev)
        rows += out.matches
        assert not out.late and not out.errors, (out.late, out.errors)
    else:
        import pyarrow as pa

        rr = random.Random(seed)
        cuts = sorted(rr.sample(range(1, len(ev)), min(batches - 1, len(ev) - 1)))
        for a, b in zip([0] + cuts, cuts + [len(ev)]):
            part = ev[a:b]
            out = eng.process(pa.Table.from_pylist(part))
            assert not out.late and not out.errors, (out.late, out.errors)
            rows += out.matches
    rows += eng.finish().matches
    n = len(case["measures"])
    return [norm_row(r["k"], [r[f"m{i}"] for i in range(n)]) for r in rows]


def run_reference(case: dict) -> list[tuple]:
    sys.path.insert(0, str(REPO))
    from patterns import ast as A
    from tests.reference import reference_matches

    items = []
    for v, q in case["pattern"]:
        lo, hi, greedy = quant_of(q)
        items.append(A.PVar(v) if q == "" else A.PQuant(A.PVar(v), lo, hi, greedy))
    pattern = A.PSeq(tuple(items))
    skip = case["skip"]
    mode, svar = {"PAST LAST ROW": ("PAST_LAST_ROW", None), "TO NEXT ROW": ("TO_NEXT_ROW", None)}.get(
        skip, ("TO_FIRST" if skip.startswith("TO FIRST") else "TO_LAST", {skip.split()[-1]}))
    out = []
    keys = list(dict.fromkeys(e["k"] for e in case["events"]))
    for k in keys:
        rows = [e for e in case["events"] if e["k"] == k]

        def cond(var, i, asg, rows=rows):
            by_var: dict[str, list[int]] = {}
            for r, v, _ in asg:
                by_var.setdefault(v, []).append(r)
            return evaluate(case["define"][var], rows, by_var, i) is True

        for asg in reference_matches(len(rows), pattern, cond, mode, svar, [r["ts"] for r in rows], case["within"]):
            by_var = {}
            for r, v, _ in asg:
                by_var.setdefault(v, []).append(r)
            out.append(norm_row(k, [evaluate(m, rows, by_var, None) for m in case["measures"]]))
    return out


def run_flink_model(case: dict) -> list[tuple]:
    """A model of what Flink was observed to do (for classifying disagreements only).

    Flink runs every branch of a reluctant quantifier and releases, per start row, the match that
    completes first; when several complete on the same row it releases the one that took the
    reluctant loops the most (repro: PATTERN (A*? B+ C), see the module doc). So: among all matches
    from a start row, the earliest end row; ties broken by the preference order with every
    reluctant quantifier read as greedy. Skips as in the standard.
    """
    sys.path.insert(0, str(REPO))
    from patterns import ast as A
    from tests import reference as R

    items = []
    for v, q in case["pattern"]:
        lo, hi, _ = quant_of(q)
        items.append(A.PVar(v) if q == "" else A.PQuant(A.PVar(v), lo, hi, True))
    pattern = A.PSeq(tuple(items))
    skip = case["skip"]
    out = []
    for k in dict.fromkeys(e["k"] for e in case["events"]):
        rows = [e for e in case["events"] if e["k"] == k]
        ts = [r["ts"] for r in rows]

        def cond(var, i, asg, rows=rows):
            by_var: dict[str, list[int]] = {}
            for r, v, _ in asg:
                by_var.setdefault(v, []).append(r)
            return evaluate(case["define"][var], rows, by_var, i) is True

        def ok_time(asg, i):
            return case["within"] is None or not asg or ts[i] - ts[asg[0][0]] < case["within"]

        ctx = (len(rows), cond, ok_time)
        s = 0
        while s < len(rows):
            best = None
            for end, asg in R._gen(pattern, s, (), ctx):
                if best is None or end < best[0]:
                    best = (end, asg)
            if best is None:
                s += 1
                continue
            end, asg = best
            by_var = {}
            for r, v, _ in asg:
                by_var.setdefault(v, []).append(r)
            out.append(norm_row(k, [evaluate(m, rows, by_var, None) for m in case["measures"]]))
            if skip == "PAST LAST ROW":
                s = end
            elif skip == "TO NEXT ROW":
                s = s + 1
            else:
                vr = by_var.get(skip.split()[-1], [])
                t = (vr[0] if skip.startswith("TO FIRST") else vr[-1]) if vr else s + 1
                s = t if t > s else s + 1
    return out


def run_flink(cases: list[dict], flink_python: str, workdir: Path, chunk: int, parallelism: int = 1) -> dict:
    """Run every case through Flink in one worker process; {cid: {"rows": [...], "error": str|None}}."""
    spec_cases = []
    for c in cases:
        csv = workdir / f"ev_{c['cid']}.csv"
        with open(csv, "w") as f:
            for e in c["events"]:
                f.write(f"{e['k']},{e['ts']},{e['price']},{e['prev_price']}\n")
        spec_cases.append({"cid": c["cid"], "csv": str(csv), "body": mr_body(c, "rt"), "n": len(c["measures"])})
    spec = {"mode": "diff", "cases": spec_cases, "chunk": chunk, "parallelism": parallelism,
            "out": str(workdir / "flink_out.json")}
    spec_path = workdir / "flink_spec.json"
    spec_path.write_text(json.dumps(spec))
    subprocess.run([flink_python, __file__, "--flink-worker", str(spec_path)], check=True)
    res = json.loads((workdir / "flink_out.json").read_text())
    out = {}
    for cid, r in res.items():
        rows = [norm_row(k, json.loads(j)) for k, j in r["rows"]]
        out[int(cid)] = {"rows": rows, "error": r["error"]}
    return out


# ===================================================================== the Flink worker (venv side)


def _flink_env(parallelism: int):
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", str(parallelism))
    return env


def _ddl(table: str, csv: str) -> str:
    return (f"CREATE TEMPORARY TABLE {table} (k STRING, ts BIGINT, price DOUBLE, prev_price DOUBLE, "
            f"rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '0' SECOND) "
            f"WITH ('connector'='filesystem', 'path'='{csv}', 'format'='csv')")


def flink_worker_diff(spec: dict) -> None:
    env = _flink_env(spec["parallelism"])
    results: dict[int, dict] = {}
    queries = {}
    for c in spec["cases"]:
        cid, table = c["cid"], f"ev_{c['cid']}"
        env.execute_sql(_ddl(table, c["csv"]))
        mlist = ", ".join(c.get("names") or [f"m{i}" for i in range(c["n"])])
        q = (f"SELECT {cid} AS cid, k, JSON_ARRAY({mlist} NULL ON NULL) AS j FROM {table} "
             f"MATCH_RECOGNIZE ({c['body']})")
        try:
            env.explain_sql(q)
            queries[cid] = q
        except Exception as e:  # noqa: BLE001 - Flink refuses the statement: reported per case
            results[cid] = {"rows": [], "error": "plan: " + _first_line(e)}

    def run(qs: list[str]) -> list[tuple]:
        with env.execute_sql(" UNION ALL ".join(qs)).collect() as it:
            return [(r[0], r[1], r[2]) for r in it]

    ids = list(queries)
    for s in range(0, len(ids), spec["chunk"]):
        part = ids[s:s + spec["chunk"]]
        t0 = time.time()
        try:
            got = {cid: [] for cid in part}
            for cid, k, j in run([queries[c] for c in part]):
                got[cid].append((k, j))
            for cid in part:
                results[cid] = {"rows": got[cid], "error": None}
        except Exception:  # noqa: BLE001 - isolate the failing case(s)
            for cid in part:
                try:
                    results[cid] = {"rows": [(k, j) for _, k, j in run([queries[cid]])], "error": None}
                except Exception as e:  # noqa: BLE001
                    results[cid] = {"rows": [], "error": "run: " + _first_line(e)}
        print(f"flink: cases {s + 1}-{s + len(part)} of {len(ids)} in {time.time() - t0:.1f}s", file=sys.stderr, flush=True)
    Path(spec["out"]).write_text(json.dumps(results))


def _first_line(e: Exception) -> str:
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    interesting = [ln for ln in lines if "Exception" in ln or "Error" in ln]
    return (interesting[-1] if interesting else (lines[0] if lines else repr(e)))[:500]


def flink_worker_throughput(spec: dict) -> None:
    env = _flink_env(spec["parallelism"])
    out: dict[str, Any] = {"runs": []}

    def job(name: str, csv: str, select: str, sink_cols: str) -> tuple[float, int]:
        sink_dir = tempfile.mkdtemp(prefix="flink_sink_", dir=spec["tmp"])
        env.execute_sql("DROP TEMPORARY TABLE IF EXISTS src")
        env.execute_sql("DROP TEMPORARY TABLE IF EXISTS snk")
        env.execute_sql(_ddl("src", csv))
        env.execute_sql(f"CREATE TEMPORARY TABLE snk ({sink_cols}) WITH ('connector'='filesystem', "
                        f"'path'='{sink_dir}', 'format'='csv')")
        t0 = time.perf_counter()
        env.execute_sql(f"INSERT INTO snk {select}").wait()
        secs = time.perf_counter() - t0
        lines = 0
        files = [os.path.join(d, f) for d, _, fs in os.walk(sink_dir) for f in fs]
        for p in files:  # committed part files (and in-progress ones, which start with a dot)
            with open(p, "rb") as f:
                lines += sum(1 for _ in f)
        print(f"flink: {name}: {secs:.2f}s, {lines} rows", file=sys.stderr, flush=True)
        return secs, lines

    mr = f"SELECT k, t0, bottom, t1 FROM src MATCH_RECOGNIZE ({spec['body']})"
    mr_cols = "k STRING, t0 BIGINT, bottom BIGINT, t1 BIGINT"
    scan = "SELECT k, ts FROM src WHERE price < -1000000"
    job("warm-up", spec["warmup_csv"], mr, mr_cols)
    for r in spec["runs"]:
        best = None
        for rep in range(spec["repeats"]):
            s, n = job(f"match {r['n']} events (#{rep + 1})", r["csv"], mr, mr_cols)
            best = (s, n) if best is None or s < best[0] else best
        sbest = min(job(f"scan {r['n']} events (#{rep + 1})", r["csv"], scan, "k STRING, ts BIGINT")[0]
                    for rep in range(spec["repeats"]))
        out["runs"].append({"events": r["n"], "match_seconds": best[0], "matches": best[1], "scan_seconds": sbest})
    Path(spec["out"]).write_text(json.dumps(out))


# ===================================================================== differential driver


def differential(args) -> int:
    rng = random.Random(args.seed)
    cases = []
    cid = 0
    while len(cases) < args.cases:
        c = gen_case(rng, cid, args.exclusive_reluctant)
        cid += 1
        if c is not None:
            cases.append(c)
    t0 = time.time()
    ours, ref, batched_mismatch = {}, {}, []
    for c in cases:
        try:
            ours[c["cid"]] = {"rows": run_ours(c), "error": None}
        except Exception as e:  # noqa: BLE001 - reported
            ours[c["cid"]] = {"rows": [], "error": f"{type(e).__name__}: {e}"}
        else:
            alt = run_ours(c, batches=4, seed=c["cid"])
            if Counter(alt) != Counter(ours[c["cid"]]["rows"]):
                batched_mismatch.append(c["cid"])
        ref[c["cid"]] = run_reference(c)
    t_ours = time.time() - t0
    with tempfile.TemporaryDirectory(prefix="flink_oracle_") as tmp:
        t0 = time.time()
        flink = run_flink(cases, args.flink_python, Path(tmp), args.chunk)
        t_flink = time.time() - t0
    report: dict[str, Any] = {"seed": args.seed, "cases": len(cases), "disagreements": [], "flink_errors": [],
                              "ours_errors": [], "batching_inconsistent": batched_mismatch}
    stats = Counter()
    for c in cases:
        i = c["cid"]
        f, o, r = flink[i], ours[i], ref[i]
        stats["matches_ref"] += len(r)
        if f["error"]:
            report["flink_errors"].append({"cid": i, "error": f["error"], "sql": flink_sql(c)})
            stats["flink_error"] += 1
            continue
        if o["error"]:
            report["ours_errors"].append({"cid": i, "error": o["error"], "sql": ours_sql(c)})
            stats["ours_error"] += 1
            continue
        fo, oo, ro = Counter(f["rows"]), Counter(o["rows"]), Counter(r)
        if fo == oo:
            stats["agree"] += 1
            if oo != ro:
                stats["agree_but_reference_differs"] += 1
            continue
        if oo == ro and fo == Counter(run_flink_model(c)):
            verdict = "flink differs from the standard (reference == ours); flink == reluctant-tie model"
        elif oo == ro:
            verdict = "flink differs from the standard (reference == ours)"
        elif fo == ro:
            verdict = "ours differs from the standard (reference == flink): suspected bug"
        else:
            verdict = "all three differ"
        stats[verdict] += 1
        report["disagreements"].append({
            "cid": i, "verdict": verdict, "sql_ours": ours_sql(c), "sql_flink": flink_sql(c),
            "events": [[e["k"], e["ts"], e["price"], e["prev_price"]] for e in c["events"]],
            "only_ours": _ms(oo - fo), "only_flink": _ms(fo - oo),
            "ours": sorted(o["rows"], key=str), "flink": sorted(f["rows"], key=str),
            "reference": sorted(r, key=str),
        })
    if args.shrink:
        by_id = {c["cid"]: c for c in cases}
        for d in report["disagreements"]:
            m = shrink(by_id[d["cid"]], args.flink_python)
            with tempfile.TemporaryDirectory(prefix="flink_oracle_") as tmp:
                fm = run_flink([m], args.flink_python, Path(tmp), 1)[m["cid"]]
            d["minimal"] = {"sql_ours": ours_sql(m),
                            "events": [[e["k"], e["ts"], e["price"], e["prev_price"]] for e in m["events"]],
                            "ours": run_ours(m), "flink": fm["rows"], "reference": run_reference(m)}
    report["summary"] = dict(stats)
    report["seconds"] = {"ours_and_reference": t_ours, "flink": t_flink}
    out = Path(args.report) if args.report else RESULTS / "flink_diff.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({"summary": report["summary"], "batching_inconsistent": batched_mismatch,
                      "flink_errors": len(report["flink_errors"]), "report": str(out)}, indent=1))
    for d in report["disagreements"]:
        print(f"\n--- case {d['cid']}: {d['verdict']}\n{d['sql_ours']}\n  only ours:  {d['only_ours']}\n"
              f"  only flink: {d['only_flink']}")
    for d in report["flink_errors"][:20]:
        print(f"\n--- case {d['cid']}: Flink error {d['error']}\n{d['sql']}")
    return 0


def _ms(c: Counter) -> list:
    return sorted(c.elements(), key=str)


# ===================================================================== shrinking


def _with_events(case: dict, events: list[dict], cid: int) -> dict:
    """The case over a subset of its rows, prev_price recomputed per key (sentinels kept last)."""
    last: dict[str, int] = {}
    out = []
    for e in events:
        out.append({**e, "prev_price": last.get(e["k"], e["price"])})
        last[e["k"]] = e["price"]
    return {**case, "cid": cid, "events": out}


def shrink(case: dict, flink_python: str, max_rounds: int = 12) -> dict:
    """Remove rows (runs of rows first, then single rows) and measures while ours and Flink still
    disagree; every round's candidates run in one Flink job."""
    cur = case
    for _ in range(max_rounds):
        ev = cur["events"]
        body = [i for i, e in enumerate(ev) if e["price"] >= 0]
        cands = []
        keys = list(dict.fromkeys(e["k"] for e in ev))
        if len(keys) > 1:
            for k in keys:
                cands.append([e for e in ev if e["k"] != k])
        size = max(1, len(body) // 2)
        while size >= 1 and len(cands) < 120:
            for a in range(0, len(body), size):
                drop = set(body[a:a + size])
                cands.append([e for i, e in enumerate(ev) if i not in drop])
            size //= 2
        if len(cur["measures"]) > 1:
            for j in range(len(cur["measures"])):
                cands.append(("measure", j))
        built = []
        for n, c in enumerate(cands):
            if isinstance(c, tuple):
                ms = cur["measures"][:c[1]] + cur["measures"][c[1] + 1:]
                built.append({**cur, "cid": n, "measures": ms})
            else:
                built.append(_with_events(cur, c, n))
        with tempfile.TemporaryDirectory(prefix="flink_shrink_") as tmp:
            fl = run_flink(built, flink_python, Path(tmp), chunk=len(built))
        better = None
        for b in built:  # candidates are ordered largest removal first
            f = fl[b["cid"]]
            if f["error"]:
                continue
            if Counter(run_ours(b)) != Counter(f["rows"]):
                better = b
                break
        if better is None:
            break
        cur = better
    return cur


# ===================================================================== repro mode


def repro(args) -> int:
    """Run one hand-written statement (ORDER BY ts, FROM ev) over given events in ours and Flink.

    The JSON file holds {"sql": "...", "events": [[k, ts, price, prev_price], ...]}; Flink gets the
    same statement with ORDER BY rt. Add the sentinel rows yourself if you want them.
    """
    from cep.engine import Engine
    from patterns.match_recognize import parse_statement
    from patterns.rules import parse_rule_text

    spec = json.loads(Path(args.repro).read_text())
    text = spec["sql"]
    names = [m.name for m in parse_statement(text).measures]
    events = [dict(zip(("k", "ts", "price", "prev_price"), e)) for e in spec["events"]]
    eng = Engine([parse_rule_text(text, "r")])
    rows = eng.process(events).matches + eng.finish().matches
    ours = [norm_row(r["k"], [r[n] for n in names]) for r in rows]
    body = text[text.index("MATCH_RECOGNIZE") + len("MATCH_RECOGNIZE"):].strip()[1:-1].replace("ORDER BY ts", "ORDER BY rt")
    with tempfile.TemporaryDirectory(prefix="flink_repro_") as tmp:
        csv = Path(tmp) / "ev_0.csv"
        csv.write_text("".join(f"{e['k']},{e['ts']},{e['price']},{e['prev_price']}\n" for e in events))
        wspec = {"mode": "diff", "chunk": 1, "parallelism": 1, "out": f"{tmp}/out.json",
                 "cases": [{"cid": 0, "csv": str(csv), "body": body, "n": len(names), "names": names}]}
        Path(tmp, "spec.json").write_text(json.dumps(wspec))
        subprocess.run([args.flink_python, __file__, "--flink-worker", f"{tmp}/spec.json"], check=True)
        res = json.loads(Path(tmp, "out.json").read_text())["0"]
    flink = [norm_row(k, json.loads(j)) for k, j in res["rows"]]
    print(json.dumps({"columns": ["k", *names], "ours": ours, "flink": flink, "flink_error": res["error"],
                      "same": Counter(ours) == Counter(flink)}, indent=1))
    return 0


# ===================================================================== throughput driver

TP_BODY = ("PARTITION BY k ORDER BY {order} MEASURES A.ts AS t0, LAST(B.ts) AS bottom, C.ts AS t1 "
           "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) "
           "DEFINE B AS B.price < B.prev_price, C AS C.price > C.prev_price")


def make_events(n: int, keys: int, seed: int):
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    k = rng.integers(0, keys, n)
    steps = rng.integers(-2, 3, n)
    price = np.empty(n, dtype=np.int64)
    prev = np.empty(n, dtype=np.int64)
    # per-key random walks, vectorised: cumulative sum of steps within each key
    order = np.argsort(k, kind="stable")
    ks = k[order]
    cs = np.cumsum(steps[order])
    starts = np.r_[0, np.flatnonzero(np.diff(ks)) + 1]
    base = np.repeat(cs[starts] - steps[order][starts], np.diff(np.r_[starts, n]))
    walk = 1000 + cs - base
    price[order] = walk
    prev_sorted = np.r_[walk[0], walk[:-1]]
    prev_sorted[starts] = walk[starts]
    prev[order] = prev_sorted
    ts = np.arange(n, dtype=np.int64) + 1000
    return pa.table({"k": pa.array([f"k{x}" for x in k]), "ts": ts, "price": price, "prev_price": prev})


def throughput(args) -> int:
    import pyarrow.csv as pacsv

    from cep.engine import Engine
    from patterns.rules import parse_rule_text

    n_big, n_small, keys = args.events, args.events // 5, 100
    table = make_events(n_big, keys, seed=42)
    sql_ours = f"SELECT * FROM ev MATCH_RECOGNIZE ({TP_BODY.format(order='ts')})"
    res: dict[str, Any] = {
        "pattern": sql_ours, "keys": keys, "events": n_big,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_at_start": os.getloadavg()},
        "note": "best of --repeats runs per size; Flink's events/s is the slope between the two sizes; "
                "other processes on the machine (loadavg) inflate both engines' times",
    }
    # ours: Arrow batches, only the processing loop timed
    ours = {}
    for n in (n_small, n_big):
        best = None
        for _ in range(args.repeats):
            eng = Engine([parse_rule_text(sql_ours, "vshape")])
            batches = table.slice(0, n).to_batches(max_chunksize=8192)
            t0 = time.perf_counter()
            m = 0
            for b in batches:
                m += len(eng.process(b).matches)
            m += len(eng.finish().matches)
            secs = time.perf_counter() - t0
            best = (secs, m) if best is None or secs < best[0] else best
        ours[n] = {"seconds": best[0], "matches": best[1], "events_per_s": n / best[0]}
        print(f"ours: {n} events {best[0]:.2f}s, {best[1]} matches", file=sys.stderr, flush=True)
    res["ours"] = {"runs": [{"events": n, **v} for n, v in ours.items()],
                   "events_per_s": ours[n_big]["events_per_s"],
                   "events_per_s_slope": (n_big - n_small) / (ours[n_big]["seconds"] - ours[n_small]["seconds"])}
    with tempfile.TemporaryDirectory(prefix="flink_peer_") as tmp:
        runs = []
        for n in (n_small, n_big):
            csv = os.path.join(tmp, f"ev_{n}.csv")
            pacsv.write_csv(table.slice(0, n), csv, pacsv.WriteOptions(include_header=False, quoting_style="none"))
            runs.append({"n": n, "csv": csv})
        warm = os.path.join(tmp, "warm.csv")
        pacsv.write_csv(table.slice(0, 50_000), warm, pacsv.WriteOptions(include_header=False, quoting_style="none"))
        flink_res = {}
        for par in args.parallelism:
            spec = {"mode": "throughput", "body": TP_BODY.format(order="rt"), "runs": runs, "warmup_csv": warm,
                    "repeats": args.repeats, "parallelism": par, "tmp": tmp, "out": os.path.join(tmp, "out.json")}
            spec_path = os.path.join(tmp, "spec.json")
            Path(spec_path).write_text(json.dumps(spec))
            subprocess.run([args.flink_python, __file__, "--flink-worker", spec_path], check=True)
            fr = json.loads(Path(spec["out"]).read_text())["runs"]
            small, big = fr[0], fr[1]
            slope = (big["events"] - small["events"]) / (big["match_seconds"] - small["match_seconds"])
            scan_slope = (big["events"] - small["events"]) / (big["scan_seconds"] - small["scan_seconds"])
            # the scan job is mostly fixed cost: its slope is only usable when clearly positive
            per_event_match = 1 / slope - 1 / scan_slope if scan_slope > 0 else None
            flink_res[f"parallelism_{par}"] = {
                "runs": fr,
                "events_per_s_slope": slope,
                "scan_only_events_per_s_slope": scan_slope,
                "events_per_s_excluding_csv_scan": 1 / per_event_match if per_event_match and per_event_match > 0 else None,
                "events_per_s_end_to_end_big": big["events"] / big["match_seconds"],
                "same_matches_as_ours": big["matches"] == ours[n_big]["matches"] and small["matches"] == ours[n_small]["matches"],
            }
    res["flink"] = {"version": "apache-flink 2.3 (PyFlink, local mini-cluster, Java " + _java() + ")", **flink_res}
    p1 = flink_res[f"parallelism_{args.parallelism[0]}"]
    res["ratio_ours_over_flink"] = {
        "vs_flink_slope": res["ours"]["events_per_s"] / p1["events_per_s_slope"],
        "vs_flink_excluding_csv_scan": (res["ours"]["events_per_s"] / p1["events_per_s_excluding_csv_scan"]
                                        if p1["events_per_s_excluding_csv_scan"] else None),
    }
    res["machine"]["loadavg_at_end"] = os.getloadavg()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "flink_peer.json"
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    return 0


def _java() -> str:
    try:
        r = subprocess.run(["java", "-version"], capture_output=True, text=True)
        return r.stderr.splitlines()[0].split('"')[1]
    except Exception:  # noqa: BLE001
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=0, help="differential mode: number of random cases")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--exclusive-reluctant", action="store_true",
                    help="also make a reluctant variable exclude the variables that may follow it "
                         "(keeps out Flink's reluctant deviation, see the module doc)")
    ap.add_argument("--shrink", action="store_true", help="minimise each disagreement (more Flink jobs)")
    ap.add_argument("--chunk", type=int, default=40, help="cases per Flink job (UNION ALL)")
    ap.add_argument("--report", help="differential report JSON (default benchmarks/results/flink_diff.json)")
    ap.add_argument("--throughput", action="store_true", help="performance peer mode")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--parallelism", type=int, nargs="+", default=[1], help="Flink parallelism(s) to measure")
    ap.add_argument("--flink-python", default=DEFAULT_FLINK_PYTHON, help="the venv's python with apache-flink")
    ap.add_argument("--repro", help="JSON {sql, events}: one statement in ours and in Flink")
    ap.add_argument("--flink-worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.flink_worker:
        spec = json.loads(Path(args.flink_worker).read_text())
        (flink_worker_diff if spec["mode"] == "diff" else flink_worker_throughput)(spec)
        return 0
    sys.path.insert(0, str(REPO))
    if args.repro:
        return repro(args)
    if args.throughput:
        return throughput(args)
    if args.cases:
        return differential(args)
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
