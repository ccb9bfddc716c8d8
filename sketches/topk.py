"""Heavy hitters: a mergeable Misra-Gries summary that reports the most frequent items."""

from __future__ import annotations

import struct
import sys
from typing import Any

import numpy as np

from sketches._base import Reader, Sketch
from sketches.countmin import weights_for
from sketches.errors import SketchError
from sketches.hashing import hash_scalar, is_scalar, iter_hashes

__all__ = ["TopK"]

_INT, _FLOAT, _STR, _BYTES, _BOOL = range(5)


class TopK(Sketch):
    """The most frequent items of a stream, in ``capacity`` counters (Misra-Gries).

    Each counter holds an item (keyed by its 64-bit hash ``h0``) and a count. A batch is
    counted exactly, added to the counters, and if more than ``capacity`` items then hold a
    count, the ``(capacity + 1)``-th largest count is subtracted from all of them and the
    items left at zero or below are dropped (the mergeable summary of Agarwal et al., 2012).
    Merging two summaries is the same step over both sets of counters.

    Guarantees, with ``N`` the total weight and ``error_bound`` the sum of the subtracted
    amounts (at most ``N / (capacity + 1)``): a reported count never exceeds the true count
    and falls short of it by at most ``error_bound``, and every item whose true count exceeds
    ``error_bound`` is kept. Merging is commutative; it is associative up to these bounds (the
    counters of ``(a + b) + c`` and ``a + (b + c)`` can differ, both within the bounds).

    ``None``, nulls and NaN are ignored. The item reported for a hash is the first one seen
    (so ``1`` and ``1.0``, which hash alike, are reported as whichever came first).

    Args:
        capacity: Number of counters, at least 1; keep it several times larger than the k
            you will ask :meth:`top` for.

    Example:
        >>> from sketches import TopK
        >>> hitters = TopK(capacity=16)
        >>> hitters.update(["/index.html"] * 5 + ["/about"] * 3 + ["/faq"])
        >>> hitters.top(2)
        [('/index.html', 5), ('/about', 3)]
        >>> hitters.error_bound, hitters.total
        (0, 9)
    """

    TYPE_BYTE = 0x54  # "T"

    def __init__(self, capacity: int = 256) -> None:
        if (
            isinstance(capacity, bool)
            or not isinstance(capacity, (int, np.integer))
            or not (1 <= capacity <= 1 << 24)
        ):
            raise SketchError(
                f"TopK capacity={capacity!r} is out of range: expected an integer from 1 to "
                f"{1 << 24} (counters kept; several times the k you will ask for)"
            )
        self._capacity = int(capacity)
        self._keys = np.empty(0, dtype=np.uint64)  # sorted
        self._counts = np.empty(0, dtype=np.int64)
        self._items: dict[int, Any] = {}
        self._total = 0
        self._offset = 0

    @property
    def capacity(self) -> int:
        """Number of counters."""
        return self._capacity

    @property
    def total(self) -> int:
        """Sum of all weights added (the stream length for unit weights)."""
        return self._total

    @property
    def error_bound(self) -> int:
        """Most that any reported count can fall short of the true count."""
        return self._offset

    @property
    def nbytes(self) -> int:
        """Approximate bytes of memory: counters plus the kept items."""
        items = sum(sys.getsizeof(v) for v in self._items.values())
        return int(self._keys.nbytes + self._counts.nbytes + items + 100 * len(self._items))

    def __len__(self) -> int:
        return len(self._keys)

    def _params(self) -> str:
        return f"TopK(capacity={self._capacity})"

    # --- updating ----------------------------------------------------------------------------
    def update(self, values: Any, weights: Any = None) -> None:
        """Count a value or a batch of values, optionally weighted (see CountMinSketch.update)."""
        if is_scalar(values) and (weights is None or isinstance(weights, (int, np.integer))):
            self._add_one(values, 1 if weights is None else weights)
            return
        batch, chunks = iter_hashes(values)
        w = weights_for(batch, weights, "TopK")
        positions: np.ndarray | None = None
        done = 0
        for h0, _ in chunks:
            n = len(h0)
            keys, first, inverse = np.unique(h0, return_index=True, return_inverse=True)
            if w is None:
                counts = np.bincount(inverse.reshape(-1), minlength=len(keys)).astype(np.int64)
            else:
                counts = np.zeros(len(keys), dtype=np.int64)
                np.add.at(counts, inverse.reshape(-1), w[done : done + n])
                self._total += int(w[done : done + n].sum())
            if w is None:
                self._total += n
            self._fold(keys, counts)
            # Only the (at most capacity) kept keys need their item materialised.
            kept = np.flatnonzero(np.isin(keys, self._keys, assume_unique=True))
            new = [i for i in kept.tolist() if int(keys[i]) not in self._items]
            if new:
                if positions is None:
                    positions = batch.positions()
                where = positions[done + first[new]]
                for key, item in zip(keys[new].tolist(), batch.fetch(where)):
                    self._items[key] = item.item() if isinstance(item, np.generic) else item
            done += n
        self._forget_dropped()

    def _add_one(self, value: Any, weight: Any) -> None:
        if isinstance(weight, bool) or weight < 0:
            weights_for(None, weight, "TopK")  # raises the usual message
        hashed = hash_scalar(value)
        if hashed is None:
            return
        weight = int(weight)
        self._total += weight
        key = hashed[0]
        at = int(np.searchsorted(self._keys, key))
        if at < len(self._keys) and int(self._keys[at]) == key:
            self._counts[at] += weight  # counters are owned by this sketch alone
            return
        self._fold(np.array([key], dtype=np.uint64), np.array([weight], dtype=np.int64))
        at = int(np.searchsorted(self._keys, key))
        if at < len(self._keys) and int(self._keys[at]) == key:
            self._items[key] = value.item() if isinstance(value, np.generic) else value
        self._forget_dropped()

    def _fold(self, keys: np.ndarray, counts: np.ndarray) -> None:
        """Add (sorted unique keys, counts) to the counters, then reduce to capacity."""
        all_keys = np.concatenate([self._keys, keys])
        all_counts = np.concatenate([self._counts, counts])
        merged, inverse = np.unique(all_keys, return_inverse=True)
        sums = np.zeros(len(merged), dtype=np.int64)
        np.add.at(sums, inverse.reshape(-1), all_counts)
        keep = sums > 0
        merged, sums = merged[keep], sums[keep]
        if len(merged) > self._capacity:
            cut = int(
                np.partition(sums, len(sums) - self._capacity - 1)[len(sums) - self._capacity - 1]
            )
            sums = sums - cut
            keep = sums > 0
            merged, sums = merged[keep], sums[keep]
            self._offset += cut
        self._keys, self._counts = merged, sums

    def _forget_dropped(self) -> None:
        if len(self._items) > len(self._keys):
            live = set(self._keys.tolist())
            self._items = {k: v for k, v in self._items.items() if k in live}

    # --- querying ----------------------------------------------------------------------------
    def top(self, k: int | None = None) -> list[tuple[Any, int]]:
        """The k items with the largest counts, as (item, count), largest first.

        Counts are lower bounds: the true count is between count and count + error_bound.
        Ties are ordered by hash, so the order is the same on every run.
        """
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise SketchError(
                f"TopK.top k={k!r} is invalid: expected a non-negative integer or None"
            )
        order = np.lexsort((self._keys, -self._counts))
        if k is not None:
            order = order[:k]
        keys = self._keys[order].tolist()
        counts = self._counts[order].tolist()
        return [(self._items[key], c) for key, c in zip(keys, counts)]

    def estimate(self, values: Any) -> int | np.ndarray:
        """Counter of each value (0 when not kept): an int for a scalar, an int64 array else."""
        batch, chunks = iter_hashes(values)
        out = np.zeros(batch.count, dtype=np.int64)
        done = 0
        for h0, _ in chunks:
            if len(self._keys):
                at = np.searchsorted(self._keys, h0).clip(max=len(self._keys) - 1)
                hit = self._keys[at] == h0
                out[done : done + len(h0)] = np.where(hit, self._counts[at], 0)
            done += len(h0)
        if batch.valid is not None:
            full = np.zeros(batch.size, dtype=np.int64)
            full[batch.valid] = out
            out = full
        return int(out[0]) if batch.scalar else out

    # --- merging -----------------------------------------------------------------------------
    def merge(self, other: TopK) -> TopK:
        """Fold another summary with the same capacity into this one, in place; returns self.

        Raises:
            IncompatibleSketchError: other is not a TopK or its capacity differs.
        """
        self._check_mergeable(other)
        if other._capacity != self._capacity:
            raise self._incompatible(
                other, "capacities differ", "build both with the same capacity"
            )
        self._offset += other._offset
        self._total += other._total
        self._fold(other._keys, other._counts)
        for key in self._keys.tolist():
            if key not in self._items:
                self._items[key] = other._items[key]
        self._forget_dropped()
        return self

    # --- serialisation -----------------------------------------------------------------------
    def _write(self) -> list[bytes]:
        out = [
            struct.pack("<IqqI", self._capacity, self._total, self._offset, len(self._keys)),
            self._keys.astype("<u8").tobytes(),
            self._counts.astype("<i8").tobytes(),
        ]
        for key in self._keys.tolist():
            out.append(_encode_item(self._items[key]))
        return out

    @classmethod
    def _read(cls, reader: Reader) -> TopK:
        capacity, total, offset, n = reader.unpack("IqqI")
        try:
            sketch = cls(capacity)
        except SketchError as err:
            raise reader.corrupt(str(err)) from None
        if n > capacity:
            raise reader.corrupt(f"{n} counters exceed capacity {capacity}")
        sketch._keys = reader.array(np.uint64, n)
        sketch._counts = reader.array(np.int64, n)
        sketch._total, sketch._offset = total, offset
        if n > 1 and not np.all(sketch._keys[1:] > sketch._keys[:-1]):
            raise reader.corrupt("counters are not sorted by key")
        for key in sketch._keys.tolist():
            sketch._items[key] = _decode_item(reader)
        return sketch


def _encode_item(item: Any) -> bytes:
    if isinstance(item, bool):
        return struct.pack("<BI", _BOOL, 1) + bytes((item,))
    if isinstance(item, int):
        raw = item.to_bytes((item.bit_length() + 8) // 8 or 1, "little", signed=True)
        return struct.pack("<BI", _INT, len(raw)) + raw
    if isinstance(item, float):
        return struct.pack("<BId", _FLOAT, 8, item)
    if isinstance(item, str):
        raw = item.encode("utf-8")
        return struct.pack("<BI", _STR, len(raw)) + raw
    raw = bytes(item)
    return struct.pack("<BI", _BYTES, len(raw)) + raw


def _decode_item(reader: Reader) -> Any:
    tag, size = reader.unpack("BI")
    raw = reader.take(size)
    if tag == _INT:
        return int.from_bytes(raw, "little", signed=True)
    if tag == _FLOAT:
        return struct.unpack("<d", raw)[0]
    if tag == _STR:
        return raw.decode("utf-8")
    if tag == _BYTES:
        return raw
    if tag == _BOOL:
        return bool(raw[0])
    raise reader.corrupt(f"unknown item tag {tag}")
