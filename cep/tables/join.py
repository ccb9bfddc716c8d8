"""A pattern rule's temporal join: the table's columns added to each event as it is released.

A pattern rule buffers events until its watermark passes them, then steps them in event-time
order. With ``FROM s [LEFT] JOIN t FOR SYSTEM_TIME AS OF s.ts ON ...`` the events are released only
once the table's watermark has passed them too (:meth:`cep.tables.table.Table.release_bound`), and
each released batch is looked up at once (:meth:`TableJoin.enrich`): the row of its key valid at the
event's time is written into the event's columns. An inner join drops (and counts) the events
whose key has no row then; a left join keeps them with NULL columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cep.operator import OperatorOutput
from cep.tables.table import Table

__all__ = ["TableJoin"]


class TableJoin:
    """One pattern operator's join with one table (built by the engine, which owns the table)."""

    def __init__(self, table: Table, join: Any, columns: list[str], partition_by: list[str]):
        self.table = table
        self.kind = join.kind
        self.event_keys: tuple[str, ...] = tuple(join.event_keys)
        self.table_columns: tuple[str, ...] = tuple(join.columns)
        self.needed = [c for c in join.columns if c in columns]  # what the rule's conditions and measures read
        self.partition_joined = any(c in join.columns for c in partition_by)
        self.counts: dict[str, int] = {"joined": 0, "unmatched": 0, "dropped": 0}

    def enrich(self, op: Any, idx: np.ndarray, out: OperatorOutput) -> np.ndarray:
        """Look up the released pending rows ``idx`` of ``op``, write the joined columns into them,
        and return the rows that go on to matching (inner join: those with a row; every row for a
        left join, but for one whose joined partition key is NULL: an error row)."""
        p = op.pending
        rows = self.table.lookup([c[idx] for c in p.join_keys], p.ts[idx])
        hit = rows >= 0
        n_hit = int(hit.sum())
        self.counts["joined"] += n_hit
        self.counts["unmatched"] += len(idx) - n_hit
        if self.kind == "INNER" and n_hit < len(idx):
            self.counts["dropped"] += len(idx) - n_hit
            op.counts.processed += len(idx) - n_hit  # processed: the join had nothing for them
            idx, rows = idx[hit], rows[hit]
        if not len(idx):
            return idx
        values = self.table.gather(rows, self.table_columns if op.keep_records else self.needed)
        for c in self.needed:
            ci = op.columns.index(c)
            col, v = p.cols[ci], values[c]
            if col.dtype != v.dtype:
                col = col.astype(object)
                v = v.astype(object)
            col[idx] = v
            p.cols[ci] = col
        if op.keep_records:
            cols = {c: values[c].tolist() for c in self.table_columns}
            for j, i in enumerate(idx.tolist()):
                rec = dict(p.records[i])
                for c in self.table_columns:
                    v = cols[c][j]
                    if v is None or (isinstance(v, float) and v != v):
                        rec.pop(c, None)
                    else:
                        rec[c] = v
                p.records[i] = rec
        if self.partition_joined:
            idx = self._partition_keys(op, idx, out)
        return idx

    def _partition_keys(self, op: Any, idx: np.ndarray, out: OperatorOutput) -> np.ndarray:
        """The partition keys of joined rows, now that the joined columns are known; NULL ones are errors."""
        import pandas as pd

        p = op.pending
        cols = [p.cols[op.columns.index(c)][idx] for c in op.key_cols]
        bad = np.zeros(len(idx), dtype=bool)
        for c, col in zip(op.key_cols, cols):
            nulls = np.asarray(pd.isna(col), dtype=bool)
            for j in np.flatnonzero(nulls & ~bad).tolist():
                what = (f"table {self.table.name!r} has no row for the event's key at its time (LEFT JOIN)"
                        if c in self.table_columns else "the event has none")
                op.counts.errors += 1
                out.errors.append({
                    "rule": op.name, "source": None, "line": None,
                    "reason": f"partition field {c!r} is missing (null): {what}",
                    "event": {name: _plain(p.cols[k][idx[j]]) for k, name in enumerate(op.columns)},
                })
            bad |= nulls
        keep = np.flatnonzero(~bad)
        idx = idx[keep]
        keys = np.empty(len(keep), dtype=object)
        if len(cols) == 1:
            keys[:] = cols[0][keep].tolist()
        else:
            keys[:] = list(zip(*[c[keep].tolist() for c in cols]))
        p.keys = p.keys.astype(object) if p.keys.dtype != object else p.keys
        p.keys[idx] = keys
        return idx


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v
