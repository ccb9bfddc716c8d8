"""The batch path's compiled loops after the scan: term ids to key hits, key hits to matches.

Both run document by document inside one compiled call (numba), with stamp arrays (an entry
holds the number of the document that last set it) in place of sets: a document's keys are
stamped once, then each of its postings, candidates, clauses and forbidden keys costs an array
read, not a ``searchsorted`` over the batch's codes or a Python object. Without numba the
numpy path of :class:`~cep.percolator.segment._Segment` gives the same answers (tested both
ways against running every query).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cep.percolator.tokens import _kernels

__all__ = ["_keys_loop", "_loops", "_match_loop"]

# a candidate's kind (as _Segment.a_kind): decided by its keys, by ranges, in Python, by a
# sloppy pair of terms
_V_KEYS, _V_RANGES, _V_PYTHON, _V_PAIR = 0, 1, 2, 3


def _keys_loop(tids: np.ndarray, first: np.ndarray, nkeys: int, frozen: int, ptr: np.ndarray,
               vals: np.ndarray, positional: np.ndarray, single: np.ndarray, p: int,
               pcodes: np.ndarray, pbits: np.ndarray, e_ptr: np.ndarray, e_kid: np.ndarray,
               r_ptr: np.ndarray, r_ids: np.ndarray, x_at: np.ndarray,
               x_kid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per document (tokens ``first[d]..first[d + 1]`` of ``tids``): the keys its terms hold
    (term ``t`` below ``frozen``: ``vals[ptr[t]:ptr[t + 1]]``; tokens ``x_at`` (ascending) hold
    ``x_kid`` besides) and, where it holds one value (``single``), its exact phrases (pairs of
    phrase words as in ``tokens._phrases_loop``).

    Returns the distinct codes ``doc * nkeys + key`` (by document; a document's in no
    particular order) and every occurrence of a ``positional`` key: its code and the term's
    index in the document, in the order of the terms (compiled by numba)."""
    n = len(first) - 1
    stamp = np.zeros(max(nkeys, 1), dtype=np.int32)
    hk = np.empty(max(nkeys, 1), dtype=np.int64)  # the document's distinct keys
    cap = 1024
    codes = np.empty(cap, dtype=np.int64)
    m = 0
    o_cap = len(tids) + len(x_at) + 1  # one occurrence per token and extra key at most
    o_key = np.empty(o_cap, dtype=np.int64)
    o_pos = np.empty(o_cap, dtype=np.int64)
    o = 0
    xi = 0
    nx = len(x_at)
    npc = len(pcodes)
    bitmap = len(pbits) > 0
    for d in range(n):
        mark = d + 1
        b0 = first[d]
        b1 = first[d + 1]
        cnt = 0
        o0 = o
        for i in range(b0, b1):
            t = tids[i]
            if 0 <= t < frozen:
                for x in range(ptr[t], ptr[t + 1]):
                    key = vals[x]
                    if stamp[key] != mark:
                        stamp[key] = mark
                        hk[cnt] = key
                        cnt += 1
                    if positional[key]:
                        o_key[o] = key
                        o_pos[o] = i - b0
                        o += 1
            while xi < nx and x_at[xi] == i:
                key = x_kid[xi]
                xi += 1
                if stamp[key] != mark:
                    stamp[key] = mark
                    hk[cnt] = key
                    cnt += 1
                if positional[key]:
                    o_key[o] = key
                    o_pos[o] = i - b0
                    o += 1
        if single[d] and npc:
            for i in range(b0, b1 - 1):
                a = tids[i]
                b = tids[i + 1]
                if a < 0 or a >= p or b < 0 or b >= p:
                    continue
                code = np.int64(a) * p + b
                if bitmap and not (pbits[code >> 3] >> (code & 7)) & 1:
                    continue  # no phrase starts with this pair (one bit read, in cache)
                j = np.searchsorted(pcodes, code)
                if j == npc or pcodes[j] != code:
                    continue
                for e in range(e_ptr[j], e_ptr[j + 1]):
                    lo = r_ptr[e]
                    rest = r_ptr[e + 1] - lo
                    if i + 2 + rest > b1:
                        continue
                    same = True
                    for y in range(rest):
                        if tids[i + 2 + y] != r_ids[lo + y]:
                            same = False
                            break
                    if same:
                        key = e_kid[e]
                        if stamp[key] != mark:
                            stamp[key] = mark
                            hk[cnt] = key
                            cnt += 1
        if m + cnt > cap:
            while m + cnt > cap:
                cap *= 2
            grown = np.empty(cap, dtype=np.int64)
            grown[:m] = codes[:m]
            codes = grown
        for y in range(cnt):
            codes[m + y] = d * nkeys + hk[y]
        m += cnt
        for y in range(o0, o):
            o_key[y] += d * nkeys
    return codes[:m], o_key[:o], o_pos[:o]


def _match_loop(codes: np.ndarray, n: int, nkeys: int, nl: int,
                proven_ptr: np.ndarray, proven_vals: np.ndarray,
                pair_ptr: np.ndarray, pair_k2: np.ndarray, pair_local: np.ndarray,
                pair_sure: np.ndarray, cand_ptr: np.ndarray, cand_vals: np.ndarray,
                always: np.ndarray, allowed: np.ndarray, clause_ptr: np.ndarray,
                clause_kptr: np.ndarray, clause_keys: np.ndarray, forbid_ptr: np.ndarray,
                forbid_vals: np.ndarray, kind: np.ndarray, pair_terms: np.ndarray,
                pair_single: np.ndarray, occ_code: np.ndarray,
                occ_pos: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per document of a batch, from its keys (sorted distinct ``codes``, ``doc * nkeys +
    key``): the queries its keys prove (proven postings, and pair postings whose second key
    is there and decides), its candidates (counted), and of those that pass the metadata
    filter (``allowed`` per local number; empty: all), those whose clauses (an OR of keys
    each) all hold and no forbidden key is there: decided by keys (a match), by ranges (left
    to the caller), by a sloppy pair of terms (checked here from the occurrences ``occ_code``,
    ``occ_pos``: by document, each key's in ascending position, where the pair's field holds one
    value: ``pair_single[field, doc]``), or in Python (left to the caller).

    Returns ``(matches, range candidates, Python candidates)`` as codes ``doc * nl + local``
    (each document's in no particular order), candidates per document and queries verified per
    document (the sloppy pairs decided here) (compiled by numba)."""
    kstamp = np.zeros(max(nkeys, 1), dtype=np.int32)
    mstamp = np.zeros(max(nl, 1), dtype=np.int32)
    cstamp = np.zeros(max(nl, 1), dtype=np.int32)
    cands = np.empty(max(nl, 1), dtype=np.int64)  # the document's distinct candidates
    cap = 1024
    out = np.empty(cap, dtype=np.int64)
    m = 0
    r_cap = 64
    r_out = np.empty(r_cap, dtype=np.int64)
    r = 0
    p_cap = 64
    p_out = np.empty(p_cap, dtype=np.int64)
    q = 0
    cand_count = np.zeros(n, dtype=np.int64)
    verified = np.zeros(n, dtype=np.int64)
    filtered = len(allowed) > 0
    pa = np.empty(len(occ_code) + 1, dtype=np.int64)  # a pair's positions of each term
    pb = np.empty(len(occ_code) + 1, dtype=np.int64)
    o_lo = 0
    o_hi = 0
    at = 0
    ncodes = len(codes)
    for d in range(n):
        mark = d + 1
        lo_c = at
        while at < ncodes and codes[at] < (d + 1) * nkeys:
            kstamp[codes[at] - d * nkeys] = mark
            at += 1
        hi_c = at
        # room for this document's matches: at most one per query
        if m + nl > cap:
            while m + nl > cap:
                cap *= 2
            grown = np.empty(cap, dtype=np.int64)
            grown[:m] = out[:m]
            out = grown
        nc = 0
        base = d * nl
        for c in range(lo_c, hi_c):
            key = codes[c] - d * nkeys
            for x in range(proven_ptr[key], proven_ptr[key + 1]):
                loc = proven_vals[x]
                if mstamp[loc] != mark:
                    mstamp[loc] = mark
                    out[m] = base + loc
                    m += 1
            for x in range(pair_ptr[key], pair_ptr[key + 1]):
                if kstamp[pair_k2[x]] != mark:
                    continue
                loc = pair_local[x]
                if pair_sure[x]:
                    if mstamp[loc] != mark:
                        mstamp[loc] = mark
                        out[m] = base + loc
                        m += 1
                elif cstamp[loc] != mark:
                    cstamp[loc] = mark
                    cands[nc] = loc
                    nc += 1
            for x in range(cand_ptr[key], cand_ptr[key + 1]):
                loc = cand_vals[x]
                if cstamp[loc] != mark:
                    cstamp[loc] = mark
                    cands[nc] = loc
                    nc += 1
        for loc in always:
            if cstamp[loc] != mark:
                cstamp[loc] = mark
                cands[nc] = loc
                nc += 1
        cand_count[d] = nc
        occ_ready = False
        for y in range(nc):
            loc = cands[y]
            if filtered and not allowed[loc]:
                continue
            ok = True
            for cl in range(clause_ptr[loc], clause_ptr[loc + 1]):
                hit = False
                for x in range(clause_kptr[cl], clause_kptr[cl + 1]):
                    if kstamp[clause_keys[x]] == mark:
                        hit = True
                        break
                if not hit:
                    ok = False
                    break
            if not ok:
                continue
            for x in range(forbid_ptr[loc], forbid_ptr[loc + 1]):
                if kstamp[forbid_vals[x]] == mark:
                    ok = False
                    break
            if not ok:
                continue
            kd = kind[loc]
            if kd == _V_PAIR and not pair_single[pair_terms[loc, 4], d]:
                kd = _V_PYTHON  # several values: checked one by one
            if kd == _V_KEYS:
                if mstamp[loc] != mark:
                    mstamp[loc] = mark
                    out[m] = base + loc
                    m += 1
            elif kd == _V_RANGES:
                if r == r_cap:
                    r_cap *= 2
                    grown = np.empty(r_cap, dtype=np.int64)
                    grown[:r] = r_out[:r]
                    r_out = grown
                r_out[r] = base + loc
                r += 1
            elif kd == _V_PYTHON:
                if q == p_cap:
                    p_cap *= 2
                    grown = np.empty(p_cap, dtype=np.int64)
                    grown[:q] = p_out[:q]
                    p_out = grown
                p_out[q] = base + loc
                q += 1
            else:
                # some occurrence i of the first term and j of the second (distinct
                # positions) with |j - i - delta| <= slop; each term's occurrences ascending
                verified[d] += 1
                ka = d * nkeys + pair_terms[loc, 0]
                kb = d * nkeys + pair_terms[loc, 1]
                delta = pair_terms[loc, 2]
                slop = pair_terms[loc, 3]
                if not occ_ready:  # the document's occurrences, found once
                    o_lo = np.searchsorted(occ_code, d * nkeys)  # type: ignore[assignment]
                    o_hi = np.searchsorted(occ_code, (d + 1) * nkeys)  # type: ignore[assignment]
                    occ_ready = True
                na = 0
                nb = 0
                for x in range(o_lo, o_hi):  # each term's positions, ascending
                    if occ_code[x] == ka:
                        pa[na] = occ_pos[x]
                        na += 1
                    if occ_code[x] == kb:
                        pb[nb] = occ_pos[x]
                        nb += 1
                found = False
                jb = 0
                for ia in range(na):
                    i = pa[ia]
                    while jb < nb and pb[jb] < i + delta - slop:
                        jb += 1
                    jj = jb
                    while jj < nb and pb[jj] <= i + delta + slop:
                        if pb[jj] != i:
                            found = True
                            break
                        jj += 1
                    if found:
                        break
                if found and mstamp[loc] != mark:
                    mstamp[loc] = mark
                    out[m] = base + loc
                    m += 1
    return out[:m], r_out[:r], p_out[:q], cand_count, verified


_COMPILED: list[tuple[Callable[..., Any], ...] | None] = []


def _loops() -> tuple[Callable[..., Any], ...] | None:
    """``(_keys_loop, _match_loop)`` compiled by numba (cached on disk), or None wherever the
    token loops are off (no numba, ``CEP_NO_NUMBA``, or a test asking for numpy alone)."""
    if _kernels() is None:
        return None
    if _COMPILED:
        return _COMPILED[0]
    import numba

    jit = numba.njit(cache=True, nogil=True)
    got = (jit(_keys_loop), jit(_match_loop))
    # compiled (or read from numba's cache) now, not inside the first batch
    i64 = np.zeros(1, dtype=np.int64)
    ptr = np.zeros(2, dtype=np.int64)
    flag = np.zeros(1, dtype=bool)
    got[0](np.zeros(1, dtype=np.int32), np.array([0, 1]), 1, 0, ptr, i64, flag,
           np.ones(1, dtype=bool), 0, i64, np.zeros(1, dtype=np.uint8), ptr, i64, ptr, i64, i64,
           i64)
    got[1](i64, 1, 1, 1, ptr, i64, ptr, i64, i64, flag, ptr, i64, i64, flag, ptr, ptr, i64,
           ptr, i64, np.zeros(1, dtype=np.int8), np.zeros((1, 5), dtype=np.int64),
           np.ones((1, 1), dtype=bool), i64, i64)
    _COMPILED.append(got)
    return got
