"""Partial aggregates of a set of cells (a key in a pane, a session) and their merge."""

from __future__ import annotations

from typing import Callable

import numpy as np

from cep.analytics.arrays import _sorted_unique
from cep.analytics.kernels import _Kernel

_MAX_CHUNKS = 8  # partials a pane holds before they are merged into one (sessions: 4 times as many)


class _Partial:
    """Partial aggregates of a set of cells: sorted cell ids, rows per cell, one state per slot."""

    __slots__ = ("cells", "n", "states")

    def __init__(self, cells: np.ndarray, n: np.ndarray, states: list):
        self.cells = cells
        self.n = n
        self.states = states

    def __getstate__(self):
        return (self.cells, self.n, self.states)

    def __setstate__(self, st):
        self.cells, self.n, self.states = st


def _member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """values in a sorted array of unique int64 (np.isin is slow on the small arrays here)."""
    if not len(sorted_set):
        return np.zeros(len(values), dtype=bool)
    at = np.searchsorted(sorted_set, values).clip(max=len(sorted_set) - 1)
    return sorted_set[at] == values


def _combine(
    parts: list[_Partial], kernels: list[_Kernel], mapper: Callable | None = None, keep: np.ndarray | None = None
) -> _Partial:
    """Merge partials into one: cells mapped by ``mapper`` (e.g. session -> its root) and
    restricted to ``keep``; each aggregate merges its states (union, max, sum, sketch merge)."""
    if len(parts) == 1 and mapper is None and keep is None:
        return parts[0]  # a partial is already merged within itself
    mapped = []
    for c in parts:
        m = c.cells if mapper is None else mapper(c.cells)
        ok = _member(m, keep) if keep is not None else None
        mapped.append((m, ok))
    pieces = [m if ok is None else m[ok] for m, ok in mapped]
    out = _sorted_unique(np.concatenate(pieces)) if pieces else np.zeros(0, dtype=np.int64)
    out = out.astype(np.int64)
    nout = len(out)
    n = np.zeros(nout, dtype=np.int64)
    positions = []
    for c, (m, ok) in zip(parts, mapped):
        pos = np.searchsorted(out, m).astype(np.int64) if nout else np.full(len(m), -1, dtype=np.int64)
        if ok is not None:
            pos[~ok] = -1
        positions.append(pos)
        sel = pos >= 0
        np.add.at(n, pos[sel], c.n[sel])
    states = [
        k.combine([(c.states[i], pos, c.cells) for c, pos in zip(parts, positions)], nout)
        for i, k in enumerate(kernels)
    ]
    return _Partial(out, n, states)
