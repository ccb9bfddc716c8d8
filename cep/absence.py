"""The column-wise path of the commonest absence rule: ``PATTERN (A NOT B) WITHIN T``.

"An order placed and not shipped within 2 days" keeps one waiting partial match per order for two
days of event time, so nearly every row of the stream belongs to a key with something alive, and
stepping each key's automaton costs a few microseconds of Python per row. For this one shape the
answer needs no automaton: an ``A`` row is an absence exactly when no row of its key after it, and
before ``A``'s time + ``T``, satisfies ``B``. :class:`AbsencePath` decides that for a whole batch with
numpy (the next ``B`` row of the same key after each ``A`` row), keeps the ``A`` rows still waiting
per key, and fires them from one heap of deadlines as the watermark passes; Python runs per waiting
``A`` row and per ``B`` row that meets one, not per event.

It applies when ``A`` and the ``NOT`` variables have row-local conditions only, ``A`` has no
quantifier, measures read no row outside the match (no ``PREV``/``NEXT``), one row per match, and
``AFTER MATCH SKIP`` is ``PAST LAST ROW`` or ``TO NEXT ROW`` (for this shape both let every ``A``
row wait on its own), and no idle-state TTL or global cap is set. Its rows, ``_id``s and match
numbers are the automaton's (``tests/cep/test_absence.py`` runs both on the same inputs). The
per-key cap (``max_partial_matches``) is applied row by row as the automaton does: a key that could
exceed it within a batch is replayed row by row.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from patterns.compiler import OP_IGNORE, OP_MATCH, OP_VAR

__all__ = ["AbsencePath", "absence_plan", "USE_ABSENCE_PATH"]

# a switch so tests and benchmarks can run the same rules through the automaton instead
USE_ABSENCE_PATH = True


def absence_plan(a: Any) -> tuple[int, int] | None:
    """(A's variable id, the NOT variables' bits) when automaton ``a`` has the column-wise shape."""
    ins = a.ins
    if len(ins) != 3 or ins[0][0] != OP_VAR or ins[1][0] != OP_IGNORE or ins[2][0] != OP_MATCH:
        return None
    _, vid, nxt, excl = ins[0]
    _, kill, self_pc, final, _ = ins[1]
    if excl or nxt != 1 or not final or self_pc != 1 or a.within is None:
        return None
    if a.hist[vid] is not None or any(a.hist[v] is not None for v in kill):
        return None
    if a.max_back or a.max_next or a.all_rows or a.timeout_rows:
        return None
    if a.skip.mode not in ("PAST_LAST_ROW", "TO_NEXT_ROW") or a.max_steps is not None:
        return None
    bits = 0
    for v in kill:
        bits |= 1 << v
    return vid, bits


class AbsencePath:
    """Waiting ``A`` rows of every key, and the heap of their deadlines.

    ``waiting[key]`` lists ``[deadline, seq, start time, row]`` in start order (so in deadline
    order); the heap holds ``(deadline, seq, key)``. An entry a ``B`` row ended stays in the heap
    and is recognised when popped: its key's first waiting entry is no longer it.
    """

    def __init__(self, automaton: Any, plan: tuple[int, int]):
        self.a = automaton
        self.vid, self.kill_bits = plan
        self.within = int(automaton.within)
        self.waiting: dict[Any, list[list]] = {}
        self.heap: list[tuple[int, int, Any]] = []
        self.numbers: dict[Any, int] = {}  # matches emitted per key (MATCH_NUMBER, _id)
        self.seq = 0
        self.longest = 0  # no key has ever had more entries waiting (a bound for the cap check)

    # ------------------------------------------------------------------ state
    def state(self) -> tuple:
        return (self.waiting, self.numbers, self.seq)

    def load(self, state: tuple) -> None:
        self.waiting, self.numbers, self.seq = state
        self.longest = max((len(v) for v in self.waiting.values()), default=0)
        self.heap = [(e[0], e[1], k) for k, lst in self.waiting.items() for e in lst]
        heapq.heapify(self.heap)

    def live(self) -> int:
        return sum(len(v) for v in self.waiting.values())

    def keys(self) -> int:
        return len(set(self.waiting) | set(self.numbers))

    def next_deadline(self) -> int | None:
        heap = self.heap
        while heap:
            d, s, key = heap[0]
            lst = self.waiting.get(key)
            if lst and lst[0][1] == s:
                return d
            heapq.heappop(heap)
        return None

    # ------------------------------------------------------------------ a batch
    def step(self, codes: np.ndarray, uniques: Any, ts: np.ndarray, cols: list[np.ndarray], masks: np.ndarray,
             stats: Any) -> None:
        """Rows of one release, sorted by key then time: end what B rows end, keep new A rows waiting."""
        is_a = (masks >> self.vid) & 1 == 1
        is_k = (masks & self.kill_bits) != 0
        a_idx = np.flatnonzero(is_a)
        k_idx = np.flatnonzero(is_k)
        keys_of = np.asarray(uniques, dtype=object)
        cap = self.a.max_partial_matches
        # keys that could go over the per-key cap inside this batch are replayed row by row
        hot: set = set()
        if len(a_idx):
            per_key = np.bincount(codes[a_idx], minlength=len(keys_of))
            if int(per_key.max()) + self.longest > cap:
                for c in np.flatnonzero(per_key > 0).tolist():
                    if per_key[c] + len(self.waiting.get(keys_of[c], ())) > cap:
                        hot.add(c)
        # waiting entries of earlier batches: the key's first B row in this batch ends those whose
        # deadline lies after it (the others are due first and stay to fire)
        if len(k_idx) and self.waiting:
            kc = codes[k_idx]
            first = k_idx[np.concatenate(([True], kc[1:] != kc[:-1]))]
            waiting = self.waiting
            for c, t in zip(codes[first].tolist(), ts[first].tolist()):
                if c in hot:
                    continue
                key = keys_of[c]
                lst = waiting.get(key)
                if lst:
                    cut = 0
                    while cut < len(lst) and lst[cut][0] <= t:
                        cut += 1
                    if cut == 0:
                        del waiting[key]
                    else:
                        del lst[cut:]
        # A rows of this batch: the next B row of the same key after each
        if len(a_idx):
            dl = ts[a_idx] + self.within
            if len(k_idx):
                pos = np.searchsorted(k_idx, a_idx, side="right")
                nk = k_idx[np.minimum(pos, len(k_idx) - 1)]
                ended = (pos < len(k_idx)) & (codes[nk] == codes[a_idx]) & (ts[nk] < dl)
            else:
                ended = np.zeros(len(a_idx), dtype=bool)
            keep = a_idx[~ended]
            if hot:
                keep = keep[~np.isin(codes[keep], list(hot))]
            if len(keep):
                rows = list(zip(*[c[keep].tolist() for c in cols], masks[keep].tolist()))
                waiting = self.waiting
                heap = self.heap
                seq = self.seq
                longest = self.longest
                for c, t, row in zip(codes[keep].tolist(), ts[keep].tolist(), rows):
                    key = keys_of[c]
                    seq += 1
                    d = t + self.within
                    lst = waiting.get(key)
                    if lst is None:
                        waiting[key] = [[d, seq, t, row]]
                    else:
                        lst.append([d, seq, t, row])
                        if len(lst) > longest:
                            longest = len(lst)
                    heapq.heappush(heap, (d, seq, key))
                self.seq = seq
                self.longest = max(longest, 1)
        for c in sorted(hot):
            self._replay(c, keys_of[c], codes, ts, cols, masks, is_a, is_k, stats)
        if self.longest > stats.partial_matches_peak:
            stats.partial_matches_peak = self.longest

    def _replay(self, c: int, key: Any, codes, ts, cols, masks, is_a, is_k, stats) -> None:
        """One key's rows in order, as the automaton steps them (a row over the cap drops the oldest)."""
        lo, hi = np.searchsorted(codes, [c, c + 1])
        lst = self.waiting.setdefault(key, [])
        cap = self.a.max_partial_matches
        done: list[list] = []  # due before a later row of the key: fired by the watermark below
        for j in range(int(lo), int(hi)):
            t = int(ts[j])
            while lst and lst[0][0] <= t:
                done.append(lst.pop(0))
            if is_k[j]:
                lst.clear()
            if is_a[j]:
                self.seq += 1
                row = tuple(x[j : j + 1].tolist()[0] for x in cols) + (int(masks[j]),)
                lst.append([t + self.within, self.seq, t, row])
                self.longest = max(self.longest, len(lst))
                if len(lst) > cap and self.a.on_cap == "drop_oldest":
                    stats.cap_hits += 1
                    while len(lst) > cap:
                        lst.pop(0)
                        stats.partial_matches_dropped += 1
                elif len(lst) > cap:
                    stats.cap_hits += 1
                    stats.partial_matches_dropped += len(lst)
                    lst.clear()
        lst[:0] = done
        if not lst:
            del self.waiting[key]
        self.heap = [x for x in self.heap if x[2] != key]
        for e in lst:
            self.heap.append((e[0], e[1], key))
        heapq.heapify(self.heap)

    # ------------------------------------------------------------------ deadlines
    def fire(self, watermark: int | None, emit_row, stats: Any) -> None:
        """Emit every waiting A row whose deadline the watermark has reached (all when None: the end)."""
        heap = self.heap
        waiting = self.waiting
        while heap and (watermark is None or heap[0][0] <= watermark):
            d, s, key = heapq.heappop(heap)
            lst = waiting.get(key)
            if not lst or lst[0][1] != s:
                continue  # a B row ended it
            entry = lst.pop(0)
            if not lst:
                del waiting[key]
            number = self.numbers.get(key, 0) + 1
            self.numbers[key] = number
            stats.matches += 1
            stats.absences += 1
            emit_row(entry[3], number)
