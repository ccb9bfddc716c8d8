"""The condition bytecode (cep/_expr_kernel.py) against SQL's three-valued evaluation of the same tree."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cep import _expr_kernel as K
from cep.compiled import numba_allowed
from patterns import ast as A

# leaves: three current-row columns, two start-row columns, two previous-row columns, two aggregates
_LEAVES = ([A.Column(None, f"c{i}") for i in range(3)] + [A.Column("S", f"c{i}") for i in range(2)]
           + [A.Nav("LAST", A.Column("R", f"c{i}"), 0) for i in range(2)]
           + [A.Agg(f, A.Column("R", f"c{i}"), None) for f in ("COUNT", "SUM", "AVG") for i in range(2)])


def _leaf(x: A.Expr) -> tuple[int, int]:
    if isinstance(x, A.Column):
        return (K.START if x.var == "S" else K.CUR), int(x.name[1:])
    if isinstance(x, A.Nav):
        return K.PREV, int(x.arg.name[1:])  # type: ignore[attr-defined]
    if isinstance(x, A.Agg):
        return {"COUNT": K.COUNT, "SUM": K.SUM, "AVG": K.AVG}[x.func], int(x.arg.name[1:])  # type: ignore[union-attr]
    raise K.Unsupported(x)


def _value(rnd: random.Random, depth: int) -> A.Expr:
    r = rnd.random()
    if depth <= 0 or r < 0.4:
        if rnd.random() < 0.2:
            return A.Literal(rnd.choice([None, 0, 1, 2, -3, 0.5]))
        return rnd.choice(_LEAVES)
    if r < 0.5:
        return A.Unary("-", _value(rnd, depth - 1))
    return A.Binary(rnd.choice("+-*/"), _value(rnd, depth - 1), _value(rnd, depth - 1))


def _cond(rnd: random.Random, depth: int) -> A.Expr:
    r = rnd.random()
    if depth > 0 and r < 0.3:
        return A.Logical(rnd.choice(["AND", "OR"]), tuple(_cond(rnd, depth - 1) for _ in range(rnd.randint(2, 3))))
    if r < 0.5:
        return A.Between(_value(rnd, 1), _value(rnd, 1), _value(rnd, 1), rnd.random() < 0.4)
    return A.Compare(rnd.choice(["=", "<>", "<", "<=", ">", ">="]), _value(rnd, 2), _value(rnd, 2))


def _sql(x: A.Expr, env: dict[str, Any]) -> Any:
    """SQL's value of ``x``: None is NULL, booleans are three-valued (an independent reference)."""
    if isinstance(x, A.Literal):
        return None if x.value is None else float(x.value)
    if isinstance(x, A.Column):
        return (env["start"] if x.var == "S" else env["cur"])[int(x.name[1:])]
    if isinstance(x, A.Nav):
        return env["prev"][int(x.arg.name[1:])]  # type: ignore[attr-defined]
    if isinstance(x, A.Agg):
        i = int(x.arg.name[1:])  # type: ignore[union-attr]
        n, s = env["cnt"][i], env["sum"][i]
        if x.func == "COUNT":
            return float(n)
        if n == 0:
            return None
        return s if x.func == "SUM" else s / n
    if isinstance(x, A.Unary):
        v = _sql(x.operand, env)
        return None if v is None else -v
    if isinstance(x, A.Binary):
        u, v = _sql(x.left, env), _sql(x.right, env)
        if u is None or v is None or (x.op == "/" and v == 0):
            return None
        return {"+": u + v, "-": u - v, "*": u * v, "/": u / v if v else None}[x.op]
    if isinstance(x, A.Compare):
        u, v = _sql(x.left, env), _sql(x.right, env)
        if u is None or v is None:
            return None
        return {"=": u == v, "<>": u != v, "<": u < v, "<=": u <= v, ">": u > v, ">=": u >= v}[x.op]
    if isinstance(x, A.Between):
        v, lo, hi = (_sql(y, env) for y in (x.operand, x.low, x.high))
        inside = _and([None if v is None or lo is None else v >= lo, None if v is None or hi is None else v <= hi])
        return None if inside is None else (inside != x.negated)
    if isinstance(x, A.Logical):
        vals = [_sql(y, env) for y in x.args]
        return _and(vals) if x.op == "AND" else _or(vals)
    raise AssertionError(x)


def _and(vals: list) -> Any:
    return False if False in vals else (None if None in vals else True)


def _or(vals: list) -> Any:
    return True if True in vals else (None if None in vals else False)


def _arr(vals: list) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in vals], dtype=np.float64)


def _runners() -> list:
    out = [K.run]
    if numba_allowed():
        out.append(K.jitted())
    return out


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1))
def test_bytecode_is_sql_on_random_rows_with_nulls(seed):
    """Random conditions over rows, start rows, previous rows and aggregates with NULLs: TRUE
    exactly when SQL's three-valued evaluation of the same tree is TRUE (plain and compiled)."""
    rnd = random.Random(seed)
    e = _cond(rnd, 2)
    p = K.compile_condition(e, _leaf)
    runners = _runners()
    seen = set()
    for _ in range(40):
        def pick() -> Any:
            return None if rnd.random() < 0.2 else float(rnd.randint(-3, 3))
        env = {"cur": [pick() for _ in range(3)], "start": [pick() for _ in range(2)],
               "prev": [pick() for _ in range(2)], "cnt": [rnd.randint(0, 2) for _ in range(2)],
               "sum": [float(rnd.randint(-4, 4)) for _ in range(2)]}
        want = _sql(e, env) is True
        seen.add(want)
        args = (p.code, p.lits, _arr(env["cur"]), _arr(env["prev"]), _arr(env["start"]),
                np.array(env["cnt"], dtype=np.int64), np.array(env["sum"]), p.stack())
        for f in runners:
            assert f(*args) == want, (e, env)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1))
def test_many_partial_matches_at_once(seed):
    """run_many: one row against many partial matches (their own start rows, aggregates and
    whether the previous row is theirs) gives SQL's answer for each (plain and compiled)."""
    rnd = random.Random(seed)
    e = _cond(rnd, 2)
    p = K.compile_condition(e, _leaf)
    runners = [K.run_many] + ([K.jitted_many()] if numba_allowed() else [])

    def pick() -> Any:
        return None if rnd.random() < 0.2 else float(rnd.randint(-3, 3))

    m = rnd.randint(1, 30)
    starts = [[pick() for _ in range(2)] for _ in range(m)]
    cnts = [[rnd.randint(0, 2) for _ in range(2)] for _ in range(m)]
    sums = [[float(rnd.randint(-4, 4)) for _ in range(2)] for _ in range(m)]
    ids = np.array(rnd.sample(range(m), rnd.randint(1, m)), dtype=np.int64)  # a subset, in any order
    for _ in range(5):
        cur, prev = [pick() for _ in range(3)], [pick() for _ in range(2)]
        add_cnt = [rnd.randint(0, 1) for _ in range(2)]
        add_sum = [float(rnd.randint(-2, 2)) * c for c in add_cnt]
        prev_ok = np.array([rnd.random() < 0.7 for _ in ids])
        want = []
        for x, lane in enumerate(ids.tolist()):
            env = {"cur": cur, "start": starts[lane], "prev": prev if prev_ok[x] else [None, None],
                   "cnt": [cnts[lane][a] + add_cnt[a] for a in range(2)],
                   "sum": [sums[lane][a] + add_sum[a] for a in range(2)]}
            want.append(_sql(e, env) is True)
        for f in runners:
            out = np.zeros(len(ids), dtype=np.bool_)
            stack = np.zeros((max(p.depth, 1), len(ids)))
            f(p.code, p.lits, _arr(cur), _arr(prev), ids, len(ids), prev_ok, np.array([_arr(r) for r in starts]),
              np.array(cnts, dtype=np.int64), np.array(sums), np.array(add_cnt, dtype=np.int64), np.array(add_sum),
              stack, out)
            assert out.tolist() == want, (e, cur, prev)


def test_the_compiled_loop_caches_this_interpreter():
    """cep/_lanes_kernel.py keys numba's disk cache on this interpreter's file: its recorded hash
    is the file's (after changing cep/_expr_kernel.py, record the new hash there)."""
    import hashlib
    from pathlib import Path

    if not numba_allowed():
        pytest.skip("numba is turned off (CEP_NO_NUMBA)")
    from cep import _lanes_kernel

    assert _lanes_kernel.EXPR_KERNEL_SHA256 == hashlib.sha256(Path(K.__file__).read_bytes()).hexdigest()


def test_both_answers_occur():
    """The random conditions above are not all constant (the differential test can fail)."""
    got = set()
    rnd = random.Random(1)
    for _ in range(50):
        e = _cond(rnd, 2)
        p = K.compile_condition(e, _leaf)
        cur = np.array([rnd.randint(-3, 3) for _ in range(3)], dtype=np.float64)
        z = np.zeros(2)
        got.add(K.run(p.code, p.lits, cur, z, z, np.ones(2, np.int64), z, p.stack()))
    assert got == {True, False}


@pytest.mark.parametrize("text", [
    A.Not(A.Compare(">", A.Column(None, "c0"), A.Literal(1))),  # NOT: NULL is not FALSE under it
    A.Compare(">", A.Column(None, "c0"), A.Literal("a")),  # a string literal
    A.Compare(">", A.Column(None, "c0"), A.Literal(2**60)),  # not exact as a float
    A.Compare(">", A.Column(None, "c0"), A.Binary("%", A.Column(None, "c1"), A.Literal(2))),
    A.Compare(">", A.Agg("MAX", A.Column("R", "c0"), None), A.Literal(1)),  # the caller's leaf declines
])
def test_what_it_declines(text):
    """Constructs outside the bytecode raise Unsupported (the caller keeps its other path)."""
    def leaf(x: A.Expr) -> tuple[int, int]:
        if isinstance(x, A.Agg) and x.func == "MAX":
            raise K.Unsupported(x)
        return _leaf(x)

    with pytest.raises(K.Unsupported):
        K.compile_condition(text, leaf)
