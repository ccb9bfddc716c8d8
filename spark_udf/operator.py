"""The pattern operator driven by an external watermark (Spark's, or a backfill's arrival watermark).

The embedded :class:`~cep.operator.PatternOperator` keeps its own watermark: the largest event time
it has seen minus the allowed lateness. Inside Spark one operator holds only the keys of one hash
bucket, so its own maximum would make lateness depend on how keys are bucketed. Here the caller
says where the watermark stands instead:

* :meth:`ExternalWatermarkOperator.ingest` buffers a batch; an event whose time lies before
  ``late_before`` (one value for the whole batch, or one per row) is late.
* :meth:`ExternalWatermarkOperator.advance_to` releases the buffered events at or before the
  watermark, in event-time order, and ends the partial matches ``WITHIN`` rules out.
* :meth:`ExternalWatermarkOperator.next_deadline` is the earliest watermark at which
  ``advance_to`` could change anything: where Spark's event-time timeout must fire.

Only this module reaches into the embedded operator's internals (``_keys``, ``_error``,
``_release``, the pending buffer). ``cep`` should grow the same three public methods (see
docs/spark.md, "Changes wanted in cep"); this subclass then shrinks to nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cep.events import EventBatch, format_time, parse_times, to_batch
from cep.operator import (  # internals: see the module docstring
    _BAD,
    OperatorOutput,
    PatternOperator,
    _concat,
)

__all__ = ["ExternalWatermarkOperator", "NO_WATERMARK"]

NO_WATERMARK = np.iinfo(np.int64).min
"""``late_before`` value for an event with no watermark before it: never late."""


class ExternalWatermarkOperator(PatternOperator):
    """A :class:`PatternOperator` whose watermark is set from outside, per call.

    Example:
        >>> from patterns.rules import parse_rule_text
        >>> rule = parse_rule_text('''SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        ...   MEASURES A.ts AS t0, B.ts AS t1 PATTERN (A B) WITHIN INTERVAL '10' SECOND
        ...   DEFINE A AS v = 0, B AS v = 1)''')
        >>> op = ExternalWatermarkOperator(rule.compiled, name="r")
        >>> out = op.ingest([{"k": 1, "ts": 5, "v": 0}, {"k": 1, "ts": 9, "v": 1}], late_before=0)
        >>> op.next_deadline()
        5
        >>> op.advance_to(9).matches
        [{'k': 1, 't0': 5, 't1': 9, 'rule': 'r'}]
        >>> op.ingest([{"k": 1, "ts": 3, "v": 0}], late_before=9).late[0]["reason"][:40]
        'late: event time 1970-01-01T00:00:00.003'
    """

    def reset(self) -> None:
        """Forget every key: the state of a freshly built operator."""
        empty = getattr(self, "_empty_snapshot", None)
        if empty is None:
            fresh = type(self)(self.automaton.cp, name=self.name, lateness_ms=self.lateness,
                               max_partial_matches=self.automaton.max_partial_matches,
                               on_cap=getattr(self.automaton, "on_cap", "drop_oldest"))
            empty = self._empty_snapshot = fresh.snapshot()
        self.restore(empty)

    # ------------------------------------------------------------------ the three calls
    def ingest(self, events: Any, late_before: int | np.ndarray) -> OperatorOutput:
        """Buffer a batch without releasing anything; report bad and late events.

        ``late_before`` is the watermark each event is judged against (a scalar for a whole
        Spark micro-batch, one value per row for a backfill that replays arrival order): an
        event with a valid time earlier than it is late. :data:`NO_WATERMARK` means never late.
        """
        batch = to_batch(events)
        out = OperatorOutput()
        self._ingest_at(batch, late_before, out)
        return out

    def advance_to(self, watermark: int) -> OperatorOutput:
        """Move event time to ``watermark``: release buffered events, end timed-out partial matches."""
        out = OperatorOutput()
        self._release(int(watermark), out)
        self.compact()
        return out

    def compact(self) -> None:
        """Forget the rows an idle key no longer needs (all but the last PREV depth).

        The automaton materialises rows in runs of up to 64 ahead and trims lazily, which is
        cheap in memory but makes every idle key carry up to 64 rows in each saved snapshot.
        """
        keep = self.automaton.max_back
        active = self.active
        for key, st in self.states.items():
            if len(st.rows) > keep and key not in active and not st.attempts and not st.deferred:
                if keep:
                    del st.rows[:-keep]
                else:
                    st.rows = []
                st.base = st.nrows - len(st.rows)

    def next_deadline(self) -> int | None:
        """The smallest watermark at which :meth:`advance_to` would release or expire something.

        A buffered event at time t is released once the watermark reaches t; a partial match
        that started at s dies (and its best match so far is emitted) once it reaches
        s + WITHIN. ``None`` when nothing waits on time (partial matches without ``WITHIN`` wait
        for rows, not for time).
        """
        best: int | None = int(self.pending.ts.min()) if len(self.pending) else None
        within = self.automaton.within
        if within is not None and self.active:
            for key in self.active:
                for a in self.states[key].attempts:
                    if a.threads:  # still alive (an empty thread list or DFA state 0 is dead)
                        d = a.start_ts + within
                        if best is None or d < best:
                            best = d
        return best

    def key_count(self) -> int:
        """Keys with runtime state (idle keys included)."""
        return len(self.states)

    # ------------------------------------------------------------------ ingest
    def _ingest_at(self, batch: EventBatch, late_before: int | np.ndarray, out: OperatorOutput) -> None:
        # Mirrors PatternOperator._ingest, with the running-maximum watermark replaced by the
        # caller's ``late_before``; the late reasons read the same.
        n = batch.n
        self.counts.read += n
        if n == 0:
            return
        ms, ok, reasons = parse_times(batch.column(self.time_col))
        for i in np.flatnonzero(~ok):
            r = reasons[i] or "not a time"
            self._error(out, batch, int(i), f"event-time field {self.time_col!r}: {r}")
        keys = self._keys(batch, ok, out)
        valid = ok if keys.dtype != object else ok & (keys != _BAD)
        idx = np.flatnonzero(valid)
        if len(idx) == 0:
            return
        ts = ms[idx]
        wm = np.broadcast_to(np.asarray(late_before, dtype=np.int64), (n,))[idx]
        late = ts < wm
        for j in np.flatnonzero(late).tolist():
            row = int(idx[j])
            self.counts.late += 1
            behind = int(wm[j] - ts[j])
            out.late.append({
                "rule": self.name,
                "source": batch.source,
                "line": batch.line_of(row),
                "reason": (
                    f"late: event time {format_time(int(ts[j]))} is {behind} ms behind the watermark "
                    f"{format_time(int(wm[j]))} (allowed lateness {self.lateness} ms)"
                ),
                "event": batch.record(row),
            })
        keep = ~late
        if keep.any():
            new_max = int(ts[keep].max())
            self.max_ts = new_max if self.max_ts is None else max(self.max_ts, new_max)
        idx = idx[keep]
        m = len(idx)
        if m == 0:
            return
        p = self.pending
        seq = np.arange(self.seq, self.seq + m, dtype=np.int64)
        self.seq += m
        p.ts = np.concatenate((p.ts, ts[keep]))
        p.seq = np.concatenate((p.seq, seq))
        p.keys = keys[idx] if len(p.keys) == 0 else _concat(p.keys, keys[idx])
        for ci, c in enumerate(self.columns):
            col = batch.column(c)[idx]
            p.cols[ci] = col if len(p.cols[ci]) == 0 else _concat(p.cols[ci], col)
        if self.keep_records:
            recs = np.empty(m, dtype=object)
            recs[:] = [batch.record(int(i)) for i in idx]
            p.records = np.concatenate((p.records, recs))
        self.counts.buffered = len(p)
