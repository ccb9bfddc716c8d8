"""Abstract syntax of MATCH_RECOGNIZE statements: row-pattern regexes and SQL expressions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Node",
    "Expr",
    "Literal",
    "Column",
    "Unary",
    "Binary",
    "Compare",
    "Logical",
    "Not",
    "IsNull",
    "Between",
    "InList",
    "Like",
    "Case",
    "Func",
    "Nav",
    "Agg",
    "Classifier",
    "MatchNumber",
    "Pattern",
    "PVar",
    "PSeq",
    "PAlt",
    "PQuant",
    "PPermute",
    "PExclude",
    "PAnchor",
    "Measure",
    "Define",
    "Skip",
    "MatchRecognize",
    "TemporalJoin",
    "walk_expr",
    "MAX_NESTING",
    "MAX_CHAIN",
    "MAX_EXPRESSION_DEPTH",
    "too_deep",
]


@dataclass(frozen=True)
class Node:
    """Base of every AST node; ``pos`` and ``end`` are character offsets into the statement."""

    pos: int = field(default=0, kw_only=True, compare=False, repr=False)
    end: int = field(default=0, kw_only=True, compare=False, repr=False)


# ---------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Expr(Node):
    """Base of SQL expressions."""


@dataclass(frozen=True)
class Literal(Expr):
    value: Any


@dataclass(frozen=True)
class Column(Expr):
    """``name`` or ``var.name``; ``var`` is None for the universal row pattern variable."""

    var: str | None
    name: str


@dataclass(frozen=True)
class Unary(Expr):
    op: str  # '-' or '+'
    operand: Expr


@dataclass(frozen=True)
class Binary(Expr):
    op: str  # + - * / % ||
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Compare(Expr):
    op: str  # = <> < <= > >=
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Logical(Expr):
    op: str  # AND / OR
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Not(Expr):
    operand: Expr


@dataclass(frozen=True)
class IsNull(Expr):
    operand: Expr
    negated: bool = False


@dataclass(frozen=True)
class Between(Expr):
    operand: Expr
    low: Expr
    high: Expr
    negated: bool = False


@dataclass(frozen=True)
class InList(Expr):
    operand: Expr
    items: tuple[Expr, ...]
    negated: bool = False


@dataclass(frozen=True)
class Like(Expr):
    operand: Expr
    pattern: str
    negated: bool = False


@dataclass(frozen=True)
class Case(Expr):
    """Searched CASE; a simple ``CASE x WHEN v`` is rewritten to ``WHEN x = v`` by the parser."""

    whens: tuple[tuple[Expr, Expr], ...]
    default: Expr | None = None


@dataclass(frozen=True)
class Func(Expr):
    """A scalar function (ABS, ROUND, LOWER, COALESCE, ...)."""

    name: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Nav(Expr):
    """Navigation: PREV/NEXT (physical) and FIRST/LAST (logical) with an offset."""

    kind: str  # PREV NEXT FIRST LAST
    arg: Expr
    offset: int
    semantics: str = "RUNNING"  # RUNNING or FINAL


@dataclass(frozen=True)
class Agg(Expr):
    """An aggregate over the rows mapped to ``var`` (None: every row of the match so far)."""

    func: str  # SUM COUNT AVG MIN MAX
    arg: Expr | None  # None for COUNT(*) / COUNT(A.*)
    var: str | None
    semantics: str = "RUNNING"


@dataclass(frozen=True)
class Classifier(Expr):
    var: str | None = None
    semantics: str = "RUNNING"


@dataclass(frozen=True)
class MatchNumber(Expr):
    pass


def walk_expr(e: Expr):
    """Yield ``e`` and every expression below it, depth first."""
    yield e
    if isinstance(e, (Unary, Not)):
        yield from walk_expr(e.operand)
    elif isinstance(e, (Binary, Compare)):
        yield from walk_expr(e.left)
        yield from walk_expr(e.right)
    elif isinstance(e, Logical):
        for a in e.args:
            yield from walk_expr(a)
    elif isinstance(e, IsNull | Like):
        yield from walk_expr(e.operand)
    elif isinstance(e, Between):
        yield from walk_expr(e.operand)
        yield from walk_expr(e.low)
        yield from walk_expr(e.high)
    elif isinstance(e, InList):
        yield from walk_expr(e.operand)
        for a in e.items:
            yield from walk_expr(a)
    elif isinstance(e, Case):
        for c, v in e.whens:
            yield from walk_expr(c)
            yield from walk_expr(v)
        if e.default is not None:
            yield from walk_expr(e.default)
    elif isinstance(e, Func):
        for a in e.args:
            yield from walk_expr(a)
    elif isinstance(e, Nav):
        yield from walk_expr(e.arg)
    elif isinstance(e, Agg):
        if e.arg is not None:
            yield from walk_expr(e.arg)


# ---------------------------------------------------------------- row patterns


@dataclass(frozen=True)
class Pattern(Node):
    """Base of row-pattern regex nodes."""


@dataclass(frozen=True)
class PVar(Pattern):
    name: str


@dataclass(frozen=True)
class PSeq(Pattern):
    items: tuple[Pattern, ...]


@dataclass(frozen=True)
class PAlt(Pattern):
    options: tuple[Pattern, ...]


@dataclass(frozen=True)
class PQuant(Pattern):
    """``item{low,high}``; ``high`` None is unbounded; ``greedy`` False for a reluctant ``?``."""

    item: Pattern
    low: int
    high: int | None
    greedy: bool = True


@dataclass(frozen=True)
class PPermute(Pattern):
    items: tuple[Pattern, ...]


@dataclass(frozen=True)
class PExclude(Pattern):
    item: Pattern


@dataclass(frozen=True)
class PNot(Pattern):
    """``NOT B`` / ``NOT (B | C)`` in a pattern's top-level sequence: no row of these variables.

    Between two elements it means no such row in between (the rows skipped are part of the match,
    excluded from its output as ``{- -}`` rows are); as the last element, with ``WITHIN``, no such
    row before the deadline (the match ends at the row before it and is emitted at the deadline).
    """

    vars: tuple[str, ...]


@dataclass(frozen=True)
class PAny(Pattern):
    """``ANY B`` / ``ANY (B | C)`` in a pattern's top-level sequence: skip-till-any-match.

    Any rows may come before the variable's row; with ``AFTER MATCH NO SKIP`` every later row of it
    (within ``WITHIN``) starts its own match, as Flink CEP's ``followedByAny``. The rows skipped are
    part of the match as excluded rows, as for ``NOT``.
    """

    vars: tuple[str, ...]


@dataclass(frozen=True)
class PAnchor(Pattern):
    """``^`` (the start of the partition) or ``$`` (its end): zero-width, they take no row."""

    kind: str  # '^' or '$'


# ---------------------------------------------------------------- the clause


@dataclass(frozen=True)
class Measure(Node):
    expr: Expr
    name: str


@dataclass(frozen=True)
class Define(Node):
    var: str
    expr: Expr


@dataclass(frozen=True)
class Skip(Node):
    """AFTER MATCH SKIP: PAST_LAST_ROW, TO_NEXT_ROW, TO_FIRST (var), TO_LAST (var); or NO_SKIP."""

    mode: str = "PAST_LAST_ROW"
    var: str | None = None


@dataclass(frozen=True)
class TemporalJoin(Node):
    """``FROM s [LEFT] JOIN t FOR SYSTEM_TIME AS OF s.ts ON s.a = t.b [AND ...]`` before MATCH_RECOGNIZE.

    ``on`` pairs each event column with the table column it must equal, as written; positions
    (``pos`` of the table's name, ``as_of_pos``, ``on_pos``) are for errors.
    """

    table: str
    kind: str  # INNER or LEFT
    stream_alias: str | None
    table_alias: str | None
    as_of: Column
    on: tuple[tuple[Column, Column], ...]  # (event side, table side)
    as_of_pos: int = field(default=0, compare=False, repr=False)
    on_pos: int = field(default=0, compare=False, repr=False)
    # filled in by patterns.tables.bind_join once the table is known
    event_keys: tuple[str, ...] = ()  # the event columns matched to the primary key, in its order
    columns: tuple[str, ...] = ()  # the table's columns the join adds to each event


@dataclass(frozen=True)
class MatchRecognize(Node):
    """A whole ``SELECT ... FROM stream MATCH_RECOGNIZE (...)`` statement."""

    source: str
    select: tuple[str, ...] | None  # None for SELECT *
    partition_by: tuple[str, ...]
    order_by: str
    measures: tuple[Measure, ...]
    rows_per_match: str  # ONE or ALL
    skip: Skip
    pattern: Pattern
    subsets: tuple[tuple[str, tuple[str, ...]], ...]
    defines: tuple[Define, ...]
    within_ms: int | None = None
    timeout_rows: bool = False  # ONE ROW PER MATCH WITH TIMEOUT ROWS
    with_unmatched: bool = False  # ALL ROWS PER MATCH WITH UNMATCHED ROWS
    join: TemporalJoin | None = None  # a temporal join with a table before MATCH_RECOGNIZE
    text: str = field(default="", compare=False, repr=False)
    select_pos: tuple[int, ...] = field(default=(), compare=False, repr=False)


MAX_NESTING = 50
"""How deep an expression or a row pattern may nest: parentheses, NOT, signs, CASE, function
calls, pattern groups and quantifiers each count one level. A chain of operators of one
precedence level (``a + b - c``, ``a * b / c``) is parsed in a loop and counts once here, however
long (see :data:`MAX_CHAIN`), though its tree leans one level per operand. Parsers refuse deeper text with a caret error, so no later
pass (checks, compilers, evaluation) can run out of stack on a crafted rule."""

MAX_CHAIN = 100
"""How many operands one chain of operators of one precedence level may join (``a + b - c``
holds three). The chain builds the usual left-leaning tree (``(a + b) - c``), which the checks,
compilers and evaluators walk recursively, so its length is bounded too."""

MAX_EXPRESSION_DEPTH = MAX_NESTING + MAX_CHAIN
"""How deep the tree of a whole expression may be, each operator of a chain counted: chains in
parentheses stack (``(a + b + c) + d`` is three levels), and this bounds what they stack to."""


def too_deep(node: Any, limit: int = MAX_NESTING) -> Any | None:
    """The first node found more than ``limit`` levels below ``node``, or None (no recursion).

    Example:
        >>> e = Literal(1)
        >>> for _ in range(3):
        ...     e = Unary("-", e)
        >>> too_deep(e, 3) is None, too_deep(e, 2)
        (True, Literal(value=1))
    """
    stack = [(node, 0)]
    while stack:
        n, d = stack.pop()
        if d > limit:
            return n
        for child in _children(n):
            stack.append((child, d + 1))
    return None


def leftmost_pos(node: Any) -> int:
    """The smallest source position in ``node``'s tree (where the text of an expression starts).

    Example:
        >>> leftmost_pos(Unary("-", Literal(1, pos=3), pos=2))
        2
    """
    best = getattr(node, "pos", None)
    stack = [node]
    while stack:
        n = stack.pop()
        p = getattr(n, "pos", None)
        if isinstance(p, int) and (best is None or p < best):
            best = p
        stack.extend(_children(n))
    return best or 0


def _children(n: Any) -> list[Any]:
    out: list[Any] = []
    fields = getattr(n, "__dataclass_fields__", None)
    if fields is None:
        return out
    for name in fields:
        v = getattr(n, name)
        if isinstance(v, Node):
            out.append(v)
        elif isinstance(v, tuple):
            for x in v:
                if isinstance(x, Node):
                    out.append(x)
                elif isinstance(x, tuple):  # CASE's (when, then) pairs
                    out.extend(y for y in x if isinstance(y, Node))
    return out
