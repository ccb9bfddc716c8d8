"""Lucene classic query syntax: lexer, parser, syntax tree and the analysed query tree.

One concept, the query language, in about 1,140 lines: the lexer, the parser and the compiler
share the syntax tree's node types and the error positions, and read best side by side."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal, Union

from patterns.analysis import AnalysisConfig, Analyzer, is_token_text
from patterns.errors import CepSyntaxError, SourceError
from patterns.glob import Glob

__all__ = [
    # configuration and entry points
    "QueryConfig",
    "parse",
    "analyse",
    "compile_query",
    # syntax tree (what the user wrote)
    "Occur",
    "Clause",
    "BooleanQuery",
    "TermQuery",
    "PhraseQuery",
    "PrefixQuery",
    "WildcardQuery",
    "RangeQuery",
    "MatchAllQuery",
    "ExistsQuery",
    "SyntaxNode",
    # analysed tree (what is matched)
    "TermNode",
    "PhraseNode",
    "PrefixNode",
    "WildcardNode",
    "RangeNode",
    "ExistsNode",
    "MatchAllNode",
    "MatchNoneNode",
    "BoolNode",
    "Node",
    "iter_nodes",
    "parse_date_ms",
    "parse_number",
]

_WS = " \t\n\r\u3000"
# Characters that end a term (unless escaped); ``+ - * ? & |`` may continue one.
_TERM_STOP = frozenset(_WS + '!():^[]"{}~\\/')
# Characters that cannot start a term.
_TERM_NOSTART = frozenset(_TERM_STOP | set("+-"))


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class QueryConfig:
    """How query text is parsed and analysed."""

    default_operator: Literal["OR", "AND"] = "OR"
    """Operator between clauses that have none (Lucene's default is OR)."""
    default_fields: tuple[str, ...] | None = None
    """Fields searched by unqualified terms; None means every string field of the document."""
    allow_leading_wildcard: bool = False
    """Allow ``*foo`` / ``?oo`` (Lucene forbids them by default: they test every term)."""
    auto_phrase: bool = False
    """A bare term that analyses to several tokens (``wi-fi``) becomes a phrase, not OR/AND."""
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    """Text analysis, shared with the documents."""

    def __post_init__(self) -> None:
        op = str(self.default_operator).upper()
        if op not in ("OR", "AND"):
            raise ValueError(f"default_operator must be 'OR' or 'AND', got {self.default_operator!r}")
        object.__setattr__(self, "default_operator", op)
        if self.default_fields is not None:
            object.__setattr__(self, "default_fields", tuple(self.default_fields))


# ---------------------------------------------------------------------------------------------
# Syntax tree


class Occur(enum.Enum):
    """How a clause takes part in a boolean query (Lucene's ``BooleanClause.Occur``)."""

    MUST = "+"
    SHOULD = ""
    MUST_NOT = "-"


def _qf(fld: str | None, body: str) -> str:
    return f"{fld}:{body}" if fld is not None else body


@dataclass(frozen=True)
class TermQuery:
    """A bare term as written (escapes removed); analysed later."""

    field: str | None
    text: str
    offset: int = 0
    width: int = 1
    boost: float = 1.0

    def __str__(self) -> str:
        return _qf(self.field, self.text)


@dataclass(frozen=True)
class PhraseQuery:
    """A quoted phrase, with optional proximity (slop)."""

    field: str | None
    text: str
    slop: int = 0
    offset: int = 0
    width: int = 1
    boost: float = 1.0

    def __str__(self) -> str:
        return _qf(self.field, f'"{self.text}"' + (f"~{self.slop}" if self.slop else ""))


@dataclass(frozen=True)
class PrefixQuery:
    """``prefix*``: terms that start with ``prefix``."""

    field: str | None
    prefix: str
    offset: int = 0
    width: int = 1
    boost: float = 1.0

    def __str__(self) -> str:
        return _qf(self.field, self.prefix + "*")


@dataclass(frozen=True)
class WildcardQuery:
    """``te?m*``; ``pattern`` keeps literal ``* ? \\`` escaped with a backslash."""

    field: str | None
    pattern: str
    offset: int = 0
    width: int = 1
    boost: float = 1.0

    def __str__(self) -> str:
        return _qf(self.field, self.pattern)


@dataclass(frozen=True)
class RangeQuery:
    """``[lower TO upper]`` / ``{lower TO upper}``; None is an open end (``*``)."""

    field: str | None
    lower: str | None
    upper: str | None
    include_lower: bool = True
    include_upper: bool = True
    offset: int = 0
    width: int = 1
    boost: float = 1.0

    def __str__(self) -> str:
        lo = "*" if self.lower is None else self.lower
        hi = "*" if self.upper is None else self.upper
        body = f"{'[' if self.include_lower else '{'}{lo} TO {hi}{']' if self.include_upper else '}'}"
        return _qf(self.field, body)


@dataclass(frozen=True)
class MatchAllQuery:
    """``*:*`` (or a bare ``*``): every document."""

    offset: int = 0
    width: int = 1
    boost: float = 1.0

    def __str__(self) -> str:
        return "*:*"


@dataclass(frozen=True)
class ExistsQuery:
    """``field:*``: documents that have a value in ``field``."""

    field: str | None
    offset: int = 0
    width: int = 1
    boost: float = 1.0

    def __str__(self) -> str:
        return _qf(self.field, "*")


@dataclass(frozen=True)
class Clause:
    """One clause of a boolean query."""

    occur: Occur
    query: SyntaxNode


@dataclass(frozen=True)
class BooleanQuery:
    """A list of clauses, each MUST (``+``), SHOULD or MUST_NOT (``-``), as in Lucene."""

    clauses: tuple[Clause, ...]
    offset: int = 0
    width: int = 1
    boost: float = 1.0

    def __str__(self) -> str:
        parts = []
        for c in self.clauses:
            inner = f"({c.query})" if isinstance(c.query, BooleanQuery) else str(c.query)
            parts.append(c.occur.value + inner)
        return " ".join(parts)


SyntaxNode = Union[
    TermQuery, PhraseQuery, PrefixQuery, WildcardQuery, RangeQuery, MatchAllQuery, ExistsQuery,
    BooleanQuery,
]


# ---------------------------------------------------------------------------------------------
# Analysed tree: plain data, what the matcher and the presearcher work on


@dataclass(frozen=True)
class TermNode:
    """Documents whose ``field`` (None: a default field) holds ``term``."""

    field: str | None
    term: str

    def __str__(self) -> str:
        return _qf(self.field, self.term)


@dataclass(frozen=True)
class PhraseNode:
    """Terms at relative ``positions`` within one field value, allowing ``slop`` moves."""

    field: str | None
    terms: tuple[str, ...]
    positions: tuple[int, ...]
    slop: int = 0

    def __str__(self) -> str:
        return _qf(self.field, f'"{" ".join(self.terms)}"' + (f"~{self.slop}" if self.slop else ""))


@dataclass(frozen=True)
class PrefixNode:
    """A term that starts with ``prefix`` (normalised, made of token characters)."""

    field: str | None
    prefix: str

    def __str__(self) -> str:
        return _qf(self.field, self.prefix + "*")


@dataclass(frozen=True)
class WildcardNode:
    """A term matching ``pattern`` (``*`` any run, ``?`` one character; no literal wildcards)."""

    field: str | None
    pattern: str

    def __str__(self) -> str:
        return _qf(self.field, self.pattern)

    @property
    def matcher(self) -> Glob:
        """The pattern as a linear-time matcher (``fullmatch(term)``; no backtracking).

        Example:
            >>> WildcardNode(None, "te?m*").matcher.fullmatch("teams")
            True
        """
        return _wildcard_matcher(self.pattern)

    regex = matcher  # the name callers used when this was a regular expression

    def literal_prefix(self) -> str:
        """The literal characters before the first wildcard.

        Example:
            >>> WildcardNode(None, "te?m*").literal_prefix()
            'te'
        """
        return re.split(r"[*?]", self.pattern, maxsplit=1)[0]

    def longest_literal(self) -> str:
        """The longest run of literal characters anywhere in the pattern.

        Example:
            >>> WildcardNode(None, "*ab?cdef*").longest_literal()
            'cdef'
        """
        return max(re.split(r"[*?]", self.pattern), key=len)


MAX_GROUP_DEPTH = 50
"""How deep ``( ... )`` groups may nest in one query; deeper text is refused with a caret (no
later pass can run out of stack on a crafted query)."""

_WILDCARD_CACHE: dict[str, Glob] = {}


def _wildcard_matcher(pattern: str) -> Glob:
    rx = _WILDCARD_CACHE.get(pattern)
    if rx is None:
        rx = Glob(pattern)
        if len(_WILDCARD_CACHE) < 100_000:
            _WILDCARD_CACHE[pattern] = rx
    return rx


@dataclass(frozen=True)
class RangeNode:
    """Values between ``lower`` and ``upper`` (None: open); ``kind`` is number, date or term.

    Date bounds are epoch milliseconds (UTC); a date-only bound covers its whole day.
    """

    field: str | None
    kind: Literal["number", "date", "term"]
    lower: float | int | str | None
    upper: float | int | str | None
    include_lower: bool = True
    include_upper: bool = True

    def __str__(self) -> str:
        lo = "*" if self.lower is None else self.lower
        hi = "*" if self.upper is None else self.upper
        body = f"{'[' if self.include_lower else '{'}{lo} TO {hi}{']' if self.include_upper else '}'}"
        return _qf(self.field, body)

    def contains(self, value: float | int | str) -> bool:
        """True when ``value`` (already of this range's kind) lies in the range.

        Example:
            >>> RangeNode("n", "number", 1, 5, True, False).contains(5)
            False
        """
        lo, hi = self.lower, self.upper
        if lo is not None:
            if value < lo or (value == lo and not self.include_lower):  # type: ignore[operator]
                return False
        if hi is not None:
            if value > hi or (value == hi and not self.include_upper):  # type: ignore[operator]
                return False
        return True


@dataclass(frozen=True)
class ExistsNode:
    """Documents with a non-null value in ``field`` (None: in any default field)."""

    field: str | None

    def __str__(self) -> str:
        return _qf(self.field, "*")


@dataclass(frozen=True)
class MatchAllNode:
    """Every document."""

    def __str__(self) -> str:
        return "*:*"


@dataclass(frozen=True)
class MatchNoneNode:
    """No document: a wildcard whose literal part can never be part of a token (``a-b*``)."""

    reason: str = ""

    def __str__(self) -> str:
        return "<none>"


@dataclass(frozen=True)
class BoolNode:
    """All of ``must``, none of ``must_not``, and (only when ``must`` is empty) one of ``should``."""

    must: tuple[Node, ...] = ()
    should: tuple[Node, ...] = ()
    must_not: tuple[Node, ...] = ()

    def __str__(self) -> str:
        def one(prefix: str, n: Node) -> str:
            return prefix + (f"({n})" if isinstance(n, BoolNode) else str(n))

        return " ".join(
            [one("+", n) for n in self.must]
            + [one("", n) for n in self.should]
            + [one("-", n) for n in self.must_not]
        )


Node = Union[
    TermNode, PhraseNode, PrefixNode, WildcardNode, RangeNode, ExistsNode, MatchAllNode,
    MatchNoneNode, BoolNode,
]


def iter_nodes(node: Node, negated: bool = False):  # type: ignore[no-untyped-def]
    """Yield ``(leaf, negated)`` for every leaf of an analysed tree.

    Example:
        >>> [(str(n), neg) for n, neg in iter_nodes(compile_query("a -b"))]
        [('a', False), ('b', True)]
    """
    if isinstance(node, BoolNode):
        for child in node.must + node.should:
            yield from iter_nodes(child, negated)
        for child in node.must_not:
            yield from iter_nodes(child, not negated)
    else:
        yield node, negated


# ---------------------------------------------------------------------------------------------
# Lexer


@dataclass(frozen=True)
class _Tok:
    kind: str  # TERM PREFIX WILDCARD STAR QUOTED RANGE AND OR NOT PLUS MINUS ( ) : ^ ~ EOF
    text: str
    offset: int
    end: int
    value: object = None  # RANGE: (lower, upper, incl_lo, incl_hi); ~: slop text; ^: boost


def _error(message: str, text: str, offset: int, width: int = 1) -> CepSyntaxError:
    return CepSyntaxError(SourceError(message, text, offset, max(width, 1)))


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.n = len(text)

    def tokens(self) -> list[_Tok]:
        out = []
        while True:
            tok = self._next()
            out.append(tok)
            if tok.kind == "EOF":
                return out

    def _skip_ws(self) -> None:
        while self.i < self.n and self.text[self.i] in _WS:
            self.i += 1

    def _next(self) -> _Tok:
        self._skip_ws()
        t, i = self.text, self.i
        if i >= self.n:
            return _Tok("EOF", "", self.n, self.n)
        c = t[i]
        two = t[i : i + 2]
        if two in ("&&", "||"):
            self.i += 2
            return _Tok("AND" if two == "&&" else "OR", two, i, i + 2)
        if c in "!+-():":
            self.i += 1
            kind = {"!": "NOT", "+": "PLUS", "-": "MINUS"}.get(c, c)
            return _Tok(kind, c, i, i + 1)
        if c == "^":
            m = re.compile(r"\d+(?:\.\d+)?").match(t, i + 1)
            if not m:
                raise _error(
                    "expected a number after '^' (a boost, e.g. 'apple^2')", t, i, 1
                )
            self.i = m.end()
            return _Tok("^", t[i : m.end()], i, m.end(), float(m.group()))
        if c == "~":
            m = re.compile(r"\d+(?:\.\d+)?").match(t, i + 1)
            self.i = m.end() if m else i + 1
            return _Tok("~", t[i : self.i], i, self.i, m.group() if m else "")
        if c == '"':
            return self._quoted()
        if c in "[{":
            return self._range()
        if c in "<>":
            return self._comparison()
        if c == "/":
            raise _error(
                "regular-expression queries (/.../) are not supported; "
                "use a wildcard such as 'te?m*' instead",
                t, i, 1,
            )
        if c in "]}":
            raise _error(f"unexpected {c!r}: a range is written '[lower TO upper]'", t, i, 1)
        return self._term()

    def _quoted(self) -> _Tok:
        t, start = self.text, self.i
        i = start + 1
        buf = []
        while i < self.n:
            c = t[i]
            if c == "\\":
                if i + 1 >= self.n:
                    break
                buf.append(t[i + 1])
                i += 2
                continue
            if c == '"':
                self.i = i + 1
                return _Tok("QUOTED", "".join(buf), start, i + 1)
            buf.append(c)
            i += 1
        raise _error("unterminated phrase: this '\"' has no closing '\"'", t, start, 1)

    def _range_bound(self, start: int) -> tuple[str | None, int, int]:
        """Read one range bound; returns (value or None for '*', offset, end)."""
        self._skip_ws()
        t, i = self.text, self.i
        if i >= self.n:
            raise _error("unterminated range: expected '[lower TO upper]' closed by ']' or '}'",
                         t, start, 1)
        if t[i] == '"':
            tok = self._quoted()
            return tok.text, tok.offset, tok.end
        text = self._bare("]}")
        raw = t[i : self.i]
        if not raw:
            return "", i, i
        return (None if raw == "*" else text), i, self.i

    def _bare(self, stops: str) -> str:
        """The unquoted text from here up to whitespace or one of ``stops`` (escapes resolved)."""
        t, j = self.text, self.i
        buf = []
        while j < self.n and t[j] not in _WS and t[j] not in stops:
            if t[j] == "\\" and j + 1 < self.n:
                buf.append(t[j + 1])
                j += 2
                continue
            buf.append(t[j])
            j += 1
        self.i = j
        return "".join(buf)

    def _range(self) -> _Tok:
        t, start = self.text, self.i
        incl_lo = t[start] == "["
        self.i += 1
        lo, lo_at, lo_end = self._range_bound(start)
        self._skip_ws()
        to_at = self.i
        if lo == "" or t[self.i : self.i + 2] != "TO" or (
            self.i + 2 < self.n and t[self.i + 2] not in _WS
        ):
            where = lo_at if lo == "" else to_at
            raise _error(
                "malformed range: write '[lower TO upper]' or '{lower TO upper}' "
                "('TO' in capitals, '*' for an open end)",
                t, where, 1,
            )
        self.i += 2
        hi, hi_at, hi_end = self._range_bound(start)
        self._skip_ws()
        if hi == "":
            raise _error(
                "malformed range: write '[lower TO upper]' or '{lower TO upper}' "
                "('TO' in capitals, '*' for an open end)",
                t, hi_at if hi_at < self.n else start, 1,
            )
        if self.i >= self.n or t[self.i] not in "]}":
            raise _error("unterminated range: expected ']' or '}' to close this range",
                         t, start, 1)
        incl_hi = t[self.i] == "]"
        self.i += 1
        return _Tok("RANGE", t[start : self.i], start, self.i, (lo, hi, incl_lo, incl_hi))

    def _comparison(self) -> _Tok:
        """``>v``, ``>=v``, ``<v``, ``<=v`` (the one-sided ranges of Elasticsearch's query string,
        e.g. ``age:>=10``, ``age:(>=10 AND <20)``): ``{v TO *]``, ``[v TO *]``, ``[* TO v}``,
        ``[* TO v]``. A term that starts with ``<`` or ``>`` literally escapes it (``\\<html``)."""
        t, start = self.text, self.i
        op = ">=" if t.startswith(">=", start) else "<=" if t.startswith("<=", start) else t[start]
        self.i = start + len(op)
        if self.i < self.n and t[self.i] == '"':
            bound = self._quoted().text
        else:
            bound = self._bare("()")
        if not bound:
            raise _error(f"expected a value right after {op!r} (a one-sided range such as 'age:{op}10')",
                         t, start, len(op))
        if op[0] == ">":
            value: tuple[str | None, str | None, bool, bool] = (bound, None, op == ">=", True)
        else:
            value = (None, bound, True, op == "<=")
        return _Tok("RANGE", t[start : self.i], start, self.i, value)

    def _term(self) -> _Tok:
        t, start = self.text, self.i
        i = start
        chars: list[tuple[str, bool]] = []  # (char, escaped)
        while i < self.n:
            c = t[i]
            if c == "\\":
                if i + 1 >= self.n:
                    raise _error(
                        "the query ends with the escape character '\\'; "
                        "escape it as '\\\\' to search for a backslash",
                        t, i, 1,
                    )
                chars.append((t[i + 1], True))
                i += 2
                continue
            if c in _TERM_STOP:
                break
            chars.append((c, False))
            i += 1
        self.i = i
        raw = t[start:i]
        wild = [k for k, (c, esc) in enumerate(chars) if not esc and c in "*?"]
        plain = "".join(c for c, _ in chars)
        if not wild:
            if raw in ("AND", "OR", "NOT"):
                return _Tok(raw, raw, start, i)
            return _Tok("TERM", plain, start, i)
        if raw == "*":
            return _Tok("STAR", "*", start, i)
        if wild == [len(chars) - 1] and chars[-1][0] == "*":
            return _Tok("PREFIX", plain[:-1], start, i)
        pattern = "".join(
            ("\\" + c if c in "*?\\" else c) if esc else c for c, esc in chars
        )
        return _Tok("WILDCARD", pattern, start, i)


# ---------------------------------------------------------------------------------------------
# Parser (the classic QueryParser grammar: clauses joined by optional conjunctions)

_CONJ_NONE, _CONJ_AND, _CONJ_OR = 0, 1, 2
_MOD_NONE, _MOD_REQ, _MOD_NOT = 0, 1, 2
_CLAUSE_START = {"TERM", "PREFIX", "WILDCARD", "STAR", "QUOTED", "RANGE", "("}


def _describe(tok: _Tok) -> str:
    return "the end of the query" if tok.kind == "EOF" else repr(tok.text)


class _Parser:
    def __init__(self, text: str, config: QueryConfig) -> None:
        self.text = text
        self.config = config
        self.toks = _Lexer(text).tokens()
        self.k = 0
        self.depth = 0  # open groups: bounded by MAX_GROUP_DEPTH

    @property
    def tok(self) -> _Tok:
        return self.toks[self.k]

    def peek(self, n: int = 1) -> _Tok:
        return self.toks[min(self.k + n, len(self.toks) - 1)]

    def advance(self) -> _Tok:
        tok = self.toks[self.k]
        if tok.kind != "EOF":
            self.k += 1
        return tok

    def fail(self, message: str, tok: _Tok) -> CepSyntaxError:
        return _error(message, self.text, tok.offset, tok.end - tok.offset)

    # top level
    def parse(self) -> SyntaxNode:
        if self.tok.kind == "EOF":
            raise _error("empty query: write at least one term", self.text, 0, 1)
        node = self.query(None, 0, None)
        if self.tok.kind == ")":
            raise self.fail("unbalanced ')': there is no '(' before it", self.tok)
        if self.tok.kind != "EOF":  # pragma: no cover - query() consumes until ')' or EOF
            raise self.fail(f"unexpected {_describe(self.tok)}", self.tok)
        return node

    def query(self, fld: str | None, start: int, opener: _Tok | None) -> SyntaxNode:
        """Query ::= Modifiers Clause ( Conjunction Modifiers Clause )*"""
        clauses: list[Clause] = []
        first: SyntaxNode | None = None
        conj = _CONJ_NONE
        while True:
            mods = self.modifiers()
            after = self.toks[self.k - 1].text if self.k else None
            q = self.clause(fld, after)
            if not clauses and mods == _MOD_NONE:
                first = q
            self.add_clause(clauses, conj, mods, q)
            kind = self.tok.kind
            if kind in ("EOF", ")"):
                break
            if kind in ("AND", "OR"):
                conj = _CONJ_AND if kind == "AND" else _CONJ_OR
                self.advance()
            else:
                conj = _CONJ_NONE
        if len(clauses) == 1 and first is not None:
            return first
        end = self.tok.end if self.tok.kind == ")" else self.tok.offset
        if opener is not None:
            return BooleanQuery(tuple(clauses), opener.offset, end - opener.offset)
        return BooleanQuery(tuple(clauses), start, max(len(self.text) - start, 1))

    def modifiers(self) -> int:
        kind = self.tok.kind
        if kind in ("PLUS", "MINUS", "NOT"):
            self.advance()
            return _MOD_REQ if kind == "PLUS" else _MOD_NOT
        return _MOD_NONE

    def add_clause(self, clauses: list[Clause], conj: int, mods: int, q: SyntaxNode) -> None:
        """Lucene's ``QueryParserBase.addClause``: how AND/OR/+/-/NOT set each Occur."""
        and_op = self.config.default_operator == "AND"
        if clauses and conj == _CONJ_AND:
            prev = clauses[-1]
            if prev.occur is not Occur.MUST_NOT:
                clauses[-1] = Clause(Occur.MUST, prev.query)
        if clauses and and_op and conj == _CONJ_OR:
            prev = clauses[-1]
            if prev.occur is not Occur.MUST_NOT:
                clauses[-1] = Clause(Occur.SHOULD, prev.query)
        prohibited = mods == _MOD_NOT
        if and_op:
            required = not prohibited and conj != _CONJ_OR
        else:
            required = mods == _MOD_REQ or (conj == _CONJ_AND and not prohibited)
        if prohibited:
            clauses.append(Clause(Occur.MUST_NOT, q))
        elif required:
            clauses.append(Clause(Occur.MUST, q))
        else:
            clauses.append(Clause(Occur.SHOULD, q))

    def clause(self, fld: str | None, after: str | None) -> SyntaxNode:
        tok = self.tok
        if tok.kind in ("TERM", "STAR", "PREFIX", "WILDCARD") and self.peek().kind == ":":
            if tok.kind == "PREFIX" or tok.kind == "WILDCARD":
                raise self.fail(f"a field name cannot contain wildcards: {tok.text!r}", tok)
            self.advance()
            self.advance()
            if tok.kind == "STAR":
                nxt = self.tok
                if nxt.kind != "STAR":
                    raise self.fail(
                        "'*:' is only supported as '*:*' (every document); "
                        "name a field or leave the field out to search the default fields",
                        tok,
                    )
                self.advance()
                node: SyntaxNode = MatchAllQuery(tok.offset, nxt.end - tok.offset)
                return self.suffixes(node, tok)
            fld = tok.text
            after = f"{tok.text}:"
        tok = self.tok
        if tok.kind == "(":
            self.advance()
            if self.tok.kind == ")":
                raise self.fail("empty group '()': put at least one term inside", tok)
            self.depth += 1
            if self.depth > MAX_GROUP_DEPTH:
                raise self.fail(f"groups nested more than {MAX_GROUP_DEPTH} levels deep; simplify the query", tok)
            inner = self.query(fld, tok.offset, tok)
            self.depth -= 1
            if self.tok.kind != ")":
                raise self.fail("missing ')': this '(' is never closed", tok)
            close = self.advance()
            if isinstance(inner, BooleanQuery):
                inner = BooleanQuery(inner.clauses, tok.offset, close.end - tok.offset)
            return self.suffixes(inner, tok, group=True)
        if tok.kind not in _CLAUSE_START:
            what = "a term, phrase, range or '('"
            if tok.kind == "EOF":
                where = f" after {after!r}" if after is not None else ""
                raise self.fail(f"expected {what}{where}, but the query ends here", tok)
            if tok.kind == ")":
                where = f" after {after!r}" if after is not None else ""
                raise self.fail(f"expected {what}{where}, found ')'", tok)
            raise self.fail(f"expected {what}, found {_describe(tok)}", tok)
        self.advance()
        width = tok.end - tok.offset
        if tok.kind == "TERM":
            node = TermQuery(fld, tok.text, tok.offset, width)
        elif tok.kind == "STAR":
            node = MatchAllQuery(tok.offset, width) if fld is None else ExistsQuery(
                fld, tok.offset, width)
        elif tok.kind == "PREFIX":
            self.check_leading(tok)
            node = PrefixQuery(fld, tok.text, tok.offset, width)
        elif tok.kind == "WILDCARD":
            self.check_leading(tok)
            node = WildcardQuery(fld, tok.text, tok.offset, width)
        elif tok.kind == "QUOTED":
            node = PhraseQuery(fld, tok.text, 0, tok.offset, width)
        else:  # RANGE
            bounds: tuple[str | None, str | None, bool, bool] = tok.value  # type: ignore[assignment]
            node = RangeQuery(fld, *bounds, tok.offset, width)
        return self.suffixes(node, tok)

    def check_leading(self, tok: _Tok) -> None:
        if not self.config.allow_leading_wildcard and tok.text[:1] in ("*", "?"):
            raise self.fail(
                f"leading wildcard in {tok.text!r} is not allowed (it has to test every term); "
                "set allow_leading_wildcard=True to allow it",
                tok,
            )

    def suffixes(self, node: SyntaxNode, start: _Tok, group: bool = False) -> SyntaxNode:
        """Optional ``~slop`` (phrases only) and ``^boost`` (accepted, ignored for matching)."""
        seen: set[str] = set()
        while self.tok.kind in ("~", "^") and self.tok.kind not in seen:
            tok = self.advance()
            seen.add(tok.kind)
            if tok.kind == "^":
                node = _with(node, boost=float(tok.value))  # type: ignore[arg-type]
                continue
            if isinstance(node, PhraseQuery):
                slop = str(tok.value)
                if not slop.isdigit():
                    raise self.fail(
                        "a phrase's proximity must be a whole number of positions, "
                        "e.g. '\"apple pie\"~2'",
                        tok,
                    )
                node = _with(node, slop=int(slop))
            elif isinstance(node, (TermQuery, PrefixQuery, WildcardQuery)):
                raise self.fail(
                    f"fuzzy queries ('{node}~') are not supported; for proximity quote the "
                    "words: '\"a b\"~2'",
                    tok,
                )
            else:
                raise self.fail("'~' (proximity) may only follow a phrase: '\"a b\"~2'", tok)
        return node


def _with(node: SyntaxNode, **changes: object) -> SyntaxNode:
    from dataclasses import replace

    return replace(node, **changes)  # type: ignore[type-var, arg-type]


def parse(text: str, config: QueryConfig | None = None) -> SyntaxNode:
    """Parse Lucene query text into its syntax tree (no analysis yet).

    ``str()`` of the tree is Lucene's ``Query.toString()`` form, which shows how the operators
    combined into MUST (``+``), SHOULD and MUST_NOT (``-``) clauses.

    Example:
        >>> str(parse("a AND b OR c"))
        '+a +b c'
        >>> str(parse('title:"big apple"~2 -cheap^3'))
        'title:"big apple"~2 -cheap'
        >>> str(parse("a b", QueryConfig(default_operator="AND")))
        '+a +b'
    """
    config = config or QueryConfig()
    return _Parser(text, config).parse()


# ---------------------------------------------------------------------------------------------
# Analysis pass: syntax tree -> analysed tree, with checks

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ].*)?")


def parse_number(text: str) -> int | float | None:
    """``text`` as an int or a float when it is written as a number, else None.

    Example:
        >>> parse_number("42"), parse_number("-1.5e3"), parse_number("1_000"), parse_number("x")
        (42, -1500.0, None, None)
    """
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        return None
    try:
        return int(text)
    except ValueError:
        return float(text)


def parse_date_ms(text: str) -> tuple[float, bool] | None:
    """ISO-8601 ``text`` as (epoch milliseconds UTC, is date-only), else None.

    Naive times are UTC. Raises ValueError for text shaped like a date that is not one.

    Example:
        >>> parse_date_ms("1970-01-02")
        (86400000.0, True)
        >>> parse_date_ms("1970-01-01T00:00:01+00:00")
        (1000.0, False)
    """
    text = text.strip()
    if not _DATE.fullmatch(text):
        return None
    stamp = datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp() * 1000.0, len(text) == 10


_DAY_MS = 86_400_000.0


class _Analyser:
    def __init__(self, text: str, config: QueryConfig) -> None:
        self.text = text
        self.config = config
        self.analyzer = Analyzer(config.analysis)
        self.errors: list[SourceError] = []

    def err(self, message: str, node: SyntaxNode) -> None:
        self.errors.append(SourceError(message, self.text, node.offset, max(node.width, 1)))

    def run(self, node: SyntaxNode) -> Node | None:
        return self.visit(node, top=True)

    def visit(self, node: SyntaxNode, top: bool = False) -> Node | None:
        if isinstance(node, BooleanQuery):
            return self.boolean(node, top)
        if isinstance(node, TermQuery):
            return self.term(node)
        if isinstance(node, PhraseQuery):
            return self.phrase(node)
        if isinstance(node, PrefixQuery):
            prefix = self.analyzer.normalize(node.prefix)
            if not is_token_text(prefix):
                return MatchNoneNode(f"prefix {prefix!r} can never start a token")
            return PrefixNode(node.field, prefix)
        if isinstance(node, WildcardQuery):
            return self.wildcard(node)
        if isinstance(node, RangeQuery):
            return self.range(node)
        if isinstance(node, ExistsQuery):
            return ExistsNode(node.field)
        return MatchAllNode()

    def term(self, node: TermQuery) -> Node | None:
        terms = self.analyzer.positioned_terms(node.text)
        if not terms:
            return None
        if len(terms) == 1:
            return TermNode(node.field, terms[0][0])
        if self.config.auto_phrase:
            base = terms[0][1]
            return PhraseNode(node.field, tuple(t for t, _ in terms),
                              tuple(p - base for _, p in terms), 0)
        leaves = tuple(TermNode(node.field, t) for t, _ in terms)
        if self.config.default_operator == "AND":
            return BoolNode(must=leaves)
        return BoolNode(should=leaves)

    def phrase(self, node: PhraseQuery) -> Node | None:
        terms = self.analyzer.positioned_terms(node.text)
        if not terms:
            return None
        if len(terms) == 1:
            return TermNode(node.field, terms[0][0])
        base = terms[0][1]
        return PhraseNode(node.field, tuple(t for t, _ in terms),
                          tuple(p - base for _, p in terms), node.slop)

    def wildcard(self, node: WildcardQuery) -> Node:
        # Split into literal text and wildcards; literal text must be token characters.
        out = []
        literal_ok = True
        i, p = 0, node.pattern
        while i < len(p):
            c = p[i]
            if c == "\\":
                lit = self.analyzer.normalize(p[i + 1])
                literal_ok &= is_token_text(lit)
                out.append(lit)
                i += 2
                continue
            if c in "*?":
                if not (c == "*" and out and out[-1] == "*"):
                    out.append(c)
            else:
                lit = self.analyzer.normalize(c)
                literal_ok &= is_token_text(lit)
                out.append(lit)
            i += 1
        pattern = "".join(out)
        if not literal_ok:
            return MatchNoneNode(f"wildcard {node.pattern!r} has characters no token contains")
        if pattern == "*":
            return MatchAllNode() if node.field is None else ExistsNode(node.field)
        if pattern.endswith("*") and "?" not in pattern and pattern.count("*") == 1:
            return PrefixNode(node.field, pattern[:-1])
        return WildcardNode(node.field, pattern)

    def range(self, node: RangeQuery) -> Node:
        lo, hi = node.lower, node.upper
        if lo is None and hi is None:
            return ExistsNode(node.field)
        bounds = [b for b in (lo, hi) if b is not None]
        numbers = [parse_number(b) for b in bounds]
        if all(n is not None for n in numbers):
            nlo = parse_number(lo) if lo is not None else None
            nhi = parse_number(hi) if hi is not None else None
            return RangeNode(node.field, "number", nlo, nhi, node.include_lower,
                             node.include_upper)
        dates = []
        for b in bounds:
            try:
                dates.append(parse_date_ms(b))
            except ValueError:
                self.err(
                    f"{b!r} looks like a date but is not a valid ISO-8601 date or time "
                    "(YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS, optional zone)",
                    node,
                )
                return MatchNoneNode("invalid date")
        if all(d is not None for d in dates):
            dlo = parse_date_ms(lo) if lo is not None else None
            dhi = parse_date_ms(hi) if hi is not None else None
            incl_lo, incl_hi = node.include_lower, node.include_upper
            vlo = vhi = None
            # A date-only bound stands for its whole day: [d TO ...] starts at d 00:00,
            # {d TO ...} after d 23:59:59.999, [... TO d] ends at the end of d, {... TO d} before d.
            if dlo is not None:
                vlo = dlo[0]
                if dlo[1] and not incl_lo:
                    vlo, incl_lo = vlo + _DAY_MS, True
            if dhi is not None:
                vhi = dhi[0]
                if dhi[1] and incl_hi:
                    vhi, incl_hi = vhi + _DAY_MS, False
            return RangeNode(node.field, "date", vlo, vhi, incl_lo, incl_hi)
        norm = self.analyzer.normalize
        return RangeNode(
            node.field, "term",
            norm(lo) if lo is not None else None,
            norm(hi) if hi is not None else None,
            node.include_lower, node.include_upper,
        )

    def boolean(self, node: BooleanQuery, top: bool) -> Node | None:
        must: list[Node] = []
        should: list[Node] = []
        must_not: list[Node] = []
        for clause in node.clauses:
            child = self.visit(clause.query)
            if child is None:
                continue
            if clause.occur is Occur.MUST:
                if isinstance(child, BoolNode) and not child.should:
                    must.extend(child.must)
                    must_not.extend(child.must_not)
                else:
                    must.append(child)
            elif clause.occur is Occur.SHOULD:
                if isinstance(child, BoolNode) and not child.must and not child.must_not:
                    should.extend(child.should)
                else:
                    should.append(child)
            else:
                if isinstance(child, BoolNode) and not child.must and not child.must_not:
                    must_not.extend(child.should)
                else:
                    must_not.append(child)
        if not must and not should:
            if must_not:
                if top:
                    self.err(
                        "the query only excludes (NOT / -), so it matches nothing; add a term "
                        "that documents must or should contain, e.g. 'a AND NOT b'",
                        node,
                    )
                else:
                    self.err(
                        "this group only excludes (NOT / -), so it matches nothing; add a term "
                        "it must or should contain, or move the NOT out: 'a AND NOT b'",
                        node,
                    )
                return MatchNoneNode("pure negative")
            return None
        if len(must) == 1 and not should and not must_not:
            return must[0]
        if len(should) == 1 and not must and not must_not:
            return should[0]
        return BoolNode(tuple(must), tuple(should), tuple(must_not))


def analyse(tree: SyntaxNode, text: str, config: QueryConfig | None = None) -> Node:
    """Analyse a parsed query and check it; raises :class:`CepSyntaxError` with every problem.

    Example:
        >>> text = 'Title:"The Big-Apple" AND NOT tax*'
        >>> str(analyse(parse(text), text))
        '+Title:"the big apple" -tax*'
    """
    config = config or QueryConfig()
    a = _Analyser(text, config)
    node = a.run(tree)
    if a.errors:
        raise CepSyntaxError(a.errors)
    if node is None:
        raise _error(
            "the query has no searchable terms: every term analyses to nothing "
            "(punctuation only, or stop words)",
            text, 0, max(len(text), 1),
        )
    return node


def compile_query(text: str, config: QueryConfig | None = None) -> Node:
    """Parse, check and analyse query ``text``: the tree the matcher and presearcher use.

    Example:
        >>> str(compile_query("Apple-Inc OR aapl"))
        'apple inc aapl'
        >>> str(compile_query("+price:[10 TO *} -\\"Big Apple\\"~3"))
        '+price:[10 TO *} -"big apple"~3'
    """
    config = config or QueryConfig()
    return analyse(parse(text, config), text, config)
