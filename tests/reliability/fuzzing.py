"""Shared parts of the parser fuzzers: grammar-aware generators, the contract check, a time bound.

The contract for every parser of user text: any input gives a result or one of our own errors
(a :class:`~patterns.errors.CepError` whose entries carry a position in the text), never another
exception, a hang or a crash.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from hypothesis import strategies as st

from patterns.errors import CepError, CepSyntaxError, RuleErrors

SECONDS_PER_INPUT = 2.0


class Hang(Exception):
    """An input took longer than the per-input bound."""


@contextmanager
def time_bound(seconds: float = SECONDS_PER_INPUT) -> Iterator[None]:
    """Raise :class:`Hang` in the main thread when the body runs longer than ``seconds``."""

    def on_alarm(signum, frame):  # noqa: ARG001
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check_contract(fn: Callable[[str], Any], text: str) -> Any:
    """Call ``fn(text)``; pass on a result or a positioned CepError, fail on anything else."""
    with time_bound():
        try:
            return fn(text)
        except (CepSyntaxError, RuleErrors) as e:
            assert e.errors, f"{type(e).__name__} without entries for {text!r}"
            for err in e.errors:
                assert 0 <= err.offset <= max(len(err.text), 0), (text, err)
                assert err.line >= 1 and err.column >= 1, (text, err)
                assert err.message, (text, err)
                err.format()  # the caret line renders
            str(e)
            return e
        except CepError as e:  # our error, but without a position: a contract breach
            raise AssertionError(f"{type(e).__name__} without a position for {text!r}: {e}") from e


# ------------------------------------------------------------------ MATCH_RECOGNIZE text

IDENTS = ["A", "B", "C", "x", "px", "ts", "k", "price", "`q x`", '"Q"', "__class__", "__import__", "eval"]
FUNCS = ["PREV", "NEXT", "FIRST", "LAST", "SUM", "COUNT", "AVG", "MIN", "MAX", "ABS", "ROUND", "COALESCE",
         "CLASSIFIER", "MATCH_NUMBER", "RUNNING", "FINAL", "SUBSTRING", "LOWER", "eval", "__import__", "exec", "getattr"]
OPS = ["+", "-", "*", "/", "%", "||", "=", "<>", "!=", "<", "<=", ">", ">=", "AND", "OR", "NOT", "IS NULL",
       "IS NOT NULL", "BETWEEN 1 AND 2", "IN (1, 2)", "LIKE 'a%'"]
LITERALS = ["0", "1", "2.5", "1e308", "1e999", "-1", "'a'", "''", "'it''s'", "NULL", "TRUE", "FALSE",
            "99999999999999999999999999", "INTERVAL '5' MINUTE", ".5"]


@st.composite
def sql_expr(draw: Any, depth: int = 0) -> str:
    kind = draw(st.integers(0, 6 if depth < 3 else 1))
    if kind == 0:
        return draw(st.sampled_from(LITERALS))
    if kind == 1:
        var = draw(st.sampled_from(["", "A.", "B.", "C."]))
        return var + draw(st.sampled_from(IDENTS))
    if kind == 2:
        return f"{draw(sql_expr(depth + 1))} {draw(st.sampled_from(OPS))} {draw(sql_expr(depth + 1))}"
    if kind == 3:
        args = draw(st.lists(sql_expr(depth + 1), max_size=3))
        return f"{draw(st.sampled_from(FUNCS))}({', '.join(args)})"
    if kind == 4:
        return f"({draw(sql_expr(depth + 1))})"
    if kind == 5:
        return f"CASE WHEN {draw(sql_expr(depth + 1))} THEN {draw(sql_expr(depth + 1))} ELSE {draw(sql_expr(depth + 1))} END"
    return f"{draw(st.sampled_from(['A', 'B', '*']))}.{draw(st.sampled_from(IDENTS))}"


@st.composite
def pattern_text(draw: Any, depth: int = 0) -> str:
    kind = draw(st.integers(0, 5 if depth < 3 else 0))
    if kind == 0:
        return draw(st.sampled_from(["A", "B", "C", "D", "^", "$", "()"]))
    if kind == 1:
        return " ".join(draw(st.lists(pattern_text(depth + 1), min_size=1, max_size=3)))
    if kind == 2:
        return " | ".join(draw(st.lists(pattern_text(depth + 1), min_size=2, max_size=3)))
    if kind == 3:
        q = draw(st.sampled_from(["*", "+", "?", "*?", "+?", "??", "{2}", "{1,3}", "{,2}", "{2,}", "{0}", "{3,1}",
                                  "{99999999999}", "{1,3}?", "{1.5}", "{,.5}", "{1e3}"]))
        return f"({draw(pattern_text(depth + 1))}){q}"
    if kind == 4:
        return f"PERMUTE({', '.join(draw(st.lists(pattern_text(depth + 1), min_size=1, max_size=3)))})"
    return "{- " + draw(pattern_text(depth + 1)) + " -}"


@st.composite
def statement(draw: Any) -> str:
    parts = ["SELECT * FROM ticks MATCH_RECOGNIZE ("]
    if draw(st.booleans()):
        parts.append(f"PARTITION BY {', '.join(draw(st.lists(st.sampled_from(IDENTS), min_size=1, max_size=2)))}")
    parts.append(f"ORDER BY {draw(st.sampled_from(IDENTS))}")
    if draw(st.booleans()):
        ms = draw(st.lists(st.tuples(sql_expr(), st.sampled_from(IDENTS)), min_size=1, max_size=3))
        parts.append("MEASURES " + ", ".join(f"{e} AS {n}" for e, n in ms))
    parts.append(draw(st.sampled_from(["", "ONE ROW PER MATCH", "ALL ROWS PER MATCH", "ALL ROWS PER MATCH WITH UNMATCHED ROWS"])))
    parts.append(draw(st.sampled_from(["", "AFTER MATCH SKIP PAST LAST ROW", "AFTER MATCH SKIP TO NEXT ROW",
                                       "AFTER MATCH SKIP TO FIRST B", "AFTER MATCH SKIP TO LAST A", "AFTER MATCH SKIP TO Z"])))
    parts.append(f"PATTERN ({draw(pattern_text())})")
    if draw(st.booleans()):
        parts.append(f"SUBSET U = ({', '.join(draw(st.lists(st.sampled_from(['A', 'B', 'C', 'Z']), min_size=1, max_size=3)))})")
    parts.append(draw(st.sampled_from(["", "WITHIN INTERVAL '10' SECOND", "WITHIN INTERVAL '-1' DAY", "WITHIN INTERVAL 'x' HOUR"])))
    defs = draw(st.lists(st.tuples(st.sampled_from(["A", "B", "C", "D", "Q"]), sql_expr()), max_size=3))
    if defs:
        parts.append("DEFINE " + ", ".join(f"{v} AS {e}" for v, e in defs))
    parts.append(")")
    return "\n".join(p for p in parts if p)


def mutate(draw: Any, text: str) -> str:
    """Delete, duplicate or replace a random slice, or insert random characters."""
    if not text:
        return draw(st.text(max_size=20))
    i = draw(st.integers(0, len(text)))
    j = draw(st.integers(i, min(len(text), i + 12)))
    op = draw(st.integers(0, 3))
    if op == 0:
        return text[:i] + text[j:]
    if op == 1:
        return text[:j] + text[i:j] + text[j:]
    if op == 2:
        return text[:i] + draw(st.text(max_size=6)) + text[j:]
    return text[:i] + draw(st.sampled_from(["(", ")", "'", '"', "`", "{", "}", "--", "/*", "\x00", "\u2028", "é", "\\"])) + text[i:]


@st.composite
def mutated_statement(draw: Any) -> str:
    text = draw(statement())
    for _ in range(draw(st.integers(0, 3))):
        text = mutate(draw, text)
    return text


# ------------------------------------------------------------------ rule files

@st.composite
def rule_file(draw: Any) -> str:
    """YAML rule files: plausible structure, hostile values, then maybe a few byte-level mutations."""
    rules = []
    for i in range(draw(st.integers(0, 3))):
        r: dict[str, Any] = {}
        if draw(st.integers(0, 9)):
            r["name"] = draw(st.sampled_from([f"r{i}", "r0", "", "__import__", "a b", "é"]))
        for key in draw(st.lists(st.sampled_from(["sql", "lateness", "max_partial_matches", "on_cap", "kind",
                                                  "enabled", "description", "bogus"]), max_size=5, unique=True)):
            r[key] = draw(st.one_of(
                mutated_statement(),
                st.sampled_from(["5 minutes", "x", "-1", "1e999", "drop_oldest", "skip_key", "search", "analytics",
                                 "pattern", "explode"]),
                st.integers(-5, 10**30), st.booleans(), st.none(), st.floats(allow_nan=True),
                st.lists(st.integers(), max_size=2),
            ))
        rules.append(r)
    import yaml

    doc: Any = draw(st.sampled_from(["rules", "list", "scalar", "extra"]))
    if doc == "rules":
        body = yaml.safe_dump({"rules": rules}, sort_keys=False, allow_unicode=True)
    elif doc == "list":
        body = yaml.safe_dump(rules)
    elif doc == "scalar":
        body = yaml.safe_dump("rules")
    else:
        body = yaml.safe_dump({"rules": rules, "other": 1})
    prefix = draw(st.sampled_from(["", "%YAML 1.1\n---\n", "--- !!python/object/apply:os.system ['true']\n",
                                   "&a [*a]\n", "---\n...\n---\n"]))
    text = prefix + body
    for _ in range(draw(st.integers(0, 2))):
        text = mutate(draw, text)
    return text


# ------------------------------------------------------------------ search queries

@st.composite
def lucene_query(draw: Any, depth: int = 0) -> str:
    kind = draw(st.integers(0, 8 if depth < 3 else 2))
    term = draw(st.sampled_from(["apple", "big", "a*", "*b", "te?t", "ü", "42", "-1.5", "2017-01-01", "__class__",
                                 "__import__('os')", "x\\:y", "AND", "OR", "NOT", "to", "*", "?", "eval(1)"]))
    if kind == 0:
        return term
    if kind == 1:
        return f"{draw(st.sampled_from(['title', 'body', '_exists_', '__class__', 'a.b', '']))}:{term}"
    if kind == 2:
        return f'"{term} {draw(st.sampled_from(["pie", "x", ""]))}"' + draw(st.sampled_from(["", "~2", "~", "~x", "~99999999999"]))
    if kind == 3:
        lo, hi = draw(st.sampled_from([("1", "5"), ("*", "10"), ("a", "z"), ("2017-01-01", "now"), ("5", "1"), ("", "")]))
        return f"{draw(st.sampled_from(['[', '{']))}{lo} TO {hi}{draw(st.sampled_from([']', '}']))}"
    if kind == 4:
        op = draw(st.sampled_from([" AND ", " OR ", " ", " && ", " || ", " AND NOT "]))
        return op.join(draw(st.lists(lucene_query(depth + 1), min_size=2, max_size=3)))
    if kind == 5:
        return f"({draw(lucene_query(depth + 1))})" + draw(st.sampled_from(["", "^2", "^", "^-1"]))
    if kind == 6:
        return draw(st.sampled_from(["+", "-", "!", "NOT "])) + draw(lucene_query(depth + 1))
    if kind == 7:
        return f"{term}~{draw(st.sampled_from(['', '1', '2', '0.5']))}"
    return f"/{draw(st.sampled_from(['ab+', '[', '.*', '(a|b']))}/"


@st.composite
def mutated_query(draw: Any) -> str:
    text = draw(lucene_query())
    for _ in range(draw(st.integers(0, 2))):
        text = mutate(draw, text)
    return text
