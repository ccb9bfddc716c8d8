"""What SELECT, HAVING, WHERE and argument expressions read: columns of output rows or of a batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cep.events import EventBatch
from cep.operator import _typed
from patterns import ast as A

if TYPE_CHECKING:  # type hints only: the operator builds the contexts
    from cep.analytics.operator import WindowOperator


class _Ctx:
    """What SELECT and HAVING read for a set of output rows: keys, window bounds, slots."""

    def __init__(self, op: WindowOperator, kids: np.ndarray, wstart: np.ndarray, wend: np.ndarray,
                 cols: dict[str, np.ndarray] | None = None):
        self.op = op
        self.kids = kids
        self.n = len(kids)
        self.wstart = wstart
        self.wend = wend
        self.cols = cols or {}
        self.values: dict[str, tuple[np.ndarray, Any]] = {}
        self._keys: list | None = None
        self.window_first = False  # rows ordered by window start, then key (else key, then window start)

    def keys(self) -> list:
        if self._keys is None:
            kv = self.op._key_values
            self._keys = [kv[k] for k in self.kids.tolist()]
        return self._keys

    def column(self, name: str) -> tuple[np.ndarray, Any]:
        if name in self.values:
            return self.values[name]
        op = self.op
        if name in op.key_cols:
            keys = self.keys()
            j = op.key_cols.index(name)
            arr = np.empty(self.n, dtype=object)
            arr[:] = keys if len(op.key_cols) == 1 else [k[j] for k in keys]
            got = _typed(_narrow_obj(arr))
        elif name == "window_start":
            got = (self.wstart, False)
        elif name == "window_end":
            got = (self.wend, False)
        elif name in self.cols:
            got = _typed(self.cols[name])
        else:
            got = (np.full(self.n, None, dtype=object), np.ones(self.n, dtype=bool))
        self.values[name] = got
        return got

    def eval_per_cell(self, e: A.Expr) -> np.ndarray:
        """A row expression over keys and constants (APPROX_COUNT's value), one per output row."""
        if isinstance(e, A.Literal):
            out = np.empty(self.n, dtype=object)
            out[:] = [e.value] * self.n
            return out
        if isinstance(e, A.Column):
            v, nulls = self.column(e.name)
            v = v.astype(object) if v.dtype != object else v.copy()
            if nulls is not False and nulls is not None:
                v[np.broadcast_to(np.asarray(nulls, dtype=bool), (self.n,))] = None
            return v
        fn = self.op._rowwise(e)
        lists: dict = {}
        out = np.empty(self.n, dtype=object)
        for i in range(self.n):
            out[i] = self.op._safe(fn, (i, self, lists))
        return out


def _narrow_obj(arr: np.ndarray) -> np.ndarray:
    kind = pd.api.types.infer_dtype(arr, skipna=False)
    try:
        if kind == "integer":
            return arr.astype(np.int64)
        if kind == "floating":
            return arr.astype(np.float64)
    except (OverflowError, ValueError, TypeError):
        pass
    return arr


class _BatchCtx:
    """Columns of a batch at some rows, for WHERE and argument expressions."""

    def __init__(self, batch: EventBatch, idx: np.ndarray):
        self.batch = batch
        self.idx = idx
        self.cache: dict[str, tuple] = {}

    def column(self, name: str) -> tuple[np.ndarray, Any]:
        got = self.cache.get(name)
        if got is None:
            got = self.cache[name] = _typed(self.batch.column(name)[self.idx])
        return got
