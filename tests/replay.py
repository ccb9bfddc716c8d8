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


def replay_engine(rules_yaml: str, batches: Sequence[list[dict]], use_batch_dfa: bool,
                  snap_at: int | None) -> tuple[list[str], dict, dict]:
    """Every rule of ``rules_yaml`` in one engine over ``batches``, with the batch DFA on or off and
    the engine's snapshot restored into a fresh one after batch ``snap_at``. Returns the rows (as
    repr, so types count), each rule's counters and whether each rule took the batch path."""
    import cep.batch_dfa as batch_dfa
    from cep.engine import Engine
    from patterns.rules import parse_rules

    old = batch_dfa.USE_BATCH_DFA
    batch_dfa.USE_BATCH_DFA = use_batch_dfa
    try:
        rules = parse_rules(rules_yaml)
        eng = Engine(rules)
        rows: list[dict] = []
        for b, evs in enumerate(batches):
            rows += eng.process(evs).matches
            if b == snap_at:
                data = eng.snapshot()
                eng = Engine(rules)
                eng.restore(data)
        rows += eng.finish().matches
        taken = {name: op._keyed is not None for name, op in eng.operators.items()}
        counts = {name: (op.stats.matches, op.stats.rows_emitted, op.stats.partial_matches_peak, op.counts.processed)
                  for name, op in eng.operators.items()}
        return [repr(sorted(r.items())) for r in rows], counts, taken
    finally:
        batch_dfa.USE_BATCH_DFA = old
