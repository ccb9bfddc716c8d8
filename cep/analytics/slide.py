"""SLIDE windows: at each event, the aggregates over its key's events of the preceding window size."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cep.analytics.context import _Ctx
from cep.analytics.emission import _Emission, _key_ranks, _triggers
from cep.analytics.events import _cat_events, _Events
from cep.analytics.kernels import _HyperLogLog, _Kernel, _TopK

if TYPE_CHECKING:  # type hints only: the operator drives the window engines
    from cep.analytics.operator import WindowOperator


class _SlideRows:
    """Rows of a SLIDE rule: released rows still inside some future window, plus their hashes."""

    def __init__(self, op: WindowOperator):
        self.op = op
        self._hash_cache: dict[int, np.ndarray] = {}
        self.ev: _Events | None = None

    def hashes(self, kernel: _Kernel) -> np.ndarray:
        """Per row, an int64 identity of the kernel's value (for exact counting in SLIDE windows)."""
        key = id(kernel)
        if key not in self._hash_cache:
            assert self.ev is not None
            i = self.op.kernels.index(kernel)
            if isinstance(kernel, (_HyperLogLog, _TopK)):
                # coupons and raw values are not identities: the SLIDE buffer keeps value hashes
                self._hash_cache[key] = self.ev.cols[f"\0h{i}"].view(np.int64)
            else:
                self._hash_cache[key] = self.ev.inputs[i][0].view(np.int64)
        return self._hash_cache[key]


class _SlideWindows:
    """SLIDE windows: at each event (in event-time order, once the watermark passes it), the
    aggregates over the key's events with time in (t - size, t], up to the event itself."""

    def __init__(self, op: WindowOperator):
        self.op = op
        self.size = op.spec.window.size_ms
        self.pending: _Events | None = None
        self.pending_seq = np.zeros(0, dtype=np.int64)
        self.kept: _Events | None = None
        self.kept_seq = np.zeros(0, dtype=np.int64)
        self.seq = 0

    def split_before(self, ts, prior):
        return np.zeros(len(ts), dtype=bool)

    def apply(self, ev: _Events, clock_before: int) -> None:
        if not len(ev):
            return
        seq = np.arange(self.seq, self.seq + len(ev), dtype=np.int64)
        self.seq += len(ev)
        if self.pending is not None:
            self.pending.pos[:] = -1  # arrived in an earlier call (one segment per call here)
        self.pending = ev if self.pending is None else _cat_events([self.pending, ev], self.op.kernels)
        self.pending_seq = np.concatenate((self.pending_seq, seq))
        self.op.counts.buffered = len(self.pending)

    def advance(self, clock: int, r_all: np.ndarray, seg_start: int, final: bool = False) -> list[_Emission]:
        op = self.op
        wm = None if final else clock - op.lateness
        p = self.pending
        if p is None or not len(p):
            return []
        rel = np.ones(len(p), dtype=bool) if final else p.ts <= wm
        if not rel.any():
            return []
        kernels = op.kernels
        new = p.take(rel, kernels)
        new_seq = self.pending_seq[rel]
        self.pending = p.take(~rel, kernels)
        self.pending_seq = self.pending_seq[~rel]
        op.counts.buffered = len(self.pending)
        op.counts.processed += len(new)
        # first-seen flags in event-time order
        order = np.lexsort((new_seq, new.ts, new.kid))
        new = new.take(order, kernels)
        new_seq = new_seq[order]
        op._mark_first_seen(new)
        if self.kept is not None and len(self.kept):
            allev = _cat_events([self.kept, new], kernels)
            all_seq = np.concatenate((self.kept_seq, new_seq))
            is_new = np.concatenate((np.zeros(len(self.kept), dtype=bool), np.ones(len(new), dtype=bool)))
        else:
            allev, all_seq, is_new = new, new_seq, np.ones(len(new), dtype=bool)
        order = np.lexsort((all_seq, allev.ts, allev.kid))
        allev = allev.take(order, kernels)
        all_seq = all_seq[order]
        is_new = is_new[order]
        # per-key offset times: one searchsorted finds every window's first row
        kid = allev.kid
        brk = np.ones(len(kid), dtype=bool)
        brk[1:] = kid[1:] != kid[:-1]
        rank = np.cumsum(brk) - 1
        t0 = int(allev.ts.min())
        span = int(allev.ts.max()) - t0 + self.size + 1
        adj = (allev.ts - t0) + rank * span
        q = np.flatnonzero(is_new)
        lo = np.searchsorted(adj, adj[q] - self.size, side="right")
        rows = _SlideRows(op)
        rows.ev = allev
        cols = {c: v[q] for c, v in allev.cols.items()}
        ctx = _Ctx(op, allev.kid[q], allev.ts[q] - self.size, allev.ts[q].copy(), cols)
        results = [k.slide(x, lo, q, rows, ctx) for k, x in zip(kernels, allev.inputs)]
        out = []
        got = op._evaluate_results(results, None, ctx)
        if got:
            idx = np.array([i for i, _r in got], dtype=np.int64)
            t = ctx.wend[idx]
            thr = t + op.lateness
            trig = _triggers(r_all, thr, seg_start, final)
            if not final:
                trig = np.maximum(trig, allev.pos[q][idx])  # not before the row's own event arrived
            ranks = _key_ranks([op._key_values[k] for k in ctx.kids[idx].tolist()])
            order = np.lexsort((all_seq[q][idx], t, ranks, thr, trig))
            out.append(_Emission(int(trig[order[0]]), 0, 0, [got[j][1] for j in order.tolist()]))
        # keep what a future window can still reach
        if final:
            self.kept, self.kept_seq = None, np.zeros(0, dtype=np.int64)
        else:
            assert wm is not None
            keep = allev.ts > wm - self.size
            self.kept = allev.take(keep, kernels)
            self.kept_seq = all_seq[keep]
        op.stats.windows += len(q)
        return out

    def live_kids(self) -> set[int]:
        out: set[int] = set()
        for ev in (self.pending, self.kept):
            if ev is not None:
                out.update(ev.kid.tolist())
        return out

    def next_threshold(self) -> int | None:
        """The smallest clock at which :meth:`advance` emits rows (kept rows only wait for data)."""
        if self.pending is None or not len(self.pending):
            return None
        return int(self.pending.ts.min()) + self.op.lateness

    def state(self) -> dict:
        return {"pending": self.pending, "pending_seq": self.pending_seq, "kept": self.kept,
                "kept_seq": self.kept_seq, "seq": self.seq}

    def load(self, st: dict) -> None:
        for k, v in st.items():
            setattr(self, k, v)
