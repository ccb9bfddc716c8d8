"""Numpy building blocks of the kernels, partials and windows: rows grouped by cell, reductions, sorted ints."""

from __future__ import annotations

import numpy as np

_NEG = np.iinfo(np.int64).min
_POS = np.iinfo(np.int64).max
_MIX = np.uint64(0x9E3779B97F4A7C15)


class _Groups:
    """Rows grouped by an int64 code: the sort order, group starts and group codes."""

    __slots__ = ("order", "starts", "codes", "inv", "n")

    def __init__(self, codes: np.ndarray, stable: bool = True):
        """``stable``: rows of a group keep their order in ``order`` (else any order, sorted faster:
        for kernels that read only ``inv``, ``starts`` and ``codes``, or reduce exactly)."""
        n = len(codes)
        self.n = n
        if n == 0:
            self.order = np.zeros(0, dtype=np.int64)
            self.starts = np.zeros(0, dtype=np.int64)
            self.codes = np.zeros(0, dtype=np.int64)
            self.inv = np.zeros(0, dtype=np.int64)
            return
        order = np.argsort(codes, kind="stable" if stable else "quicksort")
        sc = codes[order]
        flag = np.empty(n, dtype=bool)
        flag[0] = True
        np.not_equal(sc[1:], sc[:-1], out=flag[1:])
        self.order = order
        self.starts = np.flatnonzero(flag)
        self.codes = sc[self.starts]
        inv_sorted = np.cumsum(flag) - 1
        self.inv = np.empty(n, dtype=np.int64)
        self.inv[order] = inv_sorted

    @property
    def ngroups(self) -> int:
        return len(self.starts)

    def counts(self) -> np.ndarray:
        return np.diff(np.append(self.starts, self.n))


_REDUCE = {"sum": np.add, "min": np.minimum, "max": np.maximum}


def _reduce(arrays: tuple[np.ndarray, ...], reducers: tuple[str, ...], g: _Groups) -> tuple[np.ndarray, ...]:
    if g.n == 0:
        return tuple(a[:0] for a in arrays)
    return tuple(_REDUCE[r].reduceat(a[g.order], g.starts) for a, r in zip(arrays, reducers))


def _concat_parts(parts, nout: int, index: int | None = None):
    """(values of every part where pos >= 0, their output positions)."""
    vals, poss = [], []
    for state, pos, _cells in parts:
        keep = pos >= 0
        v = state if index is None else state[index]
        vals.append(v[keep] if not keep.all() else v)
        poss.append(pos[keep] if not keep.all() else pos)
    return vals, np.concatenate(poss) if poss else np.zeros(0, dtype=np.int64)


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique for int arrays, by sorting: far faster here than numpy's hash-based unique,
    and fastest when ``a`` is a concatenation of sorted runs (timsort merges them)."""
    if len(a) < 2:
        return a.copy()
    a = np.sort(a, kind="stable")
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _pair_words(cells: np.ndarray, h0: np.ndarray) -> np.ndarray:
    """A 64-bit word for (cell or key hash, value hash) pairs; the sketches hash it again."""
    with np.errstate(over="ignore"):
        return (cells.astype(np.uint64) * _MIX) ^ h0
