"""Verification: a query's exact evaluation on a document (the reference semantics, and the
``NoFiltering`` baseline), and the checks left to a candidate the presearcher picked."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Union

from cep.percolator.documents import (
    _MISSING,
    Span,
    _as_date_ms,
    _as_number,
    _DocView,
    _lookup,
)
from cep.percolator.presearcher import Key, QueryPlan
from patterns.lucene import (
    BoolNode,
    ExistsNode,
    MatchAllNode,
    MatchNoneNode,
    Node,
    PhraseNode,
    PrefixNode,
    RangeNode,
    TermNode,
    WildcardNode,
)

__all__ = ["_doc_check", "_evaluate", "_key_check", "_keys_decide", "_phrase_windows",
           "_range_checks", "_range_hits", "_second_keys"]


def _phrase_windows(
    pos: Mapping[str, list[int]], node: PhraseNode, first_only: bool
) -> list[tuple[int, ...]]:
    """Doc positions (one per phrase term) where the phrase matches, Lucene's way.

    Exact phrases need every term at its relative position. Sloppy ones (``~N``) need
    ``max(p_i - o_i) - min(p_i - o_i) <= N`` over chosen positions ``p_i`` (distinct doc
    positions) and query offsets ``o_i``, as Lucene's SloppyPhraseMatcher measures it.
    """
    lists = []
    for t in node.terms:
        got = pos.get(t)
        if not got:
            return []
        lists.append(got)
    offs = node.positions
    out: list[tuple[int, ...]] = []
    if len(lists) == 2 and node.slop:
        # Two terms: some p0, p1 (distinct) with |(p0 - o0) - (p1 - o1)| <= slop.
        first, second = lists
        delta = offs[1] - offs[0]
        slop = node.slop
        for a in first:
            target = a + delta
            j = bisect.bisect_left(second, target - slop)
            while j < len(second) and second[j] <= target + slop:
                if second[j] != a:
                    out.append((a, second[j]))
                    if first_only:
                        return out
                j += 1
        return out
    if node.slop == 0:
        sets = [set(x) for x in lists]
        for p in lists[0]:
            base = p - offs[0]
            if all(base + offs[i] in sets[i] for i in range(1, len(lists))):
                out.append(tuple(base + o for o in offs))
                if first_only:
                    break
        return out
    values = [[p - o for p in lst] for lst, o in zip(lists, offs)]
    starts = sorted({v for vs in values for v in vs})
    slop = node.slop
    k = len(values)

    def pick(i: int, lo: int, used: list[int]) -> list[int] | None:
        if i == k:
            return used
        vs = values[i]
        j = bisect.bisect_left(vs, lo)
        hi = lo + slop
        while j < len(vs) and vs[j] <= hi:
            p = vs[j] + offs[i]
            if p not in used:
                got = pick(i + 1, lo, used + [p])
                if got is not None:
                    return got
            j += 1
        return None

    for lo in starts:
        got = pick(0, lo, [])
        if got is not None:
            out.append(tuple(got))
            if first_only:
                break
    return out


def _evaluate(node: Node, view: _DocView) -> bool:
    """Does the document match ``node``? The reference semantics."""
    t = type(node)
    if t is TermNode:
        return node.term in view.termset(node.field)  # type: ignore[union-attr]
    if t is BoolNode:
        b: BoolNode = node  # type: ignore[assignment]
        for c in b.must_not:
            if _evaluate(c, view):
                return False
        if b.must:
            return all(_evaluate(c, view) for c in b.must)
        return any(_evaluate(c, view) for c in b.should)
    if t is PhraseNode:
        ph: PhraseNode = node  # type: ignore[assignment]
        one = view.single_terms(ph.field)
        if one is not None:
            # one value under plain analysis: positions of the phrase's terms are their
            # indexes in the term list (no positions table for the whole field)
            want = frozenset(ph.terms)
            pos: dict[str, list[int]] = {}
            for i, x in enumerate(one):
                if x in want:
                    got = pos.get(x)
                    if got is None:
                        pos[x] = [i]
                    else:
                        got.append(i)
            return len(pos) == len(want) and bool(_phrase_windows(pos, ph, True))
        ts = view.termset(ph.field)
        if not all(x in ts for x in ph.terms):
            return False
        return any(_phrase_windows(p, ph, True) for p in view.positions(ph.field))
    if t is PrefixNode:
        pre = node.prefix  # type: ignore[union-attr]
        return any(x.startswith(pre) for x in view.termset(node.field))  # type: ignore[union-attr]
    if t is WildcardNode:
        # term by term in linear time: a backtracking regular expression over the joined text
        # took minutes for 'a*a*a*...c' against one long token
        full = node.matcher.fullmatch  # type: ignore[union-attr]
        return any(full(x) for x in view.termset(node.field))  # type: ignore[union-attr]
    if t is RangeNode:
        return _in_range(node, view)  # type: ignore[arg-type]
    if t is ExistsNode:
        return view.exists(node.field)  # type: ignore[union-attr]
    if t is MatchAllNode:
        return True
    if t is MatchNoneNode:
        return False
    raise TypeError(f"unknown query node {node!r}")  # pragma: no cover


def _in_range(node: RangeNode, view: _DocView) -> bool:
    if node.kind == "term":
        return bool(_range_hits(node, view, first_only=True))
    contains = node.contains
    return any(contains(x) for x in view.numbers(node.field, node.kind))


def _range_hits(node: RangeNode, view: _DocView, first_only: bool) -> list[Span]:
    """Spans (or one marker) of the values of ``node.field`` inside the range."""
    out: list[Span] = []
    if node.kind == "term":
        for label, toks in view.tokens(node.field):
            for tok in toks:
                if node.contains(tok.term):
                    out.append((label, tok.start, tok.end))
                    if first_only:
                        return out
        return out
    convert = _as_number if node.kind == "number" else _as_date_ms
    fld = node.field
    names = view.default_fields() if fld is None else [fld]
    for name in names:
        v = _lookup(view.doc, name)
        items = list(enumerate(v)) if isinstance(v, list) else [(None, v)]
        for i, x in items:
            if x is None or x is _MISSING:
                continue
            num = convert(x)
            if num is not None and node.contains(num):
                label = name if i is None else f"{name}[{i}]"
                out.append((label, 0, len(x)) if isinstance(x, str) else (label, 0, 0))
                if first_only:
                    return out
    return out


def _second_keys(plan: QueryPlan) -> frozenset[Key] | None:
    """Keys one of which a candidate must also hold, besides one of ``plan.keys``: the most
    selective required key not among them, else the smallest group they do not satisfy."""
    first = plan.keys or frozenset()
    for k in plan.required:
        if k not in first:
            return frozenset((k,))
    groups = [g for g in plan.groups if not first <= g]
    return min(groups, key=len) if groups else None


def _keys_decide(plan: QueryPlan, second: frozenset[Key] | None) -> bool:
    """Whether a key of ``plan.keys`` (and one of ``second``, if any) together satisfy every
    key condition of a flat plan, so that at most its ranges are left to check."""
    if plan.kind != "flat" or plan.forbidden:
        return False
    first = plan.keys or frozenset()
    one = first if len(first) == 1 else None
    for k in plan.required:
        if frozenset((k,)) not in (one, second):
            return False
    return all(first <= g or (second is not None and second <= g) for g in plan.groups)


_RangeCheck = tuple[Union[str, None], str, Any, bool, Any, bool]


def _range_checks(ranges: tuple[RangeNode, ...]) -> tuple[_RangeCheck, ...]:
    """Numeric / date ranges as ``(field, kind, lower, inclusive, upper, inclusive)``."""
    return tuple(
        (r.field, r.kind,
         -math.inf if r.lower is None else r.lower, r.include_lower or r.lower is None,
         math.inf if r.upper is None else r.upper, r.include_upper or r.upper is None)
        for r in ranges
    )


def _ranges_hold(checks: tuple[_RangeCheck, ...], view: _DocView) -> bool:
    """Every range holds some value of its field (what ``RangeNode.contains`` decides)."""
    for fld, kind, lo, lo_in, hi, hi_in in checks:
        for x in view.numbers(fld, kind):
            if (x > lo or (lo_in and x == lo)) and (x < hi or (hi_in and x == hi)):
                break
        else:
            return False
    return True


# The checks below are partials of module functions, not closures, so that a built index can
# be saved (pickled) with them; a partial calls as fast as a closure.


def _keys_hold(req: frozenset[int], forbid: frozenset[int], hits: set[int]) -> bool:
    return req <= hits and forbid.isdisjoint(hits)


def _keys_and_groups_hold(req: frozenset[int], forbid: frozenset[int],
                          groups: tuple[frozenset[int], ...], hits: set[int]) -> bool:
    return (req <= hits and forbid.isdisjoint(hits)
            and not any(g.isdisjoint(hits) for g in groups))


def _key_check(
    req: frozenset[int], groups: list[frozenset[int]], forbid: frozenset[int]
) -> Callable[[set[int]], bool] | None:
    """A function of the document's key ids: all of ``req``, one of each group, no ``forbid``.

    Example:
        >>> check = _key_check(frozenset({1}), [frozenset({2, 3})], frozenset({4}))
        >>> check({1, 3}), check({1}), check({1, 2, 4})
        (True, False, False)
    """
    if not groups and not forbid:
        return req.issubset if req else None
    if not groups:
        return partial(_keys_hold, req, forbid)
    return partial(_keys_and_groups_hold, req, forbid, tuple(groups))


def _one_range_holds(contains: Callable[[Any], bool], fld: str | None, kind: str,
                     view: _DocView) -> bool:
    return any(map(contains, view.numbers(fld, kind)))


def _ranges_all_hold(ranges: tuple[RangeNode, ...], view: _DocView) -> bool:
    return all(_in_range(r, view) for r in ranges)


def _node_holds(node: Node, view: _DocView) -> bool:
    return _evaluate(node, view)  # looked up per call: tests may patch it


def _doc_check(node: Node, plan: QueryPlan) -> Callable[[_DocView], bool] | None:
    """What is left to check on the document once the keys passed (None: nothing)."""
    if plan.kind == "flat":
        if not plan.ranges:
            return None
        if len(plan.ranges) == 1:
            r = plan.ranges[0]
            return partial(_one_range_holds, r.contains, r.field, r.kind)
        return partial(_ranges_all_hold, plan.ranges)
    return partial(_node_holds, node)
