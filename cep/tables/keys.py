"""Dense codes for a table's primary keys: an int64 array for integer keys, a list and a dict for others.

A table numbers its keys 0, 1, 2, ... in order of first appearance; versions and lookups work on the
codes. A batch of keys finds its codes with one pandas ``get_indexer`` over the keys numbered when
the index was last built, and a dict for the few numbered since (the index is rebuilt once those
are more than an eighth of it, so the rebuilds cost a constant per key).

Integer keys (the common case: ids) are held as int64 arrays only: no Python int object and no dict
entry per key, which were most of a table's memory per row (about 100 of 265 bytes per key at
1,000,000 keys, ``benchmarks/bench_tables.py``). The first key that is not an int64 turns the
table to objects for good (a list and a dict over every key), as before.

Example:
    >>> k = KeyCodes()
    >>> k.codes_for(np.array([7, 9, 7, 4])).tolist(), k.lookup(np.array([4, 5])).tolist(), len(k)
    ([0, 1, 0, 2], [2, -1], 3)
    >>> k.codes_for(np.array(["x", 9], dtype=object)).tolist(), k.ints, k.keys_of(np.array([3, 0])).tolist()
    ([3, 1], False, ['x', 7])
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["KeyCodes"]

_EMPTY = np.zeros(0, dtype=np.int64)
_I64 = (-(2**63), 2**63)


class KeyCodes:
    """The keys of one table, by code (see the module's docstring)."""

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] | None = []  # integer keys by code, in chunks; None: keys are objects
        self._list: list[Any] = []  # object keys by code
        # object keys: every key -> code; integer keys: only those numbered since the index was built
        self._dict: dict[Any, int] = {}
        self._n = 0
        self._index: Any = None  # pandas Index over the first self._indexed keys
        self._indexed = 0

    def __len__(self) -> int:
        return self._n

    @property
    def ints(self) -> bool:
        """Every key is an int64 (held as arrays, without Python objects)."""
        return self._chunks is not None

    def _ints(self) -> np.ndarray:
        assert self._chunks is not None
        if len(self._chunks) != 1:
            self._chunks = [np.concatenate(self._chunks) if self._chunks else _EMPTY.copy()]
        return self._chunks[0]

    def _stale(self) -> bool:
        return self._n - self._indexed > max(1024, self._indexed // 8) or (self._index is None and self._n > 0)

    def _rebuild(self) -> None:
        import pandas as pd

        self._indexed = self._n
        if self._chunks is not None:
            self._index = pd.Index(self._ints())
            self._dict = {}  # the index knows them all now
        else:
            arr = np.empty(self._n, dtype=object)
            arr[:] = self._list
            self._index = pd.Index(arr, tupleize_cols=False, dtype=object)

    def _to_objects(self) -> None:
        self._list = self._ints().tolist()
        self._dict = dict(zip(self._list, range(self._n)))
        self._chunks = None
        self._index = None
        self._indexed = 0

    # ------------------------------------------------------------------ codes
    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Codes of ``keys`` (-1 for a key never seen); None and NaN keys are never found."""
        import pandas as pd

        if self._stale():
            self._rebuild()
        if len(keys) == 0:
            return _EMPTY.copy()
        if self._index is None:
            codes = np.full(len(keys), -1, dtype=np.int64)
        else:
            target = keys if keys.dtype != object else pd.Index(keys, tupleize_cols=False, dtype=object)
            codes = self._index.get_indexer(target).astype(np.int64)
        if self._n > self._indexed:  # keys numbered since the index was built: the dict knows them
            miss = np.flatnonzero(codes < 0)
            if len(miss):
                get = self._dict.get
                vals = keys[miss].tolist()
                codes[miss] = [get(v, -1) if _hashable(v) else -1 for v in vals]
        return codes

    def codes_for(self, keys: np.ndarray) -> np.ndarray:
        """Codes of ``keys``, new codes given to keys never seen (in order of first appearance)."""
        import pandas as pd

        codes = self.lookup(keys)
        miss = np.flatnonzero(codes < 0)
        if not len(miss):
            return codes
        vals = keys[miss]
        first, uniq = pd.factorize(vals, sort=False)
        uniq = np.asarray(uniq)
        n0, k = self._n, len(uniq)
        new: np.ndarray | None = None
        if self._chunks is not None:
            if uniq.dtype.kind == "i" or (uniq.dtype.kind == "u" and uniq.max() < _I64[1]):
                new = uniq.astype(np.int64)
            elif all(type(v) is int and _I64[0] <= v < _I64[1] for v in uniq.tolist()):
                new = np.asarray(uniq.tolist(), dtype=np.int64)
            else:
                self._to_objects()
        if self._chunks is not None and new is not None:
            self._chunks.append(new)
            self._dict.update(zip(new.tolist(), range(n0, n0 + k)))
        else:
            ulist = uniq.tolist()
            self._list.extend(ulist)
            self._dict.update(zip(ulist, range(n0, n0 + k)))
        self._n += k
        codes[miss] = n0 + first
        if self._chunks is not None and self._stale():
            self._rebuild()  # integer keys: the dict is only for the few numbered since the index
        return codes

    def keys_of(self, codes: np.ndarray) -> np.ndarray:
        """The key of each code: int64 for integer keys, objects (values or tuples) otherwise."""
        codes = np.asarray(codes, dtype=np.int64)
        if self._chunks is not None:
            return self._ints()[codes]
        out = np.empty(len(codes), dtype=object)
        keys = self._list
        out[:] = [keys[c] for c in codes.tolist()]
        return out

    # ------------------------------------------------------------------ size and state
    def nbytes(self) -> int:
        """Memory held for the keys (estimated for object keys: a sample of their sizes)."""
        n = 0
        if self._index is not None:
            n += int(self._index.memory_usage(deep=False))  # values and, once built, its hash table
        n += sys.getsizeof(self._dict) + len(self._dict) * 2 * sys.getsizeof(2**40)
        if self._chunks is not None:
            return n + sum(c.nbytes for c in self._chunks)
        n += sys.getsizeof(self._list)
        sample = self._list[:: max(1, self._n // 1000)]
        if sample:
            n += int(sum(_deep_size(k) for k in sample) / len(sample) * self._n)
        return n

    def state(self) -> np.ndarray | list[Any]:
        """Plain data: the keys by code (an int64 array, or a list of values and tuples)."""
        return self._ints().copy() if self._chunks is not None else list(self._list)

    @classmethod
    def from_state(cls, keys: np.ndarray | list[Any]) -> KeyCodes:
        k = cls()
        if isinstance(keys, np.ndarray) and keys.dtype == np.int64:
            k._chunks = [keys.copy()]
        elif all(type(v) is int and _I64[0] <= v < _I64[1] for v in keys):  # a list: snapshots of before
            k._chunks = [np.asarray(list(keys), dtype=np.int64)]
        else:
            k._chunks = None
            k._list = list(keys)
            k._dict = {v: i for i, v in enumerate(k._list)}
        k._n = len(keys)
        return k


def _hashable(v: Any) -> bool:
    return not isinstance(v, (list, dict, set))


def _deep_size(v: Any) -> int:
    if isinstance(v, tuple):
        return sys.getsizeof(v) + sum(sys.getsizeof(x) for x in v)
    return sys.getsizeof(v)
