"""Fast paths of the automaton give the same rows as the general ones they shortcut."""

from __future__ import annotations

import pytest

from cep.engine import Engine
from patterns.rules import parse_rules


@pytest.mark.parametrize("skip", ["PAST LAST ROW", "TO NEXT ROW"])
def test_fast_measures_equal_the_node_chain(skip):
    """DFA matches read without building their node chain give the same rows as with it."""
    import random

    sql = f"""
rules:
  - name: r
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.x AS a_x, FIRST(B.ts) AS b0, LAST(B.x) AS b_last, C.x AS c_x, FIRST(ts) AS t0,
                 ts AS t1, LAST(U.ts) AS u_last, FIRST(U.x) AS u_first, CLASSIFIER() AS cls,
                 MATCH_NUMBER() AS mn
        AFTER MATCH SKIP {skip}
        PATTERN (A (B | C)+? D?)
        SUBSET U = (B, C)
        DEFINE A AS x > 5, B AS x < PREV(x), C AS x > 7, D AS x = 0)
"""
    rnd = random.Random(4)
    events = [{"k": rnd.randrange(4), "ts": i, "x": rnd.randrange(10)} for i in range(3000)]
    outs = []
    for fast in (True, False):
        eng = Engine(parse_rules(sql))
        a = eng.operators["r"].automaton
        assert a.fast_plan is not None
        if not fast:
            a.fast_plan = None
        outs.append(eng.run([events[:1000], events[1000:]]).matches)
    assert outs[0] == outs[1] and len(outs[0]) > 100
    assert any(r["c_x"] is None for r in outs[0]) and any(r["cls"] == "D" for r in outs[0])
