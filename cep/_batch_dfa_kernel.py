"""The compiled loops of :mod:`cep.batch_dfa` (numba): step a batch of keys, flush at the end, compact.

Imported only when a rule takes that path, so the engine loads without numba and a rule that
does not fit never compiles anything. The loops mirror :meth:`cep.nfa.PatternAutomaton._step_key_dfa`,
``_resolve``, ``_over_cap``, ``flush`` and ``_consumers`` statement by statement over integer
arrays; see :class:`cep.batch_dfa.BatchDFA` for the layout of the arrays.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["step", "flush", "compact", "expire", "keep_batch"]

# key rows: rows stepped, resume row, match number, store index of the last row, live order, pool offset
_NROWS, _RESUME, _MNUM, _LAST, _ACT, _AOFF = 0, 1, 2, 3, 4, 5
# attempt rows: start row, start time, DFA state, best match's last row (-1 none), its store index
_START, _TS, _SID, _BEST, _BIDX = 0, 1, 2, 3, 4
# the ``base`` of a call that steps no batch: every store index is below it
_NO_BATCH = 1 << 62


@njit(cache=True)
def _prev(idx, s_prev, base, seg_s, seg_prev):  # pragma: no cover - compiled
    """The store index of the row before store index ``idx`` of its key: a row of the batch being
    stepped (``idx >= base``, batch position ``idx - base``, in the segment that starts at
    ``seg_s``) links to the row before it, the segment's first to ``seg_prev`` (the key's last row
    before the batch); an earlier row's link is in the store."""
    if idx < base:
        return s_prev[idx]
    return idx - 1 if idx - base > seg_s else seg_prev


@njit(cache=True)
def _emit(key, start, best, bidx, num, s_prev, s_mask, base, seg_s, seg_prev, masks, trans, match_pc, parent,
          pos, pc_vid, start_sid, kinds, bits, o_int, o_meas, no):  # pragma: no cover - compiled
    """Output match ``num`` of ``key`` (rows ``start`` to ``best``, the last at store index ``bidx``):
    rows of the batch being stepped (store index ``base`` on) are read from the batch (``masks``,
    links by :func:`_prev`); earlier rows from the store."""
    n = best - start + 1
    chain = np.empty(n, np.int64)
    cmask = np.empty(n, np.int64)
    idx = bidx
    for i in range(n - 1, -1, -1):
        chain[i] = idx
        cmask[i] = s_mask[idx] if idx < base else masks[idx - base]
        idx = _prev(idx, s_prev, base, seg_s, seg_prev)
    # the DFA state before each row (the attempt's path), replayed from its start
    path = np.empty(n, np.int64)
    sid = start_sid
    for i in range(n):
        path[i] = sid
        sid = trans[sid, cmask[i]]
    # the program counter that consumed each row, walked back from the one that completed the match
    vids = np.empty(n, np.int64)
    c = match_pc[path[n - 1], cmask[n - 1]]
    vids[n - 1] = pc_vid[c]
    for i in range(n - 1, 0, -1):
        p = path[i - 1]
        c = parent[p, cmask[i - 1], pos[path[i], c]]
        vids[i - 1] = pc_vid[c]
    o_int[0, no] = key
    o_int[1, no] = num
    o_int[2, no] = chain[0]
    o_int[3, no] = vids[n - 1]
    for q in range(len(kinds)):
        kind = kinds[q]
        r = -1
        if kind == 4:  # COUNT(*) / COUNT(var.*): the count itself, not a row
            b = bits[q]
            cnt = 0
            for i in range(n):
                if b == -1 or (b >> vids[i]) & 1:
                    cnt += 1
            o_meas[no, q] = cnt
            continue
        if kind <= 1:
            b = bits[q]
            if b == -1:
                r = n - 1 if kind == 0 else 0
            elif kind == 0:
                for i in range(n - 1, -1, -1):
                    if (b >> vids[i]) & 1:
                        r = i
                        break
            else:
                for i in range(n):
                    if (b >> vids[i]) & 1:
                        r = i
                        break
        o_meas[no, q] = chain[r] if r >= 0 else -1


@njit(cache=True)
def _resolve(key, sc, h, t, k, past_last, s_prev, s_mask, base, seg_s, seg_prev, masks, trans, match_pc, parent,
             pos, pc_vid, start_sid, kinds, bits, o_int, o_meas, no, counters):  # pragma: no cover - compiled
    """The automaton's _resolve over attempts sc[:, h:t]: returns the new head and output count
    (``base`` to ``masks``: where the match's rows are, see :func:`_emit`)."""
    while h < t:
        if sc[_SID, h] != 0:
            if past_last and sc[_BEST, h] >= 0:
                end = sc[_BEST, h]
                while t - h > 1 and sc[_START, h + 1] <= end:
                    for f in range(5):  # delete attempts[1]: the head moves up one slot
                        sc[f, h + 1] = sc[f, h]
                    h += 1
            return h, no
        start = sc[_START, h]
        best = sc[_BEST, h]
        bidx = sc[_BIDX, h]
        h += 1
        if best < 0:
            continue
        k[_MNUM, key] += 1
        counters[3] += 1
        _emit(key, start, best, bidx, k[_MNUM, key], s_prev, s_mask, base, seg_s, seg_prev, masks, trans,
              match_pc, parent, pos, pc_vid, start_sid, kinds, bits, o_int, o_meas, no)
        no += 1
        resume = best + 1 if past_last else start + 1
        k[_RESUME, key] = resume
        while h < t and sc[_START, h] < resume:
            h += 1
    return h, no


@njit(cache=True)
def _summary(o_int, o_meas, no, kinds, counters, gsrc, base, at):  # pragma: no cover - compiled
    """What the rows of the ``no`` matches need before reading columns, found while the outputs are
    in cache: ``counters[7]`` the smallest first-row store index (-1: no match), ``counters[8]`` 1
    when a row measure's variable matched no row (its index is -1); and the rows each output
    column reads, in ``at``: place ``p`` (one per entry of ``gsrc``: -1 the match's first row,
    else the row of measure ``gsrc[p]``) at ``at[p * no : (p + 1) * no]``, as an index into the
    batch's own columns (minus ``base``) when every first row is the batch's, else as a store
    index; a row that is missing reads index 0 (the caller puts None there)."""
    lo = -1
    miss = 0
    for i in range(no):
        x = o_int[2, i]
        if lo < 0 or x < lo:
            lo = x
        for q in range(len(kinds)):
            if kinds[q] <= 1 and o_meas[i, q] < 0:
                miss = 1
    counters[7] = lo
    counters[8] = miss
    # every row a match reads lies at or after its first row (see BatchDFA._gathered)
    rel = base if lo >= base else 0
    for p in range(len(gsrc)):
        g = gsrc[p]
        off = p * no
        for i in range(no):
            x = o_int[2, i] if g < 0 else o_meas[i, g]
            at[off + i] = x - rel if x >= 0 else 0


@njit(cache=True)
def step(ids, starts, ends, ts, masks, base, s_prev, s_mask, seg_prev, k, alen, pool, trans, match_pc, parent,
         pos, pc_vid, start_sid, start_bits, past_last, merge, within, max_pm, skip_key, kinds, bits, o_int, o_meas,
         counters, sizes, gsrc, at):  # pragma: no cover - compiled
    """Every segment (one key's rows of the batch, in order): the automaton's _step_key_dfa
    (``within`` -1: no WITHIN; ``sizes[s]``: the positions of state s, which the peak counts;
    ``counters`` at least 9 long; ``gsrc`` and ``at``: the output columns' rows, see :func:`_summary`).
    Returns the number of matches and the attempt pool (a larger one when this batch's attempts
    did not fit into ``pool``).

    The batch's row ``j`` has store index ``base + j``, but nothing is written to the store for
    it: its mask is ``masks[j]`` and its link the row before it in its segment, or for the
    segment's first row the key's last row before the batch, which goes to ``seg_prev[i]``
    (:func:`keep_batch` then stores the rows a later batch may read)."""
    nseg = len(starts)
    widest = 0
    for v in sizes:
        if v > widest:
            widest = v
    width = 2
    for i in range(nseg):
        w = alen[ids[i]] + ends[i] - starts[i] + 2
        if w > width:
            width = w
    sc = np.empty((5, width), np.int64)
    pool_used = counters[0]
    act_seq = counters[1]
    peak = counters[2]
    total = counters[6]
    no = 0
    for i in range(nseg):
        key = ids[i]
        s = starts[i]
        e = ends[i]
        na = alen[key]
        off = k[_AOFF, key]
        for q in range(na):
            for f in range(5):
                sc[f, q] = pool[f, off + q]
        total -= na
        h = 0
        t = na
        start_rno = k[_NROWS, key] - s
        k[_NROWS, key] += e - s
        # the segment's rows are consecutive store indices, each linked to the one before it: only
        # the first one's link (the key's last row before the batch) is kept, for _prev
        sp = k[_LAST, key]
        seg_prev[i] = sp
        if e > s:
            k[_LAST, key] = base + e - 1
        j = s - 1
        while True:
            j += 1
            if t == h:
                # nothing alive: only a row that can start a match changes anything, so go
                # straight to the next one (the rule's start index within the key's rows)
                while j < e and ((masks[j] & start_bits) == 0 or start_rno + j < k[_RESUME, key]):
                    j += 1
            if j >= e:
                break
            sidx = base + j
            m = masks[j]
            rno = start_rno + j
            for q in range(h, t):
                sid = sc[_SID, q]
                if sid == 0:
                    continue
                if within >= 0 and ts[j] - sc[_TS, q] >= within:
                    sc[_SID, q] = 0
                    continue
                if match_pc[sid, m] >= 0:
                    sc[_BEST, q] = rno
                    sc[_BIDX, q] = sidx
                sc[_SID, q] = trans[sid, m]
            if (m & start_bits) != 0 and rno >= k[_RESUME, key]:
                if not (past_last and t > h and sc[_BEST, h] >= rno):
                    r = trans[start_sid, m]
                    mp = match_pc[start_sid, m]
                    if r != 0 or mp >= 0:
                        sc[_START, t] = rno
                        sc[_TS, t] = ts[j]
                        sc[_SID, t] = r
                        sc[_BEST, t] = rno if mp >= 0 else -1
                        sc[_BIDX, t] = sidx if mp >= 0 else -1
                        t += 1
                        if t - h > max_pm:
                            counters[4] += 1
                            if skip_key:
                                counters[5] += t - h
                                h = t
                            else:
                                while t - h > max_pm and t - h > 1:
                                    h += 1
                                    counters[5] += 1
            if merge and t - h > 1:
                # a later attempt in the head's state has the head's future: see _step_key_dfa
                hs = sc[_SID, h]
                if hs != 0:
                    hb = sc[_BEST, h]
                    found = False
                    for q in range(h + 1, t):
                        if sc[_SID, q] == hs and sc[_BEST, q] < 0 and (hb < 0 or hb >= sc[_START, q]):
                            found = True
                            break
                    if found:
                        w = h + 1
                        for q in range(h + 1, t):
                            if sc[_SID, q] != hs or sc[_BEST, q] >= 0 or (hb >= 0 and hb < sc[_START, q]):
                                if w != q:
                                    for f in range(5):
                                        sc[f, w] = sc[f, q]
                                w += 1
                        t = w
            if t > h:
                # dead attempts at the head without a match go here (most attempts end so); a call
                # of _resolve passes some twenty arrays, which costs more than stepping a row
                while h < t and sc[_SID, h] == 0 and sc[_BEST, h] < 0:
                    h += 1
                if h < t and (sc[_SID, h] == 0 or (past_last and sc[_BEST, h] >= 0 and t - h > 1)):
                    h, no = _resolve(key, sc, h, t, k, past_last, s_prev, s_mask, base, s, sp, masks, trans,
                                     match_pc, parent, pos, pc_vid, start_sid, kinds, bits, o_int, o_meas, no,
                                     counters)
                if (t - h) * widest > peak:  # (the automaton's _peak_count_dfa)
                    n = 0
                    for q in range(h, t):
                        n += sizes[sc[_SID, q]]
                    if n > peak:
                        peak = n
        na = t - h
        if na > 0:
            if pool_used + na > pool.shape[1]:
                # the pool is sized by the attempts alive, not by the batch's rows (any of which may
                # start one): grown here, the slots written so far kept where they are
                grown = np.empty((5, max(2 * pool.shape[1], pool_used + na + 1024)), np.int64)
                grown[:, :pool_used] = pool[:, :pool_used]
                pool = grown
            k[_AOFF, key] = pool_used
            for q in range(na):
                for f in range(5):
                    pool[f, pool_used + q] = sc[f, h + q]
            pool_used += na
            if k[_ACT, key] < 0:
                k[_ACT, key] = act_seq
                act_seq += 1
        else:
            k[_ACT, key] = -1
        alen[key] = na
        total += na
    counters[0] = pool_used
    counters[1] = act_seq
    counters[2] = peak
    counters[6] = total
    _summary(o_int, o_meas, no, kinds, counters, gsrc, base, at)
    return no, pool


@njit(cache=True)
def flush(order, s_prev, s_mask, k, alen, pool, trans, match_pc, parent, pos, pc_vid, start_sid, past_last,
          kinds, bits, o_int, o_meas, counters, gsrc, at):  # pragma: no cover - compiled
    """End of input for the keys in ``order``: every run ends, each attempt's best match is final."""
    width = 2
    for key in order:
        if alen[key] + 1 > width:
            width = alen[key] + 1
    sc = np.empty((5, width), np.int64)
    no = 0
    for key in order:
        na = alen[key]
        off = k[_AOFF, key]
        for q in range(na):
            for f in range(5):
                sc[f, q] = pool[f, off + q]
            sc[_SID, q] = 0
        # (every row is in the store: no batch is being stepped, so no index reaches ``base``)
        h, no = _resolve(key, sc, 0, na, k, past_last, s_prev, s_mask, _NO_BATCH, 0, -1, s_mask, trans, match_pc,
                         parent, pos, pc_vid, start_sid, kinds, bits, o_int, o_meas, no, counters)
        alen[key] = 0
        k[_ACT, key] = -1
    _summary(o_int, o_meas, no, kinds, counters, gsrc, 0, at)
    return no


@njit(cache=True)
def compact(k, alen, nk, pool, newpool, s_prev, s_used, keep, max_back):  # pragma: no cover - compiled
    """Mark the store rows still needed (each key's last ``max_back`` rows, and every row from its
    earliest live attempt's start on) and move the live attempts to ``newpool``; its used size."""
    used = 0
    for key in range(nk):
        na = alen[key]
        need = max_back
        if na > 0:
            off = k[_AOFF, key]
            d = k[_NROWS, key] - pool[_START, off]
            if d > need:
                need = d
            for q in range(na):
                for f in range(5):
                    newpool[f, used + q] = pool[f, off + q]
            k[_AOFF, key] = used
            used += na
        idx = k[_LAST, key]
        c = 0
        while idx >= 0 and c < need:
            keep[idx] = True
            idx = s_prev[idx]
            c += 1
    return used


@njit(cache=True)
def expire(nk, k, alen, pool, watermark, within):  # pragma: no cover - compiled
    """The automaton's ``expire`` for the key ids below ``nk`` that have attempts: end the attempts
    whose WITHIN has run out by ``watermark`` and drop the ended ones at the head (the batch path takes WITHIN only for
    patterns whose matches all have one length, where no match waits behind a live attempt, so
    ending attempts emits nothing). Returns how many attempts were dropped."""
    dropped = 0
    for key in range(nk):
        na = alen[key]
        if na == 0:
            continue
        off = k[_AOFF, key]
        for q in range(na):
            if pool[_SID, off + q] != 0 and watermark - pool[_TS, off + q] >= within:
                pool[_SID, off + q] = 0
        h = 0
        while h < na and pool[_SID, off + h] == 0 and pool[_BEST, off + h] < 0:
            h += 1
        if h:
            k[_AOFF, key] = off + h
            alen[key] = na - h
            dropped += h
            if na == h:
                k[_ACT, key] = -1
    return dropped


@njit(cache=True)
def keep_batch(ids, starts, ends, seg_prev, masks, s_prev, k, alen, pool, pool_from, pool_to, base, n, max_back,
               sel, kept_prev, kept_mask, mark, remap):  # pragma: no cover - compiled
    """Keep of the batch just stepped (store indices ``base`` to ``base + n``, links and masks as
    :func:`step` left them: see :func:`_prev`) the rows :func:`compact` would keep for the keys in
    ``ids`` (each key's last ``max_back`` rows and every row from its earliest live attempt's start
    on), as store indices ``base`` on, in order: their links and masks go to ``kept_prev[:m]`` and
    ``kept_mask[:m]`` (the caller stores them), the keys' last rows and the best-match rows of the
    attempts in pool slots ``pool_from`` to ``pool_to`` (the ones this batch wrote) follow them.
    ``sel[:m]`` gets the kept rows' batch positions (for their column values); ``mark`` and
    ``remap`` are scratch of at least ``n``; returns ``m``."""
    for i in range(n):
        mark[i] = False
    for i in range(len(ids)):
        key = ids[i]
        if ends[i] == starts[i]:
            continue  # (no row of this batch)
        need = max_back
        if alen[key] > 0:
            d = k[_NROWS, key] - pool[_START, k[_AOFF, key]]
            if d > need:
                need = d
        idx = k[_LAST, key]
        c = 0
        while idx >= base and c < need:
            mark[idx - base] = True
            idx = _prev(idx, s_prev, base, starts[i], seg_prev[i])
            c += 1
    m = 0
    for i in range(n):
        if mark[i]:
            remap[i] = base + m
            sel[m] = i
            m += 1
        else:
            remap[i] = -1
    for i in range(len(ids)):
        for j in range(starts[i], ends[i]):
            if mark[j]:
                q = remap[j] - base
                p = _prev(base + j, s_prev, base, starts[i], seg_prev[i])
                kept_prev[q] = remap[p - base] if p >= base else p
                kept_mask[q] = masks[j]
    for key in ids:
        x = k[_LAST, key]
        if x >= base:
            k[_LAST, key] = remap[x - base]
    for q in range(pool_from, pool_to):
        x = pool[_BIDX, q]
        if x >= base:
            pool[_BIDX, q] = remap[x - base]
    return m
