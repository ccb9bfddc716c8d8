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

Register a kind with :func:`register_kind`; rules pick their kind by ``rule.kind``. The keyed kinds
live in :mod:`spark_udf.keyed` (the worker core needs them without this table's stateless
kinds, which reach up to the Spark sub-plans).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from spark_udf.keyed import (
    KEYED_KINDS,
    AnalyticsKind,
    KeyedKind,
    KeyedOperator,
    PatternKind,
    is_keyed,
    kind_of,
)

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
    "is_keyed",
]


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

    def stage_core(self, frame: Any, rules: list[Any], envelope: Any, layout: Any = None, clock: Any = None) -> Any:
        from spark_udf.search import stage_core

        return stage_core(frame, rules, envelope, layout, clock)


STATELESS_KINDS: dict[str, StatelessKind] = {"search": SearchKind()}


def register_kind(kind: Any, keyed: bool | None = None) -> None:
    """Make a rule kind runnable on Spark (keyed unless it has a ``build`` method)."""
    stateless = hasattr(kind, "build") if keyed is None else not keyed
    (STATELESS_KINDS if stateless else KEYED_KINDS)[kind.name] = kind
