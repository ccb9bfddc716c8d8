"""Compile SQL expressions of a rule into Python closures (per match) and numpy kernels (per batch).

Nothing here evaluates user text: every closure is built from our own AST, so a rule can reach
only the operators and functions listed in this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from cep.json_exact import hashable_exact
from patterns import ast as A
from patterns.compiler import is_row_local, split_conjuncts
from patterns.glob import Glob

__all__ = [
    "Node",
    "AggSpec",
    "Layout",
    "compile_row_expr",
    "compile_match_expr",
    "split_conjuncts",
    "is_row_local",
    "compile_columnar",
    "compile_local_rows",
    "DERIVED",
    "derived_column",
    "derived_columns",
    "ColumnarUnsupported",
    "truthy",
]


# ------------------------------------------------------------------ SQL scalar semantics


def _num_op(op: str) -> Callable[[Any, Any], Any]:
    def add(a, b):
        return None if a is None or b is None else a + b

    def sub(a, b):
        return None if a is None or b is None else a - b

    def mul(a, b):
        return None if a is None or b is None else a * b

    def div(a, b):
        if a is None or b is None or b == 0:
            return None
        return a / b

    def mod(a, b):
        if a is None or b is None or b == 0:
            return None
        return math.fmod(a, b)

    def concat(a, b):
        return None if a is None or b is None else f"{a}{b}"

    return {"+": add, "-": sub, "*": mul, "/": div, "%": mod, "||": concat}[op]


_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _sql_cmp(op: str, a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    if isinstance(a, str) != isinstance(b, str):
        raise TypeError(f"cannot compare {a!r} with {b!r}: a string and a number")
    return _CMP[op](a, b)


def truthy(v: Any) -> bool:
    """SQL condition truth: only TRUE passes; NULL (unknown) and FALSE do not."""
    return v is True or (v is not None and v is not False and bool(v))


def _like_matcher(pattern: str) -> Glob:
    """``LIKE``'s pattern (``%`` any run, ``_`` one character) as a linear-time matcher."""
    return Glob(pattern, many="%", one="_")


def _round(x, d=0):
    if x is None or d is None:
        return None
    return round(x, int(d))


_FUNCS: dict[str, Callable[..., Any]] = {
    "ABS": lambda x: None if x is None else abs(x),
    "ROUND": _round,
    "FLOOR": lambda x: None if x is None else math.floor(x),
    "CEIL": lambda x: None if x is None else math.ceil(x),
    "CEILING": lambda x: None if x is None else math.ceil(x),
    "SQRT": lambda x: None if x is None or x < 0 else math.sqrt(x),
    "LN": lambda x: None if x is None or x <= 0 else math.log(x),
    "EXP": lambda x: None if x is None else math.exp(x),
    "POWER": lambda x, y: None if x is None or y is None else float(x) ** y,
    "LOWER": lambda x: None if x is None else str(x).lower(),
    "UPPER": lambda x: None if x is None else str(x).upper(),
    "LENGTH": lambda x: None if x is None else len(str(x)),
    "CHAR_LENGTH": lambda x: None if x is None else len(str(x)),
    "TRIM": lambda x: None if x is None else str(x).strip(),
    "SUBSTRING": lambda s, start, n=None: None
    if s is None or start is None
    else str(s)[max(int(start) - 1, 0) : (None if n is None else max(int(start) - 1, 0) + int(n))],
    "COALESCE": lambda *xs: next((x for x in xs if x is not None), None),
    "NULLIF": lambda a, b: None if a == b else a,
    "GREATEST": lambda *xs: None if any(x is None for x in xs) else max(xs),
    "LEAST": lambda *xs: None if any(x is None for x in xs) else min(xs),
    "MOD": lambda a, b: None if a is None or b is None or b == 0 else math.fmod(a, b),
}


# ------------------------------------------------------------------ match history


class Node:
    """One row of a partial match: a persistent list shared by every run that extends it.

    ``last`` and ``first`` hold, per variable, the row number last / first mapped to it (or -1);
    ``aggs`` the running aggregate states. They make the common references O(1).
    """

    __slots__ = ("rno", "vid", "parent", "n", "last", "first", "aggs", "excl")

    def __init__(self, rno, vid, parent, n, last, first, aggs, excl):
        self.rno = rno
        self.vid = vid
        self.parent = parent
        self.n = n
        self.last = last
        self.first = first
        self.aggs = aggs
        self.excl = excl

    def chain(self) -> list[Node]:
        """The match from its first row to this one."""
        out = []
        node: Node | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        out.reverse()
        return out


# The state of a running aggregate that met a value it cannot take (text in SUM, a list and a
# number in MIN): every later update keeps it, and reading it raises TypeError, which a condition
# counts as an evaluation error (the partial match does not go on) and a measure as a NULL (see
# cep.nfa.PatternAutomaton's measures). A tuple, so the specialised updates fail on it by themselves.
BAD_AGGREGATE = (None, -1)


def _bad_aggregate(func: str) -> Any:
    raise TypeError(f"{func} met a value of a type it cannot aggregate")


@dataclass(frozen=True)
class AggSpec:
    """A running aggregate over the rows mapped to ``vars`` (None: every row)."""

    func: str
    vars: frozenset[int] | None
    arg: Callable[[tuple], Any] | None  # value of one row; None for COUNT(*)

    def init(self):
        f = self.func
        if f in ("SUM", "AVG"):
            return (0, 0)
        if f == "COUNT":
            return 0
        if f == "COUNT_DISTINCT":
            return frozenset()
        return None

    def update(self, state, row: tuple):
        try:
            return self._update(state, row)
        except (TypeError, ValueError, ArithmeticError):
            return BAD_AGGREGATE

    def _update(self, state, row: tuple):
        f = self.func
        if state is BAD_AGGREGATE:
            return state
        if self.arg is None:
            return state + 1
        v = self.arg(row)
        if v is None:
            return state
        if f == "COUNT":
            return state + 1
        if f in ("SUM", "AVG"):
            return (state[0] + v, state[1] + 1)
        if f == "COUNT_DISTINCT":
            return state if v in state else state | {v}
        if f == "APPROX_COUNT_DISTINCT":
            # a HyperLogLog (sparse while small); copied, since partial matches share history
            from sketches import HyperLogLog

            h = state.copy() if state is not None else HyperLogLog(p=12)
            h.update(hashable_exact(v))  # (an int past 64 bits: the float it equals, else its digits)
            return h
        if state is None:
            return v
        return min(state, v) if f == "MIN" else max(state, v)

    def finalizer(self) -> Callable[[Any], Any]:
        """``final`` specialised to this aggregate's function (conditions call it per partial match)."""
        f = self.func
        if f == "SUM":
            return lambda state: state[0] if state[1] > 0 else None if state[1] == 0 else _bad_aggregate(f)
        if f == "AVG":
            return lambda state: state[0] / state[1] if state[1] > 0 else None if state[1] == 0 else _bad_aggregate(f)
        if f == "COUNT":
            return lambda state: state
        return self.final

    def final(self, state):
        f = self.func
        if state is BAD_AGGREGATE:
            return _bad_aggregate(f)
        if f == "SUM":
            return state[0] if state[1] else None
        if f == "AVG":
            return state[0] / state[1] if state[1] else None
        if f == "COUNT_DISTINCT":
            return len(state)
        if f == "APPROX_COUNT_DISTINCT":
            return 0 if state is None else int(round(state.estimate()))
        return state


class Layout:
    """Where things are: row tuple columns, variable ids, subsets, aggregates to maintain."""

    def __init__(self, columns: list[str], var_names: tuple[str, ...], subsets: dict[str, frozenset[int]]):
        self.columns = list(columns)
        self.col_index = {c: i for i, c in enumerate(self.columns)}
        self.var_names = var_names
        self.var_ids = {n: i for i, n in enumerate(var_names)}
        self.subsets = subsets
        self.aggs: list[AggSpec] = []
        self._agg_keys: dict[tuple, int] = {}

    def var_set(self, var: str | None) -> frozenset[int] | None:
        if var is None:
            return None
        if var in self.var_ids:
            return frozenset([self.var_ids[var]])
        return self.subsets[var]

    def column(self, name: str) -> int:
        if name not in self.col_index:
            self.col_index[name] = len(self.columns)
            self.columns.append(name)
        return self.col_index[name]

    def agg_slot(self, func: str, vars_: frozenset[int] | None, arg: A.Expr | None) -> int:
        key = (func, vars_, arg)
        if key not in self._agg_keys:
            fn = compile_row_expr(arg, self) if arg is not None else None
            self._agg_keys[key] = len(self.aggs)
            self.aggs.append(AggSpec(func, vars_, fn))
        return self._agg_keys[key]


# ------------------------------------------------------------------ single-row expressions


def compile_row_expr(e: A.Expr, layout: Layout) -> Callable[[tuple], Any]:
    """Compile an expression over one row's columns (navigation and aggregate arguments)."""

    def c(x: A.Expr) -> Callable[[tuple], Any]:
        if isinstance(x, A.Column):
            i = layout.column(x.name)
            return lambda row: row[i] if i < len(row) else None
        return _compile_common(x, c)

    return c(e)


def _compile_common(x: A.Expr, c: Callable[[A.Expr], Callable]) -> Callable:
    """Operators shared by every evaluation context; ``c`` compiles sub-expressions."""
    if isinstance(x, A.Literal):
        v = x.value
        return lambda ctx: v
    if isinstance(x, A.Unary):
        f = c(x.operand)
        return lambda ctx: None if (v := f(ctx)) is None else -v
    if isinstance(x, A.Binary):
        lf, rf, op = c(x.left), c(x.right), _num_op(x.op)
        return lambda ctx: op(lf(ctx), rf(ctx))
    if isinstance(x, A.Compare):
        lf, rf, o = c(x.left), c(x.right), x.op
        if isinstance(x.right, A.Literal) and isinstance(x.right.value, (int, float)) and not isinstance(x.right.value, bool):
            # against a number (the common case): _sql_cmp without its checks on the right side
            cmp, b = _CMP[o], x.right.value

            def vs_number(ctx):
                a = lf(ctx)
                if a is None:
                    return None
                if isinstance(a, str):
                    raise TypeError(f"cannot compare {a!r} with {b!r}: a string and a number")
                return cmp(a, b)

            return vs_number
        return lambda ctx: _sql_cmp(o, lf(ctx), rf(ctx))
    if isinstance(x, A.Logical):
        fs = [c(a) for a in x.args]
        if x.op == "AND":

            def and_(ctx):
                unknown = False
                for f in fs:
                    v = f(ctx)
                    if v is None:
                        unknown = True
                    elif not v:
                        return False
                return None if unknown else True

            return and_

        def or_(ctx):
            unknown = False
            for f in fs:
                v = f(ctx)
                if v is None:
                    unknown = True
                elif v:
                    return True
            return None if unknown else False

        return or_
    if isinstance(x, A.Not):
        f = c(x.operand)
        return lambda ctx: None if (v := f(ctx)) is None else not v
    if isinstance(x, A.IsNull):
        f, neg = c(x.operand), x.negated
        return lambda ctx: (f(ctx) is None) != neg
    if isinstance(x, A.Between):
        f, lo, hi, neg = c(x.operand), c(x.low), c(x.high), x.negated

        def between(ctx):
            v, a, b = f(ctx), lo(ctx), hi(ctx)
            r1, r2 = _sql_cmp(">=", v, a), _sql_cmp("<=", v, b)
            if r1 is False or r2 is False:
                r = False
            elif r1 is None or r2 is None:
                return None
            else:
                r = True
            return not r if neg else r

        return between
    if isinstance(x, A.InList):
        f, items, neg = c(x.operand), [c(i) for i in x.items], x.negated

        def in_(ctx):
            v = f(ctx)
            if v is None:
                return None
            unknown = False
            for g in items:
                w = g(ctx)
                if w is None:
                    unknown = True
                elif w == v:
                    return not neg
            return None if unknown else neg

        return in_
    if isinstance(x, A.Like):
        f, rx, neg = c(x.operand), _like_matcher(x.pattern), x.negated
        return lambda ctx: None if (v := f(ctx)) is None else (rx.fullmatch(str(v)) is not None) != neg
    if isinstance(x, A.Case):
        whens = [(c(w), c(v)) for w, v in x.whens]
        default = c(x.default) if x.default is not None else (lambda ctx: None)

        def case(ctx):
            for w, v in whens:
                if truthy(w(ctx)):
                    return v(ctx)
            return default(ctx)

        return case
    if isinstance(x, A.Func):
        fn = _FUNCS[x.name]
        args = [c(a) for a in x.args]
        if len(args) == 1:
            a0 = args[0]
            return lambda ctx: fn(a0(ctx))
        return lambda ctx: fn(*[a(ctx) for a in args])
    raise TypeError(f"unsupported expression {type(x).__name__}")


# ------------------------------------------------------------------ match-context expressions


class MatchCtx:
    """What a DEFINE condition or a measure sees: the match so far (``node``) and at its end."""

    __slots__ = ("node", "final", "rows", "base", "nrows", "match_number", "cur")

    def __init__(self, node: Node, final: Node, rows: list, base: int, nrows: int, match_number: int,
                 cur: tuple | None = None):
        self.cur = cur  # a DEFINE condition's own row (node's), when the caller has it at hand
        self.node = node
        self.final = final
        self.rows = rows
        self.base = base
        self.nrows = nrows  # rows of the partition stepped so far
        self.match_number = match_number

    def row(self, rno: int):
        """Partition row ``rno``, or None outside the rows known. Rows past the ones stepped are
        the ones ``NEXT`` in DEFINE waits for (held until known), or the rows after a match that
        the operator waits for before it reads ``NEXT`` in a measure."""
        if rno < 0 or rno < self.base:
            return None
        i = rno - self.base
        rows = self.rows
        return rows[i] if i < len(rows) else None


def _last_row(node: Node, vars_: frozenset[int] | None, k: int) -> int:
    """Row number of the k-th last row (0 = last) mapped to one of ``vars_`` up to ``node``."""
    if k == 0 and node.last is not None:
        if vars_ is None:
            return node.rno
        if len(vars_) == 1:
            (v,) = vars_
            return node.last[v]
        return max(node.last[v] for v in vars_)
    if vars_ is None:
        return node.rno - k if k < node.n else -1
    n: Node | None = node
    while n is not None:
        if vars_ is None or n.vid in vars_:
            if k == 0:
                return n.rno
            k -= 1
        n = n.parent
    return -1


def _first_row(node: Node, vars_: frozenset[int] | None, k: int) -> int:
    if vars_ is None:
        return node.rno - node.n + 1 + k if k < node.n else -1  # a match is a run of consecutive rows
    if k == 0 and node.first is not None:
        if len(vars_) == 1:
            (v,) = vars_
            return node.first[v]
        cands = [node.first[v] for v in vars_ if node.first[v] >= 0]
        return min(cands) if cands else -1
    return _walk_first(node, vars_, k)


def _walk_first(node: Node, vars_: frozenset[int] | None, k: int) -> int:
    hits = [n.rno for n in node.chain() if vars_ is None or n.vid in vars_]
    return hits[k] if k < len(hits) else -1


def compile_match_expr(e: A.Expr, layout: Layout, define_var: int | None = None) -> Callable[[MatchCtx], Any]:
    """Compile a DEFINE condition (``define_var`` set) or a measure over the match context."""
    var_names = layout.var_names

    def resolve(kind: str, vars_: frozenset[int] | None, offset: int, semantics: str):
        final = semantics == "FINAL"
        if kind == "LAST":
            if vars_ is None and offset == 0:
                return (lambda ctx: ctx.final.rno) if final else (lambda ctx: ctx.node.rno)
            return (lambda ctx: _last_row(ctx.final, vars_, offset)) if final else (
                lambda ctx: _last_row(ctx.node, vars_, offset)
            )
        if vars_ is None and offset == 0:
            return lambda ctx: ctx.node.rno - ctx.node.n + 1
        return (lambda ctx: _first_row(ctx.final, vars_, offset)) if final else (
            lambda ctx: _first_row(ctx.node, vars_, offset)
        )

    def arg_vars(arg: A.Expr) -> frozenset[int] | None:
        for col in A.walk_expr(arg):
            if isinstance(col, A.Column) and col.var is not None:
                return layout.var_set(col.var)
        return None

    def c(x: A.Expr) -> Callable[[MatchCtx], Any]:
        if isinstance(x, A.Column):
            i = layout.column(x.name)
            vs = layout.var_set(x.var)
            if define_var is not None and (vs is None or vs == frozenset([define_var])):
                # the row being tested: the caller hands it over (MatchCtx.cur)

                def own(ctx, i=i):
                    row = ctx.cur
                    if row is None:
                        row = ctx.row(ctx.node.rno)
                        if row is None:
                            return None
                    return row[i] if i < len(row) else None

                return own
            if vs is not None and len(vs) == 1:
                (v,) = vs

                def one_var(ctx, i=i, v=v, vs=vs):  # the last row mapped to one variable, inlined
                    node = ctx.node
                    r = node.last[v] if node.last is not None else _last_row(node, vs, 0)
                    if r < 0 or r >= ctx.nrows or r < ctx.base:
                        return None
                    k = r - ctx.base
                    rows = ctx.rows
                    if k >= len(rows):
                        return None
                    row = rows[k]
                    return row[i] if i < len(row) else None

                return one_var
            where = resolve("LAST", vs, 0, "RUNNING")

            def col(ctx, i=i, where=where):
                r = where(ctx)
                if r < 0:
                    return None
                row = ctx.row(r)
                return None if row is None or i >= len(row) else row[i]

            return col
        if isinstance(x, A.Nav):
            inner = x.arg if isinstance(x.arg, A.Nav) else None  # PREV(LAST(A.x, 1), 2): logical, then physical
            argf = compile_row_expr(inner.arg if inner is not None else x.arg, layout)
            vars_ = arg_vars(x.arg)
            if x.kind in ("FIRST", "LAST"):
                where = resolve(x.kind, vars_, x.offset, x.semantics)
            else:
                if inner is not None:
                    base = resolve(inner.kind, vars_, inner.offset, inner.semantics)
                else:
                    base = resolve("LAST", vars_, 0, "RUNNING")
                delta = -x.offset if x.kind == "PREV" else x.offset

                def where(ctx, base=base, delta=delta):
                    r = base(ctx)
                    return -1 if r < 0 else r + delta

            def nav(ctx, where=where, argf=argf):
                r = where(ctx)
                if r < 0:
                    return None
                row = ctx.row(r)
                return None if row is None else argf(row)

            return nav
        if isinstance(x, A.Agg):
            vars_ = layout.var_set(x.var) if x.var is not None else (arg_vars(x.arg) if x.arg is not None else None)
            slot = layout.agg_slot(x.func, vars_, x.arg)
            fin = layout.aggs[slot].finalizer()
            if x.semantics == "FINAL":
                return lambda ctx: fin(ctx.final.aggs[slot])
            return lambda ctx: fin(ctx.node.aggs[slot])
        if isinstance(x, A.Classifier):
            if x.var is None:
                if x.semantics == "FINAL":
                    return lambda ctx: var_names[ctx.final.vid]
                return lambda ctx: var_names[ctx.node.vid]
            vs = layout.var_set(x.var)

            def classifier(ctx):
                n = ctx.final if x.semantics == "FINAL" else ctx.node
                while n is not None:
                    if n.vid in vs:
                        return var_names[n.vid]
                    n = n.parent
                return None

            return classifier
        if isinstance(x, A.MatchNumber):
            return lambda ctx: ctx.match_number
        return _compile_common(x, c)

    return c(e)


# ------------------------------------------------------------------ DEFINE analysis


DERIVED = ("FIRST_SEEN", "MATCHES")
"""DEFINE functions whose per-row value the operator computes for a whole batch (row state or
search), read by the kernels like a column."""


def derived_column(x: A.Func) -> str:
    """The name under which a batch's ``FIRST_SEEN(col)`` / ``MATCHES(cols, 'query')`` values are read."""
    cols = ",".join(a.name for a in x.args if isinstance(a, A.Column))
    if x.name == "MATCHES":
        q = x.args[-1]
        assert isinstance(q, A.Literal)
        return f"MATCHES({cols};{q.value})"
    return f"{x.name}({cols})"


def derived_columns(exprs: list[A.Expr]) -> dict[str, A.Func]:
    """Derived values the conditions read: name -> the call (its columns and, for MATCHES, query)."""
    out: dict[str, A.Func] = {}
    for e in exprs:
        for x in A.walk_expr(e):
            if isinstance(x, A.Func) and x.name in DERIVED:
                out[derived_column(x)] = x
    return out


def compile_local_rows(e: A.Expr, var_name: str) -> tuple[list[tuple[str, int]], Callable]:
    """A row-local condition evaluated row by row: the columns it needs and ``f((i, arrays))``.

    ``arrays[(name, lag)]`` holds the column ``lag`` rows back within the key, as Python values.
    Used where the column kernels cannot run (mixed types, functions without a kernel).
    """
    needs: list[tuple[str, int]] = []

    def c(x: A.Expr, lag: int = 0) -> Callable:
        if isinstance(x, A.Column):
            key = (x.name, lag)
            if key not in needs:
                needs.append(key)
            return lambda ctx: ctx[1][key][ctx[0]]
        if isinstance(x, A.Func) and x.name in DERIVED:
            key = (derived_column(x), lag)
            if key not in needs:
                needs.append(key)
            return lambda ctx: ctx[1][key][ctx[0]]
        if isinstance(x, A.Nav):
            return c(x.arg, lag + (x.offset if x.kind == "PREV" else 0))
        if isinstance(x, A.Classifier):
            return lambda ctx: var_name
        return _compile_common(x, lambda y: c(y, lag))

    return needs, c(e)


# ------------------------------------------------------------------ column-wise kernels


class ColumnarUnsupported(Exception):
    """The expression needs the per-row evaluator (mixed types, an unsupported function)."""


# A columnar value is (values, nulls): a numpy array and a bool array (True where NULL), or a
# Python scalar with nulls None/True. Conditions are Kleene arrays: int8 1 true, 0 unknown, -1 false.


def compile_columnar(e: A.Expr, var_name: str) -> Callable[[Callable[[str, int], tuple], int], np.ndarray]:
    """Compile a row-local condition into a kernel ``f(column, n) -> bool mask``.

    ``column(name, lag)`` returns ``(values, nulls)`` for the column ``lag`` rows back within the
    key (lag 0: the row itself).
    """

    def val(x: A.Expr, lag: int, get):
        if isinstance(x, A.Literal):
            return x.value, x.value is None
        if isinstance(x, A.Column):
            return get(x.name, lag)
        if isinstance(x, A.Nav):
            if x.kind == "PREV":
                return val(x.arg, lag + x.offset, get)
            return val(x.arg, lag, get)
        if isinstance(x, A.Classifier):
            return var_name, False
        if isinstance(x, A.Unary):
            v, n = val(x.operand, lag, get)
            v = _num(v, "-")
            if x.op == "-":
                _no_int64_min(v)
                with np.errstate(all="ignore"):
                    return -v, n
            return v, n
        if isinstance(x, A.Binary):
            lv, ln = val(x.left, lag, get)
            rv, rn = val(x.right, lag, get)
            nulls = _or_nulls(ln, rn)
            if x.op == "||":
                raise ColumnarUnsupported("string concatenation")
            lv, rv = _num(lv, x.op), _num(rv, x.op)
            with np.errstate(all="ignore"):
                if x.op in ("+", "-", "*"):
                    out = _exact_arith(x.op, lv, rv)
                elif x.op in ("/", "%"):
                    zero = rv == 0
                    if x.op == "/":
                        if _big_int(lv) or _big_int(rv):  # (Python divides exact integers, numpy their float64s)
                            raise ColumnarUnsupported("division of an integer beyond 2**53")
                        out = lv / rv
                    else:  # math.fmod, the row path's, takes float64s of its operands
                        out = np.fmod(np.asarray(lv, dtype=np.float64), np.asarray(rv, dtype=np.float64))
                    nulls = _or_nulls(nulls, zero)
                else:  # pragma: no cover
                    raise ColumnarUnsupported(x.op)
            return out, nulls
        if isinstance(x, A.Func) and x.name in DERIVED:
            return get(derived_column(x), lag)
        if isinstance(x, A.Func) and x.name in ("ABS", "LOWER", "UPPER"):
            v, n = val(x.args[0], lag, get)
            if x.name == "ABS":
                return np.abs(_no_int64_min(_num(v, "abs"))), n
            if isinstance(v, np.ndarray):
                if v.dtype != object:
                    raise ColumnarUnsupported("LOWER/UPPER of a number")
                f = str.lower if x.name == "LOWER" else str.upper
                return np.array([f(s) if isinstance(s, str) else s for s in v], dtype=object), n
            return (None if v is None else (v.lower() if x.name == "LOWER" else v.upper())), n
        if _is_condition(x):
            k = cond(x, lag, get)
            return k > 0, k == 0
        raise ColumnarUnsupported(type(x).__name__)

    def cond(x: A.Expr, lag: int, get) -> np.ndarray | int:
        if isinstance(x, A.Logical):
            ks = [cond(a, lag, get) for a in x.args]
            out = ks[0]
            for k in ks[1:]:
                out = np.minimum(out, k) if x.op == "AND" else np.maximum(out, k)
            return out
        if isinstance(x, A.Not):
            return -cond(x.operand, lag, get)
        if isinstance(x, A.Compare):
            lv, ln = val(x.left, lag, get)
            rv, rn = val(x.right, lag, get)
            return _kleene(_compare(x.op, lv, rv, _or_nulls(ln, rn)), _or_nulls(ln, rn))
        if isinstance(x, A.IsNull):
            _, n = val(x.operand, lag, get)
            isnull = np.asarray(n, dtype=bool)
            return np.where(isnull != x.negated, 1, -1).astype(np.int8)
        if isinstance(x, A.Between):
            lo = A.Compare(">=", x.operand, x.low)
            hi = A.Compare("<=", x.operand, x.high)
            k = np.minimum(cond(lo, lag, get), cond(hi, lag, get))
            return -k if x.negated else k
        if isinstance(x, A.InList):
            if not x.items:
                raise ColumnarUnsupported("empty IN")
            eqs = [cond(A.Compare("=", x.operand, i), lag, get) for i in x.items]
            k = eqs[0]
            for e2 in eqs[1:]:
                k = np.maximum(k, e2)
            return -k if x.negated else k
        if isinstance(x, A.Literal):
            if x.value is None:
                return np.int8(0)
            return np.int8(1 if x.value else -1)
        if isinstance(x, A.Column) or (isinstance(x, A.Func) and x.name in DERIVED):
            v, n = get(x.name, lag) if isinstance(x, A.Column) else get(derived_column(x), lag)
            if isinstance(v, np.ndarray) and v.dtype == bool:
                return _kleene(v, n)
            raise ColumnarUnsupported("non-boolean column used as a condition")
        raise ColumnarUnsupported(type(x).__name__)

    def kernel(get, n: int) -> np.ndarray:
        k = cond(e, 0, get)
        out = np.asarray(k) > 0
        if out.ndim == 0:
            return np.full(n, bool(out))
        return out

    return kernel


def _is_condition(x: A.Expr) -> bool:
    return isinstance(x, (A.Logical, A.Not, A.Compare, A.IsNull, A.Between, A.InList))


def _or_nulls(a, b):
    if a is True or b is True:
        return True
    if a is False or a is None:
        return b if b is not None else False
    if b is False or b is None:
        return a
    return np.logical_or(a, b)


def _num(v, what):
    if isinstance(v, np.ndarray):
        if v.dtype == object or v.dtype.kind in "USb":
            raise ColumnarUnsupported(f"arithmetic '{what}' on a non-numeric column")
        return v
    if isinstance(v, str):
        raise ColumnarUnsupported(f"arithmetic '{what}' on a string")
    return v


_EXACT = 2**53  # integers up to this magnitude are exact as float64
_INT64_SAFE = float(2**62)  # an int64 result whose float64 estimate is below this did not overflow


def _is_int(v) -> bool:
    """An integer operand (an int array or a Python int; not a bool)."""
    if isinstance(v, np.ndarray):
        return v.dtype.kind in "iu"
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_float(v) -> bool:
    if isinstance(v, np.ndarray):
        return v.dtype.kind == "f"
    return isinstance(v, (float, np.floating))


def _big_int(v) -> bool:
    """Whether integer operand ``v`` holds a value that float64 cannot hold exactly."""
    if not _is_int(v):
        return False
    if isinstance(v, np.ndarray):
        return bool(v.size) and bool((v > _EXACT).any() or (v < -_EXACT).any())
    return abs(int(v)) > _EXACT


def _no_int64_min(v):
    """``v``, unless negating it in int64 would wrap (-(-2**63) is -2**63 there, 2**63 in Python)."""
    if isinstance(v, np.ndarray) and v.dtype == np.int64 and v.size and (v == np.iinfo(np.int64).min).any():
        raise ColumnarUnsupported("negation of -2**63 in int64")
    return v


def _exact_arith(op: str, lv, rv):
    """``lv op rv`` (``+``, ``-``, ``*``) by numpy when that is the row path's (Python's) exact answer,
    else ColumnarUnsupported (the caller evaluates the condition row by row).

    Python keeps integers exact at any size and rounds float results; numpy wraps int64 results
    past 2**63 silently and rounds float64 results of integers past 2**53. So an int64 result is
    taken when its float64 estimate shows no overflow, and a float64 result only below 2**53 in
    magnitude: an exact result at or past 2**53 cannot round below it, so below it the float64 is
    the exact value. Float data past 2**53 goes row by row too (same answer, slower): which
    float64 values came from integers (object columns, PREV of int columns) is not tracked.
    """
    if not isinstance(lv, np.ndarray) and not isinstance(rv, np.ndarray):
        return _num_op(op)(lv, rv)  # (two scalars: Python's own arithmetic)
    f = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
    try:
        out = np.asarray(f(lv, rv))
    except OverflowError:  # a Python int operand beyond int64
        raise ColumnarUnsupported("an integer beyond int64 in arithmetic") from None
    if not out.size:
        return out
    if out.dtype.kind in "iu":
        # bound the result's magnitude from the operands' (two reductions each, no temporaries)
        bl, br = _magnitude(lv), _magnitude(rv)
        if (bl * br if op == "*" else bl + br) >= 2**63:
            est = f(np.asarray(lv, dtype=np.float64), np.asarray(rv, dtype=np.float64))
            if (np.abs(est) >= _INT64_SAFE).any():
                raise ColumnarUnsupported("an int64 result that may overflow")
    elif out.dtype.kind == "f":
        hi, lo = out.max(), out.min()
        if hi >= _EXACT or lo <= -_EXACT or (hi != hi and (np.abs(out) >= _EXACT).any()):  # (NaN: NULLs)
            raise ColumnarUnsupported("a float64 result at or past 2**53")
    return out


def _magnitude(v) -> int:
    """The largest magnitude in integer operand ``v`` (an int array or a Python int), as a Python int."""
    if isinstance(v, np.ndarray):
        return max(int(v.max()), -int(v.min())) if v.size else 0
    return abs(int(v))


def _compare(op: str, lv, rv, nulls):
    lo = isinstance(lv, np.ndarray) and lv.dtype == object
    ro = isinstance(rv, np.ndarray) and rv.dtype == object
    if lo or ro or isinstance(lv, str) or isinstance(rv, str):
        # strings (or mixed) arrays: compare where both sides are present
        n = len(lv) if isinstance(lv, np.ndarray) else len(rv)
        out = np.zeros(n, dtype=bool)
        mask = ~np.broadcast_to(np.asarray(nulls, dtype=bool), (n,))
        if not mask.any():
            return out
        lsel = lv[mask] if isinstance(lv, np.ndarray) else lv
        rsel = rv[mask] if isinstance(rv, np.ndarray) else rv
        for side in (lsel, rsel):
            if isinstance(side, np.ndarray):
                kinds = {type(s) for s in side}
                if len(kinds) > 1 or (kinds and kinds.pop() is not str):
                    raise ColumnarUnsupported("mixed or non-string values in a string comparison")
            elif not isinstance(side, str):
                raise ColumnarUnsupported("string compared with a number")
        fn = _CMP[op]
        out[mask] = np.asarray(fn(lsel, rsel), dtype=bool)
        return out
    # numpy compares an integer with a float64 as two float64s; Python compares them exactly
    if (_is_int(lv) and _is_float(rv) and _big_int(lv)) or (_is_int(rv) and _is_float(lv) and _big_int(rv)):
        raise ColumnarUnsupported("an integer beyond 2**53 compared with a float")
    with np.errstate(invalid="ignore"):
        return np.asarray(_CMP[op](lv, rv))


def _kleene(result, nulls) -> np.ndarray:
    """A comparison's result as three-valued logic in int8: 1 true, -1 false, 0 unknown (NULL)."""
    res = np.asarray(result, dtype=bool)
    if nulls is True:
        return np.zeros(res.shape, dtype=np.int8)
    # in int8 from the start, in place: np.where(res, 1, -1) made int64 first (four times slower
    # over a batch, and every rule's every condition goes through here)
    k = res.astype(np.int8)
    k *= 2
    k -= 1
    if nulls is False or nulls is None:
        return k
    known = ~np.asarray(nulls, dtype=bool)
    if known.shape != k.shape:  # (a scalar result against per-row NULLs: broadcast)
        return np.where(known, k, np.int8(0))
    k *= known.view(np.int8)
    return k
