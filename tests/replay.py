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
