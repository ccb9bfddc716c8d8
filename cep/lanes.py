"""Many live start rows at once: a linear pattern's partial matches of a key as numpy arrays.

For a pattern of the shape ``S R{n,m} B{p,q}`` (a first variable taken once, then two quantified
variables, each greedy or reluctant; ``S R{9,} B`` and ``S D{2,} U+`` are two) every partial match
that starts at a row is one run, or several runs that share their rows: its start row, its
automaton state (a tuple of program counters, numbered once per rule: the plan's *states*) and
how many ``R`` and ``B`` rows it took. A condition that reads only the current row, the start
row's columns (``S.close``), the last row of the other variable (``LAST(R.close)`` in ``B``) and
running ``COUNT``/``SUM``/``AVG`` aggregates is then a function of a few numbers per start row,
so one numpy expression evaluates it for every live start row of the key instead of one Python
evaluation per partial match. Which of ``R`` and ``B`` a row passes decides, by a table made
once from the automaton (``LanePlan.nxt``), the start row's next state, whether it found a
match, or that its runs fork (a row both extends ``R`` and begins or extends ``B`` on two runs
with different rows): such start rows go back to node chains for that row, so the table keeps
the general path's preference exactly. Rows, preference, skip, caps, ``WITHIN`` and snapshots
are the general path's: start rows are still :class:`cep.nfa.Attempt` objects in
``KeyState.attempts`` (their ``threads`` a :class:`LaneRun` while on this path), and a partial
match becomes a node chain (the general path's form) whenever something needs one: a snapshot,
``cep state``, a row whose values are not numbers, a fork, or a match to output whose measures
are more than row lookups (the compiled loop records its matches: :func:`_emit_rec`).

About 1,950 lines in one module because the plan, the numpy stepping and the handover to and from
node chains are one mechanism (a lane's arrays and its Attempt must agree at every row); the
compiled loop and its condition bytecode live apart in :mod:`cep._lanes_kernel` and
:mod:`cep._expr_kernel`.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from operator import itemgetter
from typing import Any, Callable

import numpy as np

from cep import _expr_kernel as EK
from cep.compiled import numba_allowed
from cep.expressions import Node
from patterns import ast as A
from patterns.compiler import OP_VAR

# cep.nfa imports this module: its classes are named here, not imported (no import circle); the
# automaton hands over its Attempt class (PatternAutomaton.attempt_class)
Attempt = Any
KeyState = Any
PatternAutomaton = Any
StepStats = Any

__all__ = ["LanePlan", "LaneRun", "LaneBatch", "lane_plan", "step_key_lanes", "step_batch", "lane_threads", "USE_LANES"]

# The switch: CEP_LANES=0 in the environment (or this set False before an engine is built) keeps
# every rule on the general path, so tests and benchmarks can compare both.
USE_LANES = os.environ.get("CEP_LANES", "1") != "0"
# The compiled stepping (numba, cep/_lanes_kernel.py) for rules it takes; False (or CEP_NO_NUMBA=1)
# keeps the numpy stepping, the reference it is tested against. Read when an engine is built.
USE_KERNEL = True

# Whether the keys of a batch on the compiled stepping step in one call (step_batch); CEP_LANES_BATCH=0
# (or this set False) steps each key by its own call, the form the batch is tested against.
USE_BATCH = os.environ.get("CEP_LANES_BATCH", "1") != "0"

# the most automaton states a plan may have (R{n,}: about n); longer chains stay general
_MAX_CHAIN = 4096
_EXACT = float(2**53)  # numbers beyond this are not exact as float64: such rows take the general path
# a pattern without a loop whose matches have fewer rows than this keeps few start rows per key
# alive: the general path serves it
_MIN_BOUND = 16
# LanePlan.nxt: the start row's runs all end; they fork into runs with different rows
DEAD, FORK = -1, -2
# which variable a row is taken as (LanePlan.tk, the rows of LanePlan.upd): none, R, B
TAKE_NONE, TAKE_R, TAKE_B = 0, 1, 2


class _Odd(Exception):
    """A value the vectorised form cannot take exactly (a string, a bool, a huge integer)."""


class _Inexact(_Odd):
    """An intermediate result (a sum, difference or product, a running SUM) reached 2**53: float64
    may have rounded what the general path computes in exact integers, so the key goes there."""


def _check(v: Any, sums: bool = False) -> Any:
    """``v`` (a lane array or one number), raising :class:`_Inexact` when some magnitude is 2**53 or more.

    A float64 result of exact operands is exact while its magnitude stays below 2**53 (rounding is
    monotone and 2**53 is a float64, so an exact result at or past it cannot round below it);
    NaN is NULL and passes. Float data past 2**53 is sent to the general path too (same answer,
    slower): telling it from integer data would cost a type per value."""
    if sums:  # a running sum is never NULL: NaN (inf - inf) goes general too, as in the compiled loop
        if not (np.abs(v) < _EXACT).all():
            raise _Inexact(v)
    elif isinstance(v, np.ndarray):
        if (np.abs(v) >= _EXACT).any():  # (NaN is NULL and compares False)
            raise _Inexact(v)
    elif abs(v) >= _EXACT:
        raise _Inexact(v)
    return v


class LaneRun:
    """The runs of one start row on this path: its index into its key's arrays (:class:`_Lanes`).

    Truthy while alive (dead start rows hold the general path's empty list); ``len`` is the
    number of runs the general path would hold for it (counters and caps count runs).
    """

    __slots__ = ("lanes", "i")

    def __init__(self, lanes: _Lanes, i: int):
        self.lanes = lanes
        self.i = i

    @property
    def k(self) -> int:
        """The R rows it took."""
        return int(self.lanes.k[self.i])

    @property
    def kb(self) -> int:
        """The B rows it took."""
        return int(self.lanes.kb[self.i])

    @property
    def sid(self) -> int:
        """Its state (an index into ``LanePlan.states``)."""
        return int(self.lanes.sid[self.i])

    def __bool__(self) -> bool:
        return True

    def __len__(self) -> int:
        return int(self.lanes.plan.nthreads[self.lanes.sid[self.i]])

    def vals(self) -> tuple:
        return tuple(float(x) for x in self.lanes.S[self.i])

    def aggs(self) -> tuple[tuple, tuple]:
        lanes, i = self.lanes, self.i
        return (tuple(float(lanes.sums[x][i]) for x in lanes.plan.aggs),
                tuple(int(lanes.cnts[x][i]) for x in lanes.plan.aggs))


class LanePlan:
    """What the path needs of an automaton: its variables, its states and their table, the conditions."""

    def __init__(self, a: PatternAutomaton, s: int, r: int, b: int, states: list[tuple[int, ...]],
                 nxt: np.ndarray, tk: np.ndarray, bst: np.ndarray, loops: bool):
        self.s, self.r, self.b = s, r, b
        self.states = states  # the runs (pcs) of a start row on this path; 0: after its S row
        self.sid_of = {x: i for i, x in enumerate(states)}
        self.loops = loops  # whether a start row can stay alive for ever (a state repeats)
        # by state and by which of R (1) and B (2) the row passes (0-3): the next state (or DEAD,
        # FORK), the variable the surviving runs took the row as (TAKE_*), and whether the row
        # completes a match: 0 no, 1 one that ends with B rows (its R rows: those taken before the
        # row), 2 one that ends with R rows (the row is one of them)
        self.nxt, self.tk, self.bst = nxt, tk, bst
        # the same, one number per state and row (the compiled loop's one lookup): (next + 2) << 4 |
        # variable << 2 | match, at 4 * state + which of R and B passed
        self.dec = (((nxt + 2) << 4) | (tk << 2) | bst).reshape(-1).astype(np.int64)
        self.can_fork = bool((nxt == FORK).any())
        self.r_completes = bool((bst == 2).any())  # whether a row taken as R can complete a match
        self.has_r = np.array([any(a.ins[pc][1] == r for pc in x) for x in states], dtype=bool)
        self.has_b = np.array([any(a.ins[pc][1] == b for pc in x) for x in states], dtype=bool)
        self.nthreads = np.array([len(x) for x in states], dtype=np.int64)
        # (variable, row column) of each value a lane keeps: the start row's columns (set at the
        # start) and the last R / B row's columns the conditions read (set when a row is taken)
        self.lcols: list[tuple[int, int]] = []
        self.aggs: list[int] = []  # aggregate slots the conditions read
        self.cur_cols: list[int] = []  # current-row columns (for the odd-value check)
        self.cond: dict[int, Callable[[_Env], Any] | None] = {}
        self.zero_sums: tuple = ()
        self.zero_cnts: tuple = ()
        self.kernel: _KernelPlan | None = None  # the compiled stepping's data, when it takes the rule
        # cep.nfa.FastMatch when every measure is a row lookup (PatternAutomaton.row_plan): a match
        # the compiled loop recorded is output without its node chain
        self.fast_match: Any = None
        # each row's variable of a match, by (R rows, rows after S): one list for the many matches
        # of the same shape (FastMatch only reads it)
        self.vids: dict[tuple[int, int], list[int]] = {}


class _Env:
    """What one vectorised condition reads: the row, the live lanes' values."""

    __slots__ = ("row", "svals", "sums", "cnts", "add_sum", "add_cnt", "n")

    def __init__(self) -> None:
        self.row: tuple = ()
        self.svals: dict[int, np.ndarray] = {}
        self.sums: dict[int, np.ndarray] = {}
        self.cnts: dict[int, np.ndarray] = {}
        self.add_sum: dict[int, Any] = {}  # the current row's contribution to each aggregate
        self.add_cnt: dict[int, int] = {}
        self.n = 0


def _num(v: Any) -> float:
    """A column value as a float64, NULL as NaN; anything else cannot be taken exactly."""
    if v is None:
        return np.nan
    t = type(v)
    if t is float:
        return v
    if t is int and -_EXACT <= v <= _EXACT:
        return float(v)
    raise _Odd(v)


def _transition(a: PatternAutomaton, state: tuple[int, ...], ok: int, r: int) -> tuple[list[int], int | None]:
    """The general path's step (``PatternAutomaton._advance``) of runs sharing one node in
    ``state`` by a row that passes R (``ok`` bit 1) and/or B (bit 2): the pcs that take it, in
    preference order, and the one of them that completes a match (None: no match)."""
    takers: list[int] = []
    for pc in state:
        vid, _, _, completes = a.moves[pc]
        if ok & (1 if vid == r else 2):
            takers.append(pc)
            if completes:  # every later run is less preferred than this match
                return takers, pc
    return takers, None


def lane_plan(a: PatternAutomaton) -> LanePlan | None:
    """The plan for automaton ``a``, or None when the path does not apply (see the module doc)."""
    if not USE_LANES or a.dfa or a.anchored or a.has_not or a.timeout_rows or a.no_skip:
        return None
    if a.skip.mode != "PAST_LAST_ROW" or a.max_steps is not None or a.lookahead or a.with_unmatched:
        return None
    if a.max_partial_matches < 2 or a.max_next:
        return None
    ins, moves = a.ins, a.moves
    if len(a.start_closure) != 1 or a.first_closure != a.start_closure:
        return None
    pc_s = a.start_closure[0]
    mv = moves[pc_s]
    if ins[pc_s][0] != OP_VAR or mv is None or mv[1] or mv[3] or not mv[2]:
        return None
    s = mv[0]
    # the variables after S, in the order the pattern takes them: R, then B
    order: list[int] = []
    for x in ins:
        if x[0] == OP_VAR and x[1] != s and x[1] not in order:
            order.append(x[1])
    if len(order) != 2:
        return None
    r, b = order
    states: list[tuple[int, ...]] = [mv[2]]
    index = {mv[2]: 0}
    edges: list[tuple[int, int]] = []
    rows: list[tuple[list[int], list[int], list[int]]] = []
    i = 0
    while i < len(states):
        cur = states[i]
        seen_vars: set[int] = set()
        for pc in cur:
            m = moves[pc]
            if ins[pc][0] != OP_VAR or m is None or m[1] or m[0] not in (r, b) or m[0] in seen_vars:
                return None  # one run per variable and state: a row's variable decides the run
            seen_vars.add(m[0])
        nx, tk, bs = [DEAD] * 4, [TAKE_NONE] * 4, [0] * 4
        for ok in range(4):
            takers, done = _transition(a, cur, ok, r)
            live = [pc for pc in takers if moves[pc][2]]
            if done is not None:
                bs[ok] = 1 if moves[done][0] == b else 2
            if len(live) > 1:
                nx[ok] = FORK
                continue
            if not live:
                continue
            pc = live[0]
            vid, targets = moves[pc][0], moves[pc][2]
            if vid == b and any(moves[q][0] == r for q in targets):
                return None  # R after B: the rows' variables would not follow from two counts
            if targets not in index:
                if len(states) > _MAX_CHAIN:
                    return None
                index[targets] = len(states)
                states.append(targets)
            nx[ok] = index[targets]
            tk[ok] = TAKE_R if vid == r else TAKE_B
            edges.append((i, nx[ok]))
        rows.append((nx, tk, bs))
        i += 1
    if not any(moves[pc][0] == r for st in states for pc in st):
        return None
    loops = _has_cycle(len(states), edges)
    if not loops and len(states) < _MIN_BOUND:
        return None  # few live start rows per key: numpy's per-call cost would outweigh them
    nxt = np.array([x[0] for x in rows], dtype=np.int64)
    tk_ = np.array([x[1] for x in rows], dtype=np.int64)
    bst = np.array([x[2] for x in rows], dtype=np.int64)
    plan = LanePlan(a, s, r, b, states, nxt, tk_, bst, loops)
    for vid in (r, b):
        e = a.hist_exprs[vid]
        if e is None:
            plan.cond[vid] = None
            continue
        try:
            plan.cond[vid] = _compile(e, a, plan, vid)
        except _Unsupported:
            return None
    # a value kept of the last R or B row is read from the row that is taken: check it as the row's
    for v, c in plan.lcols:
        if v != s and c not in plan.cur_cols:
            plan.cur_cols.append(c)
    plan.zero_sums, plan.zero_cnts = (0.0,) * len(plan.aggs), (0,) * len(plan.aggs)
    if getattr(a, "row_plan", None) is not None:
        plan.fast_match = a.fast_match_class
    if USE_KERNEL and a.hist[s] is None and numba_allowed():
        try:
            plan.kernel = _kernel_plan(a, plan)
        except EK.Unsupported:
            plan.kernel = None
    return plan


def _has_cycle(n: int, edges: list[tuple[int, int]]) -> bool:
    """Whether the state graph has a cycle (Kahn's algorithm leaves a node unsorted)."""
    indeg = [0] * n
    out: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        out[u].append(v)
        indeg[v] += 1
    todo = [u for u in range(n) if indeg[u] == 0]
    done = 0
    while todo:
        u = todo.pop()
        done += 1
        for v in out[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                todo.append(v)
    return done < n


class _Unsupported(Exception):
    pass


def _lcol(plan: LanePlan, var: int, col: int) -> int:
    """The index of the kept value (``var``'s last row, column ``col``), added when new."""
    key = (var, col)
    if key not in plan.lcols:
        plan.lcols.append(key)
    return plan.lcols.index(key)


def _compile(e: A.Expr, a: PatternAutomaton, plan: LanePlan, vid: int) -> Callable[[_Env], Any]:
    """Condition ``e`` of variable ``vid`` as a function of the lanes: a bool array (TRUE only).

    Only monotone connectives (AND, OR, comparisons, BETWEEN) are taken, so NULL (NaN here) can
    stand for FALSE: a NULL operand never turns a condition TRUE under them.
    """
    layout = a.layout
    s, r, b = plan.s, plan.r, plan.b

    def col_src(x: A.Column) -> Callable[[_Env], Any]:
        i = layout.column(x.name)
        vs = layout.var_set(x.var)
        if vs is None or vs == frozenset([vid]):  # the row being tested
            plan.cur_cols.append(i)
            return lambda env: _num(env.row[i]) if i < len(env.row) else np.nan
        for v in (s, r, b):
            if vs == frozenset([v]):
                # the start row's value, or the last R / B row's (NULL until one is taken: B is
                # never bound while R rows are taken)
                q = _lcol(plan, v, i)
                return lambda env: env.svals[q]
        raise _Unsupported(x)

    def val(x: A.Expr) -> Callable[[_Env], Any]:
        if isinstance(x, A.Literal):
            v = x.value
            if v is None:
                return lambda env: np.nan
            if type(v) not in (int, float) or abs(v) > _EXACT:
                raise _Unsupported(x)
            fv = float(v)
            return lambda env: fv
        if isinstance(x, A.Column):
            return col_src(x)
        if isinstance(x, A.Nav) and x.kind == "LAST" and x.offset == 0 and x.semantics == "RUNNING" \
                and isinstance(x.arg, A.Column) and x.arg.var is not None:
            return col_src(x.arg)
        if isinstance(x, A.Unary):
            f = val(x.operand)
            return (lambda env: -f(env)) if x.op == "-" else f
        if isinstance(x, A.Binary):
            lf, rf = val(x.left), val(x.right)
            lit_l = isinstance(x.left, A.Literal)
            lit_r = isinstance(x.right, A.Literal)
            # each sum, difference and product is checked (_check): past 2**53 the key goes general
            if x.op == "+":
                return lambda env: _check(lf(env) + rf(env))
            if x.op == "-":
                return lambda env: _check(lf(env) - rf(env))
            if x.op == "*" and (lit_l or lit_r):  # (a product of two columns: not taken)
                return lambda env: _check(lf(env) * rf(env))
            if x.op == "/" and lit_r and x.right.value not in (0, None):  # type: ignore[attr-defined]
                return lambda env: lf(env) / rf(env)
            raise _Unsupported(x)
        if isinstance(x, A.Agg):
            if x.semantics != "RUNNING" or x.func not in ("COUNT", "SUM", "AVG"):
                raise _Unsupported(x)
            vars_ = layout.var_set(x.var) if x.var is not None else _arg_vars(x.arg, layout)
            slot = layout.agg_slot(x.func, vars_, x.arg)
            if slot not in plan.aggs:
                plan.aggs.append(slot)
            if x.func == "COUNT":
                return lambda env: (env.cnts[slot] + env.add_cnt[slot]).astype(np.float64)
            if x.func == "SUM":
                def sum_(env: _Env) -> Any:
                    c = env.cnts[slot] + env.add_cnt[slot]
                    return np.where(c > 0, _check(env.sums[slot] + env.add_sum[slot], True), np.nan)
                return sum_

            def avg(env: _Env) -> Any:
                c = env.cnts[slot] + env.add_cnt[slot]
                q = _check(env.sums[slot] + env.add_sum[slot], True) / c  # (0/0 is NaN, x/0 inf: NULL below)
                return q if c.all() else np.where(c > 0, q, np.nan)
            return avg
        raise _Unsupported(x)

    def cond(x: A.Expr) -> Callable[[_Env], Any]:
        if isinstance(x, A.Compare):
            lf, rf, op = val(x.left), val(x.right), x.op
            if op == "<>":
                def ne(env: _Env) -> Any:
                    u, v = lf(env), rf(env)
                    return (u != v) & ~np.isnan(u) & ~np.isnan(v)
                return ne
            f = {"=": np.equal, "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}[op]
            return lambda env: f(lf(env), rf(env))
        if isinstance(x, A.Between):
            vf, lo, hi = val(x.operand), val(x.low), val(x.high)
            if x.negated:  # TRUE when the value is known to be below or above (a NULL other bound does not matter)
                def outside(env: _Env) -> Any:
                    v = vf(env)
                    return (v < lo(env)) | (v > hi(env))
                return outside
            return lambda env: (vf(env) >= lo(env)) & (vf(env) <= hi(env))
        if isinstance(x, A.Logical):
            fs = [cond(y) for y in x.args]
            if x.op == "AND":
                def and_(env: _Env) -> Any:
                    out = _full(fs[0](env), env.n)
                    for f in fs[1:]:
                        if not out.any():  # (the rest cannot make a lane TRUE)
                            break
                        out = out & f(env)
                    return out
                return and_

            def or_(env: _Env) -> Any:
                out = fs[0](env)
                for f in fs[1:]:
                    out = out | f(env)
                return out
            return or_
        raise _Unsupported(x)

    f = cond(e)
    return lambda env: _full(f(env), env.n)


def _full(v: Any, n: int) -> np.ndarray:
    """A condition's value as one bool per lane (a condition on the row alone is one bool)."""
    if isinstance(v, np.ndarray) and v.shape == (n,):
        return v
    return np.full(n, bool(v))


class _KernelPlan:
    """What the compiled stepping needs of a plan: the conditions' bytecode and integer tables."""

    def __init__(self, plan: LanePlan, xcols: list[int], progs: dict[int, EK.Program | None], agg_x: list[int],
                 upd: np.ndarray):
        empty = EK.Program(np.zeros(0, np.int64), np.zeros(0), 0)
        self.xcols = xcols  # the row columns read, in the order of the value matrix's columns
        self.prog_r = progs[plan.r] or empty
        self.prog_b = progs[plan.b] or empty
        # per kept value: the variable whose row sets it (TAKE_*, 0: the start row) and its value column
        take = {plan.s: TAKE_NONE, plan.r: TAKE_R, plan.b: TAKE_B}
        self.lvar = np.array([take[v] for v, _ in plan.lcols], dtype=np.int64)
        self.lx = np.array([xcols.index(c) for _, c in plan.lcols], dtype=np.int64)
        self.agg_x = np.array(agg_x, dtype=np.int64)  # value column of each aggregate's argument (-1: COUNT(*))
        self.upd = upd  # (S, R, B) x aggregate: whether a row taken as that variable updates it
        self.batch: tuple | None = None  # (columns, masks, times, values, masks, times) of the last batch
        self.lk: Any = None  # the compiled loop's module (imported on first use)
        self.consts: tuple = ()  # the loop's arguments that do not change
        self.Q = self.killed = self.bested = np.zeros(0, np.int64)
        self.io = np.zeros(0, np.int64)  # the loop's scalars (made with the loop; one key steps at a time)
        self.made = np.zeros((0, 6), np.int64)
        self.rec = np.zeros((0, 3), np.int64)  # the matches one call recorded (start row, last row, R rows)


def _kernel_plan(a: PatternAutomaton, plan: LanePlan) -> _KernelPlan:
    """The conditions of ``plan`` as bytecode over a value matrix (raises EK.Unsupported)."""
    layout = a.layout
    s, r, b = plan.s, plan.r, plan.b
    xcols: list[int] = []
    agg_x = [-2] * len(plan.aggs)

    def xslot(i: int) -> int:
        if i not in xcols:
            xcols.append(i)
        return xcols.index(i)

    def leaf_of(vid: int) -> Callable[[A.Expr], tuple[int, int]]:
        def leaf(x: A.Expr) -> tuple[int, int]:
            if isinstance(x, A.Nav):
                if not (x.kind == "LAST" and x.offset == 0 and x.semantics == "RUNNING"
                        and isinstance(x.arg, A.Column) and x.arg.var is not None):
                    raise EK.Unsupported(x)
                x = x.arg
            if isinstance(x, A.Column):
                i = layout.column(x.name)
                vs = layout.var_set(x.var)
                if vs is None or vs == frozenset([vid]):
                    return EK.CUR, xslot(i)
                for v in (s, r, b):
                    if vs == frozenset([v]) and (v, i) in plan.lcols:
                        return EK.START, plan.lcols.index((v, i))  # (a value the lane keeps)
                raise EK.Unsupported(x)
            if isinstance(x, A.Agg) and x.semantics == "RUNNING" and x.func in ("COUNT", "SUM", "AVG"):
                vars_ = layout.var_set(x.var) if x.var is not None else _arg_vars(x.arg, layout)
                pos = plan.aggs.index(layout.agg_slot(x.func, vars_, x.arg))
                if x.arg is None:
                    agg_x[pos] = -1
                elif isinstance(x.arg, A.Column):
                    agg_x[pos] = xslot(layout.column(x.arg.name))
                else:
                    raise EK.Unsupported(x)
                op = {"COUNT": EK.COUNT, "SUM": EK.SUM, "AVG": EK.AVG}[x.func]
                return op, pos
            raise EK.Unsupported(x)
        return leaf

    progs: dict[int, EK.Program | None] = {}
    for vid in (r, b):
        e = a.hist_exprs[vid]
        progs[vid] = EK.compile_condition(e, leaf_of(vid)) if e is not None else None
    for _, c in plan.lcols:
        xslot(c)
    if -2 in agg_x:
        raise EK.Unsupported("an aggregate no condition reads")
    upd = np.zeros((3, len(plan.aggs)), np.int8)
    for v, vid in enumerate((s, r, b)):
        for slot, _ in _updates(a, plan, vid):
            upd[v, plan.aggs.index(slot)] = 1
    return _KernelPlan(plan, xcols, progs, agg_x, upd)


# The batch's columns as arrays, by the identity of their lists: rules that share a batch's
# decoding (cep/sharing.py) share its column lists, so each column is converted once per batch
# for all of them. An entry holds its list, so the list's id cannot be reused while it is here.
_CONVERTED: dict[tuple[int, Any], tuple[list, Any]] = {}
_CONVERTED_MAX = 64


def _shared(vals: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert(vals)``, made once per list or array object (and conversion) while it is among the last few."""
    key = (id(vals), convert.__code__)
    got = _CONVERTED.get(key)
    if got is not None and got[0] is vals:
        return got[1]
    out = convert(vals)
    if len(_CONVERTED) >= _CONVERTED_MAX:
        _CONVERTED.clear()
    _CONVERTED[key] = (vals, out)
    return out


def _shared_column(vals: list) -> np.ndarray | None:
    """:func:`_clean_column`, shared by the rules that read the same column list."""
    return _shared(vals, _clean_column)


def _clean_array(arr: np.ndarray) -> np.ndarray | None:
    """:func:`_clean_column` of ``arr.tolist()``, read from the array when its type tells (float64:
    NaN there is a float NaN, never NULL; int64: exact while below 2**53), else from that list."""
    if arr.dtype == np.float64:
        return None if np.isnan(arr).any() else arr
    if arr.dtype == np.int64:
        out = arr.astype(np.float64)
        return out if not len(out) or np.abs(out).max() < _EXACT else None
    return _clean_column(arr.tolist())


def _clean_column(vals: list) -> np.ndarray | None:
    """A batch column as float64 (NULL as NaN), or None when some value is not exactly a number."""
    if not vals:
        return np.zeros(0)
    types = set(map(type, vals))
    if not types <= {float, int, type(None)}:
        return None  # strings, bools, numpy scalars: the numpy stepping checks them row by row
    out = np.array(vals, dtype=np.float64)
    nans = int(np.isnan(out).sum())
    if nans != vals.count(None):
        return None  # a float NaN is a value, not NULL, to an aggregate
    if int in types and nans < len(out) and np.nanmax(np.abs(out)) >= _EXACT:
        return None
    return out


def _arg_vars(arg: A.Expr | None, layout: Any) -> frozenset[int] | None:
    if arg is None:
        return None
    for col in A.walk_expr(arg):
        if isinstance(col, A.Column) and col.var is not None:
            return layout.var_set(col.var)
    return None



# ---------------------------------------------------------------------------------- node chains


def lane_threads(a: PatternAutomaton, st: KeyState, att: Attempt) -> list[tuple[int, Node]]:
    """The general path's runs of a start row on this path: (pc, node) in preference order."""
    lr = att.threads
    assert isinstance(lr, LaneRun)
    plan = a.lanes
    assert plan is not None
    node = _chain(a, st, att.start, lr.k, lr.kb)
    return [(pc, node) for pc in plan.states[lr.sid]]


def _chain(a: PatternAutomaton, st: KeyState, start: int, k: int, kb: int) -> Node:
    """The node chain of rows ``start``: S, then ``k`` R rows, then ``kb`` B rows."""
    plan = a.lanes
    assert plan is not None
    rows, base = st.rows, st.base
    node = a.new_node(start, plan.s, None, rows[start - base], False)
    for rno in range(start + 1, start + 1 + k + kb):
        node = a.new_node(rno, plan.r if rno <= start + k else plan.b, node, rows[rno - base], False)
    return node


def lane_match(a: PatternAutomaton, st: KeyState, att: Attempt, end: int) -> Node:
    """The node chain of a match found on this path, up to row ``end``: S, R rows, then B rows.

    How many of its rows are R rows was noted in ``att.path`` when the match was found (the start
    row may have taken more R rows since).
    """
    k = att.path if isinstance(att.path, int) else end - att.start - 1
    return _chain(a, st, att.start, k, end - att.start - k)


def _to_lane(a: PatternAutomaton, st: KeyState, att: Attempt) -> tuple[tuple, int, int, int, tuple, tuple] | None:
    """(kept values, R rows, B rows, state, sums, cnts) of a general-path start row that can go on
    this path, or None."""
    plan = a.lanes
    assert plan is not None
    th = att.threads
    if not isinstance(th, list) or not th:
        return None
    node = th[0][1]
    if node is None or any(n is not node for _, n in th):
        return None
    sid = plan.sid_of.get(tuple(pc for pc, _ in th))
    if sid is None or node.first is None:
        return None
    fb = node.first[plan.b]
    k, kb = (fb - att.start - 1, node.rno - fb + 1) if fb >= 0 else (node.rno - att.start, 0)
    if k + kb + 1 != node.n:
        return None
    sums, cnts = [], []
    for slot in plan.aggs:
        spec = a.aggs[slot]
        state = node.aggs[slot]
        try:
            if spec.func == "COUNT":
                sums.append(0.0)
                cnts.append(int(state))
            else:
                sums.append(_num(state[0]))
                cnts.append(int(state[1]))
        except _Odd:
            return None
    vals = []
    try:
        for v, c in plan.lcols:
            at = att.start if v == plan.s else node.last[v]
            row = st.rows[at - st.base] if at >= 0 else ()
            vals.append(_num(row[c] if c < len(row) else None))
    except _Odd:
        return None
    return tuple(vals), k, kb, sid, tuple(sums), tuple(cnts)


def _follow(objs: list, nl0: int, lanes: _Lanes, killed: np.ndarray, nk: int, bested: np.ndarray, nb: int,
            dead: Any) -> None:
    """Make the objects of the ``nl0`` start rows that existed before a compiled call follow what
    it did to their lanes: the ``nk`` it killed lose their threads, the ``nb`` whose best path
    moved take the new one (lanes made by the call have no object yet)."""
    if nk:
        for i in killed[:nk].tolist():
            if i < nl0:
                objs[i].threads = dead
    if nb:
        for i in bested[:nb].tolist():
            if i < nl0:
                att = objs[i]
                att.best = int(lanes.best[i])
                att.path = int(lanes.bx[i])  # (its R rows: see lane_match)


def _start_vals(row: tuple, plan: LanePlan) -> tuple:
    """The kept values of a start row's lane after its S row (the S columns; NULL for the rest)."""
    return tuple(_num(row[c] if c < len(row) else None) if v == plan.s else np.nan for v, c in plan.lcols)


# ---------------------------------------------------------------------------------- stepping


class _Lanes:
    """The arrays of one key's start rows on this path (``KeyState.lanes``), grown as rows start
    and rebuilt from the live start rows when mostly dead.

    One row per start row (a lane): its start, time, R and B rows taken, state, kept values
    (``S``, one column per ``plan.lcols``), aggregate states (``SUM``/``CNT``, one column per
    ``plan.aggs``), whether it is alive, the last row of its best match (-1: none) and that
    match's R rows (``bx``). ``svals``/``sums``/``cnts``
    are per-column views of the same memory (the numpy path); the compiled path reads the
    matrices. ``ids`` maps a start row to its lane (dead start rows keep their lane there).
    """

    def __init__(self, plan: LanePlan, cap: int):
        self.plan = plan
        self.n = 0
        self.objs: list[Attempt] = []
        self.ids: dict[int, int] = {}
        # the compiled path's queue of lane ids as it left the start rows: reused while the list
        # of start rows is the same (the engine takes start rows from the front, the resolve
        # after the head, and adds them at the end, so length, first and last tell); WITHIN
        # ending a start row outside the loop leaves its lane alive here, and the loop ends it
        # at its next row by the same test, before reading it
        self.qcache: tuple | None = None
        self.shared = False  # the arrays of all keys an operator steps in one call (step_batch)
        self._alloc(max(cap, 16))

    def _alloc(self, cap: int) -> None:
        plan = self.plan
        # (zeros: memory the system hands over zeroed, touched only where lanes are made; a shared
        # pool has room for two batches' rows, most of which a V-shape's lanes never reach)
        self.start = np.zeros(cap, np.int64)
        self.start_ts = np.zeros(cap, np.int64)
        self.k = np.zeros(cap, np.int64)
        self.kb = np.zeros(cap, np.int64)
        self.sid = np.zeros(cap, np.int64)
        self.bx = np.zeros(cap, np.int64)
        self.alive = np.zeros(cap, np.int8)
        self.best = np.full(cap, -1, np.int64)
        self.S = np.zeros((cap, len(plan.lcols)))
        self.SUM = np.zeros((cap, len(plan.aggs)))
        self.CNT = np.zeros((cap, len(plan.aggs)), np.int64)
        self._views()

    def _views(self) -> None:
        self._cols: tuple | None = None  # (made when the numpy stepping first asks: the compiled one never does)

    def _col_views(self) -> tuple:
        if self._cols is None:
            plan = self.plan
            self._cols = ({q: self.S[:, q] for q in range(len(plan.lcols))},
                          {c: self.SUM[:, q] for q, c in enumerate(plan.aggs)},
                          {c: self.CNT[:, q] for q, c in enumerate(plan.aggs)})
        return self._cols

    @property
    def svals(self) -> dict[int, np.ndarray]:
        return self._col_views()[0]

    @property
    def sums(self) -> dict[int, np.ndarray]:
        return self._col_views()[1]

    @property
    def cnts(self) -> dict[int, np.ndarray]:
        return self._col_views()[2]

    def reserve(self, more: int) -> None:
        """Room for ``more`` lanes after the ``n`` there are."""
        cap = len(self.start)
        if self.n + more <= cap:
            return
        new = max(4 * cap, self.n + more + 64)  # (x4: a key's lanes grow few times while it is busy)

        def grow(x: np.ndarray, fill: Any = 0) -> np.ndarray:
            out = np.zeros((new,) + x.shape[1:], x.dtype) if fill == 0 else np.full((new,) + x.shape[1:], fill, x.dtype)
            out[: len(x)] = x
            return out

        self.start, self.start_ts, self.k = grow(self.start), grow(self.start_ts), grow(self.k)
        self.kb, self.sid, self.bx = grow(self.kb), grow(self.sid), grow(self.bx)
        self.alive, self.best = grow(self.alive), grow(self.best, -1)
        self.S, self.SUM, self.CNT = grow(self.S), grow(self.SUM), grow(self.CNT)
        self._views()

    def add(self, att: Attempt, vals: tuple, k: int, kb: int, sid: int, sums: tuple, cnts: tuple,
            plan: LanePlan) -> int:
        self.reserve(1)
        i = self.n
        self.start[i] = att.start
        self.start_ts[i] = att.start_ts
        self.k[i] = k
        self.kb[i] = kb
        self.sid[i] = sid
        self.alive[i] = 1
        self.best[i], self.bx[i] = _best_of(att)
        self.S[i] = vals
        for q in range(len(plan.aggs)):
            self.SUM[i, q] = sums[q]
            self.CNT[i, q] = cnts[q]
        self.objs.append(att)
        self.ids[att.start] = i
        self.n += 1
        return i

    def compact(self, q: Any) -> np.ndarray:
        """Keep only lanes ``q`` (the key's start rows, in order), moved to the front in that order;
        their new ids. In place: the start rows' :class:`LaneRun` objects stay valid."""
        idx = np.asarray(q, dtype=np.int64)
        m = len(idx)
        if not m:  # (no start row queued: nothing to move)
            self.objs = []
            self.ids = {}
            self.n = 0
            self.qcache = None
            return idx
        for name in ("start", "start_ts", "k", "kb", "sid", "bx", "alive", "best", "S", "SUM", "CNT"):
            arr = getattr(self, name)
            arr[:m] = arr[idx]  # (the right side is a copy)
        objs = [self.objs[i] for i in idx.tolist()]
        for i, att in enumerate(objs):
            th = att.threads
            if type(th) is LaneRun:
                th.i = i
        self.objs = objs
        self.ids = dict(zip(self.start[:m].tolist(), range(m)))
        self.n = m
        self.qcache = None
        return np.arange(m, dtype=np.int64)

    def add_dead(self, att: Attempt) -> int:
        """A lane for a start row whose runs have all ended (only its start and best match count)."""
        self.reserve(1)
        i = self.n
        self.start[i] = att.start
        self.start_ts[i] = att.start_ts
        self.alive[i] = 0
        self.best[i], self.bx[i] = _best_of(att)
        self.objs.append(att)
        self.ids[att.start] = i
        self.n += 1
        return i


def _best_of(att: Attempt) -> tuple[int, int]:
    """A start row's best match for its lane: (its last row, -1: none; its R rows, or -1 when the
    match is a node chain, which the engine outputs itself: the compiled loop stops there)."""
    b = att.best
    if b is None:
        return -1, 0
    if not isinstance(b, int):
        return b.rno, -1
    return b, (att.path if isinstance(att.path, int) else b - att.start - 1)  # (as lane_match reads it)


def _batch_values(kp: _KernelPlan, cols, masks, ts, masks_np: np.ndarray | None = None,
                  arrays: tuple[list, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The batch's values the conditions read as one float64 matrix (row x value column), its masks
    and times as arrays; None when a value is not exactly a number. Kept for the batch's keys.
    ``masks_np``: the masks as the operator's array, when it has one (not converted back from the list);
    ``arrays``: the operator's arrays of the same columns and times, when it has them (a column is
    then converted from its array, as :func:`_clean_array` says, not from its list)."""
    got = kp.batch
    if got is not None and got[0] is cols and got[1] is masks and got[2] is ts:
        return got[3]
    out: tuple | None = None
    vals = []
    for c in kp.xcols:
        if c >= len(cols) or len(cols[c]) != len(masks):
            v = None
        elif arrays is not None and c < len(arrays[0]) and len(arrays[0][c]) == len(masks):
            v = _shared(arrays[0][c], _clean_array)
        else:
            v = _shared_column(cols[c])
        if v is None:
            break
        vals.append(v)
    else:
        if len(vals) == 1:  # (one column: a view of it, no copy)
            xb = np.ascontiguousarray(vals[0]).reshape(-1, 1)
        else:
            xb = np.ascontiguousarray(np.column_stack(vals)) if vals else np.zeros((len(masks), 0))
        if arrays is not None and arrays[1].dtype == np.int64 and len(arrays[1]) == len(ts):
            tb = np.ascontiguousarray(arrays[1])
        else:
            tb = _shared(ts, _int_times)
        mb = np.asarray(masks_np, dtype=np.int64) if masks_np is not None else np.array(masks, dtype=np.int64)
        out = (xb, mb, tb)
    kp.batch = (cols, masks, ts, out)  # (holds the lists: their ids stay theirs)
    return out


def _int_times(ts: list) -> np.ndarray:
    return np.array(ts, dtype=np.int64)


def _queue(lanes: _Lanes, attempts: list) -> list[int] | None:
    """The lane of each start row in order (dead ones get one if they have none); None when a start
    row is on the general path."""
    q: list[int] = []
    live: list[int] = []
    dead: list[int] = []
    ids, objs = lanes.ids, lanes.objs
    for att in attempts:
        th = att.threads
        if type(th) is LaneRun:
            if th.lanes is not lanes:
                return None
            q.append(th.i)
            live.append(th.i)
        elif th:
            return None
        else:
            i = ids.get(att.start)
            if i is None or objs[i] is not att:
                i = lanes.add_dead(att)
            else:  # (its match may have been found off this path since)
                lanes.best[i], lanes.bx[i] = _best_of(att)
            q.append(i)
            dead.append(i)
    lanes.alive[live] = 1
    lanes.alive[dead] = 0
    return q


def _kernel_module(kp: _KernelPlan, plan: LanePlan, a: PatternAutomaton) -> Any:
    """The compiled loop's module, imported on first use, with the loop's constant arguments."""
    LK = kp.lk
    if LK is None:
        from cep import _lanes_kernel as LK

        kp.lk = LK
        kp.io = np.zeros(kp.lk.IO_SIZE, np.int64)
        pr, pb = kp.prog_r, kp.prog_b
        kp.consts = (pr.code, pr.lits, pb.code, pb.lits, _simple_program(pr), _simple_program(pb), 1 << plan.r,
                     1 << plan.b, a.start_bits, plan.has_r,
                     plan.has_b, plan.dec, plan.nthreads, plan.can_fork, kp.lvar, kp.lx, kp.agg_x,
                     kp.upd, a.within if a.within is not None else -1, a.max_partial_matches,
                     max(pr.depth, pb.depth, 1))
    return LK


def _simple_program(prog: EK.Program) -> np.ndarray:
    """For the compiled loop (``_lanes_kernel._compare``): a condition that only compares two
    operands, each the current row's value, a value the lane keeps or a literal, as (opcode,
    index) of each and the comparison; empty for any other program (the interpreter runs it)."""
    code = prog.code.tolist()
    leaves = (EK.CUR, EK.START, EK.LIT)
    if len(code) == 6 and code[0] in leaves and code[2] in leaves and EK.EQ <= code[4] <= EK.GE:
        return np.array([code[0], code[1], code[2], code[3], code[4]], np.int64)
    return np.zeros(0, np.int64)


def _scratch(kp: _KernelPlan, cap_q: int) -> None:
    """Room for ``cap_q`` queued lanes in the per-key loop's scratch (shared by the rule's keys)."""
    if len(kp.Q) < cap_q:
        kp.Q = np.empty(2 * cap_q, np.int64)
        kp.killed = np.empty(2 * cap_q, np.int64)
        kp.bested = np.empty(2 * cap_q, np.int64)
        kp.made = np.empty((2 * cap_q, 6), np.int64)
        kp.rec = np.empty((2 * cap_q, 3), np.int64)


def _kernel_step(a: PatternAutomaton, st: KeyState, kp: _KernelPlan, cols, s: int, e: int, masks, ts, emit,
                 stats: StepStats, rows_all, materialised: bool) -> int | None:
    """:func:`step_key_lanes` by the compiled loop: the rows it took (all of them, or those before a
    row with an intermediate at or past 2**53, left to the numpy stepping with the rows already in
    the key's state); None (nothing changed) when it cannot take the rows."""
    plan = a.lanes
    assert plan is not None
    n = e - s
    if n <= 0 or materialised:
        return None
    got = _batch_values(kp, cols, masks, ts)
    if got is None:
        return None
    attempts = st.attempts
    lanes = st.lanes
    if lanes is None or lanes.plan is not plan:
        if attempts:
            return None  # start rows on the general path (a restored snapshot): numpy converts them
        lanes = _Lanes(plan, n)
    pooled = lanes.shared  # (the batch's arrays: never compacted for one key, no queue cache)
    c = lanes.qcache
    if not pooled and c is not None and c[0] is attempts and len(c[1]) == len(attempts) \
            and (not attempts or (attempts[0] is c[2] and attempts[-1] is c[3])):
        # nothing took or added a start row since the last call (see _KernelPlan.qcache)
        q = c[1]
    else:
        q = _queue(lanes, attempts)
        if q is None:
            return None
    if not pooled and lanes.n + n > len(lanes.start) and 2 * len(q) <= lanes.n:
        # (each row may start a lane: rather than grow, reclaim the dead lanes when they are half,
        # with room for a few more calls, so that a key's arrays are compacted every few batches)
        q = lanes.compact(q)
        lanes.reserve(3 * n)
    rno0 = st.nrows
    # from here on the rows are this path's; they are kept (KeyState.rows) only from the first
    # live start row on (minus PREV's reach), when the loop returns: most rows of a V-shape never
    # belong to a start row that outlives the call, so their tuples are never made
    st.lanes = lanes
    st.nrows += n
    st.last_ts = ts[e - 1]
    lanes.reserve(n)
    LK = _kernel_module(kp, plan, a)
    _scratch(kp, len(q) + n)
    Q = kp.Q
    Q[: len(q)] = q
    io = kp.io
    io[:] = 0
    io[LK.IO_NL] = lanes.n
    io[LK.IO_QT] = len(q)
    io[LK.IO_PEAK] = stats.partial_matches_peak
    io[LK.IO_RESUME] = st.resume
    return _kernel_loop(a, st, kp, lanes, got, cols, s, n, rno0, len(q) + n, emit, stats, rows_all, False)


def _kernel_loop(a: PatternAutomaton, st: KeyState, kp: _KernelPlan, lanes: _Lanes, got: tuple, cols, s: int,
                 n: int, rno0: int, cap_q: int, emit, stats: StepStats, rows_all, stopped: bool) -> int:
    """Call the compiled loop over a key's rows ``s`` to ``s + n`` (its io in ``kp.io``, its queue
    in ``kp.Q``) until it has taken them, handling each row that needs the engine in between; with
    ``stopped`` the loop has already returned at such a row (the batch's call): handle it first."""
    plan = a.lanes
    assert plan is not None
    LK = kp.lk
    xb, mb, tb = got
    step, consts = LK.step, kp.consts
    Q, killed, bested, made_rows, rec = kp.Q[:cap_q], kp.killed, kp.bested, kp.made, kp.rec
    io = kp.io
    attempts = st.attempts
    max_back = a.max_back
    new_attempt = a.attempt_class
    dead = a._dead
    objs = lanes.objs
    while True:
        if stopped:
            stopped = False
            j, status = int(io[LK.IO_J]), int(io[LK.IO_STATUS])
            qh, qt = int(io[LK.IO_QH]), int(io[LK.IO_QT])
        else:
            step(xb, s, n, mb, tb, rno0, io,
                 lanes.start, lanes.start_ts, lanes.k, lanes.kb, lanes.sid, lanes.bx, lanes.S, lanes.SUM, lanes.CNT,
                 lanes.alive, lanes.best, Q, killed, bested, made_rows, rec, *consts)
            # the start rows' objects follow the arrays: made only for the start rows still queued
            # (most of a V-shape's start rows end at their next row, at the head, inside the loop)
            j, nl1, qh, qt, peak, nk, nb, resume, status, middle, nm, nr = io.tolist()  # (one read of the scalars)
            if nr:  # the matches the call found, before any row it stopped at
                _emit_rec(a, st, cols, s - rno0, rows_all, rec, nr, emit, stats)
                st.resume = resume
            nl0 = lanes.n
            _follow(objs, nl0, lanes, killed, nk, bested, nb, dead)
            old = len(attempts)
            if nl1 > nl0:
                objs.extend([None] * (nl1 - nl0))
                lanes.n = nl1
                made = _made(lanes, new_attempt, dead, made_rows, nm)
            else:
                made = []
            if middle:
                attempts[:] = [objs[i] for i in Q[qh:qt].tolist()]
            elif qh <= old:
                if qh:
                    del attempts[:qh]
                if made:
                    attempts.extend(made)
            else:
                attempts[:] = made
            stats.partial_matches_peak = peak
        if not status or status == LK.STOP_INEXACT or status == LK.STOP_FORK:
            break
        # a row that needs the engine: the cap's policy, or a match to output
        # (the engine reads the rows from the head start row to this one)
        at = rno0 + j
        _keep_rows(st, cols, s - rno0, rows_all, (attempts[0].start if attempts else at) - max_back, at + 1)
        if status == LK.STOP_CAP:
            _over_cap(a, st, stats, lanes, plan)
        a._resolve(st, emit, stats, True)
        if attempts:
            total = sum([len(x.threads) for x in attempts])
            if total > stats.partial_matches_peak:
                stats.partial_matches_peak = total
        q = _queue(lanes, attempts)
        assert q is not None
        Q[: len(q)] = q
        # (_queue may have given an ended start row a lane: new lanes go after it, with room for
        # one per row left)
        lanes.reserve(n - j)
        io[LK.IO_NL] = lanes.n
        io[LK.IO_J] += 1
        io[LK.IO_QH] = 0
        io[LK.IO_QT] = len(q)
        io[LK.IO_PEAK] = stats.partial_matches_peak
        io[LK.IO_RESUME] = st.resume
        io[LK.IO_NKILL] = io[LK.IO_NBEST] = io[LK.IO_MIDDLE] = io[LK.IO_NREC] = 0
    first = (attempts[0].start if attempts else rno0 + n) - max_back
    if status == LK.STOP_INEXACT or status == LK.STOP_FORK:
        # at row j an intermediate reached 2**53, or a start row's runs fork: the numpy stepping
        # takes that row and the rest (its start rows there go to the general path for the row),
        # which reads the rows from the key's state
        taken = j
        _keep_rows(st, cols, s - rno0, rows_all, min(first, rno0 + taken - max_back), rno0 + n)
        st.nrows = rno0 + taken  # (the numpy stepping counts the rest)
        return taken
    if not lanes.shared:
        lanes.qcache = (attempts, Q[qh:qt].copy(), attempts[0] if attempts else None,
                        attempts[-1] if attempts else None)
    _keep_rows(st, cols, s - rno0, rows_all, first, rno0 + n)
    if len(st.rows) > 128:
        a._trim(st)
    return n


class LaneBatch:
    """The keys of one batch that one call of the compiled loop stepped together (:func:`step_batch`):
    what each still needs of the engine, done by :meth:`finish` in the operator's key order, so
    that matches leave in the same order as when each key steps alone.

    The batch's columns come as lists (``cols``, ``masks``, ``ts``), or as the operator's arrays
    with ``lists`` making the lists when a key needs the engine's own stepping (the cap, a fork, an
    intermediate past 2**53): the keys the loop finished read only the few rows they keep and
    output, so the arrays spare a list of every column per batch and rule (about a tenth of the
    200-rule benchmark's V-shapes, counting the lists' freeing)."""

    __slots__ = ("a", "kp", "pool", "got", "keys", "Q", "made", "rec", "cols", "ts", "masks", "where", "later",
                 "took", "lists", "_made_lists")

    def __init__(self, a: PatternAutomaton, kp: _KernelPlan, pool: _Lanes, got: tuple, keys: np.ndarray,
                 Q: np.ndarray, made: list, rec: np.ndarray, cols, masks, ts, where: dict[int, int],
                 took: list[int], lists: Callable[[], tuple[list, list, list]] | None = None):
        self.a, self.kp, self.pool, self.got = a, kp, pool, got
        self.rec = rec  # the matches the call recorded for all keys, each key's from its K_ROFF
        self.keys = keys.tolist()  # one row per key stepped (_lanes_kernel.K_*), as the call left it
        self.Q = Q
        self.made = made  # the start-row objects made for all keys, each key's from its K_MOFF
        self.cols, self.masks, self.ts = cols, masks, ts
        self.lists = lists  # (arrays: makes the lists of cols, ts and masks)
        self._made_lists: tuple[list, list, list] | None = None
        self.where = where  # segment -> its row in ``keys``
        self.took = took  # the segments stepped, in key order (``keys``' rows)
        # (state, first row kept, end, batch row of its partition row 0) of each key finished
        # without the engine: its rows are kept by keep_rows, for all such keys at once
        self.later: list[tuple[KeyState, int, int, int]] = []

    def _as_lists(self) -> tuple[list, list, list]:
        """The batch's columns (with the masks last), masks and times as lists."""
        if self.lists is None:
            return self.cols, self.masks, self.ts
        if self._made_lists is None:
            cols, ts, masks = self.lists()
            self._made_lists = (cols, masks, ts)
        return self._made_lists

    def finish(self, x: int, st: KeyState, emit, stats: StepStats, e: int) -> None:
        """The rest of key row ``x``'s step (state ``st``, batch rows up to ``e``): its start rows
        and retained rows, then whatever the loop returned for (a match to output, the cap)."""
        a, kp, pool = self.a, self.kp, self.pool
        LK = kp.lk
        row = self.keys[x]
        s, n, rno0, _, qoff, qlen, moff, roff = row[:8]
        j, _, qh, qt, _, _, _, resume, status, middle, nm, nr = row[8:]
        attempts = st.attempts
        if middle:
            objs = pool.objs
            attempts[:] = [objs[i] for i in self.Q[qoff + qh: qoff + qt].tolist()]
        elif qh <= len(attempts):
            if qh:
                del attempts[:qh]
            if nm:
                attempts.extend(self.made[moff: moff + nm])
        else:
            attempts[:] = self.made[moff: moff + nm]
        st.lanes = pool
        st.nrows = rno0 + n
        arrays = self.lists is not None
        st.last_ts = int(self.ts[e - 1]) if arrays else self.ts[e - 1]
        if nr:  # the matches the call found (before any row it stopped at), output in order
            _emit_rec(a, st, self.cols, s - rno0, None, self.rec[roff: roff + nr], nr, emit, stats, arrays)
            st.resume = resume
        if not status:
            self.later.append((st, (attempts[0].start if attempts else rno0 + n) - a.max_back, rno0 + n, s - rno0))
            return
        # the loop returned at row j of this key: go on as the key's own call would
        cols, masks, ts = self._as_lists()
        pool.reserve(n)
        _scratch(kp, qlen + n)
        io = kp.io
        io[:] = row[LK.K_IO:]
        io[LK.IO_NL] = pool.n  # (lanes made after it, for later keys, are the pool's too)
        taken = _kernel_loop(a, st, kp, pool, self.got, cols, s, n, rno0, qlen + n, emit, stats, None, True)
        if taken < n:
            step_key_lanes(a, st, cols, s + taken, s + n, masks, ts, emit, stats, None, None, True)

    def finish_all(self, states: list, seg_keys: list, ends: list[int], emit, stats: StepStats, active: dict,
                   watch: Callable[[Any], None] | None, deferred: Callable[[KeyState], None]) -> None:
        """:meth:`finish` of every key the call took, in key order, with the operator's bookkeeping
        of each (``deferred`` outputs a key's matches held for NEXT; ``active`` holds the keys with
        start rows or held matches; ``watch``, when the rule has a WITHIN, is told each key with
        start rows): the operator's loop when the call took all its busy keys, without a method
        call and a look-up per key for the keys the loop finished (nearly all).

        With arrays, the rows that the recorded matches' outputs retain (:func:`_emit_rec` keeps
        each match's rows before outputting it) are read from the batch for all keys at once
        (:func:`_match_steps`), not by one slice of every column per match."""
        a, pool, made, max_back = self.a, self.pool, self.made, self.a.max_back
        objs, Q = pool.objs, self.Q
        arrays = self.lists is not None
        later = self.later
        ts, rec, cols = self.ts, self.rec, self.cols
        took = self.took
        keys = self.keys
        last = ts[np.array(ends, np.int64)[took] - 1].tolist() if arrays else None
        LK = self.kp.lk
        K_S, K_N, K_RNO, K_MOFF, K_ROFF, K_QOFF = LK.K_S, LK.K_N, LK.K_RNO, LK.K_MOFF, LK.K_ROFF, LK.K_QOFF
        status_at, middle_at, qh_at = LK.K_IO + LK.IO_STATUS, LK.K_IO + LK.IO_MIDDLE, LK.K_IO + LK.IO_QH
        nm_at, nr_at, resume_at, qt_at = LK.K_IO + LK.IO_NMADE, LK.K_IO + LK.IO_NREC, LK.K_IO + LK.IO_RESUME, LK.K_IO + LK.IO_QT
        steps, rows_made = _match_steps(self, states, max_back) if arrays else ({}, [])
        at = 0  # (the next of rows_made)
        for x, row in enumerate(keys):
            i = took[x]
            st = states[i]
            if row[status_at]:  # (the loop returned at a row that needs the engine)
                self.finish(x, st, emit, stats, ends[i])
            else:
                s, n, rno0 = row[K_S], row[K_N], row[K_RNO]
                qh, nm, nr, moff = row[qh_at], row[nm_at], row[nr_at], row[K_MOFF]
                attempts = st.attempts
                if row[middle_at]:
                    qoff = row[K_QOFF]
                    attempts[:] = [objs[q] for q in Q[qoff + qh: qoff + row[qt_at]].tolist()]
                elif qh <= len(attempts):
                    if qh:
                        del attempts[:qh]
                    if nm:
                        attempts.extend(made[moff: moff + nm])
                else:
                    attempts[:] = made[moff: moff + nm]
                st.lanes = pool
                end = rno0 + n
                st.nrows = end
                st.last_ts = last[x] if last is not None else ts[ends[i] - 1]
                if nr:
                    if arrays:
                        at = _emit_steps(a, st, steps[x], rows_made, at, emit, stats)
                    else:
                        roff = row[K_ROFF]
                        _emit_rec(a, st, cols, s - rno0, None, rec[roff: roff + nr], nr, emit, stats)
                    st.resume = row[resume_at]
                later.append((st, (attempts[0].start if attempts else end) - max_back, end, s - rno0))
            key = seg_keys[i]
            if st.deferred:
                deferred(st)
            if st.attempts or st.deferred:
                active[key] = None
                if watch is not None and st.attempts:
                    watch(key)
            elif key in active:
                del active[key]

    def keep_rows(self) -> None:
        """What :func:`_keep_rows` does for each key :meth:`finish` left in ``later`` (the engine
        calls this after the batch's keys, before anything reads their rows): the row tuples of
        all of them made by one ``zip`` rather than one per key (a key keeps a row or two of a
        batch, from its first start row still queued)."""
        later = self.later
        if not later:
            return
        cols = self.cols
        idx: list[int] = []
        for st, first, end, off in later:
            have = st.base + len(st.rows)
            if first > have:
                st.rows = []
                st.base = have = min(first, end)
            if end > have:
                idx.extend(range(off + have, off + end))
        made: list = []
        if self.lists is not None:
            if idx:
                at = np.array(idx, np.int64)
                made = list(zip(*[c[at].tolist() for c in cols]))
        elif len(idx) == 1:
            made = [tuple(c[idx[0]] for c in cols)]
        elif idx:
            take = itemgetter(*idx)
            made = list(zip(*map(take, cols)))
        p = 0
        a = self.a
        for st, _first, end, _off in later:
            have = st.base + len(st.rows)
            if end > have:
                st.rows.extend(made[p: p + end - have])
                p += end - have
            if len(st.rows) > 128:
                a._trim(st)
        later.clear()


def step_batch(a: PatternAutomaton, pool: _Lanes | None, states: list, segs, starts: list[int], ends: list[int],
               cuts: list[int], cols, masks, ts, all_states: Any, stats: StepStats, masks_np: np.ndarray | None = None,
               arrays: tuple[list, np.ndarray] | None = None,
               lists: Callable[[], tuple[list, list, list]] | None = None) -> LaneBatch | None:
    """Step every key of segments ``segs`` whose start rows are all on the compiled lane path (or
    that has none) in one call of the compiled loop; the rest of each key's step is
    :meth:`LaneBatch.finish`, in key order (None: no key taken, each steps alone).

    The keys' lanes share one set of arrays per operator (``pool``, made here when None; the
    operator keeps :attr:`LaneBatch.pool`): a key's start rows are :class:`LaneRun` objects into
    it as before, so snapshots, ``cep state``, matches and caps read them unchanged.
    ``all_states`` (every key state of the operator) tells which lanes are still queued when the
    arrays are compacted. ``arrays``: the operator's arrays of ``cols`` and ``ts`` (see
    :func:`_batch_values`). ``lists``: ``cols`` (with the masks last), ``masks`` and ``ts`` are
    the operator's arrays (``ts`` int64), and this makes them as lists (column lists with the
    masks last, times, masks) for a key that needs the engine's stepping (see :class:`LaneBatch`).
    """
    plan = a.lanes
    kp = plan.kernel if plan is not None else None
    if kp is None:
        return None
    got = _batch_values(kp, cols, masks, ts, masks_np, arrays)
    if got is None:
        return None
    # the lanes this batch may add: one per row in the call, one per row again when a key that
    # stopped there goes on in LaneBatch.finish (it reserves its rows anew), and one per queued
    # start row that ended (add_dead below, _queue in finish); leaving any out lets the pool grow
    # fourfold each time it fills rather than be reclaimed
    need = 0
    for i in segs:
        need += 2 * (ends[i] - starts[i]) + len(states[i].attempts)
    if pool is None or pool.plan is not plan:
        # (room for two such batches: the reclaim below then never grows it for batches of this
        # size; growing from a small pool copied two arrays of every field, the second four times
        # the first, about 4% of the 200-rule benchmark's lane rules)
        pool = _Lanes(plan, max(1024, 2 * need))
        pool.shared = True
    if pool.n + need > len(pool.start):
        # reclaim the lanes no key queues any more, when they are at least half (before the
        # queues below are read: compacting renumbers lanes)
        keep = []
        for st in all_states:
            if st.lanes is pool:
                for att in st.attempts:
                    th = att.threads
                    if type(th) is LaneRun and th.lanes is pool:
                        keep.append(th.i)
        if 2 * len(keep) <= pool.n:
            pool.compact(keep)
            # room for this batch and twice the kept lanes more before the next reclaim (its cost
            # is the kept lanes' and every key's start rows': paid once per as many new lanes)
            pool.reserve(2 * pool.n + need)
    LK = _kernel_module(kp, plan, a)
    took: list[int] = []
    rows = 0
    qflat: list[int] = []
    qlens: list[int] = []
    live: list[int] = []
    dead: list[int] = []
    rnos: list[int] = []
    resumes: list[int] = []
    ids, objs = pool.ids, pool.objs
    for i in segs:
        st = states[i]
        attempts = st.attempts
        if st.deferred or (not attempts and cuts[i] == cuts[i + 1]):
            continue  # (held matches; or the operator's quiet key: nothing to start, nothing alive)
        if attempts:
            if st.lanes is not pool:
                continue  # start rows of its own arrays or node chains: the key steps alone
            q: list[int] = []
            for att in attempts:
                th = att.threads
                if type(th) is LaneRun and th.lanes is pool:
                    q.append(th.i)
                elif th:
                    break  # (a start row on node chains, after a fork: the key steps alone)
                else:  # (an ended start row waiting at the head for its match to be output)
                    li = ids.get(att.start)
                    if li is None or objs[li] is not att:
                        li = pool.add_dead(att)
                    else:  # (its match may have been found off this path since)
                        pool.best[li], pool.bx[li] = _best_of(att)
                    q.append(-1 - li)
            else:
                for li in q:
                    if li >= 0:
                        live.append(li)
                    else:
                        li = -1 - li
                        dead.append(li)
                    qflat.append(li)
                qlens.append(len(q))
                took.append(i)
                rnos.append(st.nrows)
                resumes.append(st.resume)
                rows += ends[i] - starts[i]
            continue
        qlens.append(0)
        took.append(i)
        rnos.append(st.nrows)
        resumes.append(st.resume)
        rows += ends[i] - starts[i]
    if not took:
        return None
    K = len(took)
    keys = np.zeros((K, LK.K_SIZE), np.int64)
    if live:
        pool.alive[live] = 1
    if dead:
        pool.alive[dead] = 0
    pool.reserve(rows)
    took_a = np.array(took, np.int64)
    st_a = np.array(starts, np.int64)[took_a]
    n_a = np.array(ends, np.int64)[took_a] - st_a
    ql = np.array(qlens, np.int64)
    room = ql + n_a
    qoff = np.zeros(K, np.int64)
    np.cumsum(room[:-1], out=qoff[1:])
    keys[:, LK.K_S] = st_a
    keys[:, LK.K_N] = n_a
    keys[:, LK.K_RNO] = rnos
    keys[:, LK.K_RESUME] = resumes
    keys[:, LK.K_QOFF] = qoff
    keys[:, LK.K_QLEN] = ql
    total = int(room.sum())
    Q = np.empty(total, np.int64)
    if qflat:
        Q[np.repeat(qoff, ql) + (np.arange(len(qflat)) - np.repeat(np.cumsum(ql) - ql, ql))] = qflat
    killed = np.empty(total, np.int64)
    bested = np.empty(total, np.int64)
    made_rows = np.empty((total, 6), np.int64)
    rec = np.empty((total, 3), np.int64)  # (at most one match per queued lane)
    nl0 = pool.n
    xb, mb, tb = got
    nl, nk, nb, nm, _ = LK.step_batch(xb, mb, tb, keys, nl0, stats.partial_matches_peak,
                                      pool.start, pool.start_ts, pool.k, pool.kb, pool.sid, pool.bx, pool.S, pool.SUM,
                                      pool.CNT, pool.alive, pool.best, Q, killed, bested, made_rows, rec, *kp.consts)
    # what the call did to start rows that existed before it: each key's own, so in any order
    dead_th = a._dead
    _follow(objs, nl0, pool, killed, nk, bested, nb, dead_th)
    if nl > nl0:
        objs.extend([None] * (nl - nl0))
        pool.n = nl
    made = _made(pool, a.attempt_class, dead_th, made_rows, nm)
    peak = int(keys[:, LK.K_IO + LK.IO_PEAK].max())
    if peak > stats.partial_matches_peak:
        stats.partial_matches_peak = peak
    return LaneBatch(a, kp, pool, got, keys, Q, made, rec, cols, masks, ts, dict(zip(took, range(K))), took, lists)


def _keep_rows(st: KeyState, cols, off: int, rows_all, first: int, end: int, arrays: bool = False) -> None:
    """Retain the key's partition rows up to ``end`` (exclusive), as tuples made from the batch
    (partition row r is batch row ``off + r``), forgetting every retained row before ``first``
    (rows no live start row or PREV reads). ``arrays``: ``cols`` are arrays (their values are
    read as ``tolist`` gives them, as in the lists)."""
    have = st.base + len(st.rows)
    if first > have:  # (nothing retained is read any more, nor the rows up to first)
        st.rows = []
        st.base = have = min(first, end)
    if end > have:
        j0, j1 = off + have, off + end
        if arrays:
            st.rows.extend(zip(*[c[j0:j1].tolist() for c in cols]))
        else:  # (one slice per column by map: a third cheaper than a list of slices for a key's few rows)
            st.rows.extend(rows_all[j0:j1] if rows_all is not None else zip(*map(itemgetter(slice(j0, j1)), cols)))


def _emit_rec(a: PatternAutomaton, st: KeyState, cols, off: int, rows_all, rec: np.ndarray, nr: int, emit,
              stats: StepStats, arrays: bool = False) -> None:
    """Output the ``nr`` matches a call of the compiled loop recorded for key ``st`` (rows of ``rec``:
    start row, last row, R rows), in order, as ``PatternAutomaton._resolve`` outputs a lane match:
    numbered, counted, its rows retained first (batch row ``off + r`` is partition row r)."""
    max_back = a.max_back
    plan = a.lanes
    fast = plan.fast_match
    s_, r_, b_ = plan.s, plan.r, plan.b
    for start, end, k in rec[:nr].tolist():
        _keep_rows(st, cols, off, rows_all, start - max_back, end + 1, arrays)
        st.match_number += 1
        stats.matches += 1
        if fast is not None:  # (the measures are row lookups: each row's variable is all they need)
            emit(st, fast(start, end, [s_] + [r_] * k + [b_] * (end - start - k)))
        else:
            emit(st, _chain(a, st, start, k, end - start - k))


def _match_steps(batch: LaneBatch, states: list, max_back: int) -> tuple[dict[int, list[tuple]], list[tuple]]:
    """For :meth:`LaneBatch.finish_all` (arrays): per key row whose matches the call recorded (and
    that it finished), what :func:`_emit_rec` does to the key's retained rows before each match
    (start row, last row, R rows; base after forgetting the rows before it, -1: none forgotten;
    rows added), and the row tuples all of them add, in key and match order, read from the
    batch at once. The same steps as :func:`_keep_rows` per match, on numbers first."""
    LK = batch.kp.lk
    status_at, nr_at = LK.K_IO + LK.IO_STATUS, LK.K_IO + LK.IO_NREC
    K_S, K_RNO, K_ROFF = LK.K_S, LK.K_RNO, LK.K_ROFF
    rec, took = batch.rec, batch.took
    steps: dict[int, list[tuple]] = {}
    idx: list[int] = []
    for x, row in enumerate(batch.keys):
        nr = row[nr_at]
        if not nr or row[status_at]:
            continue
        st = states[took[x]]
        off = row[K_S] - row[K_RNO]
        have = st.base + len(st.rows)
        roff = row[K_ROFF]
        out = []
        for start, end, k in rec[roff: roff + nr].tolist():
            first, stop = start - max_back, end + 1
            base = -1
            if first > have:
                base = have = min(first, stop)
            cnt = 0
            if stop > have:
                cnt = stop - have
                idx.extend(range(off + have, off + stop))
                have = stop
            out.append((start, end, k, base, cnt))
        steps[x] = out
    made: list[tuple] = []
    if idx:
        sel = np.array(idx, np.int64)
        made = list(zip(*[c[sel].tolist() for c in batch.cols]))
    return steps, made


def _emit_steps(a: PatternAutomaton, st: KeyState, steps: list[tuple], rows: list[tuple], at: int, emit,
                stats: StepStats) -> int:
    """:func:`_emit_rec` of one key's matches with the retained rows' steps made by
    :func:`_match_steps` (its rows from ``rows[at]`` on); the next unread of ``rows``."""
    plan = a.lanes
    fast = plan.fast_match
    s_, r_, b_ = plan.s, plan.r, plan.b
    vids_of = plan.vids
    for start, end, k, base, cnt in steps:
        if base >= 0:
            st.rows = []
            st.base = base
        if cnt:
            st.rows.extend(rows[at: at + cnt])
            at += cnt
        st.match_number += 1
        stats.matches += 1
        if fast is not None:  # (the measures are row lookups: each row's variable is all they need)
            vids = vids_of.get((k, end - start))
            if vids is None:
                vids = [s_] + [r_] * k + [b_] * (end - start - k)
                if len(vids_of) < 1024:
                    vids_of[(k, end - start)] = vids
            emit(st, fast(start, end, vids))
        else:
            emit(st, _chain(a, st, start, k, end - start - k))
    return at


def _made(lanes: _Lanes, new_attempt: Any, dead: Any, rows: np.ndarray, nm: int) -> list:
    """The start-row objects of the lanes made by a call of the compiled loop that are still queued,
    in queue order, from the loop's ``made`` rows (lane, start, time, alive, best end, its R rows);
    lanes made before keep theirs."""
    objs, ids = lanes.objs, lanes.ids
    out: list = []
    if not nm:
        return out
    append = out.append
    # (one list of the rows: a numpy scalar read per start row and field costs more than the object)
    for i, rno, t, ok, best, bx in rows[:nm].tolist():
        att = new_attempt(rno, t, LaneRun(lanes, i) if ok else dead)
        if best >= 0:
            att.best = best
            att.path = bx  # (its R rows: see lane_match)
        objs[i] = att
        ids[rno] = i
        append(att)
    return out


def step_key_lanes(a: PatternAutomaton, st: KeyState, cols, s: int, e: int, masks, ts, emit, stats: StepStats,
                   candidates=None, rows_all=None, materialised: bool = False) -> None:
    """:meth:`PatternAutomaton.step_key` for a rule with a lane plan (same contract, same rows)."""
    plan = a.lanes
    assert plan is not None
    if plan.kernel is not None:
        taken = _kernel_step(a, st, plan.kernel, cols, s, e, masks, ts, emit, stats, rows_all, materialised)
        if taken is not None:
            if s + taken >= e:
                return
            s += taken  # (a row whose arithmetic reached 2**53: the rest here, the rows already kept)
            materialised = True
    if st.lanes is not None:
        st.lanes.qcache = None  # (the numpy stepping changes start rows without the queue)
    start_rno = st.nrows - s
    st.nrows += e - s
    if e > s:
        st.last_ts = ts[e - 1]
    max_back = a.max_back
    rows = st.rows
    mat = e if materialised else s
    start_bits = a.start_bits
    hist = a.hist
    within = a.within
    attempts = st.attempts
    cap = a.max_partial_matches
    init_later = [(pc, None) for pc in a.start_closure]
    bit_r, bit_b = 1 << plan.r, 1 << plan.b
    cond_r, cond_b = plan.cond[plan.r], plan.cond[plan.b]
    has_r, has_b, nthreads = plan.has_r, plan.has_b, plan.nthreads
    nxt, tk, bst = plan.nxt, plan.tk, plan.bst
    upd_r, upd_b, upd_s = (_updates(a, plan, v) for v in (plan.r, plan.b, plan.s))
    # per variable taken (TAKE_R, TAKE_B): its aggregates and its kept values (index, row column)
    takes = [(TAKE_R, upd_r, [(q, c) for q, (v, c) in enumerate(plan.lcols) if v == plan.r]),
             (TAKE_B, upd_b, [(q, c) for q, (v, c) in enumerate(plan.lcols) if v == plan.b])]
    agg_args = [a.aggs[slot].arg for slot in plan.aggs if a.aggs[slot].arg is not None]

    new_attempt = a.attempt_class
    max_runs = int(nthreads.max())
    # a start row needs no node when S's condition reads nothing of the match, and its values
    # are exact as floats (checked per row below)
    direct_start = hist[plan.s] is None
    pending: list[int] = []
    lanes = st.lanes
    live_ids: list[int] = []
    general = 0  # live start rows on the general path (node chains)
    fresh = lanes is None or lanes.plan is not plan or lanes.n > 2 * len(attempts) + 256
    if fresh:
        lanes = _Lanes(plan, 2 * len(attempts) + (e - s))
        st.lanes = lanes
    for att in attempts:
        th = att.threads
        if isinstance(th, LaneRun):
            if not fresh:
                live_ids.append(th.i)
                continue
            sums, cnts = th.aggs()  # (from the arrays being replaced)
            got: tuple | None = (th.vals(), th.k, th.kb, th.sid, sums, cnts)
        elif th:
            got = _to_lane(a, st, att)
            if got is None:
                general += 1
                continue
        else:
            continue
        assert got is not None
        i = lanes.add(att, *got, plan)
        att.threads = LaneRun(lanes, i)
        live_ids.append(i)
    live = np.array(live_ids, dtype=np.int64)
    env = _Env()

    def demote() -> None:
        """Every lane back to node chains (a row the arrays cannot take exactly)."""
        nonlocal live, general
        for i in live.tolist():
            att = lanes.objs[i]
            att.threads = lane_threads(a, st, att)
            general += 1
        live = live[:0]

    j = s
    ci = 0
    ncand = len(candidates) if candidates is not None else 0
    with np.errstate(invalid="ignore", over="ignore"):
        while j < e:
            if not attempts and candidates is not None:
                ci = bisect_left(candidates, max(j, st.resume - start_rno), ci)
                if ci >= ncand:
                    break
                j = candidates[ci]
                keep_from = j - max_back
                if keep_from > mat and not st.deferred:
                    rows = a._drop_before(st, start_rno + keep_from)
                    mat = keep_from
            if mat <= j:
                upto = min(e, j + 64)
                rows.extend(rows_all[mat:upto] if rows_all is not None else zip(*[c[mat:upto] for c in cols]))
                mat = upto
            m = masks[j]
            rno = start_rno + j
            row = rows[rno - st.base]
            t = ts[j]
            if live.size and not _exact(row, plan, agg_args):
                demote()  # this row's values cannot be taken exactly as floats: node chains from here
            # the start rows on the general path (rows the arrays could not take)
            if general:
                general = 0
                for att in attempts:
                    th = att.threads
                    if not th or isinstance(th, LaneRun):
                        continue
                    if within is not None and t - att.start_ts >= within:
                        a._within_ended(att, rno, stats)
                        continue
                    att.threads = a._advance(att, th, m, rno, row, st, stats, hist)
                    if att.threads:
                        general += 1
            if live.size:
                if within is not None:
                    gone = (t - lanes.start_ts[live]) >= within
                    if gone.any():
                        for i in live[gone].tolist():
                            a._within_ended(lanes.objs[i], rno, stats)
                        live = live[~gone]
            if live.size:
                env.row = row
                sid = lanes.sid[live]
                env.n = live.size
                if (cond_r is not None and m & bit_r) or (cond_b is not None and m & bit_b):
                    env.svals = {q: v[live] for q, v in lanes.svals.items()}
                    env.sums = {c: v[live] for c, v in lanes.sums.items()}
                    env.cnts = {c: v[live] for c, v in lanes.cnts.items()}
                inexact = False
                try:
                    ok_r = has_r[sid] if m & bit_r else np.zeros(live.size, bool)
                    if cond_r is not None and m & bit_r:
                        _contrib(env, upd_r, row, plan)
                        ok_r = ok_r & cond_r(env)
                    ok_b = has_b[sid] if m & bit_b else np.zeros(live.size, bool)
                    if cond_b is not None and m & bit_b:
                        _contrib(env, upd_b, row, plan)
                        ok_b = ok_b & cond_b(env)
                except _Inexact:
                    inexact = True
                if not inexact:
                    any_b = bool(m & bit_b) and ok_b.any()
                    o = ok_r.astype(np.int64)
                    if any_b:
                        o |= ok_b.astype(np.int64) << 1
                    nx = nxt[sid, o]
                if inexact or (any_b and plan.can_fork and (nx == FORK).any()):
                    # an intermediate reached 2**53 (exact integers: the general path), or runs that
                    # fork (node chains): this key's start rows take this row on the general path;
                    # nothing of the row was applied
                    for i in live.tolist():
                        att = lanes.objs[i]
                        att.threads = a._advance(att, lane_threads(a, st, att), m, rno, row, st, stats, hist)
                        if att.threads:
                            general += 1
                    live = live[:0]
                else:
                    # (a row that no lane passes as B completes a match only where R can complete one)
                    if any_b or plan.r_completes:
                        bs = bst[sid, o]
                        hit = bs > 0
                    if (any_b or plan.r_completes) and hit.any():
                        got_best = live[hit]
                        lanes.best[got_best] = rno
                        lanes.bx[got_best] = lanes.k[got_best] + (bs[hit] == 2)
                        for i, bx in zip(got_best.tolist(), lanes.bx[got_best].tolist()):
                            att = lanes.objs[i]
                            att.best = rno
                            att.path = bx  # (its R rows: see lane_match)
                    alive = nx >= 0
                    tv = tk[sid, o] if any_b else None  # (else every surviving run took the row as R)
                    for code, upd, kept in takes:
                        if tv is None:
                            if code != TAKE_R:
                                continue
                            took = live[alive]
                        else:
                            sel = alive & (tv == code)
                            if not sel.any():
                                continue
                            took = live[sel]
                        if not took.size:
                            continue
                        if code == TAKE_R:
                            lanes.k[took] += 1
                        else:
                            lanes.kb[took] += 1
                        for slot, spec in upd:
                            if spec.arg is None:
                                lanes.cnts[slot][took] += 1
                                continue
                            v = spec.arg(row)
                            if v is not None:
                                sm = lanes.sums[slot]
                                sm[took] += _num(v)
                                lanes.cnts[slot][took] += 1
                                big = np.abs(sm[took]) >= _EXACT
                                if big.any():  # (may be rounded: inf marks it, so reading it goes general)
                                    sm[took[big]] = np.inf
                        for q, c in kept:
                            lanes.S[took, q] = _num(row[c] if c < len(row) else None)
                    if not alive.all():
                        for i in live[~alive].tolist():
                            lanes.objs[i].threads = a._dead
                        live = live[alive]
                        nx = nx[alive]
                    lanes.sid[live] = nx
            # a new start row
            if m & start_bits and rno >= st.resume and direct_start and _start_exact(row, plan, agg_args):
                # S has no condition on the match: the start row's lane, without a node
                att = new_attempt(rno, t, None)
                sums, cnts = _start_aggs(row, upd_s, plan)
                i = lanes.add(att, _start_vals(row, plan), 0, 0, 0, sums, cnts, plan)
                att.threads = LaneRun(lanes, i)
                attempts.append(att)
                pending.append(i)
            elif m & start_bits and rno >= st.resume:
                got_att = _new_attempt(a, st, rno, t, m, row, stats, hist, init_later)
                if got_att is not None:
                    att = got_att
                    attempts.append(att)
                    got = _to_lane(a, st, att) if att.threads else None
                    if got is not None:
                        i = lanes.add(att, *got, plan)
                        att.threads = LaneRun(lanes, i)
                        pending.append(i)
                    elif att.threads:
                        general += 1
            if pending:
                live = np.concatenate((live, pending)) if live.size else np.array(pending, dtype=np.int64)
                pending.clear()
            if attempts:
                n_before = len(attempts)
                if n_before > 1 and (general or live.size * max_runs > cap):
                    total = int(nthreads[lanes.sid[live]].sum()) if live.size else 0
                    if general:
                        total += sum(len(x.threads) for x in attempts if isinstance(x.threads, list))
                    if total > cap:
                        _over_cap(a, st, stats, lanes, plan)
                a._resolve(st, emit, stats, True)
                if len(attempts) != n_before:
                    if live.size:
                        live = _still_there(attempts, lanes, live)
                    if general:
                        general = sum(1 for x in attempts if x.threads and not isinstance(x.threads, LaneRun))
                # (live start rows bound their runs: most rows cannot raise the peak; a start row on
                # the general path may hold more runs than any state, after a fork)
                if general or live.size * max_runs > stats.partial_matches_peak:
                    total = int(nthreads[lanes.sid[live]].sum()) if live.size else 0
                    if general:
                        total += sum(len(x.threads) for x in attempts if isinstance(x.threads, list))
                    if total > stats.partial_matches_peak:
                        stats.partial_matches_peak = total
            j += 1
    if not attempts and not st.deferred and e - max_back > mat:
        rows = a._drop_before(st, start_rno + e - max_back)
        mat = e - max_back
    if mat < e:
        rows.extend(rows_all[mat:e] if rows_all is not None else zip(*[c[mat:e] for c in cols]))
    if len(rows) > 128:
        a._trim(st)


def _updates(a: PatternAutomaton, plan: LanePlan, vid: int) -> list[tuple[int, Any]]:
    """The aggregates the conditions read that a row taken as variable ``vid`` updates."""
    out = []
    for slot in plan.aggs:
        vs = a.aggs[slot].vars
        if vs is None or vid in vs:
            out.append((slot, a.aggs[slot]))
    return out


def _exact(row: tuple, plan: LanePlan, agg_args: list) -> bool:
    """Whether every value the conditions read of this row (or keep of it) is exact as a float."""
    try:
        for c in plan.cur_cols:
            _num(row[c] if c < len(row) else None)
        for f in agg_args:
            _num(f(row))
    except _Odd:
        return False
    return True


def _start_exact(row: tuple, plan: LanePlan, agg_args: list) -> bool:
    """Whether a start row's values the conditions read are exact as floats."""
    try:
        for v, c in plan.lcols:
            if v == plan.s:
                _num(row[c] if c < len(row) else None)
        for f in agg_args:
            _num(f(row))
    except _Odd:
        return False
    return True


def _start_aggs(row: tuple, upd: list, plan: LanePlan) -> tuple[tuple, tuple]:
    """The aggregate states of a start row's lane after its S row."""
    if not upd:
        return plan.zero_sums, plan.zero_cnts
    sums = dict.fromkeys(plan.aggs, 0.0)
    cnts = dict.fromkeys(plan.aggs, 0)
    for slot, spec in upd:
        if spec.arg is None:
            cnts[slot] = 1
            continue
        v = spec.arg(row)
        if v is not None:
            sums[slot] = _num(v)
            cnts[slot] = 1
    return tuple(sums[x] for x in plan.aggs), tuple(cnts[x] for x in plan.aggs)


def _contrib(env: _Env, upd: list, row: tuple, plan: LanePlan) -> None:
    """The current row's part of each aggregate, when the variable being tested takes it."""
    for slot in plan.aggs:
        env.add_sum[slot] = 0.0
        env.add_cnt[slot] = 0
    for slot, spec in upd:
        if spec.arg is None:
            env.add_cnt[slot] = 1
            continue
        v = spec.arg(row)
        if v is not None:
            env.add_sum[slot] = _num(v)
            env.add_cnt[slot] = 1


def _new_attempt(a: PatternAutomaton, st: KeyState, rno: int, t: int, m: int, row: tuple, stats: StepStats,
                 hist, init_later) -> Attempt | None:
    att = a.attempt_class(rno, t, [])
    att.threads = a._advance(att, init_later, m, rno, row, st, stats, hist)
    return att if att.threads or att.best is not None else None


def _still_there(attempts: list, lanes: _Lanes, live: np.ndarray) -> np.ndarray:
    """The live lanes still among the start rows after a resolve or a cap dropped some.

    Both drop a prefix of the start rows, and a resolve also the start rows after a live head up
    to its match so far; so which lanes remain follows from start rows alone.
    """
    if not attempts:
        return live[:0]
    st_ = lanes.start[live]
    keep = st_ >= attempts[0].start
    head = attempts[0]
    if head.threads and head.best is not None:
        end = head.best if isinstance(head.best, int) else head.best.rno
        keep &= ~((st_ > head.start) & (st_ <= end))
    return live[keep]


def _over_cap(a: PatternAutomaton, st: KeyState, stats: StepStats, lanes: _Lanes, plan: LanePlan) -> None:
    """The cap on a key's partial matches, counting each start row's runs as the general path does."""
    a._over_cap(st, stats)
