"""Table-table views on Spark: a group keeps replicas of a view's tables and maintains the view itself.

A view (``views:``, docs/tables.md) is the join of two tables kept incrementally; its changes are
final once both tables' watermarks have passed them. On Spark it runs in the keyed stateful stage
in two roles, both built on :class:`ViewReplicas` (every table the view depends on, through the
views it joins, each a replica fed by every change row of its changelog, and the views in file
order, stepped as the embedded engine steps them):

* **the view's changelog** (:class:`ViewEmitter`): one group per view, ``(view, bucket 0)``, gets
  every change row of its tables and writes the view's rows (``op``, ``key``, ``before``,
  ``after``, ``ts_ms``) once, under ``kind`` ``view`` with the view's name in ``rule``;
* **rules joining a view** (:class:`ViewJoinedOperator`): each group of the rule keeps its own
  replicas of the tables and the view (the replica layout of joined rules; never kept by key: a
  view row's key depends on both tables), and the rule's operator looks the view up as embedded.

Every replica applies a micro-batch's changes in one order (:func:`~spark_udf.tables.changes_in_order`,
per table), so every group's view is the same; late and bad change rows of a table that no rule
joins directly are written by the emitter of the first view (by file order) that depends on it.
No pyspark in here: the worker core imports it.
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
from patterns.views import ViewSpec
from spark_udf.tables import TableBinding, changes_in_order, table_fingerprint

__all__ = ["ViewBinding", "ViewReplicas", "ViewEmitter", "ViewJoinedOperator", "ViewKind", "view_rule",
           "view_bindings", "VIEW_FIELDS", "needed"]

_FORMAT = 2  # a view group's snapshot (a joined table's is 1: spark_udf.tables)

VIEW_FIELDS = [("view", "string"), ("op", "string"), ("key", "string"), ("before", "string"),
               ("after", "string"), ("ts_ms", "bigint")]
"""A view's changelog rows on Spark: ``key``, ``before`` and ``after`` as JSON objects in strings."""


def needed(view: str, views: dict[str, ViewSpec], tables: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The tables and the views (file order, ending with ``view``) a view is computed from.

    Example:
        >>> from types import SimpleNamespace as V
        >>> views = {"ab": V(left="a", right="b"), "abc": V(left="ab", right="c"), "x": V(left="a", right="d")}
        >>> needed("abc", views, dict.fromkeys("abcd"))
        (['a', 'b', 'c'], ['ab', 'abc'])
    """
    want_views: set[str] = set()
    want_tables: set[str] = set()

    def visit(name: str) -> None:
        if name in views:
            if name not in want_views:
                want_views.add(name)
                visit(views[name].left)
                visit(views[name].right)
        else:
            want_tables.add(name)

    visit(view)
    return [t for t in tables if t in want_tables], [v for v in views if v in want_views]


@dataclass
class ViewBinding:
    """What a worker needs to keep one view (built on the driver): its tables' bindings and the views."""

    target: str  # the view the group emits or its rule joins
    tables: dict[str, TableBinding]  # the tables it depends on (snapshot files read on the driver)
    views: tuple[ViewSpec, ...]  # the views to keep, in file order, ending with ``target``
    report: tuple[str, ...] = ()  # the tables whose late and bad change rows this group writes
    reporter: bool = False  # (read by the stage, as for a table binding: set per group below)
    keyed: bool = False  # never: a view row's key depends on both of its tables
    spec: Any = None  # the view's own table spec (what a joined rule looks up)

    @property
    def static(self) -> bool:
        return all(b.static for b in self.tables.values())

    @property
    def streams(self) -> tuple[str, ...]:
        return tuple(sorted({b.spec.stream for b in self.tables.values() if not b.static}))

    def fingerprint(self, base: str) -> str:
        """A saved view's meaning: its tables' declarations and the views' (a change refuses the state)."""
        what = {"tables": {n: table_fingerprint(b.spec) for n, b in sorted(self.tables.items())},
                "views": [asdict(v) | {"description": ""} for v in self.views]}
        digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]
        return f"{base}+view:{self.target}:{digest}"

    def order(self, chunks: list[Any]) -> list[Any]:
        """A micro-batch's change rows in one order whatever order Spark hands them over in."""
        for b in self.tables.values():
            if not b.static:
                chunks = changes_in_order(list(chunks), b.spec)
        return list(chunks)


class ViewReplicas:
    """Replicas of a view's tables and the views over them, stepped as the embedded engine steps them."""

    def __init__(self, binding: ViewBinding):
        from cep.tables.view import View

        self.binding = binding
        self.tables = {name: b.new_table() for name, b in binding.tables.items()}
        self.views: dict[str, Any] = {}
        for spec in binding.views:
            joinable = {**self.tables, **{n: v.table for n, v in self.views.items()}}
            self.views[spec.name] = View(spec, joinable[spec.left], joinable[spec.right])
        self.view = self.views[binding.target]

    def apply(self, batch: EventBatch, out: OperatorOutput) -> None:
        """Apply the change rows of ``batch`` (each table its own stream's, in the batch's order)."""
        tags = batch.columns.get(STREAM_FIELD)
        if tags is None:
            return
        for name, t in self.tables.items():
            if t.static:
                continue
            rows = np.flatnonzero(tags == t.spec.stream)
            if len(rows):
                got = t.apply(batch.take(rows))
                if name in self.binding.report:
                    out.extend(got)

    def advance(self, final: bool = False) -> list[dict[str, Any]]:
        """Step every view (file order); the target view's new changelog rows."""
        rows: list[dict[str, Any]] = []
        for name, v in self.views.items():
            got = v.advance(final)
            if name == self.binding.target:
                rows = got
        return rows

    def compact(self, mark: int | None) -> None:
        """Forget the versions nothing can look up any more: a view's tables before its emitted time,
        the target view's rows before ``mark`` (the joined rule's released time; None: keep them)."""
        for v in self.views.values():
            if v.emitted_to is None:
                continue
            for t in (v.left, v.right):
                if t in self.tables.values():
                    t.compact(int(v.emitted_to))
        if mark is not None:
            self.view.table.compact(int(mark))

    def state(self) -> dict[str, Any]:
        return {"tables": {n: t.state() for n, t in self.tables.items()},
                "views": {n: v.state() for n, v in self.views.items()}}

    def restore(self, state: dict[str, Any]) -> None:
        for n, t in self.tables.items():
            t.restore(state["tables"][n])
            t.static = self.binding.tables[n].static
        for n, v in self.views.items():
            v.restore(state["views"][n])

    def reset(self) -> None:
        for n, t in self.tables.items():
            b = self.binding.tables[n]
            t.restore(copy.deepcopy(b.initial))
            t.static = b.static
        fresh = ViewReplicas(self.binding)
        for n, v in self.views.items():
            v.restore(fresh.views[n].state())

    def snapshot_errors(self) -> list[dict[str, Any]]:
        return [dict(e) for n in self.binding.report for e in self.binding.tables[n].snapshot_errors]


def _dump(state: dict[str, Any]) -> bytes:
    return bytes([_FORMAT]) + pickle.dumps(state, protocol=5)


def _load(data: bytes) -> dict[str, Any]:
    if not data or data[0] != _FORMAT:
        raise ValueError(f"not a view group's state (format byte {data[:1]!r}, expected {_FORMAT})")
    return safe_pickle.loads(data[1:], "a view group's state")


class ViewEmitter:
    """The group that writes a view's changelog (:class:`~spark_udf.keyed.KeyedOperator`)."""

    def __init__(self, binding: ViewBinding):
        self.binding = binding
        self.replicas = ViewReplicas(binding)
        self.clock: Any = None
        self.reporting = True
        self.first_group = True

    def ingest(self, events: Any, late_before: Any) -> OperatorOutput:
        out = OperatorOutput()
        self.replicas.apply(to_batch(events), out)
        return out

    def _rows(self, final: bool) -> OperatorOutput:
        out = OperatorOutput()
        out.matches.extend(dict(r, rule=self.binding.target) for r in self.replicas.advance(final))
        # no rule looks this copy of the view up: it keeps what the next step compares with (as embedded)
        self.replicas.compact(self.replicas.view.emitted_to)
        return out

    def advance_to(self, watermark: int) -> OperatorOutput:
        return self._rows(False)

    def finish(self) -> OperatorOutput:
        return self._rows(True)

    def next_deadline(self) -> int | None:
        return None  # the view moves with its tables' changes only

    def snapshot(self) -> bytes:
        return _dump({"replicas": self.replicas.state()})

    def restore(self, data: bytes) -> None:
        self.replicas.restore(_load(data)["replicas"])

    def reset(self) -> None:
        self.replicas.reset()

    def startup(self) -> OperatorOutput:
        out = OperatorOutput()
        out.errors.extend(self.replicas.snapshot_errors())
        return out


class ViewJoinedOperator:
    """A keyed rule's operator bound to its group's own replica of a view (and of the view's tables)."""

    def __init__(self, op: Any, binding: ViewBinding):
        self.op = op
        self.binding = binding
        self.replicas = ViewReplicas(binding)
        self.table = self.replicas.view.table
        self.reporting = False
        self.first_group = False
        if hasattr(op, "bind_table"):
            op.bind_table(self.table)
        else:
            from cep.tables.join import TableJoin

            op.join = TableJoin(self.table, op.automaton.mr.join, list(op.columns), list(op.key_cols))

    def __getattr__(self, name: str) -> Any:
        op = self.__dict__.get("op")
        if op is None:
            raise AttributeError(name)
        return getattr(op, name)

    def ingest(self, events: Any, late_before: Any) -> OperatorOutput:
        batch = to_batch(events)
        out = OperatorOutput()
        tags = batch.columns.get(STREAM_FIELD)
        if tags is None or self.binding.static:
            rest = np.arange(batch.n)
        else:
            mine = np.isin(tags, list(self.binding.streams))
            if mine.any():
                self.replicas.apply(batch.take(np.flatnonzero(mine)), out)
                self.replicas.advance()  # the view's rows move before the events, as embedded
            rest = np.flatnonzero(~mine)
        if len(rest):
            lb = late_before if np.ndim(late_before) == 0 else np.asarray(late_before)[rest]
            out.extend(self.op.ingest(batch.take(rest) if len(rest) < batch.n else batch, lb))
        return out

    def advance_to(self, watermark: int) -> OperatorOutput:
        self.replicas.advance()  # a view of static tables emits its join at the first call
        out = self.op.advance_to(watermark)
        self.replicas.compact(self.op.released_to)
        return out

    def finish(self) -> OperatorOutput:
        self.replicas.advance(final=True)
        return self.op.finish()

    def next_deadline(self) -> int | None:
        return self.op.next_deadline()

    def snapshot(self) -> bytes:
        return _dump({"operator": self.op.snapshot(), "replicas": self.replicas.state()})

    def restore(self, data: bytes) -> None:
        state = _load(data)
        self.op.restore(state["operator"])
        self.replicas.restore(state["replicas"])

    def reset(self) -> None:
        self.op.reset()
        self.replicas.reset()

    def startup(self) -> OperatorOutput:
        return OperatorOutput()


class ViewKind:
    """A view's changelog as a keyed "rule" of the stage: one group, no key, no event time."""

    name = "view"

    def key_columns(self, rule: Any) -> tuple[str, ...]:
        return ()

    def time_column(self, rule: Any) -> str | None:
        return None

    def lateness_ms(self, rule: Any) -> int:
        return 0

    def output_fields(self, rule: Any, input_types: Any) -> list[tuple[str, str]]:
        return list(VIEW_FIELDS)

    def new_operator(self, rule: Any) -> Any:
        return ViewEmitter(rule.binding)

    def fingerprint(self, operator: Any) -> str:
        return operator.binding.fingerprint("view")


@dataclass(frozen=True)
class view_rule:  # noqa: N801 - a rule-like record, named as the rule objects' kinds are
    """A view's changelog group as the stage sees a rule: a name, the ``view`` kind and its binding."""

    name: str
    binding: ViewBinding
    kind: str = "view"
    lateness_ms: int = 0


def view_bindings(views: dict[str, ViewSpec], tables: dict[str, Any], live: Any,
                  joined_tables: set[str]) -> dict[str, ViewBinding]:
    """Per view, its binding (each snapshot file read once); ``live(spec)`` says whether the run feeds a
    table its changelog; a table's late and bad rows are written by the first view's emitter (file
    order) among those depending on it, unless a rule joins the table directly (its group writes them)."""
    built: dict[str, TableBinding] = {}
    reported = set(joined_tables)
    out: dict[str, ViewBinding] = {}
    for name, spec in views.items():
        tnames, vnames = needed(name, views, tables)
        bindings = {}
        for t in tnames:
            if t not in built:
                built[t] = TableBinding.build(tables[t], static=not live(tables[t]), reporter=False)
            bindings[t] = built[t]
        report = tuple(t for t in tnames if t not in reported)
        reported |= set(report)
        out[name] = ViewBinding(name, bindings, tuple(views[v] for v in vnames), report, spec=spec.table_spec())
    return out
