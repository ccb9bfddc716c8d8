"""First-seen memory: whether a key has brought a value before, kept in a scalable Bloom filter.

Used by the ``FIRST_SEEN(x)`` condition of pattern rules (``DEFINE V AS FIRST_SEEN(V.ip)``): a row
is *first seen* when no earlier row of its partition key carried the same value of ``x``. The
memory is one filter per rule over ``(key, value)`` pairs, so it costs about two bytes per
distinct pair at a 0.1% false-positive rate whatever the number of keys, and it can only err one
way: a false positive takes a new value for a seen one (the condition is false where it should
be true); a value seen before is never reported as new.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cep.json_exact import hashable_exact, past_signed_64
from sketches import ScalableBloomFilter, SketchTypeError, hash128

__all__ = ["SeenFilter", "key_hashes"]

_MIX = np.uint64(0x9E3779B97F4A7C15)


def key_hashes(keys: list[Any]) -> np.ndarray:
    """A stable 64-bit hash per partition key: a value, or a tuple of values for several columns.

    Stable across processes and machines (MurmurHash3 of the value, not Python's ``hash``), so
    the filter means the same after a restore elsewhere. A tuple mixes its columns' hashes in
    order (``h = h * MIX + hash(column)``, from 0), each column hashed as one batch; the empty
    tuple (no PARTITION BY) hashes to 0.

    Example:
        >>> h = key_hashes(["alice", "bob", "alice"])
        >>> bool(h[0] == h[2]), bool(h[0] == h[1]), h.dtype.name
        (True, False, 'uint64')
        >>> t = key_hashes([(1, "x"), (1, "y"), (1, "x")])
        >>> bool(t[0] == t[2]), bool(t[0] == t[1])
        (True, False)
    """
    out = np.zeros(len(keys), dtype=np.uint64)
    plain = [i for i, k in enumerate(keys) if not isinstance(k, tuple)]
    if plain:
        out[plain] = _column_hashes([keys[i] for i in plain])
    by_width: dict[int, list[int]] = {}
    for i, k in enumerate(keys):
        if isinstance(k, tuple):
            by_width.setdefault(len(k), []).append(i)
    for width, rows in by_width.items():
        h = np.zeros(len(rows), dtype=np.uint64)
        for j in range(width):
            with np.errstate(over="ignore"):
                h = h * _MIX + _column_hashes([keys[i][j] for i in rows])
        out[rows] = h
    return out


def _column_hashes(values: list[Any]) -> np.ndarray:
    if past_signed_64(values):  # (the hash would take 2**64-1 for -1)
        values = [_wide_text(v) for v in values]
    try:
        hb = hash128(values)
    except SketchTypeError:  # (rare) an int past 64 bits among the keys
        hb = hash128([_wide_text(v) for v in values])
    if hb.valid is None:
        return hb.h0
    h = np.zeros(len(values), dtype=np.uint64)
    h[np.flatnonzero(hb.valid)] = hb.h0
    return h


class SeenFilter:
    """Which (key, value) pairs a rule has seen, in arrival order; mergeable state in bytes.

    Example:
        >>> import numpy as np
        >>> f = SeenFilter()
        >>> keys = key_hashes(["a", "a", "b", "a"])
        >>> f.first_seen(keys, np.array(["x", "x", "x", "y"], dtype=object))[0].tolist()
        [True, False, True, True]
        >>> f.first_seen(key_hashes(["a"]), np.array(["x"], dtype=object))[0].tolist()
        [False]
    """

    def __init__(self, capacity: int = 10_000, error_rate: float = 0.001) -> None:
        self.bloom = ScalableBloomFilter(capacity, error_rate)

    def first_seen(self, key_h: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row (in the order given): ``(first, null)``; remembers every non-null pair.

        ``first[i]`` is True when no earlier row (of an earlier call, or earlier in this batch)
        had the same key hash and value; ``null[i]`` is True where the value is NULL (None, NaN)
        or of a type no sketch can hash, and such rows are neither new nor remembered.
        """
        n = len(values)
        first = np.zeros(n, dtype=bool)
        null = np.zeros(n, dtype=bool)
        if not n:
            return first, null
        vh, valid = _value_hashes(values)
        null[~valid] = True
        sel = np.flatnonzero(valid)
        if not len(sel):
            return first, null
        with np.errstate(over="ignore"):
            pairs = (key_h[sel].astype(np.uint64) * _MIX) ^ vh[sel]
        uniq, at = np.unique(pairs, return_index=True)  # at: the first row of each pair
        new = ~np.asarray(self.bloom.contains(uniq), dtype=bool)
        first[sel[at[new]]] = True
        if new.any():
            self.bloom.update(uniq[new])
        return first, null

    def to_bytes(self) -> bytes:
        return self.bloom.to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> SeenFilter:
        f = cls.__new__(cls)
        f.bloom = ScalableBloomFilter.from_bytes(data)
        return f


def _value_hashes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """64-bit hashes of a column and a mask of the rows that have one (not NULL, hashable)."""
    n = len(values)
    if values.dtype.kind == "f":
        valid = ~np.isnan(values)
        h = np.zeros(n, dtype=np.uint64)
        h[valid] = hash128(values[valid]).h0
        return h, valid
    try:
        hb = None if past_signed_64(values) else hash128(values)  # (2**64-1 would hash as -1)
    except (SketchTypeError, TypeError, ValueError):
        hb = None
    if hb is not None:
        h = np.zeros(n, dtype=np.uint64)
        valid = np.ones(n, dtype=bool) if hb.valid is None else np.asarray(hb.valid, dtype=bool).copy()
        h[np.flatnonzero(valid)] = hb.h0
        if values.dtype == object:  # NaN among objects is NULL too
            import pandas as pd

            valid &= ~np.asarray(pd.isna(values), dtype=bool)
        return h, valid
    h = np.zeros(n, dtype=np.uint64)
    valid = np.zeros(n, dtype=bool)
    for i, v in enumerate(values.tolist()):  # mixed or odd types: row by row, bad ones are NULL
        if v is None or (isinstance(v, float) and v != v):
            continue
        try:
            one = hash128([_wide_text(v)])
        except (SketchTypeError, TypeError, ValueError):
            continue
        if len(one.h0):
            h[i] = one.h0[0]
            valid[i] = True
    return h, valid


def _wide_text(v: Any) -> Any:
    """An int past 64 bits (which the sketches' hash refuses) in a form it takes
    (:func:`cep.json_exact.hashable_exact`: the float it equals, else its tagged digits); any other
    value as is. Only on the path taken after the hash refused a column (no cost on the usual one)."""
    return hashable_exact(v)
