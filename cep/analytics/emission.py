"""Rows the window engines emit: when the clock reached them, corrections, and the order keys come out in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # type hints only: the operator drives the window engines
    from cep.analytics.operator import WindowOperator


class _Emission:
    """One batch of candidate output rows: what triggered it and its evaluated slots."""

    __slots__ = ("trigger", "threshold", "kind", "rows", "tie")

    def __init__(self, trigger: int, threshold: int, kind: int, rows: list, tie: tuple = ()):
        self.trigger = trigger  # position in the call's stream where the clock reached the threshold
        self.threshold = threshold  # the window end (on time) or end + lateness (correction)
        self.kind = kind  # 0 on time, 1 correction
        self.rows = rows
        self.tie = tie  # orders emissions of one trigger and threshold: the key, the window start

    def sort_key(self) -> tuple:
        return (self.trigger, self.threshold, self.kind, self.tie)


def _trigger(r_all: np.ndarray, threshold: int, seg_start: int, final: bool) -> int:
    """Where in the call's stream the clock first reached ``threshold`` (not before the segment)."""
    if final:
        return len(r_all)
    return max(int(np.searchsorted(r_all, threshold, side="left")), seg_start)


def _corrections(kids: np.ndarray, rows: list[tuple[int, dict]], emitted: dict[int, dict], op: WindowOperator) -> list[dict]:
    """Rows of a window made final whose late events changed it: new rows, changed rows, retractions."""
    out = []
    now = dict(rows)
    kv = op._key_values
    for kid in sorted(kids.tolist(), key=lambda k: _sort_key(kv[k])):
        new = now.get(kid)
        old = emitted.get(kid)
        if new is not None:
            if old is None or new != old:
                row = dict(new)
                row["correction"] = True
                out.append(row)
                op.stats.corrections += 1
        elif old is not None:
            row = op._row_for_retraction(kid, old)
            out.append(row)
            op.stats.retractions += 1
    return out


def _triggers(r_all: np.ndarray, thresholds: np.ndarray, seg_start: int, final: bool) -> np.ndarray:
    """_trigger for many thresholds at once."""
    if final:
        return np.full(len(thresholds), len(r_all), dtype=np.int64)
    return np.maximum(np.searchsorted(r_all, thresholds, side="left"), seg_start).astype(np.int64)


def _key_ranks(keys: list) -> np.ndarray:
    """Rank of each key in output order (see _key_order), equal keys equal ranks."""
    if not keys:
        return np.zeros(0, dtype=np.int64)
    kinds = set(map(type, keys))
    if len(kinds) == 1 and kinds <= {int, float, str}:
        arr = np.array(keys)
        if arr.dtype.kind in "iufU":
            return np.unique(arr, return_inverse=True)[1].reshape(-1).astype(np.int64)
    uniq = sorted(set(keys), key=_sort_key)
    rank = {k: i for i, k in enumerate(uniq)}
    return np.array([rank[k] for k in keys], dtype=np.int64)


def _key_order(keys: list, wstart: np.ndarray, window_first: bool = False) -> np.ndarray:
    """Positions of rows in output order: by key (numbers by value, strings by text, one type
    before another by its name), then window start; with ``window_first``, by window start, then key."""
    n = len(keys)
    if n < 2:
        return np.arange(n)
    kinds = set(map(type, keys))
    if len(kinds) == 1 and kinds <= {int, float, str}:
        arr = np.array(keys)
        if arr.dtype.kind in "iufU":
            return np.lexsort((arr, wstart) if window_first else (wstart, arr))
    if window_first:
        return np.array(sorted(range(n), key=lambda j: (int(wstart[j]), _sort_key(keys[j]))), dtype=np.int64)
    return np.array(sorted(range(n), key=lambda j: (_sort_key(keys[j]), int(wstart[j]))), dtype=np.int64)


def _sort_key(k: Any) -> tuple:
    """Output order of keys of mixed types: by type name, then value (text when not comparable)."""
    if isinstance(k, (int, float)) and not isinstance(k, bool):
        return ("number", k, "")
    if isinstance(k, str):
        return ("str", 0, k)
    if isinstance(k, tuple):
        return ("tuple", 0, tuple(_sort_key(x) for x in k))
    return (type(k).__name__, 0, str(k))
