"""Bloom filters for set membership: a fixed-size filter and a scalable one that grows."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from sketches._base import Reader, Sketch
from sketches.errors import SketchError
from sketches.hashing import HashedBatch, _Batch, hash128, hash_scalar, is_scalar, iter_hashes

__all__ = ["BloomFilter", "ScalableBloomFilter"]

MAX_BITS = 1 << 32
"""Largest filter: bit positions are mapped with a 32-bit multiply-shift range reduction."""

_LN2 = math.log(2.0)
_U32 = np.uint64(32)
_U6 = np.uint64(6)
_U63 = np.uint64(63)
_ONE = np.uint64(1)
_MASK64 = (1 << 64) - 1
_BITMAP_LIMIT = 1 << 28
"""Largest filter (in bits) that a big batch may mark through a byte-per-bit scratch map."""


def _set_bits(words: np.ndarray, index: np.ndarray, masks: np.ndarray) -> None:
    """words[index] |= masks, correct when an index repeats (numpy's or.at is slow).

    A fancy assignment keeps only one of several writes to the same word, so the bits that
    lost are detected and written again until none is lost; repeats are rare, so this
    converges in a pass or two.
    """
    while True:
        cur = words[index]
        cur |= masks
        words[index] = cur
        got = words[index]
        got &= masks
        lost = got != masks
        if not lost.any():
            return
        index = index[lost]
        masks = masks[lost]


def _check_rate(error_rate: Any, what: str) -> float:
    if (
        isinstance(error_rate, bool)
        or not isinstance(error_rate, (int, float))
        or not (0.0 < error_rate < 1.0)
    ):
        raise SketchError(
            f"{what} error_rate={error_rate!r} is out of range: expected a false-positive rate "
            "strictly between 0 and 1, such as 0.01"
        )
    return float(error_rate)


def _check_capacity(capacity: Any, what: str, name: str = "capacity") -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise SketchError(
            f"{what} {name}={capacity!r} is out of range: expected a positive integer, the "
            "number of distinct items the filter must hold at its error rate"
        )
    return int(capacity)


class BloomFilter(Sketch):
    """Set membership with no false negatives and a bounded false-positive rate.

    Sized from the number of distinct items it must hold (``capacity``) and the false-positive
    rate wanted once it holds them (``error_rate``): ``num_bits = ceil(-n ln p / ln(2)**2)``
    and ``num_hashes = round(num_bits / n * ln 2)``. Bit positions come from the two 64-bit
    halves of the item's hash by double hashing (``h0 + i * h1``, Kirsch and Mitzenmacher),
    each reduced to ``[0, num_bits)`` with a multiply-shift of its top 32 bits.

    ``None``, nulls and NaN are ignored by :meth:`update`, and are never contained.

    Args:
        capacity: Distinct items the filter is sized for.
        error_rate: False-positive rate at capacity, strictly between 0 and 1.

    Example:
        >>> from sketches import BloomFilter
        >>> seen = BloomFilter(capacity=1_000, error_rate=0.01)
        >>> seen.update(["alice", "bob"])
        >>> seen.contains("alice"), seen.contains("carol")
        (True, False)
        >>> seen.contains(["bob", None, "dave"]).tolist()
        [True, False, False]
        >>> seen.num_bits, seen.num_hashes
        (9586, 7)
    """

    TYPE_BYTE = 0x42  # "B"

    def __init__(self, capacity: int, error_rate: float = 0.01) -> None:
        self._capacity = _check_capacity(capacity, "BloomFilter")
        self._error_rate = _check_rate(error_rate, "BloomFilter")
        bits = math.ceil(-self._capacity * math.log(self._error_rate) / (_LN2 * _LN2))
        if bits > MAX_BITS:
            raise SketchError(
                f"BloomFilter(capacity={self._capacity}, error_rate={self._error_rate}) needs "
                f"{bits} bits, more than the limit of 2**32 bits (512 MiB): use a "
                "ScalableBloomFilter, a larger error_rate or several filters"
            )
        self._bits = bits
        self._k = max(1, round(bits / self._capacity * _LN2))
        self._words = np.zeros((bits + 63) // 64, dtype=np.uint64)
        self._m = np.uint64(bits)

    # --- properties --------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """Distinct items the filter is sized for."""
        return self._capacity

    @property
    def error_rate(self) -> float:
        """False-positive rate the filter is sized for at capacity."""
        return self._error_rate

    @property
    def num_bits(self) -> int:
        """Number of bits in the filter."""
        return self._bits

    @property
    def num_hashes(self) -> int:
        """Number of bit positions set per item."""
        return self._k

    @property
    def nbytes(self) -> int:
        """Bytes of memory held by the bit array."""
        return int(self._words.nbytes)

    def bits_set(self) -> int:
        """Number of bits that are 1."""
        return int(np.bitwise_count(self._words).sum())

    def cardinality(self) -> float:
        """Estimated distinct items inserted, from the fraction of bits set (Swamidass-Baldi)."""
        x = self.bits_set()
        if x >= self._bits:
            return math.inf
        return -self._bits / self._k * math.log1p(-x / self._bits)

    def false_positive_rate(self) -> float:
        """Expected false-positive rate now: (fraction of bits set) ** num_hashes."""
        return (self.bits_set() / self._bits) ** self._k

    def _params(self) -> str:
        return f"BloomFilter(capacity={self._capacity}, error_rate={self._error_rate})"

    # --- updating and querying ---------------------------------------------------------------
    def update(self, values: Any) -> None:
        """Insert a value or a batch of values; ``None``, nulls and NaN are ignored."""
        if is_scalar(values):
            hashed = hash_scalar(values)
            if hashed is not None:
                words = self._words
                for word, bit in self._probes(*hashed):
                    words[word] = int(words[word]) | (1 << bit)
            return
        batch, chunks = iter_hashes(values)
        if batch.count * self._k >= self._bits // 16 and self._bits <= _BITMAP_LIMIT:
            # A batch that touches a fair part of the filter is cheaper to scatter into a
            # byte-per-bit scratch map (duplicates are harmless there) and pack once; the
            # break-even, measured, is near one position per 16 to 32 bits.
            scratch = np.zeros(self._bits, dtype=bool)
            for h0, h1 in chunks:
                self._mark(scratch, h0, h1)
            packed = np.packbits(scratch, bitorder="little")
            words = np.zeros(len(self._words) * 8, dtype=np.uint8)
            words[: len(packed)] = packed
            np.bitwise_or(self._words, words.view("<u8").astype(np.uint64), out=self._words)
            return
        for h0, h1 in chunks:
            self._insert(h0, h1)

    def _mark(self, scratch: np.ndarray, h0: np.ndarray, h1: np.ndarray) -> None:
        g = h0.copy()
        pos = np.empty_like(g)
        with np.errstate(over="ignore"):
            for i in range(self._k):
                if i:
                    g += h1
                np.right_shift(g, _U32, out=pos)
                pos *= self._m
                pos >>= _U32
                scratch[pos.view(np.int64)] = True

    def _insert(self, h0: np.ndarray, h1: np.ndarray) -> None:
        words = self._words
        g = h0.copy()
        pos = np.empty_like(g)
        with np.errstate(over="ignore"):
            for i in range(self._k):
                if i:
                    g += h1
                np.right_shift(g, _U32, out=pos)
                pos *= self._m
                pos >>= _U32
                _set_bits(words, (pos >> _U6).view(np.int64), _ONE << (pos & _U63))

    def contains(self, values: Any) -> bool | np.ndarray:
        """Membership: a bool for a scalar, a numpy bool array for a batch.

        False means certainly never inserted; True means inserted or a false positive.
        Missing values (``None``, nulls, NaN) give False.
        """
        if is_scalar(values):
            hashed = hash_scalar(values)
            return hashed is not None and self._contains_one(*hashed)
        batch, chunks = iter_hashes(values)
        found = np.empty(batch.count, dtype=bool)
        done = 0
        for h0, h1 in chunks:
            found[done : done + len(h0)] = self._lookup(h0, h1)
            done += len(h0)
        return _align(batch, found)

    def __contains__(self, value: Any) -> bool:
        return bool(self.contains(value))

    def _probes(self, h0: int, h1: int) -> list[tuple[int, int]]:
        """(word, bit) of each probe of one item, in plain Python."""
        out = []
        m = self._bits
        for i in range(self._k):
            pos = ((((h0 + i * h1) & _MASK64) >> 32) * m) >> 32
            out.append((pos >> 6, pos & 63))
        return out

    def _contains_one(self, h0: int, h1: int) -> bool:
        words = self._words
        return all((int(words[word]) >> bit) & 1 for word, bit in self._probes(h0, h1))

    def _lookup(self, h0: np.ndarray, h1: np.ndarray) -> np.ndarray:
        words = self._words
        n = len(h0)
        alive = np.ones(n, dtype=bool)
        idx: np.ndarray | None = None  # original positions of the items still probed
        g = h0.copy()
        step = h1
        with np.errstate(over="ignore"):
            for i in range(self._k):
                if i:
                    g += step
                pos = g >> _U32
                pos *= self._m
                pos >>= _U32
                word = words[(pos >> _U6).view(np.int64)]
                pos &= _U63
                word >>= pos
                word &= _ONE
                alive &= word.astype(bool)
                if i == self._k - 1:
                    break
                left = int(np.count_nonzero(alive))
                if left == 0:
                    break
                if 2 * left <= len(alive):
                    # Most items are known absent: probe only the rest from now on.
                    sel = np.flatnonzero(alive)
                    idx = sel if idx is None else idx[sel]
                    g = g[sel]
                    step = step[sel]
                    alive = np.ones(left, dtype=bool)
        if idx is None:
            return alive
        found = np.zeros(n, dtype=bool)
        found[idx[alive]] = True
        return found

    # --- merging -----------------------------------------------------------------------------
    def merge(self, other: BloomFilter) -> BloomFilter:
        """Union with a filter of the same capacity and error rate, in place; returns self.

        Raises:
            IncompatibleSketchError: other is not a BloomFilter or is sized differently.
        """
        self._check_mergeable(other)
        if (other._bits, other._k) != (self._bits, self._k) or (
            other._capacity,
            other._error_rate,
        ) != (self._capacity, self._error_rate):
            raise self._incompatible(
                other,
                "sizes differ",
                "build both with the same capacity and error_rate",
            )
        np.bitwise_or(self._words, other._words, out=self._words)
        return self

    # --- serialisation -----------------------------------------------------------------------
    def _write(self) -> list[bytes]:
        return [
            struct.pack("<QdQB", self._capacity, self._error_rate, self._bits, self._k),
            self._words.astype("<u8").tobytes(),
        ]

    @classmethod
    def _read(cls, reader: Reader) -> BloomFilter:
        capacity, error_rate, bits, k = reader.unpack("QdQB")
        if capacity < 1 or not 0.0 < error_rate < 1.0:
            raise reader.corrupt(f"capacity={capacity}, error_rate={error_rate}")
        bloom = cls(capacity, error_rate)
        if (bloom._bits, bloom._k) != (bits, k):
            raise reader.corrupt(
                f"{bits} bits and {k} hashes do not match capacity={capacity}, "
                f"error_rate={error_rate} ({bloom._bits} bits, {bloom._k} hashes)"
            )
        bloom._words = reader.array(np.uint64, len(bloom._words))
        return bloom


def _align(batch: HashedBatch | _Batch, found: np.ndarray) -> bool | np.ndarray:
    """Spread per-valid-item answers over the input positions; a scalar gives a bool."""
    if batch.valid is not None:
        full = np.zeros(batch.size, dtype=bool)
        full[batch.valid] = found
        found = full
    if batch.scalar:
        return bool(found[0])
    return found


class ScalableBloomFilter(Sketch):
    """A Bloom filter that grows: a chain of filters, each larger and stricter than the last.

    After Almeida et al., "Scalable Bloom Filters" (2007): filter i holds
    ``initial_capacity * growth**i`` items at rate ``error_rate * (1 - ratio) * ratio**i``, so
    the compound false-positive rate stays below ``error_rate`` however many items arrive.
    A new filter is added when the newest one has taken its capacity of new distinct items
    (items that the chain did not already report present).

    Args:
        initial_capacity: Capacity of the first filter.
        error_rate: Bound on the compound false-positive rate, strictly between 0 and 1.
        growth: Capacity multiplier from one filter to the next (an integer >= 2).
        ratio: Error-rate multiplier from one filter to the next, strictly between 0 and 1.

    Example:
        >>> from sketches import ScalableBloomFilter
        >>> seen = ScalableBloomFilter(initial_capacity=100, error_rate=0.01)
        >>> seen.update(range(1_000))
        >>> len(seen.filters) > 1, bool(seen.contains(999)), seen.contains([5, -5]).tolist()
        (True, True, [True, False])
    """

    TYPE_BYTE = 0x53  # "S"

    def __init__(
        self,
        initial_capacity: int = 1024,
        error_rate: float = 0.01,
        growth: int = 2,
        ratio: float = 0.8,
    ) -> None:
        self._initial = _check_capacity(initial_capacity, "ScalableBloomFilter", "initial_capacity")
        self._error_rate = _check_rate(error_rate, "ScalableBloomFilter")
        if isinstance(growth, bool) or not isinstance(growth, int) or not 2 <= growth <= 16:
            raise SketchError(
                f"ScalableBloomFilter growth={growth!r} is out of range: expected an integer "
                "from 2 to 16 (2 or 4 are usual)"
            )
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < 1:
            raise SketchError(
                f"ScalableBloomFilter ratio={ratio!r} is out of range: expected a tightening "
                "ratio strictly between 0 and 1 (0.8 to 0.9 are usual)"
            )
        self._growth = growth
        self._ratio = float(ratio)
        self.filters: list[BloomFilter] = []
        self._counts: list[int] = []
        self._add_filter()

    @property
    def initial_capacity(self) -> int:
        """Capacity of the first filter."""
        return self._initial

    @property
    def error_rate(self) -> float:
        """Bound on the compound false-positive rate."""
        return self._error_rate

    @property
    def count(self) -> int:
        """Distinct items inserted (items the chain did not already report present)."""
        return sum(self._counts)

    @property
    def nbytes(self) -> int:
        """Bytes of memory held by all the filters' bit arrays."""
        return sum(f.nbytes for f in self.filters)

    def _params(self) -> str:
        return (
            f"ScalableBloomFilter(initial_capacity={self._initial}, error_rate={self._error_rate}, "
            f"growth={self._growth}, ratio={self._ratio})"
        )

    def _level(self, i: int) -> BloomFilter:
        rate = self._error_rate * (1.0 - self._ratio) * self._ratio**i
        return BloomFilter(self._initial * self._growth**i, rate)

    def _add_filter(self) -> None:
        self.filters.append(self._level(len(self.filters)))
        self._counts.append(0)

    def update(self, values: Any) -> None:
        """Insert a value or a batch of values; ``None``, nulls and NaN are ignored."""
        batch = hash128(values)
        h0, h1 = batch.h0, batch.h1
        new = ~self._lookup(h0, h1)
        if not new.any():
            return
        h0, h1 = h0[new], h1[new]
        # Distinct new items in order of first appearance; every occurrence of an item goes to
        # the filter chosen for its first occurrence, so no item can be lost.
        _, first, inverse = np.unique(h0, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(len(first), dtype=np.int64)
        rank[order] = np.arange(len(first))
        item_rank = rank[inverse.reshape(-1)]
        done = 0
        total = len(first)
        while done < total:
            room = self.filters[-1].capacity - self._counts[-1]
            if room <= 0:
                self._add_filter()
                continue
            take = min(room, total - done)
            sel = np.flatnonzero((item_rank >= done) & (item_rank < done + take))
            self.filters[-1]._insert(h0[sel], h1[sel])
            self._counts[-1] += take
            done += take

    def contains(self, values: Any) -> bool | np.ndarray:
        """Membership: a bool for a scalar, a numpy bool array for a batch (see BloomFilter)."""
        if is_scalar(values):
            hashed = hash_scalar(values)
            return hashed is not None and any(f._contains_one(*hashed) for f in self.filters)
        batch = hash128(values)
        return _align(batch, self._lookup(batch.h0, batch.h1))

    def __contains__(self, value: Any) -> bool:
        return bool(self.contains(value))

    def _lookup(self, h0: np.ndarray, h1: np.ndarray) -> np.ndarray:
        found = np.zeros(len(h0), dtype=bool)
        for f in self.filters:
            rest = np.flatnonzero(~found)
            if not len(rest):
                break
            found[rest] = f._lookup(h0[rest], h1[rest])
        return found

    def merge(self, other: ScalableBloomFilter) -> ScalableBloomFilter:
        """Union with a chain of the same parameters, in place; returns self.

        Filters at the same position are OR-ed. A merged filter can hold more than its capacity
        (up to the sum of both sides'), so the compound false-positive rate of a merged chain
        can exceed ``error_rate``; each filter's count becomes the largest of both counts and
        the estimate from its bits, and new items go to a fresh filter once it is full.

        Raises:
            IncompatibleSketchError: other is not a ScalableBloomFilter or its parameters differ.
        """
        self._check_mergeable(other)
        mine = (self._initial, self._error_rate, self._growth, self._ratio)
        theirs = (other._initial, other._error_rate, other._growth, other._ratio)
        if mine != theirs:
            raise self._incompatible(
                other,
                "parameters differ",
                "build both with the same initial_capacity, error_rate, growth and ratio",
            )
        while len(self.filters) < len(other.filters):
            self._add_filter()
        for i, mine_f in enumerate(self.filters):
            their_count = 0
            if i < len(other.filters):
                mine_f.merge(other.filters[i])
                their_count = other._counts[i]
            estimate = mine_f.cardinality()
            fill = mine_f.capacity * 2 if math.isinf(estimate) else round(estimate)
            self._counts[i] = max(self._counts[i], their_count, fill)
        return self

    def _write(self) -> list[bytes]:
        out = [
            struct.pack(
                "<QdBdI",
                self._initial,
                self._error_rate,
                self._growth,
                self._ratio,
                len(self.filters),
            )
        ]
        for f, c in zip(self.filters, self._counts):
            out.append(struct.pack("<Q", c))
            out.append(f.to_bytes())
        return out

    @classmethod
    def _read(cls, reader: Reader) -> ScalableBloomFilter:
        initial, rate, growth, ratio, n = reader.unpack("QdBdI")
        try:
            sbf = cls(initial, rate, growth, ratio)
        except SketchError as err:
            raise reader.corrupt(str(err)) from None
        sbf.filters, sbf._counts = [], []
        for i in range(n):
            (count,) = reader.unpack("Q")
            expected = sbf._level(i)
            size = 2 + 25 + len(expected._words) * 8
            f = BloomFilter.from_bytes(reader.take(size))
            if (f.capacity, f.error_rate) != (expected.capacity, expected.error_rate):
                raise reader.corrupt(f"filter {i} is {f._params()}, expected {expected._params()}")
            sbf.filters.append(f)
            sbf._counts.append(count)
        if not sbf.filters:
            raise reader.corrupt("no filters")
        return sbf
