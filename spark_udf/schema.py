"""Output schemas derived from the rules: measure types, per-rule columns, the shared envelope.

Types are Spark SQL type names (``bigint``, ``double``, ``string``, ``boolean``, ``timestamp``,
or an input column's own type), so this module needs no Spark. A measure's type is inferred
from its expression, as the engine computes it:

=========================================  ==========================================
expression                                 type
=========================================  ==========================================
``col``, ``A.col``, ``FIRST/LAST/PREV/NEXT``  the input column's type
``COUNT(...)``, ``MATCH_NUMBER()``            ``bigint``
``AVG(x)``, ``x / y``, ``x % y``, SQRT/LN/..  ``double``
``SUM(x)``, ``x + y``, ``x - y``, ``x * y``    ``bigint`` when every operand is integral,
                                              else ``double``
``MIN(x)``, ``MAX(x)``, ABS, ROUND(x)         the type of ``x``
FLOOR, CEIL, LENGTH                           ``bigint``
comparisons, AND/OR/NOT, IS NULL, LIKE, IN    ``boolean``
``CLASSIFIER()``, ``||``, LOWER/UPPER/TRIM    ``string``
CASE, COALESCE, GREATEST, LEAST, NULLIF       the common type of the branches
anything else, or mixed types                 ``string`` (the value's text)
=========================================  ==========================================

A value that does not fit its column's type at run time is written as NULL and reported on
the errors output (never dropped silently).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from patterns import ast as A

__all__ = [
    "INTEGRAL",
    "NUMERIC",
    "expr_type",
    "pattern_output_fields",
    "deadline_type",
    "analytics_output_fields",
    "search_output_fields",
    "SPANS_TYPE",
    "top_k_type",
    "Envelope",
    "PROBLEM_FIELDS",
    "RESERVED_PREFIX",
]

INTEGRAL = frozenset({"tinyint", "smallint", "int", "bigint", "byte", "short", "integer", "long"})
NUMERIC = INTEGRAL | {"float", "double", "real"}
TIME_TYPES = frozenset({"timestamp", "timestamp_ntz", "date"})
RESERVED_PREFIX = "_cep_"

PROBLEM_FIELDS: tuple[tuple[str, str], ...] = (
    ("source", "string"),
    ("line", "bigint"),
    ("reason", "string"),
    ("event", "string"),
)
"""Columns of a late or error row besides ``rule``: where it came from, why, and the event as JSON."""

_FUNC_TYPES = {
    "FLOOR": "bigint", "CEIL": "bigint", "CEILING": "bigint", "LENGTH": "bigint", "CHAR_LENGTH": "bigint",
    "SQRT": "double", "LN": "double", "EXP": "double", "POWER": "double", "MOD": "double",
    "LOWER": "string", "UPPER": "string", "TRIM": "string", "SUBSTRING": "string",
}


def _common(types: Iterable[str]) -> str:
    ts = [t for t in types if t != "void"]
    if not ts:
        return "string"
    if all(t == ts[0] for t in ts):
        return ts[0]
    if all(t in NUMERIC or t in TIME_TYPES for t in ts):
        return "bigint" if all(t in INTEGRAL or t in TIME_TYPES for t in ts) else "double"
    return "string"


def _arith(t: str) -> str:
    """How a value of type ``t`` behaves in arithmetic (event times are epoch milliseconds)."""
    return "bigint" if t in INTEGRAL or t in TIME_TYPES else ("double" if t in NUMERIC else t)


def expr_type(e: A.Expr, input_types: Mapping[str, str]) -> str:
    """The Spark type of a MATCH_RECOGNIZE expression's value.

    Example:
        >>> from patterns.rules import parse_rule_text
        >>> mr = parse_rule_text('''SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts
        ...   MEASURES COUNT(A.*) AS n, AVG(A.px) AS a, LAST(A.px) AS p, A.px * 2 AS d, A.sym || 'x' AS s
        ...   PATTERN (A+) DEFINE A AS px > 0)''').compiled.statement
        >>> [expr_type(m.expr, {"px": "int", "sym": "string"}) for m in mr.measures]
        ['bigint', 'double', 'int', 'bigint', 'string']
    """
    t = lambda x: expr_type(x, input_types)  # noqa: E731
    if isinstance(e, A.Literal):
        v = e.value
        if v is None:
            return "void"
        if isinstance(v, bool):
            return "boolean"
        if isinstance(v, int):
            return "bigint"
        if isinstance(v, float):
            return "double"
        return "string"
    if isinstance(e, A.Column):
        return input_types.get(e.name, "string")
    if isinstance(e, A.Nav):
        return t(e.arg)
    if isinstance(e, A.Agg):
        if e.func == "COUNT":
            return "bigint"
        if e.func == "AVG":
            return "double"
        arg = t(e.arg) if e.arg is not None else "bigint"
        if e.func == "SUM":
            return _arith(arg) if _arith(arg) in NUMERIC else "double"
        return arg
    if isinstance(e, A.MatchNumber):
        return "bigint"
    if isinstance(e, A.Classifier):
        return "string"
    if isinstance(e, A.Unary):
        inner = _arith(t(e.operand))
        return inner if inner in NUMERIC else "string"
    if isinstance(e, A.Binary):
        if e.op == "||":
            return "string"
        lt, rt = _arith(t(e.left)), _arith(t(e.right))
        if lt not in NUMERIC or rt not in NUMERIC:
            return "string"
        if e.op in ("/", "%"):
            return "double"
        return "bigint" if lt in INTEGRAL and rt in INTEGRAL else "double"
    if isinstance(e, (A.Compare, A.Logical, A.Not, A.IsNull, A.Between, A.InList, A.Like)):
        return "boolean"
    if isinstance(e, A.Case):
        branches = [v for _, v in e.whens] + ([e.default] if e.default is not None else [])
        return _common(t(b) for b in branches)
    if isinstance(e, A.Func):
        name = e.name.upper()
        if name in _FUNC_TYPES:
            return _FUNC_TYPES[name]
        if name in ("ABS", "ROUND") and e.args:
            inner = _arith(t(e.args[0]))
            if inner not in NUMERIC:
                return "string"
            return "double" if name == "ROUND" and len(e.args) > 1 and inner not in INTEGRAL else inner
        if name in ("COALESCE", "GREATEST", "LEAST", "NULLIF"):
            return _common(t(a) for a in (e.args[:1] if name == "NULLIF" else e.args))
    return "string"


def pattern_output_fields(mr: A.MatchRecognize, input_fields: Mapping[str, str],
                          time_unit: str = "ms") -> list[tuple[str, str]]:
    """Columns of one pattern rule's complex events, in the engine's order, with their types.

    ONE ROW PER MATCH: the PARTITION BY columns, then the measures. ALL ROWS PER MATCH: the
    PARTITION BY columns, the ORDER BY column, the measures, then every other input column.
    WITH TIMEOUT ROWS adds ``_waiting_for`` and ``_deadline`` (:func:`deadline_type`), NULL in
    complex events and set in the timeout rows. The ``rule`` column comes last.

    Example:
        >>> from patterns.rules import parse_rule_text
        >>> mr = parse_rule_text('''SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        ...   MEASURES FIRST(A.ts) AS t0 PATTERN (A+) DEFINE A AS px > 0)''').compiled.statement
        >>> pattern_output_fields(mr, {"k": "string", "ts": "bigint", "px": "double"})
        [('k', 'string'), ('t0', 'bigint'), ('rule', 'string')]
    """
    out: dict[str, str] = {}
    for c in mr.partition_by:
        out[c] = input_fields.get(c, "string")
    if mr.rows_per_match == "ALL":
        out[mr.order_by] = input_fields.get(mr.order_by, "string")
    for m in mr.measures:
        typ = expr_type(m.expr, input_fields)
        out[m.name] = "string" if typ == "void" else typ
    if mr.rows_per_match == "ALL":
        for c, typ in input_fields.items():
            if c not in out:
                out[c] = typ
    if mr.timeout_rows:
        out["_waiting_for"] = "array<string>"
        out["_deadline"] = deadline_type(input_fields.get(mr.order_by, "string"), time_unit)
    out["rule"] = "string"
    return list(out.items())


def deadline_type(order_by_type: str, time_unit: str = "ms") -> str:
    """The Spark type of a timeout row's ``_deadline``: the event-time field's own kind of value.

    The engine writes the deadline like the field (cep.operator's timeout rows): a number in
    the field's unit, or ISO-8601 text. Timestamps arrive in the engine as epoch milliseconds, so
    their deadline is a timestamp again; whole epoch seconds can end on a fraction of a second.

    Example:
        >>> [deadline_type(t, u) for t, u in (("bigint", "ms"), ("bigint", "s"), ("timestamp", "ms"), ("string", "ms"))]
        ['bigint', 'double', 'timestamp', 'string']
    """
    if order_by_type in TIME_TYPES:
        return "timestamp" if order_by_type == "date" else order_by_type
    if order_by_type in INTEGRAL:
        return "double" if time_unit == "s" else "bigint"
    if order_by_type in NUMERIC:
        return "double"
    return "string"


_COUNTING = frozenset({"COUNT", "COUNT_DISTINCT", "APPROX_COUNT_DISTINCT", "APPROX_COUNT", "FIRST_SEEN"})


def top_k_type(value_type: str) -> str:
    """The Spark type of ``APPROX_TOP_K`` over values of ``value_type``: (value, count) pairs.

    Time values stay epoch milliseconds inside the pairs.

    Example:
        >>> top_k_type("string")
        'array<struct<value:string,count:bigint>>'
    """
    return f"array<struct<value:{_arith(value_type) if value_type in TIME_TYPES else value_type},count:bigint>>"


def _aggregate_type(func: str, arg: A.Expr | None, types: Mapping[str, str]) -> str:
    """The Spark type of an analytics aggregate's value, as the window operator computes it."""
    if func in _COUNTING:
        return "bigint"
    if func == "AVG":
        return "double"
    typ = expr_type(arg, types) if arg is not None else "bigint"
    typ = "string" if typ == "void" else typ
    if func == "SUM":
        return "bigint" if _arith(typ) in INTEGRAL else "double"
    if func == "APPROX_TOP_K":
        return top_k_type(typ)
    if func == "HLL_SKETCH":
        return "binary"  # Apache DataSketches HLL, as Spark's hll_sketch_agg writes
    return typ  # MIN, MAX


def analytics_output_fields(spec: Any, input_fields: Mapping[str, str]) -> list[tuple[str, str]]:
    """Columns of one analytics rule's rows, in the engine's order, with their types.

    The SELECT items, then ``rule``, ``correction`` and ``retract``. ``window_start`` and
    ``window_end`` have the time column's type when it is a Spark time type, else they are
    epoch milliseconds (``bigint``); aggregates are typed as the window operator computes them
    (counts ``bigint``, AVG ``double``, SUM ``bigint`` over integers, MIN/MAX their argument's
    type, APPROX_TOP_K (value, count) pairs, HLL_SKETCH ``binary``); expressions over them as
    in :func:`expr_type`.

    Example:
        >>> from patterns.analytics import compile_analytics
        >>> spec = compile_analytics("SELECT host, COUNT(*) / 60.0 AS rate, SUM(bytes) AS b, "
        ...     "APPROX_TOP_K(url, 3) AS top, HLL_SKETCH(url) AS urls, window_start FROM hits "
        ...     "GROUP BY host, TUMBLE(at, INTERVAL '1' MINUTE)")
        >>> analytics_output_fields(spec, {"host": "string", "at": "timestamp", "bytes": "int", "url": "string"})
        ... # doctest: +NORMALIZE_WHITESPACE
        [('host', 'string'), ('rate', 'double'), ('b', 'bigint'),
         ('top', 'array<struct<value:string,count:bigint>>'), ('urls', 'binary'),
         ('window_start', 'timestamp'), ('rule', 'string'), ('correction', 'boolean'), ('retract', 'boolean')]
    """
    from patterns.analytics import AggRef, PrevRef, rebuild_expr

    types = dict(input_fields)
    time_type = input_fields.get(spec.window.time_column)
    types["window_start"] = types["window_end"] = time_type if time_type in TIME_TYPES else "bigint"
    for slot, agg in enumerate(spec.aggregates):
        types[f"\0agg{slot}"] = _aggregate_type(agg.func, agg.arg, input_fields)

    def slot_column(x: A.Expr) -> A.Expr | None:
        if isinstance(x, (AggRef, PrevRef)):  # PREV_WINDOW has its aggregate's type
            return A.Column(None, f"\0agg{x.slot}")
        return None

    out: dict[str, str] = {}
    for oc in spec.select:
        typ = expr_type(rebuild_expr(oc.expr, slot_column), types)
        out[oc.name] = "string" if typ == "void" else typ
    out.update(rule="string", correction="boolean", retract="boolean")
    return list(out.items())


SPANS_TYPE = "array<struct<field:string,start:bigint,end:bigint>>"
"""A search row's matched spans: ``[[field, start, end], ...]`` in the engine, structs on Spark."""


def search_output_fields(spec: Any, input_fields: Mapping[str, str]) -> list[tuple[str, str]]:
    """Columns of one search rule's rows, in the engine's order, with their types.

    The copied ``fields`` (every input column for ``fields: '*'``) with their input types, then
    ``query_id`` (``string``, also for integer ids), ``metadata`` (the query's metadata as a
    JSON object in a ``string``), ``spans`` with ``highlight`` (:data:`SPANS_TYPE`), ``rule``.

    Example:
        >>> from patterns.rules import parse_rules
        >>> spec = parse_rules('''
        ... rules:
        ...   - {name: r, kind: search, from: news, highlight: true, fields: [id, at], query: apple}
        ... ''').rules[0].spec
        >>> search_output_fields(spec, {"id": "bigint", "at": "timestamp", "title": "string"})
        ... # doctest: +NORMALIZE_WHITESPACE
        [('id', 'bigint'), ('at', 'timestamp'), ('query_id', 'string'), ('metadata', 'string'),
         ('spans', 'array<struct<field:string,start:bigint,end:bigint>>'), ('rule', 'string')]
    """
    from patterns.search_rules import ROW_FIELDS

    if spec.all_fields:
        copied = [(c, t) for c, t in input_fields.items() if c not in ROW_FIELDS and not c.startswith(RESERVED_PREFIX)]
    else:
        copied = [(f, input_fields.get(f, "string")) for f in spec.fields]
    out = dict(copied)
    out.update(query_id="string", metadata="string")
    if spec.highlight:
        out["spans"] = SPANS_TYPE
    out["rule"] = "string"
    return list(out.items())


@dataclass
class Envelope:
    """One wide schema for every output row of a rule set: complex events, late and bad events.

    Columns: ``output`` (``match``, ``late`` or ``error``), ``rule``, ``kind``, the problem
    columns (``source``, ``line``, ``reason``, ``event``), then the union of every rule's
    output columns. Where two rules give one column name different types, the later one is
    renamed ``<name>__<rule>``; :meth:`columns_of` maps each rule's own names to the envelope's.
    """

    columns: dict[str, str] = field(default_factory=dict)  # envelope column -> type
    rule_columns: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)  # rule -> (name, env col, type)
    rule_kinds: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, rule_fields: Mapping[str, tuple[str, list[tuple[str, str]]]]) -> "Envelope":
        """From ``{rule name: (kind, [(column, type), ...])}`` in rule order.

        Example:
            >>> env = Envelope.build({"a": ("pattern", [("k", "string"), ("x", "bigint")]),
            ...                       "b": ("pattern", [("k", "string"), ("x", "double")])})
            >>> [c for c in env.columns if c not in env.fixed()]
            ['k', 'x', 'x__b']
            >>> env.columns_of("b")
            [('k', 'k', 'string'), ('x', 'x__b', 'double')]
        """
        env = cls()
        env.columns = {"output": "string", "rule": "string", "kind": "string"}
        env.columns.update(PROBLEM_FIELDS)
        for name, (kind, fields) in rule_fields.items():
            env.rule_kinds[name] = kind
            mapping = []
            for col, typ in fields:
                if col.startswith(RESERVED_PREFIX):
                    raise ValueError(
                        f"rule {name!r}: output column {col!r} starts with the reserved prefix "
                        f"{RESERVED_PREFIX!r}; rename the measure or the input column"
                    )
                if col == "rule":
                    continue
                target = col
                if col in ("output", "kind") or (col in env.columns and env.columns[col] != typ):
                    target = f"{col}__{name}"
                env.columns.setdefault(target, typ)
                mapping.append((col, target, typ))
            env.rule_columns[name] = mapping
        return env

    @staticmethod
    def fixed() -> list[str]:
        return ["output", "rule", "kind"] + [n for n, _ in PROBLEM_FIELDS]

    def columns_of(self, rule: str) -> list[tuple[str, str, str]]:
        """``(rule's column, envelope column, type)`` for each output column of ``rule``."""
        return self.rule_columns[rule]

    def ddl(self) -> str:
        return ", ".join(f"`{c}` {t}" for c, t in self.columns.items())


def describe_value(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."
