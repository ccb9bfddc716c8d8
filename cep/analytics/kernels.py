"""Aggregate kernels: how each aggregate is prepared from events, reduced into a partial, merged and read.

One concept over about 1,170 lines, so one module: every kernel answers the same four questions
(prepare, reduce, merge, read) and the batched paths (panes cut with one search per kernel,
windows laid side by side) must treat them alike; the array helpers they share live apart in
:mod:`cep.analytics.arrays`.
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from itertools import repeat
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd

from cep.analytics.arrays import _NEG, _POS, _REDUCE, _concat_parts, _Groups, _pair_words, _reduce
from cep.analytics.context import _Ctx
from cep.json_exact import WIDE_TAG, hashable_exact, past_signed_64
from patterns.analytics import Aggregate
from sketches import CountMinSketch, HyperLogLog, SketchTypeError, TopK, hash128
from sketches.hyperloglog import ADDR_BITS, hll_coupons

if TYPE_CHECKING:  # type hints only: the operator and SLIDE rows call the kernels
    from cep.analytics.operator import WindowOperator
    from cep.analytics.slide import _SlideRows

_HLL_M = float(1 << ADDR_BITS)


class _Kernel:
    """How one aggregate is prepared from events, reduced into a partial, merged and read.

    States are plain data (numpy arrays, sketches), so snapshots are pickles of them.
    """

    agg: Aggregate
    needs_seen = False
    sliceable = False
    """Whether :meth:`slice` cuts a partial's state by cells (then a batch over many panes is built at once)."""
    order_free = False
    """Whether :meth:`build` gives the same state whatever the order of a group's rows (then a batch
    is grouped with a faster, unstable sort): integer sums, sets, sketches of sets."""
    cellwise = False
    """Whether :meth:`result` reads each cell alone, the same value and type whatever cells come with
    it (then the windows due together are read in one call)."""

    def __init__(self, agg: Aggregate, op: WindowOperator):
        self.agg = agg
        self.op = op

    def prepare(self, vals: np.ndarray) -> tuple[tuple, dict[int, str]]:
        """Per-event inputs for a batch, and {row: reason} for values of a wrong type."""
        raise NotImplementedError

    def take(self, inputs: tuple, sel: np.ndarray) -> tuple:
        return tuple(x[sel] for x in inputs)

    def concat(self, parts: list[tuple]) -> tuple:
        return tuple(np.concatenate(cols) for cols in zip(*parts))

    def build(self, inputs: tuple, g: _Groups, cells: np.ndarray) -> Any:
        raise NotImplementedError

    def combine(self, parts: list, nout: int) -> Any:
        raise NotImplementedError

    def slice(self, state: Any, a: int, b: int) -> Any:
        """The state of cells ``a`` to ``b - 1`` of a partial, as if built from their rows alone."""
        raise NotImplementedError

    def slices(self, state: Any, bounds: list[int]) -> list:
        """:meth:`slice` at each pair of neighbouring ``bounds`` (ascending cell numbers)."""
        return [self.slice(state, a, b) for a, b in zip(bounds[:-1], bounds[1:])]

    def stack(self, states: list, offsets: list[int]) -> Any:
        """One state of partials whose cells follow each other (the cells of part j moved up by
        ``offsets[j]``, every cell of a part above those before it): what :meth:`combine` gives
        for them, without a merge. Only kernels whose ``stackable`` is True."""
        raise NotImplementedError

    stackable = False

    def result(self, state: Any, n: np.ndarray, cells: np.ndarray, ctx: _Ctx) -> tuple[np.ndarray, Any]:
        raise NotImplementedError

    def empty(self) -> Any:
        """The aggregate over no rows (PREV_WINDOW of a key absent from the previous window)."""
        return None

    def slide(self, inputs: tuple, lo: np.ndarray, hi: np.ndarray, rows: _SlideRows, ctx: _Ctx) -> tuple[np.ndarray, Any]:
        """The aggregate over rows [lo, hi] (inclusive) of ``inputs``, for each query."""
        raise NotImplementedError


class _Aligned(_Kernel):
    """Aggregates whose partial is a few arrays with one value per cell, merged by sum/min/max."""

    reducers: tuple[str, ...] = ()
    sliceable = True

    def build(self, inputs, g, cells):
        return _reduce(inputs, self.reducers, g)

    def slice(self, state, a, b):
        return tuple(x[a:b] for x in state)

    def slices(self, state, bounds):
        return [tuple(x[a:b] for x in state) for a, b in zip(bounds[:-1], bounds[1:])]

    def stack(self, states, offsets):
        return tuple(np.concatenate([st[i] for st in states]) for i in range(len(self.reducers)))

    def combine(self, parts, nout):
        out = []
        for i, r in enumerate(self.reducers):
            vals, pos = _concat_parts(parts, nout, i)
            v = np.concatenate(vals) if vals else np.zeros(0)
            out.append(_REDUCE[r].reduceat(v[np.argsort(pos, kind="stable")], _starts(pos, nout)) if len(v) else v)
        return tuple(out)

    def slide(self, inputs, lo, hi, rows, ctx):
        state = []
        for a, r in zip(inputs, self.reducers):
            if r == "sum":
                cs = np.concatenate(([0], np.cumsum(a)))
                state.append(cs[hi + 1] - cs[lo])
            else:
                state.append(_range_reduce(a, lo, hi, _REDUCE[r]))
        return self.result(tuple(state), hi - lo + 1, np.zeros(0, dtype=np.int64), ctx)


def _starts(pos: np.ndarray, nout: int) -> np.ndarray:
    counts = np.bincount(pos, minlength=nout)
    return np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)


def _range_reduce(a: np.ndarray, lo: np.ndarray, hi: np.ndarray, uf) -> np.ndarray:
    """uf over a[lo..hi] for each query: a sparse table, O(n log n) numpy."""
    if len(lo) == 0:
        return a[:0]
    levels = [a]
    span = 1
    while span * 2 <= len(a):
        prev = levels[-1]
        levels.append(uf(prev[:-span], prev[span:]))
        span *= 2
    length = hi - lo + 1
    k = np.floor(np.log2(length)).astype(np.int64)
    out = np.empty(len(lo), dtype=a.dtype)
    for lv in np.unique(k):
        sel = k == lv
        t = levels[lv]
        out[sel] = uf(t[lo[sel]], t[hi[sel] - (1 << lv) + 1])
    return out


def _numbers(vals: np.ndarray, what: str, wide: dict[int, int] | None = None) -> tuple[tuple[np.ndarray, ...], dict[int, str]]:
    """(int values, float values, is-int, is-float) with NULL as neither; bad rows with a reason.

    ``wide``: where the ints past 64 bits go ({row: value}, the row neither int nor float here),
    for an aggregate that takes them exactly; without it they are bad rows."""
    n = len(vals)
    ival = np.zeros(n, dtype=np.int64)
    fval = np.zeros(n, dtype=np.float64)
    isint = np.zeros(n, dtype=bool)
    isfloat = np.zeros(n, dtype=bool)
    bad: dict[int, str] = {}
    k = vals.dtype.kind
    if k in "iu":
        ival[:] = vals
        isint[:] = True
    elif k == "f":
        ok = ~np.isnan(vals)
        fval[ok] = vals[ok]
        isfloat = ok
    elif k == "b":
        for i in range(n):
            bad[i] = f"{what}: {bool(vals[i])!r} is a boolean, expected a number"
    else:
        for i, v in enumerate(vals.tolist()):
            if v is None:
                continue
            if isinstance(v, bool):
                bad[i] = f"{what}: {v!r} is a boolean, expected a number"
            elif isinstance(v, int):
                if -(2**63) <= v < 2**63:
                    ival[i] = v
                    isint[i] = True
                elif wide is not None:
                    wide[i] = v
                else:
                    bad[i] = f"{what}: {_short(v)} does not fit in 64 bits, expected an integer from -2**63 to 2**63-1 or a float"
            elif isinstance(v, float):
                if v == v:
                    fval[i] = v
                    isfloat[i] = True
            else:
                bad[i] = f"{what}: {_short(v)} is a {type(v).__name__}, expected a number"
    return (ival, fval, isint, isfloat), bad


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


class _CountNonNull(_Aligned):
    reducers = ("sum",)
    cellwise = True
    order_free = True  # a sum of int64 counts
    stackable = True

    def prepare(self, vals):
        if vals.dtype.kind == "f":
            return ((~np.isnan(vals)).astype(np.int64),), {}
        if vals.dtype == object:
            return ((~pd.isna(vals)).astype(np.int64),), {}
        return (np.ones(len(vals), dtype=np.int64),), {}

    def result(self, state, n, cells, ctx):
        return state[0], False

    def empty(self):
        return 0


class _Sum(_Aligned):
    """SUM and AVG: exact sums of integers, float64 sums of floats, with counts.

    An int64 total wraps silently past 2**63, so each integer is split into its high 32 bits
    (signed) and low 32 bits (0 to 2**32 - 1), summed apart: neither sum can wrap before 2**31
    rows of one window, and high * 2**32 + low is the exact total (a Python int where it does not
    fit in int64)."""

    reducers = ("sum", "sum", "sum", "sum", "sum")

    def prepare(self, vals):
        wide: dict[int, int] = {}
        (ival, fval, isint, isfloat), bad = _numbers(vals, self.agg.text, wide)
        hi, lo = ival >> 32, ival & 0xFFFFFFFF
        if wide:
            # an int past 64 bits: its high part as a Python int (the sums of that array are then
            # Python ints, exact at any size; numpy adds object arrays with Python's +)
            hi = hi.astype(object)
            for i, v in wide.items():
                hi[i], lo[i], isint[i] = v >> 32, v & 0xFFFFFFFF, True
        return (hi, lo, fval, isint.astype(np.int64), isfloat.astype(np.int64)), bad

    def result(self, state, n, cells, ctx):
        ihi, ilo, fsum, ni, nf = state
        isum = _int_totals(ihi, ilo)
        nn = ni + nf
        nulls = nn == 0
        if self.agg.func == "AVG":
            with np.errstate(all="ignore"):
                if isum.dtype != object:
                    out = (isum + fsum) / np.maximum(nn, 1)
                    # past 2**53 float64(total) rounds before the division: Python divides the exact int
                    redo = np.flatnonzero((nf == 0) & (ni > 0) & ((isum > 2**53) | (isum < -(2**53))))
                else:
                    out = np.zeros(len(nn))
                    redo = np.arange(len(nn))
                for i in redo.tolist():
                    c = int(nn[i])
                    if c:
                        try:
                            out[i] = (int(isum[i]) / c) if nf[i] == 0 else (int(isum[i]) + float(fsum[i])) / c
                        except OverflowError:  # a mean past a double's range: its float is infinite
                            out[i] = math.inf if int(isum[i]) > 0 else -math.inf
                return out, nulls
        if not nf.any():
            return isum, nulls
        if not ni.any():
            return fsum, nulls
        out = (isum + fsum).astype(object)
        ints = nf == 0
        out[ints] = isum[ints].astype(object)
        return out, nulls


def _int_totals(ihi: np.ndarray, ilo: np.ndarray) -> np.ndarray:
    """Exact integer totals from the sums of high and low halves: int64 where they fit, else Python ints."""
    fits = (ihi < 2**29) & (ihi > -(2**29)) & (ilo < 2**61)  # (then |total| < 2**62)
    tot = np.left_shift(np.where(fits, ihi, 0), 32) + np.where(fits, ilo, 0)
    if fits.all():
        return tot
    out = tot.astype(object)
    for i in np.flatnonzero(~fits).tolist():
        out[i] = (int(ihi[i]) << 32) + int(ilo[i])
    return out


class _MinMax(_Aligned):
    """MIN and MAX of numbers (exact for int64) or of strings (the kind of the first value seen)."""

    def __init__(self, agg, op):
        super().__init__(agg, op)
        big = agg.func == "MAX"
        self.uf = np.maximum if big else np.minimum
        self.isent = _NEG if big else _POS
        self.fsent = -np.inf if big else np.inf
        r = "max" if big else "min"
        self.reducers = (r, r, "sum", "sum")

    def kind(self) -> str | None:
        return self.op.value_kinds.get(self.agg.text)

    def prepare(self, vals):
        kind = self.kind()
        if kind is None:
            kind = _value_kind(vals)
            if kind is not None:
                self.op.value_kinds[self.agg.text] = kind
        if kind == "string":
            out = np.empty(len(vals), dtype=object)
            bad = {}
            for i, v in enumerate(vals.tolist()):
                if v is None or (isinstance(v, float) and v != v):
                    continue
                if isinstance(v, str):
                    out[i] = v
                else:
                    bad[i] = f"{self.agg.text}: {_short(v)} is a {type(v).__name__}; earlier values were strings"
            return (out,), bad
        wide: dict[int, int] = {}
        (ival, fval, isint, isfloat), bad = _numbers(vals, self.agg.text, wide)
        if kind == "number":
            for i, reason in list(bad.items()):
                if "expected a number" in reason:
                    bad[i] = reason.replace("expected a number", "earlier values were numbers")
        if wide:
            ival = ival.astype(object)
            for i, v in wide.items():
                ival[i], isint[i] = v, True
            ival[~isint] = self.fsent
        else:
            ival = np.where(isint, ival, self.isent)
        fval = np.where(isfloat, fval, self.fsent)
        return (ival, fval, isint.astype(np.int64), isfloat.astype(np.int64)), bad

    def _wide(self, ival: np.ndarray, has: np.ndarray) -> np.ndarray:
        """``ival`` as Python ints, no-int places (``has`` 0) holding an infinite float: an int past
        64 bits lies beyond the int64 placeholder, which would otherwise win a MIN or MAX."""
        out = ival.astype(object)
        out[np.asarray(has) == 0] = self.fsent
        return out

    def _strings(self) -> bool:
        return self.kind() == "string"

    def concat(self, parts: list[tuple]) -> tuple:
        if any(len(p) == 1 for p in parts) and any(len(p) != 1 for p in parts):
            # events prepared before the first value fixed the kind (numbers' four arrays) held no
            # value, only NULLs: as strings they are NULL too, never the numbers' sentinel
            parts = [p if len(p) == 1 else (np.full(len(p[0]), None, dtype=object),) for p in parts]
        elif any(len(p) == 4 and p[0].dtype == object for p in parts):
            parts = [(self._wide(p[0], p[2]), *p[1:]) for p in parts]
        return super().concat(parts)

    def build(self, inputs, g, cells):
        if len(inputs) == 1:
            return (_object_best(inputs[0], g.inv, g.ngroups, self.agg.func),)
        return super().build(inputs, g, cells)

    def combine(self, parts, nout):
        if any(len(st) == 1 for st, _p, _c in parts):
            # strings: a partial built before the first value fixed the kind holds no values
            parts = [(st if len(st) == 1 else (np.full(len(c), None, dtype=object),), p, c) for st, p, c in parts]
            vals, pos = _concat_parts(parts, nout, 0)
            return (_object_best(np.concatenate(vals), pos, nout, self.agg.func),)
        if any(st[0].dtype == object for st, _p, _c in parts):
            parts = [((self._wide(st[0], st[2]), *st[1:]), p, c) for st, p, c in parts]
        return super().combine(parts, nout)

    def result(self, state, n, cells, ctx):
        if len(state) == 1:
            v = state[0]
            return v, pd.isna(v)
        ib, fb, ni, nf = state
        nulls = (ni + nf) == 0
        if not nf.any():
            return ib, nulls
        if not ni.any():
            return fb, nulls
        out = np.empty(len(ib), dtype=object)
        for i in range(len(ib)):
            if ni[i] and nf[i]:
                a, b = int(ib[i]), float(fb[i])
                out[i] = a if (a >= b if self.agg.func == "MAX" else a <= b) else b
            elif ni[i]:
                out[i] = int(ib[i])
            elif nf[i]:
                out[i] = float(fb[i])
        return out, nulls

    def slide(self, inputs, lo, hi, rows, ctx):
        if len(inputs) == 1:
            vals = inputs[0].tolist()
            pick = max if self.agg.func == "MAX" else min
            out = np.empty(len(lo), dtype=object)
            for q, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
                got = [v for v in vals[a : b + 1] if v is not None]
                out[q] = pick(got) if got else None
            return out, pd.isna(out)
        return super().slide(inputs, lo, hi, rows, ctx)


def _value_kind(vals: np.ndarray) -> str | None:
    if vals.dtype.kind in "iuf":
        return "number"
    for v in vals.tolist():
        if v is None or (isinstance(v, float) and v != v):
            continue
        return "string" if isinstance(v, str) else "number"
    return None


def _object_best(vals: np.ndarray, codes: np.ndarray, ngroups: int, func: str) -> np.ndarray:
    out = np.empty(ngroups, dtype=object)
    if len(vals):
        s = pd.Series(vals, dtype=object)
        keep = s.notna().to_numpy()
        if keep.any():
            grouped = s[keep].groupby(codes[keep])
            got = grouped.max() if func == "MAX" else grouped.min()
            out[got.index.to_numpy()] = got.to_numpy()
    return out


class _FirstSeen(_Aligned):
    """FIRST_SEEN(x): per cell, the values the key had never brought before (Bloom filter)."""

    reducers = ("sum",)
    needs_seen = True
    cellwise = True
    order_free = True  # a sum of int64 flags
    stackable = True

    def prepare(self, vals):
        hb, bad = _hash(vals, self.agg.text, skip_empty=False)
        h0 = np.zeros(len(vals), dtype=np.uint64)
        valid = np.zeros(len(vals), dtype=bool)
        if hb is not None:
            pos = np.flatnonzero(hb.valid) if hb.valid is not None else np.arange(len(vals))
            h0[pos] = hb.h0
            valid[pos] = True
        return (h0, valid, np.zeros(len(vals), dtype=np.int64)), bad

    def build(self, inputs, g, cells):
        return _reduce((inputs[2],), self.reducers, g)

    def result(self, state, n, cells, ctx):
        return state[0], False

    def empty(self):
        return 0

    def slide(self, inputs, lo, hi, rows, ctx):
        cs = np.concatenate(([0], np.cumsum(inputs[2])))
        return cs[hi + 1] - cs[lo], False


def _hash(vals: np.ndarray, what: str, skip_empty: bool):
    """hash128 of a column; rows of a type no sketch can hash are reported, not raised."""
    bad: dict[int, str] = {}
    if not past_signed_64(vals):  # (else the hash would take 2**64-1 for -1: value by value below)
        try:
            return hash128(vals, skip_empty=skip_empty), bad
        except (SketchTypeError, TypeError, ValueError):
            pass
    clean = vals.astype(object, copy=True)
    for i, v in enumerate(vals.tolist()):
        # an int outside the signed 64 bits is a value like any other: hashed as the float it
        # equals, else as its tagged digits (equal hashes exactly where Python finds the values equal)
        clean[i] = v = hashable_exact(v)
        try:
            hash128([v])
        except (SketchTypeError, TypeError, ValueError):
            bad[i] = f"{what}: {_short(v)} is a {type(v).__name__}; expected a string, number or bytes"
            clean[i] = None
    return hash128(clean, skip_empty=skip_empty), bad


def _aligned_hashes(vals: np.ndarray, what: str, skip_empty: bool,
                    factors: tuple[np.ndarray, np.ndarray, Any] | None = None,
                    cache: _StringHashes | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """(h0, h1, valid, bad rows) of a column, one row each (0 where not valid).

    ``factors``: the column's dictionary encoding by the decoder (codes, -1 for NULL, the distinct
    strings, and the file-wide dictionary they index or None), when it has one; ``cache``: strings
    hashed before (see :func:`_string_hashes`)."""
    if vals.dtype == object and len(vals) >= _BY_VALUE_MIN:
        got = _hashes_by_value(vals, what, skip_empty, factors, cache)
        if got is not None:
            return got
    return _row_hashes(vals, what, skip_empty)


_BY_VALUE_MIN = 64  # rows from which a string column is hashed one distinct value at a time


def _hashes_by_value(vals: np.ndarray, what: str, skip_empty: bool,
                     factors: tuple[np.ndarray, np.ndarray, Any] | None = None,
                     cache: _StringHashes | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict] | None:
    """The hashes of a column of strings computed once per distinct string, or None (another kind).

    Event fields repeat (hosts, URLs, user ids): hashing the distinct values and gathering costs a
    fraction of hashing every row. Only strings take this path, so that NULL, the values that
    compare equal across types (1, 1.0, True) and bad values stay with the per-row hashing."""
    n = len(vals)
    dictionary = None
    if factors is not None:  # strings and None only, as the flat JSON scanner makes them
        codes, uniq, dictionary = factors
        na = codes < 0
    else:
        try:
            codes, uniq = pd.factorize(vals)
        except TypeError:  # unhashable values (a dict, a list): reported per row
            return None
        if len(uniq) * 2 > n or pd.api.types.infer_dtype(uniq, skipna=False) != "string":
            return None
        na = codes < 0
        if na.any() and not all(v is None for v in vals[na].tolist()):  # NaN, pd.NA, NaT: per row
            return None
    if cache is not None and dictionary is not None and len(uniq):
        uh0, uh1, nonempty = cache.of_dictionary(dictionary, uniq)
        uvalid = nonempty if skip_empty else np.ones(len(uniq), dtype=bool)
    elif cache is not None and len(uniq):
        uh0, uh1 = _string_hashes(uniq, cache)
        uvalid = np.ones(len(uniq), dtype=bool)
        if skip_empty:
            uvalid = np.asarray(uniq, dtype=object) != ""  # one comparison per string, in C
    else:
        uh0, uh1, uvalid, bad = _row_hashes(np.asarray(uniq, dtype=object), what, skip_empty)
        if bad:
            return None
    c = np.where(na, 0, codes) if len(uniq) else codes
    valid = ~na & uvalid[c] if len(uniq) else np.zeros(n, dtype=bool)
    if not len(uniq):
        z = np.zeros(n, dtype=np.uint64)
        return z, z.copy(), valid, {}
    h0 = np.where(valid, uh0[c], np.uint64(0))
    h1 = np.where(valid, uh1[c], np.uint64(0))
    return h0, h1, valid, {}


_CACHE_LIMIT = 1 << 20  # strings whose hashes an operator keeps (then it starts afresh)
# decoder dictionaries whose hashes an operator keeps (a file's string columns, several files): an
# entry goes with its dictionary (a weak reference), so the cap only bounds the live ones; past it
# the oldest goes, not all (clearing all at the ninth of ten columns used in turn rehashed every
# dictionary from its start each batch: 2.2x the CPU of a run)
_DICTS_KEPT = 64


def _reference(obj: Any) -> Callable[[], Any]:
    """A weak reference to ``obj``, or a strong one for an object that takes none."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


class _StringHashes:
    """The hashes of the strings an operator has seen: batches bring the same hosts and URLs
    again, and a dictionary look-up costs a fraction of hashing."""

    __slots__ = ("index", "h0", "h1", "n", "last", "dicts")

    def __init__(self) -> None:
        self._reset()
        # per file-wide dictionary of the decoder (by identity, with a reference that tells a
        # freed one's id from a new object's): the hashes and non-emptiness of its strings by code,
        # extended as it grows
        self.dicts: dict[int, tuple[Callable[[], Any], np.ndarray, np.ndarray, np.ndarray, int]] = {}

    def of_dictionary(self, dictionary: Any, uniq: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(h0, h1, non-empty) of ``uniq``, the first strings of ``dictionary`` (a
        :class:`cep.json_flat.StringDictionary`): only strings it gained since are hashed."""
        m = len(uniq)
        got = self.dicts.get(id(dictionary))
        if got is None or got[0]() is not dictionary:
            if got is not None:  # another object under a freed one's id
                del self.dicts[id(dictionary)]
            self._evict()  # (a new dictionary: the file's next, or a column's afresh)
            z = np.zeros(0, dtype=np.uint64)
            got = (_reference(dictionary), z, z, np.zeros(0, dtype=bool), 0)
        ref, h0, h1, nonempty, k = got
        if m > k:
            new = uniq[k:m]
            a, b = self.get(new)
            h0 = np.concatenate((h0[:k], a))
            h1 = np.concatenate((h1[:k], b))
            nonempty = np.concatenate((nonempty[:k], np.asarray(new, dtype=object) != ""))
            self.dicts[id(dictionary)] = (ref, h0, h1, nonempty, m)
        return h0[:m], h1[:m], nonempty[:m]

    def _evict(self) -> None:
        """The entries of freed dictionaries go; past the cap, the oldest too."""
        for key in [key for key, got in self.dicts.items() if got[0]() is None]:
            del self.dicts[key]
        if len(self.dicts) >= _DICTS_KEPT:
            del self.dicts[next(iter(self.dicts))]

    def _reset(self) -> None:
        self.index: dict[str, int] = {}
        self.h0 = np.zeros(1024, dtype=np.uint64)
        self.h1 = np.zeros(1024, dtype=np.uint64)
        self.n = 0
        # the last distinct-value table asked for and its answer: aggregates over one column ask
        # with the decoder's same table object in a row (held, so its id is not reused)
        self.last: tuple[Any, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.n

    def get(self, uniq: Any) -> tuple[np.ndarray, np.ndarray]:
        """(h0, h1) of each of ``uniq`` (strings)."""
        last = self.last
        if last is not None and last[0] is uniq:
            return last[1], last[2]
        at = np.fromiter(map(self.index.get, uniq, repeat(-1)), dtype=np.int64, count=len(uniq))
        miss = np.flatnonzero(at < 0)
        if len(miss):
            if self.n + len(miss) > _CACHE_LIMIT:
                self._reset()
                at[:] = -1
                miss = np.arange(len(uniq))
            strings = [uniq[j] for j in miss.tolist()]
            hb = hash128(np.array(strings, dtype=object))
            need = self.n + len(strings)
            if need > len(self.h0):
                size = max(need, 2 * len(self.h0))
                self.h0 = np.resize(self.h0, size)
                self.h1 = np.resize(self.h1, size)
            for j, s, a, b in zip(miss.tolist(), strings, hb.h0.tolist(), hb.h1.tolist()):
                k = self.index.get(s)
                if k is None:  # (a string may come twice: spelt with and without escapes)
                    k = self.index[s] = self.n
                    self.h0[k], self.h1[k] = a, b
                    self.n += 1
                at[j] = k
        got = self.h0[at], self.h1[at]
        # only a decoder's table (an object array, never changed once made) is worth holding
        self.last = (uniq, *got) if isinstance(uniq, np.ndarray) else None
        return got


def _string_hashes(uniq: Any, cache: _StringHashes) -> tuple[np.ndarray, np.ndarray]:
    """(h0, h1) of distinct strings, each hashed once per operator."""
    return cache.get(uniq)


def _row_hashes(vals: np.ndarray, what: str, skip_empty: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    hb, bad = _hash(vals, what, skip_empty)
    n = len(vals)
    h0 = np.zeros(n, dtype=np.uint64)
    h1 = np.zeros(n, dtype=np.uint64)
    valid = np.zeros(n, dtype=bool)
    pos = np.flatnonzero(hb.valid) if hb.valid is not None else np.arange(n)
    h0[pos] = hb.h0
    h1[pos] = hb.h1
    valid[pos] = True
    return h0, h1, valid, bad


class _Entries(_Kernel):
    """Exact COUNT(DISTINCT x): the sorted set of (cell, 128-bit value hash) per partial."""

    cellwise = True
    order_free = True

    def prepare(self, vals):
        h0, h1, valid, bad = _aligned_hashes(vals, self.agg.text, skip_empty=False, factors=self.op._factors_of(vals),
                                           cache=self.op._string_hash_cache)
        return (h0, h1, valid), bad

    sliceable = True

    def build(self, inputs, g, cells):
        h0, h1, valid = inputs
        return _unique3(g.inv[valid], h0[valid], h1[valid], runs=False)

    def slice(self, state, a, b):
        idx, h0, h1 = state  # sorted by cell
        lo, hi = np.searchsorted(idx, (a, b))
        return idx[lo:hi] - a, h0[lo:hi], h1[lo:hi]

    def slices(self, state, bounds):
        idx, h0, h1 = state
        if not len(idx):
            return [self.slice(state, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        # one search for every cut; each slice's cells made relative to its first in one subtraction
        edge = np.asarray(bounds, dtype=np.int64)
        at = np.searchsorted(idx, edge).tolist()
        rel = idx - edge[np.searchsorted(edge, idx, side="right") - 1]
        return [(rel[lo:hi], h0[lo:hi], h1[lo:hi]) for lo, hi in zip(at[:-1], at[1:])]

    stackable = True

    def stack(self, states, offsets):
        # each state is sorted by (cell, h0, h1) and unique; moved up they stay so, one after another
        return (np.concatenate([st[0] + off for st, off in zip(states, offsets)]),
                np.concatenate([st[1] for st in states]), np.concatenate([st[2] for st in states]))

    def combine(self, parts, nout):
        idx, a, b = [], [], []
        for (ci, c0, c1), pos, _cells in parts:
            p = pos[ci]
            keep = p >= 0
            idx.append(p[keep])
            a.append(c0[keep])
            b.append(c1[keep])
        return _unique3(np.concatenate(idx), np.concatenate(a), np.concatenate(b))

    def result(self, state, n, cells, ctx):
        return np.bincount(state[0], minlength=len(n)).astype(np.int64), False

    def empty(self):
        return 0

    def slide(self, inputs, lo, hi, rows, ctx):
        h0, _h1, valid = inputs
        out = _slide_counter(h0.view(np.int64), valid, lo, hi, lambda c, q: len(c))
        return np.asarray(out, dtype=np.int64), False


def _unique3(idx: np.ndarray, a: np.ndarray, b: np.ndarray, runs: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted unique (cell, h0, h1) triples.

    One sort on a packed word (cell << 32 | high half of h0), then a full sort of the rare blocks
    whose packed words tie, so the answer does not depend on how the first sort orders ties:
    with ``runs`` (partials merged: sorted runs one after another) a stable sort, which timsort
    makes a merge of the runs; without (a batch's rows in arrival order) numpy's quicksort, about
    twice as fast on such input.
    """
    n = len(idx)
    if n == 0:
        return idx.astype(np.int64), a, b
    key = (idx.astype(np.uint64) << np.uint64(32)) | (a >> np.uint64(32))
    order = np.argsort(key, kind="stable" if runs else "quicksort")
    key = key[order]
    eq = key[1:] == key[:-1]
    if eq.any():
        tie = np.zeros(n, dtype=bool)
        tie[1:] |= eq
        tie[:-1] |= eq
        t = np.flatnonzero(tie)
        sub = order[t]
        order[t] = sub[np.lexsort((b[sub], a[sub], key[t]))]
    idx, a, b = idx[order], a[order], b[order]
    keep = np.ones(n, dtype=bool)
    keep[1:] = (idx[1:] != idx[:-1]) | (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return idx[keep].astype(np.int64), a[keep], b[keep]


def _slide_counter(ids: np.ndarray, valid: np.ndarray, lo: np.ndarray, hi: np.ndarray, read: Callable) -> list:
    """read(counter, q) for every query q over rows [lo[q], hi[q]], two pointers per run of queries.

    Queries come sorted by key then time, so lo and hi only move forward within a key; a query
    whose lo goes back starts a fresh counter.
    """
    out = []
    counter: Counter = Counter()
    cur_lo, cur_hi = 0, -1
    ids_l = ids.tolist()
    valid_l = valid.tolist()
    for q, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
        if a < cur_lo or a > cur_hi + 1:
            counter = Counter()
            cur_lo, cur_hi = a, a - 1
        while cur_hi < b:
            cur_hi += 1
            if valid_l[cur_hi]:
                counter[ids_l[cur_hi]] += 1
        while cur_lo < a:
            if valid_l[cur_lo]:
                v = ids_l[cur_lo]
                counter[v] -= 1
                if not counter[v]:
                    del counter[v]
            cur_lo += 1
        out.append(read(counter, q))
    return out


class _HyperLogLog(_Kernel):
    """APPROX_COUNT_DISTINCT(x): HyperLogLog sketches of every cell at once.

    A cell's sketch is exactly the :class:`~sketches.HyperLogLog` of its values: sparse, the
    set of 26-bit addresses with their highest rank (``address << 6 | rank``, the words
    ``HyperLogLog.to_bytes`` writes), kept for all cells of a partial in one sorted array; dense
    (past 2**p / 4 addresses), its 2**p registers. Merges take the union of addresses or the
    register-wise max, as ``HyperLogLog.merge`` does; the estimate is the sketch's own.
    """

    cellwise = True
    order_free = True

    def __init__(self, agg, op):
        super().__init__(agg, op)
        self.p = op.spec.sketches.hll_precision
        self.m = 1 << self.p
        self.limit = max(self.m // 4, 1)

    def prepare(self, vals):
        h0, h1, valid, bad = _aligned_hashes(vals, self.agg.text, skip_empty=True, factors=self.op._factors_of(vals),
                                           cache=self.op._string_hash_cache)
        coupons = np.zeros(len(vals), dtype=np.uint32)
        if valid.any():
            coupons[valid] = hll_coupons(h0[valid], h1[valid])
        return (coupons, valid), bad

    def _sparse(self, idx: np.ndarray, coupons: np.ndarray, runs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Unique (cell, coupon) keeping the highest rank per (cell, address), sorted."""
        if len(idx) == 0:
            return idx.astype(np.int64), coupons.astype(np.uint32)
        key = (idx.astype(np.uint64) << np.uint64(32)) | coupons.astype(np.uint64)
        # partials arrive as sorted runs, which timsort merges; a batch's rows come in no order,
        # which numpy's default sort (vectorised) orders several times faster
        key.sort(kind="stable" if runs else "quicksort")
        addr = key >> np.uint64(6)
        last = np.ones(len(key), dtype=bool)
        last[:-1] = addr[1:] != addr[:-1]
        key = key[last]
        return (key >> np.uint64(32)).astype(np.int64), (key & np.uint64(0xFFFFFFFF)).astype(np.uint32)

    def _regs(self, coupons: np.ndarray) -> np.ndarray:
        regs = np.zeros(self.m, dtype=np.uint8)
        k = coupons.astype(np.int64)
        np.maximum.at(regs, (k >> 6) & (self.m - 1), (k & 63).astype(np.uint8))
        return regs

    def _finish(self, idx: np.ndarray, coupons: np.ndarray, dense: dict[int, np.ndarray]):
        """Move cells past the sparse limit (or already dense) into registers."""
        if len(idx):
            counts = np.bincount(idx)
            over = np.flatnonzero(counts > self.limit)
            dense_cells = set(dense) | set(over.tolist())
        else:
            dense_cells = set(dense)
        if dense_cells:
            mark = np.isin(idx, np.fromiter(dense_cells, dtype=np.int64))
            if mark.any():
                d_idx, d_c = idx[mark], coupons[mark]
                starts = np.flatnonzero(np.r_[True, d_idx[1:] != d_idx[:-1]])
                ends = np.append(starts[1:], len(d_idx))
                for s, e in zip(starts.tolist(), ends.tolist()):
                    c = int(d_idx[s])
                    regs = self._regs(d_c[s:e])
                    dense[c] = np.maximum(dense[c], regs) if c in dense else regs
                idx, coupons = idx[~mark], coupons[~mark]
        return idx, coupons, dense

    sliceable = True

    def build(self, inputs, g, cells):
        coupons, valid = inputs
        idx, cp = self._sparse(g.inv[valid], coupons[valid], runs=False)
        return self._finish(idx, cp, {})

    def slice(self, state, a, b):
        idx, cp, dense = state  # sparse words sorted by cell; a dense cell's registers by cell
        lo, hi = np.searchsorted(idx, (a, b))
        return idx[lo:hi] - a, cp[lo:hi], {c - a: r for c, r in dense.items() if a <= c < b}

    def slices(self, state, bounds):
        idx, cp, dense = state
        if not len(idx) or dense:
            return [self.slice(state, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        edge = np.asarray(bounds, dtype=np.int64)
        at = np.searchsorted(idx, edge).tolist()
        rel = idx - edge[np.searchsorted(edge, idx, side="right") - 1]
        return [(rel[lo:hi], cp[lo:hi], {}) for lo, hi in zip(at[:-1], at[1:])]

    stackable = True

    def stack(self, states, offsets):
        # sparse words sorted by (cell, coupon), one per address, a cell dense or sparse: moved up,
        # one after another, they are what the merge would make
        dense = {c + off: r for (_i, _c, d), off in zip(states, offsets) for c, r in d.items()}
        return (np.concatenate([st[0] + off for st, off in zip(states, offsets)]),
                np.concatenate([st[1] for st in states]), dense)

    def combine(self, parts, nout):
        idx, cps = [], []
        dense: dict[int, np.ndarray] = {}
        for (ci, cc, dd), pos, _cells in parts:
            p = pos[ci]
            keep = p >= 0
            idx.append(p[keep])
            cps.append(cc[keep])
            for c, regs in dd.items():
                o = int(pos[c])
                if o >= 0:
                    dense[o] = np.maximum(dense[o], regs) if o in dense else regs
        i, c = self._sparse(np.concatenate(idx), np.concatenate(cps))
        return self._finish(i, c, dense)

    def result(self, state, n, cells, ctx):
        idx, _cp, dense = state
        k = np.bincount(idx, minlength=len(n)).astype(np.float64)
        est = -_HLL_M * np.log1p(-k / _HLL_M)
        header = bytes((HyperLogLog.TYPE_BYTE, 1, self.p, 1))
        for c, regs in dense.items():
            est[c] = HyperLogLog.from_bytes(header + regs.tobytes()).estimate()
        return np.rint(est).astype(np.int64), False

    def empty(self):
        return 0

    def slide(self, inputs, lo, hi, rows, ctx):
        coupons, valid = inputs
        # SLIDE windows keep their rows, so the count is exact: distinct non-empty values
        h = rows.hashes(self)
        out = _slide_counter(h, valid, lo, hi, lambda c, q: len(c))
        return np.asarray(out, dtype=np.int64), False


class _HllSketch(_HyperLogLog):
    """HLL_SKETCH(x): each cell's HyperLogLog as an Apache DataSketches HLL image (bytes).

    The state is APPROX_COUNT_DISTINCT's, so the image is ``HyperLogLog.to_datasketches()`` of
    the very sketch whose estimate APPROX_COUNT_DISTINCT reports: a LIST or SET of coupons while
    small, HLL_8 registers beyond DataSketches' own promotion point, with lgConfigK = the rule's
    ``hll_precision``. Spark's ``hll_sketch_estimate``, ``hll_union`` and ``hll_union_agg`` read it.
    """

    def result(self, state, n, cells, ctx):
        idx, cp, dense = state
        out = np.empty(len(n), dtype=object)
        at = np.arange(len(n))
        lo, hi = np.searchsorted(idx, at), np.searchsorted(idx, at, side="right")  # idx is sorted
        sparse = bytes((HyperLogLog.TYPE_BYTE, 1, self.p, 0))
        full = bytes((HyperLogLog.TYPE_BYTE, 1, self.p, 1))
        for c, a, b in zip(at.tolist(), lo.tolist(), hi.tolist()):
            regs = dense.get(c)
            if regs is not None:
                raw = full + regs.tobytes()
            else:
                raw = sparse + (b - a).to_bytes(4, "little") + cp[a:b].astype("<u4").tobytes()
            out[c] = HyperLogLog.from_bytes(raw).to_datasketches()
        return out, False

    def empty(self):
        return None

    def slide(self, inputs, lo, hi, rows, ctx):
        raise AssertionError("the checker refuses HLL_SKETCH in SLIDE windows")


class _TopK(_Kernel):
    """APPROX_TOP_K(x, k): a heavy-hitters sketch (sketches.TopK) per cell."""

    def __init__(self, agg, op):
        super().__init__(agg, op)
        self.k = int(agg.extra)
        self.capacity = max(op.spec.sketches.topk_capacity, 4 * self.k)

    def prepare(self, vals):
        _h0, _h1, valid, bad = _aligned_hashes(vals, self.agg.text, skip_empty=False, factors=self.op._factors_of(vals),
                                           cache=self.op._string_hash_cache)
        out = vals.astype(object) if vals.dtype != object else vals.copy()
        out[~valid] = None
        if vals.dtype == object:
            # the sketch hashes 64-bit ints only: an int past them is counted as its tagged digits
            # (never equal to a text) and read back as the int (_unwide)
            for i in np.flatnonzero(valid).tolist():
                v = out[i]
                if type(v) is int and not -(2**63) <= v < 2**64:
                    out[i] = f"{WIDE_TAG}{v}"
        return (out, valid), bad

    sliceable = True

    def slice(self, state, a, b):
        return {c - a: t for c, t in state.items() if a <= c < b}

    def build(self, inputs, g, cells):
        vals, valid = inputs
        out: dict[int, TopK] = {}
        sv = vals[g.order]
        ends = np.append(g.starts[1:], g.n)
        for c, (s, e) in enumerate(zip(g.starts.tolist(), ends.tolist())):
            chunk = sv[s:e]
            if any(v is not None for v in chunk):
                t = TopK(self.capacity)
                t.update(chunk)
                out[c] = t
        return out

    def combine(self, parts, nout):
        out: dict[int, TopK] = {}
        for state, pos, _cells in parts:
            for c, t in state.items():
                o = int(pos[c])
                if o < 0:
                    continue
                if o in out:
                    out[o].merge(t)
                else:
                    out[o] = t.copy()
        return out

    def result(self, state, n, cells, ctx):
        out = np.empty(len(n), dtype=object)
        for i in range(len(n)):
            t = state.get(i)
            out[i] = [[_unwide(v), c] for v, c in t.top(self.k)] if t is not None else []
        return out, False

    def empty(self):
        return []

    def slide(self, inputs, lo, hi, rows, ctx):
        vals, valid = inputs
        h = rows.hashes(self)
        first: dict[int, Any] = {}
        for hv, v, ok in zip(h.tolist(), vals.tolist(), valid.tolist()):
            if ok and hv not in first:
                first[hv] = v
        k = self.k

        def read(c: Counter, q: int):
            top = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            return [[_unwide(first[hv]), cnt] for hv, cnt in top]

        out = np.empty(len(lo), dtype=object)
        out[:] = _slide_counter(h, valid, lo, hi, read)
        return out, False


def _unwide(v: Any) -> Any:
    """An int past 64 bits counted by :class:`_TopK` as its tagged digits, as the int again."""
    return int(v[len(WIDE_TAG):]) if type(v) is str and v.startswith(WIDE_TAG) else v


class _CountMin(_Kernel):
    """APPROX_COUNT(x, v): one plain Count-Min sketch per partial over (cell, value) pairs.

    Plain (not conservative) updates make a merge equal to one sketch fed every pane, so the
    answer does not depend on batching. A cell merged from several (a session that absorbed
    another) sums the estimates of its parts: still never below the true count.
    """

    def __init__(self, agg, op):
        super().__init__(agg, op)
        cfg = op.spec.sketches
        self.width, self.depth = cfg.cms_width, cfg.cms_depth
        self.value = agg.extra

    def prepare(self, vals):
        h0, _h1, valid, bad = _aligned_hashes(vals, self.agg.text, skip_empty=False, factors=self.op._factors_of(vals),
                                           cache=self.op._string_hash_cache)
        return (h0, valid), bad

    def build(self, inputs, g, cells):
        h0, valid = inputs
        cms = CountMinSketch(self.width, self.depth, conservative=False)
        if valid.any():
            cms.update(_pair_words(cells[g.inv[valid]], h0[valid]))
        return cms, [(cells, np.arange(len(cells), dtype=np.int64))]

    def combine(self, parts, nout):
        cms = CountMinSketch(self.width, self.depth, conservative=False)
        maps = []
        for (c, part_maps), pos, _cells in parts:
            cms.merge(c)
            for orig, p in part_maps:
                q = pos[p]
                keep = q >= 0
                maps.append((orig[keep], q[keep]))
        if not maps:
            return cms, []
        o = np.concatenate([m[0] for m in maps])
        q = np.concatenate([m[1] for m in maps])
        if not len(o):
            return cms, []
        pairs = np.unique(np.stack((o, q)), axis=1)
        return cms, [(pairs[0], pairs[1])]

    def result(self, state, n, cells, ctx):
        cms, maps = state
        values = ctx.eval_per_cell(self.value)
        vh0, _vh1, vvalid, _bad = _aligned_hashes(values, self.agg.text, skip_empty=False)
        out = np.zeros(len(n), dtype=np.int64)
        for orig, q in maps:
            ok = vvalid[q]
            if ok.any():
                est = cms.estimate(_pair_words(orig[ok], vh0[q[ok]]))
                np.add.at(out, q[ok], est)
        return out, False

    def empty(self):
        return 0

    def slide(self, inputs, lo, hi, rows, ctx):
        h0, valid = inputs
        values = ctx.eval_per_cell(self.value)
        vh0, _vh1, vvalid, _bad = _aligned_hashes(values, self.agg.text, skip_empty=False)
        want = np.where(vvalid, vh0.view(np.int64), 0).tolist()
        okv = vvalid.tolist()
        out = _slide_counter(h0.view(np.int64), valid, lo, hi, lambda c, q: c.get(want[q], 0) if okv[q] else 0)
        return np.asarray(out, dtype=np.int64), False


class _CountStar(_Kernel):
    cellwise = True
    order_free = True

    def prepare(self, vals):
        return (), {}

    def take(self, inputs, sel):
        return ()

    def concat(self, parts):
        return ()

    sliceable = True

    def build(self, inputs, g, cells):
        return None

    def combine(self, parts, nout):
        return None

    stackable = True

    def stack(self, states, offsets):
        return None

    def slice(self, state, a, b):
        return None

    def slices(self, state, bounds):
        return [None] * (len(bounds) - 1)

    def result(self, state, n, cells, ctx):
        return n, False

    def empty(self):
        return 0

    def slide(self, inputs, lo, hi, rows, ctx):
        return hi - lo + 1, False


_KERNELS: dict[str, type[_Kernel]] = {
    "COUNT": _CountNonNull,
    "SUM": _Sum,
    "AVG": _Sum,
    "MIN": _MinMax,
    "MAX": _MinMax,
    "COUNT_DISTINCT": _Entries,
    "APPROX_COUNT_DISTINCT": _HyperLogLog,
    "HLL_SKETCH": _HllSketch,
    "APPROX_TOP_K": _TopK,
    "APPROX_COUNT": _CountMin,
    "FIRST_SEEN": _FirstSeen,
}


def _make_kernel(agg: Aggregate, op: WindowOperator) -> _Kernel:
    if agg.func == "COUNT" and agg.arg is None:
        return _CountStar(agg, op)
    return _KERNELS[agg.func](agg, op)
