"""The batch DFA's generated row builder with odd column and measure names, against the automaton."""

from __future__ import annotations

import random

import pytest

from tests.cep.test_batch_dfa_rows import _run

# names that would break (or run) code if they were ever written into the generated code's text
ODD = ['__class__', 'def', "a'b", 'q"q', 'ü', 'x y', 'rule', '_id', 'n0', 'v0', 'c0', 'cols', 'names', 'nm', 'consts',
       '__builtins__', "}), print('x'), ({", 'build']


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@pytest.mark.parametrize(("part", "row_ids"), [("__class__", True), ('q"q', False), ("cols", True)])
def test_odd_names_give_the_automatons_rows(part: str, row_ids: bool) -> None:
    rnd = random.Random(7)
    events = [{part: rnd.randrange(3), "ts": i, "x": rnd.randrange(10), "v": rnd.choice([1, 2.5, "t", None, True, 2**70])}
              for i in range(300)]
    measures = ", ".join(f"{agg}.v AS {_quoted(name)}" for agg, name in
                         zip(["FIRST(A", "LAST(B", "C"] * 10, [m for m in ODD if m != part])).replace("(A.v", "(A.v)").replace("(B.v", "(B.v)")
    sql = (f"SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY {_quoted(part)} ORDER BY ts MEASURES {measures} "
           f"PATTERN (A+ B* C) DEFINE A AS x < 4, B AS x < 8, C AS x >= 8)")
    cuts = [37, 100, 101, 250]
    fast = _run(sql, events, cuts, True, row_ids, 1)
    slow = _run(sql, events, cuts, False, row_ids, None)
    assert fast == slow
    assert fast and {k for k, _, _ in fast[0]} >= {part, "def", "ü", "}), print('x'), ({"}
