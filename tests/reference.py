"""A brute-force MATCH_RECOGNIZE matcher: backtracking over the pattern, the standard's preference.

It shares no code with the engine's automaton: it walks the pattern AST with generators that yield
every way to match in preference order (greedy quantifiers try more repetitions first, reluctant
ones fewer; alternatives left to right; PERMUTE in lexicographic order), takes the first complete
match from each start row, and applies the AFTER MATCH SKIP rule. Conditions are Python callables
``cond(var, i, assignment) -> bool`` written by each test independently of the engine's evaluator;
they see the whole partition, so ``NEXT`` in DEFINE is just a look at row ``i + k``.

Anchors: ``^`` holds before row 0, ``$`` after row n - 1 (the end of the bounded input). With
``WITHIN``, a match that ends at ``$`` also needs the input to end (``end_time``, the watermark of
the last batch) before its start time plus the interval: that is when the engine ends partial
matches, the ones waiting for ``$`` included. :func:`reference_rows` adds Trino's unmatched rows.
"""

from __future__ import annotations

import itertools
from typing import Callable, Iterator

from patterns import ast as A

Assignment = tuple  # ((row index, var name, excluded), ...)


def _gen(p: A.Pattern, i: int, asg: Assignment, ctx) -> Iterator[tuple[int, Assignment]]:
    n, cond, ok_time, ok_end = ctx[:4]
    if isinstance(p, A.PAnchor):
        if (p.kind == "^" and i == 0) or (p.kind == "$" and i == n and ok_end(asg)):
            yield i, asg
        return
    if isinstance(p, A.PVar):
        if len(ctx) > 4 and ctx[4].partial:
            # partial mode: rows run out at n; a run that reaches n waiting for this variable is
            # a partial match, marked by a (-1, var) entry; what follows it is taken as done
            if i == n:
                yield n + 1, asg + ((-1, p.name, False),)
                return
            if i == n + 1:
                yield i, asg
                return
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
            item = p.items[k]
            if isinstance(item, A.PNot):
                gen = _absent(item, j, a, ctx, trailing=k == len(p.items) - 1)
            else:
                gen = _gen(item, j, a, ctx)
            for j2, a2 in gen:
                yield from seq(k + 1, j2, a2)
        yield from seq(0, i, asg)
        return
    if isinstance(p, A.PAny):
        # any rows (excluded, as the hidden variable), then a row of one of the variables
        take = A.PAlt(tuple(A.PVar(v) for v in p.vars)) if len(p.vars) > 1 else A.PVar(p.vars[0])
        j, a = i, asg
        while True:
            yield from _gen(take, j, a, ctx)
            if j >= n or not ok_time(a, j):
                return
            a = a + ((j, "#skipped", True),)
            j += 1
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


class Absence:
    """What NOT needs beyond rows and conditions: event times, WITHIN, every row of the partition."""

    def __init__(self, ts: list[int] | None, within: int | None, n_all: int, partial: bool = False):
        self.ts = ts
        self.within = within
        self.n_all = n_all
        self.partial = partial


def _absent(p: A.PNot, i: int, asg: Assignment, ctx, trailing: bool) -> Iterator[tuple[int, Assignment]]:
    """``NOT B``: between elements, rows that are not B are skipped (excluded rows, fewest first);
    at the end, no B row before the deadline (the first row's time + WITHIN, or the end of input)."""
    n, cond, ok_time = ctx[:3]
    info: Absence = ctx[4]

    def killed(j: int, a: Assignment) -> bool:
        return any(cond(v, j, a + ((j, v, False),)) for v in p.vars)

    if trailing:
        if i == n + 1:  # partial mode: the run already waits for an earlier variable
            yield i, asg
            return
        assert info.ts is not None and info.within is not None
        deadline = info.ts[asg[0][0]] + info.within
        for j in range(i, info.n_all):
            if info.ts[j] >= deadline:
                break
            if killed(j, asg):
                return
        yield i, asg
        return
    j, a = i, asg
    while True:
        yield j, a
        if j >= n or not ok_time(a, j) or killed(j, a):
            return
        a = a + ((j, p.vars[0], True),)
        j += 1


def reference_matches(
    n: int,
    pattern: A.Pattern,
    cond: Callable[[str, int, Assignment], bool],
    skip: str = "PAST_LAST_ROW",
    skip_var: set[str] | None = None,
    ts: list[int] | None = None,
    within: int | None = None,
    end_time: int | None = None,
) -> list[Assignment]:
    """Every match over rows 0..n-1 of one partition, as assignments of rows to variables."""
    rows = reference_rows(n, pattern, cond, skip, skip_var, ts, within, end_time)
    return [x for kind, x in rows if kind == "match"]  # type: ignore[misc]


def reference_rows(
    n: int,
    pattern: A.Pattern,
    cond: Callable[[str, int, Assignment], bool],
    skip: str = "PAST_LAST_ROW",
    skip_var: set[str] | None = None,
    ts: list[int] | None = None,
    within: int | None = None,
    end_time: int | None = None,
    unmatched: bool = False,
) -> list[tuple[str, Assignment | int]]:
    """The output of one partition in Trino's order: ``("match", assignment)`` per match and,
    with ``unmatched`` (ALL ROWS PER MATCH WITH UNMATCHED ROWS), ``("unmatched", row)`` for each
    row that no match includes, where the search tried it as a start."""

    def ok_time(asg: Assignment, i: int) -> bool:
        if within is None or not asg:
            return True
        assert ts is not None
        return ts[i] - ts[asg[0][0]] < within

    def ok_end(asg: Assignment) -> bool:
        if within is None or end_time is None or not asg:
            return True
        assert ts is not None
        return ts[asg[0][0]] + within > end_time

    ctx = (n, cond, ok_time, ok_end, Absence(ts, within, n))
    out: list[tuple[str, Assignment | int]] = []
    covered = -1  # the last row of the matches so far
    s = 0
    while s < n:
        m = next(_gen(pattern, s, (), ctx), None)
        if m is None:
            if unmatched and s > covered:
                out.append(("unmatched", s))
            s += 1
            continue
        end, asg = m
        out.append(("match", asg))
        covered = max(covered, end - 1)
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


def reference_outcomes(
    n: int,
    pattern: A.Pattern,
    cond: Callable[[str, int, Assignment], bool],
    ts: list[int],
    within: int,
    skip: str = "PAST_LAST_ROW",
) -> list[tuple]:
    """Matches and timed-out partial matches over rows 0..n-1 of one partition, in start order.

    ``("match", assignment)`` as :func:`reference_matches`; ``("timeout", assignment, waiting)``
    for a start row with no match whose partial match was alive when WITHIN ran out (or at the end
    of the rows): the most preferred run that took every row of the partition before the deadline,
    and the variables the runs with that same assignment waited for, in preference order.
    """

    def ok_time(asg: Assignment, i: int) -> bool:
        return not asg or ts[i] - ts[asg[0][0]] < within

    full = (n, cond, ok_time, lambda asg: True, Absence(ts, within, n))
    out: list[tuple] = []
    s = 0
    while s < n:
        m = next(_gen(pattern, s, (), full), None)
        if m is not None:
            end, asg = m
            out.append(("match", asg))
            if skip == "PAST_LAST_ROW":
                s = end
            elif skip == "TO_NEXT_ROW":
                s = asg[0][0] + 1
            else:
                raise ValueError(skip)
            continue
        limit = s
        while limit < n and ts[limit] - ts[s] < within:
            limit += 1
        part = (limit, cond, ok_time, lambda asg: True, Absence(ts, within, n, partial=True))
        first = None
        waiting: list[str] = []
        for _, asg in _gen(pattern, s, (), part):
            if not any(r == -1 for r, _, _ in asg):
                continue  # a run completed inside the window would have been a match above
            rows = tuple(x for x in asg if x[0] != -1)
            if not rows:
                continue  # the start row itself was not taken: nothing started here
            var = next(v for r, v, _ in asg if r == -1)
            if first is None:
                first = rows
            if rows == first and var not in waiting:
                waiting.append(var)
        if first is not None:
            out.append(("timeout", first, tuple(waiting)))
        s += 1
    return out


def reference_all_matches(
    n: int,
    pattern: A.Pattern,
    cond: Callable[[str, int, Assignment], bool],
    ts: list[int],
    within: int,
) -> list[Assignment]:
    """AFTER MATCH NO SKIP: every complete match from every start row (each way of matching once)."""

    def ok_time(asg: Assignment, i: int) -> bool:
        return not asg or ts[i] - ts[asg[0][0]] < within

    ctx = (n, cond, ok_time, lambda asg: True, Absence(ts, within, n))
    out: list[Assignment] = []
    for s in range(n):
        seen = set()
        for _, asg in _gen(pattern, s, (), ctx):
            if asg and asg not in seen:
                seen.add(asg)
                out.append(asg)
    return out
