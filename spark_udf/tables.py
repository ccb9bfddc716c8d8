"""Temporal joins on Spark: each group of a joined rule keeps the table's rows it needs beside the rule's state.

A joined rule (``FROM s [LEFT] JOIN t FOR SYSTEM_TIME AS OF s.ts ON ...``) runs in the shared
stateful stage like any keyed rule; the table's changelog is a second input. The group's state
blob holds the rule's operator snapshot *and* its table (:class:`JoinedOperator`), in one of two
layouts (:class:`TableBinding`):

* **kept by key** (:func:`keyed_columns`): the rule is keyed by the join's event columns and the
  changelog is an upsert one, so a change row goes to the group of its key (hashed as the events'
  join columns are), and its time alone (a copy tagged :func:`tick_stream`) to every group: each
  group holds its keys' versions and the table's watermark over every key;
* **a replica**: otherwise (a rule keyed by a joined column, say): every change row reaches every
  group of the rule, which keeps the whole table. A rule keyed only by joined columns has its
  events in one group (:func:`bucket_columns`).

Either way every group sees every change's time, so its table's watermark, its releases and its
late changes are the embedded engine's; the operator is the embedded one, bound to the group's
table as the engine binds it (:class:`cep.tables.join.TableJoin`,
:meth:`cep.analytics.WindowOperator.bind_table`); a micro-batch's changes are applied in one order
whatever order Spark hands them over in (:func:`changes_in_order`); a restart from a checkpoint
restores both. Each late or bad change row is written by one group (:attr:`TableBinding.reporter`).
No pyspark in here: the worker core imports it (docs/spark.md, "Tables").
"""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from cep import safe_pickle
from cep.events import EventBatch, to_batch
from cep.operator import OperatorOutput
from patterns.search_rules import STREAM_FIELD
from patterns.tables import TableSpec

__all__ = ["TableBinding", "JoinedOperator", "rule_join", "bucket_columns", "table_fingerprint", "split_snapshot", "joined_fingerprint", "table_bindings",
           "changes_in_order", "keyed_columns", "tick_stream"]

_FORMAT = 1  # the layout of a joined group's snapshot (inside the bucket blob's own versioning)


def rule_join(rule: Any) -> Any:
    """A keyed rule's join (``table``, ``kind``, ``event_keys``, ``columns``), or None."""
    compiled = getattr(rule, "compiled", None)
    join = getattr(getattr(compiled, "statement", None), "join", None)
    if join is None:
        join = getattr(getattr(rule, "spec", None), "join", None)
    return join


def bucket_columns(key_columns: tuple[str, ...], join: Any) -> tuple[str, ...]:
    """The key columns events are hashed into buckets by: those the events carry.

    A joined column (a table's) is known only after the lookup, inside the group; every event of
    one full key has the same values of the other key columns, so hashing by those alone keeps a
    key in one group. With no such column the rule runs in one group.

    Example:
        >>> from types import SimpleNamespace as J
        >>> bucket_columns(("symbol", "GICS Sector"), J(columns=("GICS Sector",))), bucket_columns(("s",), None)
        (('symbol',), ('s',))
    """
    if join is None:
        return tuple(key_columns)
    return tuple(c for c in key_columns if c not in join.columns)


def table_fingerprint(spec: TableSpec) -> str:
    """What a saved replica's meaning depends on: the declaration but for its description and the
    snapshot file's place (its rows are in the state)."""
    d = asdict(spec)
    d.pop("description", None)
    d.pop("snapshot", None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def joined_fingerprint(base: str, spec: TableSpec) -> str:
    """A joined rule's state fingerprint: the operator's and its table's (a changed table refuses the
    saved state, as a changed table refuses an embedded reload)."""
    return f"{base}+table:{spec.name}:{table_fingerprint(spec)}"


@dataclass
class TableBinding:
    """What a worker needs to keep a joined rule's replica of its table (built on the driver)."""

    spec: TableSpec
    initial: dict[str, Any]  # the table's state after its snapshot file (read once, on the driver)
    static: bool  # no changelog among the inputs: the snapshot is the table, joins never wait
    reporter: bool  # this rule writes the table's late and error rows (bucket 0, or the key's group when keyed)
    snapshot_errors: tuple[dict[str, Any], ...] = ()  # the snapshot file's bad rows (written by the reporter)
    keyed: bool = False  # the changelog is kept by key: each group gets its keys' changes and every change's time

    @classmethod
    def build(cls, spec: TableSpec, static: bool, reporter: bool, keyed: bool = False) -> TableBinding:
        """Read the snapshot file here, so that workers need no access to it."""
        from cep.tables import Table

        t = Table(spec)
        errors = tuple(t.load_snapshot().errors)
        return cls(spec, t.state(), static, reporter, errors, keyed)

    def new_table(self) -> Any:
        from cep.tables import Table

        t = Table(self.spec)
        if self.initial:
            t.restore(copy.deepcopy(self.initial))
        t.static = self.static
        return t


class JoinedOperator:
    """A keyed operator bound to its own replica of the table; the stage's KeyedOperator calls.

    ``ingest`` applies the batch's changelog rows (``stream`` = the table's ``from``) to the table
    first, then hands the other rows to the operator: the embedded engine applies a batch's
    changes before its events too, and nothing is released before :meth:`advance_to` (or
    :meth:`finish`). ``reporting`` (set by the host per group) says whether the table's late and
    error rows are written here.
    """

    def __init__(self, op: Any, binding: TableBinding):
        self.op = op
        self.binding = binding
        self.table = binding.new_table()
        self.reporting = False
        self.first_group = False  # bucket 0: writes the snapshot file's bad rows (with ``reporting``)
        if hasattr(op, "bind_table"):  # an analytics rule binds its own join
            op.bind_table(self.table)
        else:  # a pattern rule: as the engine binds it
            from cep.tables.join import TableJoin

            op.join = TableJoin(self.table, op.automaton.mr.join, list(op.columns), list(op.key_cols))

    def __getattr__(self, name: str) -> Any:  # clock, counts and the rest: the operator's
        op = self.__dict__.get("op")
        if op is None:  # not built yet (copy, unpickling): no attribute falls through
            raise AttributeError(name)
        return getattr(op, name)

    # ------------------------------------------------------------------ KeyedOperator
    def ingest(self, events: Any, late_before: int | np.ndarray) -> OperatorOutput:
        batch = to_batch(events)
        out = OperatorOutput()
        tags = batch.columns.get(STREAM_FIELD)
        if tags is None or self.binding.static:
            return self._events(batch, late_before, out)
        kinds = np.where(tags == self.binding.spec.stream, 1, 0)
        if self.binding.keyed:
            kinds = np.where(tags == tick_stream(self.binding.spec), 2, kinds)
        if not kinds.any():
            return self._events(batch, late_before, out)
        # changes (1) and other keys' change times (2) in the order given, run by run; then the events
        # (nothing is released before advance_to or finish, so they see every change of the call)
        sel = np.flatnonzero(kinds > 0)
        cuts = np.flatnonzero(np.diff(kinds[sel])) + 1
        for run in np.split(sel, cuts):
            part = batch.take(run)
            if kinds[run[0]] == 1:
                got = self.table.apply(part)
                if self.reporting:
                    out.extend(got)
            else:
                self._tick(part)
        rest = np.flatnonzero(kinds == 0)
        if len(rest):
            lb = late_before if np.ndim(late_before) == 0 else np.asarray(late_before)[rest]
            self._events(batch.take(rest), lb, out)
        return out

    def _tick(self, batch: EventBatch) -> None:
        """Other keys' changes, by their times only: the table's watermark is over every key."""
        from cep.events import parse_times
        from cep.tables.changelog import field_values

        spec = self.binding.spec
        ms, ok, _ = parse_times(field_values(batch, spec.time_field), spec.time_unit,
                                converted=batch.epoch_ms.get(spec.time_field))
        if ok.any():
            top = int(ms[ok].max())
            t = self.table
            t.max_ts = top if t.max_ts is None else max(t.max_ts, top)

    def _events(self, batch: EventBatch, late_before: Any, out: OperatorOutput) -> OperatorOutput:
        if batch.n:
            out.extend(self.op.ingest(batch, late_before))
        return out

    def advance_to(self, watermark: int) -> OperatorOutput:
        out = self.op.advance_to(watermark)
        self._compact()
        return out

    def finish(self) -> OperatorOutput:
        return self.op.finish()

    def next_deadline(self) -> int | None:
        return self.op.next_deadline()

    def _compact(self) -> None:
        """Forget the versions no lookup can read any more (as the engine does after each batch)."""
        mark = self.op.released_to
        if mark is not None:
            self.table.compact(int(mark))

    def snapshot(self) -> bytes:
        return bytes([_FORMAT]) + pickle.dumps({"operator": self.op.snapshot(), "table": self.table.state()},
                                               protocol=5)

    def restore(self, data: bytes) -> None:
        op_bytes, table = split_snapshot(data)
        self.op.restore(op_bytes)
        self.table.restore(table)
        self.table.static = self.binding.static

    def reset(self) -> None:
        self.op.reset()
        self.table.restore(copy.deepcopy(self.binding.initial))
        self.table.static = self.binding.static

    def startup(self) -> OperatorOutput:
        """The snapshot file's bad rows, written once by the reporting group when it starts empty."""
        out = OperatorOutput()
        if self.reporting and self.first_group:
            out.errors.extend(dict(e) for e in self.binding.snapshot_errors)
        return out


def tick_stream(spec: TableSpec) -> str:
    """The ``stream`` tag of the rows that carry a change's time to the groups that do not hold its key."""
    return f"{spec.stream}#watermark"


def keyed_columns(key_columns: tuple[str, ...], join: Any, spec: TableSpec) -> tuple[str, ...] | None:
    """The event columns a joined rule's events and its table's changes are both bucketed by, when the
    table can be kept by key: an upsert changelog (its key is in plain columns) and a rule keyed by
    (at least) the join's event columns, so that one key's events and changes meet in one group.
    None: each group keeps a replica.

    Example:
        >>> from types import SimpleNamespace as J
        >>> spec = TableSpec("t", "changes", ("id",), ("tier",))
        >>> keyed_columns(("account", "day"), J(event_keys=("account",), columns=("tier",)), spec)
        ('account',)
        >>> keyed_columns(("tier",), J(event_keys=("account",), columns=("tier",)), spec) is None
        True
    """
    if join is None or spec.format != "upsert":
        return None
    events = bucket_columns(key_columns, join)
    keys = tuple(join.event_keys)
    return keys if keys and all(k in events for k in keys) else None


def split_snapshot(data: bytes) -> tuple[bytes, dict[str, Any]]:
    """A joined group's snapshot: the operator's own snapshot and the table's state."""
    if not data or data[0] != _FORMAT:
        raise ValueError(f"not a joined rule's state (format byte {data[:1]!r}, expected {_FORMAT})")
    state = safe_pickle.loads(data[1:], "a joined rule's state")
    return state["operator"], state["table"]


def table_bindings(rules: list[Any], tables: dict[str, TableSpec], live: Any,
                   keyed: Any = None) -> dict[str, TableBinding]:
    """Per joined keyed rule (by name), its table's binding; ``live(spec)`` says whether the run feeds
    the table its changelog, ``keyed(rule, spec)`` whether the rule keeps it by key (default: never).
    Each snapshot file is read once; the first joined rule of each table (by name) reports the
    table's rows."""
    # every joined rule is keyed (pattern, analytics, search with join:): spark_udf.keyed.is_keyed
    joined = sorted((r.name, str(rule_join(r).table)) for r in rules if rule_join(r) is not None)
    built: dict[str, TableBinding] = {}
    out: dict[str, TableBinding] = {}
    by_name = {r.name: r for r in rules}
    for name, table in joined:
        spec = tables[table]
        first = table not in built
        if first:
            built[table] = TableBinding.build(spec, static=not live(spec), reporter=False)
        b = built[table]
        by_key = bool(keyed is not None and not b.static and keyed(by_name[name], spec))
        out[name] = TableBinding(b.spec, b.initial, b.static, first, b.snapshot_errors, by_key)
    return out


def changes_in_order(chunks: list[Any], spec: TableSpec) -> list[Any]:
    """One micro-batch of a joined group as one pandas frame: its change rows first, in (change time,
    row) order, then the other rows as delivered.

    Spark fixes no order between the input partitions of a micro-batch, so the groups holding a
    replica could see one batch's changes in different orders and disagree about a late change or
    about two changes of one key at one time. Sorted, every replica applies them alike: a change is
    late when it is behind the table's watermark as of the previous micro-batch (as an event is
    judged against Spark's watermark), and of two changes of one key at one time the larger row
    (as JSON) wins. (A backfill keeps the changelog's arrival order: it has one.)
    """
    import pandas as pd

    frames = [c for c in chunks if len(c)]
    if not frames:
        return []
    pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    if STREAM_FIELD not in pdf.columns:
        return [pdf]
    mine = (pdf[STREAM_FIELD] == spec.stream).to_numpy(dtype=bool, na_value=False)
    if not mine.any():
        return [pdf]
    from cep.events import batch_from_pandas
    from cep.tables.changelog import decode

    idx = np.flatnonzero(mine)
    batch = batch_from_pandas(pdf.iloc[idx][[c for c in pdf.columns if not str(c).startswith("_cep_")]])
    ch = decode(batch, spec)
    times = np.full(len(idx), np.iinfo(np.int64).min, dtype=np.int64)  # error rows first: they apply nothing
    times[ch.rows] = ch.times
    texts = [json.dumps(batch.record(i), sort_keys=True, default=str) for i in range(batch.n)]
    order = sorted(range(len(idx)), key=lambda i: (int(times[i]), texts[i]))
    rows = np.concatenate([idx[order], np.flatnonzero(~mine)])
    return [pdf.iloc[rows].reset_index(drop=True)]
