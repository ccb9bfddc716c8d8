"""Events waiting in arrival order until a table can answer for them, and the lookup that joins them.

A rule that applies events as they arrive (a window rule, a search rule) can apply an event with a
temporal join only once the table's watermark has passed its time. Keeping arrival order, the
queue gives back its longest head whose events the table can answer for
(:meth:`ArrivalQueue.pop_ready`): the rows come out as they would have without the wait, in the
order of the events, whatever the batching and the interleaving with the changelog.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from cep.events import EventBatch
from cep.tables.table import Table

__all__ = ["Waiting", "ArrivalQueue", "join_batch"]


@dataclass
class Waiting:
    """Events that arrived together and wait for the table: their times and a tag per event (what
    the rule needs back when it applies them: a window rule's clock, a search rule's arrival number)."""

    batch: EventBatch
    ts: np.ndarray  # event time, epoch ms
    tag: np.ndarray  # int64

    def split(self, k: int) -> tuple[Waiting, Waiting]:
        head, tail = np.arange(k), np.arange(k, self.batch.n)
        return (Waiting(self.batch.take(head), self.ts[:k], self.tag[:k]),
                Waiting(self.batch.take(tail), self.ts[k:], self.tag[k:]))


class ArrivalQueue:
    """Arrival-ordered events waiting for a table.

    Example:
        >>> from cep.events import batch_from_records
        >>> q = ArrivalQueue()
        >>> q.push(batch_from_records([{"t": 5}, {"t": 9}, {"t": 2}]), np.array([5, 9, 2]), np.array([0, 1, 2]))
        >>> [w.tag.tolist() for w in q.pop_ready(6)], len(q), q.first_tag()
        ([[0]], 2, 1)
    """

    def __init__(self) -> None:
        self.items: list[Waiting] = []

    def __len__(self) -> int:
        return sum(w.batch.n for w in self.items)

    def push(self, batch: EventBatch, ts: np.ndarray, tag: np.ndarray) -> None:
        if batch.n:
            self.items.append(Waiting(batch, np.asarray(ts, dtype=np.int64), np.asarray(tag, dtype=np.int64)))

    def pop_ready(self, bound: int) -> list[Waiting]:
        """Remove and return the longest head whose every event is at or before ``bound``."""
        ready: list[Waiting] = []
        while self.items:
            w = self.items[0]
            over = np.flatnonzero(w.ts > bound)
            if not len(over):
                ready.append(self.items.pop(0))
                continue
            k = int(over[0])
            if k:
                head, self.items[0] = w.split(k)
                ready.append(head)
            break
        return ready

    def first_tag(self) -> int | None:
        return int(self.items[0].tag[0]) if self.items else None

    def min_ts(self) -> int | None:
        return min((int(w.ts.min()) for w in self.items), default=None)

    def state(self) -> list[tuple]:
        """Plain data: per waiting batch its columns, size, lines, source, converted columns, times, tags."""
        return [(dict(w.batch.columns), w.batch.n, w.batch.lines, w.batch.source, dict(w.batch.epoch_ms), w.ts, w.tag)
                for w in self.items]

    def load(self, state: list[tuple]) -> None:
        self.items = [Waiting(EventBatch(cols, n, lines, source, epoch_ms=conv), ts, tag)
                      for cols, n, lines, source, conv, ts, tag in state]


def join_batch(table: Table, event_keys: Sequence[str], columns: Sequence[str], batch: EventBatch,
               ts: np.ndarray) -> tuple[EventBatch, np.ndarray, dict[str, Any]]:
    """``batch`` with the table's ``columns`` as of ``ts`` written in (NULL where no row), the mask of
    events that found a row, and the looked-up columns."""
    rows = table.lookup([batch.column(c) for c in event_keys], ts)
    values = table.gather(rows, columns)
    cols = dict(batch.columns)
    cols.update(values)
    return EventBatch(cols, batch.n, batch.lines, batch.source, epoch_ms=batch.epoch_ms), rows >= 0, values
