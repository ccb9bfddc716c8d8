"""Count-Min sketch: frequency estimates that never under-count, with conservative update."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from sketches._base import Reader, Sketch
from sketches.errors import SketchError
from sketches.hashing import hash_scalar, is_scalar, iter_hashes

__all__ = ["CountMinSketch", "weights_for"]

_U32 = np.uint64(32)
_MASK64 = (1 << 64) - 1
MAX_WIDTH = 1 << 31
MAX_DEPTH = 64


class CountMinSketch(Sketch):
    """Approximate frequencies in ``depth`` rows of ``width`` counters (Cormode-Muthukrishnan).

    ``estimate(x)`` never under-counts, and over-counts by at most ``epsilon * total`` with
    probability at least ``1 - delta``, where ``epsilon = e / width`` and
    ``delta = exp(-depth)``. Row ``i`` of an item is its hash ``h0 + i * h1`` reduced to
    ``[0, width)`` with a multiply-shift of the top 32 bits.

    With ``conservative=True`` (the default) an update raises each of an item's counters only
    up to the smallest estimate that stays an upper bound, which cuts the over-count a lot on
    skewed data. A batch is applied in blocks of up to 32,768 items: the distinct items of a
    block are counted exactly, and each one's counters rise to (the smallest of its counters)
    + (its count in the block). That is the classic conservative update whenever no two
    distinct items of a block share a counter, and keeps both guarantees above in any case.
    Conservative counters depend on how the stream was cut into blocks, and merging (which
    sums counters) keeps the guarantees but not the conservative tightening; with
    ``conservative=False`` a merge equals one sketch fed both streams, counter for counter.

    ``None``, nulls and NaN are ignored by :meth:`update` and estimated as 0.

    Args:
        width: Counters per row (epsilon = e / width).
        depth: Number of rows (delta = exp(-depth)).
        conservative: Use conservative update.

    Example:
        >>> from sketches import CountMinSketch
        >>> cms = CountMinSketch.from_error(epsilon=0.001, delta=0.01)
        >>> cms.width, cms.depth
        (2719, 5)
        >>> cms.update(["GET", "GET", "POST", None])
        >>> cms.estimate("GET"), cms.estimate(["POST", "PUT"]).tolist()
        (2, [1, 0])
        >>> cms.total
        3
    """

    TYPE_BYTE = 0x43  # "C"

    def __init__(self, width: int = 2048, depth: int = 5, conservative: bool = True) -> None:
        for name, value, top in (("width", width, MAX_WIDTH), ("depth", depth, MAX_DEPTH)):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, np.integer))
                or not (1 <= value <= top)
            ):
                raise SketchError(
                    f"CountMinSketch {name}={value!r} is out of range: expected an integer "
                    f"from 1 to {top}; or build it with CountMinSketch.from_error(epsilon, delta)"
                )
        self._width = int(width)
        self._depth = int(depth)
        self._conservative = bool(conservative)
        self._table = np.zeros((self._depth, self._width), dtype=np.int64)
        self._total = 0
        self._w = np.uint64(self._width)

    @classmethod
    def from_error(cls, epsilon: float, delta: float, conservative: bool = True) -> CountMinSketch:
        """Size a sketch so that over-counts stay within ``epsilon * total`` w.p. ``1 - delta``.

        ``width = ceil(e / epsilon)``, ``depth = ceil(ln(1 / delta))``.
        """
        for name, value in (("epsilon", epsilon), ("delta", delta)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise SketchError(
                    f"CountMinSketch {name}={value!r} is out of range: expected a number "
                    "strictly between 0 and 1, such as 0.001"
                )
        width = math.ceil(math.e / epsilon)
        depth = math.ceil(math.log(1.0 / delta))
        return cls(width=width, depth=max(depth, 1), conservative=conservative)

    # --- properties --------------------------------------------------------------------------
    @property
    def width(self) -> int:
        """Counters per row."""
        return self._width

    @property
    def depth(self) -> int:
        """Number of rows."""
        return self._depth

    @property
    def conservative(self) -> bool:
        """Whether updates are conservative."""
        return self._conservative

    @property
    def epsilon(self) -> float:
        """Relative over-count bound: e / width."""
        return math.e / self._width

    @property
    def delta(self) -> float:
        """Probability that an estimate exceeds its bound: exp(-depth)."""
        return math.exp(-self._depth)

    @property
    def total(self) -> int:
        """Sum of all weights added (the stream length for unit weights)."""
        return self._total

    @property
    def error_bound(self) -> float:
        """Over-count bound that holds with probability 1 - delta: epsilon * total."""
        return self.epsilon * self._total

    @property
    def nbytes(self) -> int:
        """Bytes of memory held by the counters."""
        return int(self._table.nbytes)

    def _params(self) -> str:
        return (
            f"CountMinSketch(width={self._width}, depth={self._depth}, "
            f"conservative={self._conservative})"
        )

    # --- hashing -----------------------------------------------------------------------------
    def _columns(self, h0: np.ndarray, h1: np.ndarray) -> Iterator[np.ndarray]:
        g = h0.copy()
        with np.errstate(over="ignore"):
            for i in range(self._depth):
                if i:
                    g += h1
                col = g >> _U32
                col *= self._w
                col >>= _U32
                yield col.view(np.int64)

    # --- updating ----------------------------------------------------------------------------
    def update(self, values: Any, weights: Any = None) -> None:
        """Count a value or a batch of values.

        Args:
            values: A scalar or a batch; ``None``, nulls and NaN are ignored.
            weights: Optional non-negative integer weight: one for all, or one per value
                (aligned with ``values``, missing values' weights are ignored).
        """
        if is_scalar(values) and (weights is None or isinstance(weights, (int, np.integer))):
            self._add_one(values, 1 if weights is None else weights)
            return
        batch, chunks = iter_hashes(values)
        w = weights_for(batch, weights, "CountMinSketch")
        done = 0
        for h0, h1 in chunks:
            cw = None if w is None else w[done : done + len(h0)]
            done += len(h0)
            self._add(h0, h1, cw)
            self._total += len(h0) if cw is None else int(cw.sum())

    def _cells(self, h0: int, h1: int) -> list[int]:
        """Column of one item in each row, in plain Python."""
        width = self._width
        return [((((h0 + i * h1) & _MASK64) >> 32) * width) >> 32 for i in range(self._depth)]

    def _add_one(self, value: Any, weight: Any) -> None:
        if isinstance(weight, bool) or weight < 0:
            weights_for(None, weight, "CountMinSketch")  # raises the usual message
        hashed = hash_scalar(value)
        if hashed is None:
            return
        weight = int(weight)
        table = self._table
        cells = self._cells(*hashed)
        if self._conservative:
            target = min(int(table[i, c]) for i, c in enumerate(cells)) + weight
            for i, c in enumerate(cells):
                if table[i, c] < target:
                    table[i, c] = target
        else:
            for i, c in enumerate(cells):
                table[i, c] += weight
        self._total += weight

    def _add(self, h0: np.ndarray, h1: np.ndarray, w: np.ndarray | None) -> None:
        table = self._table
        if not self._conservative:
            for row, col in zip(table, self._columns(h0, h1)):
                np.add.at(row, col, 1 if w is None else w)
            return
        # Count each distinct item of the block exactly, then raise its counters to
        # (smallest of its counters) + (its count in the block).
        keys, counts = _distinct(h0, h1, w)
        cols = list(self._columns(keys[0], keys[1]))
        est = table[0][cols[0]].copy()
        for row, col in zip(table[1:], cols[1:]):
            np.minimum(est, row[col], out=est)
        est += counts
        for row, col in zip(table, cols):
            np.maximum.at(row, col, est)

    # --- querying ----------------------------------------------------------------------------
    def estimate(self, values: Any) -> int | np.ndarray:
        """Estimated count: an int for a scalar, an int64 array for a batch (missing -> 0)."""
        if is_scalar(values):
            hashed = hash_scalar(values)
            if hashed is None:
                return 0
            table = self._table
            return min(int(table[i, c]) for i, c in enumerate(self._cells(*hashed)))
        batch, chunks = iter_hashes(values)
        out = np.empty(batch.count, dtype=np.int64)
        done = 0
        for h0, h1 in chunks:
            est: np.ndarray | None = None
            for row, col in zip(self._table, self._columns(h0, h1)):
                got = row[col]
                est = got if est is None else np.minimum(est, got, out=est)
            out[done : done + len(h0)] = est if est is not None else 0
            done += len(h0)
        if batch.valid is not None:
            full = np.zeros(batch.size, dtype=np.int64)
            full[batch.valid] = out
            out = full
        if batch.scalar:
            return int(out[0])
        return out

    # --- merging -----------------------------------------------------------------------------
    def merge(self, other: CountMinSketch) -> CountMinSketch:
        """Add another sketch's counters to this one, in place; returns self.

        Raises:
            IncompatibleSketchError: other is not a CountMinSketch, or its width, depth or
                update mode differs.
        """
        self._check_mergeable(other)
        if (other._width, other._depth) != (self._width, self._depth):
            raise self._incompatible(
                other, "shapes differ", "build both with the same width and depth"
            )
        if other._conservative != self._conservative:
            raise self._incompatible(
                other,
                "update modes differ",
                "build both with the same conservative setting",
            )
        self._table += other._table
        self._total += other._total
        return self

    # --- serialisation -----------------------------------------------------------------------
    def _write(self) -> list[bytes]:
        head = struct.pack("<IIBq", self._width, self._depth, self._conservative, self._total)
        return [head, self._table.astype("<i8").tobytes()]

    @classmethod
    def _read(cls, reader: Reader) -> CountMinSketch:
        width, depth, conservative, total = reader.unpack("IIBq")
        try:
            cms = cls(width, depth, bool(conservative))
        except SketchError as err:
            raise reader.corrupt(str(err)) from None
        cms._table = reader.array(np.int64, width * depth).reshape(depth, width)
        cms._total = total
        return cms


def _distinct(
    h0: np.ndarray, h1: np.ndarray, w: np.ndarray | None
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """The distinct (h0, h1) pairs of a block and the total weight of each."""
    _, first, inverse = np.unique(h0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not np.array_equal(h1[first][inverse], h1):
        # Two items share h0 but not h1 (odds 2**-64 per pair): group on both halves.
        pairs = np.stack([h0, h1], axis=1)
        _, first, inverse = np.unique(pairs, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    if w is None:
        counts = np.bincount(inverse, minlength=len(first)).astype(np.int64)
    else:
        counts = np.zeros(len(first), dtype=np.int64)
        np.add.at(counts, inverse, w)
    return (h0[first], h1[first]), counts


def weights_for(batch: Any, weights: Any, owner: str) -> np.ndarray | None:
    """Weights of a batch's non-missing items as int64, or None for unit weights."""
    if weights is None:
        return None
    if np.isscalar(weights):
        if isinstance(weights, bool) or not isinstance(weights, (int, np.integer)) or weights < 0:
            raise SketchError(
                f"{owner} weights={weights!r} is invalid: expected a non-negative integer or "
                "one per value"
            )
        return np.full(batch.count, int(weights), dtype=np.int64)
    w = np.asarray(weights)
    if w.ndim != 1 or len(w) != batch.size:
        raise SketchError(
            f"{owner} got {len(w) if w.ndim == 1 else w.shape} weights for {batch.size} values: "
            "pass one weight per value, or a single integer"
        )
    if w.dtype.kind not in "iu" or (len(w) and w.min() < 0):
        raise SketchError(
            f"{owner} weights must be non-negative integers, got dtype {w.dtype} "
            f"(minimum {w.min().item() if len(w) else None!r})"
        )
    w = w.astype(np.int64)
    return w if batch.valid is None else w[batch.valid]
