"""Keyed NFA execution of one compiled pattern: partial matches, preferment, skip, WITHIN.

The automaton (:class:`PatternAutomaton`) is immutable and shared; every key's runtime state
(:class:`KeyState`) is separate, small and serialisable. ``step_key`` advances one key's state over
rows already in event-time order; ``expire`` applies the watermark to it.

One concept over about 1,240 lines, so one module: stepping one key's partial matches. The general
path (each run's matched-row history) and the lazily built DFA path for patterns that need no
history are two ways of taking the same transitions, and share the automaton's tables, the
:class:`Attempt` and :class:`KeyState` bookkeeping, skip, ``WITHIN`` and the caps; building the
automaton (the compiler) lives in :mod:`patterns.compiler`, expressions in :mod:`cep.expressions`;
the paths that step many keys or many start rows at once with arrays live apart
(:mod:`cep.batch_dfa`, :mod:`cep.lanes`).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Callable

from cep.expressions import (
    BAD_AGGREGATE,
    Layout,
    MatchCtx,
    Node,
    compile_columnar,
    compile_local_rows,
    compile_match_expr,
    is_row_local,
    split_conjuncts,
    truthy,
)
from cep.lanes import LanePlan, lane_match, lane_plan, step_key_lanes
from patterns import ast as A
from patterns.compiler import OP_BEGIN, OP_END, OP_IGNORE, OP_MATCH, OP_VAR, CompiledPattern
from patterns.growth import GROWING_PATTERN_STEPS, find_growth
from patterns.rewrite import rewrite_defines

__all__ = ["PatternAutomaton", "KeyState", "Attempt", "StepStats"]


# the variable bit of a '$' run's move: no row has it, so any row ends the run
_NO_ROW = 1 << 16

# Drop later attempts that sit in the head attempt's automaton state (see _step_key_dfa); a
# switch so benchmarks and tests can measure and check the engine without it.
MERGE_EQUIVALENT_ATTEMPTS = True

# Apply the exact rewrites of patterns/rewrite.py (LAST(X.col) as PREV(col) where X's row is always
# the one before) to DEFINE before splitting it; a switch so tests compare with the unrewritten
# automaton.
REWRITE_CONDITIONS = True



class Attempt:
    """All partial matches that start at one row, in preference order, and the best match so far."""

    __slots__ = ("start", "start_ts", "threads", "best", "path", "timeout")

    def __init__(self, start: int, start_ts: int, threads: Any, best: Any = None, path: list | None = None,
                 timeout: tuple | None = None):
        self.start = start
        self.start_ts = start_ts
        self.threads = threads  # [(pc, node)] highest preference first; or a DFA state id
        self.best = best  # a Node; or, for a DFA attempt, the last row of the best match
        self.path = path  # DFA attempts: the state before each of their rows (for replay)
        # WITH TIMEOUT ROWS: (node, variables waited for, deadline) once WITHIN ended it unmatched
        self.timeout = timeout


class FastMatch:
    """A lazy-DFA match read without its node chain: its last row, length and each row's variable."""

    __slots__ = ("rno", "n", "vids")

    def __init__(self, start: int, end: int, vids: list[int]):
        self.rno = end
        self.n = end - start + 1
        self.vids = vids


class KeyState:
    """One partition key's runtime state: retained rows, live attempts, match counter."""

    __slots__ = ("rows", "base", "nrows", "attempts", "resume", "match_number", "last_ts", "deferred",
                 "unmatched_from", "covered_end", "lanes")

    def __init__(self) -> None:
        self.rows: list[tuple] = []  # rows [base, base + len(rows)) of the partition
        self.base = 0
        # rows of the partition stepped so far; inside a step it already counts the whole
        # segment while rows are appended in runs of 64, so base + len(rows) may be smaller
        self.nrows = 0
        self.attempts: list[Attempt] = []  # lists, not deques: an empty deque costs 760 bytes
        self.resume = 0  # first row at which a new match may start (after a skip)
        self.match_number = 0
        self.last_ts: int | None = None
        self.deferred: list[tuple[Node, int]] = []  # matches waiting for NEXT's rows
        # WITH UNMATCHED ROWS: the first row not yet output or known to be in a match, and the
        # last row of the matches output so far
        self.unmatched_from = 0
        self.covered_end = -1
        self.lanes: Any = None  # the lane path's arrays of this key's start rows (cep/lanes.py)


@dataclass
class StepStats:
    """Counters the operator reports."""

    matches: int = 0
    rows_emitted: int = 0
    partial_matches_peak: int = 0
    partial_matches_dropped: int = 0
    cap_hits: int = 0
    budget_dropped: int = 0  # partial matches dropped because the next row would step too many
    budget_hits: int = 0  # rows after which the work budget dropped partial matches
    timeouts: int = 0  # partial matches WITHIN ended without a match (WITH TIMEOUT ROWS)
    absences: int = 0  # matches completed by a deadline (a pattern ending with NOT)
    eval_errors: int = 0
    skip_errors: int = 0
    seconds_ingest: float = 0.0  # time fields, keys, lateness, buffering
    seconds_predicates: float = 0.0  # column-wise condition masks
    seconds_automaton: float = 0.0  # stepping partial matches, measures, output rows
    keys_expired: int = 0  # keys idle past the idle-state TTL whose state was freed
    buffer_cap_hits: int = 0  # times the buffered-events cap forced the watermark forward


class PatternAutomaton:
    """The compiled, immutable runtime form of one MATCH_RECOGNIZE rule."""

    attempt_class = Attempt  # (cep/lanes.py builds attempts without importing this module)
    fast_match_class = FastMatch  # (and matches whose measures are row lookups)
    rewrite = True  # apply patterns/rewrite.py (a tracing subclass shows the conditions as written)

    def __init__(
        self,
        cp: CompiledPattern,
        extra_columns: list[str] | None = None,
        max_partial_matches: int = 10_000,
        on_cap: str = "drop_oldest",
        max_steps_per_event: int | None = None,
        rewrite: bool | None = None,
    ):
        mr = cp.statement
        self.cp = cp
        # rewrite: None follows REWRITE_CONDITIONS and the class; a restore passes the mode its
        # snapshot was written in (the rewrite can turn a rule's runs from node chains into DFA states)
        self.rewritten = (REWRITE_CONDITIONS and self.rewrite) if rewrite is None else rewrite
        self.mr = mr
        prog = cp.program
        self.ins = prog.instructions
        self.var_names = prog.var_names
        self.nvars = len(self.var_names)
        self.max_partial_matches = max_partial_matches
        self.on_cap = on_cap
        self.max_steps_per_event = max_steps_per_event  # as given (None: the default)
        # the work budget: partial matches one row of a key may step (None: only the cap bounds it)
        self.growth = find_growth(cp)
        self.max_steps: int | None = (
            max_steps_per_event if max_steps_per_event is not None
            else GROWING_PATTERN_STEPS if self.growth is not None else None
        )
        # '$' (OP_END) is a run that waits for the end of the partition: any row ends it, the end
        # makes it a match (see flush). Only a '$' that the match's end follows is kept.
        self.end_pcs = frozenset(
            pc for pc, x in enumerate(self.ins) if x[0] == OP_END and self._reaches_match_at_end(x[1])
        )
        self.anchored = any(x[0] in (OP_BEGIN, OP_END) for x in self.ins)
        # closure[pc]: VAR / MATCH instructions reachable from pc without consuming a row, in
        # preference order; a pc reached twice is the same run with less preference, so dropped.
        self.closure = [self._closure(pc) for pc in range(len(self.ins))]
        # moves[pc] for a VAR instruction: (variable, excluded, the runs a row taken there goes
        # on to, in preference order, and whether it completes a match, which outranks the rest)
        self.moves: list[tuple[int, bool, tuple[int, ...], bool] | None] = [None] * len(self.ins)
        for pc, x in enumerate(self.ins):
            if x[0] == 0:  # OP_VAR
                after = self.closure[x[2]]
                stop = next((i for i, q in enumerate(after) if self.ins[q][0] == OP_MATCH), len(after))
                self.moves[pc] = (x[1], x[3], after[:stop], stop < len(after))
        # NOT B (OP_IGNORE): moves[pc] = (-1, (kill bits, kill vars, final, row var), targets,
        # completes); a final one (the pattern's end) keeps its run on its node until the deadline
        self.final_pcs: frozenset[int] = frozenset()
        for pc, x in enumerate(self.ins):
            if x[0] == OP_IGNORE:
                _, kill, nxt, final, row_vid = x
                bits = 0
                for v in kill:
                    bits |= 1 << v
                if final:
                    self.moves[pc] = (-1, (bits, kill, True, row_vid), (pc,), False)
                    self.final_pcs |= {pc}
                else:
                    after = self.closure[nxt]
                    stop = next((i for i, q in enumerate(after) if self.ins[q][0] == OP_MATCH), len(after))
                    self.moves[pc] = (-1, (bits, kill, False, row_vid), after[:stop], stop < len(after))
        self.has_not = any(x[0] == OP_IGNORE for x in self.ins)
        self.timeout_rows = mr.timeout_rows
        # a deadline does more than end runs: it completes absences or reports timed-out runs
        self.deadline_work = self.has_not or self.timeout_rows
        # AFTER MATCH NO SKIP: every run that completes is a match (matches found in a row step wait
        # in _done until the step resolves them)
        self.no_skip = mr.skip.mode == "NO_SKIP"
        self._done: list[tuple[Attempt, Node]] = []
        # at the partition's first row '^' passes; elsewhere it blocks (already in closure[])
        for pc in self.end_pcs:
            self.moves[pc] = (_NO_ROW, False, (), False)
        self.start_closure = self.closure[0]
        self.first_closure = self._closure(0, at_start=True)
        self._unset = (-1,) * self.nvars
        self.start_bits = 0
        for v in prog.start_vars:
            self.start_bits |= 1 << v
        self.within = mr.within_ms
        self.skip = mr.skip
        self.skip_vars = None
        if mr.skip.var is not None:
            self.skip_vars = (
                frozenset([cp.var_ids[mr.skip.var]]) if mr.skip.var in cp.var_ids else cp.subsets[mr.skip.var]
            )

        cols = list(mr.partition_by) + [mr.order_by]
        for c in extra_columns or []:
            if c not in cols:
                cols.append(c)
        layout = Layout(cols, self.var_names, cp.subsets)
        self.layout = layout

        # DEFINE: split each condition into row-local conjuncts (column-wise, per batch) and the
        # rest (per partial match).
        self.local_kernels: list[list[Callable]] = [[] for _ in range(self.nvars)]
        self.local_exprs: list[list[A.Expr]] = [[] for _ in range(self.nvars)]
        self.hist: list[Callable | None] = [None] * self.nvars
        self.hist_exprs: list[A.Expr | None] = [None] * self.nvars  # what hist[] evaluates
        self.row_local_fns: list[list[Callable]] = [[] for _ in range(self.nvars)]
        max_back = 0
        # what the conditions are evaluated as: the user's text, or its exact rewrite
        self.defines = rewrite_defines(cp) if self.rewritten else cp.defines
        for vid, expr in self.defines.items():
            name = self.var_names[vid]
            local, rest = [], []
            for conj in split_conjuncts(expr):
                (local if is_row_local(conj, name, cp.subsets, vid) else rest).append(conj)
            for conj in local:
                for x in A.walk_expr(conj):
                    if isinstance(x, A.Nav) and x.kind == "PREV":
                        max_back = max(max_back, x.offset)
                    if isinstance(x, A.Column):
                        layout.column(x.name)
                self.local_exprs[vid].append(conj)
                self.local_kernels[vid].append(compile_columnar(conj, name))
                self.row_local_fns[vid].append(compile_local_rows(conj, name))
            if rest:
                cond = rest[0] if len(rest) == 1 else A.Logical("AND", tuple(rest))
                self.hist[vid] = compile_match_expr(cond, layout, vid)
                self.hist_exprs[vid] = cond
        self.history_free = all(h is None for h in self.hist)

        # MEASURES
        self.measures: list[tuple[str, Callable]] = []
        # measures a match's values cannot give (text where a number is expected, an aggregate
        # that met such a value): NULL in the row, counted; the operator adds them to eval_errors
        self.measure_errors = 0
        for m in mr.measures:
            self.measures.append((m.name, self.guarded(compile_match_expr(m.expr, layout))))
        for e in [m.expr for m in mr.measures] + list(self.defines.values()):
            for x in A.walk_expr(e):
                if isinstance(x, A.Nav) and x.kind in ("PREV", "NEXT"):
                    max_back = max(max_back, x.offset if x.kind == "PREV" else 0)
        self.max_back = max_back
        self.max_next = max(
            [x.offset for m in mr.measures for x in A.walk_expr(m.expr) if isinstance(x, A.Nav) and x.kind == "NEXT"],
            default=0,
        )
        # NEXT in DEFINE: a row is stepped once this many rows of its key follow it (or at the
        # partition's end); see PatternOperator._step_held
        self.lookahead = max(
            [x.offset for e in self.defines.values() for x in A.walk_expr(e) if isinstance(x, A.Nav) and x.kind == "NEXT"],
            default=0,
        )
        self.with_unmatched = mr.with_unmatched
        self.aggs = layout.aggs
        # per variable: the aggregates a row mapped to it updates (most rows update few or none)
        self.agg_updates: list[tuple[tuple[int, Any], ...]] = [
            tuple((i, a) for i, a in enumerate(self.aggs) if a.vars is None or v in a.vars) for v in range(self.nvars)
        ]
        # ... as one function per variable: (aggregate states, row) -> states after the row
        self.agg_steps: list[Callable[[tuple, tuple], tuple] | None] = [
            _aggs_step(upd, len(self.aggs)) for upd in self.agg_updates
        ]
        self.columns = layout.columns
        self.npartition = len(mr.partition_by)
        self.all_rows = mr.rows_per_match == "ALL"
        self.time_index = layout.col_index[mr.order_by]
        self._init_dfa()
        # measures read by row lookups (None: some measure needs the node chain); the lazy DFA
        # (fast_plan) and the lane path (cep/lanes.py) output matches by it without a chain
        self.row_plan = self._fast_plan()
        self.fast_plan = None if self.track else self.row_plan
        self._fast_cache: dict[tuple[int, ...], list[int]] = {}
        # partial_matches_peak counts the automaton positions of a start row's runs where runs in
        # one position share their future (_peak_count), so that a rule counts the same on every
        # path: the lazy DFA holds one run per position, the general path may hold several
        self.same_future = not self.dfa and self._runs_share_future()
        # many live start rows of a linear pattern as arrays (cep/lanes.py), or None; not for a rule
        # whose runs share their future (only with the rewrite off: the lanes count every run)
        self.lanes: LanePlan | None = None if self.same_future else self._lane_plan()

    def _lane_plan(self) -> LanePlan | None:
        return lane_plan(self)

    def _runs_share_future(self) -> bool:
        """Whether two runs of one start row in one automaton position have the same future: no
        condition reads the match (as evaluated, or after the exact rewrites when they are off),
        and no deadline or NO SKIP needs each run's own rows."""
        if self.deadline_work or self.no_skip:
            return False
        if self.history_free:
            return True
        if self.rewritten:
            return False
        cp = self.cp
        return all(is_row_local(c, self.var_names[vid], cp.subsets, vid)
                   for vid, expr in rewrite_defines(cp).items() for c in split_conjuncts(expr))

    def _peak_count(self, attempts: list[Attempt], head: Attempt | None) -> int:
        """The partial matches of a key for ``partial_matches_peak`` when runs in one position share
        their future (:attr:`same_future`): per live start row the positions of its runs (the
        lazy DFA's state), none for a later start row in the positions of ``head`` (the first start
        row before this row's resolve) that the lazy DFA merges into it (:meth:`_step_key_dfa`)."""
        hp: tuple[int, ...] | None = None
        hb = None
        if head is not None and head.threads and self.skip.mode == "PAST_LAST_ROW" and self.within is None and MERGE_EQUIVALENT_ATTEMPTS:
            hp = tuple(dict.fromkeys([pc for pc, _ in head.threads]))
            b = head.best
            hb = b if b is None or isinstance(b, int) else b.rno
        n = 0
        for x in attempts:
            th = x.threads
            if not th:
                continue
            pos = tuple(dict.fromkeys([pc for pc, _ in th]))
            if hp is not None and x is not head and pos == hp and x.best is None and (hb is None or hb >= x.start):
                continue
            n += len(pos)
        return n

    def _peak_count_dfa(self, attempts: list[Attempt]) -> int:
        """The partial matches of a lazy-DFA key for ``partial_matches_peak``: the positions of the
        live start rows' states (what :meth:`_peak_count` counts on the general path)."""
        states = self.dfa_states
        return sum([len(states[x.threads]) for x in attempts])

    # ------------------------------------------------------------------ compile helpers
    def _closure(self, pc: int, at_start: bool = False) -> tuple[int, ...]:
        out: list[int] = []
        seen: set[int] = set()

        def visit(p: int) -> None:
            if p in seen:
                return
            seen.add(p)
            ins = self.ins[p]
            op = ins[0]
            if op == 1:  # SPLIT
                for t in ins[1]:
                    visit(t)
            elif op == 2:  # JMP
                visit(ins[1])
            elif op == OP_BEGIN:
                if at_start:
                    visit(ins[1])
            elif op == OP_END:
                if p in self.end_pcs:
                    out.append(p)
            else:
                out.append(p)

        visit(pc)
        return tuple(out)

    def _reaches_match_at_end(self, pc: int) -> bool:
        """Whether MATCH follows ``pc`` without another row (past the last row '^' blocks)."""
        seen: set[int] = set()
        stack = [pc]
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            x = self.ins[p]
            if x[0] == OP_MATCH:
                return True
            if x[0] == 1:
                stack.extend(x[1])
            elif x[0] in (2, OP_END):
                stack.append(x[1])
        return False

    def guarded(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``fn`` (a measure) giving NULL where its values raise a type or arithmetic error,
        counted in :attr:`measure_errors`."""

        def measure(arg: Any) -> Any:
            try:
                return fn(arg)
            except (TypeError, ValueError, ArithmeticError):
                self.measure_errors += 1
                return None

        return measure

    # ------------------------------------------------------------------ nodes
    def new_node(self, rno: int, vid: int, parent: Node | None, row: tuple, excl: bool) -> Node:
        if not self.track:
            # history-free rules: measures walk the (short) chain instead of indexed lookups
            if parent is None:
                aggs = tuple(a.init() for a in self.aggs) if self.aggs else ()
                n = 1
            else:
                aggs = parent.aggs
                n = parent.n + 1
            step = self.agg_steps[vid]
            if step is not None:
                aggs = step(aggs, row)
            return Node(rno, vid, parent, n, None, None, aggs, excl)
        if parent is None:
            last = self._unset[:vid] + (rno,) + self._unset[vid + 1 :]
            first = last
            aggs = tuple([a.init() for a in self.aggs]) if self.aggs else ()
            n = 1
        else:
            pl = parent.last
            last = pl[:vid] + (rno,) + pl[vid + 1 :]
            pf = parent.first
            first = pf if pf[vid] >= 0 else pf[:vid] + (rno,) + pf[vid + 1 :]
            aggs = parent.aggs
            n = parent.n + 1
        step = self.agg_steps[vid]
        if step is not None:
            aggs = step(aggs, row)
        return Node(rno, vid, parent, n, last, first, aggs, excl)

    # ------------------------------------------------------------------ stepping
    def step_key(
        self,
        st: KeyState,
        cols: list[list],
        s: int,
        e: int,
        masks: list[int],
        ts: list[int],
        emit: Callable[[KeyState, Node], None],
        stats: StepStats,
        candidates: list[int] | None = None,
        rows_all: list[tuple] | None = None,
        materialised: bool = False,
    ) -> None:
        """Advance ``st`` over rows ``s..e-1`` of a batch (this key's rows, in event-time order).

        ``cols`` holds the batch's columns (the automaton's layout) as lists; ``masks[j]`` has bit
        v set when row j passes the row-local part of variable v's condition. ``candidates``
        (optional, sorted) lists the rows whose mask can start a match: while no partial match is
        alive, the rows between them are skipped without being looked at. ``materialised``: the
        rows are already in ``st.rows`` (from partition row ``st.nrows`` on, maybe with more known
        rows after them), so none is appended or dropped here.
        """
        if self.lanes is not None:
            return step_key_lanes(self, st, cols, s, e, masks, ts, emit, stats, candidates, rows_all, materialised)
        if self.dfa:
            return self._step_key_dfa(st, cols, s, e, masks, ts, emit, stats, candidates, rows_all, materialised)
        start_rno = st.nrows - s  # partition row number of batch row j is start_rno + j
        st.nrows += e - s
        if e > s:
            st.last_ts = ts[e - 1]
        max_back = self.max_back
        rows = st.rows
        mat = e if materialised else s  # batch rows [s, mat) are materialised in st.rows
        start_bits = self.start_bits
        hist = self.hist
        within = self.within
        past_last = self.skip.mode == "PAST_LAST_ROW"
        budget = self.max_steps
        attempts = st.attempts  # changed in place only
        no_skip = self.no_skip
        init_first = [(pc, None) for pc in self.first_closure]
        init_later = [(pc, None) for pc in self.start_closure]
        j = s
        ci = 0
        ncand = len(candidates) if candidates is not None else 0
        while j < e:
            if not attempts and candidates is not None:
                ci = bisect_left(candidates, max(j, st.resume - start_rno), ci)
                if ci >= ncand:
                    break
                j = candidates[ci]
                keep_from = j - max_back
                if keep_from > mat and not st.deferred:
                    rows = self._drop_before(st, start_rno + keep_from)
                    mat = keep_from
            if mat <= j:
                upto = min(e, j + 64)
                rows.extend(rows_all[mat:upto] if rows_all is not None else zip(*[c[mat:upto] for c in cols]))
                mat = upto
            m = masks[j]
            rno = start_rno + j
            row = rows[rno - st.base]
            t = ts[j]
            # advance every live attempt by this row
            for a in attempts:
                if not a.threads:
                    continue
                if within is not None and t - a.start_ts >= within:
                    self._within_ended(a, rno, stats)
                    continue
                a.threads = self._advance(a, a.threads, m, rno, row, st, stats, hist)
            # a new attempt may start here
            if m & start_bits and rno >= st.resume:
                a = Attempt(rno, t, [])
                a.threads = self._advance(a, init_later if rno else init_first, m, rno, row, st, stats, hist)
                if a.threads or a.best is not None:
                    attempts.append(a)
            if attempts:
                if len(attempts) == 1:
                    head = attempts[0]
                    first: Attempt | None = head
                    # (what _resolve does for a live head that cannot skip anything: nothing)
                    if not head.threads or no_skip or (past_last and head.best is not None):
                        self._resolve(st, emit, stats, past_last)
                    live = len(attempts[0].threads) if attempts else 0
                else:
                    if sum([len(x.threads) for x in attempts]) > self.max_partial_matches:
                        self._over_cap(st, stats)
                    first = attempts[0] if attempts else None  # (the skip_key cap clears them)
                    self._resolve(st, emit, stats, past_last)
                    live = sum([len(x.threads) for x in attempts])
                # the most one key held at once (positions, not runs, where runs in one position
                # share their future: _peak_count; never more than the runs, so counted only then)
                if live > stats.partial_matches_peak:
                    n = self._peak_count(attempts, first) if self.same_future else live
                    if n > stats.partial_matches_peak:
                        stats.partial_matches_peak = n
                if budget is not None and live > budget:
                    self._over_budget(st, live, emit, stats, past_last)
            j += 1
        if not st.attempts and not st.deferred and e - max_back > mat:
            rows = self._drop_before(st, start_rno + e - max_back)
            mat = e - max_back
        if mat < e:
            rows.extend(rows_all[mat:e] if rows_all is not None else zip(*[c[mat:e] for c in cols]))
        if len(rows) > 128:
            self._trim(st)

    @staticmethod
    def _drop_before(st: KeyState, rno: int) -> list:
        """Forget retained rows before partition row ``rno`` (which may lie past the last one)."""
        end = st.base + len(st.rows)
        if rno >= end:
            st.rows = []
        else:
            del st.rows[: rno - st.base]
        st.base = rno
        return st.rows

    def _advance(self, a: Attempt, threads, m, rno, row, st, stats, hist) -> list:
        """Every run of attempt ``a`` that can take row ``rno``, extended by it, in preference order.

        Runs are not merged here when a condition looks back at the match (two runs in one
        automaton state may have different futures); for the other rules on this path (anchored
        ones, see ``merge_runs``) a run in a state that a more preferred run already holds ends.
        """
        new: list = []
        append = new.append
        # (one run's targets are distinct already: a closure lists each state once)
        seen: set[int] | None = set() if self.merge_runs and len(threads) > 1 else None
        ctx = None
        steps = self.agg_steps
        moves = self.moves
        for pc, node in threads:
            vid, excl, targets, matches = moves[pc]
            if vid < 0:  # NOT B: a B row ends the run, any other row is skipped
                bits, kill, final, row_vid = excl
                if m & bits and self._killed(kill, m, node, rno, row, st, stats):
                    continue
                if final:
                    append((pc, node))  # the run stays on its node until the deadline
                    continue
                child = self.new_node(rno, row_vid, node, row, True)
                for q in targets:
                    append((q, child))
                if matches:
                    a.best = child
                    if self.no_skip:
                        self._done.append((a, child))
                        continue
                    break
                continue
            if not (m >> vid) & 1:
                continue
            if node is None:
                child = self.new_node(rno, vid, None, row, excl)
            else:
                # (new_node, inlined: this runs once per partial match and row)
                pl = node.last
                pf = node.first
                step = steps[vid]
                child = Node(
                    rno, vid, node, node.n + 1, pl[:vid] + (rno,) + pl[vid + 1 :],
                    pf if pf[vid] >= 0 else pf[:vid] + (rno,) + pf[vid + 1 :],
                    node.aggs if step is None else step(node.aggs, row), excl,
                )
            h = hist[vid]
            if h is not None:
                if ctx is None:
                    ctx = MatchCtx(child, child, st.rows, st.base, st.nrows, st.match_number + 1, row)
                else:
                    ctx.node = ctx.final = child
                try:
                    v = h(ctx)
                except (TypeError, ValueError, ArithmeticError):
                    stats.eval_errors += 1
                    continue
                if v is not True and not truthy(v):
                    continue
            if seen is None:
                for q in targets:
                    append((q, child))
            else:
                for q in targets:
                    if q not in seen:
                        seen.add(q)
                        append((q, child))
            if matches:
                a.best = child
                if self.no_skip:  # every run's match is reported: nothing is cut
                    self._done.append((a, child))
                    continue
                break  # every later run is less preferred than this match
        if len(new) > self.max_partial_matches:
            stats.partial_matches_dropped += len(new) - self.max_partial_matches
            del new[self.max_partial_matches :]
        return new

    def _killed(self, kill: tuple[int, ...], m: int, node: Node, rno: int, row: tuple, st: KeyState,
                stats: StepStats) -> bool:
        """Whether the row is one of the NOT variables for the run at ``node`` (its full condition)."""
        hist = self.hist
        for v in kill:
            if not (m >> v) & 1:
                continue
            h = hist[v]
            if h is None:
                return True
            child = self.new_node(rno, v, node, row, False)
            try:
                got = h(MatchCtx(child, child, st.rows, st.base, st.nrows, st.match_number + 1, row))
            except (TypeError, ValueError, ArithmeticError):
                stats.eval_errors += 1
                continue
            if got is True or truthy(got):
                return True
        return False

    def _within_ended(self, a: Attempt, rno: int | None, stats: StepStats) -> None:
        """``WITHIN`` ran out for attempt ``a``: at partition row ``rno`` (whose time is past the
        deadline), or by the watermark (``rno`` None). Its absence completes or its time-out is
        noted (:meth:`_time_out`), then its runs end. Called once per attempt that WITHIN ends, never
        per row; a subclass may observe it (``cep explain``)."""
        if self.deadline_work:
            self._time_out(a, stats)
        a.threads = self._dead

    def _time_out(self, a: Attempt, stats: StepStats) -> None:
        """WITHIN's deadline has passed for attempt ``a``: complete its absence, or note its time-out.

        A run waiting at a final NOT completes the match it holds (the most preferred such run
        wins); otherwise, when the rule asks for timeout rows and the attempt found no match, the
        most preferred live run is what timed out. The caller ends the runs.
        """
        th = a.threads
        if not th:
            return
        if self.final_pcs and (a.best is None or self.no_skip):
            for pc, node in th:
                if pc in self.final_pcs:
                    a.best = node
                    stats.absences += 1
                    if not self.no_skip:
                        return
                    self._done.append((a, node))
            if a.best is not None:
                return
        if self.timeout_rows and a.best is None:
            node = th[0][1]
            waiting: list[str] = []
            for pc, nd in th:
                if nd is node and self.ins[pc][0] == OP_VAR:
                    name = self.var_names[self.ins[pc][1]]
                    if name not in waiting:
                        waiting.append(name)
            assert self.within is not None
            a.timeout = (node, tuple(waiting), a.start_ts + self.within)

    def _over_cap(self, st: KeyState, stats: StepStats) -> None:
        """More partial matches than the cap: apply the rule's policy, count what is dropped."""
        stats.cap_hits += 1
        if self.on_cap == "skip_key":
            # forget every partial match of the key; it starts afresh from the next row
            for a in st.attempts:
                stats.partial_matches_dropped += 1 if isinstance(a.threads, int) else len(a.threads)
            st.attempts.clear()
            return

        def size(a: Attempt) -> int:
            # a DFA state is one run; a list or a lane (cep/lanes.py) has its runs' count
            return 1 if isinstance(a.threads, int) else len(a.threads)

        live = sum(size(a) for a in st.attempts)
        while live > self.max_partial_matches and len(st.attempts) > 1:
            a = st.attempts.pop(0)  # the oldest start row
            live -= size(a)
            stats.partial_matches_dropped += size(a)

    def _over_budget(self, st: KeyState, live: int, emit, stats: StepStats, past_last: bool) -> None:
        """More partial matches alive than the next row may step: drop the excess, count it.

        The order follows the rule's ``on_cap`` policy: drop_oldest ends the partial matches of
        the earliest start rows first and, within a start row, the least preferred first (a start
        row over the budget on its own keeps its most preferred); skip_key forgets every partial
        match of the key. A start row whose partial matches all end keeps the match it has found,
        which is reported as when its runs die of themselves.
        """
        budget = self.max_steps
        assert budget is not None
        if live <= budget:
            return
        stats.budget_hits += 1
        attempts = st.attempts
        dead = self._dead
        excess = live if self.on_cap == "skip_key" else live - budget
        for a in attempts:
            if excess <= 0:
                break
            th = a.threads
            if not th:
                continue
            n = len(th) if isinstance(th, list) else 1
            if n <= excess:
                a.threads = dead
                stats.budget_dropped += n
                excess -= n
            else:
                a.threads = th[: n - excess]  # the most preferred stay
                stats.budget_dropped += excess
                excess = 0
        attempts[:] = [a for a in attempts if a.threads or a.best is not None]
        self._resolve(st, emit, stats, past_last)

    def _resolve(self, st: KeyState, emit, stats: StepStats, past_last: bool) -> None:
        if self.no_skip:
            self._resolve_all(st, emit, stats)
            return
        attempts = st.attempts
        while attempts:
            head = attempts[0]
            if head.threads:
                if past_last and head.best is not None:
                    # any match of the head ends at or after its best so far: later starts up to
                    # there can never be reported
                    end = head.best if isinstance(head.best, int) else head.best.rno
                    while len(attempts) > 1 and attempts[1].start <= end:
                        del attempts[1]
                return
            del attempts[0]
            best = head.best
            if best is None:
                if head.timeout is not None:
                    stats.timeouts += 1
                    emit(st, head.timeout[0], None, head)
                continue
            if isinstance(best, int):
                best = self._rebuild(st, head, best)
            st.match_number += 1
            stats.matches += 1
            emit(st, best)
            st.resume = self._resume_row(head.start, best, stats)
            drop = 0
            while drop < len(attempts) and attempts[drop].start < st.resume:
                drop += 1
            if drop:
                del attempts[:drop]

    def _resolve_all(self, st: KeyState, emit, stats: StepStats) -> None:
        """AFTER MATCH NO SKIP: emit every match completed so far (start rows in order, then the
        runs' preference), report time-outs, and forget attempts with nothing alive."""
        done = self._done
        if done:
            self._done = []
            for _, node in done:
                st.match_number += 1
                stats.matches += 1
                emit(st, node)
        attempts = st.attempts
        if any(not a.threads for a in attempts):
            for a in attempts:
                if not a.threads and a.timeout is not None and a.best is None:
                    stats.timeouts += 1
                    emit(st, a.timeout[0], None, a)
            attempts[:] = [a for a in attempts if a.threads]

    def _resume_row(self, start: int, best: Node, stats: StepStats) -> int:
        mode = self.skip.mode
        if mode == "PAST_LAST_ROW":
            return best.rno + 1
        if mode == "TO_NEXT_ROW":
            return start + 1
        vs = self.skip_vars
        assert vs is not None
        rows = [n.rno for n in best.chain() if n.vid in vs]
        if not rows:
            stats.skip_errors += 1  # the standard raises; a stream reports it and moves on
            return start + 1
        target = rows[0] if mode == "TO_FIRST" else rows[-1]
        if target <= start:
            stats.skip_errors += 1
            return start + 1
        return target

    def expire(self, st: KeyState, watermark: int, emit, stats: StepStats) -> None:
        """End every attempt that ``WITHIN`` rules out once event time reaches ``watermark``."""
        if self.within is None or not st.attempts:
            return
        changed = False
        for a in st.attempts:
            if a.threads and watermark - a.start_ts >= self.within:
                self._within_ended(a, None, stats)
                changed = True
        if changed:
            self._resolve(st, emit, stats, self.skip.mode == "PAST_LAST_ROW")
            self._trim(st)

    def flush(self, st: KeyState, emit, stats: StepStats) -> None:
        """End of input: every partial match ends; the best match of each attempt is final.

        A run waiting at '$' is a match now: the partition has ended. Every live run of an
        attempt is preferred to its best match so far (less preferred runs were cut when it was
        found), so the first such run is the attempt's match. The end of a bounded input is also
        the end of time: every WITHIN deadline passes, so absences still open complete and open
        partial matches time out (a bounded Flink job's final watermark does the same).
        """
        ends = self.end_pcs
        for a in st.attempts:
            if ends and isinstance(a.threads, list):
                for pc, node in a.threads:
                    if pc in ends and node is not None:
                        a.best = node
                        if not self.no_skip:
                            break
                        self._done.append((a, node))
            if self.deadline_work and a.threads:
                self._time_out(a, stats)
            a.threads = self._dead
        self._resolve(st, emit, stats, self.skip.mode == "PAST_LAST_ROW")
        self._trim(st)

    def _trim(self, st: KeyState) -> None:
        keep = st.nrows - self.max_back
        if self.with_unmatched:
            keep = min(keep, st.unmatched_from)
        if st.attempts:
            keep = min(keep, st.attempts[0].start - self.max_back)
        if st.deferred:
            first = st.deferred[0][0]
            keep = min(keep, first.rno - first.n + 1 - self.max_back)
        drop = keep - st.base
        if drop > 64 and drop * 2 > len(st.rows):
            del st.rows[:drop]
            st.base = keep


    # ------------------------------------------------------------------ lazy DFA (history-free)
    # When no condition looks back at the match, a run's future depends only on its automaton
    # state, so the ordered list of live states of an attempt (after dropping less preferred
    # duplicates) is a DFA state, and its transition on a row mask is computed once and cached.
    # Nodes are not built while streaming; a match's rows are mapped to variables afterwards by
    # replaying the attempt over its own rows.

    _dead: Any = []

    def _init_dfa(self) -> None:
        # NOT, timed-out runs and anchors need each run's node (the lazy DFA keeps automaton states)
        self.dfa = self.history_free and not self.anchored and not self.deadline_work and not self.no_skip
        self.track = not self.dfa
        # an anchored history-free rule takes the general path (anchors need nodes), but its runs
        # in one automaton state still share their future: _advance keeps the most preferred
        # of them, as the DFA does, or (A|B)+ $ would hold 2^n runs (the growth check, which
        # counts on that merge, gives it no budget, and the cap dropped the earliest start rows)
        self.merge_runs = self.history_free and not self.deadline_work and not self.no_skip
        self._dead = 0 if self.dfa else []
        self.dfa_states: list[tuple[int, ...]] = [()]
        self.dfa_widest = 0  # the most positions of a state built so far (bounds _peak_count_dfa)
        self.dfa_ids: dict[tuple[int, ...], int] = {(): 0}
        self.dfa_trans: list[dict[int, tuple[int, bool]]] = [{}]
        self.dfa_start = self._dfa_id(tuple(self.start_closure))

    def _dfa_id(self, pcs: tuple[int, ...]) -> int:
        sid = self.dfa_ids.get(pcs)
        if sid is None:
            self.dfa_widest = max(self.dfa_widest, len(pcs))
            sid = len(self.dfa_states)
            self.dfa_ids[pcs] = sid
            self.dfa_states.append(pcs)
            self.dfa_trans.append({})
        return sid

    def _dfa_step(self, sid: int, m: int) -> tuple[int, int, tuple[int, ...]]:
        """(next state, the pc whose step completed a match or -1, the pc each new run came from)."""
        ins, closure = self.ins, self.closure
        new: list[int] = []
        parents: list[int] = []
        seen: set[int] = set()
        match_pc = -1
        for pc in self.dfa_states[sid]:
            _, vid, nxt, _ = ins[pc]
            if not (m >> vid) & 1:
                continue
            for q in closure[nxt]:
                if ins[q][0] == OP_MATCH:
                    match_pc = pc
                    break
                if q not in seen:
                    seen.add(q)
                    new.append(q)
                    parents.append(pc)
            if match_pc >= 0:
                break
        res = (self._dfa_id(tuple(new)), match_pc, tuple(parents))
        if len(self.dfa_trans[sid]) < 4096:
            self.dfa_trans[sid][m] = res
        return res

    def _step_key_dfa(self, st, cols, s, e, masks, ts, emit, stats, candidates, rows_all=None,
                      materialised=False) -> None:
        start_rno = st.nrows - s
        st.nrows += e - s
        if e > s:
            st.last_ts = ts[e - 1]
        max_back = self.max_back
        rows = st.rows
        mat = e if materialised else s
        start_bits = self.start_bits
        within = self.within
        past_last = self.skip.mode == "PAST_LAST_ROW"
        trans = self.dfa_trans
        start_sid = self.dfa_start
        attempts = st.attempts
        merge = past_last and within is None and MERGE_EQUIVALENT_ATTEMPTS
        budget = self.max_steps
        j = s
        ci = 0
        ncand = len(candidates) if candidates is not None else 0
        while j < e:
            if not attempts and candidates is not None:
                ci = bisect_left(candidates, max(j, st.resume - start_rno), ci)
                if ci >= ncand:
                    break
                j = candidates[ci]
                keep_from = j - max_back
                if keep_from > mat and not st.deferred:
                    rows = self._drop_before(st, start_rno + keep_from)
                    mat = keep_from
            if mat <= j:
                upto = min(e, j + 64)
                rows.extend(rows_all[mat:upto] if rows_all is not None else zip(*[c[mat:upto] for c in cols]))
                mat = upto
            m = masks[j]
            rno = start_rno + j
            t = ts[j]
            for a in attempts:
                sid = a.threads
                if not sid:
                    continue
                if within is not None and t - a.start_ts >= within:
                    a.threads = 0
                    continue
                r = trans[sid].get(m)
                if r is None:
                    r = self._dfa_step(sid, m)
                a.path.append(sid)
                a.threads = r[0]
                if r[1] >= 0:
                    a.best = rno
            if m & start_bits and rno >= st.resume:
                head = attempts[0] if attempts else None
                if not (past_last and head is not None and head.best is not None and head.best >= rno):
                    r = trans[start_sid].get(m)
                    if r is None:
                        r = self._dfa_step(start_sid, m)
                    if r[0] or r[1] >= 0:
                        attempts.append(Attempt(rno, t, r[0], rno if r[1] >= 0 else None, [start_sid]))
                        if len(attempts) > self.max_partial_matches:
                            self._over_cap(st, stats)
            if merge and len(attempts) > 1:
                # SKIP PAST LAST ROW without WITHIN: a later attempt in the head's automaton state
                # has the head's future exactly, so the head's match (ending at or after this row)
                # will skip past it; unless it holds a match of its own, it can go now
                head = attempts[0]
                hs = head.threads
                if hs:
                    hb = head.best
                    for x in attempts[1:]:
                        if x.threads == hs and x.best is None and (hb is None or hb >= x.start):
                            attempts[1:] = [
                                y for y in attempts[1:]
                                if y.threads != hs or y.best is not None or (hb is not None and hb < y.start)
                            ]
                            break
            if attempts:
                head = attempts[0]
                # (what _resolve would do: nothing while the head lives and cannot skip others)
                if not head.threads or (past_last and head.best is not None and len(attempts) > 1):
                    self._resolve(st, emit, stats, past_last)
                if len(attempts) * self.dfa_widest > stats.partial_matches_peak:
                    n = self._peak_count_dfa(attempts)
                    if n > stats.partial_matches_peak:
                        stats.partial_matches_peak = n
                if budget is not None and len(attempts) > budget:
                    self._over_budget(st, sum(1 for x in attempts if x.threads), emit, stats, past_last)
            j += 1
        if not attempts and not st.deferred and e - max_back > mat:
            rows = self._drop_before(st, start_rno + e - max_back)
            mat = e - max_back
        if mat < e:
            rows.extend(rows_all[mat:e] if rows_all is not None else zip(*[c[mat:e] for c in cols]))
        if len(rows) > 128:
            self._trim(st)

    def _rebuild(self, st: KeyState, a: Attempt, end: int) -> Node | FastMatch:
        """Map the rows of a DFA match to variables: walk the recorded states back from the end.

        With a fast measure plan the match stays a :class:`FastMatch` (the variable of each row);
        otherwise it becomes a node chain, as the general path builds.
        """
        if not self.dfa:  # a match found by the lane path (cep/lanes.py) holds its last row
            return lane_match(self, st, a, end)
        consumers = self._consumers(st, a, end)
        ins = self.ins
        start = a.start
        if self.fast_plan is not None:
            return FastMatch(start, end, [ins[c][1] for c in consumers])
        rows, base = st.rows, st.base
        node = None
        for i, c in enumerate(consumers):
            rno = start + i
            node = self.new_node(rno, ins[c][1], node, rows[rno - base], ins[c][3])
        assert node is not None
        return node

    def _consumers(self, st: KeyState, a: Attempt, end: int) -> list[int]:
        """The program counter that consumed each row of a DFA match, first row first."""
        start = a.start
        path = a.path
        rows, base = st.rows, st.base
        trans = self.dfa_trans
        length = end - start + 1
        consumers = [0] * length
        sid = path[length - 1]
        m = rows[end - base][-1]
        r = trans[sid].get(m) or self._dfa_step(sid, m)
        c = r[1]
        consumers[-1] = c
        for i in range(length - 1, 0, -1):
            prev = path[i - 1]
            m = rows[start + i - 1 - base][-1]
            r = trans[prev].get(m) or self._dfa_step(prev, m)
            c = r[2][self.dfa_states[r[0]].index(c)]
            consumers[i - 1] = c
        return consumers

    def _fast_plan(self) -> list[tuple[str, str, frozenset[int] | None, int]] | None:
        """Measures a match can be read by without its node chain (a :class:`FastMatch`), or None.

        Holds for ONE ROW PER MATCH without aggregates or NEXT, skipping past the last row or to
        the next row, when every measure is a column (the last row of its variable), FIRST/LAST of
        one without an offset, CLASSIFIER() or MATCH_NUMBER(): each is then one row lookup.
        """
        if self.all_rows or self.max_next or self.aggs or self.skip.mode not in ("PAST_LAST_ROW", "TO_NEXT_ROW"):
            return None
        plan: list[tuple[str, str, frozenset[int] | None, int]] = []
        for m in self.mr.measures:
            e = m.expr
            if isinstance(e, A.MatchNumber):
                plan.append((m.name, "MN", None, -1))
                continue
            if isinstance(e, A.Classifier) and e.var is None:
                plan.append((m.name, "CLS", None, -1))
                continue
            if isinstance(e, A.Column):
                kind, col = "LAST", e
            elif isinstance(e, A.Nav) and e.kind in ("FIRST", "LAST") and e.offset == 0 and isinstance(e.arg, A.Column):
                kind, col = e.kind, e.arg
            else:
                return None
            plan.append((m.name, kind, self.layout.var_set(col.var), self.layout.col_index[col.name]))
        return plan

    def _fast_rows_of(self, vids: list[int]) -> list[int]:
        """Per fast-plan measure, the row (index into the match) it reads; -1 for NULL, -2 for the
        match number, -3 for the classifier. The same variable sequence always maps the same way."""
        key = tuple(vids)
        got = self._fast_cache.get(key)
        if got is not None:
            return got
        assert self.row_plan is not None
        out = []
        for _, kind, vs, _ci in self.row_plan:
            if kind in ("MN", "CLS"):
                out.append(-2 if kind == "MN" else -3)
                continue
            idx = -1
            if vs is None:
                idx = len(vids) - 1 if kind == "LAST" else 0
            elif kind == "LAST":
                for i in range(len(vids) - 1, -1, -1):
                    if vids[i] in vs:
                        idx = i
                        break
            else:
                for i, v in enumerate(vids):
                    if v in vs:
                        idx = i
                        break
            out.append(idx)
        if len(self._fast_cache) < 4096:
            self._fast_cache[key] = out
        return out

    def _fast_row(self, st: KeyState, fm: FastMatch, number: int) -> dict[str, Any]:
        rows = st.rows
        at = fm.rno - fm.n + 1 - st.base
        # (the partition columns lead each row; zip stops at them. Not a dict comprehension: in
        # this Python one costs a function call per match)
        out = dict(zip(self.mr.partition_by, rows[at]))
        assert self.row_plan is not None
        for (name, _, _, ci), idx in zip(self.row_plan, self._fast_rows_of(fm.vids)):
            if idx >= 0:
                out[name] = rows[at + idx][ci]
            elif idx == -1:
                out[name] = None
            elif idx == -2:
                out[name] = number
            else:
                out[name] = self.var_names[fm.vids[-1]]
        return out

    # ------------------------------------------------------------------ output
    def match_rows(self, st: KeyState, best: Node | FastMatch, match_number: int) -> list[dict[str, Any]]:
        """The output rows of one match (ONE ROW PER MATCH or ALL ROWS PER MATCH)."""
        if type(best) is FastMatch:
            return [self._fast_row(st, best, match_number)]
        assert isinstance(best, Node)
        rows, base, nrows = st.rows, st.base, st.nrows
        first_row = rows[best.rno - best.n + 1 - base]
        key = {c: first_row[i] for i, c in enumerate(self.mr.partition_by)}
        if not self.all_rows:
            ctx = MatchCtx(best, best, rows, base, nrows, match_number)
            out = dict(key)
            for name, fn in self.measures:
                out[name] = fn(ctx)
            return [out]
        result = []
        ctx = MatchCtx(best, best, rows, base, nrows, match_number)
        extra_i = len(self.columns)
        for node in best.chain():
            if node.excl:
                continue
            ctx.node = node
            row = rows[node.rno - base]
            out = dict(key)
            out[self.mr.order_by] = row[self.time_index]
            for name, fn in self.measures:
                out[name] = fn(ctx)
            record = row[extra_i] if len(row) > extra_i else None
            if isinstance(record, dict):
                for k, v in record.items():
                    if k not in out:
                        out[k] = v
            result.append(out)
        return result


def _agg_update(a: Any) -> Callable[[Any, tuple], Any]:
    """``a.update`` (cep.expressions.AggSpec) specialised to its function, for the hot loop."""
    f, arg = a.func, a.arg
    if arg is None:
        return lambda s, row: s + 1
    if f == "COUNT":
        return lambda s, row: s if arg(row) is None else s + 1
    if f in ("SUM", "AVG"):

        def sum_(s, row):
            v = arg(row)
            try:
                return s if v is None else (s[0] + v, s[1] + 1)
            except (TypeError, ValueError, ArithmeticError):  # (BAD_AGGREGATE fails here too)
                return BAD_AGGREGATE

        return sum_
    if f in ("MIN", "MAX"):
        pick = min if f == "MIN" else max

        def extreme(s, row):
            v = arg(row)
            try:
                return s if v is None else v if s is None else pick(s, v)
            except (TypeError, ValueError, ArithmeticError):
                return BAD_AGGREGATE

        return extreme
    return a.update


def _aggs_step(upd: tuple[tuple[int, Any], ...], n: int) -> Callable[[tuple, tuple], tuple] | None:
    """One function that applies a row to the aggregate states ``upd`` names (None: no update)."""
    if not upd:
        return None
    fns = [(i, _agg_update(a)) for i, a in upd]
    if len(fns) == 1:
        ((i, f),) = fns
        if n == 1:
            return lambda aggs, row: (f(aggs[0], row),)
        return lambda aggs, row: aggs[:i] + (f(aggs[i], row),) + aggs[i + 1 :]
    if len(fns) == n:
        fs = tuple(f for _, f in fns)
        return lambda aggs, row: tuple([f(s, row) for f, s in zip(fs, aggs)])

    def step(aggs: tuple, row: tuple) -> tuple:
        out = list(aggs)
        for i, f in fns:
            out[i] = f(out[i], row)
        return tuple(out)

    return step
