"""Keyed rule kinds: the operators the shared stateful stage hosts per key, and their registry.

A keyed kind (:class:`KeyedKind`) runs a stateful operator per key, hosted by the shared
``applyInPandasWithState`` stage (streams) or ``applyInPandas`` stage (backfill), grouped by
``(rule, hash bucket of the key)``: pattern rules and windowed analytics rules. This is the part
of the dispatch table (:mod:`spark_udf.kinds`) the Spark-free worker core needs; register a kind
with :func:`spark_udf.kinds.register_kind`.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, runtime_checkable

import numpy as np

from cep.operator import OperatorOutput

__all__ = ["KeyedOperator", "joined_table", "KeyedKind", "PatternKind", "AnalyticsKind", "JoinedSearchKind", "HostedSearch", "KEYED_KINDS",
           "kind_of", "is_keyed"]


@runtime_checkable
class KeyedOperator(Protocol):
    """What the Spark stage needs from a keyed operator (one per rule and hash bucket)."""

    def ingest(self, events: Any, late_before: int | np.ndarray) -> OperatorOutput: ...

    def advance_to(self, watermark: int) -> OperatorOutput: ...

    def finish(self) -> OperatorOutput: ...

    def next_deadline(self) -> int | None: ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...

    def reset(self) -> None: ...


class KeyedKind(Protocol):
    """A rule kind run as a keyed stateful operator.

    Optional attributes: ``output_defaults(rule)`` (values of output columns a row leaves out),
    ``state_codec`` (``"zlib"``: the bucket's snapshot is stored compressed) and ``clause`` (how
    the rule names its key and time columns, for the error when the input lacks one).
    """

    name: str

    def key_columns(self, rule: Any) -> tuple[str, ...]: ...

    def time_column(self, rule: Any) -> str: ...

    def lateness_ms(self, rule: Any) -> int: ...

    def output_fields(self, rule: Any, input_types: Mapping[str, str]) -> list[tuple[str, str]]: ...

    def new_operator(self, rule: Any) -> KeyedOperator: ...

    def fingerprint(self, operator: KeyedOperator) -> str: ...


class PatternKind:
    """MATCH_RECOGNIZE rules: keyed by PARTITION BY, timed by ORDER BY."""

    name = "pattern"
    clause = "PARTITION BY / ORDER BY"

    def key_columns(self, rule: Any) -> tuple[str, ...]:
        return tuple(rule.compiled.statement.partition_by)

    def time_column(self, rule: Any) -> str:
        return rule.compiled.statement.order_by

    def lateness_ms(self, rule: Any) -> int:
        return int(rule.lateness_ms)

    def output_fields(self, rule: Any, input_types: Mapping[str, str]) -> list[tuple[str, str]]:
        from spark_udf.schema import pattern_output_fields

        return pattern_output_fields(rule.compiled.statement, input_types, getattr(rule, "time_unit", "ms"))

    def new_operator(self, rule: Any) -> KeyedOperator:
        from cep.operator import PatternOperator

        op: Any = PatternOperator.from_rule(rule)
        return op

    def fingerprint(self, operator: Any) -> str:
        from spark_udf.state import pattern_fingerprint

        return pattern_fingerprint(operator.automaton)


class AnalyticsKind:
    """Windowed analytics rules: keyed by the GROUP BY columns, timed by the window's time column.

    The operator is the embedded :class:`~cep.analytics.WindowOperator` itself, driven by its
    external-clock calls; its snapshot (windows, panes, sessions, sketches, the FIRST_SEEN
    filter) is the bucket's state.
    """

    name = "analytics"
    clause = "GROUP BY key / window time"
    state_codec = "zlib"  # sketch counters, Bloom bits and pane arrays are mostly zeros

    def key_columns(self, rule: Any) -> tuple[str, ...]:
        return tuple(rule.spec.keys)

    def time_column(self, rule: Any) -> str:
        return rule.spec.time_column

    def lateness_ms(self, rule: Any) -> int:
        return int(rule.lateness_ms)

    def output_fields(self, rule: Any, input_types: Mapping[str, str]) -> list[tuple[str, str]]:
        from spark_udf.schema import analytics_output_fields

        return analytics_output_fields(rule.spec, input_types)

    def output_defaults(self, rule: Any) -> dict[str, Any]:
        """Only retractions carry ``retract`` in the engine's rows; on Spark the others say false."""
        return {"retract": False}

    def new_operator(self, rule: Any) -> KeyedOperator:
        from cep.analytics import WindowOperator

        op: Any = WindowOperator.from_rule(rule)
        return op

    def fingerprint(self, operator: Any) -> str:
        return operator.layout_fingerprint()


class HostedSearch:
    """A joined search rule's operator driven by the stage's clock (:class:`KeyedOperator`).

    The embedded :class:`~cep.search_rules.SearchOperator` itself: a document is judged late
    against the host's watermark on arrival, then waits (in arrival order) until the table's
    watermark passes it, as embedded; the stage's watermark releases nothing by itself (a search
    rule's rows never wait for later events). The query index is built once per worker: a reset
    restores the blank state instead of rebuilding it.
    """

    def __init__(self, rule: Any):
        from cep.search_rules import SearchOperator

        self.op = SearchOperator.from_rule(rule)
        self._blank = self.op.snapshot()

    @property
    def clock(self) -> Any:
        return self.op.clock

    @clock.setter
    def clock(self, value: Any) -> None:
        self.op.clock = value

    @property
    def released_to(self) -> int | None:
        return self.op.released_to

    @property
    def counts(self) -> Any:
        return self.op.counts

    def bind_table(self, table: Any) -> None:
        self.op.bind_table(table)

    def ingest(self, events: Any, late_before: int | np.ndarray) -> OperatorOutput:
        return self.op.ingest(events, late_before)

    def advance_to(self, watermark: int) -> OperatorOutput:
        return self.op.release()  # the table may have moved in this call (its changes come first)

    def finish(self) -> OperatorOutput:
        return self.op.finish()

    def next_deadline(self) -> int | None:
        return None  # waiting documents move with the table's changes, which come with new input

    def snapshot(self) -> bytes:
        return self.op.snapshot()

    def restore(self, data: bytes) -> None:
        self.op.restore(data)

    def reset(self) -> None:
        self.op.restore(self._blank)


class JoinedSearchKind:
    """Search rules with ``join:``: keyed by the join's document fields, so a table kept by key meets
    its keys' documents in one group (unjoined search rules are stateless, :mod:`spark_udf.kinds`)."""

    name = "search"
    clause = "time_field"

    def key_columns(self, rule: Any) -> tuple[str, ...]:
        return tuple(rule.spec.join.event_keys)

    def time_column(self, rule: Any) -> str:
        return rule.spec.time_field

    def lateness_ms(self, rule: Any) -> int:
        return int(rule.lateness_ms)

    def output_fields(self, rule: Any, input_types: Mapping[str, str]) -> list[tuple[str, str]]:
        from spark_udf.schema import search_output_fields

        return search_output_fields(rule.spec, input_types)

    def new_operator(self, rule: Any) -> KeyedOperator:
        return HostedSearch(rule)

    def fingerprint(self, operator: Any) -> str:
        """What the saved state (waiting documents, clock) means: the time and the join, not the queries
        (a snapshot restores into other queries, as embedded)."""
        import hashlib
        import json
        from dataclasses import asdict

        spec = operator.op.spec
        what = {"time": spec.time_field, "unit": operator.op.time_unit, "join": asdict(spec.join)}
        return "search:" + hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _view_kind() -> Any:
    from spark_udf.views import ViewKind

    return ViewKind()


# "search" is keyed for joined search rules only (:func:`is_keyed`); the others are stateless; "view" is
# a view's changelog group (spark_udf.views), never a rule of the file
KEYED_KINDS: dict[str, KeyedKind] = {"pattern": PatternKind(), "analytics": AnalyticsKind(),
                                     "search": JoinedSearchKind(), "view": _view_kind()}


def kind_of(rule: Any) -> str:
    return getattr(rule, "kind", "pattern") or "pattern"


def is_keyed(rule: Any) -> bool:
    """Whether the rule runs in the keyed stateful stage: pattern and analytics rules, and search rules
    with ``join:`` (their groups keep the table and the documents waiting for it)."""
    k = kind_of(rule)
    if k == "search":
        return getattr(getattr(rule, "spec", None), "join", None) is not None
    return k in KEYED_KINDS


def joined_table(rule: Any) -> str | None:
    """The table a rule joins (``FROM s JOIN t FOR SYSTEM_TIME AS OF``, a search rule's ``join:``), or None."""
    compiled = getattr(rule, "compiled", None)
    join = getattr(getattr(getattr(compiled, "statement", None), "join", None), "table", None)
    if join is None:
        join = getattr(getattr(getattr(rule, "spec", None), "join", None), "table", None)
    return None if join is None else str(join)
