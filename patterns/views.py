"""Table-table views in a rule file: the ``views:`` section, each a join of two tables kept incrementally.

A view declaration::

    views:
      - name: company_sectors
        sql: |
          SELECT c.name, s.sector_name AS sector
          FROM companies AS c LEFT JOIN sectors AS s ON c.sector_id = s.id

The left table's primary key is the view's: each left row gives at most one view row, joined with
the right row whose primary key equals the left row's ``ON`` columns (a foreign-key join: many left
rows may point at one right row; when the ``ON`` columns are the left table's own key, a
primary-key join). ``JOIN`` (inner) keeps a left row only while its right row exists; ``LEFT JOIN``
keeps it with the right columns NULL. A view may join tables and views declared before it, and
rules join a view as they join a table (``FOR SYSTEM_TIME AS OF``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from patterns.errors import CepSyntaxError, SourceError
from patterns.sql_lexer import Token, tokenize
from patterns.tables import TableSpec

__all__ = ["ViewSpec", "VIEW_KEYS", "VIEW_STREAM", "parse_view_sql", "parse_views"]

VIEW_KEYS = {
    "name": "the view's name, as a rule's JOIN ... FOR SYSTEM_TIME AS OF (or another view) names it",
    "description": "free text",
    "sql": "SELECT <columns> FROM <table> [AS a] [LEFT] JOIN <table> [AS b] ON a.col = b.key [AND ...]",
}

VIEW_STREAM = ""
"""The ``stream`` of a view's table spec: a view reads no input stream, its rows come from its join."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ViewSpec:
    """One checked view: which tables, how they join, and which columns it keeps (named as in its output)."""

    name: str
    left: str  # the left table (or view): its primary key is the view's
    right: str
    kind: str  # INNER or LEFT
    key: tuple[str, ...]  # the view's primary key: the left table's
    on: tuple[str, ...]  # per primary-key column of the right table, the left column equal to it
    select: tuple[tuple[str, str, str], ...]  # (side "left" or "right", the table's column, the view's column)
    text: str = ""
    description: str = ""

    @property
    def columns(self) -> tuple[str, ...]:
        """The view's columns (its key aside), in SELECT order."""
        return tuple(out for _, _, out in self.select)

    def table_spec(self) -> TableSpec:
        """The view as a table that rules (and later views) can join: its key and columns."""
        return TableSpec(self.name, VIEW_STREAM, self.key, self.columns, time_field="ts_ms",
                         description=self.description)


class _Parser:
    def __init__(self, text: str, file: str | None):
        self.text = text
        self.file = file
        self.toks = tokenize(text, file)
        self.i = 0

    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def error(self, message: str, tok: Token | None = None) -> CepSyntaxError:
        t = tok or self.tok
        return CepSyntaxError(SourceError(message, self.text, t.offset, t.width, self.file))

    def found(self) -> str:
        return "the end of the statement" if self.tok.kind == "EOF" else repr(self.tok.value)

    def keyword(self, *words: str) -> bool:
        if self.tok.kind == "IDENT" and self.tok.upper in words:
            self.i += 1
            return True
        return False

    def expect(self, word: str, what: str) -> None:
        if not self.keyword(word):
            raise self.error(f"expected {word} ({what}), found {self.found()}")

    def ident(self, what: str) -> Token:
        t = self.tok
        if t.kind == "QIDENT" or (t.kind == "IDENT" and t.upper not in _KEYWORDS):
            self.i += 1
            return t
        raise self.error(f"expected {what}, found {self.found()}")

    def op(self, value: str) -> bool:
        if self.tok.kind == "OP" and self.tok.value == value:
            self.i += 1
            return True
        return False


_KEYWORDS = {"SELECT", "FROM", "AS", "JOIN", "LEFT", "INNER", "OUTER", "ON", "AND", "WHERE", "FOR", "RIGHT", "FULL",
             "CROSS", "GROUP", "ORDER"}


@dataclass(frozen=True)
class _Item:
    """One SELECT item as written: ``q.col [AS out]``, ``col``, ``q.*`` or ``*``."""

    qualifier: Token | None
    column: Token | None  # None: a star
    alias: Token | None
    at: Token


@dataclass(frozen=True)
class _Parsed:
    items: tuple[_Item, ...]
    left: Token
    left_alias: Token | None
    right: Token
    right_alias: Token | None
    kind: str
    on: tuple[tuple[Token | None, Token, Token | None, Token], ...]  # (qualifier, column) = (qualifier, column)
    on_at: Token


def _parse(text: str, file: str | None) -> _Parsed:
    p = _Parser(text, file)
    p.expect("SELECT", "a view is SELECT <columns> FROM <table> [LEFT] JOIN <table> ON ...")
    items: list[_Item] = []
    while True:
        at = p.tok
        if p.op("*"):
            items.append(_Item(None, None, None, at))
        else:
            first = p.ident("a column (q.col), q.* or *")
            qualifier: Token | None = None
            column: Token | None = first
            if p.op("."):
                qualifier = first
                column = None if p.op("*") else p.ident(f"a column of {first.value!r} after '.'")
            alias = None
            if column is not None and p.keyword("AS"):
                alias = p.ident("the view column's name after AS")
            items.append(_Item(qualifier, column, alias, at))
        if not p.op(","):
            break
    p.expect("FROM", "FROM <table> after the columns")
    left = p.ident("the left table's name after FROM")
    left_alias = _alias(p)
    kind = "INNER"
    join_at = p.tok
    if p.keyword("LEFT"):
        p.keyword("OUTER")
        kind = "LEFT"
    elif p.keyword("RIGHT", "FULL", "CROSS"):
        raise p.error(f"{join_at.value.upper()} JOIN: a view is an inner JOIN or a LEFT JOIN (the left table's key "
                      "is the view's key)", join_at)
    else:
        p.keyword("INNER")
    p.expect("JOIN", "[LEFT] JOIN <table> after the left table")
    right = p.ident("the right table's name after JOIN")
    if p.tok.kind == "IDENT" and p.tok.upper == "FOR":
        raise p.error("FOR SYSTEM_TIME AS OF: a view joins both tables at every time (its changelog has a row "
                      "whenever either side changes the join); write the join without it", p.tok)
    right_alias = _alias(p)
    on_at = p.tok
    p.expect("ON", "ON <left>.<column> = <right>.<key column>")
    on: list[tuple[Token | None, Token, Token | None, Token]] = []
    while True:
        q1, c1 = _qualified(p)
        if not p.op("="):
            raise p.error(f"expected '=' in ON (a view's ON equates columns, joined by AND), found {p.found()}")
        q2, c2 = _qualified(p)
        on.append((q1, c1, q2, c2))
        if not p.keyword("AND"):
            break
    p.op(";")
    if p.tok.kind != "EOF":
        raise p.error(f"unexpected {p.found()} after the join: a view is SELECT ... FROM ... [LEFT] JOIN ... ON ... "
                      "(no WHERE, GROUP BY or further joins)")
    return _Parsed(tuple(items), left, left_alias, right, right_alias, kind, tuple(on), on_at)


def _alias(p: _Parser) -> Token | None:
    if p.keyword("AS"):
        return p.ident("an alias after AS")
    if p.tok.kind == "QIDENT" or (p.tok.kind == "IDENT" and p.tok.upper not in _KEYWORDS):
        return p.ident("an alias")
    return None


def _qualified(p: _Parser) -> tuple[Token | None, Token]:
    first = p.ident("a column (q.col) in ON")
    if p.op("."):
        return first, p.ident(f"a column of {first.value!r} after '.'")
    return None, first


def _width(a: Token, b: Token) -> int:
    return max(b.offset + b.width - a.offset, 1)


def parse_view_sql(name: str, text: str, tables: dict[str, TableSpec], file: str | None = None,
                   description: str = "") -> ViewSpec:
    """A view's SQL checked against the declared ``tables`` (views declared before it included).

    Every problem is a :class:`SourceError` with a caret into ``text``; all found are raised at once.

    Example:
        >>> t = {"companies": TableSpec("companies", "c_changes", ("symbol",), ("name", "sector_id"), time_field="ts"),
        ...      "sectors": TableSpec("sectors", "s_changes", ("id",), ("sector_name",), time_field="ts")}
        >>> v = parse_view_sql("cs", "SELECT c.name, s.sector_name AS sector FROM companies AS c "
        ...                    "LEFT JOIN sectors AS s ON c.sector_id = s.id", t)
        >>> v.kind, v.key, v.on, v.select
        ('LEFT', ('symbol',), ('sector_id',), (('left', 'name', 'name'), ('right', 'sector_name', 'sector')))
    """
    parsed = _parse(text, file)
    errors: list[SourceError] = []

    def err(message: str, a: Token, b: Token | None = None) -> None:
        errors.append(SourceError(message, text, a.offset, _width(a, b or a), file))

    known = ", ".join(sorted(tables)) or "none"
    specs: dict[str, TableSpec] = {}
    for side, tok in (("left", parsed.left), ("right", parsed.right)):
        spec = tables.get(tok.value)
        if spec is None:
            err(f"unknown table {tok.value!r} (declared tables and views: {known}); a view joins tables declared "
                "under 'tables:' or views declared before it", tok)
        else:
            specs[side] = spec
    if len(specs) < 2:
        raise CepSyntaxError(errors)
    left, right = specs["left"], specs["right"]
    names = {"left": {parsed.left.value} | ({parsed.left_alias.value} if parsed.left_alias else set()),
             "right": {parsed.right.value} | ({parsed.right_alias.value} if parsed.right_alias else set())}
    both = names["left"] & names["right"]
    if both:
        err(f"{sorted(both)[0]!r} names both tables; give them aliases (FROM {parsed.left.value} AS a JOIN "
            f"{parsed.right.value} AS b)", parsed.right_alias or parsed.right)
        raise CepSyntaxError(errors)  # every column would be ambiguous: nothing else can be checked
    sides = {"left": left, "right": right}

    def side_of(q: Token) -> str | None:
        for s in ("left", "right"):
            if q.value in names[s] and q.value not in both:
                return s
        return None

    # ON: one left column equal to each primary-key column of the right table
    on: dict[str, str] = {}
    for q1, c1, q2, c2 in parsed.on:
        s1 = side_of(q1) if q1 is not None else None
        s2 = side_of(q2) if q2 is not None else None
        if (s1, s2) == ("right", "left"):
            q1, c1, q2, c2, s1, s2 = q2, c2, q1, c1, s2, s1
        if (s1, s2) != ("left", "right") or q1 is None or q2 is None:
            err(f"ON {_text(q1, c1)} = {_text(q2, c2)}: each equality names a column of the left table "
                f"({' or '.join(sorted(names['left']))}) and one of the right table "
                f"({' or '.join(sorted(names['right']))}), each qualified by its name or alias", q1 or c1, c2)
            continue
        if c2.value not in right.primary_key:
            err(f"ON ... = {q2.value}.{c2.value}: {c2.value!r} is not in table {right.name!r}'s primary key "
                f"({', '.join(right.primary_key)}); a view looks the right row up by its primary key "
                "(foreign key = primary key)", q2, c2)
            continue
        if c1.value not in left.primary_key and c1.value not in left.columns:
            err(f"{q1.value}.{c1.value}: table {left.name!r} has no column {c1.value!r}; its key and columns: "
                f"{', '.join(left.primary_key + left.columns)}", q1, c1)
            continue
        if c2.value in on:
            err(f"ON names {q2.value}.{c2.value} twice", q2, c2)
            continue
        on[c2.value] = c1.value
    missing = [k for k in right.primary_key if k not in on]
    if missing and not errors:
        err(f"ON must equate a left column with every primary-key column of table {right.name!r}; missing: "
            f"{', '.join(missing)}", parsed.on_at)
    # SELECT: columns of either side under their own name or an alias; the left key is the view's key
    select: list[tuple[str, str, str]] = []
    at: dict[str, Token] = {}

    def add(side: str, col: str, out: str, tok: Token, end: Token) -> None:
        spec = sides[side]
        if side == "left" and col in spec.primary_key:
            if out != col:
                err(f"{col!r} is the view's key (table {left.name!r}'s primary key): it keeps its name; select "
                    "the other columns", tok, end)
            return  # the key is in every row already
        if side == "right" and col in spec.primary_key:
            err(f"{col!r} is table {right.name!r}'s primary key, equal to the left table's "
                f"{on.get(col, '?')!r} (ON); select that column instead", tok, end)
            return
        if out in left.primary_key:
            err(f"view column {out!r} has the name of the view's key column; give it another name (AS)", tok, end)
            return
        if out in at:
            err(f"view column {out!r} is selected twice; give one another name (AS)", tok, end)
            return
        at[out] = tok
        select.append((side, col, out))

    for item in parsed.items:
        end = item.alias or item.column or item.at
        if item.column is None:  # a star: every column of one side, or of both
            chosen = [side_of(item.qualifier)] if item.qualifier is not None else ["left", "right"]
            if chosen == [None]:
                assert item.qualifier is not None
                err(f"{item.qualifier.value}.*: {item.qualifier.value!r} is neither table's name or alias", item.at,
                    end)
                continue
            for s in chosen:
                assert s is not None
                for c in sides[s].columns:
                    add(s, c, c, item.at, end)
            continue
        col = item.column.value
        out = item.alias.value if item.alias else col
        if item.qualifier is not None:
            s = side_of(item.qualifier)
            if s is None:
                err(f"{item.qualifier.value}.{col}: {item.qualifier.value!r} is neither table's name or alias "
                    f"({', '.join(sorted(names['left'] | names['right']))})", item.at, end)
                continue
        else:
            holders = [s for s in ("left", "right") if col in sides[s].columns or col in sides[s].primary_key]
            if len(holders) != 1:
                err(f"column {col!r} is in {'both tables' if holders else 'neither table'}; qualify it "
                    f"({parsed.left.value}.{col} or {parsed.right.value}.{col})", item.at, end)
                continue
            s = holders[0]
        spec = sides[s]
        if col not in spec.columns and col not in spec.primary_key:
            err(f"{_text(item.qualifier, item.column)}: table {spec.name!r} has no column {col!r}; its key and "
                f"columns: {', '.join(spec.primary_key + spec.columns)}", item.qualifier or item.column, item.column)
            continue
        add(s, col, out, item.at, end)
    if errors:
        raise CepSyntaxError(errors)
    return ViewSpec(name, left.name, right.name, parsed.kind, left.primary_key,
                    tuple(on[k] for k in right.primary_key), tuple(select), text, description)


def _text(q: Token | None, c: Token) -> str:
    return f"{q.value}.{c.value}" if q is not None else c.value


def parse_views(node: Any, text: str, file: str | None, tables: dict[str, TableSpec],
                construct: Callable[[Any], Any], node_error: Callable[..., Any],
                sql_errors: Callable[[Any, CepSyntaxError], list]) -> tuple[dict[str, ViewSpec], list]:
    """The views of a ``views:`` node, checked against ``tables``, and the errors found (at their place).

    ``sql_errors(node, exc)`` places the errors found inside a view's ``sql`` scalar in the file.
    """
    import yaml

    errors: list = []
    views: dict[str, ViewSpec] = {}
    if not isinstance(node, yaml.SequenceNode):
        return {}, [node_error("'views:' must be a list of views, each a mapping with name and sql", text, node, file)]
    for item in node.value:
        if not isinstance(item, yaml.MappingNode):
            errors.append(node_error("each view must be a mapping with name and sql", text, item, file))
            continue
        fields = {k.value: (k, v) for k, v in item.value}
        for key, (knode, _) in fields.items():
            if key not in VIEW_KEYS:
                errors.append(node_error(f"unknown key {key!r} for a view; known keys: {', '.join(VIEW_KEYS)}",
                                         text, knode, file))
        try:
            py = construct(item) or {}
        except yaml.YAMLError as e:
            errors.append(node_error(f"view: {getattr(e, 'problem', None) or e}", text, item, file))
            continue
        name = py.get("name")
        where = fields["name"][1] if "name" in fields else item
        if not isinstance(name, str) or not _NAME.match(name):
            errors.append(node_error(f"a view needs a 'name' that is an SQL identifier (letters, digits, _), found "
                                     f"{name!r}", text, where, file))
            continue
        if name in views or name in tables:
            errors.append(node_error(f"view name {name!r} is already a {'view' if name in views else 'table'}'s "
                                     "name; rules join tables and views by name", text, where, file))
            continue
        sql = py.get("sql")
        if not isinstance(sql, str) or not sql.strip():
            errors.append(node_error(f"view {name!r} needs 'sql:', SELECT ... FROM <table> [LEFT] JOIN <table> ON ...",
                                     text, fields["sql"][1] if "sql" in fields else item, file))
            continue
        known = {**tables, **{n: v.table_spec() for n, v in views.items()}}
        try:
            views[name] = parse_view_sql(name, sql, known, file, str(py.get("description", "")))
        except CepSyntaxError as e:
            errors.extend(sql_errors(fields["sql"][1], e))
    return views, errors
