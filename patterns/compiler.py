"""Check a parsed MATCH_RECOGNIZE statement and compile its pattern into an automaton program.

The program is plain data (tuples of ints), in the style of a regex virtual machine: threads run
it in priority order, which gives the SQL standard's preferment (greedy or reluctant quantifiers,
alternatives left to right) without backtracking over the input.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from patterns import ast as A
from patterns.errors import CepSyntaxError, RuleError, SourceError

__all__ = [
    "OP_VAR",
    "OP_SPLIT",
    "OP_JMP",
    "OP_MATCH",
    "OP_IGNORE",
    "OP_BEGIN",
    "OP_END",
    "Program",
    "CompiledPattern",
    "compile_statement",
    "check_statement",
    "split_conjuncts",
    "is_row_local",
    "nullable",
    "MAX_PROGRAM",
    "unbounded_loops",
]

OP_VAR = 0  # (OP_VAR, var_id, next_pc, excluded)
OP_SPLIT = 1  # (OP_SPLIT, (pc, pc, ...)) in priority order
OP_JMP = 2  # (OP_JMP, pc)
OP_MATCH = 3  # (OP_MATCH,)
# (OP_IGNORE, kill var ids, next_pc, final, var id of the rows it skips): NOT B. A row of one of
# the kill variables ends the run; any other row is skipped: between two elements the run takes it
# as an excluded row and goes on to next_pc; at the end of the pattern (final) the run stays on its
# node, and the match it holds completes when WITHIN's deadline passes.
OP_IGNORE = 4
# Anchors take no row. Numbered apart from the other kinds so more can be added between them.
OP_BEGIN = 10  # (OP_BEGIN, next_pc): '^', passes only before the partition's first row
OP_END = 11  # (OP_END, next_pc): '$', passes only after the partition's last row

SKIPPED = "#skipped"
"""The hidden variable of the rows ``ANY B`` skips (excluded rows; no condition, never readable)."""

MAX_PROGRAM = 20_000  # instructions; bounded quantifiers are expanded, so cap the expansion
MAX_PERMUTE = 7  # PERMUTE of n items expands to n! alternatives


@dataclass(frozen=True)
class Program:
    """An automaton program: instructions, the variables' names, and where a match can start."""

    instructions: tuple[tuple, ...]
    var_names: tuple[str, ...]
    start_vars: frozenset[int]

    def __len__(self) -> int:
        return len(self.instructions)


@dataclass(frozen=True)
class CompiledPattern:
    """A checked statement plus its automaton; immutable and shared by every key."""

    statement: A.MatchRecognize
    program: Program
    var_ids: dict[str, int] = field(hash=False)
    subsets: dict[str, frozenset[int]] = field(hash=False)
    defines: dict[int, A.Expr] = field(hash=False)


# ------------------------------------------------------------------ analysis helpers


def nullable(p: A.Pattern) -> bool:
    """Whether the pattern can match the empty sequence of rows."""
    if isinstance(p, A.PVar):
        return False
    if isinstance(p, A.PSeq):
        return all(nullable(i) for i in p.items)
    if isinstance(p, A.PAlt):
        return any(nullable(o) for o in p.options)
    if isinstance(p, A.PQuant):
        return p.low == 0 or nullable(p.item)
    if isinstance(p, A.PPermute):
        return all(nullable(i) for i in p.items)
    if isinstance(p, A.PExclude):
        return nullable(p.item)
    if isinstance(p, (A.PNot, A.PAnchor)):
        return True
    if isinstance(p, A.PAny):
        return False
    raise TypeError(p)


def _has(p: A.Pattern, kind: type) -> bool:
    stack = [p]
    while stack:
        x = stack.pop()
        if isinstance(x, kind):
            return True
        if isinstance(x, (A.PSeq, A.PPermute)):
            stack.extend(x.items)
        elif isinstance(x, A.PAlt):
            stack.extend(x.options)
        elif isinstance(x, (A.PQuant, A.PExclude)):
            stack.append(x.item)
    return False


def pattern_vars(p: A.Pattern) -> list[A.PVar]:
    """Every variable occurrence in the pattern, left to right."""
    if isinstance(p, A.PVar):
        return [p]
    if isinstance(p, (A.PSeq, A.PPermute)):
        return [v for i in p.items for v in pattern_vars(i)]
    if isinstance(p, A.PAlt):
        return [v for o in p.options for v in pattern_vars(o)]
    if isinstance(p, (A.PQuant, A.PExclude)):
        return pattern_vars(p.item)
    if isinstance(p, (A.PNot, A.PAny)):
        return [A.PVar(v, pos=p.pos) for v in p.vars]
    if isinstance(p, A.PAnchor):
        return []
    raise TypeError(p)


def excluded(p: A.Pattern) -> A.PExclude | None:
    """The first exclusion ``{- -}`` in the pattern, or None."""
    if isinstance(p, A.PExclude):
        return p
    kids = p.items if isinstance(p, (A.PSeq, A.PPermute)) else p.options if isinstance(p, A.PAlt) else (
        (p.item,) if isinstance(p, A.PQuant) else ())
    for k in kids:
        found = excluded(k)
        if found is not None:
            return found
    return None


# ------------------------------------------------------------------ program builder


class _Builder:
    def __init__(self, var_ids: dict[str, int], text: str, file: str | None):
        self.code: list[list] = []
        self.loops: list[tuple[A.PQuant, int, int]] = []  # unbounded quantifiers: (node, first pc, end pc)
        self.var_ids = var_ids
        self.text = text
        self.file = file

    def emit(self, *ins) -> int:
        if len(self.code) >= MAX_PROGRAM:
            raise RuleError(
                SourceError(
                    f"the pattern expands to more than {MAX_PROGRAM} automaton steps; "
                    "lower the quantifier bounds or the PERMUTE size",
                    self.text,
                    0,
                    1,
                    self.file,
                )
            )
        self.code.append(list(ins))
        return len(self.code) - 1

    def gen(self, p: A.Pattern, excluded: bool) -> None:
        """Append code for ``p``; control falls through to the next instruction on success."""
        if isinstance(p, A.PVar):
            pc = self.emit(OP_VAR, self.var_ids[p.name], None, excluded)
            self.code[pc][2] = pc + 1
        elif isinstance(p, A.PSeq):
            for i, item in enumerate(p.items):
                if isinstance(item, A.PNot) and i == len(p.items) - 1:
                    self.gen_not(item, final=True)
                else:
                    self.gen(item, excluded)
        elif isinstance(p, A.PAlt):
            split = self.emit(OP_SPLIT, [])
            jumps = []
            for opt in p.options:
                self.code[split][1].append(len(self.code))
                self.gen(opt, excluded)
                jumps.append(self.emit(OP_JMP, None))
            for j in jumps:
                self.code[j][1] = len(self.code)
        elif isinstance(p, A.PPermute):
            n = len(p.items)
            if n > MAX_PERMUTE:
                raise RuleError(
                    SourceError(
                        f"PERMUTE of {n} items expands to {n}! alternatives; at most {MAX_PERMUTE} are supported",
                        self.text,
                        p.pos,
                        7,
                        self.file,
                    )
                )
            alts = tuple(A.PSeq(tuple(p.items[i] for i in perm)) for perm in itertools.permutations(range(n)))
            self.gen(A.PAlt(alts), excluded)
        elif isinstance(p, A.PExclude):
            self.gen(p.item, True)
        elif isinstance(p, A.PQuant):
            self.gen_quant(p, excluded)
        elif isinstance(p, A.PNot):
            self.gen_not(p, final=False)
        elif isinstance(p, A.PAny):
            # L: split(take, skip); skip: IGNORE nothing -> L; take: B (or B | C ...)
            loop = self.emit(OP_SPLIT, [])
            ign = self.emit(OP_IGNORE, (), loop, False, self.var_ids[SKIPPED])
            self.code[loop][1] = [ign + 1, ign]
            self.gen(A.PAlt(tuple(A.PVar(v) for v in p.vars)) if len(p.vars) > 1 else A.PVar(p.vars[0]), excluded)
        elif isinstance(p, A.PAnchor):
            pc = self.emit(OP_BEGIN if p.kind == "^" else OP_END, None)
            self.code[pc][1] = pc + 1
        else:  # pragma: no cover - the parser builds no other node
            raise TypeError(p)

    def gen_not(self, p: A.PNot, final: bool) -> None:
        """``NOT B``: between elements L: split(out, ign); ign: IGNORE -> L (reluctant, so the next
        element takes a row before it is skipped); at the end a self-loop completed by the deadline."""
        kill = tuple(self.var_ids[v] for v in p.vars)
        if final:
            pc = self.emit(OP_IGNORE, kill, None, True, kill[0])
            self.code[pc][2] = pc
            return
        loop = self.emit(OP_SPLIT, [])
        ign = self.emit(OP_IGNORE, kill, loop, False, kill[0])
        self.code[loop][1] = [ign + 1, ign]

    def gen_quant(self, p: A.PQuant, excluded: bool) -> None:
        for _ in range(p.low):
            self.gen(p.item, excluded)
        if p.high is None:
            # item* : L: split(body, out); body; jmp L
            loop = self.emit(OP_SPLIT, [])
            body = len(self.code)
            self.gen(p.item, excluded)
            self.emit(OP_JMP, loop)
            out = len(self.code)
            self.code[loop][1] = [body, out] if p.greedy else [out, body]
            self.loops.append((p, loop, out))
            return
        # item{0,k} as nested optionals item (item (item)?)?: every skip jumps past the nest
        splits = []
        for _ in range(p.high - p.low):
            splits.append(self.emit(OP_SPLIT, []))
            self.gen(p.item, excluded)
        out = len(self.code)
        for sp in splits:
            body = sp + 1
            self.code[sp][1] = [body, out] if p.greedy else [out, body]


def _program(pattern: A.Pattern, var_ids: dict[str, int], text: str, file: str | None) -> Program:
    return _build(pattern, var_ids, text, file)[0]


def _build(
    pattern: A.Pattern, var_ids: dict[str, int], text: str, file: str | None
) -> tuple[Program, list[tuple[A.PQuant, int, int]]]:
    """The program, and the instructions each unbounded quantifier's loop spans."""
    b = _Builder(var_ids, text, file)
    b.gen(pattern, False)
    b.emit(OP_MATCH)
    ins = tuple(
        (c[0], tuple(c[1])) if c[0] == OP_SPLIT else tuple(c) for c in b.code
    )
    names = tuple(sorted(var_ids, key=var_ids.get))  # type: ignore[arg-type]
    starts = frozenset(ins[pc][1] for pc in _closure_pcs(ins, 0) if ins[pc][0] == OP_VAR)
    return Program(ins, names, starts), b.loops


def _closure_pcs(ins: tuple[tuple, ...], pc: int) -> list[int]:
    """The VAR and MATCH instructions reachable from ``pc`` without consuming a row.

    ``^`` is passed through (this over-approximates after the first row, where it blocks) and
    ``$`` ends the walk (nothing but the match's end may follow it)."""
    out: list[int] = []
    seen: set[int] = set()
    stack = [pc]
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        op = ins[p][0]
        if op == OP_SPLIT:
            stack.extend(reversed(ins[p][1]))
        elif op == OP_JMP or op == OP_BEGIN:
            stack.append(ins[p][1])
        else:
            out.append(p)
    return out


# ------------------------------------------------------------------ DEFINE conjuncts


def split_conjuncts(e: A.Expr) -> list[A.Expr]:
    """Top-level AND operands of a condition."""
    if isinstance(e, A.Logical) and e.op == "AND":
        return [x for a in e.args for x in split_conjuncts(a)]
    return [e]


def is_row_local(e: A.Expr, var: str, subsets: dict[str, frozenset[int]], var_id: int) -> bool:
    """Whether a DEFINE conjunct of ``var`` depends only on the current row (and PREV of it).

    Such conjuncts are evaluated column-wise over a whole batch before the automaton runs.
    """

    def current(v: str | None) -> bool:
        return v is None or v == var or (v in subsets and var_id in subsets[v])

    for x in A.walk_expr(e):
        if isinstance(x, A.Column) and not current(x.var):
            return False
        if isinstance(x, A.Nav):
            if x.kind != "PREV" and not (x.kind == "LAST" and x.offset == 0):
                return False
            if any(isinstance(y, A.Column) and not current(y.var) for y in A.walk_expr(x.arg)):
                return False
        if isinstance(x, (A.Agg, A.MatchNumber)):
            return False
        if isinstance(x, A.Classifier) and x.var is not None:
            return False
    return True



# ------------------------------------------------------------------ checks

# DEFINE functions of the current row computed by the operator per batch (cep.expressions.DERIVED)
_ROW_FUNCTIONS = ("FIRST_SEEN", "MATCHES")


class _Checker:
    def __init__(self, mr: A.MatchRecognize, file: str | None, line_offset: int, col_offset: int, block_indent: int):
        self.mr = mr
        self.errors: list[SourceError] = []
        self.file = file
        self.loc = dict(line_offset=line_offset, col_offset=col_offset, block_indent=block_indent)

    def err(self, message: str, pos: int, width: int = 1) -> None:
        self.errors.append(SourceError(message, self.mr.text, pos, width, self.file, **self.loc))

    def run(self) -> tuple[dict[str, int], dict[str, frozenset[int]]]:
        mr = self.mr
        occurrences = pattern_vars(mr.pattern)
        var_ids: dict[str, int] = {}
        for v in occurrences:
            var_ids.setdefault(v.name, len(var_ids))
        if _has(mr.pattern, A.PAny):
            var_ids[SKIPPED] = len(var_ids)
        subsets: dict[str, frozenset[int]] = {}
        for name, members in mr.subsets:
            pos = mr.text.find(name) if mr.text else 0
            if name in var_ids:
                self.err(f"SUBSET name {name!r} is already a pattern variable; choose another name", pos, len(name))
                continue
            if name in subsets:
                self.err(f"SUBSET {name!r} is defined twice", pos, len(name))
            bad = [m for m in members if m not in var_ids]
            for m in bad:
                self.err(
                    f"SUBSET {name} names {m!r}, which is not a variable of PATTERN "
                    f"(variables: {', '.join(v for v in var_ids if v != SKIPPED)})",
                    pos,
                    len(name),
                )
            subsets[name] = frozenset(var_ids[m] for m in members if m in var_ids)
        known = set(var_ids) | set(subsets)

        self.check_absence(var_ids, subsets)
        if mr.with_unmatched:
            ex = excluded(mr.pattern)
            if ex is not None:
                self.err("exclusion {- -} cannot be used with ALL ROWS PER MATCH WITH UNMATCHED ROWS "
                         "(as in Trino): every row is output there; remove the exclusion or WITH UNMATCHED ROWS",
                         ex.pos, 2)
        if nullable(mr.pattern):
            self.err(
                "the pattern can match an empty sequence of rows; make at least one element mandatory "
                "(for example A+ instead of A*)",
                mr.pattern.pos,
                1,
            )

        seen_define: set[str] = set()
        for d in mr.defines:
            if d.var in seen_define:
                self.err(f"variable {d.var!r} is defined twice in DEFINE", d.pos, len(d.var))
            seen_define.add(d.var)
            if d.var not in var_ids:
                self.err(
                    f"DEFINE {d.var}: {d.var!r} does not occur in PATTERN (variables: {', '.join(v for v in var_ids if v != SKIPPED)})",
                    d.pos,
                    len(d.var),
                )
                continue
            self.check_expr(d.expr, known, in_define=True)
            for conj in split_conjuncts(d.expr):
                fs = [x for x in A.walk_expr(conj) if isinstance(x, A.Func) and x.name in _ROW_FUNCTIONS]
                if fs and not is_row_local(conj, d.var, subsets, var_ids[d.var]):
                    f = fs[0].name
                    example = f"FIRST_SEEN({d.var}.ip)" if f == "FIRST_SEEN" else f"MATCHES({d.var}.title, 'apple')"
                    self.err(
                        f"{f}(...) in DEFINE {d.var} must be part of a condition on the current "
                        f"row only (its columns, {d.var}.x and PREV); AND it with the rest, e.g. "
                        f"{example} AND <other conditions>",
                        fs[0].pos,
                        len(f),
                    )

        names: set[str] = set()
        for m in mr.measures:
            if m.name.lower() in names:
                self.err(f"measure name {m.name!r} is used twice", m.pos, 1)
            names.add(m.name.lower())
            self.check_expr(m.expr, known, in_define=False)
        for pc in mr.partition_by:
            if pc.lower() in names:
                self.err(f"measure {pc!r} has the name of a PARTITION BY column; rename it", mr.pos, 1)

        if mr.skip.var is not None and mr.skip.var not in known:
            self.err(
                f"AFTER MATCH SKIP TO {mr.skip.var!r}: not a pattern variable or subset "
                f"(variables: {', '.join(sorted(known))})",
                mr.skip.pos,
                len(mr.skip.var),
            )
        if mr.select is not None and mr.rows_per_match == "ONE":
            available = {c.lower() for c in mr.partition_by} | names
            for name, pos in zip(mr.select, mr.select_pos):
                if name.lower() not in available:
                    self.err(
                        f"SELECT {name!r}: not an output column of ONE ROW PER MATCH "
                        f"(available: {', '.join(list(mr.partition_by) + [m.name for m in mr.measures])})",
                        pos,
                        len(name),
                    )
        return var_ids, subsets

    def check_absence(self, var_ids: dict[str, int], subsets: dict[str, frozenset[int]]) -> None:
        """Where ``NOT B`` may stand, what its variables may be, and what WITH TIMEOUT ROWS needs."""
        mr = self.mr
        top = mr.pattern.items if isinstance(mr.pattern, A.PSeq) else (mr.pattern,)
        stack: list[A.Pattern] = [mr.pattern]
        nots: list[A.PNot] = []
        anys: list[A.PAny] = []
        while stack:
            p = stack.pop()
            if isinstance(p, A.PAny):
                anys.append(p)
                if not any(p is x for x in top):
                    self.err("ANY may stand only between the elements of the pattern's sequence (A ANY B); "
                             "not inside a group, an alternation, a quantifier, PERMUTE or an exclusion", p.pos, 3)
            elif isinstance(p, A.PNot):
                nots.append(p)
                if not any(p is x for x in top):
                    self.err(
                        "NOT may stand only between the elements of the pattern's sequence (A NOT B C) "
                        "or at its end (A NOT B ... WITHIN); not inside a group, an alternation, a "
                        "quantifier, PERMUTE or an exclusion",
                        p.pos,
                        3,
                    )
            elif isinstance(p, (A.PSeq, A.PPermute)):
                stack.extend(p.items)
            elif isinstance(p, A.PAlt):
                stack.extend(p.options)
            elif isinstance(p, (A.PQuant, A.PExclude)):
                stack.append(p.item)
        if mr.timeout_rows and mr.within_ms is None:
            pos = mr.text.upper().find("TIMEOUT") if mr.text else 0
            self.err("WITH TIMEOUT ROWS needs WITHIN: a partial match times out when its WITHIN runs out",
                     max(pos, 0), 7)
        if anys:
            if isinstance(top[0], A.PAny):
                self.err("a pattern cannot start with ANY: say what comes first (for example A ANY B)", top[0].pos, 3)
            if mr.skip.mode != "NO_SKIP":
                self.err("ANY B reports every later B row, each in a match of its own: write AFTER MATCH NO SKIP "
                         "(with another skip mode only the first B could be reported; for that, A X*? B is "
                         "relaxed contiguity)", anys[0].pos, 3)
            if mr.within_ms is None:
                self.err("ANY needs WITHIN: every partial match keeps waiting for later rows until WITHIN ends it",
                         anys[0].pos, 3)
        if mr.skip.mode == "NO_SKIP" and mr.with_unmatched:
            self.err("AFTER MATCH NO SKIP cannot be combined with WITH UNMATCHED ROWS", mr.skip.pos, 5)
        if not nots:
            return
        if isinstance(top[0], A.PNot):
            self.err("a pattern cannot start with NOT: say what comes first (for example A NOT B ... WITHIN)",
                     top[0].pos, 3)
        for x, y in zip(top, top[1:]):
            if isinstance(x, A.PNot) and isinstance(y, A.PNot):
                self.err(f"two NOTs in a row: write NOT ({' | '.join(x.vars + y.vars)}) instead", y.pos, 3)
        if isinstance(top[-1], A.PNot) and len(top) > 1 and mr.within_ms is None:
            self.err(
                "a pattern that ends with NOT needs WITHIN: the absence is decided when WITHIN's deadline "
                "passes (for example PATTERN (A NOT B) WITHIN INTERVAL '10' MINUTE)",
                top[-1].pos,
                3,
            )
        absent = {v for p in nots for v in p.vars}
        positive = {v.name for v in pattern_vars(mr.pattern) if v.pos not in {p.pos for p in nots}}
        defined = {d.var for d in mr.defines}
        for p in nots:
            for v in p.vars:
                if v in positive:
                    self.err(f"{v!r} is both required and forbidden (NOT {v}); use another variable name "
                             "for the rows that must not occur", p.pos, 3)
                if v not in defined:
                    self.err(f"NOT {v} needs a condition: add DEFINE {v} AS ... (an undefined variable "
                             "matches every row)", p.pos, 3)
        bad_subsets = [n for n, m in mr.subsets if absent & set(m)]
        for n in bad_subsets:
            self.err(f"SUBSET {n} includes a NOT variable; a NOT variable has no rows to group",
                     mr.text.find(n) if mr.text else 0, len(n))
        if mr.skip.var in absent:
            self.err(f"AFTER MATCH SKIP TO {mr.skip.var}: a NOT variable has no rows", mr.skip.pos, len(mr.skip.var))
        for where, e, own in [("MEASURES", m.expr, None) for m in mr.measures] + [
            ("DEFINE " + d.var, d.expr, d.var) for d in mr.defines
        ]:
            for x in A.walk_expr(e):
                var = getattr(x, "var", None)
                if var in absent and var != own:
                    self.err(f"{where} reads {var}, a NOT variable: it never has rows in a match",
                             x.pos, len(var))

    def check_expr(self, e: A.Expr, known: set[str], in_define: bool, inside: str | None = None) -> None:
        if isinstance(e, A.Column):
            if e.var is not None and e.var not in known:
                self.err(
                    f"{e.var}.{e.name}: {e.var!r} is not a pattern variable or subset "
                    f"(variables: {', '.join(sorted(known))})",
                    e.pos,
                    len(e.var),
                )
            return
        if isinstance(e, A.MatchNumber) and in_define:
            self.err("MATCH_NUMBER() cannot be used in DEFINE", e.pos, 12)
        if isinstance(e, A.Classifier) and e.var is not None and e.var not in known:
            self.err(f"CLASSIFIER({e.var}): not a pattern variable or subset", e.pos, 10)
        if isinstance(e, (A.Nav, A.Agg, A.Classifier)) and getattr(e, "semantics", "RUNNING") == "FINAL" and in_define:
            self.err("FINAL cannot be used in DEFINE: a condition sees only the rows matched so far", e.pos, 5)
        if isinstance(e, A.Nav):
            if inside is not None:
                physical = e.kind in ("PREV", "NEXT")
                self.err(
                    f"{e.kind}(...) inside {inside}(...) is not supported: "
                    + ("physical navigation (PREV, NEXT) cannot be nested in any other function"
                       if physical else
                       "only FIRST/LAST nest, as the whole first argument of PREV/NEXT, e.g. PREV(LAST(A.x), 2)"),
                    e.pos,
                    len(e.kind),
                )
                return
            arg = e.arg
            if e.kind in ("PREV", "NEXT") and isinstance(arg, A.Nav) and arg.kind in ("FIRST", "LAST"):
                # logical navigation inside physical (Trino): find the row, then move from it
                if arg.semantics == "FINAL" and in_define:
                    self.err("FINAL cannot be used in DEFINE: a condition sees only the rows matched so far",
                             arg.pos, 5)
                self.single_var(arg.arg, arg.kind, arg.pos)
                self.check_expr(arg.arg, known, in_define, inside=arg.kind)
                return
            self.single_var(e.arg, e.kind, e.pos)
            self.check_expr(e.arg, known, in_define, inside=e.kind)
            return
        if isinstance(e, A.Func) and e.name == "FIRST_SEEN":
            if not in_define:
                self.err(
                    "FIRST_SEEN(...) is a DEFINE condition (this row's value is new for its key); "
                    "it cannot be used in MEASURES",
                    e.pos,
                    10,
                )
            elif inside is not None:
                self.err(f"FIRST_SEEN(...) inside {inside}(...) is not supported", e.pos, 10)
            if len(e.args) != 1 or not isinstance(e.args[0], A.Column):
                self.err("FIRST_SEEN takes one column of the current row, e.g. FIRST_SEEN(A.ip)", e.pos, 10)
                return
        if isinstance(e, A.Func) and e.name == "MATCHES":
            if not in_define:
                self.err("MATCHES(...) is a DEFINE condition (the row matches a search query); "
                         "it cannot be used in MEASURES", e.pos, 7)
            elif inside is not None:
                self.err(f"MATCHES(...) inside {inside}(...) is not supported", e.pos, 7)
            q = e.args[-1]
            if not all(isinstance(x, A.Column) for x in e.args[:-1]) or not (
                isinstance(q, A.Literal) and isinstance(q.value, str)
            ):
                self.err("MATCHES takes columns of the current row and then a Lucene query string, "
                         "e.g. MATCHES(N.headline, 'apple AND (iphone OR ipad)')", e.pos, 7)
                return
            self.check_search(e, q)
        if isinstance(e, A.Agg):
            if inside is not None:
                self.err(f"{e.func}(...) inside {inside}(...) is not supported", e.pos, len(e.func))
            if e.var is not None and e.var not in known:
                self.err(f"{e.func}({e.var}.*): {e.var!r} is not a pattern variable or subset", e.pos, len(e.func))
            if e.arg is not None:
                self.single_var(e.arg, e.func, e.pos)
                self.check_expr(e.arg, known, in_define, inside=e.func)
            return
        for sub in _children(e):
            self.check_expr(sub, known, in_define, inside)

    def check_search(self, call: A.Func, q: A.Literal) -> None:
        """A MATCHES query must compile; its errors point into the string literal."""
        from patterns.lucene import QueryConfig, compile_query

        fields = tuple(x.name for x in call.args[:-1] if isinstance(x, A.Column))
        try:
            compile_query(q.value, QueryConfig(default_fields=fields))
        except CepSyntaxError as exc:
            first = exc.errors[0]
            self.err(f"MATCHES query: {first.message}", q.pos + 1 + first.offset, max(first.width, 1))

    def single_var(self, arg: A.Expr, fname: str, pos: int) -> None:
        vars_ = {c.var for c in A.walk_expr(arg) if isinstance(c, A.Column)}
        if len(vars_) > 1:
            shown = ", ".join(sorted(v or "<universal>" for v in vars_))
            self.err(f"{fname}(...): all columns must refer to one pattern variable, found {shown}", pos, len(fname))
        if not any(isinstance(c, A.Column) for c in A.walk_expr(arg)) and fname not in ("COUNT",):
            self.err(f"{fname}(...) needs a column reference in its argument", pos, len(fname))


def _children(e: A.Expr) -> list[A.Expr]:
    it = A.walk_expr(e)
    next(it)
    # direct children only: walk_expr is depth first, so collect the immediate ones by identity
    direct: list[A.Expr] = []
    if isinstance(e, (A.Unary, A.Not, A.IsNull, A.Like)):
        direct = [e.operand]
    elif isinstance(e, (A.Binary, A.Compare)):
        direct = [e.left, e.right]
    elif isinstance(e, A.Logical):
        direct = list(e.args)
    elif isinstance(e, A.Between):
        direct = [e.operand, e.low, e.high]
    elif isinstance(e, A.InList):
        direct = [e.operand, *e.items]
    elif isinstance(e, A.Case):
        direct = [x for w in e.whens for x in w] + ([e.default] if e.default is not None else [])
    elif isinstance(e, A.Func):
        direct = list(e.args)
    return direct


def check_statement(
    mr: A.MatchRecognize,
    file: str | None = None,
    line_offset: int = 0,
    col_offset: int = 0,
    block_indent: int = 0,
) -> list[SourceError]:
    """Every semantic error in ``mr`` (empty when the statement is valid)."""
    c = _Checker(mr, file, line_offset, col_offset, block_indent)
    c.run()
    return c.errors


def compile_statement(
    mr: A.MatchRecognize,
    file: str | None = None,
    line_offset: int = 0,
    col_offset: int = 0,
    block_indent: int = 0,
) -> CompiledPattern:
    """Check ``mr`` and compile its pattern; raise RuleError with every problem found.

    Example:
        >>> from patterns.match_recognize import parse_statement
        >>> cp = compile_statement(parse_statement(
        ...     "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B+) DEFINE B AS B.x > 0)"))
        >>> cp.program.var_names, sorted(cp.program.start_vars)
        (('A', 'B'), [0])
    """
    c = _Checker(mr, file, line_offset, col_offset, block_indent)
    var_ids, subsets = c.run()
    if c.errors:
        raise RuleError(c.errors)
    try:
        program = _program(mr.pattern, var_ids, mr.text, file)
    except CepSyntaxError as e:
        raise RuleError(
            [SourceError(x.message, x.text, x.offset, x.width, file, line_offset, col_offset, block_indent) for x in e.errors]
        ) from None
    defines = {var_ids[d.var]: d.expr for d in mr.defines if d.var in var_ids}
    return CompiledPattern(mr, program, var_ids, subsets, defines)


def unbounded_loops(cp: CompiledPattern) -> list[tuple[A.PQuant, int, int]]:
    """Each unbounded quantifier of ``cp`` with the instructions its loop spans (first, end).

    The program builder is deterministic, so building again gives ``cp.program``'s instructions.

    Example:
        >>> from patterns.match_recognize import parse_statement
        >>> cp = compile_statement(parse_statement(
        ...     "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A (B|C)* D) DEFINE B AS B.x > 0)"))
        >>> [(cp.statement.text[q.pos:q.end], start, end) for q, start, end in unbounded_loops(cp)]
        [('(B|C)*', 1, 8)]
    """
    program, loops = _build(cp.statement.pattern, cp.var_ids, cp.statement.text, None)
    assert program.instructions == cp.program.instructions
    return loops
