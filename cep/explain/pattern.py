"""``cep explain`` for pattern rules: the engine's own operator, replayed with an observer.

Nothing here decides whether a row matches. The rule runs in a :class:`PatternOperator` over the
whole input (every key, so the watermark, lateness and deadlines are those of ``cep run``); two
subclasses only watch it: :class:`TracingAutomaton` overrides the automaton's few non-hot methods
(``step_key``, ``_advance``, ``_within_ended``, ``_over_cap``, ``_over_budget``, ``_resolve``,
``expire``, ``flush``), calls the engine's code, and writes down what changed for the explained
key's partial matches; :class:`ExplainOperator` does the same for the rows, masks and output rows.
The verdict of a condition is the engine's: the row-local part is the bit of the column-wise mask
the operator computed, the part that reads the match is the automaton's compiled function on the
partial match's own node. Operand values are evaluated by the engine's expression compiler.

Two differences from ``cep run``, neither changing a row (tests/cep/test_explain.py checks it on
every pattern rule of the example files): the automaton steps every rule on its general path (the
node histories), not the lazy DFA, batch DFA or lanes some rules get, since only nodes say which
row went to which variable; and ``PATTERN (A NOT B) WITHIN T`` rules run on the automaton rather
than on the column-wise absence path (:mod:`cep.absence`). The conditions are the ones ``cep run``
evaluates (after the exact rewrites of :mod:`patterns.rewrite`); the notes name the path ``cep
run`` takes and each rewritten condition as written (:mod:`cep.explain.paths`).

Example:
    >>> from cep.events import batch_from_records
    >>> from patterns.rules import parse_rule_text
    >>> rule = parse_rule_text('''SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
    ...   MEASURES A.ts AS t0, LAST(B.ts) AS t1 PATTERN (A B+) DEFINE A AS v = 0, B AS v > PREV(v))''', "up")
    >>> events = batch_from_records([{"k": "x", "ts": i, "v": v} for i, v in enumerate([0, 1, 2, 1])])
    >>> ex = explain_pattern(rule, events, {"k": "x"}, None, None)
    >>> [v.text for v in ex.rows[1].verdicts][:2]
    ['A: v 1 = 0: false', 'B: v 1 > PREV(v) 0: true']
    >>> [v.data["rows"] for v in ex.outcome if v.kind == "match"]
    [[{'k': 'x', 't0': 0, 't1': 2, 'rule': 'up'}]]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from cep.events import EventBatch, event_times, format_duration, format_time
from cep.explain.model import ExplainedRow, Explanation, Verdict
from cep.explain.paths import stepping_path
from cep.explain.rows import key_rows, refuse_joined
from cep.explain.sql import expr_sql
from cep.expressions import DERIVED, Layout, MatchCtx, Node, compile_match_expr, truthy
from cep.nfa import _NO_ROW, Attempt, KeyState, PatternAutomaton, StepStats
from cep.operator import OperatorOutput, PatternOperator
from patterns import ast as A
from patterns.compiler import OP_END, is_row_local, split_conjuncts
from patterns.errors import count_noun

__all__ = ["explain_pattern", "key_of_rule", "expr_sql", "TracingAutomaton", "ExplainOperator", "ROW_FIELD"]

ROW_FIELD = "__cep_explain_row"
"""The column that carries each event's position in the explained input through the engine."""

# at most this many rows of the key are shown in the table; past it the explanation says so
MAX_ROWS = 100_000


def _value(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "NULL"
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return repr(round(v, 6)) if abs(v) < 1e15 else repr(v)
    if isinstance(v, str):
        return repr(v if len(v) <= 60 else v[:57] + "...")
    return repr(v)


def _derived(e: A.Expr) -> bool:
    return any(isinstance(x, A.Func) and x.name in DERIVED for x in A.walk_expr(e))


# ------------------------------------------------------------------ conditions with their values


class Conditions:
    """Each DEFINE condition of an automaton split as the engine splits it, and shown with values.

    Operands are compiled by the engine's :func:`compile_match_expr` against a copy of the
    automaton's layout (so nothing is added to the running automaton's columns or aggregates).
    """

    def __init__(self, a: PatternAutomaton):
        self.a = a
        cp = a.cp
        src = a.layout
        layout = Layout(list(src.columns), src.var_names, src.subsets)
        layout.aggs = list(src.aggs)
        layout._agg_keys = dict(src._agg_keys)
        self.layout = layout
        self.local: dict[int, list[A.Expr]] = {}
        self.rest: dict[int, list[A.Expr]] = {}
        for vid, expr in a.defines.items():  # as the engine evaluates them (rewritten or not)
            name = a.var_names[vid]
            conj = split_conjuncts(expr)
            self.local[vid] = [c for c in conj if is_row_local(c, name, cp.subsets, vid)]
            self.rest[vid] = [c for c in conj if not is_row_local(c, name, cp.subsets, vid)]
        self._fns: dict[tuple[int, int], Any] = {}

    def defined(self, vid: int) -> bool:
        return vid in self.local

    def _eval(self, e: A.Expr, vid: int, ctx: MatchCtx) -> Any:
        key = (id(e), vid)
        fn = self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = compile_match_expr(e, self.layout, vid)
        return fn(ctx)

    def conjunct_text(self, e: A.Expr, vid: int, ctx: MatchCtx | None, verdict: bool | None) -> str:
        """``B.price 101.2 > PREV(B.price) 100.9: true``: the conjunct, its operands' values, verdict."""
        body = self._with_values(e, vid, ctx)
        if verdict is None and ctx is not None and not _derived(e):
            try:
                verdict = truthy(self._eval(e, vid, ctx))
            except (TypeError, ValueError, ArithmeticError, IndexError):
                return f"{body}: cannot be evaluated (counted as false)"
        return body if verdict is None else f"{body}: {'true' if verdict else 'false'}"

    def _with_values(self, e: A.Expr, vid: int, ctx: MatchCtx | None) -> str:
        if ctx is None or _derived(e):
            return expr_sql(e)

        def val(x: A.Expr) -> str:
            text = expr_sql(x)
            if isinstance(x, A.Literal):
                return text
            try:
                return f"{text} {_value(self._eval(x, vid, ctx))}"
            except (TypeError, ValueError, ArithmeticError, IndexError):
                return f"{text} (cannot be evaluated)"

        if isinstance(e, A.Compare):
            return f"{val(e.left)} {e.op} {val(e.right)}"
        if isinstance(e, (A.IsNull, A.Between, A.InList, A.Like)):
            rest = expr_sql(e)[len(expr_sql(e.operand)):]
            return f"{val(e.operand)}{rest}"
        refs = [x for x in A.walk_expr(e) if isinstance(x, (A.Column, A.Nav, A.Agg))]
        shown = []
        for x in refs:
            t = val(x)
            if t not in shown:
                shown.append(t)
            if len(shown) >= 4:
                break
        return f"{expr_sql(e)} [{', '.join(shown)}]" if shown else expr_sql(e)

    def row_local(self, vid: int, ctx: MatchCtx | None, held: bool) -> str:
        """The row-local part of a condition with values; ``held`` is the engine's mask bit."""
        parts = self.local[vid]
        if len(parts) == 1:
            return self.conjunct_text(parts[0], vid, ctx, held)
        texts = [self.conjunct_text(p, vid, ctx, None) for p in parts]
        return " AND ".join(texts) + f": {'true' if held else 'false'}"

    def history(self, vid: int, ctx: MatchCtx) -> str:
        return " AND ".join(self.conjunct_text(p, vid, ctx, None) for p in self.rest[vid])


# ------------------------------------------------------------------ the observer


def _chain_runs(a: PatternAutomaton, node: Node, row_of, memo: dict[int, tuple[Node, tuple]]) -> tuple:
    """The runs ``(variable, first row, last row, rows)`` of a partial match, from its first row.

    Partial matches share their history, and explaining one names it after every row it takes: the
    runs of each node are kept (``memo``, by node, the node held so its id is not reused), so a
    node's runs are its parent's plus its own row, and a long ``B+`` costs the same per row as a
    short one (walking the whole chain each time made explaining quadratic in its length)."""
    path: list[Node] = []
    n: Node | None = node
    while n is not None and id(n) not in memo:
        path.append(n)
        n = n.parent
    runs: tuple = memo[id(n)][1] if n is not None else ()
    for n in reversed(path):
        name = a.var_names[n.vid] if n.vid >= 0 else "?"
        if n.excl:
            name = "-" + name
        r = row_of(n.rno)
        if runs and runs[-1][0] == name:
            last = runs[-1]
            runs = runs[:-1] + ((name, last[1], r, last[3] + 1),)
        else:
            runs = runs + ((name, r, r, 1),)
        memo[id(n)] = (n, runs)
    return runs


def _chain_text(a: PatternAutomaton, node: Node | None, row_of, memo: dict[int, tuple[Node, tuple]] | None = None) -> str:
    """``START_ROW(3) DOWN(4-5) UP(6)``: the rows of a partial match by variable, as input rows."""
    if node is None:
        return "(empty)"
    runs = _chain_runs(a, node, row_of, {} if memo is None else memo)
    out = []
    for name, lo, hi, count in runs:
        span = f"{lo}" if count == 1 else f"{lo}-{hi}" if count == 2 or (isinstance(lo, int) and isinstance(hi, int) and hi - lo + 1 == count) else f"{lo}..{hi}, {count} rows"
        out.append(f"{name}({span})")
    text = " ".join(out)
    return text if len(text) <= 200 else text[:197] + "..."


class Trace:
    """What the observed engine did for one key, in the order it did it."""

    def __init__(self, key: Any):
        self.key = key
        self.op: ExplainOperator | None = None
        self.place: tuple[str, Any] = ("start", None)
        self.steps: list[tuple[tuple[str, Any], Verdict]] = []
        self.numbers: dict[Attempt, int] = {}
        self.rows: list[tuple] = []  # the key's rows in the engine's order (partition row numbers)
        self.masks: list[int] = []
        self.ended: list[dict[str, Any]] = []  # partial matches that ended, for the nearest miss
        self.emitted: set[int] = set()  # id() of attempts whose match or time-out was emitted
        self.emitted_nodes: set[int] = set()  # id() of the nodes emitted as matches
        self.matches = 0
        self.row_col = 0
        self.pos: dict[int, int] = {}  # input row -> its position among the key's rows

    def is_target(self, st: KeyState) -> bool:
        op = self.op
        return op is not None and op.states.get(self.key) is st

    def add(self, kind: str, text: str, ok: bool | None = None, data: dict | None = None,
            place: tuple[str, Any] | None = None) -> None:
        self.steps.append((place or self.place, Verdict(kind, text, ok, data or {})))

    def number(self, a: Attempt) -> int:
        n = self.numbers.get(a)
        if n is None:
            n = self.numbers[a] = len(self.numbers) + 1
        return n

    def row_of(self, rno: int) -> Any:
        """The key's row (its position among the key's events) that is partition row ``rno``."""
        if 0 <= rno < len(self.rows):
            return self.pos.get(self.rows[rno][self.row_col], "?")
        return "?"

    def ended_run(self, a: Attempt, node: Node | None, reason: str, kind: str, automaton: PatternAutomaton) -> None:
        self.ended.append({
            "partial_match": self.number(a), "length": 0 if node is None else node.n,
            "rows": _chain_text(automaton, node, self.row_of, getattr(automaton, "_runs_memo", None)), "reason": reason, "kind": kind, "place": self.place,
        })


class TracingAutomaton(PatternAutomaton):
    """The engine's automaton on its general path, telling a :class:`Trace` what it did for one key."""

    trace: Trace
    # (the conditions are the ones cep run evaluates: with REWRITE_CONDITIONS, the exact rewrites of
    # patterns/rewrite.py, so LAST(R.close) in D's condition is judged as PREV(D.close) on each row;
    # the explanation's notes give each rewritten condition as written, cep/explain/paths.py)

    def _init_dfa(self) -> None:
        super()._init_dfa()
        # the lazy DFA keeps no node per run, so which row went to which variable is unknown
        # while it streams: explain steps every rule on the general path (the same rows)
        self.dfa = False
        self.track = True
        self._dead = []
        # and shows each run's own fate: runs the engine merges (the DFA, or merge_runs on an
        # anchored rule) are followed one by one, to the same rows
        self.merge_runs = False

    def _lane_plan(self) -> None:
        return None  # explain traces each partial match's runs: no start rows as arrays

    def bind(self, trace: Trace) -> None:
        self.trace = trace
        self.conditions = Conditions(self)
        self._runs_memo: dict[int, tuple[Node, tuple]] = {}  # partial matches' runs by node (_chain_runs)
        trace.row_col = self.layout.col_index[ROW_FIELD]

    # -------------------------------------------------------------- where things happen
    def step_key(self, st, cols, s, e, masks, ts, emit, stats, candidates=None, rows_all=None,
                 materialised=False) -> None:
        tr = self.trace
        outer = tr.place
        try:
            super().step_key(st, cols, s, e, masks, ts, emit, stats, candidates, rows_all, materialised)
        finally:
            tr.place = outer

    def _label(self, a: Attempt, node: Node | None) -> str:
        return f"#{self.trace.number(a)} {_chain_text(self, node, self.trace.row_of, self._runs_memo)}"

    def _advance(self, a, threads, m, rno, row, st, stats, hist) -> list:
        tr = self.trace
        if not tr.is_target(st):
            return super()._advance(a, threads, m, rno, row, st, stats, hist)
        tr.place = ("row", row[tr.row_col])
        starting = a.start == rno and bool(threads) and threads[0][1] is None
        best0 = a.best
        dropped0 = stats.partial_matches_dropped
        done0 = len(self._done)
        new = super()._advance(a, threads, m, rno, row, st, stats, hist)
        capped = stats.partial_matches_dropped > dropped0
        found = a.best is not best0 or len(self._done) > done0
        self._observe_advance(a, threads, new, m, rno, row, st, starting, found, capped)
        return new

    def _observe_advance(self, a: Attempt, threads, new, m, rno, row, st, starting: bool, found: bool,
                         capped: bool) -> None:
        tr = self.trace
        # the runs after the row, by the node they grew from (a NOT run may keep its own node)
        grew: dict[int, list[str]] = {}
        completed: set[int] = set()
        done_nodes = [n for _, n in self._done] + ([a.best] if isinstance(a.best, Node) else [])
        for _q, child in new:
            parent = child if child.rno != rno else child.parent
            grew.setdefault(id(parent), []).append(self.var_names[child.vid])
        for child in done_nodes:
            if child is not None and child.rno == rno:
                grew.setdefault(id(child.parent), []).append(self.var_names[child.vid])
                completed.add(id(child.parent))
        groups: dict[int, tuple[Node | None, list[int]]] = {}
        for pc, node in threads:
            groups.setdefault(id(node), (node, []))[1].append(pc)
        if starting:
            started = bool(new) or found
            node = None
            if not started:
                return  # the start variable's history part failed: shown with the row's conditions
            took = sorted(set(grew.get(id(None), [])))
            tr.add("started", f"#{tr.number(a)} started: {' or '.join(took) or '?'} at row {tr.row_of(rno)}",
                   None, {"partial_match": tr.number(a), "start_row": tr.row_of(rno)})
            if id(None) in completed:
                tr.add("extended", f"#{tr.number(a)} {'/'.join(took)}({tr.row_of(rno)}): a match of one row", True,
                       {"partial_match": tr.number(a), "completes": True})
            return
        for node, pcs in groups.values():
            label = self._label(a, node)
            grown = grew.get(id(node))
            if grown:
                names: list[str] = []
                for t in grown:
                    if t not in names:
                        names.append(t)
                done = id(node) in completed
                goes_on = any(child.parent is node or child is node for _, child in new)
                tr.add("extended", f"{label} + {' / '.join(names)}"
                       + ((": a match (it may grow: the quantifier tries for more rows)" if goes_on else ": a match")
                          if done else ""),
                       True if done else None,
                       {"partial_match": tr.number(a), "took": names, "length": (node.n if node else 0) + 1,
                        "completes": done})
                continue
            held, reasons = self._why_not(pcs, node, m, rno, row, st)
            if held:
                why = ("dropped by the cap on partial matches per start row (max_partial_matches "
                       f"{self.max_partial_matches})") if capped and not found else \
                      "pruned by preferment: a more preferred run of the same start row completed a match here"
                kind = "dropped" if capped and not found else "pruned"
                tr.add(kind, f"{label}: {why}", False, {"partial_match": tr.number(a)})
                tr.ended_run(a, node, why, kind, self)
            else:
                text = "; ".join(reasons)
                tr.add("ended", f"{label}: ended, {text}", False,
                       {"partial_match": tr.number(a), "needed": [r.split(":", 1)[0] for r in reasons]})
                tr.ended_run(a, node, text, "ended", self)

    def _why_not(self, pcs: list[int], node: Node | None, m: int, rno: int, row: tuple,
                 st: KeyState) -> tuple[bool, list[str]]:
        """Whether some variable the runs waited for held on the row, and for each why it did not."""
        reasons: list[str] = []
        held_any = False
        conds = self.conditions
        seen: set[int] = set()
        for pc in pcs:
            move = self.moves[pc]
            assert move is not None
            vid, excl, _targets, _matches = move
            if vid == _NO_ROW or self.ins[pc][0] == OP_END:
                reasons.append("$: the partition had to end here, and another row came")
                continue
            if vid < 0:
                kill: tuple[int, ...] = excl[1]  # type: ignore[index]  # a NOT move: (bits, kill vars, ...)
                names = " or ".join(self.var_names[v] for v in kill)
                reasons.append(f"NOT {names}: a {names} row came")
                continue
            if vid in seen:
                continue
            seen.add(vid)
            name = self.var_names[vid]
            if not conds.defined(vid):
                held_any = True
                continue
            child = self.new_node(rno, vid, node, row, bool(excl))
            ctx = MatchCtx(child, child, st.rows, st.base, st.nrows, st.match_number + 1, row)
            local_ok = bool((m >> vid) & 1)
            parts = []
            if conds.local[vid]:
                parts.append(conds.row_local(vid, ctx, local_ok))
            ok = local_ok
            h = self.hist[vid]
            if local_ok and h is not None:
                try:
                    ok = truthy(h(ctx))
                except (TypeError, ValueError, ArithmeticError):
                    ok = False
                parts.append(conds.history(vid, ctx))
            if ok:
                held_any = True
            else:
                reasons.append(f"{name}: " + "; ".join(parts))
        return held_any, reasons

    def _within_ended(self, a: Attempt, rno: int | None, stats: StepStats) -> None:
        tr = self.trace
        op = tr.op
        st = op.states.get(tr.key) if op is not None else None
        mine = st is not None and any(x is a for x in st.attempts)
        if not mine:
            return super()._within_ended(a, rno, stats)
        if rno is not None:
            tr.place = ("row", tr.rows[rno][tr.row_col] if rno < len(tr.rows) else -1)
        best0, runs = a.best, list(a.threads)
        super()._within_ended(a, rno, stats)
        assert self.within is not None
        deadline = a.start_ts + self.within
        for_what = (f"WITHIN {format_duration(self.within)} of {format_time(a.start_ts)}: "
                    f"deadline {format_time(deadline)}")
        node = runs[0][1] if runs else None
        label = self._label(a, node)
        if a.best is not best0 and a.best is not None:
            tr.add("deadline", f"{label}: {for_what} passed with no row of the NOT variables: the absence is complete",
                   True, {"partial_match": tr.number(a), "deadline": deadline, "absence": True})
        elif a.timeout is not None:
            waiting = ", ".join(a.timeout[1])
            tr.add("deadline", f"{label}: {for_what} passed, waiting for {waiting}: a timeout row (WITH TIMEOUT ROWS)",
                   False, {"partial_match": tr.number(a), "deadline": deadline, "waiting_for": list(a.timeout[1])})
            tr.ended_run(a, node, f"{for_what} passed waiting for {waiting}", "expired", self)
        else:
            tr.add("expired", f"{label}: expired, {for_what} passed"
                   + (" (its match so far stands)" if a.best is not None else ""), False,
                   {"partial_match": tr.number(a), "deadline": deadline})
            if a.best is None:
                tr.ended_run(a, node, f"expired: {for_what} passed", "expired", self)

    def _over_cap(self, st: KeyState, stats: StepStats) -> None:
        if not self.trace.is_target(st):
            return super()._over_cap(st, stats)
        before = list(st.attempts)
        super()._over_cap(st, stats)
        left = {id(x) for x in st.attempts}
        for a in before:
            if id(a) not in left and a.threads:
                why = (f"dropped at the cap of {self.max_partial_matches} partial matches per key "
                       f"(on_cap: {self.on_cap})")
                node = a.threads[0][1] if a.threads else None
                self.trace.add("dropped", f"{self._label(a, node)}: {why}", False, {"partial_match": self.trace.number(a)})
                self.trace.ended_run(a, node, why, "dropped", self)

    def _over_budget(self, st: KeyState, live: int, emit, stats: StepStats, past_last: bool) -> None:
        if not self.trace.is_target(st):
            return super()._over_budget(st, live, emit, stats, past_last)
        before = [(a, list(a.threads)) for a in st.attempts]
        dropped0 = stats.budget_dropped
        super()._over_budget(st, live, emit, stats, past_last)
        if stats.budget_dropped == dropped0:
            return
        for a, runs in before:
            kept = {id(n) for _, n in a.threads} if isinstance(a.threads, list) else set()
            for node in dict.fromkeys(n for _, n in runs):
                if id(node) not in kept:
                    why = (f"dropped by the work budget ({self.max_steps} partial matches per row, "
                           f"max_steps_per_event; on_cap: {self.on_cap})")
                    self.trace.add("dropped", f"{self._label(a, node)}: {why}", False,
                                   {"partial_match": self.trace.number(a)})
                    self.trace.ended_run(a, node, why, "dropped", self)

    def _resolve(self, st: KeyState, emit, stats: StepStats, past_last: bool) -> None:
        if not self.trace.is_target(st) or self.no_skip:
            return super()._resolve(st, emit, stats, past_last)
        tr = self.trace
        before = [(a, list(a.threads) if isinstance(a.threads, list) else [], a.best) for a in st.attempts]
        super()._resolve(st, emit, stats, past_last)
        left = {id(x) for x in st.attempts}
        for a, runs, best in before:
            if id(a) in left or id(a) in tr.emitted or (isinstance(best, Node) and id(best) in tr.emitted_nodes):
                continue
            if not runs and best is None:
                continue  # it ended by itself (already told)
            node = runs[0][1] if runs else best if isinstance(best, Node) else None
            why = f"pruned by the after-match skip ({self.skip.mode.replace('_', ' ')}"
            why += f" {self.skip.var})" if self.skip.var else ")"
            why += ": a match of an earlier start row covers its start" if runs or best is not None else ""
            tr.add("pruned", f"{self._label(a, node)}: {why}", False, {"partial_match": tr.number(a)})
            tr.ended_run(a, node, why, "pruned", self)

    def flush(self, st: KeyState, emit, stats: StepStats) -> None:
        if not self.trace.is_target(st):
            return super().flush(st, emit, stats)
        tr = self.trace
        before = [(a, list(a.threads) if isinstance(a.threads, list) else [], a.best, a.timeout) for a in st.attempts]
        super().flush(st, emit, stats)
        for a, runs, best, timeout in before:
            if not runs:
                continue
            node = runs[0][1]
            label = self._label(a, node)
            if a.best is not best and a.best is not None:
                at_end = any(pc in self.end_pcs for pc, _ in runs)
                tr.add("deadline", f"{label}: the input ended" + (" ('$' reached)" if at_end else
                       ", every deadline passes: the absence is complete" if self.final_pcs else ""), True,
                       {"partial_match": tr.number(a), "end_of_input": True})
            elif a.timeout is not None and timeout is None:
                tr.add("deadline", f"{label}: the input ended (every WITHIN passes), waiting for "
                       f"{', '.join(a.timeout[1])}: a timeout row", False,
                       {"partial_match": tr.number(a), "end_of_input": True, "waiting_for": list(a.timeout[1])})
                tr.ended_run(a, node, "the input ended before it completed", "expired", self)
            else:
                tr.add("ended", f"{label}: ended, the input ended before it completed"
                       + (" (its match so far stands)" if a.best is not None else ""), False,
                       {"partial_match": tr.number(a), "end_of_input": True})
                if a.best is None:
                    tr.ended_run(a, node, "the input ended before it completed", "ended", self)


# ------------------------------------------------------------------ the operator


class ExplainOperator(PatternOperator):
    """The engine's operator for one rule, with the tracing automaton and a watch on one key."""

    def __init__(self, rule: Any, trace: Trace):
        self._trace = trace
        super().__init__(
            rule.compiled, name=rule.name, lateness_ms=rule.lateness_ms,
            max_partial_matches=rule.max_partial_matches, on_cap=rule.on_cap, time_unit=rule.time_unit,
            max_future_skew_ms=rule.max_future_skew_ms,
            max_steps_per_event=getattr(rule, "max_steps_per_event", None),
        )
        self._absence_plan = None  # the automaton, not the column-wise absence path: it has nodes
        self._batch_plan = None  # nor the batch DFA path (cep/batch_dfa.py): it steps every key in one loop
        trace.op = self
        assert isinstance(self.automaton, TracingAutomaton)
        self.automaton.bind(trace)

    def _new_automaton(self, compiled, **options: Any) -> PatternAutomaton:
        return TracingAutomaton(compiled, extra_columns=[ROW_FIELD], **options)

    def _masks(self, cols, starts, ends, states, seg_keys, ko=None) -> np.ndarray:
        masks = super()._masks(cols, starts, ends, states, seg_keys, ko)
        tr = self._trace
        for i, k in enumerate(seg_keys):
            if k == tr.key:
                s, e = int(starts[i]), int(ends[i])
                tr.rows.extend(zip(*[c[s:e].tolist() for c in cols]))
                tr.masks.extend(masks[s:e].tolist())
        return masks

    def _release(self, watermark: int | None, out: OperatorOutput, final: bool = False) -> None:
        tr = self._trace
        tr.place = ("end", self.watermark) if final else ("watermark", watermark)
        super()._release(watermark, out, final)

    def _emitter(self, out: OperatorOutput):
        inner = super()._emitter(out)
        tr = self._trace
        a = self.automaton

        def emit(st: KeyState, best: Node, number: int | None = None, timeout: Attempt | None = None) -> None:
            n0, t0 = len(out.matches), len(out.timeouts)
            inner(st, best, number, timeout)
            if not tr.is_target(st):
                return
            if timeout is not None:
                tr.emitted.add(id(timeout))
                rows = [_clean(r) for r in out.timeouts[t0:]]
                tr.add("deadline", f"#{tr.number(timeout)}: timeout row -> {_row_text(rows[0]) if rows else '?'}", False,
                       {"partial_match": tr.number(timeout), "timeout_rows": rows})
                return
            tr.emitted_nodes.add(id(best))
            rows = [_clean(r) for r in out.matches[n0:]]
            if not rows:
                tr.add("info", f"a match ({_chain_text(a, best, tr.row_of, a._runs_memo)}) waits for the rows its NEXT reads")
                return
            tr.matches += 1
            tr.add("match", f"match {st.match_number if number is None else number}: "
                   f"{_chain_text(a, best, tr.row_of, a._runs_memo)} -> {_row_text(rows[0])}"
                   + (f" (+{len(rows) - 1} rows)" if len(rows) > 1 else ""), True,
                   {"rows": rows, "match_number": st.match_number if number is None else number})

        emit.out = out  # type: ignore[attr-defined]
        return emit

    def _emit_unmatched(self, st: KeyState, upto: int, out: OperatorOutput) -> None:
        n0 = len(out.matches)
        super()._emit_unmatched(st, upto, out)
        tr = self._trace
        if len(out.matches) > n0 and tr.is_target(st):
            rows = [_clean(r) for r in out.matches[n0:]]
            tr.add("info", f"{count_noun(len(rows), 'unmatched row')} written (WITH UNMATCHED ROWS, "
                   "NULL measures)", None, {"rows": rows, "unmatched": True})


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """An output row without the explain row number (ALL ROWS PER MATCH copies the event's fields)."""
    row.pop(ROW_FIELD, None)
    return dict(row)


def _row_text(row: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={_value(v)}" for k, v in row.items() if k != "rule")
    return text if len(text) <= 160 else text[:157] + "..."


# ------------------------------------------------------------------ keys


def key_of_rule(rule: Any) -> list[str]:
    """The columns that key a pattern rule's partial matches (its PARTITION BY; none: one key)."""
    return list(rule.compiled.statement.partition_by)


# ------------------------------------------------------------------ the explanation


def _with_row_numbers(events: EventBatch) -> EventBatch:
    cols = dict(events.columns)
    cols[ROW_FIELD] = np.arange(events.n, dtype=np.int64)
    return EventBatch(cols, events.n, events.lines, events.source, list(events.bad), dict(events.epoch_ms))


def _chunks(n: int, key_idx: np.ndarray, size: int = 8192) -> list[np.ndarray]:
    """Batches in input order, each of the key's rows alone at the end of one, so that a deadline
    the watermark passes is told between the key's rows it came between."""
    cuts = sorted({0, n, *[int(i) for i in key_idx], *[int(i) + 1 for i in key_idx], *range(0, n, size)})
    return [np.arange(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]


def explain_pattern(rule: Any, events: EventBatch, key: dict[str, Any], t_from: int | None,
                    t_to: int | None) -> Explanation:
    """Explain a pattern rule over ``events`` for one key, row by row, from the engine's own run.

    ``key`` maps the rule's PARTITION BY columns to values (empty for a rule without one); a value
    given as text matches a number of the same value. ``t_from``/``t_to`` (epoch ms, inclusive)
    limit the rows shown; every row is replayed, so the state at ``t_from`` is right.

    Raises:
        ExplainError: the key does not fit the rule or is not in the input; the rule joins a table.
    """
    refuse_joined(rule)
    cols = key_of_rule(rule)
    idx, key_value = key_rows(events, cols, key, f"rule {rule.name!r}")
    batch = _with_row_numbers(events)
    trace = Trace(key_value)
    trace.pos = {int(i): k for k, i in enumerate(idx.tolist())}
    op = ExplainOperator(rule, trace)
    key_set = set(trace.pos)

    def collect(out: OperatorOutput) -> None:
        for kind, rows in (("late", out.late), ("error", out.errors)):
            for r in rows:
                ev = r.get("event") or {}
                i = ev.pop(ROW_FIELD, None)
                if i in key_set:
                    trace.add(kind, r["reason"], False, {"line": r.get("line"), "source": r.get("source")},
                              place=("row", int(i)))

    ms, ok, _ = event_times(batch, op.time_col, op.time_unit, op.max_future_skew_ms)
    for part in _chunks(batch.n, idx):
        # other keys' events: cut where the watermark first passes one of the key's deadlines, so
        # the moment told is the event that moved it there
        while len(part):
            d = op._key_deadline(key_value)
            j = len(part) - 1
            if d is not None and len(part) > 1:
                hit = np.flatnonzero(ok[part] & (ms[part] - op.lateness >= d))
                if len(hit):
                    j = int(hit[0])
            collect(op.process(batch.take(part[: j + 1])))
            part = part[j + 1 :]
    collect(op.finish())
    return _build(rule, op, trace, events, key, idx, t_from, t_to)


def _build(rule: Any, op: ExplainOperator, tr: Trace, events: EventBatch, key: dict[str, Any], idx: np.ndarray,
           t_from: int | None, t_to: int | None) -> Explanation:
    """The explanation from the trace: the key's rows in the engine's order, moments between them."""
    a = op.automaton
    assert isinstance(a, TracingAutomaton)
    conds = a.conditions
    ms, ok, _ = event_times(events.take(idx), op.time_col, op.time_unit, None)
    ts_of = {int(i): (int(t) if good else None) for i, t, good in zip(idx.tolist(), ms.tolist(), ok.tolist())}

    def shown(place: tuple[str, Any]) -> bool:
        kind, where = place
        ts = ts_of.get(int(where)) if kind == "row" else where
        if kind == "end":
            return t_to is None
        if ts is None:
            return t_from is None and t_to is None
        return (t_from is None or ts >= t_from) and (t_to is None or ts <= t_to)

    syn_rows = tr.rows
    rno_of = {r[tr.row_col]: rno for rno, r in enumerate(syn_rows)}
    rows: dict[int, ExplainedRow] = {}
    for i in idx.tolist():
        rows[i] = ExplainedRow(tr.pos[i], ts_of.get(i), _event(events, i), line=events.line_of(i))
    # each processed row: every condition, its verdict from the engine's mask, values from its compiler
    for i, rno in rno_of.items():
        row = syn_rows[rno]
        m = tr.masks[rno]
        for vid, name in enumerate(a.var_names):
            if not conds.defined(vid):
                continue
            node = a.new_node(rno, vid, None, row, False)
            ctx = MatchCtx(node, node, syn_rows, 0, len(syn_rows), 1, row)
            held: bool | None = bool((m >> vid) & 1)
            rest = " AND ".join(expr_sql(x) for x in conds.rest[vid])
            if conds.local[vid]:
                text = f"{name}: {conds.row_local(vid, ctx, bool(held))}"
                if rest:
                    text += f" (then, per partial match: {rest})"
            else:
                text, held = f"{name}: per partial match: {rest}", None
            rows[i].verdicts.append(Verdict("condition", text, held, {"var": name}))
    # the engine's order: rows as it stepped them, late and bad rows where they arrived, and the
    # moments (watermark, end of input) at which time ended partial matches
    placed: list[tuple[tuple[str, Any], ExplainedRow]] = []
    done: set[int] = set()
    upto = -1

    def put(i: int) -> ExplainedRow:
        r = rows[i]
        if i not in done:
            done.add(i)
            placed.append((("row", i), r))
        return r

    for place, v in tr.steps:
        kind, where = place
        if kind == "row":
            i = int(where)
            at = rno_of.get(i)
            if at is not None:  # the rows before it on which nothing happened come first
                for j in range(upto + 1, at):
                    put(syn_rows[j][tr.row_col])
                upto = max(upto, at)
            put(i).verdicts.append(v)
            continue
        if not placed or placed[-1][0] != place:
            text = ("the input ended: the final watermark passes every deadline" if kind == "end" else
                    f"the watermark reached {format_time(where)} (moved by an event of any key)")
            label = "end of input" if kind == "end" else "watermark"
            placed.append((place, ExplainedRow(-1, where, {"(time)": label}, [Verdict("info", text)])))
        placed[-1][1].verdicts.append(v)
    for j in range(upto + 1, len(syn_rows)):
        put(syn_rows[j][tr.row_col])
    for i in idx.tolist():
        put(i)
    _note_idle_rows(a, tr, rows, rno_of)

    visible = [r for p, r in placed if shown(p)]
    ex = Explanation(rule.name, "pattern", dict(key), visible[:MAX_ROWS])
    if len(visible) > MAX_ROWS:
        ex.notes.append(f"{len(visible) - MAX_ROWS:,} more rows not shown: narrow --from/--to")
    told = [v for p, r in placed if shown(p) for v in r.verdicts]
    # the output rows in the order the engine wrote them (unmatched rows are info, not matches)
    ex.outcome.extend(v for v in told if v.kind == "match" or v.data.get("unmatched"))
    ex.outcome.extend(v for v in told if v.kind == "deadline" and "timeout_rows" in v.data)
    n_match = sum(1 for v in told if v.kind == "match")
    if not n_match:
        ex.outcome.append(_nearest_miss(a, tr, [e for e in tr.ended if shown(e["place"])]))
    n_late = sum(1 for v in told if v.kind == "late")
    n_err = sum(1 for v in told if v.kind == "error")
    ex.notes.append(f"{count_noun(len(idx), 'event')} of the key, {len(rno_of):,} processed; shown: "
                    f"{n_late:,} late, {count_noun(n_err, 'error')}, {count_noun(n_match, 'match', 'matches')}")
    if t_from is not None or t_to is not None:
        ex.notes.append("every event was replayed; only the rows and moments within --from/--to are shown")
    if n_late:
        ex.notes.append("late rows are judged against the watermark of every key, as cep run judges them")
    ex.notes[:0] = stepping_path(rule).notes()
    ex.notes.append("per-key caps (max_partial_matches, the work budget) are the rule's; run-wide limits "
                    "(--max-partial-matches-total, --idle-state-ttl) are not applied")
    return ex


_MOVES = frozenset(("started", "extended", "ended", "pruned", "dropped", "expired", "deadline", "match"))


def _note_idle_rows(a: TracingAutomaton, tr: Trace, rows: dict[int, ExplainedRow], rno_of: dict[int, int]) -> None:
    """A row on which a later variable's condition held while no partial match was alive to take it
    (the usual reason a row is not in a match: what comes before it did not happen, or ran out)."""
    for i, rno in rno_of.items():
        r = rows[i]
        if any(v.kind in _MOVES for v in r.verdicts):
            continue
        m = tr.masks[rno]
        # only a condition the row alone decides held on it; one that reads the match (D.close <
        # LAST(R.close)) is judged per partial match, so with none alive it was never judged
        conds = a.conditions
        held = [a.var_names[v] for v in range(a.nvars)
                if (m >> v) & 1 and not (a.start_bits >> v) & 1 and conds.local.get(v) and not conds.rest.get(v)]
        if held:
            r.verdicts.append(Verdict("info", f"{' and '.join(held)} held, but no partial match was alive to take "
                                      "the row", None, {"held": held}))


def _event(events: EventBatch, i: int) -> dict[str, Any]:
    rec = events.record(i)
    rec.pop(ROW_FIELD, None)
    return rec


def _nearest_miss(a: TracingAutomaton, tr: Trace, ended: list[dict[str, Any]]) -> Verdict:
    """No match: the longest partial match and what ended it; or why none started."""
    if ended:
        # of equals, one a condition ended before one the input's end cut off, then the latest
        best = max(ended, key=lambda e: (e["length"], e["place"][0] != "end", e["partial_match"]))
        kind, where = best["place"]
        at = (f"at row {tr.pos.get(int(where), '?')}" if kind == "row" else "when the input ended" if kind == "end"
              else f"when the watermark reached {format_time(where)}")
        n = best["length"]
        text = (f"no match; the longest partial match was #{best['partial_match']} {best['rows']} "
                f"({n} row{'s' if n != 1 else ''}), {best['kind']} {at}: {best['reason']}")
        data = {k: v for k, v in best.items() if k != "place"}
        return Verdict("nearest_miss", text, False, data)
    if not tr.rows:
        return Verdict("nearest_miss", "no match: no row of the key was processed (only late or bad rows)", False)
    counts = {a.var_names[v]: sum(1 for m in tr.masks if (m >> v) & 1)
              for v in range(a.nvars) if (a.start_bits >> v) & 1}
    held = ", ".join(f"{n} held on {c:,} of {len(tr.rows):,} rows" for n, c in counts.items())
    return Verdict("nearest_miss", f"no match: no partial match started; a match starts with "
                   f"{' or '.join(counts)} ({held})", False, {"start_vars": counts})
