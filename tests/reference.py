"""A brute-force MATCH_RECOGNIZE matcher: backtracking over the pattern, the standard's preference.

It shares no code with the engine's automaton: it walks the pattern AST with generators that yield
every way to match in preference order (greedy quantifiers try more repetitions first, reluctant
ones fewer; alternatives left to right; PERMUTE in lexicographic order), takes the first complete
match from each start row, and applies the AFTER MATCH SKIP rule. Conditions are Python callables
``cond(var, i, assignment) -> bool`` written by each test independently of the engine's evaluator.
"""

from __future__ import annotations

import itertools
from typing import Callable, Iterator

from patterns import ast as A

Assignment = tuple  # ((row index, var name, excluded), ...)


def _gen(p: A.Pattern, i: int, asg: Assignment, ctx) -> Iterator[tuple[int, Assignment]]:
    n, cond, ok_time = ctx
    if isinstance(p, A.PVar):
        if i < n and ok_time(asg, i):
            new = asg + ((i, p.name, ctx_excl[-1]),)
            if cond(p.name, i, new):
                yield i + 1, new
        return
    if isinstance(p, A.PSeq):
        def seq(k: int, j: int, a: Assignment):
            if k == len(p.items):
                yield j, a
                return
            for j2, a2 in _gen(p.items[k], j, a, ctx):
                yield from seq(k + 1, j2, a2)
        yield from seq(0, i, asg)
        return
    if isinstance(p, A.PAlt):
        for o in p.options:
            yield from _gen(o, i, asg, ctx)
        return
    if isinstance(p, A.PPermute):
        for perm in itertools.permutations(p.items):
            yield from _gen(A.PSeq(tuple(perm)), i, asg, ctx)
        return
    if isinstance(p, A.PExclude):
        ctx_excl.append(True)
        try:
            items = list(_gen(p.item, i, asg, ctx))
        finally:
            ctx_excl.pop()
        yield from items
        return
    if isinstance(p, A.PQuant):
        def rep(count: int, j: int, a: Assignment):
            if count >= p.low and not p.greedy:
                yield j, a
            if p.high is None or count < p.high:
                for j2, a2 in _gen(p.item, j, a, ctx):
                    if j2 == j and count >= p.low:
                        continue  # an empty iteration ends the loop
                    yield from rep(count + 1, j2, a2)
            if count >= p.low and p.greedy:
                yield j, a
        yield from rep(0, i, asg)
        return
    raise TypeError(p)


ctx_excl: list[bool] = [False]


def reference_matches(
    n: int,
    pattern: A.Pattern,
    cond: Callable[[str, int, Assignment], bool],
    skip: str = "PAST_LAST_ROW",
    skip_var: set[str] | None = None,
    ts: list[int] | None = None,
    within: int | None = None,
) -> list[Assignment]:
    """Every match over rows 0..n-1 of one partition, as assignments of rows to variables."""

    def ok_time(asg: Assignment, i: int) -> bool:
        if within is None or not asg:
            return True
        assert ts is not None
        return ts[i] - ts[asg[0][0]] < within

    ctx = (n, cond, ok_time)
    out: list[Assignment] = []
    s = 0
    while s < n:
        m = next(_gen(pattern, s, (), ctx), None)
        if m is None:
            s += 1
            continue
        end, asg = m
        out.append(asg)
        if skip == "PAST_LAST_ROW":
            s = end
        elif skip == "TO_NEXT_ROW":
            s = asg[0][0] + 1
        else:
            rows = [i for i, v, _ in asg if v in (skip_var or set())]
            if not rows:
                s = asg[0][0] + 1
            else:
                t = rows[0] if skip == "TO_FIRST" else rows[-1]
                s = t if t > asg[0][0] else asg[0][0] + 1
    return out
