"""What the rules of one engine compute once per batch: event times, partition keys, key order, masks.

Many rules over one stream read the same events: without sharing, each rule parses the same
event times, builds the same partition keys, sorts the same rows by key and time, converts the
same columns and evaluates the same row-local conditions. A :class:`SharedBatch` lives for one
:meth:`cep.engine.Engine.process` call and keeps each of these the first time a rule asks, so the
next rule with the same question gets the answer. Every cached answer is a pure function of the
batch and the question's key (the field, unit, partition columns, the accepted rows, a
condition's canonical text and the values it reads from before the batch), so a rule gets exactly
what it would have computed alone. Nothing here keeps state across batches.

Example:
    >>> from cep.events import batch_from_records
    >>> b = batch_from_records([{"k": "x", "ts": "2017-01-02"}, {"k": "y", "ts": 5}])
    >>> sb = SharedBatch(b)
    >>> sb.times("ts", "ms") is sb.times("ts", "ms")
    True
    >>> pk = sb.keys(["k"])
    >>> pk.values.tolist(), pk.bad.tolist()
    (['x', 'y'], [False, False])
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Callable

import numpy as np

from cep.events import EventBatch, UnitHint, batch_times, unit_hint
from patterns import ast as A

__all__ = ["SharedBatch", "PartitionKeys", "KeyOrder", "Judged", "partition_keys", "arrange", "judge", "kernel_key",
           "FRESH_HISTORY", "rejoin_histories"]

FRESH_HISTORY = 0
"""The history of a batch-DFA rule's state that has stepped nothing yet (see :meth:`KeyOrder.history_after`)."""

# history numbers handed out by KeyOrder.history_after, unique in the process
_HISTORIES = itertools.count(FRESH_HISTORY + 1)


@dataclass
class PartitionKeys:
    """A batch's partition keys before any rule's time check: values, unusable rows and why."""

    values: np.ndarray  # one integer field: that column; else objects (the value, a tuple, or ())
    bad: np.ndarray  # rows whose key cannot be used (a null, a list or a dict in a key field)
    reasons: dict[int, str]  # why, for the rows in ``bad``


def partition_keys(batch: EventBatch, key_cols: list[str]) -> PartitionKeys:
    """The PARTITION BY key of every row of ``batch``, with the rows whose key is unusable.

    Example:
        >>> from cep.events import batch_from_records
        >>> pk = partition_keys(batch_from_records([{"a": 1, "b": "x"}, {"a": 2}]), ["a", "b"])
        >>> pk.values.tolist(), pk.reasons
        ([(1, 'x'), (2, None)], {1: "partition field 'b' is missing (null)"})
    """
    import pandas as pd

    n = batch.n
    bad = np.zeros(n, dtype=bool)
    if not key_cols:
        keys = np.empty(n, dtype=object)
        keys[:] = [()] * n
        return PartitionKeys(keys, bad, {})
    cols = [batch.column(c) for c in key_cols]
    reasons: dict[int, str] = {}
    for c, col in zip(key_cols, cols):
        if col.dtype == object:
            kind = pd.api.types.infer_dtype(col, skipna=True)
            nulls = pd.isna(col)
            if kind not in ("string", "integer", "floating", "mixed-integer-float", "boolean", "empty", "bytes"):
                for i in np.flatnonzero(~nulls & ~bad):
                    v = col[i]
                    if isinstance(v, (list, dict, set, tuple)):
                        reasons.setdefault(int(i), f"partition field {c!r} holds a {type(v).__name__}; expected a string or a number")
                        bad[i] = True
        elif col.dtype.kind == "f":
            nulls = np.isnan(col)
        else:
            nulls = np.zeros(n, dtype=bool)
        for i in np.flatnonzero(nulls & ~bad):
            reasons.setdefault(int(i), f"partition field {c!r} is missing (null)")
            bad[i] = True
    if len(cols) == 1:
        values = cols[0] if cols[0].dtype.kind in "iu" or cols[0].dtype == object else cols[0].astype(object)
    else:
        values = np.empty(n, dtype=object)
        values[:] = list(zip(*[c.tolist() for c in cols]))
    return PartitionKeys(values, bad, reasons)


@dataclass
class KeyOrder:
    """Released rows grouped by key, each key's rows in event-time order (ties: arrival order).

    ``order`` maps the sorted rows to the released rows; ``starts``/``ends`` bound each key's
    segment and ``seg_keys`` names it. ``values``, ``lists`` and ``masks`` are caches that the
    rules sharing this order fill (column values, their lists, row-local condition masks).
    """

    codes: np.ndarray
    uniques: Any
    order: np.ndarray
    ts: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    seg_keys: list
    rows: np.ndarray | None = None  # batch rows of the sorted rows (a shared order only)
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    lists: dict[str, list] = field(default_factory=dict)
    values: dict[tuple, Any] = field(default_factory=dict)
    masks: dict[str, tuple[tuple, dict[tuple, Any]]] = field(default_factory=dict)
    histories: dict[int, int] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.order)

    def history_after(self, before: int | None) -> int | None:
        """The history number of a rule's keyed state after it stepped exactly these rows (all of
        them, in this order) from the state numbered ``before`` (None: unknown, stays unknown).

        Batch-DFA rules that started empty (:data:`FRESH_HISTORY`) and stepped the same shared
        orders since hold the same keys in the same order and the same values for ``PREV`` to read:
        whatever depends only on that (key ids, the values ``PREV`` reads from before the batch)
        is computed once for all of them, keyed by this number instead of by the values.

        Example:
            >>> ko = arrange(np.array(["a"], dtype=object), np.array([1]), np.arange(1))
            >>> h = ko.history_after(FRESH_HISTORY)
            >>> h == ko.history_after(FRESH_HISTORY) != FRESH_HISTORY, ko.history_after(None)
            (True, None)
        """
        if before is None:
            return None
        got = self.histories.get(before)
        if got is None:
            got = self.histories[before] = next(_HISTORIES)
        return got

    def column(self, batch: EventBatch, name: str) -> np.ndarray:
        """The batch's column ``name`` at the sorted rows."""
        col = self.columns.get(name)
        if col is None:
            assert self.rows is not None
            col = self.columns[name] = batch.column(name)[self.rows]
        return col

    def column_list(self, batch: EventBatch, name: str) -> list:
        got = self.lists.get(name)
        if got is None:
            got = self.lists[name] = self.column(batch, name).tolist()
        return got


class _Joined:
    """Batch-DFA states restored with one saved history number that were checked to agree: the
    keys, their row counts and every (column, rows back) value any two of them can read for PREV."""

    def __init__(self, first: Any):
        self.members = [first]
        self.keys = first.key_list
        self.nrows = first.k[0, : len(first.key_list)]
        self.back: dict[tuple[str, int], tuple] = {}
        self.admit(first)

    def admit(self, keyed: Any) -> bool:
        """Whether ``keyed`` holds what every state joined so far holds (then it joins them)."""
        if len(keyed.key_list) != len(self.keys) or keyed.key_list != self.keys \
                or not np.array_equal(keyed.k[0, : len(self.keys)], self.nrows):
            return False
        mine: dict[tuple[str, int], tuple] = {}
        reads = _prev_columns(keyed.a)
        for ci, name in enumerate(keyed.a.columns):
            if name not in reads:
                continue  # (no condition of this rule reads it from before a batch)
            for depth in range(1, keyed.a.max_back + 1):
                view = _back_view(*keyed.back_column(ci, depth))
                known = self.back.get((name, depth))
                if known is not None and known != view:
                    return False
                mine[(name, depth)] = view
        # (every view is checked before any is kept: a state refused leaves the others' views as they were)
        for at, view in mine.items():
            self.back.setdefault(at, view)
        if keyed is not self.members[0]:
            self.members.append(keyed)
        return True


def _prev_columns(automaton: Any) -> frozenset[str]:
    """The columns inside any ``PREV`` of a rule's row-local conditions: the only values the rules
    sharing a history read from before a batch (cep.operator.PatternOperator._masks)."""
    names: set[str] = set()
    for exprs in automaton.local_exprs:
        for e in exprs:
            for x in A.walk_expr(e):
                if isinstance(x, A.Nav) and x.kind == "PREV":
                    names.update(c.name for c in A.walk_expr(x) if isinstance(c, A.Column))
    return frozenset(names)


def _back_view(have: np.ndarray, values: np.ndarray) -> tuple:
    """What PREV reads of one column at one depth, comparable with ``==``: equal views are equal
    values of equal types (NaN equal to NaN; a different dtype is a different view, which only
    means less sharing)."""
    if values.dtype == object:
        got: Any = tuple((type(v), "NaN" if isinstance(v, float) and v != v else v) for v in values.tolist())
    else:
        got = values.tobytes()
    return have.tobytes(), values.dtype.str, got


def rejoin_histories(states: list[Any]) -> int:
    """Give batch-DFA states just restored from one engine snapshot their shared history back.

    Each state saved its history number (:meth:`KeyOrder.history_after`); a restored one starts
    with none (``history`` None: it shares nothing). States restored with the same saved number
    get one new number here, but only after checking that they hold the same keys in the same
    order, the same row counts and the same values for every (column, rows back) that PREV can
    read in any two of them: a state that differs (a corrupt or hand-made snapshot) keeps no
    history, so sharing is lost, never wrong. Returns how many states got a history.

    Example:
        >>> rejoin_histories([])
        0
    """
    groups: dict[int, list[Any]] = {}
    for keyed in states:
        saved, keyed.restored_history = keyed.restored_history, None
        if saved is not None:
            groups.setdefault(saved, []).append(keyed)
    joined = 0
    for members in groups.values():
        found: list[_Joined] = []
        for keyed in members:
            if not any(j.admit(keyed) for j in found):
                found.append(_Joined(keyed))
        for j in found:
            # a history no other state has would share nothing, and would keep that state from
            # sharing by values (cep.operator.PatternOperator._masks): it stays unknown
            if len(j.members) > 1:
                number = next(_HISTORIES)
                for keyed in j.members:
                    keyed.history = number
                joined += len(j.members)
    return joined


def arrange(keys: np.ndarray, ts: np.ndarray, seq: np.ndarray, gap_ms: int | None = None) -> KeyOrder:
    """Group rows by key (first appearance first) and sort each key's rows by time then ``seq``.

    With ``gap_ms`` a key's rows are also cut where two of them lie more than that apart.

    Example:
        >>> ko = arrange(np.array(["b", "a", "b"], dtype=object), np.array([2, 1, 1]), np.arange(3))
        >>> ko.order.tolist(), ko.seg_keys, ko.starts.tolist(), ko.ends.tolist()
        ([2, 0, 1], ['b', 'a'], [0, 2], [2, 3])
    """
    import pandas as pd

    codes, uniques = pd.factorize(keys, sort=False)
    order = np.lexsort((seq, ts, codes))
    codes = codes[order]
    ts = ts[order]
    n = len(order)
    bounds = np.flatnonzero(np.diff(codes)) + 1
    if gap_ms is not None and n > 1:
        # a gap longer than the idle TTL inside one key's rows ends its session there
        gaps = np.flatnonzero((np.diff(codes) == 0) & (np.diff(ts) > gap_ms)) + 1
        if len(gaps):
            bounds = np.union1d(bounds, gaps)
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [n]))
    seg_keys = np.asarray(uniques)[codes[starts]].tolist()  # Python values, not numpy scalars
    return KeyOrder(codes, uniques, order, ts, starts, ends, seg_keys)


@dataclass
class Judged:
    """Rows judged against the watermark as it stood when each arrived (see :func:`judge`)."""

    idx: np.ndarray  # the rows judged (batch positions)
    ts: np.ndarray  # their event times
    wm_before: np.ndarray  # the watermark each was judged against
    late: np.ndarray  # positions (into idx) of the late ones
    new_max: int  # the largest time among them
    kept: np.ndarray  # the rows not late (batch positions)
    kept_ts: np.ndarray  # their times


def judge(ts: np.ndarray, idx: np.ndarray, max_ts: int | None, lateness: int, floor: int | None) -> Judged:
    """Which of the rows ``idx`` (times ``ts``) are late: behind the largest time seen before them
    (``max_ts`` before the batch, then the batch's running maximum) minus ``lateness``, and no
    earlier than ``floor``.

    Example:
        >>> j = judge(np.array([5, 3, 9, 8]), np.arange(4), None, 1, None)
        >>> j.late.tolist(), j.kept.tolist(), j.new_max
        ([1], [0, 2, 3], 9)
    """
    prior = np.maximum.accumulate(np.concatenate(([max_ts if max_ts is not None else ts[0]], ts)))[:-1]
    if max_ts is None:
        prior[0] = ts[0]
    wm_before = prior - lateness
    if floor is not None:
        wm_before = np.maximum(wm_before, floor)
    late_mask = ts < wm_before
    late = np.flatnonzero(late_mask)
    if len(late):
        keep = ~late_mask
        kept, kept_ts = idx[keep], ts[keep]
    else:
        kept, kept_ts = idx, ts
    return Judged(idx, ts, wm_before, late, int(ts.max()), kept, kept_ts)


def _strip_vars(e: Any) -> Any:
    """``e`` with every column's variable dropped (in a row-local condition all name the current row)."""
    if isinstance(e, A.Column):
        return replace(e, var=None)
    if isinstance(e, tuple):
        return tuple(_strip_vars(x) for x in e)
    if is_dataclass(e) and not isinstance(e, type):
        changes = {f.name: _strip_vars(getattr(e, f.name)) for f in fields(e) if f.compare}
        return replace(e, **changes)
    return e


def kernel_key(conj: A.Expr, var_name: str) -> str | None:
    """What decides a row-local conjunct's mask over a batch: its text with variables dropped (and
    the variable's name where CLASSIFIER() reads it); None when it reads per-rule state.

    Example:
        >>> from patterns.rules import parse_rule_text
        >>> d = parse_rule_text("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) "
        ...                     "DEFINE A AS A.x > PREV(A.x), B AS x > PREV(x))").compiled.defines
        >>> kernel_key(d[0], "A") == kernel_key(d[1], "B")
        True
    """
    from cep.expressions import DERIVED

    walk = list(A.walk_expr(conj))
    if any(isinstance(x, A.Func) and x.name in DERIVED for x in walk):
        return None  # FIRST_SEEN and MATCHES keep per-rule state
    key = repr(_strip_vars(conj))
    if any(isinstance(x, A.Classifier) for x in walk):
        key += f" /{var_name}"
    return key


class SharedBatch:
    """The answers the rules of one engine share over one batch (see the module's docstring)."""

    def __init__(self, batch: EventBatch):
        self.batch = batch
        self._times: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, list[str | None]]] = {}
        self._keys: dict[tuple[str, ...], PartitionKeys] = {}
        self._orders: dict[tuple, list[tuple[np.ndarray, np.dtype, KeyOrder]]] = {}
        self._hints: dict[tuple[str, str], UnitHint | None] = {}
        self._judged: dict[tuple, Judged] = {}
        self._latest: dict[tuple[str, str], tuple[int | None, bool]] = {}
        self._seqs: dict[tuple[int, int], np.ndarray] = {}
        # a pattern rule's (keys, usable rows) by its partition columns, time field and unit, for
        # rules that refuse no time of their own (cep.operator.PatternOperator._keys); do not change
        self.usable: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def unit_hint(self, field_name: str, unit: str, look: Callable[..., UnitHint | None] = unit_hint) -> UnitHint | None:
        """``look`` (:func:`cep.events.unit_hint`) at a field (each rule looks once, at its first batch)."""
        key = (field_name, unit)
        if key not in self._hints:
            self._hints[key] = look(self.batch, field_name, unit)
        return self._hints[key]

    def times(self, field_name: str, unit: str) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
        """:func:`cep.events.parse_times` of a field without the future guard; do not change them."""
        key = (field_name, unit)
        got = self._times.get(key)
        if got is None:
            got = self._times[key] = batch_times(self.batch, field_name, unit)
        return got

    def latest(self, field_name: str, unit: str) -> tuple[int | None, bool]:
        """The largest valid time of :meth:`times` (None: none valid) and whether every time is valid:
        a rule's future guard needs to look at the rows only when that time is ahead of its clock."""
        key = (field_name, unit)
        got = self._latest.get(key)
        if got is None:
            ms, ok, _ = self.times(field_name, unit)
            all_ok = bool(ok.all())
            top = (int(ms.max()) if all_ok else int(ms[ok].max())) if ok.any() else None
            got = self._latest[key] = (top, all_ok)
        return got

    def judged(self, field_name: str, unit: str, max_ts: int | None, lateness: int, floor: int | None) -> Judged:
        """:func:`judge` of every row of the batch (for rules that accept every row's time and key);
        rules with the same running maximum, lateness and floor share it; do not change it."""
        key = (field_name, unit, max_ts, lateness, floor)
        got = self._judged.get(key)
        if got is None:
            ms = self.times(field_name, unit)[0]
            got = self._judged[key] = judge(ms, np.arange(len(ms)), max_ts, lateness, floor)
        return got

    def seq(self, first: int, m: int) -> np.ndarray:
        """The arrival numbers ``first`` to ``first + m - 1`` of a rule's accepted rows (rules that
        counted the same rows before share them); do not change them."""
        key = (first, m)
        got = self._seqs.get(key)
        if got is None:
            got = self._seqs[key] = np.arange(first, first + m, dtype=np.int64)
        return got

    def keys(self, key_cols: list[str]) -> PartitionKeys:
        """:func:`partition_keys` of the batch; do not change them."""
        key = tuple(key_cols)
        got = self._keys.get(key)
        if got is None:
            got = self._keys[key] = partition_keys(self.batch, key_cols)
        return got

    def order(self, question: tuple, rows: np.ndarray, keys: np.ndarray, ts: np.ndarray) -> KeyOrder:
        """The :func:`arrange` of the batch rows ``rows`` (in batch order) with these keys and times.

        ``question`` names where keys and times came from (partition columns, time field and
        unit): two rules with the same question and the same accepted rows share one order.
        """
        slot = self._orders.setdefault(question, [])
        for r, dtype, ko in slot:
            if dtype == keys.dtype and (r is rows or np.array_equal(r, rows)):
                return ko
        ko = arrange(keys, ts, np.arange(len(rows)))
        ko.rows = rows[ko.order]
        slot.append((rows, keys.dtype, ko))
        return ko
