"""HyperLogLog distinct counting: sparse then dense registers, DataSketches-compatible hashing."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sketches import _datasketches
from sketches._base import Reader, Sketch
from sketches.errors import SketchError
from sketches.hashing import hash_scalar, is_scalar, iter_hashes

__all__ = ["HyperLogLog", "hll_coupons"]

ADDR_BITS = 26
"""Bits of the sparse address, as in DataSketches coupons (HLL++ uses 25)."""
_ADDR_MASK = np.uint64((1 << ADDR_BITS) - 1)
_SIX = np.uint64(6)
_ELEVEN = np.uint64(11)
_FIFTY_TWO = np.uint64(52)
_RANK_BIAS = np.uint64(1076)
MAX_RANK = 63
"""Largest register value: min(leading zeros of h1, 62) + 1, as in DataSketches."""
_Q = MAX_RANK - 1  # Ertl's q: register values run 0..q+1


class HyperLogLog(Sketch):
    """Approximate distinct count in 2**p one-byte registers (relative error ~1.04/sqrt(2**p)).

    The sketch starts *sparse* (HLL++ style): it keeps one 26-bit address and rank per distinct
    address seen, which is almost exact for small counts, and switches to 2**p dense registers
    once it holds more than 2**p / 4 addresses (where both take the same memory). The dense
    estimate is Ertl's improved estimator (2017), which removes the small- and large-range bias
    of the classic formula without HLL++'s empirical bias tables.

    Hashing follows Apache DataSketches exactly (MurmurHash3_x64_128, seed 9001; the register
    is the low p bits of the first half, the rank counts the leading zeros of the second), so
    :meth:`to_datasketches` and :meth:`from_datasketches` exchange sketches with DataSketches
    and Spark's ``hll_sketch_agg`` / ``hll_union`` / ``hll_sketch_estimate``.

    ``None``, nulls, NaN, empty strings and empty bytes are ignored (empty values as in
    DataSketches, so that counts agree with Spark).

    Args:
        p: Precision: the sketch has 2**p registers. 4 <= p <= 21 (DataSketches' lgConfigK).

    Example:
        >>> from sketches import HyperLogLog
        >>> hll = HyperLogLog(p=12)
        >>> hll.update(range(10_000))
        >>> hll.update(["a", "b", "a", None])
        >>> abs(hll.estimate() - 10_002) < 3 * hll.standard_error * 10_002
        True
        >>> other = HyperLogLog(p=12)
        >>> other.update(range(5_000, 15_000))
        >>> round(hll.merge(other).estimate(), -3)
        15000.0
        >>> HyperLogLog.from_bytes(hll.to_bytes()) == hll
        True
    """

    TYPE_BYTE = 0x48  # "H"
    MIN_P = 4
    MAX_P = 21

    def __init__(self, p: int = 14) -> None:
        if (
            isinstance(p, bool)
            or not isinstance(p, (int, np.integer))
            or not (self.MIN_P <= p <= self.MAX_P)
        ):
            raise SketchError(
                f"HyperLogLog precision p={p!r} is out of range: expected an integer from "
                f"{self.MIN_P} to {self.MAX_P} (2**p registers; p=14 gives ~0.8% error in 16 KiB)"
            )
        self._p = int(p)
        self._m = 1 << self._p
        self._mask = np.uint64(self._m - 1)
        # Sparse state: sorted uint32 keys (address << 6 | rank), one per address, or None.
        self._sparse: np.ndarray | None = np.empty(0, dtype=np.uint32)
        self._regs: np.ndarray | None = None

    # --- properties --------------------------------------------------------------------------
    @property
    def p(self) -> int:
        """Precision: log2 of the number of registers."""
        return self._p

    @property
    def m(self) -> int:
        """Number of registers, 2**p."""
        return self._m

    @property
    def standard_error(self) -> float:
        """Relative standard error of the dense estimate, 1.04 / sqrt(2**p)."""
        return 1.04 / math.sqrt(self._m)

    @property
    def is_sparse(self) -> bool:
        """True while the sketch keeps sparse addresses rather than dense registers."""
        return self._regs is None

    @property
    def sparse_limit(self) -> int:
        """Most addresses kept sparse before switching to dense registers: 2**p / 4."""
        return max(self._m // 4, 1)

    @property
    def nbytes(self) -> int:
        """Bytes of memory held by the sketch's arrays."""
        return int(self._regs.nbytes if self._regs is not None else self._sparse.nbytes)  # type: ignore[union-attr]

    def registers(self) -> np.ndarray:
        """The 2**p dense register values (a copy; computed from the sparse state if sparse)."""
        if self._regs is not None:
            return self._regs.copy()
        return self._dense_from_keys(self._sparse)  # type: ignore[arg-type]

    def _params(self) -> str:
        return f"HyperLogLog(p={self._p})"

    def __repr__(self) -> str:
        mode = "sparse" if self.is_sparse else "dense"
        return f"HyperLogLog(p={self._p}) <{mode}, estimate={self.estimate():.1f}>"

    # --- updating ----------------------------------------------------------------------------
    def update(self, values: Any) -> None:
        """Add a value or a batch of values (see the package docs for the accepted types).

        ``None``, nulls, NaN, empty strings and empty bytes are ignored.
        """
        if is_scalar(values):
            hashed = hash_scalar(values, skip_empty=True)
            if hashed is not None:
                self._add_one(*hashed)
            return
        _, chunks = iter_hashes(values, skip_empty=True)
        for h0, h1 in chunks:
            if self._regs is None:
                self._add_sparse(h0, h1)
            else:
                self._add_dense(self._regs, h0, h1)

    def _add_one(self, h0: int, h1: int) -> None:
        rank = min(64 - h1.bit_length(), _Q) + 1
        if self._regs is not None:
            slot = h0 & (self._m - 1)
            if rank > self._regs[slot]:
                self._regs[slot] = rank
            return
        sparse: np.ndarray = self._sparse  # type: ignore[assignment]
        key = ((h0 & int(_ADDR_MASK)) << 6) | rank
        at = int(np.searchsorted(sparse, key & ~63))  # first key of this address or after
        if at < len(sparse) and int(sparse[at]) >> 6 == key >> 6:
            if int(sparse[at]) < key:
                sparse[at] = key  # the sparse array is owned by this sketch alone
            return
        merged = np.empty(len(sparse) + 1, dtype=np.uint32)
        merged[:at] = sparse[:at]
        merged[at] = key
        merged[at + 1 :] = sparse[at:]
        if len(merged) > self.sparse_limit:
            self._regs = self._dense_from_keys(merged)
            self._sparse = None
        else:
            self._sparse = merged

    def _add_dense(self, regs: np.ndarray, h0: np.ndarray, h1: np.ndarray) -> None:
        idx = (h0 & self._mask).view(np.int64)
        rank = _ranks(h1)
        # Most items of a warm sketch cannot raise their register: filter before the scatter.
        rising = rank > regs[idx]
        if rising.any():
            sel = np.flatnonzero(rising)
            np.maximum.at(regs, idx[sel], rank[sel])

    def _add_sparse(self, h0: np.ndarray, h1: np.ndarray) -> None:
        keys = hll_coupons(h0, h1)
        merged = _union_keys(self._sparse, _max_per_address(np.unique(keys)))  # type: ignore[arg-type]
        if len(merged) > self.sparse_limit:
            self._regs = self._dense_from_keys(merged)
            self._sparse = None
        else:
            self._sparse = merged

    def _dense_from_keys(self, keys: np.ndarray) -> np.ndarray:
        regs = np.zeros(self._m, dtype=np.uint8)
        k = keys.astype(np.int64)
        np.maximum.at(regs, (k >> 6) & (self._m - 1), (k & 63).astype(np.uint8))
        return regs

    # --- estimating --------------------------------------------------------------------------
    def estimate(self) -> float:
        """Estimated number of distinct non-missing values added so far.

        Sparse: linear counting over the 2**26 addresses (near exact). Dense: Ertl's improved
        raw estimator.
        """
        if self._regs is None:
            n = len(self._sparse)  # type: ignore[arg-type]
            big_m = float(1 << ADDR_BITS)
            return -big_m * math.log1p(-n / big_m) if n else 0.0
        return _ertl_estimate(np.bincount(self._regs, minlength=MAX_RANK + 1), self._m)

    # --- merging -----------------------------------------------------------------------------
    def merge(self, other: HyperLogLog) -> HyperLogLog:
        """Fold another sketch with the same p into this one, in place; returns self.

        The result is the sketch that one stream of both inputs would have produced, bit for bit.

        Raises:
            IncompatibleSketchError: other is not a HyperLogLog or its p differs.
        """
        self._check_mergeable(other)
        if other._p != self._p:
            raise self._incompatible(other, "precisions differ", "build both with the same p")
        if self._regs is None and other._regs is None:
            merged = _union_keys(self._sparse, other._sparse)  # type: ignore[arg-type]
            if len(merged) > self.sparse_limit:
                self._regs = self._dense_from_keys(merged)
                self._sparse = None
            else:
                self._sparse = merged
            return self
        mine = self._regs if self._regs is not None else self._dense_from_keys(self._sparse)  # type: ignore[arg-type]
        theirs = other._regs if other._regs is not None else self._dense_from_keys(other._sparse)  # type: ignore[arg-type]
        self._regs = np.maximum(mine, theirs)
        self._sparse = None
        return self

    # --- serialisation -----------------------------------------------------------------------
    def _write(self) -> list[bytes]:
        if self._regs is None:
            keys = self._sparse.astype("<u4")  # type: ignore[union-attr]
            return [bytes((self._p, 0)), len(keys).to_bytes(4, "little"), keys.tobytes()]
        return [bytes((self._p, 1)), self._regs.tobytes()]

    @classmethod
    def _read(cls, reader: Reader) -> HyperLogLog:
        p, mode = reader.unpack("BB")
        if not cls.MIN_P <= p <= cls.MAX_P:
            raise reader.corrupt(f"precision p={p} outside {cls.MIN_P}..{cls.MAX_P}")
        sketch = cls(p)
        if mode == 0:
            (count,) = reader.unpack("I")
            if count > sketch.sparse_limit:
                raise reader.corrupt(
                    f"{count} sparse entries exceed the limit {sketch.sparse_limit} for p={p}"
                )
            keys = reader.array(np.uint32, count)
            if count > 1 and not np.all((keys[1:] >> 6) > (keys[:-1] >> 6)):
                raise reader.corrupt("sparse entries are not sorted by address")
            sketch._sparse = keys
        elif mode == 1:
            regs = reader.array(np.uint8, sketch.m)
            if regs.max(initial=0) > MAX_RANK:
                raise reader.corrupt(f"a register exceeds the largest rank {MAX_RANK}")
            sketch._regs = regs
            sketch._sparse = None
        else:
            raise reader.corrupt(f"unknown mode byte {mode} (0 sparse, 1 dense)")
        return sketch

    def to_datasketches(self) -> bytes:
        """Serialise in the Apache DataSketches HLL format (HLL_8), as Spark's sketches are.

        A sparse sketch is written as a DataSketches LIST or SET of coupons, a dense one as an
        HLL_8 register array flagged out-of-order (so readers use their composite estimator).
        The bytes can be read by ``hll_sketch_estimate`` and ``hll_union`` in Spark SQL and by
        the DataSketches libraries (Java, C++, Python).

        Example:
            >>> from sketches import HyperLogLog
            >>> hll = HyperLogLog(p=12)
            >>> hll.update([1, 2, 3])
            >>> HyperLogLog.from_datasketches(hll.to_datasketches()) == hll
            True
        """
        if self._regs is None:
            return _datasketches.encode_coupons(self._p, self._sparse, self._regs_for_export)  # type: ignore[arg-type]
        return _datasketches.encode_hll8(self._p, self._regs, self.estimate())

    def _regs_for_export(self) -> tuple[np.ndarray, float]:
        return self.registers(), self.estimate()

    @classmethod
    def from_datasketches(cls, data: bytes | bytearray | memoryview) -> HyperLogLog:
        """Read an Apache DataSketches HLL sketch (LIST, SET or HLL mode; HLL_4, HLL_6, HLL_8).

        The sketch must have been built with the default update seed (9001), as Spark's are.
        A DataSketches sketch in HLL mode becomes a dense sketch even below our sparse limit.

        Raises:
            SketchFormatError: The bytes are not a DataSketches HLL image, or are truncated.
        """
        p, keys, regs = _datasketches.decode(bytes(data))
        sketch = cls(p)
        if regs is not None:
            sketch._regs = regs
            sketch._sparse = None
            return sketch
        keys = _max_per_address(np.unique(keys))  # type: ignore[arg-type]
        if len(keys) > sketch.sparse_limit:
            sketch._regs = sketch._dense_from_keys(keys)
            sketch._sparse = None
        else:
            sketch._sparse = keys
        return sketch


def hll_coupons(h0: np.ndarray, h1: np.ndarray) -> np.ndarray:
    """DataSketches HLL coupons of hashed items: the 26-bit address from h0, then the 6-bit rank.

    The building block for grouped sketches kept outside :class:`HyperLogLog` (for example one
    sparse list of coupons per window and key): a register index at precision p is
    ``coupon >> 6`` reduced to p bits (``(coupon >> 6) & (2**p - 1)``), its value ``coupon & 63``.

    Example:
        >>> from sketches import hash128
        >>> hb = hash128(["a", "b"])
        >>> c = hll_coupons(hb.h0, hb.h1)
        >>> c.dtype.name, bool(((c & 63) >= 1).all())
        ('uint32', True)
    """
    return (((h0 & _ADDR_MASK) << _SIX) | _ranks(h1)).astype(np.uint32)


def _ranks(h1: np.ndarray) -> np.ndarray:
    """min(leading zeros of h1, 62) + 1 as uint8, vectorised through the float exponent.

    h1 >> 11 has at most 53 bits, so its float64 conversion is exact and the biased exponent e
    gives floor(log2) exactly: rank = 64 - bitlength(h1) + 1 = 1076 - e.
    """
    y = h1 >> _ELEVEN
    e = y.astype(np.float64).view(np.uint64) >> _FIFTY_TWO
    rank = (_RANK_BIAS - e).astype(np.uint8)
    small = y == 0
    if small.any():  # h1 < 2**11: probability 2**-53 per item, handled exactly
        sel = np.flatnonzero(small)
        low = h1[sel]
        bitlen = np.where(
            low > 0,
            (low.astype(np.float64).view(np.uint64) >> _FIFTY_TWO).astype(np.int64) - 1022,
            0,
        )
        rank[sel] = np.minimum(64 - bitlen, _Q) + 1
    return rank


def _union_keys(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Union of two sorted one-per-address key arrays, keeping the highest rank per address."""
    if len(new) * 16 >= len(old):
        return _max_per_address(np.union1d(old, new))
    # Few new keys: find their places by binary search instead of re-sorting everything.
    old_addr = old >> 6
    new_addr = new >> 6
    at = np.searchsorted(old_addr, new_addr)
    inside = at < len(old)
    same = np.zeros(len(new), dtype=bool)
    same[inside] = old_addr[at[inside]] == new_addr[inside]
    out = old.copy()
    np.maximum.at(out, at[same], new[same])
    return np.insert(out, at[~same], new[~same])


def _max_per_address(keys: np.ndarray) -> np.ndarray:
    """From sorted unique keys (address << 6 | rank), keep the highest rank of each address."""
    if len(keys) < 2:
        return keys
    addr = keys >> 6
    last = np.ones(len(keys), dtype=bool)
    last[:-1] = addr[1:] != addr[:-1]
    return keys[last]


def _sigma(x: float) -> float:
    if x == 1.0:
        return math.inf
    y = 1.0
    z = x
    while True:
        x *= x
        z_old = z
        z += x * y
        y += y
        if z == z_old:
            return z


def _tau(x: float) -> float:
    if x == 0.0 or x == 1.0:
        return 0.0
    y = 1.0
    z = 1.0 - x
    while True:
        x = math.sqrt(x)
        z_old = z
        y *= 0.5
        z -= (1.0 - x) ** 2 * y
        if z == z_old:
            return z / 3.0


def _ertl_estimate(counts: np.ndarray, m: int) -> float:
    """Ertl's improved raw estimator from the register histogram (values 0..q+1)."""
    c = counts.tolist()
    z = m * _tau(1.0 - c[_Q + 1] / m)
    for k in range(_Q, 0, -1):
        z = 0.5 * (z + c[k])
    z += m * _sigma(c[0] / m)
    if math.isinf(z):
        return 0.0
    return m * m / (2.0 * math.log(2.0) * z)
