"""One declared table at run time: its versioned store, its changelog's watermark, late and bad changes.

The table's watermark is the largest change time it has seen minus its allowed lateness, as for a
rule. A change whose time is behind the watermark as it stood when the change arrived (arrival
order, so batching does not matter) is *late*: it goes to the late output with the reason and is
not applied, exactly as a late event is not matched. A join releases an event at time t only once
the table's watermark is past t (:meth:`Table.release_bound`), so every change that can still
arrive on time is later than t and cannot alter the row the event saw.

Example:
    >>> from cep.events import batch_from_records
    >>> from patterns.tables import TableSpec
    >>> t = Table(TableSpec("customers", "changes", ("id",), ("tier",), time_field="ts"))
    >>> out = t.apply(batch_from_records([{"id": 1, "tier": "gold", "ts": 10}, {"id": 1, "tier": "x", "ts": 5}]))
    >>> len(out.late), t.watermark, t.release_bound()
    (1, 10, 9)
    >>> t.gather(t.lookup([np.array([1, 1])], np.array([9, 10])))["tier"].tolist()
    [None, 'gold']
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from cep.events import EventBatch, format_time
from cep.operator import OperatorOutput
from cep.tables.changelog import decode
from cep.tables.store import MIN_TIME, TableStats, VersionedTable, key_values
from patterns.tables import TableSpec

__all__ = ["Table", "TableCounts"]


@dataclass
class TableCounts:
    """What a table has read: every change row is applied, late or an error."""

    read: int = 0
    applied: int = 0
    late: int = 0
    errors: int = 0
    snapshot_rows: int = 0
    compacted: int = 0  # versions forgotten because no lookup can read them any more


class Table:
    """A versioned table fed by its changelog (and an optional snapshot file), looked up as of times."""

    def __init__(self, spec: TableSpec):
        self.spec = spec
        self.name = spec.name
        self.store = VersionedTable(spec.primary_key, spec.columns)
        self.max_ts: int | None = None
        self.counts = TableCounts()
        self.static = False  # no changelog in this run: the snapshot is the table, joins never wait

    @property
    def watermark(self) -> int | None:
        """Largest change time seen minus the allowed lateness; None before the first change."""
        return None if self.max_ts is None else self.max_ts - self.spec.lateness_ms

    def release_bound(self) -> int | None:
        """The latest event time a join may look up now: every change still on time is later.

        A change at the watermark is on time, so an event at exactly the watermark must wait for
        the next move: the bound is the watermark minus one millisecond. None: nothing yet
        (no change has come); a static table bounds nothing.
        """
        if self.static:
            return int(np.iinfo(np.int64).max)
        wm = self.watermark
        return None if wm is None else wm - 1

    # ------------------------------------------------------------------ changes
    def load_snapshot(self) -> OperatorOutput:
        """Read the spec's snapshot file (rows valid from the beginning of time); bad rows are errors."""
        from cep.events import read_events

        out = OperatorOutput()
        if self.spec.snapshot is None:
            return out
        for batch in read_events(self.spec.snapshot, 65536, self.spec.snapshot_format):
            for bl in batch.bad:
                self.counts.errors += 1
                out.errors.append({"rule": None, "table": self.name, **bl.to_dict()})
            cols = [batch.column(c) for c in self.spec.primary_key]
            bad = np.zeros(batch.n, dtype=bool)
            for c, col in zip(self.spec.primary_key, cols):
                import pandas as pd

                nulls = np.asarray(pd.isna(col), dtype=bool)
                for i in np.flatnonzero(nulls & ~bad).tolist():
                    self._error(out, batch, i, f"snapshot row: primary key field {c!r} is missing (null)")
                bad |= nulls
            idx = np.flatnonzero(~bad)
            keys = key_values([c[idx] for c in cols])
            values = {c: batch.column(c)[idx] for c in self.spec.columns}
            self.store.apply(keys, np.full(len(idx), MIN_TIME, dtype=np.int64), np.zeros(len(idx), dtype=bool), values)
            self.counts.snapshot_rows += len(idx)
        return out

    def apply(self, batch: EventBatch) -> OperatorOutput:
        """Apply a changelog batch; late and bad changes come back as rows of their outputs."""
        out = OperatorOutput()
        self.counts.read += batch.n
        for bl in batch.bad:
            self.counts.errors += 1
            out.errors.append({"rule": None, "table": self.name, **bl.to_dict()})
        if batch.n == 0:
            return out
        ch = decode(batch, self.spec)
        for i, reason in ch.errors:
            self._error(out, batch, i, reason)
        if not len(ch):
            return out
        ts = ch.times
        lateness = self.spec.lateness_ms
        start = self.max_ts if self.max_ts is not None else int(ts[0])
        prior = np.maximum.accumulate(np.concatenate(([start], ts)))[:-1]
        wm_before = prior - lateness
        late = ts < wm_before
        if self.max_ts is None:
            late[0] = False
        for j in np.flatnonzero(late).tolist():
            i = int(ch.rows[j])
            self.counts.late += 1
            out.late.append({
                "rule": None, "table": self.name, "source": batch.source, "line": batch.line_of(i),
                "reason": (f"late change: time {format_time(int(ts[j]))} is {int(wm_before[j] - ts[j])} ms behind "
                           f"the watermark {format_time(int(wm_before[j]))} of table {self.name!r} (allowed lateness "
                           f"{lateness} ms); not applied"),
                "event": batch.record(i),
            })
        self.max_ts = int(ts.max()) if self.max_ts is None else max(self.max_ts, int(ts.max()))
        keep = np.flatnonzero(~late)
        if len(keep):
            self.store.apply(ch.keys[keep], ts[keep], ch.deletes[keep], {c: v[keep] for c, v in ch.values.items()})
        self.counts.applied += len(keep)
        return out

    def _error(self, out: OperatorOutput, batch: EventBatch, i: int, reason: str) -> None:
        self.counts.errors += 1
        out.errors.append({"rule": None, "table": self.name, "source": batch.source, "line": batch.line_of(i),
                           "reason": reason, "event": batch.record(i)})

    # ------------------------------------------------------------------ lookups
    def lookup(self, key_columns: Sequence[np.ndarray], times: np.ndarray) -> np.ndarray:
        """Row numbers valid at ``times`` for the keys in ``key_columns`` (one array per key column); -1: none."""
        return self.store.lookup(key_values(list(key_columns)), times)

    def gather(self, rows: np.ndarray, columns: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        return self.store.gather(rows, columns)

    def compact(self, horizon: int) -> int:
        """Forget versions no lookup at ``horizon`` or later can read (when history has piled up)."""
        st = self.store
        if st.version_count() <= 1.5 * st.n_codes() + 1024:
            return 0
        n = st.compact(horizon)
        self.counts.compacted += n
        return n

    def stats(self) -> TableStats:
        return self.store.stats()

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        return {"store": self.store.state(), "max_ts": self.max_ts, "counts": asdict(self.counts)}

    def restore(self, state: dict[str, Any]) -> None:
        self.store = VersionedTable.from_state(state["store"])
        self.max_ts = state["max_ts"]
        self.counts = TableCounts(**state["counts"])
