"""A search rule's state as plain data: it keeps no per-key state, only its clock and counters."""

from __future__ import annotations

from cep.search_rules import SearchOperator
from cep.state_view.model import RuleView

__all__ = ["search_view"]


def search_view(op: SearchOperator) -> RuleView:
    """What a restored :class:`~cep.search_rules.SearchOperator` holds: the watermark and its counters.

    A search rule judges each document on its own (no partial matches, no windows); its query
    index is rebuilt from the rule, so the state holds only the clock lateness is judged by.

    Example:
        >>> from patterns.rules import parse_rules
        >>> [rule] = list(parse_rules("rules: [{name: s, kind: search, from: news, query: fire}]"))
        >>> v = search_view(SearchOperator.from_rule(rule))
        >>> v.kind, v.totals, v.counts["documents"]
        ('search', {'keys': 0, 'queries': 1}, 0)
    """
    c, s = op.counts, op.stats
    view = RuleView(
        name=op.name, kind="search", watermark=op.watermark,
        counts={"read": c.read, "processed": c.processed, "late": c.late, "errors": c.errors,
                "matches": s.matches, "documents": s.documents, "candidates": s.candidates,
                "eval_errors": s.eval_errors},
        totals={"keys": 0, "queries": len(op._metadata)},
    )
    view.notes.append("a search rule keeps no per-key state: each document is matched on its own")
    if s.query_errors:
        view.counts["queries_with_errors"] = len(s.query_errors)
    return view
