"""Every key of a batch stepped together: the lazy DFA's transitions as a table, run by one compiled loop.

Over many keys, the automaton's per-key stepping (:meth:`cep.nfa.PatternAutomaton.step_key`) pays
a few microseconds of Python per key and per row: at 10,000 keys a batch of 8,192 rows is about
6,000 calls, each for one or two rows. For rules whose conditions never look back at the match
(the lazy-DFA rules of :mod:`cep.nfa`) a key's whole runtime state is small integers: its row
count, where a match may resume, its match number, and per live start row (attempt) the start
row, the DFA state and the last row of the best match so far. :class:`BatchDFA` keeps those for
every key in flat arrays, builds the DFA's full transition table once (every state and every
mask), and steps a batch (keys sorted, each key's rows in event-time order) in one loop compiled
with numba. The rows a match or ``PREV`` may still read wait in a column store, linked per key
(each row points to its key's row before it), and a match's rows are mapped to variables by the
same backward replay as :meth:`cep.nfa.PatternAutomaton._consumers`.

It applies (:func:`batch_plan`) to lazy-DFA rules with the DFA's fast measures (ONE ROW PER
MATCH; each measure a column, FIRST/LAST of one without offset, CLASSIFIER(), MATCH_NUMBER(),
COUNT(*) or COUNT(var.*)), ``AFTER MATCH SKIP PAST LAST ROW`` or ``TO NEXT ROW``, ``WITHIN``
only when every match has the same number of rows (then ending runs by time emits nothing), no ``NEXT``, no ``WITH UNMATCHED ROWS``, no work budget, at most :data:`MAX_VARS` variables,
:data:`MAX_STATES` DFA states and :data:`MAX_CELLS` table cells, and (the operator checks) no
idle-state TTL, global cap, temporal join or FIRST_SEEN/MATCHES. Its rows, their order,
match numbers and counters are the automaton's (``tests/cep/test_batch_dfa.py`` runs both on the
same inputs); without numba the operator keeps the automaton, which stays the reference.
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
import os
import threading
from dataclasses import fields
from typing import Any, Callable

import numpy as np

from cep import nfa
from cep.compiled import numba_allowed
from cep.expressions import _FUNCS, _compile_common
from cep.json_exact import dumps_exact
from cep.sharing import FRESH_HISTORY
from patterns import ast as A
from patterns.compiler import OP_MATCH
from patterns.rewrite import fixed_length

__all__ = ["BatchDFA", "DfaTable", "batch_plan", "measure_plan", "USE_BATCH_DFA", "MAX_VARS", "MAX_STATES", "MAX_CELLS"]

# a switch so tests and benchmarks can run the same rules through the per-key automaton instead;
# CEP_BATCH_DFA=0 in the environment turns it off for a whole process (the test suite run on the
# reference path)
USE_BATCH_DFA = os.environ.get("CEP_BATCH_DFA", "1") != "0"
MAX_VARS = 10  # the table has 2**nvars columns
MAX_STATES = 512
MAX_CELLS = 1 << 16  # states x masks: the table is built in Python at a rule's first batch

_KIND = {"LAST": 0, "FIRST": 1, "MN": 2, "CLS": 3, "COUNT": 4}


class DfaTable:
    """The lazy DFA of :mod:`cep.nfa` built out: every state reachable from the start on any mask.

    ``trans[s, m]`` is the state after mask ``m``, ``match_pc[s, m]`` the program counter whose
    step completed a match (-1: none), ``parent[s, m, i]`` the program counter the ``i``-th run of
    ``trans[s, m]`` came from, ``pos[s, pc]`` where ``pc`` sits in state ``s`` (-1: absent).
    Built as :meth:`cep.nfa.PatternAutomaton._dfa_step` builds one transition.
    """

    def __init__(self, trans: np.ndarray, match_pc: np.ndarray, parent: np.ndarray, pos: np.ndarray,
                 pc_vid: np.ndarray, start: int, states: list[tuple[int, ...]]):
        self.trans, self.match_pc, self.parent, self.pos, self.pc_vid, self.start = trans, match_pc, parent, pos, pc_vid, start
        self.states = states  # each state's program counters, in preference order

    @classmethod
    def build(cls, a: Any, max_states: int = MAX_STATES) -> DfaTable | None:
        """The table of automaton ``a`` (None when it has more than ``max_states`` states).

        Rules whose patterns compile to the same program (instructions, closures, variables) get
        the same table, built once: many generated rules differ only in their conditions' constants,
        and the kernels only read the table's arrays."""
        try:
            key: Any = (tuple(a.ins), tuple(map(tuple, a.closure)), tuple(a.start_closure), a.nvars, max_states)
            hash(key)
        except TypeError:  # (a program with an unhashable part: built for this rule alone)
            key = None
        if key is not None and key in _TABLES:
            return _TABLES[key]
        got = cls._build(a, max_states)
        if key is not None:
            if len(_TABLES) >= 256:  # (a bound on what a long-lived process of reloads keeps)
                _TABLES.clear()
            _TABLES[key] = got
        return got

    @classmethod
    def _build(cls, a: Any, max_states: int) -> DfaTable | None:
        ins, closure = a.ins, a.closure
        nmask = 1 << a.nvars
        states: list[tuple[int, ...]] = [()]
        ids: dict[tuple[int, ...], int] = {(): 0}
        rows: list[list[tuple[int, int, tuple[int, ...]]]] = []

        def sid_of(pcs: tuple[int, ...]) -> int:
            if pcs not in ids:
                ids[pcs] = len(states)
                states.append(pcs)
            return ids[pcs]

        start = sid_of(tuple(a.start_closure))
        i = 0
        while i < len(states):
            if len(states) > max_states or len(states) * nmask > MAX_CELLS:
                return None
            row = []
            for m in range(nmask):
                new: list[int] = []
                parents: list[int] = []
                seen: set[int] = set()
                done_pc = -1
                for pc in states[i]:
                    _, vid, nxt, _ = ins[pc]
                    if not (m >> vid) & 1:
                        continue
                    for q in closure[nxt]:
                        if ins[q][0] == OP_MATCH:
                            done_pc = pc
                            break
                        if q not in seen:
                            seen.add(q)
                            new.append(q)
                            parents.append(pc)
                    if done_pc >= 0:
                        break
                row.append((sid_of(tuple(new)), done_pc, tuple(parents)))
            rows.append(row)
            i += 1
        ns, npc = len(states), len(ins)
        width = max(1, max(len(s) for s in states))
        trans = np.zeros((ns, nmask), dtype=np.int64)
        match_pc = np.full((ns, nmask), -1, dtype=np.int64)
        parent = np.full((ns, nmask, width), -1, dtype=np.int64)
        pos = np.full((ns, npc), -1, dtype=np.int64)
        for s, row in enumerate(rows):
            for m, (t, mpc, par) in enumerate(row):
                trans[s, m] = t
                match_pc[s, m] = mpc
                parent[s, m, : len(par)] = par
        for s, pcs in enumerate(states):
            for k, pc in enumerate(pcs):
                pos[s, pc] = k
        pc_vid = np.array([x[1] if x[0] == 0 else -1 for x in ins], dtype=np.int64)
        return cls(trans, match_pc, parent, pos, pc_vid, start, states)


_TABLES: dict[Any, DfaTable | None] = {}


def _numba_ok() -> bool:
    if not numba_allowed():  # CEP_NO_NUMBA: the automaton steps every key
        return False
    try:
        import numba  # noqa: F401
    except ImportError:  # the automaton steps every key (the reference path)
        return False
    return True


def _leaf(a: Any, name: str, e: A.Expr) -> tuple[str, str, frozenset[int] | None, int] | None:
    """One measure the kernel reads as one row lookup or count (see :func:`measure_plan`), or None."""
    if isinstance(e, A.MatchNumber):
        return (name, "MN", None, -1)
    if isinstance(e, A.Classifier) and e.var is None:
        return (name, "CLS", None, -1)
    if isinstance(e, A.Agg) and e.func == "COUNT" and e.arg is None:
        return (name, "COUNT", a.layout.var_set(e.var), -1)
    if isinstance(e, A.Column):
        return (name, "LAST", a.layout.var_set(e.var), a.layout.col_index[e.name])
    if isinstance(e, A.Nav) and e.kind in ("FIRST", "LAST") and e.offset == 0 and isinstance(e.arg, A.Column):
        return (name, e.kind, a.layout.var_set(e.arg.var), a.layout.col_index[e.arg.name])
    return None


# row-local operators over a match's leaves: evaluated by cep.expressions' own code, as the
# automaton evaluates them (no navigation, aggregate or column of their own)
_SCALAR = (A.Literal, A.Unary, A.Binary, A.Compare, A.Logical, A.Not, A.IsNull, A.Between, A.InList, A.Like,
           A.Case, A.Func)


def _expr_leaves(a: Any, e: A.Expr, out: list[A.Expr]) -> bool:
    """Collect the leaves of measure ``e`` into ``out``; False when a part is not a leaf or scalar."""
    if _leaf(a, "", e) is not None:
        out.append(e)
        return True
    if not isinstance(e, _SCALAR) or (isinstance(e, A.Func) and e.name not in _FUNCS):
        return False
    if isinstance(e, A.Agg):
        return False
    kids = [v for f in fields(e) for v in _children(getattr(e, f.name))]
    return all(_expr_leaves(a, k, out) for k in kids)


def _children(v: Any) -> list[A.Expr]:
    if isinstance(v, A.Expr):
        return [v]
    if isinstance(v, (tuple, list)):
        return [x for item in v for x in _children(item)]
    return []


def measure_plan(a: Any) -> list[tuple[str, str, frozenset[int] | None, int]] | None:
    """The automaton's fast measures (:meth:`cep.nfa.PatternAutomaton._fast_plan`), plus
    ``COUNT(*)`` and ``COUNT(var.*)``: a count of the match's rows of those variables, plus
    expressions over these (``ROUND(100 * (D.close - LAST(R.close)) / LAST(R.close), 2)``): an
    ``EXPR`` entry followed by its leaves, named ``<measure>\x00<i>``, read by the kernel and
    combined after it (:func:`expr_measures`); or None."""
    if a.fast_plan is not None:
        return a.fast_plan
    if a.track or a.all_rows or a.max_next or a.skip.mode not in ("PAST_LAST_ROW", "TO_NEXT_ROW"):
        return None
    if any(x.func != "COUNT" or x.arg is not None for x in a.aggs):
        return None
    plan: list[tuple[str, str, frozenset[int] | None, int]] = []
    for m in a.mr.measures:
        leaf = _leaf(a, m.name, m.expr)
        if leaf is not None:
            plan.append(leaf)
            continue
        leaves: list[A.Expr] = []
        if not _expr_leaves(a, m.expr, leaves):
            return None
        plan.append((m.name, "EXPR", None, -1))
        plan += [_leaf(a, f"{m.name}\x00{i}", x) for i, x in enumerate(leaves)]  # type: ignore[misc]
    return plan


def expr_measures(a: Any) -> dict[str, tuple[Callable[[tuple], Any], list[str]]]:
    """Per expression measure of :func:`measure_plan`: its function of its leaves' values (a
    tuple, in order) and the leaves' names. The leaves are the same expressions the automaton's
    measure reads, the operators between them :func:`cep.expressions._compile_common`'s."""
    out: dict[str, tuple[Callable[[tuple], Any], list[str]]] = {}
    for m in a.mr.measures:
        if _leaf(a, m.name, m.expr) is not None:
            continue
        leaves: list[A.Expr] = []
        if not _expr_leaves(a, m.expr, leaves):
            raise ValueError(f"measure {m.name!r} is not an expression of the batch DFA's measures")
        where = {id(x): i for i, x in enumerate(leaves)}

        def c(x: A.Expr, where: dict[int, int] = where) -> Callable[[tuple], Any]:
            if id(x) in where:
                i = where[id(x)]
                return lambda vals: vals[i]
            return _compile_common(x, c)

        out[m.name] = (c(m.expr), [f"{m.name}\x00{i}" for i in range(len(leaves))])
    return out


def batch_plan(a: Any) -> tuple[DfaTable, np.ndarray, np.ndarray, list[tuple[str, str, int, int]]] | None:
    """(table, measure kinds, measure variable bits, measures) when automaton ``a`` fits the path."""
    if not (a.dfa and not a.lookahead and not a.with_unmatched):
        return None
    # WITHIN where ending runs by time can emit nothing (see _batch_dfa_kernel.expire): every
    # match has the same number of rows, so no match waits behind an earlier live attempt
    if a.within is not None and fixed_length(a.mr.pattern) is None:
        return None
    fast_plan = measure_plan(a)
    if fast_plan is None:
        return None
    if a.max_steps is not None or a.nvars > MAX_VARS or a.skip.mode not in ("PAST_LAST_ROW", "TO_NEXT_ROW"):
        return None
    if not _numba_ok():
        return None
    table = DfaTable.build(a)
    if table is None:
        return None
    kinds, bits, measures = [], [], []
    for name, kind, vs, ci in fast_plan:
        if kind == "EXPR":  # combined from its leaves after the kernel (BatchDFA._rows)
            continue
        kinds.append(_KIND[kind])
        b = -1
        if vs is not None:
            b = 0
            for v in vs:
                b |= 1 << v
        bits.append(b)
        measures.append((name, kind, ci, b))
    return table, np.array(kinds, dtype=np.int64), np.array(bits, dtype=np.int64), measures


class BatchDFA:
    """The partial matches of every key of one rule, in arrays, stepped a batch at a time.

    Per key id (``ids`` maps a partition key to it): rows stepped, the first row a match may
    start at, matches so far, the store index of its last row, its place in the order keys became
    live (-1: nothing alive), and its attempts (``aoff``/``alen`` into the attempt pool, start row
    order). The pool holds each attempt's start row, start time, DFA state, best match's last row
    (-1: none) and that row's store index. The column store holds each kept row's columns, mask and
    the store index of its key's previous row.

    Both are sized by what is kept, not by the batch: while a batch is stepped its rows have store
    indices from :attr:`s_used` on but are read from the batch itself (masks, columns, links to the
    row before in the key's segment), and only the rows a later batch may read enter the store
    (:meth:`_keep_rows`); the pool grows inside the step when the batch's attempts need it. So a
    rule holds a few rows per key and its live attempts whatever the batch size (200 rules over
    batches of 32,768 rows: 403 MB for the process, not 532 MB; README "Many rules").
    """

    _kernel: Any = None  # cep._batch_dfa_kernel, once a rule takes the path

    def __init__(self, automaton: Any, plan: tuple):
        self.a = automaton
        self.table, self.kinds, self.bits, self.measures = plan
        self.exprs = expr_measures(automaton) if any(
            "\x00" in m[0] for m in self.measures) else {}
        self.past_last = automaton.skip.mode == "PAST_LAST_ROW"
        # what _gathered reads per batch, fixed per rule: the output places of the partition
        # columns and row measures, the measures' columns of the kernel's output, and the places
        # grouped by the column they read
        npart = automaton.npartition
        rowm = [k for k, m in enumerate(self.measures) if m[1] in ("FIRST", "LAST")]
        slots = list(range(npart)) + [npart + k for k in rowm]
        by_col: dict[int, list[int]] = {}
        for j, slot in enumerate(slots):
            by_col.setdefault(slot if slot < npart else self.measures[slot - npart][2], []).append(j)
        # each column's places laid out one after the other in the kernel's gather index (see
        # _batch_dfa_kernel._summary): place p reads the match's first row (-1) or measure gsrc[p]'s
        gsrc: list[int] = []
        self._gather_groups: list[tuple[int, int, list[int]]] = []  # (column, first place, output slots)
        for ci, js in by_col.items():
            self._gather_groups.append((ci, len(gsrc), [slots[j] for j in js]))
            gsrc += [-1 if slots[j] < npart else slots[j] - npart for j in js]
        self._gsrc = np.array(gsrc, dtype=np.int64)
        self._gather_meas = np.array(rowm, dtype=np.int64)
        self._nout = npart + len(self.measures)
        # the output names when no measure is an expression (fixed per rule)
        self._names = list(automaton.mr.partition_by) + [m[0] for m in self.measures]
        if BatchDFA._kernel is None:
            # the compiled loops, imported at the first rule on this path (it has numba: batch_plan
            # checked), held by the class: an instance's own attributes stay plain data
            from cep import _batch_dfa_kernel

            BatchDFA._kernel = _batch_dfa_kernel
        # each state's positions: partial_matches_peak counts them (PatternAutomaton._peak_count_dfa)
        self.sizes = np.array([len(p) for p in self.table.states], dtype=np.int64)
        self.ids: dict[Any, int] = {}
        self.key_list: list[Any] = []
        nk = 1024
        self.k = np.zeros((6, nk), dtype=np.int64)  # nrows, resume, mnum, last, act, aoff
        self.k[3:5] = -1
        self.alen = np.zeros(nk, dtype=np.int64)
        # start, start_ts, sid, best, best store index. The pool and the store's links and masks start
        # small: the first batch sizes them (step grows them to its rows before stepping)
        self.pool = np.zeros((5, 16), dtype=np.int64)
        self.pool_used = 0
        self.live_attempts = 0
        self.act_seq = 0
        ncols = len(automaton.columns)
        # never empty: reading index 0 for a missing row (then masked out) is always in bounds. The
        # columns hold only the rows kept after a batch (store indices below s_used), so they are
        # sized by those (see _keep_rows), not by the batches the links and masks take in
        self.cols: list[np.ndarray] = [np.zeros(16, dtype=np.int64) for _ in range(ncols)]
        self.s_prev = np.zeros(16, dtype=np.int64)
        self.s_mask = np.zeros(16, dtype=np.int64)
        self.s_used = 0
        # numbers_ok of the integer columns for the rows held: kept up to date as rows are kept
        # (a check of the new rows only), forgotten when rows are dropped (compaction, load)
        self._num_ok: dict[int, bool] = {}
        self._ids_now = np.zeros(0, dtype=np.int64)
        # which rows this state has stepped since it was empty (cep.sharing.KeyOrder.history_after):
        # rules with the same history share their key ids and PREV values; None: not known (a
        # restored state, or a batch stepped in an order of its own)
        self.history: int | None = FRESH_HISTORY
        # the history number saved with a snapshot this state was loaded from (see :meth:`load`)
        self.restored_history: int | None = None
        # the batch being stepped: its first store index and its columns. Its rows get store
        # indices (links and masks) but their column values are copied into the store only for
        # the rows a later batch can read (see _keep_rows); until then matches read them here
        self._batch: tuple[int, list[np.ndarray]] | None = None

    # ------------------------------------------------------------------ sizes
    def keys(self) -> int:
        return len(self.key_list)

    def live(self) -> int:
        """Attempts with a run alive (as the automaton counts them for live_partial_matches)."""
        n = self.pool_used
        if not n:
            return 0
        lens = self.alen[: len(self.key_list)]
        owned = np.repeat(self.k[5, : len(self.key_list)], lens) + (np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens))
        return int(np.count_nonzero(self.pool[2, owned]))

    # ------------------------------------------------------------------ keys and history
    def bind(self, seg_keys: list, shared: dict | None = None) -> np.ndarray:
        """Key ids of a batch's segments (new keys get the next ids); kept for :meth:`fills`.

        ``shared`` (a shared key order's cache): states with the same :attr:`history` give the same
        ids, so the first one's answer (the ids and the new keys, in order) serves the others."""
        slot = ("bind", self.history) if shared is not None and self.history is not None else None
        if slot is not None:
            hit = shared.get(slot)  # type: ignore[union-attr]
            if hit is not None:
                got, new_keys = hit
                if new_keys:
                    first = len(self.key_list)
                    for j, key in enumerate(new_keys):
                        self.ids[key] = first + j
                    self.key_list.extend(new_keys)
                    self._grow_keys(len(self.key_list))
                self._ids_now = got  # read only: the kernels never write to it
                return got
        ids = self.ids
        got = np.fromiter(map(ids.get, seg_keys, [-1] * len(seg_keys)), dtype=np.int64, count=len(seg_keys))
        new = np.flatnonzero(got < 0)
        if len(new):
            first = len(self.key_list)
            for j, i in enumerate(new.tolist()):
                key = seg_keys[i]
                ids[key] = first + j
                self.key_list.append(key)
            got[new] = np.arange(first, first + len(new))
            self._grow_keys(len(self.key_list))
        self._ids_now = got
        if slot is not None:
            shared[slot] = (got, [seg_keys[i] for i in new.tolist()])  # type: ignore[index]
        return got

    def numbers_ok(self, ci: int) -> bool:
        """Whether :meth:`fill_numbers` reads column ``ci`` as numbers (else :meth:`fills` lists)."""
        col = self.cols[ci]
        if not self.s_used:
            return True
        if col.dtype.kind not in "iuf":
            return False
        # (as float64 larger integers would round: the caller's lists keep them exact); only the
        # rows held count (the store's room past them is as large as a batch)
        if col.dtype.kind == "f":
            return True
        got = self._num_ok.get(ci)
        if got is None:
            held = col[: self.s_used]
            got = self._num_ok[ci] = max(int(held.max()), -int(held.min())) <= 2**53
        return got

    def fills(self, ci: int, lag: int, seg_len: np.ndarray) -> list[list]:
        """PREV(col, lag) of each segment's first ``lag`` rows, read from the key's earlier rows:
        the lists :meth:`cep.operator.PatternOperator._masks` builds from the keys' retained rows."""
        out = []
        last = self.k[3][self._ids_now]
        col = self.cols[ci]
        prev = self.s_prev
        for o in range(lag):
            sel = np.flatnonzero(seg_len > o)
            if not len(sel):
                break
            idx = last[sel]
            for _ in range(lag - o - 1):
                idx = np.where(idx >= 0, prev[np.maximum(idx, 0)], -1)
            vals = col[np.maximum(idx, 0)].tolist() if self.s_used else [None] * len(idx)
            for i in np.flatnonzero(idx < 0).tolist():
                vals[i] = None
            out.append(vals)
        return out

    def fill_numbers(self, ci: int, lag: int, seg_len: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """What :meth:`fills` reads, as (segments, float values with NaN for none) per offset; None
        when the stored column is not numeric (the caller then builds the lists)."""
        col = self.cols[ci]
        if not self.numbers_ok(ci):
            return None
        out = []
        last = self.k[3][self._ids_now]
        prev = self.s_prev
        for o in range(lag):
            sel = np.flatnonzero(seg_len > o)
            if not len(sel):
                break
            idx = last[sel]
            for _ in range(lag - o - 1):
                idx = np.where(idx >= 0, prev[np.maximum(idx, 0)], -1)
            if self.s_used:
                got = np.where(idx >= 0, col[np.maximum(idx, 0)].astype(np.float64), np.nan)
            else:
                got = np.full(len(idx), np.nan)
            out.append((sel, got))
        return out

    def _grow_keys(self, n: int) -> None:
        cap = self.k.shape[1]
        if n <= cap:
            return
        new = max(n, cap * 2)
        k = np.zeros((6, new), dtype=np.int64)
        k[3:5] = -1
        k[:, :cap] = self.k
        self.k = k
        alen = np.zeros(new, dtype=np.int64)
        alen[:cap] = self.alen
        self.alen = alen

    # ------------------------------------------------------------------ the column store
    def _keep_rows(self, cols: list[np.ndarray], base: int, pool_from: int, starts: np.ndarray, ends: np.ndarray,
                   masks: np.ndarray, seg_prev: np.ndarray) -> None:
        """Keep of the batch just stepped only the rows a later batch may read: each key's last
        ``max_back`` rows (PREV) and its rows from its earliest live attempt's start on (a match's
        rows), the rows :meth:`_compact` keeps. They get store indices from the batch's first on, in
        order, with their links, masks and column values; the other rows never enter the store
        (the step read their masks and links from the batch, and their matches were output from
        the batch's own columns). The store then grows by a few rows per key and batch, and the
        full compaction runs only when it is three quarters full (see :meth:`step`)."""
        n = len(masks)
        sel, kept_prev, kept_mask, mark, remap = _keep_scratch(n)
        m = self._kernel.keep_batch(self._ids_now, starts, ends, seg_prev, masks, self.s_prev, self.k, self.alen, self.pool,
                                    pool_from, self.pool_used, base, n, self.a.max_back, sel, kept_prev, kept_mask,
                                    mark, remap)
        sel = sel[:m].copy()  # (scratch: the next rule's call writes it)
        self.s_used = used = base + m
        if used > len(self.s_mask):
            # twice the rows held: the store then takes a few rows per key and batch for many batches
            room = max(2 * used, 4096)
            self.s_prev = _grown(self.s_prev, room, base)
            self.s_mask = _grown(self.s_mask, room, base)
        self.s_prev[base:used] = kept_prev[:m]
        self.s_mask[base:used] = kept_mask[:m]
        at = slice(base, used)
        if self.cols and len(self.cols[0]) < used:
            # room for the rows kept (a few per key and batch) and as many again: the batch's own
            # rows never go into the columns, so they grow with the kept rows only
            # (at least 1,024 rows: a store of a few rows per key grew at nearly every one of its first
            # batches, a copy of every column each time, for a few kilobytes)
            room = max(2 * used, 1024)
            self.cols = [_grown(c, room, base) for c in self.cols]
        for i, c in enumerate(cols):
            store = self.cols[i]
            if base == 0 and store.dtype != c.dtype:
                store = self.cols[i] = (np.zeros(len(store), dtype=c.dtype) if c.dtype != object
                                        else np.empty(len(store), dtype=object))
            if store.dtype == c.dtype:
                # (one gather straight into the store; the indices are in range: clip checks nothing)
                c.take(sel, out=store[at], mode="clip")
                continue
            if store.dtype != object:
                # another type than the rows before: keep Python values, as the automaton's rows do
                obj = np.empty(len(store), dtype=object)
                obj[:base] = np.fromiter(store[:base].tolist(), dtype=object, count=base)
                store = self.cols[i] = obj
            part = c[sel]
            store[at] = part if c.dtype == object else np.fromiter(part.tolist(), dtype=object, count=m)
        if base == 0:
            self._num_ok.clear()  # (the columns may have taken the batch's types)
        elif m:
            for ci, ok in list(self._num_ok.items()):
                col = self.cols[ci]
                if ok and col.dtype.kind in "iu":
                    part = col[base:used]
                    self._num_ok[ci] = max(int(part.max()), -int(part.min())) <= 2**53
                elif ok:
                    del self._num_ok[ci]  # (another type now: numbers_ok looks again)

    def _values(self, ci: int, idx: np.ndarray) -> list:
        """Column ``ci`` at store indices ``idx`` (each >= 0) as Python values: rows of the batch being
        stepped from its own columns, earlier rows from the store."""
        col = self.cols[ci]
        if self._batch is None:
            return col[idx].tolist()
        base, cols = self._batch
        if idx.min() >= base:  # (idx is never empty here) all of the batch being stepped
            return cols[ci][idx - base].tolist()
        new = idx >= base
        if not new.any():
            return col[idx].tolist()
        cur = cols[ci]
        if col.dtype.kind in "iufbO" and cur.dtype.kind in "iufbO":
            # numbers, booleans and Python objects keep their Python type through an object array
            out = np.empty(len(idx), dtype=object)
            old = ~new
            out[old] = col[idx[old]]
            out[new] = cur[idx[new] - base]
            return out.tolist()
        vals = col[np.where(new, 0, idx)].tolist()
        where = np.flatnonzero(new)
        for j, v in zip(where.tolist(), cur[idx[where] - base].tolist()):
            vals[j] = v
        return vals

    def _out(self, nout: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kernels' output buffers for at least ``nout`` matches, and the gather index the kernel
        writes for their columns (see :func:`_batch_dfa_kernel._summary`): uninitialised (every slot a
        match uses is written before it is read), and the same for every rule of the thread (see
        :func:`_scratch`): a rule's matches are made into rows before its step returns, so no
        rule holds a batch's worth of them and none allocates (and faults in) new ones per batch."""
        return _scratch(nout, max(1, len(self.kinds)), len(self._gsrc))

    def _compact(self) -> None:
        """Drop the rows no match and no PREV can read any more, and the pool's dead slots."""
        nk = len(self.key_list)
        keep = np.zeros(self.s_used, dtype=np.bool_)
        # the live attempts move to a pool of the same size: a smaller one would only grow again at
        # the next batch
        size = max(4096, 2 * self.live_attempts + 16, self.pool.shape[1])
        pool = np.empty((5, size), dtype=np.int64)
        used = self._kernel.compact(self.k, self.alen, nk, self.pool, pool, self.s_prev, self.s_used, keep, self.a.max_back)
        self.pool, self.pool_used = pool, used
        idx = np.flatnonzero(keep)
        remap = np.full(self.s_used + 1, -1, dtype=np.int64)
        remap[idx] = np.arange(len(idx))
        m = len(idx)
        prev = remap[self.s_prev[idx]]  # -1 maps to remap[-1] == -1
        if 2 * m <= len(self.s_mask):
            # in place: the store keeps its size, so the next batches' rows go in without growing it
            self.s_prev[:m] = prev
            self.s_mask[:m] = self.s_mask[idx]
            for c in self.cols:
                c[:m] = c[idx]
        else:
            cap = max(4096, 2 * m)
            self.s_prev = _grown(prev, cap)
            self.s_mask = _grown(self.s_mask[idx], cap)
            self.cols = [_grown(c[idx], cap) for c in self.cols]
        self.k[3, :nk] = remap[self.k[3, :nk]]
        self.pool[4, :used] = remap[self.pool[4, :used]]
        self.s_used = m
        self._num_ok.clear()

    # ------------------------------------------------------------------ stepping
    def step(self, starts: np.ndarray, ends: np.ndarray, ts: np.ndarray, cols: list[np.ndarray],
             masks: np.ndarray, stats: Any, rule: str, row_ids: bool = False) -> list[dict[str, Any]]:
        """Advance every key of the batch (segments in order, ids from :meth:`bind`); the match rows."""
        n = len(masks)
        if 4 * self.s_used > 3 * len(self.s_mask) or 4 * self.pool_used > 3 * self.pool.shape[1]:
            # before the batch (its rows take store indices from s_used on, its attempts pool slots
            # from pool_used on): drop what no match and no PREV can read, and the pool's dead
            # slots, rather than grow; each is then rewritten in place while what is still needed
            # fills at most half of it (growing and copying every column each time cost more).
            # The pool grows in the step when a batch's attempts do not fit
            self._compact()
        # the batch's rows are store indices base to base + n while it is stepped; only the rows
        # _keep_rows keeps enter the store
        base = self.s_used
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        masks = np.asarray(masks, dtype=np.int64)
        seg_prev = np.empty(len(starts), dtype=np.int64)
        t = self.table
        # per match: key id, number, first row, classifier; and the measures' rows or counts
        o_int, o_meas, at = self._out(self.live_attempts + n + 1)
        counters = np.zeros(9, dtype=np.int64)
        pool_from = counters[0] = self.pool_used
        counters[1] = self.act_seq
        counters[2] = stats.partial_matches_peak
        counters[6] = self.live_attempts
        within = self.a.within
        merge = self.past_last and within is None and nfa.MERGE_EQUIVALENT_ATTEMPTS
        nm, self.pool = self._kernel.step(self._ids_now, starts, ends, np.asarray(ts, dtype=np.int64),
                  masks, base, self.s_prev, self.s_mask, seg_prev, self.k, self.alen, self.pool,
                  t.trans, t.match_pc, t.parent, t.pos, t.pc_vid, t.start, self.a.start_bits,
                  self.past_last, merge, -1 if within is None else int(within),
                  self.a.max_partial_matches, self.a.on_cap == "skip_key",
                  self.kinds, self.bits, o_int, o_meas, counters, self.sizes, self._gsrc, at)
        c = counters.tolist()
        self.pool_used, self.act_seq, stats.partial_matches_peak = c[0], c[1], c[2]
        stats.matches += c[3]
        stats.cap_hits += c[4]
        stats.partial_matches_dropped += c[5]
        self.live_attempts = c[6]
        if nm:
            self._batch = (base, cols)
            try:
                rows = self._rows(o_int, o_meas, at, nm, stats, rule, row_ids, c)
            finally:
                self._batch = None
        else:
            rows = []
        self._keep_rows(cols, base, pool_from, starts, ends, masks, seg_prev)
        return rows

    def next_deadline(self) -> int | None:
        """The earliest watermark at which :meth:`expire` ends an attempt: the smallest start time
        plus WITHIN over the live attempts (None without WITHIN or live attempts), as
        :meth:`cep.operator.PatternOperator._key_deadline` reads it from a key's first live attempt."""
        within = self.a.within
        if within is None or not self.pool_used:
            return None
        nk = len(self.key_list)
        lens = self.alen[:nk]
        owned = np.repeat(self.k[5, :nk], lens) + (np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens))
        live = owned[self.pool[2, owned] != 0]
        return int(self.pool[1, live].min()) + int(within) if len(live) else None

    def expire(self, watermark: int) -> None:
        """WITHIN by the watermark: end the attempts it rules out (nothing is emitted, see
        :func:`batch_plan`), as the automaton's ``expire`` does for keys that send nothing more."""
        if self.a.within is None or not self.live_attempts:
            return
        self.live_attempts -= int(self._kernel.expire(len(self.key_list), self.k, self.alen, self.pool, int(watermark),
                                                      int(self.a.within)))

    def flush(self, stats: Any, rule: str, row_ids: bool = False) -> list[dict[str, Any]]:
        """End of input: every attempt's best match is final; keys in the order they became live."""
        nk = len(self.key_list)
        act = self.k[4, :nk]
        live = np.flatnonzero(act >= 0)
        order = live[np.argsort(act[live], kind="stable")]
        t = self.table
        o_int, o_meas, at = self._out(self.live_attempts + 1)
        counters = np.zeros(9, dtype=np.int64)
        nm = self._kernel.flush(order.astype(np.int64), self.s_prev, self.s_mask, self.k, self.alen, self.pool,
                                t.trans, t.match_pc, t.parent, t.pos, t.pc_vid, t.start, self.past_last,
                                self.kinds, self.bits, o_int, o_meas, counters, self._gsrc, at)
        c = counters.tolist()
        stats.matches += c[3]
        self.live_attempts = 0
        return self._rows(o_int, o_meas, at, nm, stats, rule, row_ids, c)

    def _rows(self, o_int: np.ndarray, o_meas: np.ndarray, at: np.ndarray, nm: int, stats: Any, rule: str,
              row_ids: bool, counters: list[int]) -> list[dict[str, Any]]:
        """The output rows of ``nm`` matches, as :meth:`cep.nfa.PatternAutomaton._fast_row` writes them
        (with ``row_ids``, the ``_id`` of :meth:`cep.operator.PatternOperator._add_ids`); ``at`` and
        ``counters`` as the kernel left them (:func:`_batch_dfa_kernel._summary`)."""
        if not nm:
            return []
        a = self.a
        # a batch gives a rule a few dozen matches: the cost is per call, so the values of every
        # partition column and row measure are gathered with one index per column read
        values: list[list] = self._gathered(o_meas, at, nm, counters)
        npart = a.npartition
        for k, (_, kind, _, _) in enumerate(self.measures):
            if kind == "MN":
                values[npart + k] = o_int[1, :nm].tolist()
            elif kind == "COUNT":
                values[npart + k] = o_meas[:nm, k].tolist()
            elif kind == "CLS":
                vn = a.var_names
                values[npart + k] = [vn[v] for v in o_int[3, :nm].tolist()]
            # (FIRST/LAST rows: in their place already)
        names = self._names
        if self.exprs:
            # expression measures from their leaves' values, in the measures' order; the
            # leaves themselves are not output
            got = dict(zip(names, values))
            names = list(a.mr.partition_by)
            values = values[: len(names)]
            for m in a.mr.measures:
                names.append(m.name)
                if m.name in self.exprs:
                    fn, leaf_names = self.exprs[m.name]
                    fn = a.guarded(fn)  # NULL and counted where the values raise, as the automaton's
                    values.append([fn(vals) for vals in zip(*[got[n] for n in leaf_names])])
                else:
                    values.append(got[m.name])
        stats.rows_emitted += nm
        if not row_ids:
            return _make_rows(values, names + ["rule"], (rule,), len(values), nm)
        import orjson

        first = o_int[2, :nm]
        times = self._values(a.time_index, first)
        ids = []
        for row in zip(*values[:npart], times, o_int[1, :nm].tolist()):
            key = dumps_exact(list(row[:npart]), default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()
            ids.append(f"{rule}:{key}:{row[npart]}:{row[npart + 1]}")
        return _make_rows(values + [ids], names + ["rule", "_id"], (rule,), len(values), nm)

    def _gathered(self, o_meas: np.ndarray, at: np.ndarray, nm: int, counters: list[int]) -> list[list]:
        """The partition columns (at each match's first row) then every measure in place: a row
        measure's values (None where its variable matched no row), an empty list for the others.

        Every row a match reads lies at or after its first row in the store (a key's rows take
        increasing store indices, and compaction keeps their order): when the first rows are all
        the batch's own, so are the others, and each column is read from the batch with one index
        for all its measures (the kernel wrote them relative to the batch, one after the other:
        ``at``). Otherwise each column is read by :meth:`_values` (batch and store mixed, ``at``
        holds store indices), also once for all the measures that read it.
        """
        out: list[list] = [[] for _ in range(self._nout)]
        groups = self._gather_groups
        if not groups:
            return out
        b = self._batch
        src: list[np.ndarray] | None = self.cols  # (flush: store indices, no batch)
        if b is not None:
            src = b[1] if counters[7] >= b[0] else None  # (None: some match started before the batch)
        for ci, p0, slots in groups:
            idx = at[p0 * nm : (p0 + len(slots)) * nm]
            got = src[ci][idx].tolist() if src is not None else self._values(ci, idx)
            if len(slots) == 1:
                out[slots[0]] = got
                continue
            for q, slot in enumerate(slots):
                out[slot] = got[q * nm : (q + 1) * nm]
        if counters[8]:
            # a variable that matched no row: None there (the kernel read index 0 for it)
            npart = self.a.npartition
            rowm = self._gather_meas
            for i, j in zip(*(x.tolist() for x in np.nonzero(o_meas[:nm, rowm] < 0))):
                out[npart + int(rowm[j])][i] = None
        return out

    def key_states(self) -> dict[Any, Any]:
        """The keys with rows or attempts as the automaton's :class:`cep.nfa.KeyState` (lazy-DFA
        attempts with their paths), for views of the state (``cep state``); not used to step."""
        from cep.nfa import Attempt, KeyState

        a, t = self.a, self.table
        k, pool = self.k, self.pool
        lists = [c[: self.s_used].tolist() for c in self.cols]
        masks = self.s_mask[: self.s_used].tolist()
        out: dict[Any, Any] = {}
        for kid, key in enumerate(self.key_list):
            nrows, na, off = int(k[0, kid]), int(self.alen[kid]), int(k[5, kid])
            need = a.max_back
            if na:
                need = max(need, nrows - int(pool[0, off]))
            idxs: list[int] = []
            idx = int(k[3, kid])
            while idx >= 0 and len(idxs) < need:
                idxs.append(idx)
                idx = int(self.s_prev[idx])
            idxs.reverse()
            st = KeyState()
            st.rows = [tuple(c[i] for c in lists) + (masks[i],) for i in idxs]
            st.nrows, st.base = nrows, nrows - len(idxs)
            st.resume, st.match_number = int(k[1, kid]), int(k[2, kid])
            for q in range(na):
                start, ts, sid, best, _ = (int(x) for x in pool[:, off + q])
                path, cur = [], t.start
                for r in st.rows[start - st.base :]:
                    path.append(a._dfa_id(t.states[cur]))
                    cur = int(t.trans[cur, r[-1]])
                st.attempts.append(Attempt(start, ts, a._dfa_id(t.states[sid]), best if best >= 0 else None, path))
            if st.rows or st.attempts:
                out[key] = st
        return out

    # ------------------------------------------------------------------ snapshot
    def state(self) -> dict[str, Any]:
        self._compact()
        nk = len(self.key_list)
        m = self.s_used
        return {
            "keys": list(self.key_list),
            "k": self.k[:, :nk].copy(),
            "alen": self.alen[:nk].copy(),
            "pool": self.pool[:, : self.pool_used].copy(),
            "live_attempts": self.live_attempts,
            "act_seq": self.act_seq,
            "cols": [c[:m].copy() for c in self.cols],
            "prev": self.s_prev[:m].copy(),
            "mask": self.s_mask[:m].copy(),
            # a number of this process: equal in two rules' states when they stepped the same shared
            # batches since empty (cep.sharing.rejoin_histories checks it after a restore)
            "history": self.history,
        }

    def load(self, state: dict[str, Any]) -> None:
        self.key_list = list(state["keys"])
        self.ids = {k: i for i, k in enumerate(self.key_list)}
        nk = len(self.key_list)
        self.k = np.zeros((6, max(1024, nk)), dtype=np.int64)
        self.k[3:5] = -1
        self.k[:, :nk] = state["k"]
        self.alen = np.zeros(self.k.shape[1], dtype=np.int64)
        self.alen[:nk] = state["alen"]
        pool = state["pool"]
        self.pool_used = pool.shape[1]
        self.pool = _grown2(pool, max(4096, 2 * self.pool_used))
        self.live_attempts = int(state["live_attempts"])
        self.act_seq = int(state["act_seq"])
        m = len(state["mask"])
        cap = max(4096, 2 * m)
        self.s_used = m
        self.s_prev = _grown(state["prev"], cap)
        self.s_mask = _grown(state["mask"], cap)
        self.cols = [_grown(c, cap) for c in state["cols"]]
        self._num_ok = {}
        # unknown until the engine has checked the rules restored with the same saved number against
        # each other (cep.sharing.rejoin_histories); a snapshot from before it was saved has none
        self.history = None
        saved = state.get("history")
        self.restored_history = saved if isinstance(saved, int) and not isinstance(saved, bool) else None

    def back_column(self, ci: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Column ``ci`` of each key's row ``depth`` rows back from its last (1: the last), as
        :meth:`fills` reads it: which keys have that row, and its values (keys in :attr:`key_list` order)."""
        nk = len(self.key_list)
        idx = self.k[3, :nk].copy()
        for _ in range(depth - 1):
            idx = np.where(idx >= 0, self.s_prev[np.maximum(idx, 0)], -1)
        have = idx >= 0
        return have, self.cols[ci][idx[have]]


_SCRATCH = threading.local()


def _scratch(nout: int, width: int, nplaces: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This thread's kernel output buffers: (4, >= ``nout``) and (>= ``nout``, ``width``) int64 arrays
    and a flat one of >= ``nout * nplaces`` (the gather index), grown by half again when too small.
    One set per thread serves every rule in turn (the buffers are read before the step that wrote
    them returns); a thread of its own per engine keeps engines in threads apart."""
    got = getattr(_SCRATCH, "bufs", None)
    if got is None:
        got = _SCRATCH.bufs = {}
    o_int = got.get(0)
    if o_int is None or o_int.shape[1] < nout:
        o_int = got[0] = np.empty((4, max(nout, 4096, 0 if o_int is None else o_int.shape[1] * 3 // 2)), dtype=np.int64)
    o_meas = got.get(width)
    if o_meas is None or o_meas.shape[0] < nout:
        o_meas = got[width] = np.empty((max(nout, 4096, 0 if o_meas is None else o_meas.shape[0] * 3 // 2), width),
                                       dtype=np.int64)
    need = nout * nplaces
    at = got.get(-1)
    if at is None or len(at) < need:
        at = got[-1] = np.empty(max(need, 4096, 0 if at is None else len(at) * 3 // 2), dtype=np.int64)
    return o_int, o_meas, at


def _keep_scratch(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """This thread's scratch for :func:`_batch_dfa_kernel.keep_batch` over a batch of ``n`` rows: the
    kept rows' positions, links and masks, and the marks and renumbering of the batch's rows (one
    set serves every rule in turn, as :func:`_scratch`'s)."""
    got = getattr(_SCRATCH, "keep", None)
    if got is None or len(got[0]) < n:
        size = max(n, 4096, 0 if got is None else len(got[0]) * 3 // 2)
        got = _SCRATCH.keep = (np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64),
                               np.empty(size, dtype=np.int64), np.empty(size, dtype=np.bool_),
                               np.empty(size, dtype=np.int64))
    return got


@functools.lru_cache(maxsize=1024)
def _row_plan(names: tuple[str, ...], nvary: int, nconst: int) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...],
                                                                      tuple[tuple[str, int], ...]]:
    """How :func:`_make_rows` fills rows named ``names``: every name once, in order of first
    appearance (the order ``dict(zip())`` gives), then per name the one place its value comes from,
    the last of its places (the last value wins, as in ``dict(zip())``): the lists' (name, list
    index) and the constants' (name, constant index)."""
    last = {name: i for i, name in enumerate(names)}
    cols = tuple((n, i if i < nvary else i - nconst) for n, i in last.items() if not nvary <= i < nvary + nconst)
    consts = tuple((n, i - nvary) for n, i in last.items() if nvary <= i < nvary + nconst)
    return tuple(dict.fromkeys(names)), cols, consts


def _make_rows(cols: list[list], names: list[str], consts: tuple, nvary: int, nm: int) -> list[dict[str, Any]]:
    """A batch's ``nm`` output rows (dicts): ``names`` names the first ``nvary`` lists of ``cols``,
    then the values of ``consts`` (the same in every row), then the remaining lists. A repeated
    name keeps its first place and its last value, as ``dict(zip(names, row))`` does.

    Each row is a copy of one template dict that holds the constants; each list's values then go
    in with one C-level ``map`` of ``operator.setitem`` over the rows, so no Python code runs per
    row or value (``dict(zip(names, row))`` per row made a pair tuple per value and cost about
    four times as much); no code is generated: no module evaluates text
    (``tests/reliability/test_hostile_rules.py``).

    Example:
        >>> _make_rows([[1, 2], ["x", None]], ["a", "b", "rule"], ("r",), 2, 2)
        [{'a': 1, 'b': 'x', 'rule': 'r'}, {'a': 2, 'b': None, 'rule': 'r'}]
        >>> _make_rows([[1, 2], ["x", "y"]], ["rule", "rule", "_id"], ("r",), 1, 2)
        [{'rule': 'r', '_id': 'x'}, {'rule': 'r', '_id': 'y'}]
    """
    order, by_col, by_const = _row_plan(tuple(names), nvary, len(consts))
    template = dict.fromkeys(order)
    for name, j in by_const:
        template[name] = consts[j]
    rows = list(map(dict.copy, itertools.repeat(template, nm)))
    for name, j in by_col:
        _drain(map(operator.setitem, rows, itertools.repeat(name), cols[j]))
    return rows


def _drain(it: Any) -> None:
    """Run an iterator to its end, keeping nothing (a ``deque`` of length 0 does it in C)."""
    collections.deque(it, 0)


def _grown(x: np.ndarray, n: int, used: int | None = None) -> np.ndarray:
    """``x`` in an array of size ``n`` (zeros after it); only its first ``used`` values are copied."""
    out = np.zeros(n, dtype=x.dtype) if x.dtype != object else np.empty(n, dtype=object)
    k = min(len(x) if used is None else used, n)
    out[:k] = x[:k]
    return out


def _grown2(x: np.ndarray, n: int, used: int | None = None) -> np.ndarray:
    """The attempt pool ``x`` with room for ``n`` slots; only its first ``used`` slots are copied
    (the others are written before they are read)."""
    out = np.empty((x.shape[0], n), dtype=x.dtype)
    k = min(x.shape[1] if used is None else used, n)
    out[:, :k] = x[:, :k]
    return out
