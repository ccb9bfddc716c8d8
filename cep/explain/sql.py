"""A DEFINE or MEASURES expression printed back as SQL text, for ``cep explain``."""

from __future__ import annotations

from typing import Any

from patterns import ast as A

__all__ = ["expr_sql"]

_PREC = {"OR": 1, "AND": 2, "NOT": 3, "CMP": 4, "||": 5, "+": 6, "-": 6, "*": 7, "/": 7, "%": 7}


def expr_sql(e: A.Expr) -> str:
    """An expression as SQL text (the parser keeps no end offsets, so it is printed back).

    Example:
        >>> from patterns.match_recognize import parse_statement
        >>> mr = parse_statement("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) "
        ...     "DEFINE B AS B.x > PREV(B.x) * 1.02 AND (B.y = 'a' OR B.y IS NULL))")
        >>> expr_sql(mr.defines[0].expr)
        "B.x > PREV(B.x) * 1.02 AND (B.y = 'a' OR B.y IS NULL)"
    """
    return _sql(e, 0)


def _lit(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def _sql(e: A.Expr, outer: int) -> str:
    def wrap(text: str, prec: int) -> str:
        return f"({text})" if prec < outer else text

    if isinstance(e, A.Literal):
        return _lit(e.value)
    if isinstance(e, A.Column):
        return e.name if e.var is None else f"{e.var}.{e.name}"
    if isinstance(e, A.Unary):
        return f"{e.op}{_sql(e.operand, 8)}"
    if isinstance(e, A.Binary):
        p = _PREC.get(e.op, 6)
        return wrap(f"{_sql(e.left, p)} {e.op} {_sql(e.right, p + 1)}", p)
    if isinstance(e, A.Compare):
        return wrap(f"{_sql(e.left, 5)} {e.op} {_sql(e.right, 5)}", 4)
    if isinstance(e, A.Logical):
        p = _PREC[e.op]
        return wrap(f" {e.op} ".join(_sql(a, p + 1) for a in e.args), p)
    if isinstance(e, A.Not):
        return wrap(f"NOT {_sql(e.operand, 4)}", 3)
    if isinstance(e, A.IsNull):
        return wrap(f"{_sql(e.operand, 5)} IS {'NOT ' if e.negated else ''}NULL", 4)
    if isinstance(e, A.Between):
        return wrap(f"{_sql(e.operand, 5)} {'NOT ' if e.negated else ''}BETWEEN {_sql(e.low, 5)} AND {_sql(e.high, 5)}", 4)
    if isinstance(e, A.InList):
        items = ", ".join(_sql(x, 0) for x in e.items)
        return wrap(f"{_sql(e.operand, 5)} {'NOT ' if e.negated else ''}IN ({items})", 4)
    if isinstance(e, A.Like):
        return wrap(f"{_sql(e.operand, 5)} {'NOT ' if e.negated else ''}LIKE {_lit(e.pattern)}", 4)
    if isinstance(e, A.Case):
        parts = " ".join(f"WHEN {_sql(c, 0)} THEN {_sql(v, 0)}" for c, v in e.whens)
        default = f" ELSE {_sql(e.default, 0)}" if e.default is not None else ""
        return f"CASE {parts}{default} END"
    if isinstance(e, A.Func):
        return f"{e.name}({', '.join(_sql(a, 0) for a in e.args)})"
    if isinstance(e, A.Nav):
        sem = "FINAL " if e.semantics == "FINAL" else ""
        default_offset = 1 if e.kind in ("PREV", "NEXT") else 0
        off = f", {e.offset}" if e.offset != default_offset else ""
        return f"{sem}{e.kind}({_sql(e.arg, 0)}{off})"
    if isinstance(e, A.Agg):
        sem = "FINAL " if e.semantics == "FINAL" else ""
        if e.arg is None:
            return f"{sem}{e.func}({e.var + '.*' if e.var else '*'})"
        return f"{sem}{e.func}({_sql(e.arg, 0)})"
    if isinstance(e, A.Classifier):
        return f"CLASSIFIER({e.var or ''})"
    if isinstance(e, A.MatchNumber):
        return "MATCH_NUMBER()"
    return type(e).__name__  # pragma: no cover - every expression kind is printed above
