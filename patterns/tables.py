"""Tables in a rule file: the ``tables:`` section, each a named table kept in sync by a changelog stream.

A table declaration::

    tables:
      - name: customers            # what FROM s JOIN customers FOR SYSTEM_TIME AS OF ... names
        from: customer_changes     # the input stream that carries its changelog
        primary_key: id            # one column, or a list of columns
        columns: [tier, country]   # the columns a join adds to each event
        format: upsert             # upsert (the default) or debezium
        time_field: updated_at     # when each change takes effect (debezium: ts_ms by default)
        time_unit: ms              # of numeric times: s, ms (the default), us, ns
        lateness: 5 minutes        # allowed lateness of changes (default 0)
        delete_field: __deleted    # upsert only: a row whose field holds one of delete_values deletes its key
        delete_values: [true, "true"]
        snapshot: customers.csv    # optional rows valid from the beginning of time (CSV, JSON lines, Parquet)

Parsing checks every value and reports each problem with the file, line and column of its value.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = ["TableSpec", "TABLE_KEYS", "TABLE_FORMATS", "SNAPSHOT_FORMATS", "parse_tables", "bind_join",
           "bind_analytics_join", "JoinSpec", "SEARCH_JOIN_KEYS", "parse_search_join", "YamlHelpers",
           "DEFAULT_DELETE_FIELD", "DEFAULT_DELETE_VALUES"]

TABLE_FORMATS = ("upsert", "debezium")
SNAPSHOT_FORMATS = {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
                    ".parquet": "parquet", ".pq": "parquet"}
DEFAULT_DELETE_FIELD = "__deleted"
"""The field Debezium's flattening transform (``ExtractNewRecordState``, ``delete.handling.mode=rewrite``)
adds to each row: ``"true"`` on the row of a delete."""
DEFAULT_DELETE_VALUES: tuple[Any, ...] = (True, "true")

TABLE_KEYS = {
    "name": "the table's name, as a join's FOR SYSTEM_TIME AS OF names it",
    "description": "free text",
    "from": "the input stream carrying the table's changelog (its rows go to the table, not to rules)",
    "primary_key": "the key column, or a list of key columns",
    "columns": "the list of columns a join adds to each event (other fields of a change are not kept)",
    "format": "upsert (each row the whole new row of its key; the default) or debezium (envelopes: op, before, after)",
    "time_field": "field holding when a change takes effect (debezium: ts_ms by default; a dotted path reads inside objects)",
    "time_unit": "unit of numeric change times: s, ms (the default), us or ns",
    "lateness": "allowed lateness of changes: milliseconds or text such as '5 minutes' (default 0)",
    "delete_field": "upsert only: the field that marks a delete (default __deleted)",
    "delete_values": "upsert only: values of delete_field that mean delete (default [true, \"true\"])",
    "snapshot": "a CSV, JSON lines or Parquet file of rows valid from the beginning of time, next to the rule file",
}

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class TableSpec:
    """One checked table declaration."""

    name: str
    stream: str
    primary_key: tuple[str, ...]
    columns: tuple[str, ...]
    format: str = "upsert"
    time_field: str = "ts_ms"
    time_unit: str = "ms"
    lateness_ms: int = 0
    delete_field: str | None = DEFAULT_DELETE_FIELD
    delete_values: tuple[Any, ...] = DEFAULT_DELETE_VALUES
    snapshot: str | None = None  # absolute path (symbolic links resolved), read when an engine starts
    snapshot_format: str | None = None
    description: str = ""


@dataclass(frozen=True)
class JoinSpec:
    """A checked temporal join of a rule declared without SQL (a search rule's ``join:``)."""

    table: str
    kind: str  # INNER or LEFT
    event_keys: tuple[str, ...]  # the document fields matched to the primary key, in its order
    columns: tuple[str, ...]  # the table's columns the join adds to each document


SEARCH_JOIN_KEYS = {
    "table": "the table's name (declared under tables:)",
    "on": "the document field holding the key (one-column key), or a mapping {document field: key column}",
    "kind": "inner (the default: documents without a row are dropped) or left (kept, without the columns)",
}


def parse_search_join(value: Any, tables: dict[str, TableSpec], time_field: str | None) -> tuple[JoinSpec | None, list[str]]:
    """A search rule's ``join:`` mapping checked against the declared ``tables``; the messages of its problems.

    Example:
        >>> t = {"customers": TableSpec("customers", "changes", ("id",), ("tier",), time_field="ts")}
        >>> parse_search_join({"table": "customers", "on": {"customer": "id"}, "kind": "left"}, t, "ts")
        (JoinSpec(table='customers', kind='LEFT', event_keys=('customer',), columns=('tier',)), [])
        >>> parse_search_join({"table": "customers", "on": "customer"}, t, None)[1]
        ["a join needs 'time_field': each document reads the table as of its event time"]
    """
    if not isinstance(value, dict):
        return None, [f"'join' must be a mapping {{table: ..., on: ..., kind: inner|left}}, found {value!r}"]
    if True in value and "on" not in value:  # YAML 1.1 reads a bare `on:` key as the boolean true
        value = {("on" if k is True else k): v for k, v in value.items()}
    errors = [f"unknown key {k!r} in 'join'; known keys: {', '.join(SEARCH_JOIN_KEYS)}" for k in value
              if k not in SEARCH_JOIN_KEYS]
    if time_field is None:
        errors.append("a join needs 'time_field': each document reads the table as of its event time")
    name = value.get("table")
    spec = tables.get(name) if isinstance(name, str) else None
    if spec is None:
        known = ", ".join(sorted(tables)) if tables else "none"
        errors.append(f"join: unknown table {name!r} (declared tables: {known}); declare it under 'tables:'")
        return None, errors
    kind = str(value.get("kind", "inner")).upper()
    if kind not in ("INNER", "LEFT"):
        errors.append(f"join: kind must be inner or left, found {value.get('kind')!r}")
    on = value.get("on")
    if isinstance(on, str) and len(spec.primary_key) == 1:
        on = {on: spec.primary_key[0]}
    if not isinstance(on, dict) or not on or not all(isinstance(k, str) and isinstance(v, str) for k, v in on.items()):
        errors.append(f"join: 'on' must name the document field holding the key, or map document fields to the "
                      f"primary-key columns of table {spec.name!r} ({', '.join(spec.primary_key)}), found {on!r}")
        return None, errors
    by_key = {v: k for k, v in on.items()}
    wrong = [v for v in on.values() if v not in spec.primary_key]
    missing = [k for k in spec.primary_key if k not in by_key]
    if wrong or missing or len(by_key) != len(on):
        errors.append(f"join: 'on' must map one document field to each primary-key column of table {spec.name!r} "
                      f"({', '.join(spec.primary_key)}), found {on!r}")
    if errors:
        return None, errors
    return JoinSpec(spec.name, kind, tuple(by_key[k] for k in spec.primary_key), spec.columns), []


@dataclass(frozen=True)
class YamlHelpers:
    """What the rule-file reader lends the tables' parser (passed in: patterns.rules imports this module)."""

    construct: Callable[[Any], Any]  # a node's Python value, by the safe constructor
    node_error: Callable[..., Any]  # (message, text, node, file) -> SourceError
    ms: Callable[[Any, str], int]  # an interval option in ms, ValueError with the message otherwise
    time_units: tuple[str, ...]


def parse_tables(node: Any, text: str, file: str | None, roots: Iterable[str],
                 helpers: YamlHelpers) -> tuple[dict[str, TableSpec], list]:
    """The tables of a ``tables:`` node and the errors found (SourceError, at the offending value)."""
    import yaml

    construct, node_error = helpers.construct, helpers.node_error

    errors: list = []
    tables: dict[str, TableSpec] = {}
    if not isinstance(node, yaml.SequenceNode):
        return {}, [node_error("'tables:' must be a list of tables, each a mapping with name, from, primary_key "
                               "and columns", text, node, file)]
    for item in node.value:
        if not isinstance(item, yaml.MappingNode):
            errors.append(node_error("each table must be a mapping with name, from, primary_key and columns",
                                     text, item, file))
            continue
        fields = {k.value: (k, v) for k, v in item.value}

        def err(message: str, key: str | None = None, fields: dict = fields, item: Any = item) -> None:
            errors.append(node_error(message, text, fields[key][1] if key in fields else item, file))

        for key, (knode, _) in fields.items():
            if key not in TABLE_KEYS:
                errors.append(node_error(f"unknown key {key!r} for a table; known keys: {', '.join(TABLE_KEYS)}",
                                         text, knode, file))
        try:
            py = construct(item) or {}
        except yaml.YAMLError as e:
            err(f"table: {getattr(e, 'problem', None) or e}")
            continue
        name = py.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            err(f"a table needs a 'name' that is an SQL identifier (letters, digits, _), found {name!r}", "name")
            continue
        if name in tables:
            err(f"duplicate table name {name!r}", "name")
            continue
        spec = _one_table(name, py, err, file, roots, helpers)
        if spec is not None:
            tables[name] = spec
    return tables, errors


def _columns(value: Any, what: str, name: str, err: Callable[..., None], key: str) -> tuple[str, ...] | None:
    vals = [value] if isinstance(value, str) else value
    if not isinstance(vals, list) or not vals or not all(isinstance(v, str) and v for v in vals):
        err(f"table {name!r}: {what} must be a column name or a list of column names, found {value!r}", key)
        return None
    dup = sorted({v for v in vals if vals.count(v) > 1})
    if dup:
        err(f"table {name!r}: {what} names {', '.join(dup)} more than once", key)
        return None
    return tuple(vals)


def _one_table(name: str, py: dict[str, Any], err: Callable[..., None], file: str | None,
               roots: Iterable[str], helpers: YamlHelpers) -> TableSpec | None:
    TIME_UNITS, _ms = helpers.time_units, helpers.ms

    ok = True
    stream = py.get("from")
    if not isinstance(stream, str) or not stream:
        err(f"table {name!r} needs 'from:', the input stream that carries its changelog", "from")
        ok = False
    if "primary_key" not in py:
        err(f"table {name!r} needs 'primary_key:', the key column or a list of key columns", "primary_key")
        return None
    key = _columns(py["primary_key"], "primary_key", name, err, "primary_key")
    if "columns" not in py:
        err(f"table {name!r} needs 'columns:', the list of columns a join adds to each event", "columns")
        return None
    cols = _columns(py["columns"], "columns", name, err, "columns")
    if key is None or cols is None:
        return None
    both = [c for c in cols if c in key]
    if both:
        err(f"table {name!r}: {', '.join(both)} is in primary_key; columns lists the other columns (a join "
            "already has the key: it equals the event's join column)", "columns")
        ok = False
    fmt = py.get("format", "upsert")
    if fmt not in TABLE_FORMATS:
        err(f"table {name!r}: format must be upsert or debezium, found {fmt!r}", "format")
        return None
    opts: dict[str, Any] = {}
    if "time_field" in py:
        tf = py["time_field"]
        if not isinstance(tf, str) or not tf:
            err(f"table {name!r}: time_field must be a field name, found {tf!r}", "time_field")
            ok = False
        else:
            opts["time_field"] = tf
    elif fmt == "upsert":
        err(f"table {name!r} needs 'time_field:', the field saying when each change takes effect (event time: "
            "a lookup at time t sees the changes up to t)", "time_field")
        ok = False
    if "time_unit" in py:
        if py["time_unit"] not in TIME_UNITS:
            err(f"table {name!r}: time_unit must be one of {', '.join(TIME_UNITS)}, found {py['time_unit']!r}",
                "time_unit")
            ok = False
        else:
            opts["time_unit"] = py["time_unit"]
    if "lateness" in py:
        try:
            opts["lateness_ms"] = _ms(py["lateness"], f"table {name!r}: lateness")
        except ValueError as e:
            err(str(e), "lateness")
            ok = False
    for k in ("delete_field", "delete_values"):
        if k in py and fmt == "debezium":
            err(f"table {name!r}: {k} is for format upsert; a Debezium envelope says a delete with op 'd'", k)
            ok = False
    if "delete_field" in py and fmt == "upsert":
        df = py["delete_field"]
        if df is not None and (not isinstance(df, str) or not df):
            err(f"table {name!r}: delete_field must be a field name (or null: no deletes), found {df!r}", "delete_field")
            ok = False
        else:
            opts["delete_field"] = df
    if "delete_values" in py and fmt == "upsert":
        dv = py["delete_values"]
        dv = dv if isinstance(dv, list) else [dv]
        if not dv or not all(isinstance(v, (str, int, bool)) for v in dv):
            err(f"table {name!r}: delete_values must be a list of strings, numbers or booleans, found "
                f"{py['delete_values']!r}", "delete_values")
            ok = False
        else:
            opts["delete_values"] = tuple(dv)
    if "snapshot" in py:
        got = _snapshot(name, py["snapshot"], err, file, roots)
        if got is None:
            ok = False
        else:
            opts["snapshot"], opts["snapshot_format"] = got
    if not ok:
        return None
    return TableSpec(name, str(stream), key, cols, fmt, description=str(py.get("description", "")), **opts)


def _snapshot(name: str, value: Any, err: Callable[..., None], file: str | None,
              roots: Iterable[str]) -> tuple[str, str] | None:
    from patterns.files import FileRefused, confine

    if not isinstance(value, str) or not value.strip():
        err(f"table {name!r}: snapshot must be a path, found {value!r}", "snapshot")
        return None
    fmt = SNAPSHOT_FORMATS.get(Path(value).suffix.lower())
    if fmt is None:
        err(f"table {name!r}: snapshot {value!r} must end in .csv, .tsv, .jsonl, .json, .ndjson or .parquet "
            "(its format)", "snapshot")
        return None
    base = Path(file).parent if file else Path.cwd()
    path = base / value
    try:
        real = confine(path, base, roots, what="snapshot file", written=value)
    except FileRefused as e:
        err(f"table {name!r}: {e}", "snapshot")
        return None
    if not os.path.isfile(real):
        err(f"table {name!r}: snapshot file not found: {path} (a relative path starts at the rule file's folder)",
            "snapshot")
        return None
    return str(real), fmt


def bind_join(mr: Any, tables: dict[str, TableSpec], file: str | None = None) -> Any:
    """``mr`` with its temporal join checked against the declared ``tables`` and its names resolved.

    Checks (each error with a caret into the statement): the table is declared; ``AS OF`` names
    the rule's ``ORDER BY`` column; ``ON`` equates an event column with each primary-key column of
    the table, and nothing else; ``t.col`` names one of the table's columns. Then every qualified
    column ``t.col`` or ``s.col`` (the table's or the stream's name or alias) becomes the plain
    column ``col``: a join adds the table's columns to each event under their own names. A
    statement without a join comes back unchanged.

    Example:
        >>> from patterns.match_recognize import parse_statement
        >>> t = {"customers": TableSpec("customers", "changes", ("id",), ("tier",), time_field="ts")}
        >>> mr = bind_join(parse_statement(
        ...     "SELECT * FROM pay AS p JOIN customers FOR SYSTEM_TIME AS OF p.ts AS c ON p.cust = c.id "
        ...     "MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS c.tier = 'gold')"), t)
        >>> mr.join.event_keys, mr.join.columns, mr.defines[0].expr.left
        (('cust',), ('tier',), Column(var=None, name='tier'))
    """
    from dataclasses import replace

    from patterns.errors import CepSyntaxError, SourceError

    j = mr.join
    if j is None:
        return mr
    errors: list[SourceError] = []

    def err(message: str, pos: int, width: int) -> None:
        errors.append(SourceError(message, mr.text, pos, max(width, 1), file))

    variables = {d.var for d in mr.defines} | _pattern_vars(mr.pattern) | {name for name, _ in mr.subsets}
    bound, resolve = _bind(j, tables, mr.source, mr.order_by, "the ORDER BY column", variables, False, err, errors)
    measures = tuple(replace(m, expr=_rewrite(m.expr, resolve)) for m in mr.measures)
    defines = tuple(replace(d, expr=_rewrite(d.expr, resolve)) for d in mr.defines)
    if errors:
        raise CepSyntaxError(errors)
    return replace(mr, measures=measures, defines=defines, join=bound)


def bind_analytics_join(st: Any, tables: dict[str, TableSpec], file: str | None = None) -> Any:
    """An analytics statement ``st`` with its temporal join checked and its names resolved.

    The checks of :func:`bind_join`, with ``AS OF`` naming the window's time column; every
    qualified column (in SELECT, WHERE, GROUP BY and HAVING) must name the stream or the table, and
    becomes the plain column: the join adds the table's columns to each event before it reaches
    a window, so ``GROUP BY sector`` groups by a joined column.

    Example:
        >>> from patterns.analytics import parse_analytics
        >>> t = {"companies": TableSpec("companies", "changes", ("symbol",), ("sector",), time_field="ts")}
        >>> st = bind_analytics_join(parse_analytics(
        ...     "SELECT c.sector, SUM(volume) AS v FROM bars AS b JOIN companies FOR SYSTEM_TIME AS OF b.ts AS c "
        ...     "ON b.sym = c.symbol GROUP BY c.sector, TUMBLE(ts, INTERVAL '7' DAY)"), t)
        >>> st.join.event_keys, st.group_by[0], st.select[0].expr
        (('sym',), Column(var=None, name='sector'), Column(var=None, name='sector'))
    """
    from dataclasses import replace

    from patterns import ast as A
    from patterns.errors import CepSyntaxError, SourceError

    j = st.join
    if j is None:
        return st
    errors: list[SourceError] = []

    def err(message: str, pos: int, width: int) -> None:
        errors.append(SourceError(message, st.text, pos, max(width, 1), file))

    windows = [g for g in st.group_by if not isinstance(g, A.Column)]
    time_col = windows[0].time_column if windows else j.as_of.name
    bound, resolve = _bind(j, tables, st.source, time_col, "the window's time column", set(), True, err, errors)
    select = tuple(replace(i, expr=_rewrite(i.expr, resolve)) for i in st.select)
    where = _rewrite(st.where, resolve) if st.where is not None else None
    group_by = tuple(_rewrite(g, resolve) for g in st.group_by)
    having = _rewrite(st.having, resolve) if st.having is not None else None
    if errors:
        raise CepSyntaxError(errors)
    return replace(st, select=select, where=where, group_by=group_by, having=having, join=bound)


def _bind(j: Any, tables: dict[str, TableSpec], source: str, time_col: str, time_what: str, variables: set[str],
          strict: bool, err: Callable[[str, int, int], None], errors: list) -> tuple[Any, Callable[[Any], Any]]:
    """Check the join ``j`` of a statement reading ``source``: the bound join and the name resolver.

    Errors go to ``err`` (which adds them to ``errors``); an unknown table raises them at once
    (nothing else can be checked).
    ``strict``: a qualifier that is neither the stream's nor the table's is an error (analytics
    rules; in a pattern rule it is a pattern variable's).
    """
    from dataclasses import replace

    from patterns import ast as A
    from patterns.errors import CepSyntaxError

    spec = tables.get(j.table)
    if spec is None:
        known = ", ".join(sorted(tables)) if tables else "none"
        err(f"unknown table {j.table!r} (declared tables: {known}); declare it under 'tables:' in the rule file",
            j.pos, len(j.table))
        raise CepSyntaxError(errors)
    table_names = {j.table} | ({j.table_alias} if j.table_alias else set())
    stream_names = {source} | ({j.stream_alias} if j.stream_alias else set())
    both = table_names & stream_names
    if both:
        err(f"{sorted(both)[0]!r} names both the stream and the table; give one an alias (AS)", j.pos, len(j.table))
    for q in sorted((table_names | stream_names) & variables):
        err(f"{q!r} is both a pattern variable and the name of the join's stream or table; rename one", j.pos,
            len(j.table))
    as_of = j.as_of
    if as_of.var is not None and as_of.var not in stream_names:
        err(f"AS OF {as_of.var}.{as_of.name}: the time must be the stream's ({' or '.join(sorted(stream_names))}), "
            "the time each event looks the table up at", j.as_of_pos, as_of.end - as_of.pos)
    elif as_of.name != time_col:
        err(f"AS OF {as_of.name}: a temporal join reads the table as of the rule's event time, so AS OF must name "
            f"{time_what} ({time_col}), as Flink requires the left side's time attribute",
            j.as_of_pos, as_of.end - as_of.pos)
    keys: dict[str, str] = {}
    n_errors = [0]

    def count(message: str, pos: int, width: int) -> None:
        n_errors[0] += 1
        err(message, pos, width)

    for left, right in j.on:
        if left.var in table_names and right.var not in table_names:
            left, right = right, left
        if right.var not in table_names or (left.var is not None and left.var not in stream_names):
            count(f"ON {_col_text(left)} = {_col_text(right)}: each equality names a column of the stream "
                  f"({' or '.join(sorted(stream_names))}) and one of the table ({' or '.join(sorted(table_names))}), "
                  "qualified by name or alias", left.pos, right.end - left.pos)
            continue
        if right.name not in spec.primary_key:
            count(f"ON ... = {right.var}.{right.name}: {right.name!r} is not in table {spec.name!r}'s primary key "
                  f"({', '.join(spec.primary_key)}); a temporal join looks rows up by their primary key",
                  right.pos, right.end - right.pos)
            continue
        if right.name in keys:
            count(f"ON names {right.var}.{right.name} twice", right.pos, right.end - right.pos)
            continue
        keys[right.name] = left.name
    missing = [k for k in spec.primary_key if k not in keys]
    if missing and not n_errors[0]:
        err(f"ON must equate every primary-key column of table {spec.name!r}; missing: {', '.join(missing)}",
            j.on_pos, 2)
    columns = set(spec.columns)

    def resolve(e: Any) -> Any:
        if isinstance(e, A.Column) and e.var is not None:
            if e.var in table_names:
                if e.name in spec.primary_key and e.name in keys:
                    return A.Column(None, keys[e.name], pos=e.pos, end=e.end)
                if e.name not in columns:
                    err(f"{e.var}.{e.name}: table {spec.name!r} has no column {e.name!r}; its columns: "
                        f"{', '.join(spec.columns)}", e.pos, e.end - e.pos)
                return A.Column(None, e.name, pos=e.pos, end=e.end)
            if e.var in stream_names:
                if e.name in columns:
                    err(f"{e.var}.{e.name}: the join replaces the event's {e.name!r} with table {spec.name!r}'s "
                        f"column of that name; write {e.name} (the table's), or rename the event field",
                        e.pos, e.end - e.pos)
                return A.Column(None, e.name, pos=e.pos, end=e.end)
            if strict:
                err(f"{e.var}.{e.name}: {e.var!r} is neither the stream ({' or '.join(sorted(stream_names))}) nor "
                    f"the table ({' or '.join(sorted(table_names))})", e.pos, e.end - e.pos)
                return A.Column(None, e.name, pos=e.pos, end=e.end)
        return e

    bound = replace(j, event_keys=tuple(keys.get(k, k) for k in spec.primary_key), columns=spec.columns)
    return bound, resolve


def _col_text(c: Any) -> str:
    return f"{c.var}.{c.name}" if c.var else c.name


def _pattern_vars(p: Any) -> set[str]:
    from patterns import ast as A

    out: set[str] = set()
    stack = [p]
    while stack:
        n = stack.pop()
        if isinstance(n, A.PVar):
            out.add(n.name)
        elif isinstance(n, (A.PNot, A.PAny)):
            out.update(n.vars)
        stack.extend(A._children(n))
    return out


def _rewrite(node: Any, fn: Callable[[Any], Any]) -> Any:
    """``node`` with ``fn`` applied to every node below it, bottom up (frozen dataclasses rebuilt)."""
    from dataclasses import fields, replace

    from patterns import ast as A

    if not isinstance(node, A.Node):
        return node
    changes: dict[str, Any] = {}
    for f in fields(node):
        if not f.init:
            continue
        v = getattr(node, f.name)
        if isinstance(v, A.Node):
            nv = _rewrite(v, fn)
        elif isinstance(v, tuple):
            nv = tuple(tuple(_rewrite(y, fn) for y in x) if isinstance(x, tuple) else _rewrite(x, fn) for x in v)
        else:
            continue
        if nv is not v and nv != v:
            changes[f.name] = nv
    if changes:
        node = replace(node, **changes)
    return fn(node)
