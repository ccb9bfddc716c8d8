"""SESSION windows: per key, events closer than the gap share a window; out-of-order events merge sessions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from cep.analytics.arrays import _POS, _Groups
from cep.analytics.context import _Ctx
from cep.analytics.emission import _Emission, _key_ranks, _triggers
from cep.analytics.events import _cat_events, _Events
from cep.analytics.partials import _MAX_CHUNKS, _combine, _Partial

if TYPE_CHECKING:  # type hints only: the operator drives the window engines
    from cep.analytics.operator import WindowOperator

_MAX_PENDING = 512  # session engine: applied runs held before one aggregation
_MAX_PENDING_EVENTS = 65_536


class _SessionWindows:
    """SESSION windows: per key, events closer than the gap share a window [first, last + gap).

    Open sessions are columns (id, key, first and last time, fired, dirty); their aggregates are
    partials whose cells are session ids. Events in time order extend each key's latest session
    or start new ones, all keys at once; an out-of-order event is applied on its own and may
    extend, or bridge and merge, sessions (a merged-away session's cells then map to the
    survivor). Applied events wait in ``pending`` and are aggregated together when a session is
    read. Firing, finality and the order of rows are computed column-wise too.
    """

    COLS = ("sid", "kid", "start", "last", "fired", "dirty")

    def __init__(self, op: WindowOperator):
        self.op = op
        self.gap = op.spec.window.size_ms
        self.sid = np.zeros(0, dtype=np.int64)
        self.kid = np.zeros(0, dtype=np.int64)
        self.start = np.zeros(0, dtype=np.int64)
        self.last = np.zeros(0, dtype=np.int64)
        self.fired = np.zeros(0, dtype=bool)
        self.dirty = np.zeros(0, dtype=bool)
        self.emitted: dict[int, tuple[int, dict]] = {}  # sid -> (start, row) emitted on time
        self.absorbed: dict[int, list[dict]] = {}  # sid -> rows of fired sessions merged into it
        self.root_of: dict[int, int] = {}
        self.chunks: list[_Partial] = []
        self.next_sid = 0
        # events applied but not yet aggregated, with their session ids: aggregated together when
        # a session is read or the list grows (one build per run of events, not one per event)
        self.pending: list[tuple[_Events, np.ndarray]] = []
        self.pending_n = 0
        # a lower bound of next_threshold() (None: unknown): below it advance() has nothing to do;
        # sessions only ever end later as events extend or merge them, new ones lower it
        self.low: int | None = None

    def split_before(self, ts: np.ndarray, prior: np.ndarray) -> np.ndarray:
        """Out-of-order events may extend or bridge sessions: each one is applied on its own."""
        late = ts < prior
        nxt = np.zeros(len(ts), dtype=bool)
        nxt[1:] = late[:-1]
        return late | nxt

    def _append(self, kid: np.ndarray, start: np.ndarray, last: np.ndarray) -> np.ndarray:
        sid = np.arange(self.next_sid, self.next_sid + len(kid), dtype=np.int64)
        self.next_sid += len(kid)
        self.sid = np.concatenate((self.sid, sid))
        self.kid = np.concatenate((self.kid, kid))
        self.start = np.concatenate((self.start, start))
        self.last = np.concatenate((self.last, last))
        self.fired = np.concatenate((self.fired, np.zeros(len(kid), dtype=bool)))
        self.dirty = np.concatenate((self.dirty, np.zeros(len(kid), dtype=bool)))
        if self.low is not None and len(kid):
            self.low = min(self.low, int(last.min()) + self.gap)
        return sid

    def apply(self, ev: _Events, clock_before: int) -> None:
        n = len(ev)
        if not n:
            return
        if n == 1 and int(ev.ts[0]) < clock_before:
            sid_of = np.array([self._one(int(ev.kid[0]), int(ev.ts[0]))], dtype=np.int64)
        else:
            sid_of = self._ordered(ev)
        self.pending.append((ev, sid_of))
        self.pending_n += n
        if len(self.pending) >= _MAX_PENDING or self.pending_n >= _MAX_PENDING_EVENTS:
            self._build_pending()

    def _build_pending(self) -> None:
        """Aggregate the pending events into one chunk (cells: the session ids they joined)."""
        if not self.pending:
            return
        kernels = self.op.kernels
        evs, sids = [e for e, _ in self.pending], [c for _, c in self.pending]
        self.pending, self.pending_n = [], 0
        self.chunks.append(self.op._build(_cat_events(evs, kernels), np.concatenate(sids)))
        if len(self.chunks) > 4 * _MAX_CHUNKS:
            self._compact()

    def _ordered(self, ev: _Events) -> np.ndarray:
        """Events in time order (each at or past the clock): they extend a key's latest session or
        start new ones; a fired session extended by a late event can still be reached."""
        g = _Groups(ev.kid)
        ts = ev.ts[g.order]
        kid = ev.kid[g.order]
        n = len(ts)
        brk = np.ones(n, dtype=bool)
        brk[1:] = (kid[1:] != kid[:-1]) | (ts[1:] - ts[:-1] >= self.gap)
        rs = np.flatnonzero(brk)
        re = np.append(rs[1:], n)
        rkid, t0, t1 = kid[rs], ts[rs], ts[re - 1]
        first = np.ones(len(rs), dtype=bool)
        first[1:] = rkid[1:] != rkid[:-1]
        run_sid = np.full(len(rs), -1, dtype=np.int64)
        # the latest open session of each key (open sessions of a key never overlap)
        if len(self.sid):
            order = np.lexsort((self.start, self.kid))
            okid = self.kid[order]
            is_last = np.ones(len(order), dtype=bool)
            is_last[:-1] = okid[1:] != okid[:-1]
            lk, li = okid[is_last], order[is_last]
            fr = np.flatnonzero(first)
            at = np.searchsorted(lk, rkid[fr]).clip(max=len(lk) - 1)
            hit = lk[at] == rkid[fr]
            idx = li[at]
            join = hit & (t0[fr] - self.last[idx] < self.gap)
            if join.any():
                j_runs, j_idx = fr[join], idx[join]
                run_sid[j_runs] = self.sid[j_idx]
                self.last[j_idx] = np.maximum(self.last[j_idx], t1[j_runs])
                self.dirty[j_idx] |= self.fired[j_idx]
        new = run_sid < 0
        if new.any():
            run_sid[new] = self._append(rkid[new], t0[new], t1[new])
        out = np.empty(n, dtype=np.int64)
        out[g.order] = np.repeat(run_sid, re - rs)
        return out

    def _one(self, kid: int, ts: int) -> int:
        """An out-of-order event: join, extend or bridge the key's sessions it falls within gap of."""
        hit = np.flatnonzero((self.kid == kid) & (self.start - self.gap < ts) & (ts < self.last + self.gap))
        if not len(hit):
            return int(self._append(np.array([kid]), np.array([ts]), np.array([ts]))[0])
        hit = hit[np.argsort(self.start[hit], kind="stable")]
        r = int(hit[0])
        root = int(self.sid[r])
        self.dirty[r] |= self.fired[r]
        for o in hit[1:].tolist():
            other = int(self.sid[o])
            self.start[r] = min(self.start[r], self.start[o])
            self.last[r] = max(self.last[r], self.last[o])
            if self.fired[o] or self.dirty[o]:
                self.dirty[r] = True
            old = self.emitted.pop(other, None)
            gone = self.absorbed.setdefault(root, [])
            if old is not None:
                gone.append(old[1])
            gone.extend(self.absorbed.pop(other, []))
            if not gone:
                del self.absorbed[root]
            for m, rt in list(self.root_of.items()):
                if rt == other:
                    self.root_of[m] = root
            self.root_of[other] = root
        self.start[r] = min(self.start[r], ts)
        self.last[r] = max(self.last[r], ts)
        if len(hit) > 1:
            keep = np.ones(len(self.sid), dtype=bool)
            keep[hit[1:]] = False
            self._keep(keep)
        return root

    def _keep(self, mask: np.ndarray) -> None:
        for c in self.COLS:
            setattr(self, c, getattr(self, c)[mask])

    def _mapper(self) -> Callable[[np.ndarray], np.ndarray] | None:
        if not self.root_of:
            return None
        src = np.fromiter(self.root_of.keys(), dtype=np.int64, count=len(self.root_of))
        dst = np.fromiter(self.root_of.values(), dtype=np.int64, count=len(self.root_of))
        order = np.argsort(src)
        src, dst = src[order], dst[order]

        def mapper(cells: np.ndarray) -> np.ndarray:
            at = np.searchsorted(src, cells).clip(max=len(src) - 1)
            return np.where(src[at] == cells, dst[at], cells)

        return mapper

    def _compact(self) -> None:
        if self.chunks:
            self.chunks = [_combine(self.chunks, self.op.kernels, self._mapper(), keep=np.sort(self.sid))]

    def advance(self, clock: int, r_all: np.ndarray, seg_start: int, final: bool = False) -> list[_Emission]:
        if not final and self.low is not None and clock < self.low:
            return []  # no session ends (or stops taking corrections) before the clock
        self._build_pending()
        out = self._advance(clock, r_all, seg_start, final)
        thr = self.next_threshold()
        self.low = _POS if thr is None else thr
        return out

    def _advance(self, clock: int, r_all: np.ndarray, seg_start: int, final: bool) -> list[_Emission]:
        op = self.op
        lat = op.lateness
        end = self.last + self.gap
        due = ~self.fired & ((end <= clock) if not final else True)
        done = (end + lat <= clock) if not final else np.ones(len(end), dtype=bool)
        rows: list[dict] = []
        trig: list[np.ndarray] = []
        thr: list[np.ndarray] = []
        kind: list[np.ndarray] = []
        who: list[np.ndarray] = []  # index into the session columns, for the key and start order
        if due.any():
            at = np.flatnonzero(due)
            got = self.emit(at)
            self.fired[at] = True
            rows_at = np.array(sorted(got), dtype=np.int64)
            if lat > 0 and not final:
                for i in rows_at.tolist():
                    self.emitted[int(self.sid[i])] = (int(self.start[i]), got[i])
            rows += [got[i] for i in rows_at.tolist()]
            e = end[rows_at]
            trig.append(_triggers(r_all, e, seg_start, final))
            thr.append(e)
            kind.append(np.zeros(len(rows_at), dtype=np.int64))
            who.append(rows_at)
        fix = np.flatnonzero(done & self.dirty)
        if len(fix):
            now = self.emit(fix)
            for i in fix.tolist():
                sid = int(self.sid[i])
                em = self._corrections(i, now.get(i))
                rows += em
                e_fix = int(end[i] + lat)
                trig.append(_triggers(r_all, np.full(len(em), e_fix), seg_start, final))
                thr.append(np.full(len(em), e_fix, dtype=np.int64))
                kind.append(np.ones(len(em), dtype=np.int64))
                who.append(np.full(len(em), i, dtype=np.int64))
                self.emitted.pop(sid, None)
                self.absorbed.pop(sid, None)
        if done.any() and (self.emitted or self.absorbed or self.root_of):
            dead = set(self.sid[done].tolist())
            for sid in dead & (self.emitted.keys() | self.absorbed.keys()):
                self.emitted.pop(sid, None)
                self.absorbed.pop(sid, None)
            self.root_of = {m: r for m, r in self.root_of.items() if r not in dead}
        out: list[_Emission] = []
        if rows:
            w = np.concatenate(who)
            ranks = _key_ranks([op._key_values[k] for k in self.kid[w].tolist()])
            order = np.lexsort((self.start[w], ranks, np.concatenate(kind), np.concatenate(thr), np.concatenate(trig)))
            t = np.concatenate(trig)
            ordered = [rows[j] for j in order.tolist()]
            out.append(_Emission(int(t[order[0]]), 0, 0, ordered))
        if done.any():
            self._keep(~done)
            if final:
                self.chunks = []
            else:
                self._compact()
        return out

    def _corrections(self, i: int, new: dict | None) -> list[dict]:
        op = self.op
        sid = int(self.sid[i])
        em: list[dict] = []
        old_start, old = self.emitted.get(sid, (None, None))
        moved = old is not None and old_start != int(self.start[i])
        if old is not None and (new is None or moved):
            # the on-time row describes a window that no longer exists (or no longer passes)
            em.append(op._row_for_retraction(int(self.kid[i]), old))
            op.stats.retractions += 1
        if new is not None and (old is None or moved or new != old):
            em.append({**new, "correction": True})
            op.stats.corrections += 1
        for gone in self.absorbed.get(sid, []):  # rows of sessions this one swallowed
            em.append(op._row_for_retraction(int(self.kid[i]), gone))
            op.stats.retractions += 1
        return em

    def emit(self, at: np.ndarray) -> dict[int, dict]:
        """Rows of the sessions at column positions ``at`` that pass HAVING, by position."""
        op = self.op
        pos_of = {int(s): i for s, i in zip(self.sid[at].tolist(), at.tolist())}
        part = _combine(self.chunks, op.kernels, self._mapper(), keep=np.sort(self.sid[at]))
        if not len(part.cells):
            return {}
        idx = np.array([pos_of[c] for c in part.cells.tolist()], dtype=np.int64)
        ctx = _Ctx(op, self.kid[idx], self.start[idx], self.last[idx] + self.gap)
        return {int(idx[i]): row for i, row in op._evaluate(part, None, ctx)}

    def peek(self, kid: int) -> list[tuple[int, int, bool, dict | None]]:
        """The open sessions of key id ``kid``, in start order: (start, end, fired, the row the
        session would emit now, None when HAVING fails). Aggregates the pending events first (as
        any read does), otherwise reads state only (``cep explain``)."""
        self._build_pending()
        at = np.flatnonzero(self.kid == kid)
        at = at[np.argsort(self.start[at], kind="stable")]
        got = self.emit(at) if len(at) else {}
        return [(int(self.start[i]), int(self.last[i]) + self.gap, bool(self.fired[i]), got.get(i)) for i in at.tolist()]

    def live_kids(self) -> set[int]:
        return set(self.kid.tolist())

    def next_threshold(self) -> int | None:
        """The smallest clock at which :meth:`advance` emits or drops something."""
        if not len(self.sid):
            return None
        end = self.last + self.gap
        return int(np.where(self.fired, end + self.op.lateness, end).min())

    def state(self) -> dict:
        self._build_pending()
        keys = (*self.COLS, "emitted", "absorbed", "root_of", "chunks", "next_sid")
        return {k: getattr(self, k) for k in keys}

    def load(self, st: dict) -> None:
        for k, v in st.items():
            setattr(self, k, v)
        self.pending, self.pending_n, self.low = [], 0, None
