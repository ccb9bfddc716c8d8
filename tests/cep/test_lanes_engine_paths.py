"""Lane-shaped rules run together by the engine (sharing each batch), with caps, WITHIN and a restore: the rows of every other path and of the brute force."""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.lanes as lanes
from cep.compiled import numba_allowed
from cep.engine import Engine, StateLimits
from cep.operator import PatternOperator
from patterns.match_recognize import parse_statement
from patterns.rules import parse_rules
from tests.cep.test_lanes import _counters
from tests.cep.test_lanes_many_keys import _check_retained, key_walks
from tests.reference import reference_matches

# One comparison of a condition: (left, op, right), each operand ("cur", col) the current row,
# ("prev", col) the row before it in the partition, ("start", col) the start row S,
# ("last_d", col) the last D row so far, or ("lit", value). The rule text and the brute force's
# Python condition are both made from it, so the reference shares nothing with the engine.
Operand = tuple[str, Any]
Cmp = tuple[Operand, str, Operand]

_PY_OPS: dict[str, Callable[[Any, Any], bool]] = {"<": operator.lt, "<=": operator.le, ">": operator.gt,
                                                   ">=": operator.ge, "=": operator.eq, "<>": operator.ne}
_BIG = 2**53

# U's condition besides ``U.x > PREV(U.x)``: two operands compared, each the current row, a value
# the lane keeps (the start row's, the last D row's) or a literal. ``v`` is NULL on some rows and
# sometimes an integer at 2**53 or its float; ``w`` holds integers just below and at 2**53 mixed
# with floats; ``s`` is text (the lane path hands such rows to the general path).
U_CMPS: list[Cmp] = [
    (("cur", "x"), ">=", ("start", "x")),  # the V-shape's LAST(U.x) >= S.x (written LAST(U.x) below)
    (("cur", "x"), "<", ("start", "x")),
    (("start", "x"), "<=", ("cur", "x")),
    (("cur", "x"), "=", ("start", "x")),
    (("cur", "x"), "<>", ("start", "x")),
    (("start", "x"), ">", ("cur", "x")),
    (("cur", "v"), ">=", ("start", "v")),
    (("cur", "v"), "<>", ("start", "v")),
    (("start", "v"), "=", ("cur", "v")),
    (("start", "x"), "<", ("lit", 12)),
    (("lit", 12), ">=", ("start", "x")),
    (("start", "v"), "<>", ("lit", 50)),
    (("start", "v"), ">", ("lit", 9.5)),
    (("cur", "x"), ">=", ("last_d", "x")),
    (("last_d", "x"), "<", ("start", "x")),
    (("cur", "w"), ">=", ("start", "w")),
    (("cur", "w"), "=", ("start", "w")),
    (("start", "w"), "<>", ("cur", "w")),
    (("cur", "s"), ">=", ("start", "s")),
    (("cur", "s"), "<>", ("start", "s")),
]
# D's conditions: falling rows (exclusive with U's rising rows), with a comparison against the
# start row the lane loop reads too, or a condition that a rising row may pass as well (the runs of
# a start row then fork)
D_CONDS: list[list[Cmp]] = [
    [(("cur", "x"), "<", ("prev", "x"))],
    [(("cur", "x"), "<", ("prev", "x")), (("cur", "x"), "<", ("start", "x"))],
    [(("cur", "x"), "<=", ("prev", "x")), (("cur", "x"), "<>", ("start", "x"))],
    [(("cur", "x"), "<", ("start", "x"))],
]
# S's: none (every row can start a match: the operator's quiet-key pass returns at once), or
# row-local ones that leave keys with nothing to start
S_CONDS: list[list[Cmp]] = [[], [], [(("cur", "x"), ">", ("lit", 12))], [(("cur", "v"), "<", ("lit", 30))]]
PATTERNS = {"S D{2,} U+": "PAST_LAST_ROW", "S D+ U+": "PAST_LAST_ROW", "S D{1,} U": "PAST_LAST_ROW",
            "S D* U+": "PAST_LAST_ROW", "S D+ U+?": "PAST_LAST_ROW"}
# row lookups (PREV(S.x, 2): the rows kept before a match's start row), or aggregates
MEASURES = ["FIRST(S.ts) AS t0, LAST(U.ts) AS t1, S.x AS sx, LAST(D.x) AS bottom, PREV(S.x, 2) AS before",
            "FIRST(S.ts) AS t0, LAST(U.ts) AS t1, COUNT(D.*) AS nd, AVG(U.x) AS au, S.w AS sw"]


@dataclass(frozen=True)
class LaneRule:
    """One rule of the lane shape: its conditions as comparisons, so that both its text and its
    brute-force conditions come from them."""

    name: str
    pattern: str
    s: list[Cmp]
    d: list[Cmp]
    u: list[Cmp]
    measures: str
    skip: str = "PAST_LAST_ROW"
    within_ms: int | None = None
    cap: int | None = None
    on_cap: str = "drop_oldest"

    def sql(self) -> str:
        defines = [f"{var} AS {' AND '.join(_sql_cmp(c, var) for c in conds)}"
                   for var, conds in (("S", self.s), ("D", self.d), ("U", self.u)) if conds]
        within = f" WITHIN INTERVAL '{self.within_ms}' MILLISECOND" if self.within_ms is not None else ""
        skip = {"PAST_LAST_ROW": "PAST LAST ROW", "TO_NEXT_ROW": "TO NEXT ROW"}[self.skip]
        return (f"SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES {self.measures} "
                f"AFTER MATCH SKIP {skip} PATTERN ({self.pattern}){within} DEFINE {', '.join(defines)})")

    def yaml(self) -> str:
        lines = [f"  - name: {self.name}"]
        if self.cap is not None:
            lines += [f"    max_partial_matches: {self.cap}", f"    on_cap: {self.on_cap}"]
        return "\n".join(lines + ["    sql: |", "      " + self.sql()])


def _sql_operand(o: Operand, var: str, first: bool) -> str:
    kind, arg = o
    if kind == "cur":
        # (the V-shape writes its current row as LAST(U.x): the same value, another spelling)
        return f"LAST({var}.{arg})" if first and var == "U" and arg == "x" else f"{var}.{arg}"
    if kind == "prev":
        return f"PREV({var}.{arg})"
    if kind == "start":
        return f"S.{arg}"
    if kind == "last_d":
        return f"LAST(D.{arg})"
    return repr(arg)


def _sql_cmp(c: Cmp, var: str) -> str:
    left, op, right = c
    return f"{_sql_operand(left, var, True)} {op} {_sql_operand(right, var, False)}"


def _py_value(o: Operand, cols: dict[str, list], i: int, asg: tuple) -> Any:
    kind, arg = o
    if kind == "lit":
        return arg
    if kind == "cur":
        return cols[arg][i]
    if kind == "prev":
        return cols[arg][i - 1] if i > 0 else None
    if kind == "start":
        return cols[arg][asg[0][0]]
    d_rows = [r for r, v, _ in asg if v == "D"]
    return cols[arg][d_rows[-1]] if d_rows else None


def _py_holds(conds: list[Cmp], cols: dict[str, list], i: int, asg: tuple) -> bool:
    """SQL's AND of comparisons: true only when every comparison is (a NULL operand makes it unknown)."""
    for left, op, right in conds:
        a, b = _py_value(left, cols, i, asg), _py_value(right, cols, i, asg)
        if a is None or b is None or not _PY_OPS[op](a, b):
            return False
    return True


def _brute(rule: LaneRule, events: list[dict]) -> list[tuple]:
    """(key, first time, last time) of every match of ``rule``, per key by the brute-force matcher."""
    pattern = parse_statement(rule.sql()).pattern
    conds = {"S": rule.s, "D": rule.d, "U": rule.u}
    by_key: dict[Any, list[dict]] = {}
    for e in events:
        by_key.setdefault(e["k"], []).append(e)
    out: list[tuple] = []
    for key, evs in by_key.items():
        cols = {c: [e[c] for e in evs] for c in ("x", "v", "w", "s")}
        ts = [e["ts"] for e in evs]

        def cond(var: str, i: int, asg: tuple, cols: dict = cols) -> bool:
            return _py_holds(conds[var], cols, i, asg)

        for asg in reference_matches(len(evs), pattern, cond, rule.skip, ts=ts, within=rule.within_ms):
            out.append((str(key), ts[asg[0][0]], ts[asg[-1][0]]))
    return sorted(out)


def _events(rnd: random.Random, light: int, heavy: int, heavy_rows: int) -> list[dict]:
    """``light`` keys of 1 to 6 rows and ``heavy`` keys of ``heavy_rows`` rows interleaved at random
    (some keys text, some integers), ``x`` a trending walk (falls and rises of several rows) with a
    few floats and NULLs, ``v`` small with NULLs and now and then an integer past 2**53, ``w``
    integers just below 2**53 (exact as floats), their floats, NULLs and now and then one past
    2**53, ``s`` text or NULL. Values the lane loop cannot take exactly are rare, so that it
    steps most rows of the rules that read them."""
    out = []
    for i, k, xk in key_walks(rnd, light, heavy, heavy_rows):
        r = rnd.random()
        xv: Any = xk if r >= 0.04 else (xk + 0.5 if r < 0.03 else None)
        r = rnd.random()
        vv: Any = rnd.randrange(1, 100)
        if r < 0.08:
            vv = None
        elif r < 0.085:
            vv = _BIG + 1  # (not exact as a float: the general path compares it)
        r = rnd.random()
        wv: Any = _BIG - 24 + xk  # (exact as a float)
        if r < 0.15:
            wv = float(wv)
        elif r < 0.155:
            wv = _BIG + xk
        elif r < 0.17:
            wv = None
        sv = None if rnd.random() < 0.05 else "abcde"[min(4, xk // 5)]
        key: Any = k if k % 3 else f"k{k}"
        out.append({"k": key, "ts": i, "x": xv, "v": vv, "w": wv, "s": sv})
    return out


def _rules(rnd: random.Random, n: int) -> list[LaneRule]:
    out = []
    first = rnd.randrange(len(U_CMPS))  # (consecutive comparisons: each draw tries several kinds)
    for j in range(n):
        pattern = rnd.choice(sorted(PATTERNS))
        cap = rnd.choice([None, None, 2, 3, 5, 8])
        out.append(LaneRule(
            name=f"r{j}", pattern=pattern, s=rnd.choice(S_CONDS), d=rnd.choice(D_CONDS),
            u=[(("cur", "x"), ">", ("prev", "x")), U_CMPS[(first + j) % len(U_CMPS)]], measures=rnd.choice(MEASURES),
            # (a rule the lane path does not take, beside the ones it does, now and then)
            skip="TO_NEXT_ROW" if rnd.random() < 0.1 else PATTERNS[pattern],
            within_ms=rnd.choice([None, None, 40, 300]), cap=cap, on_cap=rnd.choice(["drop_oldest", "skip_key"])))
    return out


def _run_engine(rules: list[LaneRule], batches: list[list[dict]], snap_at: int | None, limits: StateLimits | None,
                lane_path: bool = True, one_call: bool = True, check: bool = False) -> tuple[list[dict], dict]:
    """The rows of ``rules`` run by one engine over ``batches`` (its snapshot restored into a fresh
    engine after batch ``snap_at``), on the lane path or not and, on it, with all keys of a batch in
    one call or each by its own; and each rule's counters."""
    old = lanes.USE_LANES, lanes.USE_BATCH
    lanes.USE_LANES, lanes.USE_BATCH = lane_path, one_call
    try:
        text = "rules:\n" + "\n".join(r.yaml() for r in rules) + "\n"

        def make() -> Engine:
            eng = Engine(parse_rules(text))
            if limits is not None:
                eng.set_state_limits(limits)
            return eng

        eng = make()
        rows: list[dict] = []
        for b, evs in enumerate(batches):
            out = eng.process(evs)
            assert not out.errors
            rows += out.matches
            if check:
                for op in eng.operators.values():
                    _check_retained(op)
            if b == snap_at:
                data = eng.snapshot()
                eng = make()
                eng.restore(data)
        rows += eng.finish().matches
        return rows, {name: _counters(op) for name, op in eng.operators.items()}
    finally:
        lanes.USE_LANES, lanes.USE_BATCH = old


def _batches(events: list[dict], cuts: list[int]) -> list[list[dict]]:
    bounds = [0, *sorted(set(cuts)), len(events)]
    return [events[lo:hi] for lo, hi in zip(bounds, bounds[1:])]


def _lane_rules(rules: list[LaneRule]) -> int:
    """How many of ``rules`` the lane path takes (with the compiled loop when numba is allowed)."""
    old = lanes.USE_LANES
    lanes.USE_LANES = True
    try:
        n = 0
        for r in rules:
            plan = PatternOperator(parse_rules(r.sql()).rules[0].compiled, name=r.name).automaton.lanes
            n += plan is not None and (plan.kernel is not None or not numba_allowed())
        return n
    finally:
        lanes.USE_LANES = old


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), nrules=st.integers(3, 6), light=st.integers(20, 120), heavy=st.integers(1, 3),
       heavy_rows=st.integers(100, 350), ncuts=st.integers(1, 14), snap=st.booleans(),
       total=st.sampled_from([None, None, 6, 40]))
def test_rules_sharing_batches_agree_with_every_path(seed, nrules, light, heavy, heavy_rows, ncuts, snap, total):
    """Several lane-shaped rules in one engine (sharing each batch's order, columns and masks), keys
    of hundreds of rows beside keys of a few, batches cutting runs, a restore in the middle, per-key
    caps, WITHIN and an engine-wide cap on partial matches: the rows (in order) and counters of the
    general path, of each rule run alone (each key by its own call), and, for every rule whose
    caps never bit, the brute force's matches."""
    rnd = random.Random(seed)
    rules = _rules(rnd, nrules)
    assert _lane_rules(rules)  # (most draws have several; a draw without any would test nothing here)
    events = _events(rnd, light, heavy, heavy_rows)
    cuts = [rnd.randrange(1, len(events)) for _ in range(ncuts)]
    batches = _batches(events, cuts)
    snap_at = rnd.randrange(0, len(batches)) if snap else None
    limits = StateLimits(max_partial_matches_total=total) if total is not None else None

    shared, c_shared = _run_engine(rules, batches, snap_at, limits, check=True)
    general, c_general = _run_engine(rules, batches, None, limits, lane_path=False)
    assert shared == general
    assert c_shared == c_general
    for r in rules:
        alone, c_alone = _run_engine([r], batches, None, limits, one_call=False)
        assert [m for m in shared if m["rule"] == r.name] == alone
        assert c_alone[r.name] == c_shared[r.name]
        _, _, _, cap_hits, dropped, errors, _ = c_shared[r.name]
        assert not errors
        if not cap_hits and not dropped:
            got = sorted((str(m["k"]), m["t0"], m["t1"]) for m in alone)
            assert got == _brute(r, events)


@pytest.mark.skipif(not numba_allowed(), reason="finish_all, _match_steps and _compare are the compiled loop's (numba)")
def test_the_engine_reaches_the_compiled_lane_paths(monkeypatch):
    """A fixed draw of the test above reaches what it is there for: the one call for all keys of a
    batch finished by ``LaneBatch.finish_all`` with its recorded matches' rows read at once
    (``_match_steps``), keys that still need the engine (``LaneBatch.finish``), U conditions
    compared without the interpreter (``_simple_program``), and the operator's quiet-key pass with
    keys to advance."""
    seen = {"finish_all": 0, "finish": 0, "steps": 0, "quiet": 0}
    real_all, real_finish, real_steps = lanes.LaneBatch.finish_all, lanes.LaneBatch.finish, lanes._match_steps
    real_quiet = PatternOperator._quiet_keys

    def finish_all(self: Any, *args: Any) -> None:
        seen["finish_all"] += 1
        real_all(self, *args)

    def finish(self: Any, *args: Any) -> None:
        seen["finish"] += 1
        real_finish(self, *args)

    def match_steps(*args: Any) -> Any:
        got = real_steps(*args)
        seen["steps"] += bool(got[0])
        return got

    def quiet_keys(self: Any, cand_all: Any, starts: Any, *args: Any) -> list[int]:
        got = real_quiet(self, cand_all, starts, *args)
        seen["quiet"] += len(got) < len(starts)
        return got

    monkeypatch.setattr(lanes.LaneBatch, "finish_all", finish_all)
    monkeypatch.setattr(lanes.LaneBatch, "finish", finish)
    monkeypatch.setattr(lanes, "_match_steps", match_steps)
    monkeypatch.setattr(PatternOperator, "_quiet_keys", quiet_keys)
    rnd = random.Random(5)
    rules = _rules(rnd, 6)
    events = _events(rnd, 100, 2, 300)
    batches = _batches(events, list(range(111, len(events), 111)))
    shared, _ = _run_engine(rules, batches, 3, StateLimits(max_partial_matches_total=40), check=True)
    general, _ = _run_engine(rules, batches, None, StateLimits(max_partial_matches_total=40), lane_path=False)
    assert shared == general and len(shared) > 20
    assert all(seen.values()), seen
    compared = 0
    for r in rules:
        plan = PatternOperator(parse_rules(r.sql()).rules[0].compiled, name=r.name).automaton.lanes
        if plan is not None and plan.kernel is not None:
            compared += len(lanes._simple_program(plan.kernel.prog_b)) > 0
    assert compared
