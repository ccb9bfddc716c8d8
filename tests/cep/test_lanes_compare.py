"""Conditions that compare two operands (the compiled lane loop reads them without its bytecode interpreter): the rows of every path."""

from __future__ import annotations

import random

import numpy as np
import pytest

import cep._expr_kernel as EK
import cep.lanes as lanes
from cep.compiled import numba_allowed
from patterns.rules import parse_rule_text
from tests.cep.test_lanes import _counters
from tests.cep.test_lanes_batch import _run
from tests.cep.test_lanes_many_keys import _mixed_events

pytestmark = pytest.mark.skipif(not numba_allowed(), reason="the compared form is the compiled loop's (numba)")


def _sql(u_cond: str) -> str:
    return f"""SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
           MEASURES FIRST(S.ts) AS t0, LAST(U.ts) AS t1, S.x AS sx, LAST(D.x) AS bottom
           AFTER MATCH SKIP PAST LAST ROW
           PATTERN (S D{{2,}} U+)
           DEFINE D AS D.x < PREV(D.x),
                  U AS U.x > PREV(U.x) AND {u_cond})"""


# the lane condition left once the row-local part is in the masks: each comparison, each operand
# kind (the current row, the start row's kept value, a literal), NULLs (``v`` is NULL on some rows)
CONDS = ["LAST(U.x) >= S.x", "U.x < S.x", "S.x <= U.x", "U.x = S.x", "U.x <> S.x", "S.x > U.x",
         "U.v >= S.v", "U.v <> S.v", "S.v = U.v", "S.x < 12", "12 >= S.x", "S.v <> 50"]


@pytest.mark.parametrize("cond", CONDS)
def test_compared_conditions_agree_with_every_path(cond):
    """Keys of a few rows beside keys of hundreds, batches cutting runs, a restore in the middle:
    the compiled loop comparing without the interpreter gives the rows and counters of each key
    by its own call and of the general path."""
    sql = _sql(cond)
    found = 0
    for seed in range(3):
        rnd = random.Random(seed)
        events = _mixed_events(rnd, 40, 3, 300)
        cuts = [rnd.randrange(1, len(events)) for _ in range(4)]
        snap_at = seed if seed < 2 else None
        batch, op_batch, _ = _run(sql, events, cuts, snap_at, "batch", check=True)
        keys, op_keys, _ = _run(sql, events, cuts, snap_at, "keys")
        slow, op_slow, _ = _run(sql, events, cuts, None, "general")
        assert batch == keys == slow
        assert _counters(op_batch) == _counters(op_keys) == _counters(op_slow)
        found += len(batch)
    assert found  # (the conditions are chosen so that the rule matches)


def _program(cond: str) -> EK.Program:
    """The compiled loop's program of U's condition in :func:`_sql`."""
    from cep.operator import PatternOperator

    op = PatternOperator(parse_rule_text(_sql(cond)).compiled, name="r")
    plan = op.automaton.lanes
    assert plan is not None and plan.kernel is not None
    return plan.kernel.prog_b


@pytest.mark.parametrize("cond", CONDS)
def test_two_operand_comparisons_take_the_compared_form(cond):
    got = lanes._simple_program(_program(cond))
    assert got.shape == (5,)
    assert got[0] in (EK.CUR, EK.START, EK.LIT) and got[2] in (EK.CUR, EK.START, EK.LIT)
    assert EK.EQ <= got[4] <= EK.GE


@pytest.mark.parametrize("cond", ["U.x + 1 >= S.x", "U.x >= S.x * 2", "U.x BETWEEN S.x AND 15",
                                  "COUNT(U.*) < 3"])
def test_other_conditions_keep_the_interpreter(cond):
    assert lanes._simple_program(_program(cond)).shape == (0,)
    assert lanes._simple_program(EK.Program(np.zeros(0, np.int64), np.zeros(0), 0)).shape == (0,)
