"""Highlighting: the spans of a document that a matching query's positive parts match."""

from __future__ import annotations

from cep.percolator.documents import Span, _DocView
from cep.percolator.verify import _evaluate, _phrase_windows, _range_hits
from patterns.lucene import (
    BoolNode,
    Node,
    PhraseNode,
    PrefixNode,
    RangeNode,
    TermNode,
    WildcardNode,
)

__all__ = ["_highlight"]


def _spans(node: Node, view: _DocView) -> list[Span]:
    """Spans of the positive parts of ``node`` that match (for highlighting)."""
    t = type(node)
    if t is BoolNode:
        out: list[Span] = []
        for c in node.must + node.should:  # type: ignore[union-attr]
            if _evaluate(c, view):
                out.extend(_spans(c, view))
        return out
    if t is TermNode or t is PrefixNode or t is WildcardNode:
        if t is TermNode:
            term = node.term  # type: ignore[union-attr]

            def test(x: str) -> bool:
                return x == term
        elif t is PrefixNode:
            pre = node.prefix  # type: ignore[union-attr]

            def test(x: str) -> bool:
                return x.startswith(pre)
        else:
            rx = node.matcher  # type: ignore[union-attr]

            def test(x: str) -> bool:
                return rx.fullmatch(x) is not None
        return [(label, tok.start, tok.end)
                for label, toks in view.tokens(node.field)  # type: ignore[union-attr]
                for tok in toks if test(tok.term)]
    if t is PhraseNode:
        ph: PhraseNode = node  # type: ignore[assignment]
        out = []
        for (label, toks), pos in zip(view.tokens(ph.field), view.positions(ph.field)):
            by_pos = {tok.position: tok for tok in toks}
            for window in _phrase_windows(pos, ph, False):
                first, last = by_pos[min(window)], by_pos[max(window)]
                out.append((label, first.start, last.end))
        return out
    if t is RangeNode:
        return [s for s in _range_hits(node, view, False) if s[2] > s[1]]  # type: ignore[arg-type]
    return []


def _highlight(node: Node, view: _DocView) -> tuple[Span, ...]:
    return tuple(sorted(set(_spans(node, view))))
