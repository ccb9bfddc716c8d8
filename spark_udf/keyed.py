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

__all__ = ["KeyedOperator", "KeyedKind", "PatternKind", "AnalyticsKind", "KEYED_KINDS", "kind_of"]


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


KEYED_KINDS: dict[str, KeyedKind] = {"pattern": PatternKind(), "analytics": AnalyticsKind()}


def kind_of(rule: Any) -> str:
    return getattr(rule, "kind", "pattern") or "pattern"
