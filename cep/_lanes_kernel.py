"""The compiled loop of :mod:`cep.lanes` (numba): step a key's live start rows over its rows of a batch, or every key's in one call.

Imported only when a rule takes the lane path with numba allowed. The loop mirrors the numpy
stepping of :func:`cep.lanes.step_key_lanes` row by row: WITHIN, the ``R`` and ``B`` conditions
of every live start row (their bytecode interpreted one instruction at a time over all of them,
:mod:`cep._expr_kernel`), the state table (``LanePlan.nxt``: next state, match, preference
between ``R`` and ``B``), counts, kept values and running aggregates, then a new start row, the
cap check and ``_resolve`` (dropping dead start rows at the head, the start rows a live head's
match rules out, and a head that ended with a match: the match is recorded in ``rec`` as its
start row, last row and R rows, for the engine to output after the call, and the loop goes on
past it). It returns to Python at a row that needs the engine: one where the cap is exceeded, a
start row's runs fork (before anything of that row is changed), or the head ended with a match
the engine holds as a node chain (a start row that came from the general path, ``L_bx`` -1).

The start rows of the key (``KeyState.attempts``) are a queue of lane ids ``Q[qh:qt]`` in start
order; ``io`` carries the scalars in and out (see the ``IO_`` indexes); ``made`` returns the
fields of the lanes made in the call that are still queued. ``step_batch`` runs the same loop
(``_run``) for every key of a batch in one call, over one set of lane arrays shared by the keys.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from numba import njit

from cep import _expr_kernel as EK

__all__ = ["step", "step_batch", "K_S", "K_N", "K_RNO", "K_RESUME", "K_QOFF", "K_QLEN", "K_MOFF", "K_SIZE", "IO_J", "IO_NL", "IO_QH", "IO_QT", "IO_PEAK", "IO_NKILL", "IO_NBEST", "IO_RESUME",
           "IO_STATUS", "IO_MIDDLE", "IO_NMADE", "IO_NREC", "IO_SIZE", "K_ROFF", "STOP_CAP", "STOP_MATCH", "STOP_FORK", "STOP_INEXACT"]

# io: next row, lanes used, queue head and tail, peak, killed and best-set lanes reported (of
# those made before the call: the others have no object to follow them),
# resume row, status, whether start rows were dropped after the head, rows of ``made``, matches
# recorded in ``rec``
IO_J, IO_NL, IO_QH, IO_QT, IO_PEAK, IO_NKILL, IO_NBEST, IO_RESUME, IO_STATUS, IO_MIDDLE, IO_NMADE, IO_NREC = range(12)
IO_SIZE = 12
STOP_CAP, STOP_MATCH, STOP_FORK, STOP_INEXACT = 1, 2, 3, 4
FORK = -2  # (cep.lanes.FORK: the runs of a start row fork on the row)
_EXACT = float(2**53)  # a running sum at or past this may be rounded: stored as inf (see EK.run_many)

# numba's on-disk cache of ``step`` is keyed on this file alone, yet ``step`` compiles the
# interpreter of cep/_expr_kernel.py in: a cache made before that file changed would run the old
# bytecode. So the cache is used only while that file is the one hashed here (a test checks the
# hash; after changing the interpreter, put its new hash here, which also renews the cache).
EXPR_KERNEL_SHA256 = "38d9d8dd067c945f76f880ab52c8dfd11087314f7bc46078f23552c3828de699"
try:
    _CACHE = hashlib.sha256(Path(EK.__file__).read_bytes()).hexdigest() == EXPR_KERNEL_SHA256
except OSError:  # (no source file: compile in this process, cache nothing)
    _CACHE = False

# inlined into the loop (numba IR): a call passing its 14 arrays cost about a quarter of the loop's
# time per row on the 200-rule benchmark's V-shapes (one or two live start rows per call)
_many = njit(error_model="numpy", inline="always")(EK.run_many)

_CUR, _START, _EQ, _NE, _LT, _LE, _GT = EK.CUR, EK.START, EK.EQ, EK.NE, EK.LT, EK.LE, EK.GT


@njit(error_model="numpy", inline="always")
def _compare(simple, lits, XB, xr, L_S, ids, nid, out):  # pragma: no cover - compiled
    """``run_many`` of a condition that compares two operands, each the current row's value, a
    value the lane keeps or a literal (``simple``: their opcodes and indexes, the comparison;
    cep.lanes._simple_program), read without the stack: the V-shape's ``LAST(U.close) >=
    S.close`` ran through the interpreter at about 14 ns per row, a fifth of the loop. No
    arithmetic, so always exact."""
    ku, au, kv, av, op = simple[0], simple[1], simple[2], simple[3], simple[4]
    for x in range(nid):
        if ku == _CUR:
            u = XB[xr, au]
        elif ku == _START:
            u = L_S[ids[x], au]
        else:
            u = lits[au]
        if kv == _CUR:
            v = XB[xr, av]
        elif kv == _START:
            v = L_S[ids[x], av]
        else:
            v = lits[av]
        if op == _EQ:
            got = u == v
        elif op == _NE:
            got = u != v and u == u and v == v
        elif op == _LT:
            got = u < v
        elif op == _LE:
            got = u <= v
        elif op == _GT:
            got = u > v
        else:
            got = u >= v
        out[x] = got


@njit(cache=_CACHE, error_model="numpy")
def step(XB, s, n, masks, ts, rno0, io,
         L_start, L_ts, L_k, L_kb, L_sid, L_bx, L_S, L_SUM, L_CNT, L_alive, L_best, Q, killed, bested, made, rec,
         code_r, lits_r, code_b, lits_b, simple_r, simple_b, bit_r, bit_b, start_bits,
         has_r, has_b, dec, nthreads, can_fork, lvar, lx, agg_x, upd, within, cap, depth):  # pragma: no cover - compiled
    cap_q = Q.shape[0]
    na = agg_x.shape[0]
    noted = np.zeros(L_best.shape[0], np.int8)  # lanes already in ``bested``
    free = np.empty(n + 1, np.int64)
    free[0] = 0
    _run(XB, s, n, masks, ts, rno0, io, L_start, L_ts, L_k, L_kb, L_sid, L_bx, L_S, L_SUM, L_CNT, L_alive, L_best,
         Q, killed, bested, made, rec, io[IO_NL], free, noted, np.empty(cap_q, np.int64), np.zeros(cap_q, np.bool_),
         np.zeros(cap_q, np.bool_), np.zeros(cap_q, np.bool_), np.empty((depth, cap_q)),
         np.zeros((3, na), np.int64), np.zeros((3, na)),
         code_r, lits_r, code_b, lits_b, simple_r, simple_b, bit_r, bit_b, start_bits,
         has_r, has_b, dec, nthreads, can_fork, lvar, lx, agg_x, upd, within, cap)


# keys: one row per key of a batch, its fields at these indexes (in: first batch row, rows, first
# partition row number, resume row, start of its queue in Q, its queued lanes; out: its made rows'
# start in ``made``, its recorded matches' start in ``rec``, then the io of its call from K_IO)
K_S, K_N, K_RNO, K_RESUME, K_QOFF, K_QLEN, K_MOFF, K_ROFF = range(8)
K_IO = 8
K_SIZE = K_IO + IO_SIZE


@njit(cache=_CACHE, error_model="numpy")
def step_batch(XB, masks, ts, keys, nl, peak,
               L_start, L_ts, L_k, L_kb, L_sid, L_bx, L_S, L_SUM, L_CNT, L_alive, L_best, Q, killed, bested, made, rec,
               code_r, lits_r, code_b, lits_b, simple_r, simple_b, bit_r, bit_b, start_bits,
               has_r, has_b, dec, nthreads, can_fork, lvar, lx, agg_x, upd, within, cap, depth):  # pragma: no cover - compiled
    """:func:`step` for every key of a batch in one call, each from its own first row to its
    first row that needs the engine (or its last); the lanes of all keys share the arrays (one
    pool), each key its part of ``Q`` (``K_QOFF``), ``killed``/``bested`` are one list for all,
    ``made`` and ``rec`` one list each with each key's part from ``K_MOFF`` / ``K_ROFF``. Returns
    (lanes used, killed, bested, made, recorded matches)."""
    nk_all = keys.shape[0]
    cap_q = 1
    for x in range(nk_all):
        c = keys[x, K_QLEN] + keys[x, K_N]
        if c > cap_q:
            cap_q = c
    na = agg_x.shape[0]
    noted = np.zeros(L_best.shape[0], np.int8)
    ids = np.empty(cap_q, np.int64)
    prev_ok = np.zeros(cap_q, np.bool_)
    out_r = np.zeros(cap_q, np.bool_)
    out_b = np.zeros(cap_q, np.bool_)
    stack = np.empty((depth, cap_q))
    add_cnt = np.zeros((3, na), np.int64)
    add_sum = np.zeros((3, na))
    rows = 0
    for x in range(nk_all):
        rows += keys[x, K_N]
    free = np.empty(rows + 1, np.int64)  # (the lanes made in the call that left their queue: reused)
    free[0] = 0
    nl0 = nl
    nk = 0
    nb = 0
    nm = 0
    nr = 0
    for x in range(nk_all):
        io = keys[x, K_IO:]
        io[IO_NL] = nl
        io[IO_QT] = keys[x, K_QLEN]
        io[IO_PEAK] = peak
        io[IO_RESUME] = keys[x, K_RESUME]
        io[IO_NKILL] = nk
        io[IO_NBEST] = nb
        keys[x, K_MOFF] = nm
        keys[x, K_ROFF] = nr
        q0 = keys[x, K_QOFF]
        nb0 = nb
        _run(XB, keys[x, K_S], keys[x, K_N], masks, ts, keys[x, K_RNO], io, L_start, L_ts, L_k, L_kb, L_sid, L_bx,
             L_S, L_SUM, L_CNT, L_alive, L_best, Q[q0: q0 + keys[x, K_QLEN] + keys[x, K_N]], killed, bested,
             made[nm:], rec[nr:], nl0, free, noted, ids, prev_ok, out_r, out_b, stack, add_cnt, add_sum,
             code_r, lits_r, code_b, lits_b, simple_r, simple_b, bit_r, bit_b, start_bits,
             has_r, has_b, dec, nthreads, can_fork, lvar, lx, agg_x, upd, within, cap)
        nl = io[IO_NL]
        peak = io[IO_PEAK]
        nk = io[IO_NKILL]
        nb = io[IO_NBEST]
        nm += io[IO_NMADE]
        nr += io[IO_NREC]
        for y in range(nb0, nb):  # (``noted`` is per call)
            noted[bested[y]] = 0
    return nl, nk, nb, nm, nr


@njit(cache=_CACHE, error_model="numpy", inline="always")
def _drop(i, L_alive, L_sid, nthreads, nl0, free):  # pragma: no cover - compiled
    """Drop queued lane ``i`` (a start row a match rules out or skips past): its runs, to take off
    the key's total; a lane made in this call goes on the free list (no object knows it)."""
    if i >= nl0:
        free[0] += 1
        free[free[0]] = i
    return nthreads[L_sid[i]] if L_alive[i] != 0 else 0


@njit(cache=_CACHE, error_model="numpy")
def _run(XB, s, n, masks, ts, rno0, io,
         L_start, L_ts, L_k, L_kb, L_sid, L_bx, L_S, L_SUM, L_CNT, L_alive, L_best, Q, killed, bested, made, rec,
         nl0, free, noted, ids, prev_ok, out_r, out_b, stack, add_cnt, add_sum,
         code_r, lits_r, code_b, lits_b, simple_r, simple_b, bit_r, bit_b, start_bits,
         has_r, has_b, dec, nthreads, can_fork, lvar, lx, agg_x, upd, within, cap):  # pragma: no cover - compiled
    na = agg_x.shape[0]
    nlc = lx.shape[0]
    keep_rb = False  # whether a kept value is set by an R or B row (else only at the start)
    for q in range(nlc):
        if lvar[q] != 0:
            keep_rb = True
    cond_r = code_r.shape[0] > 0
    cond_b = code_b.shape[0] > 0
    j = io[IO_J]
    nl = io[IO_NL]
    qh = io[IO_QH]
    qt = io[IO_QT]
    peak = io[IO_PEAK]
    nk = io[IO_NKILL]
    nb = io[IO_NBEST]
    resume = io[IO_RESUME]
    nr = io[IO_NREC]
    io[IO_STATUS] = 0
    while j < n:
        rno = rno0 + j
        m = masks[s + j]
        t = ts[s + j]
        xr = s + j  # (the row's values are read from XB in place: a view of the row per row costs its reference count)
        starts = (m & start_bits) != 0 and rno >= resume
        if qt == qh and not starts:
            j += 1
            continue
        for v in range(3):
            for q in range(na):
                add_cnt[v, q] = 0
                add_sum[v, q] = 0.0
                if upd[v, q]:
                    x = agg_x[q]
                    if x < 0:
                        add_cnt[v, q] = 1
                    elif XB[xr, x] == XB[xr, x]:
                        add_cnt[v, q] = 1
                        add_sum[v, q] = XB[xr, x]
        take_r = (m & bit_r) != 0
        take_b = (m & bit_b) != 0
        total = 0
        nid = 0
        for qi in range(qh, qt):
            i = Q[qi]
            if L_alive[i] == 0:
                continue
            if within >= 0 and t - L_ts[i] >= within:
                L_alive[i] = 0
                if i < nl0:  # (only start rows with an object made before the call are reported)
                    killed[nk] = i
                    nk += 1
                continue
            ids[nid] = i
            nid += 1
        # each condition for every live start row at once (one instruction over all of them)
        exact = True
        if nid > 0 and take_r and cond_r and simple_r.shape[0]:
            _compare(simple_r, lits_r, XB, xr, L_S, ids, nid, out_r)
        elif nid > 0 and take_r and cond_r:
            cur = XB[xr]
            exact = _many(code_r, lits_r, cur, cur, ids, nid, prev_ok, L_S, L_CNT, L_SUM, add_cnt[1],
                          add_sum[1], stack, out_r)
        if nid > 0 and take_b and cond_b and simple_b.shape[0]:
            _compare(simple_b, lits_b, XB, xr, L_S, ids, nid, out_b)
        elif nid > 0 and take_b and cond_b:
            cur = XB[xr]
            exact = _many(code_b, lits_b, cur, cur, ids, nid, prev_ok, L_S, L_CNT, L_SUM, add_cnt[2],
                          add_sum[2], stack, out_b) and exact
        if not exact:  # an intermediate reached 2**53: the row goes to the exact path, nothing of it applied
            io[IO_STATUS] = STOP_INEXACT
            break
        if can_fork and take_r and take_b:
            # a start row whose runs fork on this row needs node chains: back to Python before
            # anything of the row is changed
            fork = False
            for x in range(nid):
                i = ids[x]
                sid = L_sid[i]
                o = 0
                if has_r[sid] and (out_r[x] or not cond_r):
                    o |= 1
                if has_b[sid] and (out_b[x] or not cond_b):
                    o |= 2
                if dec[4 * sid + o] >> 4 == FORK + 2:
                    fork = True
                    break
            if fork:
                io[IO_STATUS] = STOP_FORK
                break
        for x in range(nid):
            i = ids[x]
            sid = L_sid[i]
            o = 0
            if take_r and has_r[sid] and (out_r[x] or not cond_r):
                o |= 1
            if take_b and has_b[sid] and (out_b[x] or not cond_b):
                o |= 2
            d = dec[4 * sid + o]  # (next state + 2) << 4 | variable taken << 2 | match
            bs = d & 3
            if bs != 0:
                L_best[i] = rno
                L_bx[i] = L_k[i] + (1 if bs == 2 else 0)
                if i < nl0 and noted[i] == 0:
                    noted[i] = 1
                    bested[nb] = i
                    nb += 1
            nx = (d >> 4) - 2
            if nx < 0:
                L_alive[i] = 0
                if i < nl0:
                    killed[nk] = i
                    nk += 1
                continue
            v = (d >> 2) & 3
            if v == 1:
                L_k[i] += 1
            else:
                L_kb[i] += 1
            for q in range(na):
                L_CNT[i, q] += add_cnt[v, q]
                L_SUM[i, q] += add_sum[v, q]
                if abs(L_SUM[i, q]) >= _EXACT:
                    L_SUM[i, q] = np.inf
            if keep_rb:
                for q in range(nlc):
                    if lvar[q] == v:
                        L_S[i, q] = XB[xr, lx[q]]
            L_sid[i] = nx
            total += nthreads[nx]
        if starts:
            if free[0] > 0:  # (a lane this call made and dropped: no object knows it)
                i = free[free[0]]
                free[0] -= 1
            else:
                i = nl
                nl += 1
            L_start[i] = rno
            L_ts[i] = t
            L_k[i] = 0
            L_kb[i] = 0
            L_sid[i] = 0
            L_bx[i] = 0
            L_alive[i] = 1
            L_best[i] = -1
            for q in range(nlc):
                L_S[i, q] = XB[xr, lx[q]] if lvar[q] == 0 else np.nan
            for q in range(na):
                L_CNT[i, q] = add_cnt[0, q]
                L_SUM[i, q] = add_sum[0, q]
            Q[qt] = i
            qt += 1
            total += nthreads[0]
        if qt > qh:
            if qt - qh > 1 and total > cap:
                io[IO_STATUS] = STOP_CAP
                break
            stop = False
            while qt > qh:
                h = Q[qh]
                if L_alive[h] != 0:
                    end = L_best[h]
                    if end >= 0:
                        r = qh + 1
                        while r < qt and L_start[Q[r]] <= end:
                            total -= _drop(Q[r], L_alive, L_sid, nthreads, nl0, free)
                            r += 1
                        if r > qh + 1:
                            w = qh + 1
                            for x in range(r, qt):
                                Q[w] = Q[x]
                                w += 1
                            qt = w
                            io[IO_MIDDLE] = 1
                    break
                if L_best[h] < 0:
                    if h >= nl0:  # (made in this call, no object: its lane is free again)
                        free[0] += 1
                        free[free[0]] = h
                    qh += 1
                    continue
                if L_bx[h] >= 0:
                    if h >= nl0:
                        free[0] += 1
                        free[free[0]] = h
                    # the head ended with a match: recorded (start, last row, its R rows) for the
                    # engine to output after the call, and the rows it covers skipped past, as
                    # PatternAutomaton._resolve does with AFTER MATCH SKIP PAST LAST ROW
                    rec[nr, 0] = L_start[h]
                    rec[nr, 1] = L_best[h]
                    rec[nr, 2] = L_bx[h]
                    nr += 1
                    resume = L_best[h] + 1
                    qh += 1
                    while qh < qt and L_start[Q[qh]] < resume:
                        total -= _drop(Q[qh], L_alive, L_sid, nthreads, nl0, free)
                        qh += 1
                    continue
                stop = True  # (a match whose rows the engine holds as a node chain: it outputs it)
                break
            if stop:
                io[IO_STATUS] = STOP_MATCH
                break
            if total > peak:
                peak = total
        j += 1
    io[IO_J] = j
    io[IO_NL] = nl
    io[IO_QH] = qh
    io[IO_QT] = qt
    io[IO_PEAK] = peak
    io[IO_NKILL] = nk
    io[IO_NBEST] = nb
    io[IO_RESUME] = resume
    io[IO_NREC] = nr
    # the lanes made in this call still queued, in queue order (the engine makes their start-row
    # objects from these rows: one read instead of one per lane and field)
    nm = 0
    for x in range(qh, qt):
        i = Q[x]
        if i >= nl0:
            made[nm, 0] = i
            made[nm, 1] = L_start[i]
            made[nm, 2] = L_ts[i]
            made[nm, 3] = L_alive[i]
            made[nm, 4] = L_best[i]
            made[nm, 5] = L_bx[i]
            nm += 1
    io[IO_NMADE] = nm
