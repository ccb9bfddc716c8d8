"""What a saved state holds, as plain data: per rule and key, partial matches, buffered events, open windows.

One reading path: the state is loaded by the operators' own ``restore`` (an :class:`~cep.engine.Engine`
for a durable run's checkpoint, one operator per saved bucket on Spark) and then read from the
restored operators, so what is shown is what a restart would resume from. Never a plain pickle:
the snapshot goes through the same safe loader a restart uses.

The package, one concept per module:

* ``model``: :class:`RuleView`, :class:`StateView`, the errors, value and key helpers;
* ``pattern``, ``analytics``, ``search``: one rule kind's operator read into a :class:`RuleView`;
* ``durable``: a ``cep run --state`` directory read into a :class:`StateView`;
* ``render``: the text ``cep state`` prints.

Example:
    >>> from cep import Engine
    >>> from patterns.rules import parse_rule_text
    >>> eng = Engine([parse_rule_text('''SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
    ...   MEASURES A.ts AS t0 PATTERN (A B) DEFINE A AS v = 0, B AS v = 1)''', "ab")])
    >>> _ = eng.process([{"k": "x", "ts": 5, "v": 0}])
    >>> [v] = snapshot_views(eng.rules, eng.snapshot())
    >>> v.totals["partial_matches"], v.keys[0]["key"], v.keys[0]["partial_matches"][0]["waiting_for"]
    (1, {'k': 'x'}, ['B'])
"""

from __future__ import annotations

from typing import Any, Iterable

from cep.state_view.model import (
    NotAState,
    RuleMismatch,
    RuleView,
    StateView,
    StateViewError,
    UnreadableState,
    key_text,
)

__all__ = [
    "RuleView", "StateView", "StateViewError", "NotAState", "UnreadableState", "RuleMismatch",
    "operator_view", "engine_views", "snapshot_views", "merge_views", "select", "key_text",
]


def operator_view(op: Any) -> RuleView:
    """The :class:`RuleView` of one restored operator, by its class (pattern, analytics or search)."""
    from cep.analytics import WindowOperator
    from cep.operator import PatternOperator
    from cep.search_rules import SearchOperator

    if isinstance(op, PatternOperator):
        from cep.state_view.pattern import pattern_view

        return pattern_view(op)
    if isinstance(op, WindowOperator):
        from cep.state_view.analytics import analytics_view

        return analytics_view(op)
    if isinstance(op, SearchOperator):
        from cep.state_view.search import search_view

        return search_view(op)
    raise TypeError(f"no state view for {type(op).__name__}")


def engine_views(engine: Any) -> list[RuleView]:
    """One :class:`RuleView` per rule of an :class:`~cep.engine.Engine`, in the rule file's order."""
    return [operator_view(engine.operators[r.name]) for r in engine.rules]


def snapshot_views(rules: Iterable[Any], snapshot: bytes) -> list[RuleView]:
    """The views of an engine snapshot (``Engine.snapshot()`` bytes), read by an engine of ``rules``.

    Raises :class:`UnreadableState` when the snapshot is of another version, crafted or does not
    fit the rules (a rule whose saved state its operator refuses).
    """
    from cep.engine import Engine
    from cep.operator import StateVersionError
    from cep.safe_pickle import UnsafeState
    from patterns.rules import RuleSet

    # a RuleSet keeps its tables: the rules that join them need them to be built
    engine = Engine(rules if isinstance(rules, RuleSet) else list(rules))
    try:
        engine.restore(snapshot)
    except (StateVersionError, UnsafeState) as e:
        raise UnreadableState(f"the engine snapshot cannot be read: {e}") from None
    return engine_views(engine)


def merge_views(views: list[RuleView]) -> RuleView:
    """One rule's views of several parts (Spark's key buckets) as one: keys side by side, counts summed.

    The watermark is the largest of the parts (each bucket's operator only saw its keys); a host
    that knows the query's watermark (Spark's offset log) sets it afterwards.
    """
    if not views:
        raise ValueError("no views to merge")
    first = views[0]
    out = RuleView(first.name, first.kind)
    marks = [v.watermark for v in views if v.watermark is not None]
    out.watermark = max(marks) if marks else None
    for v in views:
        for k, n in v.counts.items():
            out.counts[k] = out.counts.get(k, 0) + n
        for k, n in v.totals.items():
            if k == "within_ms":
                out.totals[k] = n
            elif k == "queries":
                out.totals[k] = max(out.totals.get(k, 0), n)
            else:
                out.totals[k] = out.totals.get(k, 0) + n
        out.keys.extend(v.keys)
        out.sketches.extend(v.sketches)
        out.notes.extend(n for n in v.notes if n not in out.notes)
    out.keys.sort(key=lambda e: key_text(e["key"]))
    return out


def select(view: StateView, rule: str | None = None, key: str | None = None, limit: int | None = None) -> StateView:
    """The part of ``view`` that ``--rule``, ``--key`` and ``--limit`` ask for.

    ``key`` is compared with :func:`key_text` of each key (``AAPL``; ``a=1,b=x`` for several
    columns). ``limit`` caps the keys shown per rule and the partial matches, buffered events and
    windows shown per key; what is left out is counted in a note. An unknown rule is a
    :class:`RuleMismatch`.
    """
    rules = view.rules
    if rule is not None:
        rules = [r for r in rules if r.name == rule]
        if not rules:
            names = ", ".join(r.name for r in view.rules) or "none"
            raise RuleMismatch(f"no rule {rule!r} in the state; its rules are: {names}")
    out = []
    for r in rules:
        keys = r.keys
        if key is not None:
            keys = [k for k in keys if key_text(k["key"]) == key]
        notes = list(r.notes)
        if key is not None and not keys and r.kind != "search":
            notes.append(f"no state for key {key!r}")
        if limit is not None and limit > 0:
            if len(keys) > limit:
                more = len(keys) - limit
                notes.append(f"{more:,} more {'key' if more == 1 else 'keys'} with state not shown (--limit {limit})")
                keys = keys[:limit]
            keys = [_cut(k, limit, notes) for k in keys]
        out.append(RuleView(r.name, r.kind, r.watermark, r.counts, r.totals, keys, r.sketches, notes))
    return StateView(view.source, out, view.notes)


def _cut(entry: dict[str, Any], limit: int, notes: list[str]) -> dict[str, Any]:
    entry = dict(entry)
    for field in ("partial_matches", "buffered", "windows"):
        items = entry.get(field)
        if items and len(items) > limit:
            entry[field] = items[:limit]
            entry[f"{field}_not_shown"] = len(items) - limit
            note = f"some keys hold more {field.replace('_', ' ')} than shown (--limit {limit})"
            if note not in notes:
                notes.append(note)
    return entry
