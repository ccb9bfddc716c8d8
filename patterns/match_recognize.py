"""Parser for ``SELECT ... FROM stream MATCH_RECOGNIZE (...)`` statements into the AST."""

from __future__ import annotations

from typing import Any, Callable

from patterns import ast as A
from patterns.errors import CepSyntaxError, SourceError
from patterns.sql_lexer import Token, tokenize

__all__ = ["parse_statement", "parse_expression", "parse_interval_ms", "INTERVAL_UNITS"]

INTERVAL_UNITS = {
    "MILLISECOND": 1,
    "SECOND": 1000,
    "MINUTE": 60_000,
    "HOUR": 3_600_000,
    "DAY": 86_400_000,
}
"""SQL interval units, singular as the standard and Flink SQL have them: ``INTERVAL '10' MINUTES``
is refused with a caret pointing at the fix (the short option form ``10 minutes`` takes plurals)."""

SCALAR_FUNCTIONS = {
    "ABS": 1,
    "ROUND": (1, 2),
    "FLOOR": 1,
    "CEIL": 1,
    "CEILING": 1,
    "SQRT": 1,
    "LN": 1,
    "EXP": 1,
    "POWER": 2,
    "LOWER": 1,
    "UPPER": 1,
    "LENGTH": 1,
    "CHAR_LENGTH": 1,
    "TRIM": 1,
    "SUBSTRING": (2, 3),
    "COALESCE": (1, 99),
    "NULLIF": 2,
    "GREATEST": (1, 99),
    "LEAST": (1, 99),
    "MOD": 2,
    "FIRST_SEEN": 1,  # DEFINE only: the row's value is new for its partition key (Bloom filter)
    "MATCHES": (2, 99),  # DEFINE only: MATCHES(col, ..., 'lucene query'), the row matches a search query
}
AGGREGATES = {"SUM", "COUNT", "AVG", "MIN", "MAX", "APPROX_COUNT_DISTINCT"}
NAVIGATION = {"PREV", "NEXT", "FIRST", "LAST"}

# Words that end an expression or a clause; never taken as a column name.
_RESERVED = {
    "AND", "OR", "NOT", "IS", "NULL", "BETWEEN", "IN", "LIKE", "CASE", "WHEN", "THEN", "ELSE",
    "END", "AS", "DEFINE", "PATTERN", "MEASURES", "SUBSET", "WITHIN", "ONE", "ALL", "AFTER",
    "PARTITION", "ORDER", "BY", "FROM", "SELECT", "TRUE", "FALSE", "INTERVAL",
}


class _Parser:
    def __init__(self, text: str, file: str | None = None):
        self.text = text
        self.file = file
        self.toks = tokenize(text, file)
        self.i = 0
        self.depth = 0  # nesting levels open (parentheses, NOT, signs, groups): bounded by MAX_NESTING

    # ------------------------------------------------------------ token helpers
    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def enter(self) -> None:
        """Open one nesting level; past ``MAX_NESTING`` the text is refused, never recursed into."""
        self.depth += 1
        if self.depth > A.MAX_NESTING:
            raise self.error(f"nested more than {A.MAX_NESTING} levels deep (parentheses, NOT, signs, CASE, "
                             "function calls, pattern groups); simplify or split it")

    def leave(self, node: Any) -> Any:
        """Close one nesting level; back at the top, refuse a tree deeper than ``MAX_NESTING``
        (quantifiers stack without parentheses: ``A{1}{1}...``), or for an expression deeper than
        ``MAX_EXPRESSION_DEPTH`` (chains inside chains stack: ``a + (b + (c + ...))``), with the
        caret at the start of that expression."""
        self.depth -= 1
        if self.depth == 0:
            if isinstance(node, A.Expr):
                deep = A.too_deep(node, A.MAX_EXPRESSION_DEPTH)
                what = (f"the expression starting here is more than {A.MAX_EXPRESSION_DEPTH} levels deep as a "
                        "tree: each operator of a chain that is itself inside a chain, parentheses or a call "
                        "adds one (a + (b + (c + ...))) stacks a level per operand)")
                where = A.leftmost_pos(node) if deep is not None else 0
            else:
                deep = A.too_deep(node)
                what = f"nested more than {A.MAX_NESTING} levels deep (pattern groups or quantifiers)"
                where = deep.pos if deep is not None else 0
            if deep is not None:
                raise CepSyntaxError(SourceError(f"{what}; simplify or split it", self.text, where, 1, self.file))
        return node

    def chain(self, operand: Callable[[], A.Expr], ops: tuple[str, ...], pos: int) -> A.Expr:
        """Operands joined by operators of one precedence level, read in a loop (no recursion, no
        nesting level per operand), built into the left-leaning tree ``((a + b) - c)``; more than
        ``MAX_CHAIN`` operands are refused at the operator that brings one too many."""
        left = operand()
        n = 1
        while self.at_op(*ops):
            if n == A.MAX_CHAIN:
                raise self.error(f"more than {A.MAX_CHAIN} operands joined by {' '.join(ops)} in one chain "
                                 f"(this {self.tok.value!r} brings operand {n + 1}); join at most {A.MAX_CHAIN} "
                                 "per expression: split the rest into another MEASURES column, aggregate "
                                 "or condition")
            op = self.take().value
            left = A.Binary(op, left, operand(), pos=pos)
            n += 1
        return left

    def error(self, message: str, tok: Token | None = None) -> CepSyntaxError:
        tok = tok or self.tok
        return CepSyntaxError(SourceError(message, self.text, tok.offset, tok.width, self.file))

    def describe(self, tok: Token) -> str:
        return "end of input" if tok.kind == "EOF" else repr(tok.value)

    def at_kw(self, *words: str) -> bool:
        return self.tok.kind == "IDENT" and self.tok.upper in words

    def at_op(self, *ops: str) -> bool:
        return self.tok.kind == "OP" and self.tok.value in ops

    def take(self) -> Token:
        t = self.tok
        self.i += 1
        return t

    def accept_kw(self, *words: str) -> bool:
        if self.at_kw(*words):
            self.i += 1
            return True
        return False

    def accept_op(self, op: str) -> bool:
        if self.at_op(op):
            self.i += 1
            return True
        return False

    def expect_kw(self, word: str, context: str = "") -> Token:
        if not self.at_kw(word):
            where = f" {context}" if context else ""
            raise self.error(f"expected {word}{where}, found {self.describe(self.tok)}")
        return self.take()

    def expect_op(self, op: str, context: str = "") -> Token:
        if not self.at_op(op):
            where = f" {context}" if context else ""
            raise self.error(f"expected '{op}'{where}, found {self.describe(self.tok)}")
        return self.take()

    def ident(self, what: str) -> Token:
        t = self.tok
        if t.kind == "QIDENT" or (t.kind == "IDENT" and t.upper not in _RESERVED):
            self.i += 1
            return t
        raise self.error(f"expected {what}, found {self.describe(t)}")

    # ------------------------------------------------------------ statement
    def statement(self) -> A.MatchRecognize:
        start = self.tok.offset
        self.expect_kw("SELECT", "at the start of the statement")
        select: tuple[str, ...] | None
        select_pos: list[int] = []
        if self.accept_op("*"):
            select = None
        else:
            names = []
            while True:
                t = self.ident("a column name or '*' after SELECT")
                names.append(t.value)
                select_pos.append(t.offset)
                if not self.accept_op(","):
                    break
            select = tuple(names)
        self.expect_kw("FROM", "after the SELECT list")
        source = self.ident("the name of the input stream after FROM").value
        join = self.temporal_join(source) if self.at_kw("AS", "JOIN", "LEFT", "INNER") or (
            self.tok.kind == "IDENT" and self.tok.upper not in _RESERVED and self.tok.upper != "MATCH_RECOGNIZE"
            and self.peek().kind == "IDENT" and self.peek().upper in ("JOIN", "LEFT", "INNER")) else None
        self.expect_kw("MATCH_RECOGNIZE", "after the stream name" if join is None else "after the join")
        self.expect_op("(", "after MATCH_RECOGNIZE")

        partition_by: tuple[str, ...] = ()
        if self.accept_kw("PARTITION"):
            self.expect_kw("BY", "after PARTITION")
            cols = [self.ident("a column name in PARTITION BY").value]
            while self.accept_op(","):
                cols.append(self.ident("a column name in PARTITION BY").value)
            partition_by = tuple(cols)
        if not self.at_kw("ORDER"):
            raise self.error(
                f"expected ORDER BY <event-time column>, found {self.describe(self.tok)}: "
                "every rule names its event-time field"
            )
        self.take()
        self.expect_kw("BY", "after ORDER")
        order_tok = self.ident("the event-time column in ORDER BY")
        if self.at_kw("DESC"):
            raise self.error("ORDER BY ... DESC is not supported: event time only moves forward")
        self.accept_kw("ASC")
        if self.at_op(","):
            raise self.error("ORDER BY takes one event-time column; found a second one")

        measures: list[A.Measure] = []
        if self.accept_kw("MEASURES"):
            while True:
                mpos = self.tok.offset
                e = self.expr(measure=True)
                self.expect_kw("AS", "after a measure expression (every measure needs a name)")
                name = self.ident("the measure's name after AS").value
                measures.append(A.Measure(e, name, pos=mpos, end=self.toks[self.i - 1].offset))
                if not self.accept_op(","):
                    break

        rows_per_match = "ONE"
        timeout_rows = False
        with_unmatched = False
        if self.accept_kw("ONE"):
            self.expect_kw("ROW", "in ONE ROW PER MATCH")
            self.expect_kw("PER", "in ONE ROW PER MATCH")
            self.expect_kw("MATCH", "in ONE ROW PER MATCH")
            if self.accept_kw("WITH"):
                self.expect_kw("TIMEOUT", "in ONE ROW PER MATCH WITH TIMEOUT ROWS")
                self.expect_kw("ROWS", "in ONE ROW PER MATCH WITH TIMEOUT ROWS")
                timeout_rows = True
            elif self.at_kw("SHOW") and self.peek().upper == "TIMEOUT":
                self.take()  # Alibaba's newer spelling of the same clause
                self.take()
                self.expect_kw("MATCHES", "in ONE ROW PER MATCH SHOW TIMEOUT MATCHES")
                timeout_rows = True
        elif self.accept_kw("ALL"):
            self.expect_kw("ROWS", "in ALL ROWS PER MATCH")
            self.expect_kw("PER", "in ALL ROWS PER MATCH")
            self.expect_kw("MATCH", "in ALL ROWS PER MATCH")
            rows_per_match = "ALL"
            if self.at_kw("SHOW", "OMIT"):
                self.take()
                self.expect_kw("EMPTY", "in SHOW/OMIT EMPTY MATCHES")
                self.expect_kw("MATCHES", "in SHOW/OMIT EMPTY MATCHES")
            elif self.accept_kw("WITH"):
                self.expect_kw("UNMATCHED", "in ALL ROWS PER MATCH WITH UNMATCHED ROWS")
                self.expect_kw("ROWS", "in ALL ROWS PER MATCH WITH UNMATCHED ROWS")
                with_unmatched = True

        skip = A.Skip()
        if self.at_kw("AFTER"):
            spos = self.take().offset
            self.expect_kw("MATCH", "in AFTER MATCH SKIP")
            if self.at_kw("NO") and self.peek().upper == "SKIP":
                self.take()
                self.take()
                skip = A.Skip("NO_SKIP", pos=spos)  # every match of every start row (Flink's NO_SKIP)
            else:
                self.expect_kw("SKIP", "in AFTER MATCH SKIP (or AFTER MATCH NO SKIP)")
            if skip.mode == "NO_SKIP":
                pass
            elif self.accept_kw("PAST"):
                self.expect_kw("LAST", "in SKIP PAST LAST ROW")
                self.expect_kw("ROW", "in SKIP PAST LAST ROW")
                skip = A.Skip("PAST_LAST_ROW", pos=spos)
            elif self.accept_kw("TO"):
                if self.accept_kw("NEXT"):
                    self.expect_kw("ROW", "in SKIP TO NEXT ROW")
                    skip = A.Skip("TO_NEXT_ROW", pos=spos)
                elif self.at_kw("FIRST", "LAST"):
                    mode = "TO_FIRST" if self.take().upper == "FIRST" else "TO_LAST"
                    v = self.ident("a pattern variable after SKIP TO FIRST/LAST")
                    skip = A.Skip(mode, v.value, pos=v.offset)
                else:
                    v = self.ident("NEXT ROW, FIRST <var>, LAST <var> or <var> after SKIP TO")
                    skip = A.Skip("TO_LAST", v.value, pos=v.offset)
            else:
                raise self.error(
                    f"expected PAST LAST ROW or TO ... after AFTER MATCH SKIP, found {self.describe(self.tok)}"
                )

        within = None
        if not self.at_kw("PATTERN"):
            raise self.error(f"expected PATTERN (...), found {self.describe(self.tok)}")
        self.take()
        self.expect_op("(", "after PATTERN")
        if self.at_op(")"):
            raise self.error("empty PATTERN (): a pattern needs at least one variable")
        pattern = self.alternation()
        self.expect_op(")", "to close PATTERN")
        if self.at_kw("WITHIN"):
            within = self.within()

        subsets: list[tuple[str, tuple[str, ...]]] = []
        if self.accept_kw("SUBSET"):
            while True:
                name = self.ident("a subset name after SUBSET").value
                self.expect_op("=", "after the subset name")
                self.expect_op("(", "to open the subset's variable list")
                members = [self.ident("a pattern variable in SUBSET").value]
                while self.accept_op(","):
                    members.append(self.ident("a pattern variable in SUBSET").value)
                self.expect_op(")", "to close the subset's variable list")
                subsets.append((name, tuple(members)))
                if not self.accept_op(","):
                    break

        defines: list[A.Define] = []
        if self.accept_kw("DEFINE"):
            while True:
                vt = self.ident("a pattern variable in DEFINE")
                self.expect_kw("AS", f"after DEFINE {vt.value}")
                e = self.expr()
                defines.append(A.Define(vt.value, e, pos=vt.offset))
                if not self.accept_op(","):
                    break
        if within is None and self.at_kw("WITHIN"):
            within = self.within()
        if not self.at_op(")"):
            raise self.error(
                f"expected ')' to close MATCH_RECOGNIZE (or a clause: MEASURES, ONE/ALL ROWS PER "
                f"MATCH, AFTER MATCH SKIP, PATTERN, SUBSET, DEFINE, WITHIN), found {self.describe(self.tok)}"
            )
        self.take()
        if self.accept_kw("AS"):
            self.ident("an alias after AS")
        elif self.tok.kind in ("IDENT", "QIDENT") and self.tok.upper not in _RESERVED:
            self.take()
        self.accept_op(";")
        if self.tok.kind != "EOF":
            raise self.error(f"unexpected {self.describe(self.tok)} after the end of the statement")
        return A.MatchRecognize(
            source=source,
            select=select,
            partition_by=partition_by,
            order_by=order_tok.value,
            measures=tuple(measures),
            rows_per_match=rows_per_match,
            skip=skip,
            pattern=pattern,
            subsets=tuple(subsets),
            defines=tuple(defines),
            within_ms=within,
            timeout_rows=timeout_rows,
            with_unmatched=with_unmatched,
            join=join,
            text=self.text,
            select_pos=tuple(select_pos),
            pos=start,
            end=len(self.text),
        )

    def within(self) -> int:
        self.expect_kw("WITHIN")
        return self.interval()

    def interval(self) -> int:
        t = self.tok
        self.expect_kw("INTERVAL", "after WITHIN (e.g. WITHIN INTERVAL '10' MINUTE)")
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
        if not ms > 0 or ms != ms or ms > 10**15:
            raise self.error(f"bad interval {vt.value!r} {ut.value}: it must be positive and finite", vt)
        del t
        return int(ms)

    def interval_unit(self) -> int:
        """Take an interval's unit; its length in milliseconds."""
        ut = self.tok
        if ut.kind == "IDENT" and ut.upper in INTERVAL_UNITS:
            self.take()
            return INTERVAL_UNITS[ut.upper]
        if ut.kind == "IDENT" and ut.upper.endswith("S") and ut.upper[:-1] in INTERVAL_UNITS:
            raise self.error(f"SQL interval units are singular (as in the SQL standard and Flink SQL): "
                             f"write {ut.upper[:-1]}, not {ut.value}")
        raise self.error(
            f"expected an interval unit (MILLISECOND, SECOND, MINUTE, HOUR, DAY), found {self.describe(ut)}"
        )

    def temporal_join(self, source: str) -> A.TemporalJoin:
        """``[AS alias] [LEFT [OUTER] | INNER] JOIN t FOR SYSTEM_TIME AS OF col [AS alias] ON a = b [AND ...]``."""
        stream_alias = None
        if self.accept_kw("AS"):
            stream_alias = self.ident("an alias for the stream after AS").value
        elif not self.at_kw("JOIN", "LEFT", "INNER"):
            stream_alias = self.ident("an alias for the stream").value
        kind = "INNER"
        if self.accept_kw("LEFT"):
            kind = "LEFT"
            self.accept_kw("OUTER")
        else:
            self.accept_kw("INNER")
        self.expect_kw("JOIN", "(a temporal join: FROM s [LEFT] JOIN t FOR SYSTEM_TIME AS OF s.ts ON s.a = t.b)")
        tt = self.ident("the name of a table after JOIN")
        if not self.at_kw("FOR"):
            raise self.error(f"expected FOR SYSTEM_TIME AS OF <event-time column> after JOIN {tt.value}, found "
                             f"{self.describe(self.tok)}: a join with a table reads it as of each event's time")
        self.take()
        self.expect_kw("SYSTEM_TIME", "in FOR SYSTEM_TIME AS OF")
        self.expect_kw("AS", "in FOR SYSTEM_TIME AS OF")
        self.expect_kw("OF", "in FOR SYSTEM_TIME AS OF")
        as_of_pos = self.tok.offset
        if not (self.tok.kind == "QIDENT" or (self.tok.kind == "IDENT" and self.tok.upper not in _RESERVED)):
            raise self.error(f"expected the event-time column after AS OF, found {self.describe(self.tok)}")
        as_of = self.column_ref()
        assert isinstance(as_of, A.Column)
        table_alias = None
        if self.accept_kw("AS"):
            table_alias = self.ident("an alias for the table after AS").value
        elif self.tok.kind == "IDENT" and self.tok.upper not in _RESERVED and self.tok.upper != "ON":
            table_alias = self.take().value
        on_pos = self.tok.offset
        self.expect_kw("ON", "after the table (ON s.col = t.key)")
        pairs: list[tuple[A.Column, A.Column]] = []
        while True:
            ct = self.tok
            cond = self.predicate()
            if not (isinstance(cond, A.Compare) and cond.op == "=" and isinstance(cond.left, A.Column)
                    and isinstance(cond.right, A.Column)):
                raise self.error("a temporal join's ON takes equalities of two columns joined by AND "
                                 "(ON s.customer = t.id AND s.region = t.region)", ct)
            pairs.append((cond.left, cond.right))
            if not self.accept_kw("AND"):
                break
        return A.TemporalJoin(tt.value, kind, stream_alias, table_alias, as_of, tuple(pairs),
                              pos=tt.offset, end=tt.offset + len(tt.value), as_of_pos=as_of_pos, on_pos=on_pos)

    # ------------------------------------------------------------ row pattern regex
    def alternation(self) -> A.Pattern:
        self.enter()
        try:
            got = self._alternation()
        except BaseException:
            self.depth -= 1
            raise
        return self.leave(got)

    def _alternation(self) -> A.Pattern:
        pos = self.tok.offset
        options = [self.sequence()]
        while self.accept_op("|"):
            options.append(self.sequence())
        if len(options) == 1:
            return options[0]
        return A.PAlt(tuple(options), pos=pos)

    def sequence(self) -> A.Pattern:
        pos = self.tok.offset
        items = []
        while not (self.at_op(")", "|", ",", "-") or self.tok.kind == "EOF"):
            if self.tok.kind == "IDENT" and (self.tok.upper == "NOT" or (
                self.tok.upper == "ANY" and (self.peek().kind in ("IDENT", "QIDENT") or self.peek().value == "(")
            )):
                items.append(self.absence())
                continue
            if items and self.tok.kind == "IDENT" and self.tok.upper in _RESERVED:
                # a clause keyword right after pattern items: most likely a ')' is missing before it
                raise self.error(f"expected a pattern variable, '(', '|' or ')', found {self.describe(self.tok)}; "
                                 "is the ')' that closes the pattern missing?")
            items.append(self.quantified())
        if not items:
            raise self.error(f"expected a pattern variable or '(', found {self.describe(self.tok)}")
        if len(items) == 1:
            return items[0]
        return A.PSeq(tuple(items), pos=pos)

    def absence(self) -> A.Pattern:
        """``NOT B`` or ``NOT (B | C | ...)``: pattern variables that must not occur here; ``ANY B``
        (or ``ANY (B | C)``): any later row of these variables, every one (skip-till-any-match)."""
        word = self.tok.upper
        pos = self.take().offset
        names = []
        if self.accept_op("("):
            while True:
                names.append(self.ident("a pattern variable after NOT (").value)
                if not self.accept_op("|"):
                    break
            self.expect_op(")", f"to close {word} ( ... ): only variables separated by '|' may follow {word}")
        else:
            t = self.tok
            if not (t.kind in ("IDENT", "QIDENT") and t.upper not in _RESERVED):
                raise self.error(f"expected a pattern variable or '(' after {word}, found {self.describe(t)}")
            names.append(self.take().value)
        if self.at_op("*", "+", "?") or (self.at_op("{") and self.peek().value != "-"):
            if word == "NOT":
                raise self.error("NOT takes no quantifier: NOT B already means no B row at all here")
            raise self.error("ANY takes no quantifier: ANY B already takes every later B row, each in a match")
        last = self.toks[self.i - 1]
        if word == "ANY":
            return A.PAny(tuple(names), pos=pos, end=last.offset + len(last.value))
        return A.PNot(tuple(names), pos=pos, end=last.offset + len(last.value))

    def quantified(self) -> A.Pattern:
        pos = self.tok.offset
        item = self.primary_pattern()
        if isinstance(item, A.PAnchor) and (self.at_op("*", "+", "?") or (self.at_op("{") and self.peek().value != "-")):
            raise self.error(f"a quantifier cannot follow the anchor {item.kind!r}: an anchor takes no row; "
                             "remove the quantifier")
        while True:
            if self.at_op("*", "+", "?"):
                q = self.take().value
                low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[q]
            elif self.at_op("{") and not self.peek().value == "-":
                btok = self.take()
                low_t = self.tok if self.tok.kind == "NUMBER" else None
                if low_t:
                    self.take()
                high_t = None
                comma = self.accept_op(",")
                if comma:
                    high_t = self.tok if self.tok.kind == "NUMBER" else None
                    if high_t:
                        self.take()
                for t in (low_t, high_t):  # before int(): '1.5', '.4' and '1e3' are NUMBER tokens too
                    if t is not None and not t.value.isdigit():
                        raise self.error(f"quantifier bounds must be whole numbers, found {t.value!r}", t)
                if comma:
                    low = int(low_t.value) if low_t else 0
                    high = int(high_t.value) if high_t else None
                else:
                    if low_t is None:
                        raise self.error("expected a number in the quantifier {n}, {n,}, {n,m} or {,m}")
                    low = high = int(low_t.value)
                self.expect_op("}", "to close the quantifier")
                if high is not None and high < low:
                    raise self.error(f"quantifier {{{low},{high}}}: the upper bound is below the lower", btok)
                if high == 0:
                    raise self.error("quantifier {0} / {,0} matches nothing; remove the element", btok)
            else:
                return item
            greedy = True
            if self.at_op("?"):
                self.take()
                greedy = False
            last = self.toks[self.i - 1]
            item = A.PQuant(item, low, high, greedy, pos=pos, end=last.offset + len(last.value))

    def primary_pattern(self) -> A.Pattern:
        t = self.tok
        if self.at_op("("):
            self.take()
            if self.at_op(")"):
                raise self.error("empty group (): a group needs at least one variable")
            inner = self.alternation()
            self.expect_op(")", "to close the group")
            return inner
        if self.at_op("{") and self.peek().value == "-":
            self.take()
            self.take()
            inner = self.alternation()
            self.expect_op("-", "to close the exclusion {- ... -}")
            self.expect_op("}", "to close the exclusion {- ... -}")
            return A.PExclude(inner, pos=t.offset)
        if self.at_op("^", "$"):
            self.take()
            return A.PAnchor(t.value, pos=t.offset, end=t.offset + 1)
        if t.kind == "IDENT" and t.upper == "PERMUTE" and self.peek().value == "(":
            self.take()
            self.take()
            items = [self.alternation()]
            while self.accept_op(","):
                items.append(self.alternation())
            self.expect_op(")", "to close PERMUTE")
            return A.PPermute(tuple(items), pos=t.offset)
        if t.kind in ("IDENT", "QIDENT") and t.upper not in _RESERVED:
            self.take()
            return A.PVar(t.value, pos=t.offset, end=t.offset + len(t.value))
        raise self.error(f"expected a pattern variable or '(', found {self.describe(t)}")

    # ------------------------------------------------------------ expressions
    def expr(self, measure: bool = False) -> A.Expr:
        self.enter()
        try:
            e = self.or_expr()
        except BaseException:
            self.depth -= 1
            raise
        return self.leave(e)

    def or_expr(self) -> A.Expr:
        pos = self.tok.offset
        args = [self.and_expr()]
        while self.accept_kw("OR"):
            args.append(self.and_expr())
        return args[0] if len(args) == 1 else A.Logical("OR", tuple(args), pos=pos)

    def and_expr(self) -> A.Expr:
        pos = self.tok.offset
        args = [self.not_expr()]
        while self.accept_kw("AND"):
            args.append(self.not_expr())
        return args[0] if len(args) == 1 else A.Logical("AND", tuple(args), pos=pos)

    def not_expr(self) -> A.Expr:
        pos = self.tok.offset
        if self.accept_kw("NOT"):
            self.enter()
            try:
                return A.Not(self.not_expr(), pos=pos)
            finally:
                self.depth -= 1
        return self.predicate()

    def predicate(self) -> A.Expr:
        pos = self.tok.offset
        left = self.additive()
        if self.at_op("=", "<>", "!=", "<", "<=", ">", ">="):
            op = self.take().value
            right = self.additive()
            return A.Compare("<>" if op == "!=" else op, left, right, pos=pos)
        if self.at_kw("IS"):
            self.take()
            negated = self.accept_kw("NOT")
            self.expect_kw("NULL", "after IS / IS NOT")
            return A.IsNull(left, negated, pos=pos)
        negated = False
        if self.at_kw("NOT") and self.peek().kind == "IDENT" and self.peek().upper in ("BETWEEN", "IN", "LIKE"):
            self.take()
            negated = True
        if self.accept_kw("BETWEEN"):
            low = self.additive()
            self.expect_kw("AND", "in BETWEEN ... AND ...")
            high = self.additive()
            return A.Between(left, low, high, negated, pos=pos)
        if self.accept_kw("IN"):
            self.expect_op("(", "after IN")
            items = [self.expr()]
            while self.accept_op(","):
                items.append(self.expr())
            self.expect_op(")", "to close the IN list")
            return A.InList(left, tuple(items), negated, pos=pos)
        if self.accept_kw("LIKE"):
            pt = self.tok
            if pt.kind != "STRING":
                raise self.error(f"expected a quoted pattern after LIKE, found {self.describe(pt)}")
            self.take()
            return A.Like(left, pt.value, negated, pos=pos)
        return left

    def additive(self) -> A.Expr:
        return self.chain(self.multiplicative, ("+", "-", "||"), self.tok.offset)

    def multiplicative(self) -> A.Expr:
        return self.chain(self.unary, ("*", "/", "%"), self.tok.offset)

    def unary(self) -> A.Expr:
        pos = self.tok.offset
        if self.at_op("-", "+"):
            op = self.take().value
            self.enter()
            try:
                operand = self.unary()
            finally:
                self.depth -= 1
            if op == "-" and isinstance(operand, A.Literal) and isinstance(operand.value, (int, float)):
                return A.Literal(-operand.value, pos=pos)
            return A.Unary(op, operand, pos=pos) if op == "-" else operand
        return self.primary()

    def primary(self) -> A.Expr:
        t = self.tok
        pos = t.offset
        if t.kind == "NUMBER":
            self.take()
            v = t.value
            value: float | int = float(v) if any(c in v for c in ".eE") else int(v)
            return A.Literal(value, pos=pos)
        if t.kind == "STRING":
            self.take()
            return A.Literal(t.value, pos=pos)
        if self.at_op("("):
            self.take()
            e = self.expr()
            self.expect_op(")", "to close the parenthesis")
            return e
        if t.kind == "QIDENT":
            return self.column_ref()
        if t.kind != "IDENT":
            raise self.error(f"expected an expression, found {self.describe(t)}")
        u = t.upper
        if u == "TRUE" or u == "FALSE":
            self.take()
            return A.Literal(u == "TRUE", pos=pos)
        if u == "NULL":
            self.take()
            return A.Literal(None, pos=pos)
        if u == "CASE":
            return self.case()
        if u == "INTERVAL":
            return A.Literal(self.interval(), pos=pos)
        if u in ("RUNNING", "FINAL") and self.peek().kind == "IDENT":
            self.take()
            self.enter()  # RUNNING RUNNING ... recurses here: bounded like signs
            inner = self.leave(self.primary())
            return _with_semantics(inner, u, self, t)
        if self.peek().value == "(" and self.peek().kind == "OP":
            return self.call()
        if u in _RESERVED:
            raise self.error(f"expected an expression, found {self.describe(t)}")
        return self.column_ref()

    def column_ref(self) -> A.Expr:
        t = self.take()
        if self.at_op("."):
            self.take()
            if self.at_op("*"):
                raise self.error("A.* is only allowed inside COUNT(A.*)")
            c = self.ident(f"a column name after '{t.value}.'")
            return A.Column(t.value, c.value, pos=t.offset, end=c.offset + len(c.value))
        return A.Column(None, t.value, pos=t.offset, end=t.offset + len(t.value))

    def case(self) -> A.Expr:
        pos = self.take().offset
        subject = None
        if not self.at_kw("WHEN"):
            subject = self.expr()
        whens = []
        while self.accept_kw("WHEN"):
            cond = self.expr()
            if subject is not None:
                cond = A.Compare("=", subject, cond, pos=cond.pos)
            self.expect_kw("THEN", "after CASE ... WHEN <condition>")
            whens.append((cond, self.expr()))
        if not whens:
            raise self.error("expected WHEN after CASE")
        default = self.expr() if self.accept_kw("ELSE") else None
        self.expect_kw("END", "to close CASE")
        return A.Case(tuple(whens), default, pos=pos)

    def call(self) -> A.Expr:
        t = self.take()
        name = t.upper
        pos = t.offset
        self.expect_op("(")
        if name in NAVIGATION:
            arg = self.expr()
            offset = 1 if name in ("PREV", "NEXT") else 0
            if self.accept_op(","):
                ot = self.tok
                if ot.kind != "NUMBER" or not ot.value.isdigit():
                    raise self.error(f"{name}'s offset must be a whole number literal, found {self.describe(ot)}")
                self.take()
                offset = int(ot.value)
            self.expect_op(")", f"to close {name}(...)")
            return A.Nav(name, arg, offset, pos=pos)
        if name in AGGREGATES:
            if self.at_op("*"):
                if name != "COUNT":
                    raise self.error(f"{name}(*) is not allowed; only COUNT(*)")
                self.take()
                self.expect_op(")", "to close COUNT(*)")
                return A.Agg("COUNT", None, None, pos=pos)
            if (
                name == "COUNT"
                and self.tok.kind in ("IDENT", "QIDENT")
                and self.peek().value == "."
                and self.peek(2).value == "*"
            ):
                v = self.take().value
                self.take()
                self.take()
                self.expect_op(")", "to close COUNT(var.*)")
                return A.Agg("COUNT", None, v, pos=pos)
            if self.at_kw("DISTINCT"):
                if name != "COUNT":
                    raise self.error(f"{name}(DISTINCT ...) is not supported; only COUNT(DISTINCT ...)")
                self.take()
                arg = self.expr()
                self.expect_op(")", "to close COUNT(DISTINCT ...)")
                return A.Agg("COUNT_DISTINCT", arg, None, pos=pos)
            arg = self.expr()
            self.expect_op(")", f"to close {name}(...)")
            return A.Agg(name, arg, None, pos=pos)  # var is resolved by the checker
        if name == "CLASSIFIER":
            var = None
            if not self.at_op(")"):
                var = self.ident("a pattern variable or ')' in CLASSIFIER(...)").value
            self.expect_op(")", "to close CLASSIFIER(...)")
            return A.Classifier(var, pos=pos)
        if name == "MATCH_NUMBER":
            self.expect_op(")", "MATCH_NUMBER takes no argument")
            return A.MatchNumber(pos=pos)
        if name in SCALAR_FUNCTIONS:
            args = []
            if not self.at_op(")"):
                args.append(self.expr())
                while self.accept_op(","):
                    args.append(self.expr())
            self.expect_op(")", f"to close {name}(...)")
            arity = SCALAR_FUNCTIONS[name]
            lo, hi = (arity, arity) if isinstance(arity, int) else arity
            if not lo <= len(args) <= hi:
                want = str(lo) if lo == hi else f"{lo} to {hi}"
                raise self.error(f"{name} takes {want} argument(s), got {len(args)}", t)
            return A.Func(name, tuple(args), pos=pos)
        known = ", ".join(sorted(SCALAR_FUNCTIONS | {k: 0 for k in AGGREGATES | NAVIGATION}))
        raise self.error(f"unknown function {t.value!r}; known functions: {known}, CLASSIFIER, MATCH_NUMBER", t)


def _with_semantics(e: A.Expr, sem: str, p: _Parser, t: Token) -> A.Expr:
    if isinstance(e, A.Nav) and e.kind in ("FIRST", "LAST"):
        return A.Nav(e.kind, e.arg, e.offset, sem, pos=e.pos)
    if isinstance(e, A.Agg):
        return A.Agg(e.func, e.arg, e.var, sem, pos=e.pos)
    if isinstance(e, A.Classifier):
        return A.Classifier(e.var, sem, pos=e.pos)
    raise p.error(f"{sem} applies to FIRST, LAST, aggregates and CLASSIFIER only", t)


def parse_statement(text: str, file: str | None = None) -> A.MatchRecognize:
    """Parse one ``SELECT * FROM s MATCH_RECOGNIZE (...)`` statement.

    Example:
        >>> mr = parse_statement('''
        ...   SELECT * FROM ticks MATCH_RECOGNIZE (
        ...     PARTITION BY symbol ORDER BY ts
        ...     MEASURES FIRST(A.price) AS start_price
        ...     PATTERN (A B+ C) WITHIN INTERVAL '1' HOUR
        ...     DEFINE B AS B.price < PREV(B.price), C AS C.price > PREV(C.price))''')
        >>> mr.partition_by, mr.order_by, mr.within_ms
        (('symbol',), 'ts', 3600000)
    """
    return _Parser(text, file).statement()


def parse_expression(text: str) -> A.Expr:
    """Parse a standalone SQL expression (used by tests and by rule options).

    Example:
        >>> parse_expression("price > 10 AND NOT flag")
        Logical(op='AND', args=(Compare(op='>', left=Column(var=None, name='price'), right=Literal(value=10)), Not(operand=Column(var=None, name='flag'))))
    """
    p = _Parser(text)
    e = p.expr()
    if p.tok.kind != "EOF":
        raise p.error(f"unexpected {p.describe(p.tok)} after the expression")
    return e


def parse_interval_ms(text: str) -> int:
    """Parse ``INTERVAL '5' MINUTE`` (or the short ``'5 minutes'`` form) into milliseconds.

    Example:
        >>> parse_interval_ms("10 minutes"), parse_interval_ms("INTERVAL '2' SECOND")
        (600000, 2000)
    """
    s = text.strip()
    if not s.upper().startswith("INTERVAL"):
        num = ""
        for ch in s:
            if not (ch.isdigit() or ch == "."):
                break
            num += ch
        unit = s[len(num) :].strip()
        short = {"ms": "MILLISECOND", "s": "SECOND", "sec": "SECOND", "secs": "SECOND", "m": "MINUTE",
                 "min": "MINUTE", "mins": "MINUTE", "h": "HOUR", "hr": "HOUR", "hrs": "HOUR", "d": "DAY"}
        unit = short.get(unit.lower(), unit)
        if unit.upper().endswith("S") and unit.upper()[:-1] in INTERVAL_UNITS:
            unit = unit[:-1]  # the short form reads as English: '10 minutes
        if num and unit:
            s = f"INTERVAL '{num}' {unit}"
    p = _Parser(s)
    ms = p.interval()
    if p.tok.kind != "EOF":
        raise p.error(f"unexpected {p.describe(p.tok)} after the interval")
    return ms
