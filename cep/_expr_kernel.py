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
0.0 on the stack: ``run`` answers whether the condition is TRUE. ``<>`` tests its operands for NULL
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
    "AVG", "COUNT", "CUR", "PREV", "START", "SUM", "Program", "Unsupported", "compile_condition", "jitted", "run",
]

# operands (argument: an index into the array run() reads it from)
CUR, START, PREV, LIT, COUNT, SUM, AVG = 1, 2, 3, 4, 5, 6, 7
# arithmetic (no argument)
NEG, ADD, SUB, MUL, DIV = 10, 11, 12, 13, 14
# comparisons and connectives: push 1.0 (TRUE) or 0.0 (FALSE or NULL)
EQ, NE, LT, LE, GT, GE, BETWEEN, NOT_BETWEEN, AND, OR = 20, 21, 22, 23, 24, 25, 26, 27, 28, 29

_LEAVES = (CUR, START, PREV, COUNT, SUM, AVG)
_CMP = {"=": EQ, "<>": NE, "!=": NE, "<": LT, "<=": LE, ">": GT, ">=": GE}
_ARITH = {"+": ADD, "-": SUB, "*": MUL, "/": DIV}
# an integer literal beyond this is not exact as a float64
_EXACT = float(2**53)


class Unsupported(Exception):
    """A construct the bytecode does not take (the caller keeps its other path for the condition)."""


@dataclass(frozen=True)
class Program:
    """One compiled condition: ``code`` holds (opcode, argument) pairs, ``lits`` the literals."""

    code: np.ndarray  # int64, length 2 * instructions
    lits: np.ndarray  # float64
    depth: int  # the most values on the stack at once

    def stack(self) -> np.ndarray:
        """A scratch stack for :func:`run` (one per caller; reused across calls)."""
        return np.zeros(max(self.depth, 1))


def compile_condition(e: A.Expr, leaf: Callable[[A.Expr], tuple[int, int]]) -> Program:
    """Condition ``e`` as a :class:`Program`; ``leaf`` maps each column, navigation and aggregate
    to ``(operand opcode, index)`` or raises :class:`Unsupported`."""
    code: list[int] = []
    lits: list[float] = []
    depth = [0, 0]  # current, most

    def push(op: int, arg: int = 0, pops: int = 0) -> None:
        code.extend((op, arg))
        depth[0] += 1 - pops
        depth[1] = max(depth[1], depth[0])

    def val(x: A.Expr) -> None:
        if isinstance(x, A.Literal):
            v = x.value
            if v is None:
                lits.append(math.nan)
            elif type(v) in (int, float) and abs(v) <= _EXACT:
                lits.append(float(v))
            else:
                raise Unsupported(x)
            push(LIT, len(lits) - 1)
        elif isinstance(x, A.Unary) and x.op in ("-", "+"):
            val(x.operand)
            if x.op == "-":
                push(NEG, 0, 1)
        elif isinstance(x, A.Binary) and x.op in _ARITH:
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
            cond(x.args[0])
            for y in x.args[1:]:
                cond(y)
                push(AND if x.op == "AND" else OR, 0, 2)
        else:
            raise Unsupported(x)

    cond(e)
    return Program(np.array(code, dtype=np.int64), np.array(lits, dtype=np.float64), depth[1])


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
            elif op == GE:
                got = u >= v
            elif op == AND:
                got = u == 1.0 and v == 1.0
            else:
                got = u == 1.0 or v == 1.0
            stack[sp - 1] = 1.0 if got else 0.0
    return bool(stack[0] == 1.0)


_JITTED: list[Any] = []


def jitted() -> Callable[..., bool]:
    """:func:`run` compiled with numba (imported on first use; callers check :func:`cep.compiled.numba_allowed`)."""
    if not _JITTED:
        from numba import njit

        _JITTED.append(njit(cache=True, error_model="numpy")(run))
    return _JITTED[0]
