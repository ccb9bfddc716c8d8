"""Replaying events through an operator in cut batches, with a snapshot and restore in the middle."""

from __future__ import annotations

from typing import Any, Callable, Sequence


def replay(make: Callable[[], Any], events: Sequence[dict], cuts: Sequence[int],
           restore_at: int | None = None) -> tuple[list[dict], Any]:
    """Feed ``events`` to the operator ``make()`` builds, in batches cut at ``cuts``.

    After batch number ``restore_at`` the operator's snapshot is restored into a fresh
    ``make()``, so every test that uses this crosses a restore at a batch boundary it chose.
    Returns the matches of every batch and of ``finish()``, and the last operator (for its
    counters)."""
    op = make()
    rows: list[dict] = []
    bounds = [0, *cuts, len(events)]
    for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        rows += op.process(events[lo:hi]).matches
        if b == restore_at:
            blob = op.snapshot()
            op = make()
            op.restore(blob)
    return rows + op.finish().matches, op


def replay_engine_rows(rules: str | Sequence[Any], batches: Sequence[list[dict]], use_batch_dfa: bool,
                       snap_at: int | None) -> tuple[list[dict], Any]:
    """Every rule of ``rules`` (rule-file YAML or :class:`patterns.rules.Rule` objects) in one engine
    over ``batches``, with the batch DFA on or off and the engine's snapshot restored into a fresh
    one after batch ``snap_at``. Returns the match rows of every batch and of ``finish()`` in
    order, and the last engine (for its counters and operators)."""
    import cep.batch_dfa as batch_dfa
    from cep.engine import Engine
    from patterns.rules import parse_rules

    old = batch_dfa.USE_BATCH_DFA
    batch_dfa.USE_BATCH_DFA = use_batch_dfa
    try:
        parsed = parse_rules(rules) if isinstance(rules, str) else list(rules)
        eng = Engine(parsed)
        rows: list[dict] = []
        for b, evs in enumerate(batches):
            rows += eng.process(evs).matches
            if b == snap_at:
                data = eng.snapshot()
                eng = Engine(parsed)
                eng.restore(data)
        rows += eng.finish().matches
        return rows, eng
    finally:
        batch_dfa.USE_BATCH_DFA = old


def replay_engine(rules: str | Sequence[Any], batches: Sequence[list[dict]], use_batch_dfa: bool,
                  snap_at: int | None) -> tuple[list[str], dict, dict]:
    """:func:`replay_engine_rows`, summed up: the rows (as repr, so types count), each rule's
    counters and whether each rule took the batch path."""
    rows, eng = replay_engine_rows(rules, batches, use_batch_dfa, snap_at)
    taken = {name: op._keyed is not None for name, op in eng.operators.items()}
    counts = {name: (op.stats.matches, op.stats.rows_emitted, op.stats.partial_matches_peak, op.counts.processed)
              for name, op in eng.operators.items()}
    return [repr(sorted(r.items())) for r in rows], counts, taken
