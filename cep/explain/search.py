"""Explain a search rule: per document, why each query matched or not, clause by clause, and the presearcher's pick.

A query's verdict is the engine's: the rule's own ``SearchOperator`` percolates each document
(presearcher, then verification of candidates), and the rows it emits say which queries matched.
The clause tree beside it (Lucene Monitor's explaining match) walks the query's analysed tree
on the same analysed document (``_DocView``), leaf by leaf with the engine's leaf checks, and
says what each clause read; the presearcher verdict replays the index's own scan of the document
(the keys it found) and its candidate step.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cep.events import EventBatch, event_times, to_batch
from cep.explain.model import ExplainedRow, Explanation, Verdict
from cep.explain.rows import in_range, key_rows, range_notes, refuse_joined, stream_rows, typed_key
from cep.percolator.documents import _DocView
from cep.percolator.presearcher import Key
from cep.percolator.verify import _in_range, _phrase_windows
from cep.search_rules import SearchOperator
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
from patterns.rules import Rule

__all__ = ["explain_search", "explain_clauses"]

_SHOW = 12  # terms shown of what a clause read


def explain_search(rule: Rule, events: EventBatch | Any, key: dict[str, Any], t_from: int | None,
                   t_to: int | None, *, queries: list[str] | None = None,
                   streams: Iterable[str] | None = None) -> Explanation:
    """Replay ``events`` through the search rule and explain, per document, its queries.

    ``key`` selects documents by field values (``{}``: every document). Per document, only the
    queries that matched or that the presearcher picked are explained, plus those named in
    ``queries``. ``streams``: the named input streams, as the Engine is given them.

    Example:
        >>> from patterns.rules import parse_rules
        >>> rule = parse_rules('''rules:
        ...   - name: fruit
        ...     kind: search
        ...     from: news
        ...     queries:
        ...       - {id: pie, query: 'apple AND NOT pie'}
        ... ''').rules[0]
        >>> ex = explain_search(rule, [{"id": 1, "title": "apple pie"}], {}, None, None)
        >>> [(v.kind, v.ok) for v in ex.rows[0].verdicts]
        [('presearcher', True), ('clause', False), ('clause', True), ('clause', True)]
    """
    spec = rule.spec
    refuse_joined(rule)
    batch = stream_rows(to_batch(events), spec.stream, streams)
    key = typed_key(batch, key)
    idx, _ = key_rows(batch, list(key), key, f"rule {rule.name!r}")
    op = SearchOperator.from_rule(rule)
    perc = op.percolator
    named = set(queries or ())
    known = {q.id for q in spec.queries}
    ex = Explanation(rule.name, "search", dict(key))
    for q in named - {str(k) for k in known} - known:
        ex.notes.append(f"query {q!r} is not a query of rule {rule.name!r}")
    sub = batch.take(idx)
    if op.time_col is not None:
        ms, ok, _why = event_times(sub, op.time_col, op.time_unit, op.max_future_skew_ms, op.clock)
        times = [int(ms[j]) if ok[j] else None for j in range(len(idx))]
    else:
        times = [None] * len(idx)
    rows: list[ExplainedRow] = []
    order = {q.id: n for n, q in enumerate(spec.queries)}
    pos = 0
    matches = 0
    for j, i in enumerate(idx.tolist()):
        if pos < i:  # other documents move the watermark (a search rule keeps no other state)
            op.process(batch.take(_range(pos, i)))
        pos = i + 1
        row = ExplainedRow(j, times[j], sub.record(j))
        out = op.process(batch.take(_range(i, i + 1)))
        shown = in_range(row.ts, t_from, t_to)
        if shown:
            rows.append(row)
        if out.late:
            row.verdicts.append(Verdict("late", out.late[0]["reason"], False))
            continue
        errors = {e.get("query_id"): e["reason"] for e in out.errors}
        if None in errors:
            row.verdicts.append(Verdict("error", errors[None], False))
            continue
        matched = {m["query_id"]: m for m in out.matches}
        matches += len(matched)
        if not shown:
            continue
        doc = batch.record(i)
        view = _DocView(doc, perc._ctx)
        picked = _presearch(perc, view)
        for reg in sorted(perc.queries(), key=lambda r: order.get(r.id, len(order))):
            qid = reg.id
            if not (qid in matched or reg.slot in picked or qid in named or str(qid) in named):
                continue
            row.verdicts.append(_presearcher_verdict(reg, picked.get(reg.slot)))
            held = qid in matched
            tree = explain_clauses(reg.node, view)
            agree = tree[0].ok == held
            text = f"query {qid!r} {'matched' if held else 'did not match'}: {reg.query}"
            if qid in errors:
                text += f" ({errors[qid]})"
            if not agree:
                text += " (the clause tree says otherwise: a bug in the explainer, please report it)"
            row.verdicts.append(Verdict("clause", text, held, {"query_id": qid, "query_matched": held,
                                                               "clauses_agree": agree, "depth": 0}))
            row.verdicts.extend(tree[1:] if len(tree) > 1 else [_leaf_of_root(tree[0])])
            if held:
                row.verdicts.append(Verdict("match", f"row emitted for query {qid!r}", True, {"row": matched[qid]}))
    ex.rows = rows
    ex.outcome.append(Verdict("info", f"{_n(len(idx), 'document')}, {_n(matches, 'row')} emitted", None,
                              {"documents": len(idx), "emitted": matches}))
    ex.notes += range_notes(len(rows), len(idx), t_from, t_to)
    ex.notes.append("per document, only the queries that matched or that the presearcher picked are explained"
                    + (", and those named" if named else "; name others to see why they did not match"))
    return ex


def _range(lo: int, hi: int) -> Any:
    import numpy as np

    return np.arange(lo, hi)


def _leaf_of_root(v: Verdict) -> Verdict:
    """A query of one clause: its clause, one level down from the query's own verdict."""
    return Verdict(v.kind, "  " + v.text, v.ok, {**v.data, "depth": 1})


# ------------------------------------------------------------------ presearcher
def _presearch(perc: Any, view: _DocView) -> dict[int, tuple[str, frozenset[Key]]]:
    """The index's own candidate step on one document: slot -> (how it was picked, keys found)."""
    out: dict[int, tuple[str, frozenset[Key]]] = {}
    for seg in perc.snapshot().segments:
        hits = seg.scan(view)
        proven: set[int] = set()
        ranged: dict[int, Any] = {}
        cands = seg.candidates(hits, proven, ranged)
        names = {k: key for key, k in seg.key_ids.items()}
        found = frozenset(names[h] for h in hits if h in names)
        always = set(seg.always)
        for slot in proven:
            out[slot] = ("proven", found)
        for slot in ranged:
            out.setdefault(slot, ("ranged", found))
        for slot in cands:
            out.setdefault(slot, ("always" if slot in always else "candidate", found))
    return out


def _key_text(k: Key) -> str:
    fld, kind, text = k
    t = f'"{text}"' if " " in text else text
    if kind == "p":
        t += "*"
    return f"{fld}:{t}" if fld else t


def _presearcher_verdict(reg: Any, pick: tuple[str, frozenset[Key]] | None) -> Verdict:
    plan = reg.plan
    keys = plan.keys
    data: dict[str, Any] = {"query_id": reg.id, "plan": plan.kind,
                            "keys": sorted(_key_text(k) for k in keys) if keys is not None else None}
    if pick is None:
        want = ", ".join(sorted(_key_text(k) for k in keys or ()))
        text = (f"presearcher: not a candidate: none of the query's index terms ({want}) occurs in the document"
                if keys else "presearcher: not a candidate: the query can match nothing")
        return Verdict("presearcher", text, False, {**data, "candidate": False, "found": []})
    how, found = pick
    mine = sorted(_key_text(k) for k in (plan.all_keys & found))
    data.update(candidate=True, found=mine, how=how)
    if how == "always":
        text = "presearcher: always a candidate (the query has no term to index: ranges, field:*, *:*)"
    else:
        text = f"presearcher: picked, the document contains {', '.join(mine) or 'its keys'}"
        if how == "proven":
            text += ": those terms alone prove the match (no verification)"
        elif how == "ranged":
            text += "; its range clauses were checked against the document's numbers"
        else:
            text += "; verified on the document"
    return Verdict("presearcher", text, True, data)


# ------------------------------------------------------------------ clauses
def explain_clauses(node: Node, view: _DocView, occur: str = "query", depth: int = 1) -> list[Verdict]:
    """The clause tree of an analysed query on one document: each clause, whether it held and
    what it read, depth first (a boolean's verdict before its clauses').

    Example:
        >>> from patterns.lucene import compile_query
        >>> from cep.percolator import Percolator
        >>> view = _DocView({"title": "big red apple"}, Percolator()._ctx)
        >>> [(v.text.strip(), v.ok) for v in explain_clauses(compile_query('"big apple"'), view)]
        [('phrase "big apple" in any default field: big at [0], apple at [2]: not adjacent: does not hold', False)]
    """
    out: list[Verdict] = []
    _walk(node, view, occur, depth, out)
    return out


def _walk(node: Node, view: _DocView, occur: str, depth: int, out: list[Verdict]) -> bool:
    pad = "  " * depth
    data: dict[str, Any] = {"occur": occur, "depth": depth, "clause": str(node)}
    if isinstance(node, BoolNode):
        at = len(out)
        out.append(Verdict("clause", "", None, data))
        neg = [_walk(c, view, "must_not", depth + 1, out) for c in node.must_not]
        must = [_walk(c, view, "must", depth + 1, out) for c in node.must]
        should = [_walk(c, view, "should", depth + 1, out) for c in node.should]
        if any(neg):
            held, why = False, "a MUST_NOT clause holds"
        elif node.must:
            held = all(must)
            why = "every MUST clause holds" if held else "a MUST clause fails"
        else:
            held = any(should)
            why = "a SHOULD clause holds" if held else "no SHOULD clause holds"
        out[at] = Verdict("clause", f"{pad}{_occ(occur)}boolean {node}: {why}: {_holds(held)}", held, data)
        return held
    held, read = _leaf(node, view)
    data["read"] = read
    out.append(Verdict("clause", f"{pad}{_occ(occur)}{_describe(node)}: {read}: {_holds(held)}", held, data))
    return held


def _occ(occur: str) -> str:
    return {"must": "MUST ", "should": "SHOULD ", "must_not": "MUST_NOT "}.get(occur, "")


def _holds(held: bool) -> str:
    return "holds" if held else "does not hold"


def _where(fld: str | None) -> str:
    return f"in {fld}" if fld else "in any default field"


def _describe(node: Node) -> str:
    if isinstance(node, TermNode):
        return f"term {node.term} {_where(node.field)}"
    if isinstance(node, PhraseNode):
        slop = f"~{node.slop}" if node.slop else ""
        return f'phrase "{" ".join(node.terms)}"{slop} {_where(node.field)}'
    if isinstance(node, PrefixNode):
        return f"prefix {node.prefix}* {_where(node.field)}"
    if isinstance(node, WildcardNode):
        return f"wildcard {node.pattern} {_where(node.field)}"
    if isinstance(node, RangeNode):
        return f"{node.kind} range {node} "
    if isinstance(node, ExistsNode):
        return f"{node.field} has a value"
    return str(node)


def _terms(ts: Iterable[str]) -> str:
    got = sorted(ts)
    more = f" (+{len(got) - _SHOW} more)" if len(got) > _SHOW else ""
    return "[" + ", ".join(got[:_SHOW]) + "]" + more


def _leaf(node: Node, view: _DocView) -> tuple[bool, str]:
    """Whether a leaf clause holds on the document, and what it read there."""
    if isinstance(node, TermNode):
        ts = view.termset(node.field)
        held = node.term in ts
        return held, f"found {node.term}" if held else f"the field's terms are {_terms(ts)}"
    if isinstance(node, PhraseNode):
        return _phrase(node, view)
    if isinstance(node, PrefixNode):
        hit = [x for x in view.termset(node.field) if x.startswith(node.prefix)]
        return bool(hit), f"terms with the prefix: {_terms(hit)}"
    if isinstance(node, WildcardNode):
        full = node.matcher.fullmatch
        hit = [x for x in view.termset(node.field) if full(x)]
        return bool(hit), f"terms matching: {_terms(hit)}"
    if isinstance(node, RangeNode):
        held = _in_range(node, view)
        if node.kind == "term":
            return held, f"the field's terms are {_terms(view.termset(node.field))}"
        return held, f"the field's {node.kind} values are {view.numbers(node.field, node.kind)[:_SHOW]}"
    if isinstance(node, ExistsNode):
        held = view.exists(node.field)
        return held, "present" if held else "absent"
    if isinstance(node, MatchAllNode):
        return True, "every document"
    if isinstance(node, MatchNoneNode):
        return False, "no document"
    return False, f"unknown clause {node!r}"


def _phrase(node: PhraseNode, view: _DocView) -> tuple[bool, str]:
    """A phrase: where its terms are, value by value, and whether they stand close enough."""
    ts = view.termset(node.field)
    missing = [t for t in node.terms if t not in ts]
    if missing:
        return False, f"missing {', '.join(missing)}"
    want = set(node.terms)
    best = ""
    for value in view.positions(node.field):
        pos = {t: p for t, p in value.items() if t in want}
        if len(pos) < len(want):
            continue
        if _phrase_windows(pos, node, True):
            at = ", ".join(f"{t} at {pos[t][:_SHOW]}" for t in node.terms)
            return True, at + (": adjacent" if not node.slop else f": within slop {node.slop}")
        best = ", ".join(f"{t} at {pos[t][:_SHOW]}" for t in node.terms)
    if not best:
        return False, "its terms never occur in one value of the field"
    return False, best + (": not adjacent" if not node.slop else f": not within slop {node.slop}")


def _n(n: int, noun: str) -> str:
    """A count with its noun: ``1 document``, ``2 rows``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
