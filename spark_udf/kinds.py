"""Rule kinds and how each one runs on Spark: the dispatch table other rule kinds plug into.

A rule kind is either

* **keyed** (:class:`KeyedKind`): a stateful operator per key, hosted by the shared
  ``applyInPandasWithState`` stage (streams) or ``applyInPandas`` stage (backfill), grouped by
  ``(rule, hash bucket of the key)``. Pattern rules and windowed analytics rules are keyed.
  The kind says which columns form the key, which column is event time, how late an event may
  be, what its output columns are, and builds the operator, which must offer the
  :class:`KeyedOperator` calls; or
* **stateless** (:class:`StatelessKind`): it builds its own sub-plan over the input (search
  rules: ``mapInArrow`` with the query index shipped once) and returns rows in the shared
  envelope schema. A stateless kind with ``stage_core`` joins the keyed stage on a stream
  instead (groups of its own, no state), to see the query's watermark.

Register a kind with :func:`register_kind`; rules pick their kind by ``rule.kind``.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, runtime_checkable

import numpy as np

from cep.operator import OperatorOutput

__all__ = [
    "KeyedOperator",
    "KeyedKind",
    "StatelessKind",
    "PatternKind",
    "AnalyticsKind",
    "SearchKind",
    "KEYED_KINDS",
    "STATELESS_KINDS",
    "register_kind",
    "kind_of",
]


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


class StatelessKind(Protocol):
    """A rule kind that builds its own Spark sub-plan (the percolator's search rules).

    Optional: ``time_column(rule)`` and ``stage_core(frame, rules, envelope, layout)``, an
    object whose ``stream_group(chunks, watermark_ms)`` returns one stream group's envelope
    rows (then the kind's rules join a stream's stateful stage); ``reports_malformed`` (its
    ``build`` turns the reader's corrupt records into error rows); ``clause`` (how the rule
    names its time column, for errors).
    """

    name: str

    def output_fields(self, rule: Any, input_types: Mapping[str, str]) -> list[tuple[str, str]]: ...

    def build(self, frame: Any, rules: list[Any], envelope: Any, config: Any, layout: Any = None) -> Any:
        """Rows of ``envelope`` (a DataFrame with every envelope column) for these rules.

        ``layout`` (a :class:`~spark_udf.core.InputLayout`) names the input streams and a
        backfill's arrival segments.
        """
        ...


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

        return pattern_output_fields(rule.compiled.statement, input_types)

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


class SearchKind:
    """Search rules: the percolator over the input's batches, stateless (see :mod:`spark_udf.search`).

    On a stream with an event time, every search rule shares groups of the keyed stage (hash
    buckets of the row), judged against the query's watermark; in a backfill, one
    ``mapInArrow``. Either way the query sets reach the executors once, as a broadcast, and
    each Python worker builds the index on first use.
    """

    name = "search"
    clause = "time_field"
    reports_malformed = True

    def time_column(self, rule: Any) -> str | None:
        return rule.spec.time_field

    def output_fields(self, rule: Any, input_types: Mapping[str, str]) -> list[tuple[str, str]]:
        from spark_udf.schema import search_output_fields

        return search_output_fields(rule.spec, input_types)

    def build(self, frame: Any, rules: list[Any], envelope: Any, config: Any, layout: Any = None) -> Any:
        from spark_udf.search import build_search

        return build_search(frame, rules, envelope, config, layout)

    def stage_core(self, frame: Any, rules: list[Any], envelope: Any, layout: Any = None) -> Any:
        from spark_udf.search import stage_core

        return stage_core(frame, rules, envelope, layout)


KEYED_KINDS: dict[str, KeyedKind] = {"pattern": PatternKind(), "analytics": AnalyticsKind()}
STATELESS_KINDS: dict[str, StatelessKind] = {"search": SearchKind()}


def register_kind(kind: Any, keyed: bool | None = None) -> None:
    """Make a rule kind runnable on Spark (keyed unless it has a ``build`` method)."""
    stateless = hasattr(kind, "build") if keyed is None else not keyed
    (STATELESS_KINDS if stateless else KEYED_KINDS)[kind.name] = kind


def kind_of(rule: Any) -> str:
    return getattr(rule, "kind", "pattern") or "pattern"

