"""Windowed analytics rules as a keyed event-time operator: panes, mergeable partial aggregates, sketches.

A :class:`WindowOperator` runs one compiled :class:`~patterns.analytics.AnalyticsSpec`. Events are
validated and judged late exactly as the pattern operator does (``cep.operator``): the watermark
is the largest event time seen (the *clock*) minus the allowed lateness, and an event behind the
watermark as it stood when the event arrived goes to the late output.

State is columnar. Every aggregate is a *partial*: one row per cell (a key in a pane, or a
session), built from a whole batch at once with numpy (grouped reductions, one vectorised
hash of a column, HyperLogLog coupons for all cells in one sort) and merged with other partials
of the same shape. Tumbling and hopping windows are the merge of their tumbling panes (width
gcd(size, slide)); a session is the merge of the partials of its events; a SLIDE window is
computed per event over the key's rows of the preceding ``size`` (prefix sums and range queries).

When a window is emitted (docs/analytics.md has the whole story):

* on time, once the clock reaches the window's end (TUMBLE, HOP, SESSION);
* as a correction (``"correction": true``), once the watermark reaches the end, if events that
  arrived after the on-time row (within the allowed lateness) changed it; ``"retract": true``
  when the row no longer passes HAVING;
* SLIDE rows once the watermark passes their event (never corrected).

Rows of one call come out in the order the clock crossed their thresholds, ties by window end,
then key, so the output does not depend on how the input was cut into batches.
"""

from __future__ import annotations

# Snapshots written before the package split name ``cep.analytics._Partial`` and
# ``cep.analytics._Events`` in their pickles: keep both reachable here so they restore.
from cep.analytics.events import _Events  # noqa: F401
from cep.analytics.operator import WindowOperator, WindowStats
from cep.analytics.partials import _Partial  # noqa: F401

__all__ = ["WindowOperator", "WindowStats"]
