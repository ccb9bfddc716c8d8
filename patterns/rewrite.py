"""Exact compile-time rewrites of DEFINE conditions and WITHIN that let more rules take the DFA paths.

A condition that reads the match (``LAST(R.close)`` in ``D``'s condition) makes a rule keep each
run's matched rows; one that reads only the current row and ``PREV`` is row-local: evaluated
column-wise over a batch, and the rule's runs are plain automaton states (the lazy DFA of
:mod:`cep.nfa`, all keys at once in :mod:`cep.batch_dfa`). The passes here turn the first kind into
the second where, for every possible match, both give the same value. Each is documented in
``docs/semantics.md`` ("Compile-time rewrites") and proven by differential tests
(``tests/cep/test_rewrite.py``) against the unrewritten automaton and the brute-force matcher.

The passes read the compiled program (:mod:`patterns.compiler`) and return plain data; the runtime
decides whether to use them (``cep.nfa.REWRITE_CONDITIONS``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from patterns import ast as A
from patterns.compiler import OP_IGNORE, OP_VAR, CompiledPattern, _closure_pcs

__all__ = ["rewrite_defines", "predecessors", "fixed_length", "last_as_prev"]


def predecessors(cp: CompiledPattern) -> dict[int, set[int]]:
    """For each variable, the variables of the rows that can come just before one of its rows in
    a match (-1: the row can be the match's first; -2: a row skipped by ``ANY``/``NOT``)."""
    ins = cp.program.instructions
    out: dict[int, set[int]] = {}
    for pc in _closure_pcs(ins, 0):
        if ins[pc][0] == OP_VAR:
            out.setdefault(ins[pc][1], set()).add(-1)
    for x in ins:
        if x[0] == OP_VAR:
            before, nxt = x[1], x[2]
        elif x[0] == OP_IGNORE:
            before, nxt = -2, x[2]
        else:
            continue
        for q in _closure_pcs(ins, nxt):
            if ins[q][0] == OP_VAR:
                out.setdefault(ins[q][1], set()).add(before)
    return out


def _map_children(e: A.Expr, fn: Any) -> A.Expr:
    """``e`` with ``fn`` applied to each of its direct sub-expressions."""
    changes = {}
    for f in dataclasses.fields(e):
        if f.name in ("pos", "end"):
            continue
        v = getattr(e, f.name)
        if isinstance(v, A.Expr):
            nv = fn(v)
        elif isinstance(v, tuple):
            nv = tuple(tuple(fn(y) if isinstance(y, A.Expr) else y for y in x) if isinstance(x, tuple)
                       else fn(x) if isinstance(x, A.Expr) else x for x in v)
        else:
            continue
        if nv != v:
            changes[f.name] = nv
    return dataclasses.replace(e, **changes) if changes else e


def last_as_prev(expr: A.Expr, var: str, vid: int, preds: set[int], cp: CompiledPattern) -> A.Expr:
    """``LAST(X.col)`` (and ``X.col``, which means the same) in variable ``var``'s condition as
    ``PREV(var.col)`` where exact.

    While ``var``'s row is being tested, ``LAST(X.col)`` (running semantics, offset 0) is the value
    at the last row mapped to ``X`` so far. When every row that can come just before a ``var`` row
    in a match is an ``X`` row (``preds``: never the match's first row, never a skipped row), that
    last ``X`` row is the row before: the match's rows are consecutive rows of the partition, so
    it is ``PREV(var.col)``, which a batch evaluates column-wise.
    """
    members: dict[str, frozenset[int]] = {x: frozenset([i]) for x, i in cp.var_ids.items()}
    members.update(cp.subsets)

    def before(x: str | None) -> bool:
        # X is always the row just before; X holding var itself would make LAST the current row
        return (x is not None and x != var and x in members and vid not in members[x]
                and bool(preds) and preds <= members[x])

    def on_var(arg: A.Expr) -> A.Expr:
        """``arg`` with every column read at ``var``'s row."""
        if isinstance(arg, A.Column):
            return A.Column(var, arg.name, pos=arg.pos, end=arg.end)
        return _map_children(arg, on_var)

    def rw(x: A.Expr) -> A.Expr:
        if isinstance(x, A.Column):
            return A.Nav("PREV", on_var(x), 1, pos=x.pos, end=x.end) if before(x.var) else x
        if isinstance(x, A.Nav):
            if x.kind != "LAST" or x.offset != 0 or x.semantics != "RUNNING":
                return x  # PREV/NEXT/FIRST of another variable's row: its own meaning, kept
            inner = list(A.walk_expr(x.arg))
            cols = [y for y in inner if isinstance(y, A.Column)]
            # arithmetic over one variable's columns only: anything else keeps its own meaning
            if (cols and all(isinstance(y, (A.Column, A.Literal, A.Binary, A.Unary)) for y in inner)
                    and len({y.var for y in cols}) == 1 and before(cols[0].var)):
                return A.Nav("PREV", on_var(x.arg), 1, pos=x.pos, end=x.end)
            return x
        if isinstance(x, (A.Agg, A.Classifier, A.MatchNumber)):
            return x
        return _map_children(x, rw)

    return rw(expr)


def rewrite_defines(cp: CompiledPattern) -> dict[int, A.Expr]:
    """The DEFINE conditions of ``cp`` after the exact rewrites, by variable id.

    Example:
        >>> from patterns.compiler import compile_statement
        >>> from patterns.match_recognize import parse_statement
        >>> cp = compile_statement(parse_statement("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts "
        ...     "PATTERN (R{2} D) DEFINE R AS R.x > PREV(R.x), D AS D.x < LAST(R.x) * 0.9)"))
        >>> rewrite_defines(cp)[cp.var_ids["D"]].right.left
        Nav(kind='PREV', arg=Column(var='D', name='x'), offset=1, semantics='RUNNING')
    """
    preds = predecessors(cp)
    out = {}
    for vid, expr in cp.defines.items():
        name = cp.program.var_names[vid]
        p = preds.get(vid, set())
        out[vid] = last_as_prev(expr, name, vid, p, cp)
    return out


def fixed_length(p: A.Pattern) -> int | None:
    """The number of rows every match of pattern ``p`` has, or None when it can vary (or when ``p``
    holds ``ANY``, ``NOT`` or anchors, whose matches this does not model).

    Example:
        >>> fixed_length(A.PSeq((A.PQuant(A.PVar("R"), 3, 3), A.PVar("D")))), fixed_length(A.PQuant(A.PVar("R"), 1, None))
        (4, None)
    """
    if isinstance(p, A.PVar):
        return 1
    if isinstance(p, (A.PSeq, A.PPermute)):
        total = 0
        for item in p.items:
            n = fixed_length(item)
            if n is None:
                return None
            total += n
        return total
    if isinstance(p, A.PAlt):
        lens = {fixed_length(o) for o in p.options}
        return lens.pop() if len(lens) == 1 else None
    if isinstance(p, A.PQuant):
        n = fixed_length(p.item)
        if n is None or p.high is None or (p.high != p.low and n != 0):
            return None
        return n * p.low
    if isinstance(p, A.PExclude):
        return fixed_length(p.item)
    return None
