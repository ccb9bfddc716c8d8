"""Reading and writing the Apache DataSketches HLL serialisation (serVer 1, family 7).

Layout (little-endian), as documented in DataSketches' ``hll/PreambleUtil.java``:

======  ==========================================================================
byte    field
======  ==========================================================================
0       preamble ints: 2 (LIST), 3 (SET) or 10 (HLL)
1       serialisation version, 1
2       family id, 7 (HLL)
3       lgK (our p)
4       lgArr: log2 of the coupon array (LIST/SET), or of the HLL_4 aux array
5       flags: 4 empty, 8 compact, 16 out-of-order, 32 rebuild-kxq (union only)
6       LIST: coupon count; HLL: curMin
7       mode: low 2 bits LIST 0 / SET 1 / HLL 2; next 2 bits HLL_4 0 / HLL_6 1 / HLL_8 2
LIST    coupons (int32) from byte 8
SET     coupon count (int32) at 8, coupons from 12
HLL     HIP accumulator (f64) at 8, KxQ0 (f64) at 16, KxQ1 (f64) at 24,
        number at curMin (i32) at 32, aux count (i32) at 36, registers from 40
======  ==========================================================================

A coupon is ``(rank << 26) | address`` where address is the low 26 bits of the hash's first half.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np

from sketches.errors import SketchFormatError

__all__ = ["decode", "encode_coupons", "encode_hll8"]

FAMILY_ID = 7
SER_VER = 1
LIST_PREINTS, SET_PREINTS, HLL_PREINTS = 2, 3, 10
MODE_LIST, MODE_SET, MODE_HLL = 0, 1, 2
HLL_4, HLL_6, HLL_8 = 0, 1, 2
FLAG_EMPTY, FLAG_COMPACT, FLAG_OUT_OF_ORDER = 4, 8, 16
HLL_BYTE_ARR_START = 40
AUX_TOKEN = 15
_NAME = "DataSketches HLL"


def _preamble(pre_ints: int, p: int, lg_arr: int, flags: int, byte6: int, mode: int) -> bytes:
    return bytes((pre_ints, SER_VER, FAMILY_ID, p, lg_arr, flags, byte6, (HLL_8 << 2) | mode))


def encode_coupons(
    p: int, keys: np.ndarray, dense: Callable[[], tuple[np.ndarray, float]]
) -> bytes:
    """Encode sparse keys (address << 6 | rank) the way DataSketches would hold them.

    LIST below 8 coupons, SET up to DataSketches' own promotion point (3/4 of 2**(p-3) slots,
    only for p >= 8), HLL_8 beyond it.
    """
    k = keys.astype(np.uint32)
    coupons = ((k & np.uint32(63)) << np.uint32(26)) | (k >> np.uint32(6))
    count = len(coupons)
    if count == 0:
        return _preamble(LIST_PREINTS, p, 3, FLAG_EMPTY | FLAG_COMPACT, 0, MODE_LIST)
    if count < 8:
        head = _preamble(LIST_PREINTS, p, 3, FLAG_COMPACT, count, MODE_LIST)
        return head + coupons.astype("<u4").tobytes()
    if p >= 8 and 4 * count <= 3 * (1 << (p - 3)):
        lg_arr = 5
        while 4 * count > 3 * (1 << lg_arr):
            lg_arr += 1
        head = _preamble(SET_PREINTS, p, lg_arr, FLAG_COMPACT, 0, MODE_SET)
        return head + struct.pack("<i", count) + coupons.astype("<u4").tobytes()
    regs, estimate = dense()
    return encode_hll8(p, regs, estimate)


def encode_hll8(p: int, regs: np.ndarray, estimate: float) -> bytes:
    """Encode dense registers as an updatable HLL_8 image flagged out-of-order."""
    vals = regs.astype(np.int64)
    low = vals < 32
    kxq0 = float(np.ldexp(1.0, -vals[low]).sum())
    kxq1 = float(np.ldexp(1.0, -vals[~low]).sum())
    at_min = int(np.count_nonzero(vals == 0))
    head = _preamble(HLL_PREINTS, p, 0, FLAG_OUT_OF_ORDER, 0, MODE_HLL)
    body = struct.pack("<dddii", estimate, kxq0, kxq1, at_min, 0)
    return head + body + regs.astype(np.uint8).tobytes()


def decode(raw: bytes) -> tuple[int, np.ndarray | None, np.ndarray | None]:
    """Decode an image into (p, sparse keys or None, dense registers or None)."""
    if len(raw) < 8:
        raise SketchFormatError(
            f"truncated {_NAME} image: got {len(raw)} byte(s), the preamble alone is 8"
        )
    pre_ints, ser_ver, family, p, lg_arr, flags, byte6, mode_byte = raw[:8]
    if family != FAMILY_ID:
        raise SketchFormatError(
            f"not a {_NAME} image: family id is {family}, expected {FAMILY_ID}"
            + ("; this looks like one of our own sketches: use from_bytes" if raw[0] > 10 else "")
        )
    if ser_ver != SER_VER:
        raise SketchFormatError(
            f"unsupported {_NAME} serialisation version {ser_ver}: expected {SER_VER}"
        )
    if not 4 <= p <= 21:
        raise SketchFormatError(f"corrupt {_NAME} image: lgK={p} outside 4..21")
    cur_mode = mode_byte & 3
    tgt = (mode_byte >> 2) & 3
    compact = bool(flags & FLAG_COMPACT)
    if flags & FLAG_EMPTY:
        return p, np.empty(0, dtype=np.uint32), None
    expected_pre = {MODE_LIST: LIST_PREINTS, MODE_SET: SET_PREINTS, MODE_HLL: HLL_PREINTS}
    if cur_mode not in expected_pre or pre_ints != expected_pre[cur_mode]:
        raise SketchFormatError(
            f"corrupt {_NAME} image: mode {cur_mode} with {pre_ints} preamble ints"
        )
    if cur_mode == MODE_LIST:
        n = byte6 if compact else 1 << lg_arr
        coupons = _ints(raw, 8, n)
        return p, _keys_from_coupons(coupons), None
    if cur_mode == MODE_SET:
        _need(raw, 12)
        (count,) = struct.unpack_from("<i", raw, 8)
        n = count if compact else 1 << lg_arr
        coupons = _ints(raw, 12, n)
        return p, _keys_from_coupons(coupons), None
    return p, None, _decode_hll(raw, p, tgt, lg_arr, byte6, compact)


def _need(raw: bytes, n: int) -> None:
    if len(raw) < n:
        raise SketchFormatError(
            f"truncated {_NAME} image: needs at least {n} bytes, got {len(raw)}"
        )


def _ints(raw: bytes, start: int, n: int) -> np.ndarray:
    _need(raw, start + 4 * n)
    return np.frombuffer(raw, dtype="<u4", count=n, offset=start).astype(np.uint32)


def _keys_from_coupons(coupons: np.ndarray) -> np.ndarray:
    c = coupons[coupons != 0]
    return ((c & np.uint32((1 << 26) - 1)) << np.uint32(6)) | (c >> np.uint32(26))


def _decode_hll(
    raw: bytes, p: int, tgt: int, lg_arr: int, cur_min: int, compact: bool
) -> np.ndarray:
    k = 1 << p
    start = HLL_BYTE_ARR_START
    if tgt == HLL_8:
        _need(raw, start + k)
        return np.frombuffer(raw, dtype=np.uint8, count=k, offset=start).copy()
    if tgt == HLL_6:
        # 6-bit registers packed little-endian: slot i at bit 6*i of a 16-bit window.
        nbytes = (k * 3 >> 2) + 1
        _need(raw, start + nbytes)
        data = np.zeros(nbytes + 1, dtype=np.uint16)
        data[:nbytes] = np.frombuffer(raw, dtype=np.uint8, count=nbytes, offset=start)
        bit = np.arange(k, dtype=np.int64) * 6
        window = data[bit >> 3] | (data[(bit >> 3) + 1] << np.uint16(8))
        return ((window >> (bit & 7).astype(np.uint16)) & np.uint16(63)).astype(np.uint8)
    if tgt == HLL_4:
        # 4-bit offsets from curMin, even slots in the low nibble; 15 means "see the aux map".
        nbytes = k // 2
        _need(raw, start + nbytes)
        data = np.frombuffer(raw, dtype=np.uint8, count=nbytes, offset=start)
        nibbles = np.empty(k, dtype=np.uint8)
        nibbles[0::2] = data & 15
        nibbles[1::2] = data >> 4
        regs = nibbles.astype(np.int64) + cur_min
        (aux_count,) = struct.unpack_from("<i", raw, 36)
        aux_n = aux_count if compact else (1 << lg_arr if aux_count else 0)
        aux = _ints(raw, start + nbytes, aux_n)
        aux = aux[aux != 0]
        slots = (aux & np.uint32((1 << 26) - 1)).astype(np.int64) & (k - 1)
        regs[slots] = (aux >> np.uint32(26)).astype(np.int64)
        missing = np.setdiff1d(np.flatnonzero(nibbles == AUX_TOKEN), slots)
        if len(missing):
            raise SketchFormatError(
                f"corrupt {_NAME} image: {len(missing)} HLL_4 exception slot(s) missing from "
                "the aux array"
            )
        return regs.astype(np.uint8)
    raise SketchFormatError(f"corrupt {_NAME} image: unknown target type {tgt}")
