"""Windowed analytics rules: parse, check and compile ``SELECT ... GROUP BY <window> HAVING`` into a spec.

An analytics rule is one SQL statement in the style of Flink SQL's group windows::

    SELECT user, COUNT(*) AS logins, APPROX_COUNT_DISTINCT(ip) AS ips, window_end
    FROM logins
    WHERE outcome = 'ok'
    GROUP BY user, HOP(ts, INTERVAL '1' MINUTE, INTERVAL '10' MINUTE)
    HAVING APPROX_COUNT_DISTINCT(ip) > 5

The pipeline is the one of the pattern compiler: tokens (``patterns.sql_lexer``) -> a parser that
reuses the MATCH_RECOGNIZE expression grammar (:class:`Statement`) -> a checker that collects every
error with its position -> :func:`compile_analytics`, whose output :class:`AnalyticsSpec` is plain,
frozen data: the window, the distinct aggregates to maintain (each in one slot), and the SELECT and
HAVING expressions rewritten to read slots (:class:`AggRef`, :class:`PrevRef`). The runtime is
``cep.analytics.WindowOperator``; docs/analytics.md describes the language and its semantics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from patterns import ast as A
from patterns.errors import CepSyntaxError, RuleError, SourceError
from patterns.match_recognize import (
    _RESERVED,
    NAVIGATION,
    SCALAR_FUNCTIONS,
    _Parser,
)

__all__ = [
    "KEYS",
    "WINDOW_KINDS",
    "AGGREGATE_FUNCTIONS",
    "WINDOW_COLUMNS",
    "SketchConfig",
    "Window",
    "Aggregate",
    "AggCall",
    "PrevWindow",
    "AggRef",
    "PrevRef",
    "OutputColumn",
    "Statement",
    "AnalyticsSpec",
    "parse_analytics",
    "compile_analytics",
    "parse",
    "rebuild_expr",
    "walk_expr",
]

KEYS = {
    "sql": "the SELECT ... FROM stream [WHERE ...] GROUP BY [keys,] <window> [HAVING ...] statement",
    "sketches": "sketch sizes: hll_precision, topk_capacity, cms_width, cms_depth, bloom_capacity, bloom_error_rate",
}

WINDOW_KINDS = {
    "TUMBLE": "TUMBLE(time, size): fixed, non-overlapping windows",
    "HOP": "HOP(time, slide, size): windows of `size` starting every `slide`",
    "SESSION": "SESSION(time, gap): per key, events closer than `gap` share a window",
    "SLIDE": "SLIDE(time, size): at every event, the key's events of the preceding `size`",
}

AGGREGATE_FUNCTIONS = {
    "COUNT": "COUNT(*) rows, COUNT(x) non-null values, COUNT(DISTINCT x) exact distinct values",
    "SUM": "SUM(x) of numbers",
    "AVG": "AVG(x) of numbers",
    "MIN": "MIN(x) of numbers or strings",
    "MAX": "MAX(x) of numbers or strings",
    "APPROX_COUNT_DISTINCT": "APPROX_COUNT_DISTINCT(x): distinct values, HyperLogLog",
    "HLL_SKETCH": "HLL_SKETCH(x): the window's HyperLogLog of x as Apache DataSketches bytes (Spark's hll_* functions read them)",
    "APPROX_TOP_K": "APPROX_TOP_K(x, k): the k most frequent values as [value, count] pairs, heavy hitters",
    "APPROX_COUNT": "APPROX_COUNT(x, v): how many rows have x = v, Count-Min",
    "FIRST_SEEN": "FIRST_SEEN(x): distinct values never seen before for the key, Bloom filter",
}

WINDOW_COLUMNS = ("window_start", "window_end")

_ROW_AGGREGATES = {"COUNT", "SUM", "AVG", "MIN", "MAX"}
_WHOLE_ITEM = {"APPROX_TOP_K", "HLL_SKETCH"}  # not values: only a SELECT item of their own
_CLAUSE_WORDS = {"FROM", "WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "WINDOW"}
MAX_TOP_K = 10_000


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class SketchConfig:
    """Sizes of the sketches behind the approximate aggregates (the rule's ``sketches:`` key)."""

    hll_precision: int = 12
    """HyperLogLog precision p (4..21): 2**p registers, relative error about 1.04/sqrt(2**p)."""
    topk_capacity: int = 64
    """counters of each APPROX_TOP_K sketch (at least 4 * k are used)."""
    cms_width: int = 2048
    """Count-Min counters per row (over-count at most e / width of the window's rows)."""
    cms_depth: int = 5
    """Count-Min rows (the over-count bound fails with probability exp(-depth))."""
    bloom_capacity: int = 100_000
    """initial capacity of the FIRST_SEEN Bloom filter (it grows as needed)."""
    bloom_error_rate: float = 0.001
    """false-positive rate of the FIRST_SEEN Bloom filter (a new value taken for a seen one)."""

    _LIMITS = {
        "hll_precision": (4, 21),
        "topk_capacity": (1, 1 << 24),
        "cms_width": (1, 1 << 24),
        "cms_depth": (1, 64),
        "bloom_capacity": (1, 1 << 32),
    }

    @classmethod
    def describe(cls) -> dict[str, str]:
        """Field name -> one-line description (for messages and docs)."""
        return {
            "hll_precision": "HyperLogLog precision p, 4..21 (default 12)",
            "topk_capacity": "counters per APPROX_TOP_K sketch, at least 4 * k are used (default 64)",
            "cms_width": "Count-Min counters per row (default 2048)",
            "cms_depth": "Count-Min rows (default 5)",
            "bloom_capacity": "initial capacity of the FIRST_SEEN Bloom filter (default 100000)",
            "bloom_error_rate": "false-positive rate of the FIRST_SEEN Bloom filter, 0..1 (default 0.001)",
        }

    @classmethod
    def from_mapping(cls, data: Any, rule: str) -> tuple[SketchConfig, list[str]]:
        """A config from the YAML mapping; returns it with the messages of every bad entry."""
        if data is None:
            return cls(), []
        if not isinstance(data, dict):
            return cls(), [f"rule {rule!r}: 'sketches' must be a mapping such as {{hll_precision: 14}}, found {data!r}"]
        errors: list[str] = []
        values: dict[str, Any] = {}
        known = {f.name for f in fields(cls)}
        for key, value in data.items():
            if key not in known:
                errors.append(
                    f"rule {rule!r}: unknown sketch setting {key!r}; known settings: {', '.join(sorted(known))}"
                )
                continue
            if key == "bloom_error_rate":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                    errors.append(f"rule {rule!r}: sketches.bloom_error_rate must be a number between 0 and 1, found {value!r}")
                    continue
                values[key] = float(value)
                continue
            lo, hi = cls._LIMITS[key]
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                errors.append(f"rule {rule!r}: sketches.{key} must be an integer from {lo} to {hi}, found {value!r}")
                continue
            values[key] = value
        return cls(**values), errors


# ---------------------------------------------------------------- syntax


@dataclass(frozen=True)
class AggCall(A.Expr):
    """An aggregate call as written: ``COUNT(*)``, ``COUNT(DISTINCT x)``, ``APPROX_TOP_K(x, 5)``...

    ``func`` is canonical: COUNT, COUNT_DISTINCT, SUM, AVG, MIN, MAX, APPROX_COUNT_DISTINCT,
    HLL_SKETCH, APPROX_TOP_K, APPROX_COUNT, FIRST_SEEN. ``arg`` is None for COUNT(*); ``extra`` holds k of
    APPROX_TOP_K (an int) or the value expression of APPROX_COUNT.
    """

    func: str
    arg: A.Expr | None
    extra: Any = None


@dataclass(frozen=True)
class PrevWindow(A.Expr):
    """``PREV_WINDOW(<aggregate>)``: the aggregate over the key's previous window."""

    agg: A.Expr


@dataclass(frozen=True)
class AggRef(A.Expr):
    """Compiled reference to aggregate slot ``slot`` of the current window."""

    slot: int


@dataclass(frozen=True)
class PrevRef(A.Expr):
    """Compiled reference to aggregate slot ``slot`` over the key's previous window."""

    slot: int


@dataclass(frozen=True)
class WindowCall(A.Node):
    """A window function in GROUP BY, its intervals in milliseconds."""

    kind: str
    time_column: str
    intervals: tuple[int, ...]


@dataclass(frozen=True)
class SelectItem(A.Node):
    expr: A.Expr
    name: str | None


@dataclass(frozen=True)
class Statement(A.Node):
    """A parsed, unchecked analytics statement."""

    select: tuple[SelectItem, ...]
    source: str
    where: A.Expr | None
    group_by: tuple[A.Node, ...]  # Column or WindowCall
    having: A.Expr | None
    text: str = field(default="", compare=False, repr=False)
    join: A.TemporalJoin | None = None  # FROM s [LEFT] JOIN t FOR SYSTEM_TIME AS OF s.ts ON ...


# ---------------------------------------------------------------- compiled form


@dataclass(frozen=True)
class Window:
    """The window of a rule. ``size_ms``: window length (the gap of a SESSION window)."""

    kind: str
    time_column: str
    size_ms: int
    slide_ms: int = 0

    @property
    def pane_ms(self) -> int:
        """Width of the tumbling panes hopping windows are merged from (gcd of size and slide)."""
        if self.kind == "HOP":
            return math.gcd(self.size_ms, self.slide_ms)
        return self.size_ms

    @property
    def step_ms(self) -> int:
        """Distance between consecutive window starts (TUMBLE: size; HOP: slide)."""
        return self.slide_ms if self.kind == "HOP" else self.size_ms


@dataclass(frozen=True)
class Aggregate:
    """One aggregate the runtime maintains (deduplicated across SELECT and HAVING)."""

    func: str
    arg: A.Expr | None
    extra: Any = None
    text: str = ""


@dataclass(frozen=True)
class OutputColumn:
    """One output field: its name and its expression over slots, keys and window bounds."""

    name: str
    expr: A.Expr


@dataclass(frozen=True)
class AnalyticsSpec:
    """A checked, compiled analytics rule: immutable, shared by every key.

    Example:
        >>> spec = compile_analytics('''SELECT user, COUNT(*) AS n FROM logins
        ...     GROUP BY user, TUMBLE(ts, INTERVAL '1' MINUTE) HAVING COUNT(*) > 3''')
        >>> spec.stream, spec.keys, spec.window
        ('logins', ('user',), Window(kind='TUMBLE', time_column='ts', size_ms=60000, slide_ms=0))
        >>> [a.text for a in spec.aggregates], [c.name for c in spec.select]
        (['COUNT(*)'], ['user', 'n'])
    """

    stream: str
    keys: tuple[str, ...]
    window: Window
    where: A.Expr | None
    aggregates: tuple[Aggregate, ...]
    prev: tuple[int, ...]
    select: tuple[OutputColumn, ...]
    having: A.Expr | None
    sketches: SketchConfig = SketchConfig()
    columns: tuple[str, ...] = ()
    text: str = field(default="", compare=False, repr=False)
    join: A.TemporalJoin | None = None  # a temporal join with a table, bound (patterns.tables.bind_analytics_join)

    @property
    def time_column(self) -> str:
        """The event-time field (the window function's first argument)."""
        return self.window.time_column


# ---------------------------------------------------------------- parser


class _AnalyticsParser(_Parser):
    """The MATCH_RECOGNIZE expression parser with the analytics statement and its functions."""

    def statement(self) -> Statement:  # type: ignore[override]
        start = self.tok.offset
        self.expect_kw("SELECT", "at the start of the statement")
        if self.at_op("*"):
            raise self.error(
                "SELECT * is not available in an analytics rule: list the GROUP BY keys and "
                "aggregates to output, e.g. SELECT user, COUNT(*) AS n"
            )
        items = [self.select_item()]
        while self.accept_op(","):
            items.append(self.select_item())
        self.expect_kw("FROM", "after the SELECT list")
        source = self.ident("the name of the input stream after FROM").value
        join = None
        if self.at_kw("AS", "JOIN", "LEFT", "INNER") or (
                self.tok.kind == "IDENT" and self.tok.upper not in _RESERVED | _CLAUSE_WORDS
                and self.peek().kind == "IDENT" and self.peek().upper in ("JOIN", "LEFT", "INNER")):
            self._joined = True
            join = self.temporal_join(source)
        elif self._qualified is not None:  # a qualified column in SELECT, and no join to qualify it
            self._no_qualifier(self._qualified)
        self._after_from = True
        if self.at_kw("MATCH_RECOGNIZE"):
            raise self.error(
                "MATCH_RECOGNIZE belongs in a pattern rule: drop 'kind: analytics' (or use GROUP BY "
                "with a window here)"
            )
        where = None
        if self.accept_kw("WHERE"):
            where = self.expr()
        if not self.at_kw("GROUP"):
            raise self.error(
                f"expected GROUP BY [keys,] <window>, found {self.describe(self.tok)}: an analytics "
                "rule aggregates over windows, e.g. GROUP BY user, TUMBLE(ts, INTERVAL '1' MINUTE)"
            )
        self.take()
        self.expect_kw("BY", "after GROUP")
        group = [self.group_item()]
        while self.accept_op(","):
            group.append(self.group_item())
        having = None
        if self.accept_kw("HAVING"):
            having = self.expr()
        self.accept_op(";")
        if self.tok.kind != "EOF":
            if self.at_kw("ORDER", "LIMIT", "WINDOW"):
                raise self.error(f"{self.tok.upper} is not supported in an analytics rule: rows come out as windows close")
            raise self.error(f"unexpected {self.describe(self.tok)} after the end of the statement")
        return Statement(tuple(items), source, where, tuple(group), having, text=self.text, pos=start, end=len(self.text),
                         join=join)

    def expr(self, measure: bool = False) -> A.Expr:
        e = super().expr(measure)
        if e.end <= e.pos:  # remember where the expression ends, for carets and messages
            last = self.toks[self.i - 1]
            e = replace(e, end=last.offset + (last.width + 2 if last.kind == "STRING" else last.width))
        return e

    def select_item(self) -> SelectItem:
        pos = self.tok.offset
        e = self.expr()
        name = None
        if self.accept_kw("AS"):
            name = self.ident("the output name after AS").value
        elif self.tok.kind in ("IDENT", "QIDENT") and (self.tok.kind == "QIDENT" or self.tok.upper not in _CLAUSE_WORDS | {"AND", "OR"}):
            name = self.take().value
        return SelectItem(e, name, pos=pos, end=self.toks[self.i - 1].offset + self.toks[self.i - 1].width)

    def group_item(self) -> A.Node:
        t = self.tok
        if t.kind == "IDENT" and t.upper in WINDOW_KINDS and self.peek().value == "(":
            return self.window_call()
        if t.kind == "IDENT" and t.upper in ("ROLLUP", "CUBE", "GROUPING"):
            raise self.error(f"{t.upper} is not supported: GROUP BY takes key columns and one window")
        e = self.expr()
        if not isinstance(e, A.Column):
            raise CepSyntaxError(
                SourceError(
                    "GROUP BY takes column names and one window function (TUMBLE, HOP, SESSION or "
                    "SLIDE); group by an expression is not supported",
                    self.text, t.offset, t.width, self.file,
                )
            )
        return e

    def window_call(self) -> WindowCall:
        t = self.take()
        kind = t.upper
        self.expect_op("(", f"after {kind}")
        tt = self.tok
        if tt.kind not in ("IDENT", "QIDENT") or self.peek().value not in (",", ")"):
            raise self.error(f"{kind}'s first argument must be the event-time column, found {self.describe(tt)}")
        time_col = self.take().value
        want = {"TUMBLE": ("size",), "HOP": ("slide", "size"), "SESSION": ("gap",), "SLIDE": ("size",)}[kind]
        values: list[int] = []
        for what in want:
            self.expect_op(",", f"then the window's {what} in {WINDOW_KINDS[kind].split(':')[0]}")
            values.append(self.window_interval(kind, what))
        if self.at_op(","):
            raise self.error(f"{WINDOW_KINDS[kind].split(':')[0]} takes {len(want) + 1} arguments; found more")
        self.expect_op(")", f"to close {kind}(...)")
        if kind == "HOP" and values[0] > values[1]:
            raise CepSyntaxError(
                SourceError(
                    f"HOP slide {_fmt_ms(values[0])} is longer than its size {_fmt_ms(values[1])}: events between "
                    "windows would belong to none; use a slide no longer than the size (HOP(time, slide, size))",
                    self.text, t.offset, t.width, self.file,
                )
            )
        return WindowCall(kind, time_col, tuple(values), pos=t.offset, end=self.toks[self.i - 1].offset + 1)

    def window_interval(self, kind: str, what: str) -> int:
        if not self.at_kw("INTERVAL"):
            raise self.error(
                f"expected the {what} of {kind} as an interval such as INTERVAL '10' MINUTE, found {self.describe(self.tok)}"
            )
        return self.interval()

    def interval(self) -> int:
        # the base parser's interval() only says "after WITHIN" in its message
        self.expect_kw("INTERVAL")
        vt = self.tok
        if vt.kind not in ("STRING", "NUMBER"):
            raise self.error(f"expected the interval's amount as a quoted number, found {self.describe(vt)}")
        self.take()
        ut = self.tok
        unit_ms = self.interval_unit()
        try:
            amount = float(vt.value.strip())
        except ValueError:
            raise self.error(f"bad interval amount {vt.value!r}: expected a number such as '10'", vt) from None
        ms = amount * unit_ms
        if not ms >= 1 or ms != ms or ms > 10**15:
            raise self.error(
                f"bad interval {vt.value!r} {ut.value}: it must be positive (at least 1 millisecond) and finite", vt
            )
        if ms != int(ms):
            raise self.error(f"bad interval {vt.value!r} {ut.value}: it must be a whole number of milliseconds", vt)
        return int(ms)

    # A qualified column (s.x, t.x) names the stream or a joined table: SELECT comes before FROM,
    # so a qualified column there is refused only once FROM shows no join.
    _joined = False
    _after_from = False
    _qualified: A.Column | None = None

    def column_ref(self) -> A.Expr:
        e = super().column_ref()
        if isinstance(e, A.Column) and e.var is not None and not self._joined:
            if self._after_from:
                self._no_qualifier(e)
            if self._qualified is None:
                self._qualified = e
        return e

    def _no_qualifier(self, e: A.Column) -> None:
        raise CepSyntaxError(
            SourceError(
                f"qualified column {e.var}.{e.name}: an analytics rule reads one stream; write {e.name} "
                "(or join a table: FROM s JOIN t FOR SYSTEM_TIME AS OF s.ts ON s.k = t.k)",
                self.text, e.pos, max(e.end - e.pos, 1), self.file,
            )
        )

    def call(self) -> A.Expr:
        t = self.tok
        name = t.upper
        pos = t.offset
        if name in WINDOW_KINDS:
            raise self.error(f"{name}(...) is a window: it belongs in GROUP BY (e.g. GROUP BY user, {name}(ts, ...))")
        if name in ("TUMBLE_START", "TUMBLE_END", "HOP_START", "HOP_END", "SESSION_START", "SESSION_END"):
            col = "window_start" if name.endswith("START") else "window_end"
            raise self.error(f"{name}(...) is spelled {col} here: select the column {col}")
        if name in _ROW_AGGREGATES:
            self.take()
            self.expect_op("(")
            if self.at_op("*"):
                if name != "COUNT":
                    raise self.error(f"{name}(*) is not allowed; only COUNT(*)")
                self.take()
                self.expect_op(")", "to close COUNT(*)")
                return AggCall("COUNT", None, pos=pos, end=self.toks[self.i - 1].offset + 1)
            distinct = False
            if self.accept_kw("DISTINCT"):
                if name != "COUNT":
                    raise self.error(f"{name}(DISTINCT ...) is not supported; only COUNT(DISTINCT x)", t)
                distinct = True
            elif self.accept_kw("ALL"):
                pass
            arg = self.expr()
            if self.at_op(","):
                raise self.error(f"{name} takes one argument; found a second one")
            self.expect_op(")", f"to close {name}(...)")
            func = "COUNT_DISTINCT" if distinct else name
            return AggCall(func, arg, pos=pos, end=self.toks[self.i - 1].offset + 1)
        if name in ("APPROX_COUNT_DISTINCT", "HLL_SKETCH", "FIRST_SEEN"):
            self.take()
            self.expect_op("(")
            if self.at_op("*") or self.at_op(")"):
                raise self.error(f"{name} takes one argument: the column whose values are counted")
            self.accept_kw("DISTINCT")
            arg = self.expr()
            if self.at_op(","):
                if name == "HLL_SKETCH":
                    raise self.error(
                        "HLL_SKETCH takes one argument; its lgConfigK (Spark's hll_sketch_agg(x, lgK)) "
                        "is the rule's sketches: {hll_precision: ...} (default 12)"
                    )
                raise self.error(
                    f"{name} takes one argument; set the sketch size in the rule's 'sketches:' "
                    "(hll_precision, bloom_error_rate)"
                )
            self.expect_op(")", f"to close {name}(...)")
            return AggCall(name, arg, pos=pos, end=self.toks[self.i - 1].offset + 1)
        if name == "APPROX_TOP_K":
            self.take()
            self.expect_op("(")
            arg = self.expr()
            self.expect_op(",", "then k, how many values to report: APPROX_TOP_K(x, k)")
            kt = self.tok
            if kt.kind != "NUMBER" or not kt.value.isdigit() or not 1 <= int(kt.value) <= MAX_TOP_K:
                raise self.error(f"APPROX_TOP_K's k must be a whole number from 1 to {MAX_TOP_K}, found {self.describe(kt)}")
            self.take()
            self.expect_op(")", "to close APPROX_TOP_K(...)")
            return AggCall(name, arg, int(kt.value), pos=pos, end=self.toks[self.i - 1].offset + 1)
        if name == "APPROX_COUNT":
            self.take()
            self.expect_op("(")
            arg = self.expr()
            self.expect_op(",", "then the value to count: APPROX_COUNT(x, value)")
            value = self.expr()
            self.expect_op(")", "to close APPROX_COUNT(...)")
            return AggCall(name, arg, value, pos=pos, end=self.toks[self.i - 1].offset + 1)
        if name == "PREV_WINDOW":
            self.take()
            self.expect_op("(")
            inner = self.expr()
            self.expect_op(")", "to close PREV_WINDOW(...)")
            return PrevWindow(inner, pos=pos, end=self.toks[self.i - 1].offset + 1)
        if name in NAVIGATION or name in ("CLASSIFIER", "MATCH_NUMBER"):
            raise self.error(
                f"{name}(...) belongs to MATCH_RECOGNIZE; in an analytics rule use aggregates over the "
                "window, or PREV_WINDOW(aggregate) for the previous window"
            )
        if name in SCALAR_FUNCTIONS:
            return super().call()
        known = ", ".join(sorted(AGGREGATE_FUNCTIONS)) + ", PREV_WINDOW"
        scalars = ", ".join(sorted(SCALAR_FUNCTIONS))
        raise self.error(f"unknown function {t.value!r}; aggregates: {known}; scalar functions: {scalars}", t)


def _fmt_ms(ms: int) -> str:
    for unit, size in (("DAY", 86_400_000), ("HOUR", 3_600_000), ("MINUTE", 60_000), ("SECOND", 1000)):
        if ms % size == 0:
            n = ms // size
            return f"{n} {unit}" + ("S" if n != 1 else "")
    return f"{ms} ms"


def parse_analytics(text: str, file: str | None = None) -> Statement:
    """Parse an analytics statement (no checks beyond the grammar).

    Example:
        >>> st = parse_analytics("SELECT k, COUNT(*) AS n FROM s GROUP BY k, SESSION(ts, INTERVAL '30' MINUTE)")
        >>> st.source, st.group_by[1].kind, st.group_by[1].intervals
        ('s', 'SESSION', (1800000,))
    """
    return _AnalyticsParser(text, file).statement()


# ---------------------------------------------------------------- checker and compiler


def _children(e: A.Expr) -> list[A.Expr]:
    if isinstance(e, AggCall):
        out = [e.arg] if e.arg is not None else []
        if isinstance(e.extra, A.Expr):
            out.append(e.extra)
        return out
    if isinstance(e, PrevWindow):
        return [e.agg]
    if isinstance(e, (A.Unary, A.Not, A.IsNull, A.Like)):
        return [e.operand]
    if isinstance(e, (A.Binary, A.Compare)):
        return [e.left, e.right]
    if isinstance(e, A.Logical):
        return list(e.args)
    if isinstance(e, A.Between):
        return [e.operand, e.low, e.high]
    if isinstance(e, A.InList):
        return [e.operand, *e.items]
    if isinstance(e, A.Case):
        out = [x for w in e.whens for x in w]
        return out + ([e.default] if e.default is not None else [])
    if isinstance(e, A.Func):
        return list(e.args)
    return []


def _walk(e: A.Expr):
    yield e
    for c in _children(e):
        yield from _walk(c)


def _rebuild(e: A.Expr, f) -> A.Expr:
    """Rebuild ``e`` bottom-up, replacing each node ``x`` by ``f(x)`` (None keeps it)."""
    got = f(e)
    if got is not None:
        return got
    kw = {"pos": e.pos, "end": e.end}
    r = lambda x: _rebuild(x, f)  # noqa: E731
    if isinstance(e, A.Unary):
        return A.Unary(e.op, r(e.operand), **kw)
    if isinstance(e, A.Not):
        return A.Not(r(e.operand), **kw)
    if isinstance(e, A.IsNull):
        return A.IsNull(r(e.operand), e.negated, **kw)
    if isinstance(e, A.Like):
        return A.Like(r(e.operand), e.pattern, e.negated, **kw)
    if isinstance(e, A.Binary):
        return A.Binary(e.op, r(e.left), r(e.right), **kw)
    if isinstance(e, A.Compare):
        return A.Compare(e.op, r(e.left), r(e.right), **kw)
    if isinstance(e, A.Logical):
        return A.Logical(e.op, tuple(r(a) for a in e.args), **kw)
    if isinstance(e, A.Between):
        return A.Between(r(e.operand), r(e.low), r(e.high), e.negated, **kw)
    if isinstance(e, A.InList):
        return A.InList(r(e.operand), tuple(r(i) for i in e.items), e.negated, **kw)
    if isinstance(e, A.Case):
        return A.Case(tuple((r(w), r(v)) for w, v in e.whens), r(e.default) if e.default is not None else None, **kw)
    if isinstance(e, A.Func):
        return A.Func(e.name, tuple(r(a) for a in e.args), **kw)
    return e


def walk_expr(e: A.Expr):
    """Yield ``e`` and every expression below it (aggregate calls included), depth first."""
    return _walk(e)


def rebuild_expr(e: A.Expr, f) -> A.Expr:
    """Rebuild ``e`` bottom-up, replacing each node ``x`` by ``f(x)`` when that is not None.

    Example:
        >>> from patterns.match_recognize import parse_expression
        >>> rebuild_expr(parse_expression("a + 1 > b"), lambda x: A.Literal(2) if isinstance(x, A.Column) else None)
        Compare(op='>', left=Binary(op='+', left=Literal(value=2), right=Literal(value=1)), right=Literal(value=2))
    """
    return _rebuild(e, f)


def _is_alias(name: str, aliases: dict[str, A.Expr], keys: set[str]) -> bool:
    """Whether a HAVING column names a SELECT item to expand (not a key, nor a column kept as is)."""
    if name not in aliases or name in keys:
        return False
    e = aliases[name]
    return not (isinstance(e, A.Column) and e.name == name)


def _agg_text(text: str, e: A.Node) -> str:
    if e.end > e.pos:
        return " ".join(text[e.pos : e.end].split())
    return type(e).__name__


class _Checker:
    def __init__(self, st: Statement, file: str | None):
        self.st = st
        self.file = file
        self.errors: list[SourceError] = []
        self.aggs: list[Aggregate] = []
        self.slots: dict[tuple, int] = {}
        self.prev: list[int] = []
        self.columns: dict[str, None] = {}

    def err(self, message: str, node: A.Node, width: int | None = None) -> None:
        w = width if width is not None else max(node.end - node.pos, 1)
        self.errors.append(SourceError(message, self.st.text, node.pos, w, self.file))

    def run(self, sketches: SketchConfig) -> AnalyticsSpec | None:
        st = self.st
        window: WindowCall | None = None
        keys: list[str] = []
        for g in st.group_by:
            if isinstance(g, WindowCall):
                if window is not None:
                    self.err(f"GROUP BY has a second window {g.kind}(...); a rule groups by one window", g, len(g.kind))
                    continue
                window = g
            else:
                assert isinstance(g, A.Column)
                if g.name in keys:
                    self.err(f"GROUP BY lists {g.name!r} twice", g)
                elif g.name in WINDOW_COLUMNS:
                    self.err(f"{g.name} is the window's own column; GROUP BY the window function instead", g)
                else:
                    keys.append(g.name)
        if window is None:
            self.err(
                "GROUP BY needs a window: TUMBLE(time, size), HOP(time, slide, size), SESSION(time, gap) "
                "or SLIDE(time, size)",
                st.group_by[0] if st.group_by else st,
            )
            return None
        kind = window.kind
        if kind == "HOP":
            win = Window(kind, window.time_column, window.intervals[1], window.intervals[0])
        else:
            win = Window(kind, window.time_column, window.intervals[0], 0)
        self.kind = kind
        self.keys = keys
        known_keys = set(keys)

        if st.where is not None:
            for x in _walk(st.where):
                if isinstance(x, (AggCall, PrevWindow)):
                    self.err("aggregates are not allowed in WHERE (it filters events); put the condition in HAVING", x)
                elif isinstance(x, A.Column):
                    if x.name in WINDOW_COLUMNS:
                        self.err(f"{x.name} is not known in WHERE: it filters events before they reach a window", x)
                    else:
                        self.columns[x.name] = None

        outputs: list[OutputColumn] = []
        aliases: dict[str, A.Expr] = {}
        for i, item in enumerate(st.select, 1):
            e = item.expr
            name = item.name
            if name is None:
                if isinstance(e, A.Column):
                    name = e.name
                else:
                    self.err(
                        f"SELECT item {i} ({_agg_text(st.text, item.expr)}) needs a name: add AS <name>",
                        item,
                    )
                    continue
            if name in aliases:
                self.err(f"two SELECT items are named {name!r}; give each a distinct name with AS", item)
                continue
            if name.lower() in ("rule", "correction", "retract"):
                self.err(f"{name!r} is an output field the engine adds to every row; choose another name", item)
                continue
            if isinstance(e, AggCall) and e.func in _WHOLE_ITEM:
                compiled = self.compile_expr(e, known_keys, "SELECT", top_level=True)
            else:
                compiled = self.compile_expr(e, known_keys, "SELECT")
            aliases[name] = e
            if compiled is not None:
                outputs.append(OutputColumn(name, compiled))

        having = None
        if st.having is not None:
            expanded = _rebuild(
                st.having,
                lambda x: aliases[x.name] if isinstance(x, A.Column) and _is_alias(x.name, aliases, known_keys) else None,
            )
            having = self.compile_expr(expanded, known_keys, "HAVING", aliases=aliases)
        if self.errors:
            return None
        for k in keys:
            self.columns.pop(k, None)
        self.columns.pop(win.time_column, None)
        return AnalyticsSpec(
            stream=st.source,
            keys=tuple(keys),
            window=win,
            where=st.where,
            aggregates=tuple(self.aggs),
            prev=tuple(self.prev),
            select=tuple(outputs),
            having=having,
            sketches=sketches,
            columns=tuple(c for c in self.columns if st.join is None or c not in st.join.columns),
            text=st.text,
            join=st.join,
        )

    def slot(self, call: AggCall) -> int:
        key = (call.func, call.arg, call.extra)
        if key not in self.slots:
            self.slots[key] = len(self.aggs)
            self.aggs.append(Aggregate(call.func, call.arg, call.extra, _agg_text(self.st.text, call)))
        return self.slots[key]

    def compile_expr(
        self, e: A.Expr, keys: set[str], clause: str, top_level: bool = False, aliases: dict[str, A.Expr] | None = None
    ) -> A.Expr | None:
        before = len(self.errors)
        slide = self.kind == "SLIDE"

        def check_row_expr(x: A.Expr, what: str) -> None:
            for y in _walk(x):
                if isinstance(y, (AggCall, PrevWindow)):
                    self.err(f"aggregates cannot be nested: {what} holds {_agg_text(self.st.text, y)}", y)
                elif isinstance(y, A.Column):
                    if y.name in WINDOW_COLUMNS:
                        self.err(f"{y.name} is not a field of the events; it cannot be aggregated", y)
                    else:
                        self.columns[y.name] = None

        def visit(x: A.Expr, in_prev: bool) -> None:
            if isinstance(x, AggCall):
                what = _agg_text(self.st.text, x)
                if x.func == "APPROX_TOP_K" and not top_level:
                    self.err(
                        f"{what} returns a list of [value, count] pairs: use it as a SELECT item of its own, "
                        f"not inside an expression or {clause}",
                        x,
                    )
                if x.func == "HLL_SKETCH":
                    if not top_level:
                        self.err(
                            f"{what} returns a sketch (Apache DataSketches HLL bytes), not a number: use it as "
                            f"a SELECT item of its own, not inside {'HAVING' if clause == 'HAVING' else 'an expression'}; for the count, "
                            f"use APPROX_COUNT_DISTINCT({_agg_text(self.st.text, x.arg) if x.arg is not None else 'x'})",
                            x,
                        )
                    elif slide:
                        self.err(
                            "HLL_SKETCH needs TUMBLE, HOP or SESSION windows: a SLIDE window is evaluated exactly "
                            "at every event (its APPROX_COUNT_DISTINCT is exact), so it keeps no sketch to emit",
                            x, len("HLL_SKETCH"),
                        )
                if x.arg is not None:
                    check_row_expr(x.arg, what)
                if x.func == "APPROX_COUNT":
                    for y in _walk(x.extra):
                        if isinstance(y, (AggCall, PrevWindow)):
                            self.err(f"APPROX_COUNT's value cannot be an aggregate: {_agg_text(self.st.text, y)}", y)
                        elif isinstance(y, A.Column) and y.name not in keys:
                            if slide and y.name not in WINDOW_COLUMNS:
                                self.columns[y.name] = None
                            else:
                                self.err(
                                    f"APPROX_COUNT's value must be a constant or a GROUP BY key"
                                    f"{' (or a field of the current event in a SLIDE window)' if not slide else ''}; "
                                    f"{y.name!r} is neither",
                                    y,
                                )
                return
            if isinstance(x, PrevWindow):
                if in_prev or isinstance(x.agg, PrevWindow):
                    self.err("PREV_WINDOW cannot be nested", x.agg if isinstance(x.agg, PrevWindow) else x)
                    return
                if self.kind not in ("TUMBLE", "HOP"):
                    self.err(
                        f"PREV_WINDOW needs TUMBLE or HOP windows (the key's previous window); a {self.kind} "
                        "window has no fixed previous window",
                        x, len("PREV_WINDOW"),
                    )
                    return
                if not isinstance(x.agg, AggCall):
                    self.err(
                        "PREV_WINDOW takes one aggregate, e.g. PREV_WINDOW(APPROX_COUNT_DISTINCT(host)); found "
                        f"{_agg_text(self.st.text, x.agg)}",
                        x.agg,
                    )
                    return
                if x.agg.func == "APPROX_TOP_K":
                    self.err("PREV_WINDOW(APPROX_TOP_K(...)) is not supported: it returns a list", x.agg)
                    return
                if x.agg.func == "HLL_SKETCH":
                    self.err(
                        "PREV_WINDOW(HLL_SKETCH(...)) is not supported: select HLL_SKETCH(x) and union "
                        "consecutive windows' sketches where they are read (Spark's hll_union)",
                        x.agg,
                    )
                    return
                visit(x.agg, True)
                return
            if isinstance(x, A.Column):
                if x.name in keys or x.name in WINDOW_COLUMNS:
                    return
                if slide:
                    self.columns[x.name] = None
                    return
                known = sorted(keys) + list(WINDOW_COLUMNS)
                if clause == "HAVING":
                    names = [*(sorted(aliases or {})), *WINDOW_COLUMNS]
                    self.err(
                        f"unknown column {x.name!r} in HAVING: it is not a GROUP BY key nor a SELECT name; "
                        f"HAVING can use aggregates, keys and the names {', '.join(dict.fromkeys(sorted(keys) + names))}",
                        x,
                    )
                else:
                    self.err(
                        f"column {x.name!r} is neither a GROUP BY key nor inside an aggregate: add it to GROUP BY "
                        f"or aggregate it, e.g. MAX({x.name}) (known outside aggregates: {', '.join(known)})",
                        x,
                    )
                return
            for c in _children(x):
                visit(c, in_prev)

        visit(e, False)
        if len(self.errors) > before:
            return None

        def to_ref(x: A.Expr) -> A.Expr | None:
            if isinstance(x, PrevWindow):
                assert isinstance(x.agg, AggCall)
                s = self.slot(x.agg)
                if s not in self.prev:
                    self.prev.append(s)
                return PrevRef(s, pos=x.pos, end=x.end)
            if isinstance(x, AggCall):
                return AggRef(self.slot(x), pos=x.pos, end=x.end)
            return None

        return _rebuild(e, to_ref)


def compile_analytics(
    text: str, file: str | None = None, sketches: SketchConfig | None = None, tables: dict[str, Any] | None = None
) -> AnalyticsSpec:
    """Parse, check and compile an analytics statement; raise a RuleError listing every problem.

    Example:
        >>> spec = compile_analytics('''SELECT url, APPROX_COUNT_DISTINCT(host) AS visitors,
        ...     PREV_WINDOW(APPROX_COUNT_DISTINCT(host)) AS before FROM hits
        ...     GROUP BY url, TUMBLE(time, INTERVAL '1' HOUR)
        ...     HAVING visitors >= 10 * before AND before > 0''')
        >>> spec.prev, spec.having
        ((0,), Logical(op='AND', args=(Compare(op='>=', left=AggRef(slot=0), right=Binary(op='*', left=Literal(value=10), right=PrevRef(slot=0))), Compare(op='>', left=PrevRef(slot=0), right=Literal(value=0)))))
    """
    from patterns.tables import bind_analytics_join

    st = bind_analytics_join(parse_analytics(text.rstrip(), file), tables or {}, file)  # an error at the end points at the last line
    c = _Checker(st, file)
    spec = c.run(sketches or SketchConfig())
    if spec is None:
        raise RuleError(c.errors)
    return spec


def parse(src: Any) -> tuple[tuple[None, AnalyticsSpec, dict] | None, list[SourceError]]:
    """The rule-file hook (``patterns.rules``): one YAML rule of kind ``analytics`` into its spec."""
    name = src.name
    errors: list[SourceError] = []
    got = src.scalar("sql")
    if got is None:
        return None, [src.error(f"rule {name!r} has no 'sql' statement (SELECT ... GROUP BY <window>)", "sql" if "sql" in src.fields else None)]
    sketches, msgs = SketchConfig.from_mapping(src.data.get("sketches"), name)
    errors.extend(src.error(m, "sketches") for m in msgs)
    sql = got[0]
    try:
        spec = compile_analytics(sql, src.file, sketches, src.tables)
    except CepSyntaxError as e:
        return None, errors + src.text_errors("sql", e)
    return (None, spec, {}), errors
