"""An analytics rule's temporal join: events wait, in arrival order, until the table can answer for them.

A window rule applies each event as it arrives: its clock (the largest event time) closes windows,
and an event behind a closed window but within the lateness corrects it. With ``FROM s [LEFT]
JOIN t FOR SYSTEM_TIME AS OF s.ts ON ...`` an event can be applied only once the table's
watermark has passed its time (:meth:`cep.tables.table.Table.release_bound`), as for a pattern
rule. So events are judged late on the rule's own clock when they arrive, then wait in a queue in
arrival order; the longest head of the queue whose events the table can answer for is looked up
and applied, each event on the clock it found when it arrived (the window operator's
external-clock ``late_before``), and the clock moves on to the one the first waiting event found.

The rows are therefore exactly those the rule gives without a join over the events already
joined, in arrival order: which windows close when, which events correct them, whatever the
batching and however the changelog interleaves with the events. An event the table cannot yet
answer for holds back the events that arrived after it (and the windows their clock would
close), as a quiet changelog holds back a joined pattern rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cep.events import EventBatch, event_times, unit_hint
from cep.operator import OperatorOutput, late_row
from cep.tables.queue import ArrivalQueue, Waiting, join_batch
from cep.tables.table import Table

__all__ = ["WindowJoin"]

_NEG = int(np.iinfo(np.int64).min)
_POS = int(np.iinfo(np.int64).max)


class WindowJoin:
    """One window operator's join with one table (bound by the engine, which owns the table)."""

    def __init__(self, table: Table, join: Any, key_cols: list[str]):
        self.table = table
        self.kind = join.kind
        self.event_keys: tuple[str, ...] = tuple(join.event_keys)
        self.table_columns: tuple[str, ...] = tuple(join.columns)
        self.joined_keys = [c for c in key_cols if c in self.table_columns]  # GROUP BY a joined column
        self.max_ts: int | None = None  # the rule's own clock: the largest event time that arrived
        self.waiting = ArrivalQueue()  # tagged with the rule's clock each event found
        self.counts: dict[str, int] = {"joined": 0, "unmatched": 0, "dropped": 0}

    # ------------------------------------------------------------------ arrival
    @staticmethod
    def _times(op: Any, batch: EventBatch, out: OperatorOutput) -> tuple[np.ndarray, np.ndarray] | None:
        """Count the batch as read, report rows without a readable event time, and return the
        positions and times (int64 ms) of the others; None when none is left."""
        op.counts.read += batch.n
        if batch.n == 0:
            return None
        ms, ok, reasons = event_times(batch, op.time_col, op.time_unit, op.max_future_skew_ms, op.clock)
        if not op.unit_checked:
            op.unit_checked = True
            op.unit_hint = unit_hint(batch, op.time_col, op.time_unit)
        for i in np.flatnonzero(~ok).tolist():
            op._error(out, batch, i, f"event-time field {op.time_col!r}: {reasons[i] or 'not a time'}")
        idx = np.flatnonzero(ok)
        if not len(idx):
            return None
        return idx, ms[idx].astype(np.int64)

    def accept(self, op: Any, batch: EventBatch, out: OperatorOutput) -> None:
        """Judge a batch's events on the rule's own clock; queue the ones on time."""
        n = batch.n
        got = self._times(op, batch, out)
        if got is None:
            return
        idx, ts = got
        start = self.max_ts if self.max_ts is not None else _NEG
        clock = np.maximum.accumulate(np.concatenate(([start], ts)))[:-1]
        with np.errstate(over="ignore"):
            wm = np.where(clock == _NEG, _NEG, clock - op.lateness)
        late = ts < wm
        for j in np.flatnonzero(late).tolist():
            op.counts.late += 1
            out.late.append(late_row(op.name, batch, int(idx[j]), int(ts[j]), int(wm[j]), op.lateness))
        self.max_ts = max(start, int(ts.max()))
        keep = np.flatnonzero(~late)
        if len(keep):
            rows = idx[keep]
            self.waiting.push(batch if len(rows) == n else batch.take(rows), ts[keep], clock[keep])
        op.counts.buffered = len(self.waiting)

    def ingest(self, op: Any, batch: EventBatch, late_before: int | np.ndarray, out: OperatorOutput) -> None:
        """A host's arrival (Spark): judge events against the host's ``late_before`` (a scalar, or one
        value per event; the int64 minimum: never late) and queue the ones on time, each tagged with
        the clock it found (``late_before + lateness``). The host moves the rule's clock
        (:meth:`advance`); events do not."""
        n = batch.n
        got = self._times(op, batch, out)
        if got is None:
            return
        idx, ts = got
        wm = np.broadcast_to(np.asarray(late_before, dtype=np.int64), (n,))[idx]
        late = (wm != _NEG) & (ts < wm)
        for j in np.flatnonzero(late).tolist():
            op.counts.late += 1
            out.late.append(late_row(op.name, batch, int(idx[j]), int(ts[j]), int(wm[j]), op.lateness))
        keep = np.flatnonzero(~late)
        if len(keep):
            rows = idx[keep]
            with np.errstate(over="ignore"):
                clock = np.where(wm[keep] == _NEG, _NEG, wm[keep] + op.lateness)
            self.waiting.push(batch if len(rows) == n else batch.take(rows), ts[keep], clock)
        op.counts.buffered = len(self.waiting)

    def advance(self, op: Any, watermark: int) -> None:
        """Idle progress: the rule's clock moves to ``watermark + lateness`` (later events behind it are late)."""
        clock = int(watermark) + op.lateness
        if self.max_ts is None or clock > self.max_ts:
            self.max_ts = clock

    def horizon(self, lateness: int) -> int | None:
        """The earliest time a lookup can still be made at: the oldest waiting event, or the rule's
        watermark (a later event behind it is late, and never looked up)."""
        if self.max_ts is None:
            return None
        t = self.max_ts - lateness
        first = self.waiting.min_ts()
        return t if first is None else min(t, first)

    # ------------------------------------------------------------------ release
    def release(self, op: Any, out: OperatorOutput, final: bool = False) -> None:
        """Apply the head of the queue the table can answer for; move the window clock after it."""
        bound = _POS if final else self.table.release_bound()
        if bound is None:
            return
        ready = self.waiting.pop_ready(bound)
        for w in ready:
            self._apply(op, w, out)
        op.counts.buffered = len(self.waiting)
        # the clock the first waiting event found, or the rule's own when none waits
        first = self.waiting.first_tag()
        clock = first if first is not None else self.max_ts
        if clock is not None and clock != _NEG and (op.max_ts is None or clock > op.max_ts):
            op._move_clock(clock, out)

    def _apply(self, op: Any, w: Waiting, out: OperatorOutput) -> None:
        """Look the events up, write the joined columns in, and apply them on their arrival clocks."""
        import pandas as pd

        ts, clock = w.ts, w.tag
        joined, hit, values = join_batch(self.table, self.event_keys, self.table_columns, w.batch, ts)
        n_hit = int(hit.sum())
        self.counts["joined"] += n_hit
        self.counts["unmatched"] += joined.n - n_hit
        keep = np.ones(joined.n, dtype=bool)
        if self.kind == "INNER" and n_hit < joined.n:
            self.counts["dropped"] += joined.n - n_hit
            op.counts.processed += joined.n - n_hit  # processed: the join had nothing for them
            keep = hit
        if self.joined_keys and self.kind == "LEFT":
            for c in self.joined_keys:
                for i in np.flatnonzero(keep & np.asarray(pd.isna(values[c]), dtype=bool)).tolist():
                    op._error(out, joined, i, f"group key field {c!r} is missing (null): table {self.table.name!r} "
                                               "has no row for the event's key at its time (LEFT JOIN)")
                    keep[i] = False
        if not keep.all():
            sel = np.flatnonzero(keep)
            joined, ts, clock = joined.take(sel), ts[sel], clock[sel]
        if joined.n:
            with np.errstate(over="ignore"):
                late_before = np.where(clock == _NEG, _NEG, clock - op.lateness)
            op._process(joined, out, late_before, count_read=False)

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        return {
            "max_ts": self.max_ts,
            "counts": dict(self.counts),
            "waiting": self.waiting.state(),
        }

    def load(self, state: dict[str, Any]) -> None:
        self.max_ts = state["max_ts"]
        self.counts = dict(state["counts"])
        self.waiting = ArrivalQueue()
        self.waiting.load(state["waiting"])
