"""Changelog rows into changes: plain upserts (with a delete marker) and Debezium envelopes.

* ``upsert``: each row is the whole new row of its key, valid from its ``time_field``; a row
  whose ``delete_field`` holds one of ``delete_values`` (default ``__deleted`` = ``true`` or
  ``"true"``, what Debezium's flattening transform writes) deletes its key instead.
* ``debezium``: each row is an envelope ``{"op", "before", "after", "ts_ms", ...}`` (or the same
  inside ``"payload"``, as Debezium's JSON converter with schemas writes it): ``c`` (create),
  ``u`` (update) and ``r`` (snapshot read) upsert ``after``; ``d`` deletes the key of
  ``before``. The version time is ``ts_ms`` unless ``time_field`` names another field (a dotted
  path such as ``source.ts_ms`` reads inside objects).

Example:
    >>> from cep.events import batch_from_records
    >>> from patterns.tables import TableSpec
    >>> spec = TableSpec("c", "changes", ("id",), ("tier",), format="debezium")
    >>> ch = decode(batch_from_records([
    ...     {"op": "c", "after": {"id": 1, "tier": "gold"}, "ts_ms": 10},
    ...     {"op": "d", "before": {"id": 1, "tier": "gold"}, "ts_ms": 20},
    ...     {"op": "x", "ts_ms": 30}]), spec)
    >>> ch.keys.tolist(), ch.times.tolist(), ch.deletes.tolist(), ch.values["tier"].tolist(), ch.errors
    ([1, 1], [10, 20], [False, True], ['gold', None], [(2, "Debezium op 'x' is not one of c, u, r, d")])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cep.events import EventBatch, _narrow, parse_times
from cep.tables.store import MIN_TIME, key_values
from patterns.tables import TableSpec

__all__ = ["Changes", "decode", "field_values"]


@dataclass
class Changes:
    """The usable changes of one changelog batch, with where each came from and why others were not."""

    keys: np.ndarray  # one key per change (a value, or a tuple for several key columns)
    times: np.ndarray  # int64 epoch ms: when the change takes effect
    deletes: np.ndarray  # bool: a tombstone, not a row
    values: dict[str, np.ndarray]  # the table's columns
    rows: np.ndarray  # each change's row in the batch
    errors: list[tuple[int, str]] = field(default_factory=list)  # (row in the batch, reason)

    def __len__(self) -> int:
        return len(self.rows)


def field_values(batch: EventBatch, path: str) -> np.ndarray:
    """A field's values per row: a column, or a dotted path into objects (``source.ts_ms``).

    Example:
        >>> from cep.events import batch_from_records
        >>> field_values(batch_from_records([{"s": {"t": 5}}, {"s": None}]), "s.t").tolist()
        [5, None]
    """
    if path in batch.columns or "." not in path:
        return batch.column(path)
    head, *rest = path.split(".")
    out = np.empty(batch.n, dtype=object)
    out[:] = [_walk(v, rest) for v in batch.column(head).tolist()]
    return out


def _walk(v: Any, parts: list[str]) -> Any:
    for p in parts:
        if not isinstance(v, dict):
            return None
        v = v.get(p)
    return v


def _null(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def decode(batch: EventBatch, spec: TableSpec) -> Changes:
    """The changes in ``batch`` by the table's format; rows that are not changes go to ``errors``."""
    if spec.format == "debezium":
        return _debezium(batch, spec)
    return _upsert(batch, spec)


def _finish(spec: TableSpec, raw_times: np.ndarray, key_cols: list[np.ndarray], deletes: np.ndarray,
            values: dict[str, np.ndarray], bad: dict[int, str], converted: Any = None,
            from_start: np.ndarray | None = None) -> Changes:
    n = len(raw_times)
    ms, ok, reasons = parse_times(raw_times, spec.time_unit, converted=converted)
    if from_start is not None and from_start.any():  # rows valid from the beginning of time (a snapshot's)
        ms = np.asarray(ms, dtype=np.int64).copy()
        ms[from_start] = MIN_TIME
        ok = np.asarray(ok, dtype=bool) | from_start
    for i in np.flatnonzero(~ok).tolist():
        if i not in bad:
            bad[i] = f"time field {spec.time_field!r}: {reasons[i] or 'not a time'}"
    for c, col in zip(spec.primary_key, key_cols):
        for i, v in enumerate(col.tolist()):
            if i in bad:
                continue
            if _null(v):
                bad[i] = f"primary key field {c!r} is missing (null)"
            elif isinstance(v, (list, dict, set)):
                bad[i] = f"primary key field {c!r} holds a {type(v).__name__}; expected a string or a number"
    good = np.ones(n, dtype=bool)
    if bad:
        good[list(bad)] = False
    idx = np.flatnonzero(good)
    keys = key_values([c[idx] for c in key_cols])
    if keys.dtype == object and len(keys) and len(key_cols) == 1:
        keys = _narrow(keys.copy())
    return Changes(keys, ms[idx], deletes[idx], {c: v[idx] for c, v in values.items()}, idx,
                   sorted(bad.items()))


def _upsert(batch: EventBatch, spec: TableSpec) -> Changes:
    bad: dict[int, str] = {}
    deletes = np.zeros(batch.n, dtype=bool)
    if spec.delete_field is not None and spec.delete_field in batch.columns:
        marks = {(type(v), v) for v in spec.delete_values}
        deletes[:] = [(type(v), v) in marks for v in batch.column(spec.delete_field).tolist()]
    values = {c: batch.column(c) for c in spec.columns}
    raw = field_values(batch, spec.time_field)
    converted = batch.epoch_ms.get(spec.time_field)
    return _finish(spec, raw, [batch.column(c) for c in spec.primary_key], deletes, values, bad, converted)


_UPSERT_OPS = {"c", "u", "r"}


def _debezium(batch: EventBatch, spec: TableSpec) -> Changes:
    n = batch.n
    envelopes = batch.column("payload").tolist()
    ops = batch.column("op").tolist()
    before = batch.column("before").tolist()
    after = batch.column("after").tolist()
    times = field_values(batch, spec.time_field).tolist()
    bad: dict[int, str] = {}
    deletes = np.zeros(n, dtype=bool)
    rows: list[Any] = [None] * n
    for i in range(n):
        env = envelopes[i]
        if ops[i] is None and isinstance(env, dict):  # the JSON converter's {"schema": ..., "payload": {...}}
            op, b, a = env.get("op"), env.get("before"), env.get("after")
            times[i] = _walk(env, spec.time_field.split("."))
        else:
            op, b, a = ops[i], before[i], after[i]
        if op in _UPSERT_OPS:
            if not isinstance(a, dict):
                bad[i] = f"Debezium op {op!r} needs an 'after' object, found {_short(a)}"
                continue
            rows[i] = a
        elif op == "d":
            if not isinstance(b, dict):
                bad[i] = ("Debezium op 'd' needs a 'before' object with the key (set the table's REPLICA IDENTITY "
                          f"or equivalent), found {_short(b)}")
                continue
            rows[i] = b
            deletes[i] = True
        elif op == "t":
            bad[i] = "Debezium op 't' (truncate) is not supported: it would delete every key at once"
        elif op is None:
            bad[i] = "not a Debezium envelope: no 'op' field (expected op, before, after, ts_ms)"
        else:
            bad[i] = f"Debezium op {op!r} is not one of c, u, r, d"
    key_cols = []
    for c in spec.primary_key:
        col = np.empty(n, dtype=object)
        col[:] = [r.get(c) if isinstance(r, dict) else None for r in rows]
        key_cols.append(col)
    values = {}
    for c in spec.columns:
        col = np.empty(n, dtype=object)
        col[:] = [r.get(c) if isinstance(r, dict) and not deletes[i] else None for i, r in enumerate(rows)]
        values[c] = _narrow(col)
    raw = np.empty(n, dtype=object)
    raw[:] = times
    for i in range(n):
        if rows[i] is None and i not in bad:
            bad[i] = "no row"
    # op 'r' without a time: a row of the beginning of time (as a view's changelog writes the join of
    # snapshot rows), valid before any event as a snapshot file's rows are
    from_start = np.array([t is None and (ops[i] == "r" or (ops[i] is None and isinstance(envelopes[i], dict)
                                                            and envelopes[i].get("op") == "r"))
                           for i, t in enumerate(times)], dtype=bool)
    return _finish(spec, _narrow(raw), key_cols, deletes, values, bad, from_start=from_start)


def _short(v: Any) -> str:
    from patterns.errors import short_repr

    return short_repr(v, 60)
