"""Conditions as a small postfix bytecode, and its interpreter, compiled with numba inside other loops.

A compiled loop (numba) cannot call the engine's Python closures, and generating Python source
for a condition is ruled out (no ``eval``/``exec`` of text anywhere), so a condition is compiled
once into a :class:`Program`: ``(opcode, argument)`` pairs in postfix order over float64
operands, plus a table of literals. :func:`run` interprets it for one row against one partial
match; it is plain Python (the reference, and what the tests compare) and :func:`jitted` returns
the same function compiled with numba, to be called from another compiled loop.

What an operand is comes from the caller: :func:`compile_condition` hands every column,
navigation and aggregate to the caller's ``leaf`` function, which answers with one of the operand
opcodes and an index into the arrays :func:`run` is given:

- ``CUR i``: ``cur[i]``, a value of the row being tested;
- ``START i``: ``start[i]``, a value of the partial match's start row;
- ``PREV i``: ``prev[i]``, a value of the previous row (the caller passes NaN when there is none);
- ``COUNT a`` / ``SUM a`` / ``AVG a``: running aggregate ``a`` from ``cnt[a]`` and ``sm[a]``
  (SUM and AVG are NULL while ``cnt[a]`` is 0).

NULL is NaN. The connectives taken are the monotone ones (AND, OR, comparisons, BETWEEN, NOT
BETWEEN; no NOT), so a NULL operand never makes a condition TRUE and "NULL" and "FALSE" can share
0.0 on the stack: ``run`` answers whether the condition is TRUE, and AND / OR stop at the first
operand that decides them (operands have no side effects and raise nothing). ``<>`` tests its operands for NULL
(IEEE's NaN != x is true); ``v NOT BETWEEN lo AND hi`` is TRUE when ``v < lo`` or ``v > hi`` is (SQL:
one known side outside is enough, a NULL bound on the other side does not matter); division by 0
is NULL.

Example:
    >>> import numpy as np
    >>> from patterns import ast as A
    >>> e = A.Compare(">", A.Column(None, "x"), A.Binary("*", A.Literal(2), A.Column(None, "y")))
    >>> p = compile_condition(e, lambda c: (CUR, {"x": 0, "y": 1}[c.name]))
    >>> none = np.zeros(0)
    >>> run(p.code, p.lits, np.array([5.0, 2.0]), none, none, np.zeros(0, np.int64), none, p.stack())
    True
    >>> run(p.code, p.lits, np.array([5.0, np.nan]), none, none, np.zeros(0, np.int64), none, p.stack())
    False
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from patterns import ast as A

__all__ = [
    "AVG", "COUNT", "CUR", "PREV", "START", "SUM", "Program", "Unsupported", "compile_condition", "jitted",
    "jitted_many", "run", "run_many",
]

# operands (argument: an index into the array run() reads it from)
CUR, START, PREV, LIT, COUNT, SUM, AVG = 1, 2, 3, 4, 5, 6, 7
# arithmetic (no argument)
NEG, ADD, SUB, MUL, DIV = 10, 11, 12, 13, 14
# arithmetic with a literal right operand (argument: the literal's index): one step instead of two
ADD_LIT, SUB_LIT, MUL_LIT, DIV_LIT = 15, 16, 17, 18
# comparisons: push 1.0 (TRUE) or 0.0 (FALSE or NULL)
EQ, NE, LT, LE, GT, GE, BETWEEN, NOT_BETWEEN = 20, 21, 22, 23, 24, 25, 26, 27
# AND / OR, short-circuit (argument: where the connective's code ends): AND_JUMP leaves FALSE and
# jumps when the value on top is not TRUE, else pops it; OR_JUMP leaves TRUE and jumps when it is.
# Before that end, one AND_END / OR_END per jump: nothing for run(), which jumped past them or
# popped; run_many() ignores the jumps and combines the two values on top at each end instead.
AND_JUMP, OR_JUMP, AND_END, OR_END = 30, 31, 32, 33

_LEAVES = (CUR, START, PREV, COUNT, SUM, AVG)
_CMP = {"=": EQ, "<>": NE, "!=": NE, "<": LT, "<=": LE, ">": GT, ">=": GE}
_ARITH = {"+": ADD, "-": SUB, "*": MUL, "/": DIV}
_ARITH_LIT = {"+": ADD_LIT, "-": SUB_LIT, "*": MUL_LIT, "/": DIV_LIT}
# an integer literal beyond this is not exact as a float64
_EXACT = float(2**53)


class Unsupported(Exception):
    """A construct the bytecode does not take (the caller keeps its other path for the condition)."""


@dataclass(frozen=True)
class Program:
    """One compiled condition: ``code`` holds (opcode, argument) pairs, ``lits`` the literals."""

    code: np.ndarray  # int64, length 2 * instructions
    lits: np.ndarray  # float64
    depth: int  # the most values on the stack at once (of run() and run_many())

    def stack(self) -> np.ndarray:
        """A scratch stack for :func:`run` (one per caller; reused across calls)."""
        return np.zeros(max(self.depth, 1))


def compile_condition(e: A.Expr, leaf: Callable[[A.Expr], tuple[int, int]]) -> Program:
    """Condition ``e`` as a :class:`Program`; ``leaf`` maps each column, navigation and aggregate
    to ``(operand opcode, index)`` or raises :class:`Unsupported`."""
    code: list[int] = []
    lits: list[float] = []
    depth = [0, 0, 0]  # current for run(), current for run_many(), the most of either

    def push(op: int, arg: int = 0, pops: int = 0, pops_many: int | None = None) -> None:
        code.extend((op, arg))
        depth[0] += 1 - pops
        depth[1] += 1 - (pops if pops_many is None else pops_many)
        depth[2] = max(depth[2], depth[0], depth[1])

    def lit(x: A.Literal) -> int:
        v = x.value
        if v is None:
            lits.append(math.nan)
        elif type(v) in (int, float) and abs(v) <= _EXACT:
            lits.append(float(v))
        else:
            raise Unsupported(x)
        return len(lits) - 1

    def val(x: A.Expr) -> None:
        if isinstance(x, A.Literal):
            push(LIT, lit(x))
        elif isinstance(x, A.Unary) and x.op in ("-", "+"):
            val(x.operand)
            if x.op == "-":
                push(NEG, 0, 1)
        elif isinstance(x, A.Binary) and x.op in _ARITH:
            if isinstance(x.right, A.Literal):
                val(x.left)
                push(_ARITH_LIT[x.op], lit(x.right), 1)
            elif isinstance(x.left, A.Literal) and x.op in ("+", "*"):  # (IEEE + and * commute)
                val(x.right)
                push(_ARITH_LIT[x.op], lit(x.left), 1)
            else:
                val(x.left)
                val(x.right)
                push(_ARITH[x.op], 0, 2)
        elif isinstance(x, (A.Column, A.Nav, A.Agg)):
            op, arg = leaf(x)
            if op not in _LEAVES or arg < 0:
                raise Unsupported(x)
            push(op, arg)
        else:
            raise Unsupported(x)

    def cond(x: A.Expr) -> None:
        if isinstance(x, A.Compare) and x.op in _CMP:
            val(x.left)
            val(x.right)
            push(_CMP[x.op], 0, 2)
        elif isinstance(x, A.Between):
            val(x.operand)
            val(x.low)
            val(x.high)
            push(NOT_BETWEEN if x.negated else BETWEEN, 0, 3)
        elif isinstance(x, A.Logical) and x.op in ("AND", "OR") and x.args:
            jumps = []
            for y in x.args[:-1]:
                cond(y)
                jumps.append(len(code))
                push(AND_JUMP if x.op == "AND" else OR_JUMP, 0, 2, 1)
            cond(x.args[-1])
            for _ in jumps:
                push(AND_END if x.op == "AND" else OR_END, 0, 1, 2)
            for at in jumps:
                code[at + 1] = len(code)
        else:
            raise Unsupported(x)

    cond(e)
    return Program(np.array(code, dtype=np.int64), np.array(lits, dtype=np.float64), depth[2])


def run(code: np.ndarray, lits: np.ndarray, cur: np.ndarray, prev: np.ndarray, start: np.ndarray,
        cnt: np.ndarray, sm: np.ndarray, stack: np.ndarray) -> bool:
    """Whether the condition ``code`` is TRUE for one row and one partial match (see the module doc)."""
    sp = 0
    pc = 0
    n = code.shape[0]
    while pc < n:
        op = code[pc]
        arg = code[pc + 1]
        pc += 2
        if op == CUR:
            stack[sp] = cur[arg]
            sp += 1
        elif op == START:
            stack[sp] = start[arg]
            sp += 1
        elif op == PREV:
            stack[sp] = prev[arg]
            sp += 1
        elif op == LIT:
            stack[sp] = lits[arg]
            sp += 1
        elif op == COUNT:
            stack[sp] = float(cnt[arg])
            sp += 1
        elif op == SUM:
            stack[sp] = sm[arg] if cnt[arg] > 0 else np.nan
            sp += 1
        elif op == AVG:
            stack[sp] = sm[arg] / cnt[arg] if cnt[arg] > 0 else np.nan
            sp += 1
        elif op == NEG:
            stack[sp - 1] = -stack[sp - 1]
        elif op >= AND_JUMP:
            if op >= AND_END:
                continue  # (reached only when every operand fell through)
            if (stack[sp - 1] == 1.0) == (op == OR_JUMP):
                pc = arg
            else:
                sp -= 1
        elif op >= ADD_LIT and op <= DIV_LIT:
            v = lits[arg]
            if op == ADD_LIT:
                stack[sp - 1] += v
            elif op == SUB_LIT:
                stack[sp - 1] -= v
            elif op == MUL_LIT:
                stack[sp - 1] *= v
            else:
                stack[sp - 1] = stack[sp - 1] / v if v != 0.0 else np.nan
        elif op <= DIV:
            sp -= 1
            u = stack[sp - 1]
            v = stack[sp]
            if op == ADD:
                stack[sp - 1] = u + v
            elif op == SUB:
                stack[sp - 1] = u - v
            elif op == MUL:
                stack[sp - 1] = u * v
            else:
                stack[sp - 1] = u / v if v != 0.0 else np.nan
        elif op == BETWEEN or op == NOT_BETWEEN:
            sp -= 2
            v = stack[sp - 1]
            lo = stack[sp]
            hi = stack[sp + 1]
            if op == BETWEEN:
                got = v >= lo and v <= hi
            else:
                got = v < lo or v > hi  # (either is TRUE only when its operands are known)
            stack[sp - 1] = 1.0 if got else 0.0
        else:
            sp -= 1
            u = stack[sp - 1]
            v = stack[sp]
            if op == EQ:
                got = u == v
            elif op == NE:
                got = u != v and u == u and v == v
            elif op == LT:
                got = u < v
            elif op == LE:
                got = u <= v
            elif op == GT:
                got = u > v
            else:
                got = u >= v
            stack[sp - 1] = 1.0 if got else 0.0
    return bool(stack[0] == 1.0)


_JITTED: list[Any] = []


def jitted() -> Callable[..., bool]:
    """:func:`run` compiled with numba (imported on first use; callers check :func:`cep.compiled.numba_allowed`).

    A compiled loop that calls the interpreter compiles it in (``njit(inline="always")(run)``);
    numba's disk cache of that loop does not see this file change, so such a loop keys its cache
    on this file's hash (see ``cep/_lanes_kernel.py``).
    """
    if not _JITTED:
        from numba import njit

        _JITTED.append(njit(cache=True, error_model="numpy")(run))
    return _JITTED[0]


def run_many(code: np.ndarray, lits: np.ndarray, cur: np.ndarray, prev: np.ndarray, ids: np.ndarray, nid: int,
             prev_ok: np.ndarray, starts: np.ndarray, cnts: np.ndarray, sums: np.ndarray, add_cnt: np.ndarray,
             add_sum: np.ndarray, stack: np.ndarray, out: np.ndarray) -> bool:
    """:func:`run` for one row and many partial matches at once: ``out[l]`` for partial match ``ids[l]``.

    Returns whether every sum, difference, product and running ``SUM`` it computed stayed below
    2**53 in magnitude: only then is each float64 result of exact integers exact (rounding is
    monotone and 2**53 is a float64, so an exact result at or past it cannot round below it). On
    False the caller hands the row to the exact general path and ignores ``out``. A running sum
    that may have been rounded is stored as inf by the caller, so reading it answers False too.

    Each instruction runs over all ``nid`` partial matches before the next (its dispatch is paid
    once per row, not once per partial match). Partial match ``p``'s start-row values are
    ``starts[p]``, its aggregates ``cnts[p] + add_cnt`` and ``sums[p] + add_sum`` (``add_*``: the row's
    own part), and it sees ``prev`` only where ``prev_ok[l]`` (else NULL). ``stack`` has at least
    ``depth`` rows of ``nid`` values. AND / OR evaluate both sides here (nothing to skip per row).
    """
    sp = 0
    pc = 0
    n = code.shape[0]
    exact = True
    while pc < n:
        op = code[pc]
        arg = code[pc + 1]
        pc += 2
        if op == CUR or op == LIT:
            v = cur[arg] if op == CUR else lits[arg]
            for x in range(nid):
                stack[sp, x] = v
            sp += 1
        elif op == START:
            for x in range(nid):
                stack[sp, x] = starts[ids[x], arg]
            sp += 1
        elif op == PREV:
            v = prev[arg]
            for x in range(nid):
                stack[sp, x] = v if prev_ok[x] else np.nan
            sp += 1
        elif op == COUNT or op == SUM or op == AVG:
            ac = add_cnt[arg]
            asm = add_sum[arg]
            for x in range(nid):
                c = cnts[ids[x], arg] + ac
                if op == COUNT:
                    stack[sp, x] = float(c)
                elif c == 0:
                    stack[sp, x] = np.nan
                else:
                    t = sums[ids[x], arg] + asm
                    if not abs(t) < _EXACT:  # (also inf, the mark of a sum that passed 2**53, and NaN)
                        exact = False
                    stack[sp, x] = t if op == SUM else t / c
            sp += 1
        elif op == NEG:
            for x in range(nid):
                stack[sp - 1, x] = -stack[sp - 1, x]
        elif op == OR_END:
            sp -= 1
            for x in range(nid):
                stack[sp - 1, x] = 1.0 if stack[sp - 1, x] == 1.0 or stack[sp, x] == 1.0 else 0.0
        elif op == AND_END:
            sp -= 1
            for x in range(nid):
                stack[sp - 1, x] = 1.0 if stack[sp - 1, x] == 1.0 and stack[sp, x] == 1.0 else 0.0
        elif op >= AND_JUMP:
            pass  # (both sides are evaluated: the END combines them)
        elif op >= ADD_LIT and op <= DIV_LIT:
            v = lits[arg]
            if op == ADD_LIT or op == SUB_LIT or op == MUL_LIT:
                for x in range(nid):
                    u = stack[sp - 1, x]
                    t = u + v if op == ADD_LIT else (u - v if op == SUB_LIT else u * v)
                    if abs(t) >= _EXACT:
                        exact = False
                    stack[sp - 1, x] = t
            else:
                for x in range(nid):
                    stack[sp - 1, x] = stack[sp - 1, x] / v if v != 0.0 else np.nan
        elif op <= DIV:
            sp -= 1
            for x in range(nid):
                u = stack[sp - 1, x]
                v = stack[sp, x]
                if op == DIV:
                    stack[sp - 1, x] = u / v if v != 0.0 else np.nan
                    continue
                t = u + v if op == ADD else (u - v if op == SUB else u * v)
                if abs(t) >= _EXACT:
                    exact = False
                stack[sp - 1, x] = t
        elif op == BETWEEN or op == NOT_BETWEEN:
            sp -= 2
            for x in range(nid):
                v = stack[sp - 1, x]
                lo = stack[sp, x]
                hi = stack[sp + 1, x]
                if op == BETWEEN:
                    got = v >= lo and v <= hi
                else:
                    got = v < lo or v > hi
                stack[sp - 1, x] = 1.0 if got else 0.0
        else:
            sp -= 1
            for x in range(nid):
                u = stack[sp - 1, x]
                v = stack[sp, x]
                if op == EQ:
                    got = u == v
                elif op == NE:
                    got = u != v and u == u and v == v
                elif op == LT:
                    got = u < v
                elif op == LE:
                    got = u <= v
                elif op == GT:
                    got = u > v
                else:
                    got = u >= v
                stack[sp - 1, x] = 1.0 if got else 0.0
    for x in range(nid):
        out[x] = stack[0, x] == 1.0
    return exact


_JITTED_MANY: list[Any] = []


def jitted_many() -> Callable[..., None]:
    """:func:`run_many` compiled with numba (see :func:`jitted`)."""
    if not _JITTED_MANY:
        from numba import njit

        _JITTED_MANY.append(njit(cache=True, error_model="numpy")(run_many))
    return _JITTED_MANY[0]
