"""Which patterns' partial matches can multiply with every row: the checker's growth analysis.

The runtime merges the runs of one start row that sit in the same automaton state when no
condition looks back at the match (a lazy DFA), so their number is bounded by the automaton. When
a condition does look back (aggregates, other variables' rows, FIRST/LAST), two runs in one state
may have different futures and both are kept. Then an unbounded group whose body can take the
same rows in two ways (``(A|B)*`` where A and B can both hold on one row, ``(A A*)*``, a PERMUTE
in a loop) doubles the runs of a start row on every such row: 2^n after n rows.

:func:`find_growth` decides this on the compiled program: the automaton is exponentially
ambiguous (Weber and Seidl's criterion) exactly when, in the product of the automaton with itself,
one strongly connected component holds a pair of equal states and a pair of different ones; a
product state ``(p, q)`` exists only when the variables that ``p`` and ``q`` consume can hold on the
same row, i.e. unless their conditions are provably exclusive (:func:`exclusive`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from patterns import ast as A
from patterns.compiler import (
    OP_VAR,
    CompiledPattern,
    _closure_pcs,
    is_row_local,
    split_conjuncts,
    unbounded_loops,
)
from patterns.errors import SourceWarning

__all__ = ["Growth", "find_growth", "growth_warning", "exclusive", "MAX_LOOP_STATES", "GROWING_PATTERN_STEPS"]

MAX_LOOP_STATES = 200
"""Loops with more row-consuming states than this are not analysed (the product would hold
their square); such a pattern gets no warning."""

MAX_PRODUCT_EDGES = 2_000_000
"""Product transitions walked per loop before the analysis gives up (no warning)."""


GROWING_PATTERN_STEPS = 64
"""The default work budget (the rule option ``max_steps_per_event``) of a pattern with a
:class:`Growth`: the partial matches one event may advance on its key. Other patterns have no
budget by default (``max_partial_matches`` bounds their work). Measured in docs/reliability.md,
"Work per event"."""


@dataclass(frozen=True)
class Growth:
    """Why a pattern's partial matches can grow exponentially with the rows of a run."""

    group: A.PQuant
    """The innermost unbounded quantifier whose body can take the same rows in two ways."""
    vars: tuple[str, str]
    """Two variables of the group that can both take one row, in two runs (the same name twice
    when one variable occurs at two places of the group)."""
    looks_back: str
    """A variable whose condition looks back at the match, which is why runs are not merged."""


def find_growth(cp: CompiledPattern) -> Growth | None:
    """The unbounded group whose partial matches can multiply with every row, or None.

    Example:
        >>> from patterns.match_recognize import parse_statement
        >>> from patterns.compiler import compile_statement
        >>> def growth(pattern, define):
        ...     g = find_growth(compile_statement(parse_statement(
        ...         f"SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN ({pattern}) DEFINE {define})")))
        ...     return g and (g.vars, g.looks_back)
        >>> growth("(A|B)* C", "A AS SUM(A.x) > 0, C AS C.x < 0")
        (('A', 'B'), 'A')
        >>> growth("(A|B)* C", "A AS A.x > 0 AND SUM(A.x) > 0, B AS B.x <= 0, C AS C.x < 0") is None
        True
        >>> growth("(A|B)* C", "A AS A.x > 0, C AS C.x < 0") is None  # runs are merged
        True
    """
    # the rule file's check and the operator ask about the same object: keep the answer on it (by
    # identity: equal statements with other text have their carets elsewhere)
    cached = cp.__dict__.get("_growth")
    if cached is None:
        cached = (_find_growth(cp),)
        object.__setattr__(cp, "_growth", cached)
    return cached[0]


def _find_growth(cp: CompiledPattern) -> Growth | None:
    var_names, subsets = cp.program.var_names, cp.subsets
    looks_back = None
    local: dict[int, list[A.Expr]] = {}
    for vid, expr in sorted(cp.defines.items()):
        name = var_names[vid]
        for conj in split_conjuncts(expr):
            if is_row_local(conj, name, subsets, vid):
                local.setdefault(vid, []).append(conj)
            elif looks_back is None:
                looks_back = name
    if looks_back is None:
        return None

    ins = cp.program.instructions
    loops = unbounded_loops(cp)
    var_pcs = [pc for pc, x in enumerate(ins) if x[0] == OP_VAR]
    succ: dict[int, list[int]] = {}
    for p in var_pcs:
        succ[p] = [q for q in _closure_pcs(ins, ins[p][2]) if ins[q][0] == OP_VAR]

    ids = {n: i for i, n in enumerate(var_names)}
    nv = len(var_names)
    same_row = [[v == w or not exclusive(local.get(v, []), var_names[v], local.get(w, []), var_names[w], subsets, ids)
                 for w in range(nv)] for v in range(nv)]

    for scc in _sccs(var_pcs, succ):
        members = set(scc)
        if len(scc) == 1 and scc[0] not in succ[scc[0]]:
            continue  # no cycle
        if len(scc) > MAX_LOOP_STATES:
            continue
        var = {p: ins[p][1] for p in scc}
        inner = {p: [q for q in succ[p] if q in members] for p in scc}
        if _ambiguous_cycle(scc, inner, var, same_row) is None:
            continue
        # name the smallest loop whose own states already multiply the runs
        for group, start, end in sorted(loops, key=lambda x: x[2] - x[1]):
            part = [p for p in scc if start <= p < end]
            if not part:
                continue
            if len(part) == len(scc):
                sub = inner
            else:
                sub = {p: [q for q in inner[p] if start <= q < end] for p in part}
            witness = _ambiguous_cycle(part, sub, var, same_row)
            if witness is not None:
                r, s = witness
                return Growth(group, (var_names[ins[r][1]], var_names[ins[s][1]]), looks_back)
    return None


def growth_warning(
    rule: str,
    growth: Growth,
    text: str,
    file: str | None = None,
    line_offset: int = 0,
    col_offset: int = 0,
    block_indent: int = 0,
) -> SourceWarning:
    """The ``cep check`` warning for ``growth``, with a caret under the group in ``text``."""
    g = growth.group
    end = g.end if g.end > g.pos else g.pos + 1
    shown = " ".join(text[g.pos : end].split())
    v, w = growth.vars
    how = (f"{v} and {w} can both take the same row" if v != w
           else f"{v} occurs at two places of it and a row can be taken at either")
    message = (
        f"rule {rule!r}: the partial matches of {shown} can multiply with every row: {how}, and "
        f"{growth.looks_back}'s condition looks back at the match (aggregates, other variables' rows, "
        f"FIRST/LAST), so runs are not merged and each such row can double the runs of a start row. "
        f"Make the alternatives exclusive (a condition that the rows of one fail), end runs sooner with "
        f"WITHIN, or bound the work with max_partial_matches or max_steps_per_event (this rule's default "
        f"budget: {GROWING_PATTERN_STEPS} partial matches per event; more are dropped and counted)"
    )
    return SourceWarning(message, text, g.pos, end - g.pos, file, line_offset, col_offset, block_indent)


N = TypeVar("N", bound=Hashable)


def _sccs(nodes: list[N], succ: dict[N, list[N]]) -> list[list[N]]:
    """Strongly connected components (Tarjan's algorithm, without recursion)."""
    index: dict[N, int] = {}
    low: dict[N, int] = {}
    on: set[N] = set()
    stack: list[N] = []
    out: list[list[N]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(succ[w])))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def _ambiguous_cycle(
    scc: list[int], succ: dict[int, list[int]], var: dict[int, int], same_row: list[list[bool]]
) -> tuple[int, int] | None:
    """Two different states two runs can be in at once, on a cycle back to one shared state.

    In the product automaton of these states, a node (p, q) is a pair of states that two runs of
    one start row may occupy after the same rows. A pair of different states reachable from an
    equal pair and leading back to one lies on a cycle through an equal pair (the states form one
    component, so equal pairs reach each other along the diagonal). ``same_row[v][w]``: variables
    v and w can both hold on one row. Gives up (None) past :data:`MAX_PRODUCT_EDGES`.
    """
    def step(p: int, q: int) -> list[tuple[int, int]]:
        sq = succ[q]
        return [(a, b) for a in succ[p] for ok in (same_row[var[a]],) for b in sq if ok[var[b]]]

    diagonal = sorted((p, p) for p in scc)
    # first the pairs where two runs part: most growing loops close again within a few rows
    left = [MAX_PRODUCT_EDGES // 10]  # (shared by every try)
    for p, _ in diagonal:
        for x in step(p, p):
            if x[0] != x[1] and _meets(x, step, left):
                return (min(x), max(x))
    edges = 0
    pred: dict[tuple[int, int], list[tuple[int, int]]] = {x: [] for x in diagonal}
    todo = list(diagonal)
    while todo:
        x = todo.pop()
        nxt = step(*x)
        edges += len(nxt)
        if edges > MAX_PRODUCT_EDGES:
            return None
        for y in nxt:
            if y not in pred:
                pred[y] = []
                todo.append(y)
            pred[y].append(x)
    back = set(diagonal)
    todo = list(diagonal)
    while todo:
        for x in pred[todo.pop()]:
            if x not in back:
                back.add(x)
                todo.append(x)
    return min(((min(p, q), max(p, q)) for p, q in back if p != q), default=None)


def _meets(start: tuple[int, int], step, left: list[int]) -> bool:
    """Whether two runs in the states ``start`` can be in one state again (``left[0]``: steps to spend)."""
    seen = {start}
    todo = [start]
    while todo and left[0] > 0:
        for y in step(*todo.pop()):
            left[0] -= 1
            if y[0] == y[1]:
                return True
            if y not in seen:
                seen.add(y)
                todo.append(y)
    return False


# ------------------------------------------------------------------ exclusive conditions
# A condition is read as a conjunction of constraints on expressions of the current row (the
# row-local conjuncts only: the others depend on the run, and two runs may see different
# values). Two variables are exclusive when the constraints of both together cannot hold.

_ORDERS = {"<": {-1}, "<=": {-1, 0}, "=": {0}, "<>": {-1, 1}, ">": {1}, ">=": {0, 1}}
_FLIP = {"<": ">", "<=": ">=", "=": "=", "<>": "<>", ">": "<", ">=": "<="}
_NEGATE = {"<": ">=", "<=": ">", "=": "<>", "<>": "=", ">": "<=", ">=": "<"}
_MAX_CASES = 64  # OR branches expanded when deciding; beyond that, assume the rows can overlap


def exclusive(
    conds_v: list[A.Expr],
    var_v: str,
    conds_w: list[A.Expr],
    var_w: str,
    subsets: dict[str, frozenset[int]],
    var_ids: dict[str, int],
) -> bool:
    """True when no row can satisfy both lists of row-local conjuncts (False when unsure).

    Example:
        >>> from patterns.match_recognize import parse_statement
        >>> def excl(a, b):
        ...     mr = parse_statement(f"SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) "
        ...                          f"DEFINE A AS {a}, B AS {b})")
        ...     return exclusive([mr.defines[0].expr], "A", [mr.defines[1].expr], "B", {}, {"A": 0, "B": 1})
        >>> excl("A.x > 5", "B.x < 3"), excl("A.x > PREV(A.x)", "B.x <= PREV(B.x)"), excl("A.x > 1", "B.x < 3")
        (True, True, False)
        >>> excl("A.kind IN ('buy', 'sell')", "B.kind = 'hold'"), excl("A.ok", "NOT B.ok")
        (True, True)
    """
    def canon_all(conds: list[A.Expr], var: str) -> list:
        out: list = []
        for c in conds:
            out.extend(_of(c, _canon(c, var, subsets, var_ids)))
        return out

    both = canon_all(conds_v, var_v) + canon_all(conds_w, var_w)
    return not _satisfiable(both)


def _canon(e: A.Expr, var: str, subsets: dict[str, frozenset[int]], var_ids: dict[str, int]) -> Any:
    """A hashable form of a row-local expression in which the defined variable's columns are
    the current row's, so ``A.x`` in A's condition equals ``B.x`` in B's."""
    vid = var_ids.get(var, -1)

    def cur(v: str | None) -> bool:
        return v is None or v == var or (v in subsets and vid in subsets[v])

    def go(x: Any) -> Any:
        if isinstance(x, A.Column):
            return ("col", x.name) if cur(x.var) else ("other", x.var, x.name)
        if isinstance(x, A.Nav) and x.kind == "LAST" and x.offset == 0:
            return go(x.arg)
        if isinstance(x, A.Literal):
            return ("lit", type(x.value).__name__, x.value)
        if isinstance(x, A.Node):
            parts: list = [type(x).__name__]
            for name in x.__dataclass_fields__:
                if name in ("pos", "end"):
                    continue
                parts.append(go(getattr(x, name)))
            return tuple(parts)
        if isinstance(x, tuple):
            return tuple(go(y) for y in x)
        return x

    return go(e)


# constraint forms:
#   ("cmp", subject, op, value)   subject op literal value
#   ("rel", left, right, orders)  left and right compare in one of ``orders`` ({-1, 0, 1})
#   ("in", subject, values)       subject is one of values
#   ("notin", subject, values)
#   ("null", subject, is_null)
#   ("truth", expr, truthy)       expr is true (truthy=True) or not true
#   ("or", [[constraints], ...])  one of the branches holds




def _lit(key: Any) -> tuple[bool, Any]:
    if isinstance(key, tuple) and key and key[0] == "lit":
        return True, key[2]
    return False, None


def _of(e: A.Expr, key: Any, negated: bool = False) -> list:
    """The constraints a conjunct stands for (``negated``: of its negation)."""
    if isinstance(e, A.Not):
        return _of(e.operand, key[1], not negated)
    if isinstance(e, A.Logical):
        subs = list(zip(e.args, key[2]))
        if (e.op == "AND") != negated:
            return [c for x, k in subs for c in _of(x, k, negated)]
        return [("or", [_of(x, k, negated) for x, k in subs])]
    if isinstance(e, A.Compare):
        left, right = key[2], key[3]
        op = _NEGATE[e.op] if negated else e.op
        lok, lv = _lit(left)
        rok, rv = _lit(right)
        if rok and not lok:
            return [("cmp", left, op, rv)] if rv is not None else [("truth", key, negated)]
        if lok and not rok:
            return [("cmp", right, _FLIP[op], lv)] if lv is not None else [("truth", key, negated)]
        if not lok and not rok:
            if repr(left) > repr(right):
                left, right, op = right, left, _FLIP[op]
            return [("rel", left, right, frozenset(_ORDERS[op]))]
    if isinstance(e, A.IsNull):
        return [("null", key[1], e.negated == negated)]
    if isinstance(e, A.InList):
        vals = [_lit(k) for k in key[2]]
        if all(ok and v is not None for ok, v in vals):
            return [("in" if e.negated == negated else "notin", key[1], tuple(v for _, v in vals))]
    if isinstance(e, A.Between) and not e.negated and not negated:
        lok, lo = _lit(key[2])
        hok, hi = _lit(key[3])
        out: list[tuple] = [("truth", key, True)]
        if lok and lo is not None:
            out.append(("cmp", key[1], ">=", lo))
        if hok and hi is not None:
            out.append(("cmp", key[1], "<=", hi))
        return out
    if isinstance(e, A.Between) and (e.negated != negated):
        plain = (key[0],) + key[1:-1] + (False,)
        return [("truth", plain, False)]
    if isinstance(e, A.Like) and e.negated:
        plain = key[:-1] + (False,)
        return [("truth", plain, negated)]
    if isinstance(e, A.Literal) and isinstance(e.value, bool):
        return [] if e.value != negated else [("false",)]
    return [("truth", key, not negated)]


def _satisfiable(cs: list) -> bool:
    """False only when the constraints provably cannot all hold on one row."""
    ors = [c for c in cs if c[0] == "or"]
    flat = [c for c in cs if c[0] != "or"]
    if not ors:
        return _flat_satisfiable(flat)
    cases = 1
    for o in ors:
        cases *= max(len(o[1]), 1)
        if cases > _MAX_CASES:
            return True
    first, rest = ors[0], ors[1:]
    return any(_satisfiable(flat + branch + rest) for branch in first[1])


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _flat_satisfiable(cs: list) -> bool:
    if any(c[0] == "false" for c in cs):
        return False
    truth: dict[Any, bool] = {}
    rel: dict[tuple[Any, Any], frozenset[int]] = {}
    by_subject: dict[Any, list] = {}
    for c in cs:
        if c[0] == "truth":
            if truth.setdefault(c[1], c[2]) != c[2]:
                return False
        elif c[0] == "rel":
            pair = (c[1], c[2])
            got = rel.get(pair, frozenset((-1, 0, 1))) & c[3]
            if not got:
                return False
            rel[pair] = got
        else:
            by_subject.setdefault(c[1], []).append(c)
    return all(_subject_satisfiable(v) for v in by_subject.values())


def _subject_satisfiable(cs: list) -> bool:
    """Can one value satisfy every constraint on it (comparisons, IN, NULL)?"""
    nulls = {c[2] for c in cs if c[0] == "null"}
    if len(nulls) > 1:
        return False
    values = [c for c in cs if c[0] != "null"]
    if True in nulls:
        return not values  # a comparison with NULL is never true
    eqs = [c[3] for c in values if c[0] == "cmp" and c[2] == "="]
    ins = [c[2] for c in values if c[0] == "in"]
    excluded = [c[3] for c in values if c[0] == "cmp" and c[2] == "<>"] + [v for c in values if c[0] == "notin" for v in c[2]]
    bounds = [(c[2], c[3]) for c in values if c[0] == "cmp" and c[2] in ("<", "<=", ">", ">=")]
    candidates: list | None = None
    if eqs:
        candidates = [eqs[0]]
        if any(not _same(eqs[0], v) for v in eqs[1:]):
            return False
    for group in ins:
        if candidates is None:
            candidates = list(group)
        else:
            candidates = [v for v in candidates if any(_same(v, g) for g in group)]
    if candidates is not None:
        for v in candidates:
            if any(_same(v, x) for x in excluded):
                continue
            if all(_holds(v, op, b) for op, b in bounds):
                return True
        return False
    return _interval_satisfiable(bounds)


def _same(a: Any, b: Any) -> bool:
    """Could a row value equal both literals? (Python equality, as the engine compares.)"""
    try:
        return bool(a == b)
    except Exception:  # pragma: no cover - literals are numbers, strings, booleans
        return True


def _holds(v: Any, op: str, b: Any) -> bool:
    try:
        return bool({"<": v < b, "<=": v <= b, ">": v > b, ">=": v >= b}[op])
    except TypeError:
        return True  # not comparable here: unsure, so it may hold


def _interval_satisfiable(bounds: list[tuple[str, Any]]) -> bool:
    nums = [(op, b) for op, b in bounds if _num(b)]
    strs = [(op, b) for op, b in bounds if isinstance(b, str)]
    for group in (nums, strs):
        lo: Any = None
        lo_closed = True
        hi: Any = None
        hi_closed = True
        for op, b in group:
            if op in (">", ">="):
                closed = op == ">="
                if lo is None or b > lo or (b == lo and not closed):
                    lo, lo_closed = b, closed
            else:
                closed = op == "<="
                if hi is None or b < hi or (b == hi and not closed):
                    hi, hi_closed = b, closed
        if lo is not None and hi is not None:
            if lo > hi or (lo == hi and not (lo_closed and hi_closed)):
                return False
    return True

