"""A versioned table: per primary key, the versions (valid-from event time, row or tombstone), read as of a time.

A lookup for key k at event time t sees the version of k with the largest valid-from time at or
before t (Flink's temporal join: a version is valid over ``[valid_from, next valid_from)``); a
tombstone there, or no version at all, is "no row". Changes may be applied in any order: the
answer for (k, t) depends only on which changes with time <= t have been applied, so a replay gives
the answer of the live run.

Layout, for whole-batch work with numpy:

* keys get dense codes (:class:`cep.tables.keys.KeyCodes`: int64 arrays for integer keys, a dict
  for others; a pandas Index for vectorised ``get_indexer`` lookups, rebuilt as keys accumulate);
* versions are three parallel int64 arrays sorted by (key code, valid-from, arrival), with CSR
  offsets per code; new versions wait in a small delta and are merged in with one ``np.insert``;
* rows are stored column-wise (typed numpy arrays where a column's values allow it; a column of
  few repeated strings holds one object per distinct string); a version points at its row, -1
  for a tombstone.

A lookup of a batch of (key, t) is then ``get_indexer`` + a vectorised bisection inside each key's
versions (one step when a key has one version) + a gather per column.

Example:
    >>> t = VersionedTable(("id",), ("tier",))
    >>> t.apply(np.array([1, 1, 2]), np.array([10, 20, 10]), np.array([False, False, True]),
    ...         {"tier": np.array(["silver", "gold", None], dtype=object)})
    >>> rows = t.lookup(np.array([1, 1, 1, 2, 3]), np.array([5, 10, 25, 30, 30]))
    >>> rows.tolist(), t.gather(rows)["tier"].tolist()
    ([-1, 0, 1, -1, -1], [None, 'silver', 'gold', None, None])
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from cep.tables.keys import KeyCodes

__all__ = ["VersionedTable", "TableStats", "MIN_TIME", "key_values", "upper_bound"]

_POOL_MAX = 1 << 16
"""Distinct strings a column's pool keeps (the strings of a category column; beyond, chunks share within themselves)."""

MIN_TIME = int(np.iinfo(np.int64).min)
"""Valid-from time of a snapshot row: from the beginning of time (before any event)."""

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class TableStats:
    """Size of a table: keys, versions and rows held, and memory (estimated, bytes)."""

    keys: int
    live_keys: int  # keys whose latest version is a row (not a tombstone)
    versions: int
    rows: int  # rows stored (versions' rows; tombstones have none)
    bytes: int
    bytes_per_row: float  # bytes / live keys: what one more key costs, its versions included

    def to_dict(self) -> dict[str, Any]:
        return {"keys": self.keys, "live_keys": self.live_keys, "versions": self.versions, "rows": self.rows,
                "bytes": self.bytes, "bytes_per_row": round(self.bytes_per_row, 1)}


def key_values(columns: Sequence[np.ndarray]) -> np.ndarray:
    """One key per row: the column's values (one key column) or tuples (several).

    Example:
        >>> key_values([np.array([1, 2]), np.array(["a", "b"], dtype=object)]).tolist()
        [(1, 'a'), (2, 'b')]
    """
    if len(columns) == 1:
        return columns[0]
    out = np.empty(len(columns[0]), dtype=object)
    out[:] = list(zip(*[c.tolist() for c in columns]))
    return out


def upper_bound(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per query i, the first position p in ``[lo[i], hi[i])`` with ``values[p] > t[i]`` (``hi[i]`` when none).

    ``values`` is sorted inside each range. A bisection of every query at once: as many numpy
    steps as the longest range has bits, one step for ranges of one version.

    Example:
        >>> upper_bound(np.array([1, 5, 9, 2]), np.array([0, 0, 3]), np.array([3, 3, 4]), np.array([5, 0, 7])).tolist()
        [2, 0, 4]
    """
    lo = lo.astype(np.int64, copy=True)
    hi = hi.astype(np.int64, copy=True)
    idx = np.flatnonzero(lo < hi)
    while len(idx):
        a, b = lo[idx], hi[idx]
        mid = (a + b) >> 1
        right = values[mid] <= t[idx]
        lo[idx] = np.where(right, mid + 1, a)
        hi[idx] = np.where(right, b, mid)
        idx = idx[lo[idx] < hi[idx]]
    return lo


class VersionedTable:
    """Versions of rows by primary key, applied from changelog batches, looked up as of event times."""

    def __init__(self, key_columns: Sequence[str], value_columns: Sequence[str]):
        self.key_columns = tuple(key_columns)
        self.value_columns = tuple(value_columns)
        self._keys = KeyCodes()  # dense codes, in order of first appearance
        # versions, sorted by (code, time, arrival); _start[c]: c's first version (CSR, len keys + 1)
        self._v_code = _EMPTY
        self._v_time = _EMPTY
        self._v_row = _EMPTY
        self._start = np.zeros(1, dtype=np.int64)
        self._delta: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._cols: dict[str, list[np.ndarray]] = {c: [] for c in self.value_columns}
        self._nrows = 0
        self._pools: dict[str, dict[str, str]] = {}  # per object column: one object per repeated string

    # ------------------------------------------------------------------ keys
    def _lookup_codes(self, keys: np.ndarray) -> np.ndarray:
        """Codes of ``keys`` (-1 for a key never seen); None and NaN keys are never found."""
        return self._keys.lookup(keys)

    def _codes_for(self, keys: np.ndarray) -> np.ndarray:
        """Codes of ``keys``, new codes given to keys never seen (in order of first appearance)."""
        return self._keys.codes_for(keys)

    # ------------------------------------------------------------------ changes
    def apply(self, keys: np.ndarray, times: np.ndarray, deletes: np.ndarray,
              values: dict[str, np.ndarray]) -> None:
        """Add one version per change: a row (``values`` at that position) or, where ``deletes``, a tombstone.

        ``keys`` are plain values (see :func:`key_values`), never None; ``times`` int64 epoch ms
        (:data:`MIN_TIME` for snapshot rows). Among versions of one key at the same time, the one
        applied last wins.
        """
        n = len(keys)
        if n == 0:
            return
        codes = self._codes_for(keys)
        deletes = np.asarray(deletes, dtype=bool)
        rows = np.full(n, -1, dtype=np.int64)
        upserts = np.flatnonzero(~deletes)
        if len(upserts):
            rows[upserts] = np.arange(self._nrows, self._nrows + len(upserts), dtype=np.int64)
            for c in self.value_columns:
                col = values.get(c)
                if col is None:
                    col = np.full(n, None, dtype=object)
                chunk = col[upserts]
                self._cols[c].append(self._share_strings(c, chunk) if chunk.dtype == object else chunk)
            self._nrows += len(upserts)
        self._delta.append((codes, np.asarray(times, dtype=np.int64), rows))

    def _share_strings(self, name: str, chunk: np.ndarray) -> np.ndarray:
        """``chunk`` with equal strings made one object, when its values are few strings repeated.

        A decoded changelog has a new string object per row ("gold" 100,000 times); a column of a
        few categories (a tier, a sector, a country) then costs a string per row. Factorised (C
        speed) and mapped through a pool per column (capped), each value is one shared object: 8
        bytes per row, the pointer. Columns of mostly distinct values, or of other types (where
        1 == 1.0 == True would merge values that differ), are kept as they are.
        """
        import pandas as pd

        try:
            codes, uniq = pd.factorize(chunk, use_na_sentinel=True)
        except TypeError:  # unhashable values (objects, lists)
            return chunk
        ul = np.asarray(uniq, dtype=object).tolist()
        if len(ul) * 2 > len(chunk) or not all(type(u) is str for u in ul):
            return chunk
        pool = self._pools.setdefault(name, {})
        shared = [pool.setdefault(u, u) if len(pool) < _POOL_MAX else pool.get(u, u) for u in ul]
        table = np.empty(len(shared) + 1, dtype=object)
        table[: len(shared)] = shared
        out = table[codes]  # -1 (NULL: None or NaN) picks the last slot, None
        return out

    def _merge(self) -> None:
        """Merge the delta's versions into the sorted arrays (one ``np.insert`` per array)."""
        if not self._delta:
            return
        d_code = np.concatenate([d[0] for d in self._delta])
        d_time = np.concatenate([d[1] for d in self._delta])
        d_row = np.concatenate([d[2] for d in self._delta])
        self._delta = []
        order = np.lexsort((d_time, d_code))  # stable: arrival order among equal (code, time)
        d_code, d_time, d_row = d_code[order], d_time[order], d_row[order]
        n_keys = len(self._keys)
        old_k = len(self._start) - 1
        known = d_code < old_k
        pos = np.full(len(d_code), len(self._v_code), dtype=np.int64)
        if known.any():
            c = d_code[known]
            pos[known] = upper_bound(self._v_time, self._start[c], self._start[c + 1], d_time[known])
        self._v_code = np.insert(self._v_code, pos, d_code)
        self._v_time = np.insert(self._v_time, pos, d_time)
        self._v_row = np.insert(self._v_row, pos, d_row)
        counts = np.bincount(self._v_code, minlength=n_keys)
        self._start = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)

    # ------------------------------------------------------------------ lookups
    def lookup(self, keys: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Per (key, time), the row valid at that time: its row number, or -1 (no version, or a tombstone)."""
        self._merge()
        n = len(keys)
        codes = self._lookup_codes(keys)
        found = codes >= 0
        rows = np.full(n, -1, dtype=np.int64)
        if not found.any():
            return rows
        idx = np.flatnonzero(found) if not found.all() else None
        c = codes if idx is None else codes[idx]
        t = np.asarray(times, dtype=np.int64)
        t = t if idx is None else t[idx]
        lo = self._start[c]
        pos = upper_bound(self._v_time, lo, self._start[c + 1], t) - 1
        hit = np.where(pos >= lo, self._v_row[np.maximum(pos, 0)], -1) if len(self._v_row) else np.full(len(c), -1)
        if idx is None:
            return hit.astype(np.int64, copy=False)
        rows[idx] = hit
        return rows

    def lookup_codes(self, codes: np.ndarray, times: np.ndarray) -> np.ndarray:
        """As :meth:`lookup`, for keys given by their codes (all known): the row valid at each time, or -1."""
        self._merge()
        c = np.asarray(codes, dtype=np.int64)
        if not len(c) or not len(self._v_row):
            return np.full(len(c), -1, dtype=np.int64)
        lo = self._start[c]
        pos = upper_bound(self._v_time, lo, self._start[c + 1], np.asarray(times, dtype=np.int64)) - 1
        return np.where(pos >= lo, self._v_row[np.maximum(pos, 0)], -1).astype(np.int64, copy=False)

    def versions_between(self, after: int | None, upto: int) -> tuple[np.ndarray, np.ndarray]:
        """The (key code, valid-from) of every version with ``after < valid-from <= upto`` (``after`` None:
        from the beginning of time): the changes a view has not joined yet."""
        self._merge()
        mask = self._v_time <= upto
        if after is not None:
            mask &= self._v_time > after
        idx = np.flatnonzero(mask)
        return self._v_code[idx], self._v_time[idx]

    def codes_of(self, keys: np.ndarray) -> np.ndarray:
        """Codes of ``keys``, -1 for a key this table has never had."""
        return self._lookup_codes(keys)

    def keys_of(self, codes: np.ndarray) -> np.ndarray:
        """The key of each code (int64 for integer keys; values, or tuples for several key columns)."""
        return self._keys.keys_of(codes)

    def n_codes(self) -> int:
        return len(self._keys)

    def column(self, name: str) -> np.ndarray:
        """Every stored row's value of column ``name`` (chunks joined once)."""
        chunks = self._cols[name]
        if len(chunks) != 1:
            if not chunks:
                return np.zeros(0, dtype=object)
            kinds = {c.dtype.kind for c in chunks}
            if len(kinds) > 1 or "O" in kinds or "U" in kinds:
                joined = np.concatenate([c.astype(object) for c in chunks])
            else:
                joined = np.concatenate(chunks)
            self._cols[name] = chunks = [joined]
        return chunks[0]

    def gather(self, rows: np.ndarray, columns: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """The values of ``rows`` (from :meth:`lookup`) per column; NULL (None, or NaN for floats) where -1."""
        miss = rows < 0
        any_miss = bool(miss.any())
        safe = np.where(miss, 0, rows) if any_miss else rows
        out: dict[str, np.ndarray] = {}
        for name in columns if columns is not None else self.value_columns:
            col = self.column(name)
            if len(col) == 0:
                out[name] = np.full(len(rows), None, dtype=object)
                continue
            vals = col[safe]
            if any_miss:
                if vals.dtype.kind == "f":
                    vals[miss] = np.nan
                else:
                    vals = vals.astype(object)
                    vals[miss] = None
            out[name] = vals
        return out

    # ------------------------------------------------------------------ compaction
    def compact(self, horizon: int) -> int:
        """Forget the versions no lookup at a time >= ``horizon`` can read; returns how many went.

        Per key, of the versions valid from ``horizon`` or earlier only the last one matters (and
        not even that one when it is a tombstone); later versions all stay.
        """
        self._merge()
        n_keys = len(self._start) - 1
        if not len(self._v_code):
            return 0
        codes = np.arange(n_keys, dtype=np.int64)
        lo, hi = self._start[:-1], self._start[1:]
        last = upper_bound(self._v_time, lo, hi, np.full(n_keys, horizon, dtype=np.int64)) - 1
        keep = self._v_time > horizon
        has = last >= lo
        lp = last[has]
        keep[lp] = self._v_row[lp] >= 0
        dropped = int(len(keep) - keep.sum())
        if dropped:
            self._v_code, self._v_time, self._v_row = self._v_code[keep], self._v_time[keep], self._v_row[keep]
            counts = np.bincount(self._v_code, minlength=len(codes))
            self._start = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
            self._compact_rows()
        return dropped

    def _compact_rows(self) -> None:
        """Drop stored rows no version points at, once they are the larger part."""
        used = self._v_row[self._v_row >= 0]
        if self._nrows < 1024 or len(used) * 2 > self._nrows:
            return
        keep = np.unique(used)
        remap = np.full(self._nrows, -1, dtype=np.int64)
        remap[keep] = np.arange(len(keep), dtype=np.int64)
        for name in self.value_columns:
            self._cols[name] = [self.column(name)[keep]]
        self._v_row = np.where(self._v_row >= 0, remap[np.maximum(self._v_row, 0)], -1)
        self._nrows = len(keep)

    # ------------------------------------------------------------------ size
    def stats(self) -> TableStats:
        """Keys, versions, rows and an estimate of the memory they take."""
        self._merge()
        n_keys = len(self._keys)
        nbytes = sum(a.nbytes for a in (self._v_code, self._v_time, self._v_row, self._start))
        for name in self.value_columns:
            col = self.column(name)
            nbytes += col.nbytes + (_object_bytes(col) if col.dtype == object else 0)
        nbytes += self._keys.nbytes()
        nbytes += sum(sys.getsizeof(p) for p in self._pools.values())  # its strings are the columns'
        live = self.live_keys()
        return TableStats(n_keys, live, len(self._v_code), self._nrows, nbytes, nbytes / max(live, 1))

    def live_keys(self) -> int:
        """Keys whose latest version is a row."""
        self._merge()
        last = self._start[1:] - 1
        has = last >= self._start[:-1]
        return int((self._v_row[last[has]] >= 0).sum()) if has.any() else 0

    def __len__(self) -> int:
        return self.live_keys()

    def version_count(self) -> int:
        """Versions held, merged or not (cheap: no merge)."""
        return len(self._v_code) + sum(len(d[0]) for d in self._delta)

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        """The table as plain data (lists and numpy arrays) for a snapshot."""
        self._merge()
        return {
            "key_columns": list(self.key_columns),
            "value_columns": list(self.value_columns),
            "keys": self._keys.state(),
            "versions": (self._v_code, self._v_time, self._v_row),
            "columns": {name: self.column(name) for name in self.value_columns},
            "nrows": self._nrows,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> VersionedTable:
        """A table from :meth:`state`'s plain data."""
        t = cls(state["key_columns"], state["value_columns"])
        t._keys = KeyCodes.from_state(state["keys"])
        v_code, v_time, v_row = state["versions"]
        t._v_code = np.asarray(v_code, dtype=np.int64)
        t._v_time = np.asarray(v_time, dtype=np.int64)
        t._v_row = np.asarray(v_row, dtype=np.int64)
        counts = np.bincount(t._v_code, minlength=len(t._keys))
        t._start = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        t._cols = {name: [np.asarray(col)] if len(col) else [] for name, col in state["columns"].items()}
        t._nrows = int(state["nrows"])
        return t


def _object_bytes(col: np.ndarray, sample: int = 1000) -> int:
    """Estimated bytes of the Python objects an object column points at (a sample, scaled).

    Objects are told apart by identity: when the sample's values are mostly references to the same
    few objects (shared strings of a category column), those are counted once; otherwise the
    sample's mean size is scaled to the column.
    """
    n = len(col)
    if not n:
        return 0
    step = max(1, n // sample)
    vals = col[::step].tolist()
    distinct = {id(v): v for v in vals if v is not None}
    size = sum(sys.getsizeof(v) for v in distinct.values())
    if len(distinct) * 2 <= len(vals):
        return size
    return int(size / len(vals) * n)
