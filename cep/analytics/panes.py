"""TUMBLE and HOP windows: the merge of tumbling panes of width gcd(size, slide), fired per key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from cep.analytics.arrays import _sorted_unique
from cep.analytics.context import _Ctx
from cep.analytics.emission import _corrections, _Emission, _trigger
from cep.analytics.events import _Events
from cep.analytics.partials import _MAX_CHUNKS, _combine, _member, _Partial

BATCHED = True
"""Build the panes of a segment in one grouping and read the windows due together in one evaluation
(the same partials and rows as one pane and one window at a time; tests compare the two)."""

_KID_LIMIT = 1 << 31  # key ids below this share a 64-bit word with a pane offset
_KID_MASK = np.int64(_KID_LIMIT * 2 - 1)

if TYPE_CHECKING:  # type hints only: the operator drives the window engines
    from cep.analytics.operator import WindowOperator


class _Win:
    """A TUMBLE/HOP window with data, until it is final.

    Firing is per (key, window): ``keys`` are the key ids evaluated on time (those with data
    when the clock reached the end, and those whose first event came later, which are
    evaluated at once); later events of those keys are ``dirty`` (corrected at finality),
    first events of other keys ``fresh`` (evaluated on time at the next advance).
    """

    __slots__ = ("fired", "emitted", "dirty", "keys", "fresh")

    def __init__(self, fired: bool = False):
        self.fired = fired
        self.emitted: dict[int, dict] = {}
        self.dirty: list[np.ndarray] = []
        self.keys: np.ndarray | None = None  # sorted; None: every key (restored from an older snapshot)
        self.fresh: list[np.ndarray] = []


class _PaneWindows:
    """TUMBLE and HOP windows over tumbling panes of width gcd(size, slide)."""

    def __init__(self, op: WindowOperator):
        w = op.spec.window
        self.op = op
        self.size, self.step, self.g = w.size_ms, w.step_ms, w.pane_ms
        self.prev = 1 if op.spec.prev else 0
        self.panes: dict[int, list[_Partial]] = {}
        self.wins: dict[int, _Win] = {}

    # window k covers [k * step, k * step + size)
    def end(self, k: int) -> int:
        return k * self.step + self.size

    def windows_of_pane(self, p: int) -> range:
        start = p * self.g
        return range((start - self.size) // self.step + 1, start // self.step + 1)

    def panes_of(self, k: int) -> range:
        s = k * self.step
        return range(s // self.g, (s + self.size) // self.g)

    def split_before(self, ts: np.ndarray, prior: np.ndarray) -> np.ndarray:
        """Events that land in a window the clock has already passed: apply them on their own."""
        first_end = ((ts - self.size) // self.step + 1) * self.step + self.size
        return first_end <= prior

    def apply(self, ev: _Events, clock_before: int) -> None:
        if not len(ev):
            return
        op = self.op
        pane = ev.ts // self.g
        lo, hi = int(pane.min()), int(pane.max())
        for p, part in self._parts(ev, pane, lo, hi):
            chunks = self.panes.setdefault(p, [])
            chunks.append(part)
            if len(chunks) > _MAX_CHUNKS:
                self.panes[p] = [_combine(chunks, op.kernels)]
            for k in self.windows_of_pane(p):
                w = self.wins.get(k)
                if w is None:
                    w = self.wins[k] = _Win()
                if w.fired:
                    if w.keys is None:
                        w.dirty.append(part.cells)
                        continue
                    known = _member(part.cells, w.keys)
                    w.dirty.append(part.cells[known])
                    if not known.all():
                        w.fresh.append(part.cells[~known])

    def _parts(self, ev: _Events, pane: np.ndarray, lo: int, hi: int) -> Iterator[tuple[int, _Partial]]:
        """The partial of each pane the events touch, in pane order.

        Events spanning many panes are grouped once by (pane, key id) and the result cut into
        one partial per pane (each kernel's ``slice``): the same partials as grouping each
        pane's events on its own, without a round of numpy calls per pane."""
        op = self.op
        if BATCHED and 0 < hi - lo < _KID_LIMIT and all(k.sliceable for k in op.kernels) and int(ev.kid.max()) < _KID_LIMIT:
            whole = op._build(ev, ((pane - lo) << 32) | ev.kid)
            at = whole.cells >> 32
            cuts = np.flatnonzero(at[1:] != at[:-1]) + 1
            bounds = [0, *cuts.tolist(), len(at)]
            kids = whole.cells & _KID_MASK
            per_kernel = [k.slices(st, bounds) for k, st in zip(op.kernels, whole.states)]
            panes = (at[bounds[:-1]] + lo).tolist()
            for j, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
                yield panes[j], _Partial(kids[a:b], whole.n[a:b], [got[j] for got in per_kernel])
            return
        for p in range(lo, hi + 1) if hi - lo < 64 else np.unique(pane).tolist():
            sel = pane == p
            if not sel.any():
                continue
            yield p, op._build(ev.take(sel, op.kernels), ev.kid[sel])

    def advance(self, clock: int, r_all: np.ndarray, seg_start: int, final: bool = False) -> list[_Emission]:
        op = self.op
        out: list[_Emission] = []
        lat = op.lateness
        due = sorted(k for k, w in self.wins.items() if (w.fresh or not w.fired) and (final or self.end(k) <= clock))
        first = [k for k in due if not self.wins[k].fired]
        read = self.emit_many(first) if len(first) > 1 and self._many_at_once() else {}
        for k in due:
            e = self.end(k)
            trig = _trigger(r_all, e, seg_start, final)
            w = self.wins[k]
            if w.fired:  # keys whose first events came after the window's end: on time now
                kids = _sorted_unique(np.concatenate(w.fresh))
                w.fresh = []
                rows = self.emit(k, kids)
                assert w.keys is not None
                w.keys = _sorted_unique(np.concatenate((w.keys, kids)))
            elif k in read:  # read with the others: their key ids and rows apart
                row_kids, got, w.keys = read[k]
                w.fired = True
                if lat > 0 and not final:
                    w.emitted.update(zip(row_kids, got))
                out.append(_Emission(trig, e, 0, got))
                continue
            else:
                rows = self.emit(k, None)
                w.fired = True
                w.keys = self.keys_of(k)
            if lat > 0 and not final:
                w.emitted.update(rows)
            out.append(_Emission(trig, e, 0, [r for _kid, r in rows]))
        done = sorted(k for k in self.wins if final or self.end(k) + lat <= clock)
        for k in done:
            w = self.wins.pop(k)
            if w.dirty:
                # late events landed after the on-time row: re-emit what they changed
                e = self.end(k) + lat
                kids = _sorted_unique(np.concatenate(w.dirty))
                rows = self.emit(k, kids)
                out.append(_Emission(_trigger(r_all, e, seg_start, final), e, 1, _corrections(kids, rows, w.emitted, op)))
        if final:
            self.panes.clear()
        else:
            for p in list(self.panes):
                last = p * self.g // self.step + self.prev
                if self.end(last) + lat <= clock:
                    del self.panes[p]
        return out

    def _many_at_once(self) -> bool:
        op = self.op
        return BATCHED and not op.spec.prev and all(k.cellwise for k in op.kernels) and len(self.wins) < _KID_LIMIT

    def emit_many(self, ks: list[int]) -> dict[int, tuple[list[int], list[dict], np.ndarray]]:
        """:meth:`emit` of every key of each window in ``ks`` (the key ids of its rows, its rows, and
        the keys holding data in it), read in one evaluation: the windows' partials are laid
        side by side under (window, key id) cells."""
        op = self.op
        empty = np.zeros(0, dtype=np.int64)
        if all(k.stackable for k in op.kernels):
            part = self._stacked(ks)
            if part is None:
                return {k: ([], [], empty) for k in ks}
        else:
            parts = []
            for j, k in enumerate(ks):
                for p in self.panes_of(k):
                    for c in self.panes.get(p, ()):
                        parts.append(_Partial((np.int64(j) << 32) | c.cells, c.n, c.states))
            if not parts:
                return {k: ([], [], empty) for k in ks}
            part = _combine(parts, op.kernels)
        win = part.cells >> 32
        kids = part.cells & _KID_MASK
        wstart = np.asarray(ks, dtype=np.int64)[win] * self.step
        ctx = _Ctx(op, kids, wstart, wstart + self.size)
        ctx.window_first = True  # rows by window start, then key: each window's rows in one run
        at, got = op._evaluate_apart(_Partial(kids, part.n, part.states), None, ctx)
        cut = np.searchsorted(win[at], np.arange(len(ks) + 1)).tolist()
        row_kids = kids[at].tolist()
        bounds = np.searchsorted(win, np.arange(len(ks) + 1))
        return {k: (row_kids[cut[j]:cut[j + 1]], got[cut[j]:cut[j + 1]], kids[bounds[j]:bounds[j + 1]])
                for j, k in enumerate(ks)}

    def _stacked(self, ks: list[int]) -> _Partial | None:
        """The partial of the windows ``ks`` under (window, key id) cells, or None when they hold
        no data: each window's chunks merged (most hold one, which needs no merge), then the
        windows' partials laid one after another (their cells do not overlap)."""
        op = self.op
        wins: list[_Partial] = []
        tags: list[int] = []
        for j, k in enumerate(ks):
            chunks = [c for p in self.panes_of(k) for c in self.panes.get(p, ())]
            if not chunks:
                continue
            part = chunks[0] if len(chunks) == 1 else _combine(chunks, op.kernels)
            if len(part.cells):
                wins.append(part)
                tags.append(j)
        if not wins:
            return None
        sizes = [len(w.cells) for w in wins]
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).tolist()
        cells = np.concatenate([(np.int64(j) << 32) | w.cells for j, w in zip(tags, wins)])
        n = np.concatenate([w.n for w in wins])
        states = [k.stack([w.states[i] for w in wins], offsets) for i, k in enumerate(op.kernels)]
        return _Partial(cells, n, states)

    def keys_of(self, k: int) -> np.ndarray:
        """The sorted key ids with data in window ``k``."""
        cells = [c.cells for p in self.panes_of(k) for c in self.panes.get(p, ())]
        return _sorted_unique(np.concatenate(cells)) if cells else np.zeros(0, dtype=np.int64)

    def emit(self, k: int, kids: np.ndarray | None) -> list[tuple[int, dict]]:
        op = self.op
        chunks = [c for p in self.panes_of(k) for c in self.panes.get(p, ())]
        if not chunks:
            return []
        part = _combine(chunks, op.kernels, keep=kids)
        if not len(part.cells):
            return []
        prev = None
        if op.spec.prev:
            pchunks = [c for p in self.panes_of(k - 1) for c in self.panes.get(p, ())]
            prev = _combine(pchunks, op.kernels, keep=part.cells) if pchunks else None
        start = k * self.step
        wstart = np.full(len(part.cells), start, dtype=np.int64)
        wend = np.full(len(part.cells), start + self.size, dtype=np.int64)
        ctx = _Ctx(op, part.cells, wstart, wend)
        rows = op._evaluate(part, prev, ctx)
        if not rows:
            return []
        kids = part.cells[[i for i, _r in rows]].tolist()
        return list(zip(kids, [r for _i, r in rows]))

    def peek(self, kid: int) -> list[tuple[int, int, bool, dict | None]]:
        """The open windows holding key id ``kid``, in start order: (start, end, fired, the row
        the window would emit now, None when HAVING fails). Reads state only (``cep explain``)."""
        out: list[tuple[int, int, bool, dict | None]] = []
        keep = np.array([kid], dtype=np.int64)
        for k in sorted(self.wins):
            if not _member(keep, self.keys_of(k))[0]:
                continue
            rows = self.emit(k, keep)
            out.append((k * self.step, self.end(k), self.wins[k].fired, rows[0][1] if rows else None))
        return out

    def live_kids(self) -> set[int]:
        out: set[int] = set()
        for chunks in self.panes.values():
            for c in chunks:
                out.update(c.cells.tolist())
        return out

    def next_threshold(self) -> int | None:
        """The smallest clock at which :meth:`advance` emits or drops something."""
        lat = self.op.lateness
        ts = [self.end(k) + (lat if w.fired else 0) for k, w in self.wins.items()]
        ts += [self.end(p * self.g // self.step + self.prev) + lat for p in self.panes]
        return min(ts) if ts else None

    def state(self) -> dict:
        wins = {k: (w.fired, w.emitted, w.dirty, w.keys, w.fresh) for k, w in self.wins.items()}
        return {"panes": self.panes, "wins": wins}

    def load(self, st: dict) -> None:
        self.panes = st["panes"]
        self.wins = {}
        for k, (fired, emitted, dirty, *per_key) in st["wins"].items():
            w = _Win(fired)
            w.emitted, w.dirty = emitted, dirty
            if per_key:
                w.keys, w.fresh = per_key
            self.wins[k] = w
