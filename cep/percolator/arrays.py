"""Array helpers of the index: CSR postings and their expansion, distinct values, membership in
a sorted array, gathers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

import numpy as np

__all__ = ["_NONE", "_csr", "_csr_rows", "_expand", "_expand_index", "_isin_sorted", "_pick",
           "_unique"]


_NONE = np.zeros(0, dtype=np.int64)


def _csr(n: int, rows: Iterable[tuple[int, list[int]]]) -> tuple[np.ndarray, np.ndarray]:
    """(pointers, values) with row ``i``'s values at ``values[ptr[i]:ptr[i+1]]``."""
    counts = np.zeros(n + 1, dtype=np.int64)
    items = [(r, v) for r, v in rows if v]
    for r, v in items:
        counts[r + 1] = len(v)
    ptr = np.cumsum(counts)
    vals = np.zeros(int(ptr[-1]), dtype=np.int64)
    for r, v in items:
        vals[ptr[r]:ptr[r + 1]] = v
    return ptr, vals


def _csr_rows(n: int, rows: Mapping[int, list[Any]]) -> tuple[np.ndarray, list[Any]]:
    counts = np.zeros(n + 1, dtype=np.int64)
    for r, v in rows.items():
        counts[r + 1] = len(v)
    ptr = np.cumsum(counts)
    flat: list[Any] = [None] * int(ptr[-1])
    for r, v in rows.items():
        flat[ptr[r]:ptr[r + 1]] = v
    return ptr, flat


def _expand_index(
    ptr: np.ndarray, rows: np.ndarray, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each (row, key), every position of the key's CSR row: (positions, repeated rows)."""
    if not len(keys):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = ptr[keys]
    counts = ptr[keys + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    idx = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, counts)
    return idx, np.repeat(rows, counts)


def _expand(
    csr: tuple[np.ndarray, np.ndarray], rows: np.ndarray, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    idx, rep = _expand_index(csr[0], rows, keys)
    return rep, csr[1][idx]


def _pick(items: Any, at: Any) -> list[Any]:
    """``[items[i] for i in at]`` in one C loop (``itemgetter``): the items' memory is fetched
    with overlapping cache misses, measured 1.6x faster on 66 scattered ids.

    Example:
        >>> _pick(["a", "b", "c"], [2, 0]), _pick(["a"], [0]), _pick(["a"], [])
        (['c', 'a'], ['a'], [])
    """
    if len(at) > 1:
        return list(itemgetter(*at)(items))
    return [items[i] for i in at]


def _unique(values: np.ndarray, bound: int | None = None) -> np.ndarray:
    """Sorted distinct values (``np.unique`` without its overhead; several times faster).

    ``bound``: every value is below it; under 2**31 they are sorted as int32 (about twice as
    fast), and come back as int64.
    """
    if len(values) < 2:
        return values
    # stable: timsort, which merges the runs these codes come in (document by document)
    if bound is not None and bound < 2**31:
        values = np.sort(values.astype(np.int32), kind="stable").astype(np.int64)
    else:
        values = np.sort(values, kind="stable")
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _isin_sorted(values: np.ndarray, sorted_codes: np.ndarray) -> np.ndarray:
    """``values`` membership in an ascending array."""
    if not len(sorted_codes):
        return np.zeros(len(values), dtype=bool)
    pos = np.searchsorted(sorted_codes, values)
    pos[pos == len(sorted_codes)] = 0
    return sorted_codes[pos] == values
