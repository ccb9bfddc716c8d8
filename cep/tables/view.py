"""A table-table view at run time: the join of two tables, kept incrementally in event time, and its changelog.

The view's row for key k at time t is the join of the left table's row of k as of t with the right
table's row, as of t, whose primary key equals that left row's ``ON`` columns (none: an inner view
has no row; a left view has the left row with the right columns NULL). The view changes only when
one of those rows does, so a step over the times ``(emitted_to, B]`` looks at:

* every left change (k, t) in the range: the candidate (k, t);
* every right change (k2, t): the candidates (k, t) for every left key k that may point at k2 then:
  those pointing at it at ``emitted_to`` (a reverse index, kept as of ``emitted_to``) and those
  with a left version in the range pointing at it (a superset is fine: unchanged rows emit nothing).

Each candidate's view row is computed by as-of lookups in both tables (vectorised) and compared
with the row just before it (the previous candidate of its key, or the row at ``emitted_to``): a
difference is a change, emitted as a Debezium-like envelope (``op`` c / u / d, or ``r`` with
``ts_ms`` null for rows of the beginning of time; ``before``, ``after``, ``ts_ms``). ``B`` is the
smaller of the two tables' release bounds: a change at or before it is final, since every change still on time for either
table is later. The view's own rows are a :class:`~cep.tables.table.Table` whose watermark follows
``B``, so rules join a view as they join a table.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from cep.tables.store import MIN_TIME, key_values
from cep.tables.table import Table
from patterns.views import ViewSpec

__all__ = ["View", "ViewCounts", "MAX_TIME"]

MAX_TIME = int(np.iinfo(np.int64).max)
"""The release bound at the end of input (and of two static tables): every change is final."""


@dataclass
class ViewCounts:
    """The changes a view has emitted, by kind."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0


class View:
    """One declared view over two tables (either may be a view's table), stepped as their watermarks move.

    Example:
        >>> from cep.events import batch_from_records
        >>> from patterns.tables import TableSpec
        >>> from patterns.views import parse_view_sql
        >>> cos = Table(TableSpec("cos", "a", ("sym",), ("sec",), time_field="ts"))
        >>> secs = Table(TableSpec("secs", "b", ("id",), ("label",), time_field="ts"))
        >>> v = View(parse_view_sql("v", "SELECT c.sec, s.label FROM cos AS c JOIN secs AS s ON c.sec = s.id",
        ...                         {"cos": cos.spec, "secs": secs.spec}), cos, secs)
        >>> _ = cos.apply(batch_from_records([{"sym": "A", "sec": 1, "ts": 5}, {"sym": "B", "sec": 1, "ts": 6}]))
        >>> _ = secs.apply(batch_from_records([{"id": 1, "label": "x", "ts": 1}, {"id": 1, "label": "y", "ts": 9}]))
        >>> [(r["op"], r["key"]["sym"], r["after"]["label"], r["ts_ms"]) for r in v.advance(final=True)]
        [('c', 'A', 'x', 5), ('c', 'B', 'x', 6), ('u', 'A', 'y', 9), ('u', 'B', 'y', 9)]
    """

    def __init__(self, spec: ViewSpec, left: Table, right: Table):
        self.spec = spec
        self.name = spec.name
        self.left = left
        self.right = right
        self.table = Table(spec.table_spec())
        self.emitted_to: int | None = None  # every change at or before this time is out (None: none yet)
        self.counts = ViewCounts()
        self._left_cols = tuple(dict.fromkeys([c for s, c, _ in spec.select if s == "left"]
                                              + [c for c in spec.on if c not in left.spec.primary_key]))
        self._right_cols = tuple(dict.fromkeys(c for s, c, _ in spec.select if s == "right"))
        # a primary-key join: the right key is the left key itself, no index needed
        self._pk_join = tuple(spec.on) == tuple(left.spec.primary_key)
        # the reverse index, as of emitted_to: per left code the id of the right key it points at (-1: none)
        self._fk_of = np.zeros(0, dtype=np.int64)
        self._fk_ids: dict[Any, int] = {}
        self._index_ok = True

    # ------------------------------------------------------------------ time
    def bound(self) -> int | None:
        """The latest time whose changes are final: both tables' release bounds passed it (None: not yet)."""
        b1, b2 = self.left.release_bound(), self.right.release_bound()
        if b1 is None or b2 is None:
            return None
        return min(b1, b2)

    @property
    def watermark(self) -> int | None:
        return self.table.watermark

    def advance(self, final: bool = False) -> list[dict[str, Any]]:
        """Emit the changes that became final (all of them when ``final``: the end of input)."""
        bound = MAX_TIME if final else self.bound()
        if bound is None or (self.emitted_to is not None and bound <= self.emitted_to):
            return []
        rows = self._step(bound)
        self.emitted_to = bound
        if bound >= MAX_TIME:
            self.table.static = True
        else:  # the view's table answers for times up to the bound, as a table whose watermark is bound + 1
            self.table.max_ts = bound + 1
        return rows

    # ------------------------------------------------------------------ the step
    def _step(self, bound: int) -> list[dict[str, Any]]:
        import pandas as pd

        L, R = self.left.store, self.right.store
        if not self._index_ok:
            self._rebuild_index()
        lo = self.emitted_to
        c1, t1 = L.versions_between(lo, bound)
        c2, t2 = R.versions_between(lo, bound)
        if not len(c1) and not len(c2):
            return []
        codes, times = [c1], [t1]
        if len(c2):
            k2 = R.keys_of(c2)
            if self._pk_join:
                lc = L.codes_of(_plain_keys(k2))
                ok = lc >= 0
                codes.append(lc[ok])
                times.append(t2[ok])
            else:
                right = pd.DataFrame({"fk": _objects(k2), "t": t2})
                ids = np.array([self._fk_ids.get(v, -1) for v in k2.tolist()], dtype=np.int64)
                if (ids >= 0).any():  # left rows pointing at a changed right key at emitted_to
                    self._grow()
                    sel = np.flatnonzero(np.isin(self._fk_of, ids[ids >= 0]))
                    if len(sel):
                        m = pd.DataFrame({"code": sel, "fid": self._fk_of[sel]}).merge(
                            pd.DataFrame({"fid": ids, "t": t2}), on="fid")
                        codes.append(m["code"].to_numpy(np.int64))
                        times.append(m["t"].to_numpy(np.int64))
                if len(c1):  # left versions of the step pointing at a changed right key
                    fk = self._fk(c1, t1)
                    has = np.array([v is not None for v in fk.tolist()], dtype=bool)
                    if has.any():
                        m = pd.DataFrame({"code": c1[has], "fk": fk[has]}).merge(right, on="fk")
                        codes.append(m["code"].to_numpy(np.int64))
                        times.append(m["t"].to_numpy(np.int64))
        code = np.concatenate(codes)
        t = np.concatenate(times)
        order = np.lexsort((t, code))
        code, t = code[order], t[order]
        keep = np.ones(len(code), dtype=bool)
        keep[1:] = (code[1:] != code[:-1]) | (t[1:] != t[:-1])
        code, t = code[keep], t[keep]
        exists, values = self._rows(code, t)
        # the row just before each candidate: the previous candidate of its key, or the row at emitted_to
        first = np.ones(len(code), dtype=bool)
        first[1:] = code[1:] != code[:-1]
        prev_exists = np.zeros(len(code), dtype=bool)
        prev_exists[1:] = exists[:-1]
        prev_values = {c: _shift(v) for c, v in values.items()}
        fi = np.flatnonzero(first)
        if lo is not None and len(fi):
            e0, v0 = self._rows(code[fi], np.full(len(fi), lo, dtype=np.int64))
            prev_exists[fi] = e0
            for c in prev_values:
                prev_values[c] = _put(prev_values[c], fi, v0[c])
        else:
            prev_exists[fi] = False
        differ = exists != prev_exists
        both = np.flatnonzero(exists & prev_exists)
        for c in values:
            if len(both):
                differ[both] |= ~_same(values[c][both], prev_values[c][both])
        idx = np.flatnonzero(differ)
        idx = idx[np.lexsort((code[idx], t[idx]))]  # in time order, then the left table's key order
        rows = self._emit(code[idx], t[idx], exists[idx], prev_exists[idx],
                          {c: v[idx] for c, v in values.items()}, {c: v[idx] for c, v in prev_values.items()})
        if len(idx):
            vk = L.keys_of(code[idx])
            vk = _plain_keys(vk) if len(self.spec.key) == 1 else vk
            self.table.store.apply(vk, t[idx], ~exists[idx], {c: v[idx] for c, v in values.items()})
            self.table.counts.applied += len(idx)
        if not self._pk_join and len(c1):
            self._grow()
            changed = np.unique(c1)
            self._fk_of[changed] = self._ids(self._fk(changed, np.full(len(changed), bound, dtype=np.int64)))
        return rows

    def _rows(self, code: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The view's row of each left key code as of each time: whether it exists, and its columns."""
        L, R = self.left.store, self.right.store
        r1 = L.lookup_codes(code, t)
        v1 = L.gather(r1, self._left_cols)
        fk = self._fk_values(code, r1, v1)
        r2 = R.lookup(fk, t) if len(code) else np.zeros(0, dtype=np.int64)
        r2 = np.where(r1 >= 0, r2, -1)
        v2 = R.gather(r2, self._right_cols)
        exists = (r1 >= 0) & (r2 >= 0) if self.spec.kind == "INNER" else r1 >= 0
        values = {out: (v1 if side == "left" else v2)[col] for side, col, out in self.spec.select}
        return exists, values

    def _fk_values(self, code: np.ndarray, r1: np.ndarray, v1: dict[str, np.ndarray]) -> np.ndarray:
        """Per left row, the right key its ON columns name (the key's columns or its value columns)."""
        key = self.left.spec.primary_key
        cols = []
        keys: Any = None
        split: list[Any] | None = None
        if any(c in key for c in self.spec.on):
            keys = self.left.store.keys_of(code)
            split = [k for k in keys.tolist()] if len(key) == 1 else None
        for c in self.spec.on:
            if c in key:
                if split is not None:
                    arr = np.empty(len(code), dtype=object)
                    arr[:] = split
                else:
                    j = key.index(c)
                    arr = np.empty(len(code), dtype=object)
                    arr[:] = [k[j] for k in keys.tolist()]
                cols.append(_plain_keys(arr))
            else:
                cols.append(v1[c])
        fk = key_values(cols)
        if len(cols) > 1:  # a tuple with a NULL part names no right row
            fk = fk.copy()
            for i, v in enumerate(fk.tolist()):
                if any(_null(x) for x in v):
                    fk[i] = None
        return fk

    def _fk(self, code: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The right key each left code points at as of each time, as objects (None: no left row, or NULL)."""
        r1 = self.left.store.lookup_codes(code, t)
        v1 = self.left.store.gather(r1, self._left_cols)
        fk = _objects(self._fk_values(code, r1, v1))
        fk[r1 < 0] = None
        return fk

    # ------------------------------------------------------------------ the reverse index
    def _ids(self, fk: np.ndarray) -> np.ndarray:
        out = np.full(len(fk), -1, dtype=np.int64)
        ids = self._fk_ids
        for i, v in enumerate(fk.tolist()):
            if v is not None:
                j = ids.get(v)
                if j is None:
                    j = ids[v] = len(ids)
                out[i] = j
        return out

    def _grow(self) -> None:
        n = self.left.store.n_codes()
        if len(self._fk_of) < n:
            self._fk_of = np.concatenate([self._fk_of, np.full(n - len(self._fk_of), -1, dtype=np.int64)])

    def _rebuild_index(self) -> None:
        """The reverse index as of ``emitted_to``, from the tables (after a restore: it is not in the snapshot)."""
        self._index_ok = True
        self._fk_ids = {}
        self._fk_of = np.zeros(0, dtype=np.int64)
        self._grow()
        if self._pk_join or self.emitted_to is None or not len(self._fk_of):
            return
        codes = np.arange(len(self._fk_of), dtype=np.int64)
        self._fk_of = self._ids(self._fk(codes, np.full(len(codes), self.emitted_to, dtype=np.int64)))

    # ------------------------------------------------------------------ output
    def _emit(self, code: np.ndarray, t: np.ndarray, exists: np.ndarray, prev: np.ndarray,
              values: dict[str, np.ndarray], before: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        key_names = self.spec.key
        one = len(key_names) == 1
        keys = self.left.store.keys_of(code).tolist()
        names = list(values)
        n = len(keys)
        cur = list(zip(*[_py_list(values[c]) for c in names])) if names else [()] * n
        old = list(zip(*[_py_list(before[c]) for c in names])) if names else [()] * n
        ops = np.where(~exists, "d", np.where(~prev, np.where(t == MIN_TIME, "r", "c"), "u")).tolist()
        self.counts.deletes += int((~exists).sum())
        self.counts.inserts += int((exists & ~prev).sum())
        self.counts.updates += int((exists & prev).sum())
        rows = []
        name = self.name
        k0 = key_names[0]
        for k, had, has, o, c, op, ts in zip(keys, prev.tolist(), exists.tolist(), old, cur, ops, t.tolist()):
            key = {k0: k} if one else dict(zip(key_names, k))
            b = {**key, **dict(zip(names, o))} if had else None
            a = {**key, **dict(zip(names, c))} if has else None
            rows.append({"view": name, "op": op, "key": key, "before": b, "after": a,
                         "ts_ms": None if ts == MIN_TIME else ts})
        return rows

    # ------------------------------------------------------------------ state
    def stats(self) -> dict[str, Any]:
        return {**asdict(self.counts), **self.table.stats().to_dict(), "watermark": self.table.watermark}

    def state(self) -> dict[str, Any]:
        return {"emitted_to": self.emitted_to, "table": self.table.state(), "static": self.table.static,
                "counts": asdict(self.counts)}

    def restore(self, state: dict[str, Any]) -> None:
        self.emitted_to = state["emitted_to"]
        self.table.restore(state["table"])
        self.table.static = bool(state["static"])
        self.counts = ViewCounts(**state["counts"])
        self._index_ok = False  # rebuilt from the restored tables at the next step


def _null(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _py_list(a: np.ndarray) -> list[Any]:
    """Plain Python values, NULL (None or NaN) as None: what a JSON row holds."""
    import pandas as pd

    if a.dtype.kind in "iub":
        return a.tolist()
    if a.dtype.kind == "f":
        o = a.astype(object)
        o[np.isnan(a)] = None
        return o.tolist()
    nulls = np.asarray(pd.isna(a), dtype=bool) if a.dtype == object else np.zeros(len(a), dtype=bool)
    if nulls.any():
        a = a.copy()
        a[nulls] = None
    return a.tolist()


def _objects(a: np.ndarray) -> np.ndarray:
    """``a`` as Python objects (NULLs as None): keys that compare and hash as the tables' keys do."""
    out = np.empty(len(a), dtype=object)
    out[:] = [None if _null(v) else v for v in a.tolist()]
    return out


def _plain_keys(keys: np.ndarray) -> np.ndarray:
    """Object keys narrowed to int64 when they all are ints (the store's fast integer index)."""
    if keys.dtype == object and len(keys) and all(type(v) is int for v in keys.tolist()):
        try:
            return np.asarray(keys.tolist(), dtype=np.int64)
        except OverflowError:
            return keys
    return keys


def _shift(a: np.ndarray) -> np.ndarray:
    """``a`` moved one place on (the first place left as it is: it is overwritten)."""
    out = a.copy()
    out[1:] = a[:-1]
    return out


def _put(a: np.ndarray, idx: np.ndarray, v: np.ndarray) -> np.ndarray:
    if a.dtype != v.dtype:
        a = a.astype(object)
        v = v.astype(object)
    a[idx] = v
    return a


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: the same value, NULL equal to NULL (a view row changes only when a value does)."""
    if a.dtype == b.dtype and a.dtype.kind in "iub":
        return a == b
    if a.dtype == b.dtype and a.dtype.kind == "f":
        return (a == b) | (np.isnan(a) & np.isnan(b))
    out = np.empty(len(a), dtype=bool)
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        nx, ny = _null(x), _null(y)
        out[i] = (nx and ny) or (not nx and not ny and type(x) is type(y) and x == y) or (
            not nx and not ny and isinstance(x, (int, float)) and isinstance(y, (int, float))
            and not isinstance(x, bool) and not isinstance(y, bool) and x == y)
    return out
