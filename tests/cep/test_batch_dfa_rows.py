"""The batch DFA's output rows (cep/batch_dfa.py ``_rows``) equal the automaton's, value types included."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
from cep.operator import PatternOperator
from patterns.rules import parse_rule_text

# several measures read the same columns (one gather per column), variables that may match no
# row (NULL), two partition columns, a classifier, a count and an expression over the leaves
SQL = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k, g ORDER BY ts
   MEASURES FIRST(A.v) AS a_first, LAST(B.v) AS b_last, D.v AS d_v, FIRST(B.v) AS b_first,
            LAST(A.ts) AS a_ts, C.v AS c_v, CLASSIFIER() AS cls, COUNT(B.*) AS nb, MATCH_NUMBER() AS mn,
            C.ts AS c_ts, FIRST(D.ts) AS d_ts{extra}
   AFTER MATCH SKIP {skip}
   PATTERN (A+ B* D? C) DEFINE A AS x < 4, B AS x < 8, D AS x = 8, C AS x >= 8)"""

# what a batch's ``v`` holds: each batch draws one kind, so a match may read rows of several
_KINDS = {
    "int": lambda r: r.randrange(-5, 50),
    "float": lambda r: r.randrange(-50, 50) / 4,
    "text": lambda r: f"v{r.randrange(100)}",
    "none": lambda r: None,
    "big": lambda r: 2**60 + r.randrange(10),
    "mixed": lambda r: r.choice([1, 2.5, "t", None, True]),
}


def _events(rnd: random.Random, n: int, keys: int, cuts: list[int]) -> list[dict]:
    out = []
    bounds = [0] + cuts + [n]
    for lo, hi in zip(bounds, bounds[1:]):
        draw = _KINDS[rnd.choice(sorted(_KINDS))]
        for i in range(lo, hi):
            out.append({"k": rnd.randrange(keys), "g": rnd.choice(["a", "b"]), "ts": i, "x": rnd.randrange(10),
                        "v": draw(rnd)})
    return out


def _run(sql: str, events: list[dict], cuts: list[int], use: bool, row_ids: bool, snap_at: int | None) -> list:
    old = batch_dfa.USE_BATCH_DFA
    batch_dfa.USE_BATCH_DFA = use
    try:
        compiled = parse_rule_text(sql).compiled
        op = PatternOperator(compiled, name="r")
        op.row_ids = row_ids
        rows: list[dict[str, Any]] = []
        bounds = [0] + cuts + [len(events)]
        for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            rows += op.process(events[lo:hi]).matches
            if b == snap_at:
                data = op.snapshot()
                op = PatternOperator(compiled, name="r")
                op.row_ids = row_ids
                op.restore(data)
        rows += op.finish().matches
        assert (op._keyed is not None) == use
        return [[(k, type(v).__name__, v) for k, v in r.items()] for r in rows]
    finally:
        batch_dfa.USE_BATCH_DFA = old


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), keys=st.integers(1, 3), n=st.integers(50, 400), ncuts=st.integers(0, 8),
       skip=st.sampled_from(["PAST LAST ROW", "TO NEXT ROW"]), row_ids=st.booleans(), expr=st.booleans(),
       snap=st.booleans())
def test_rows_names_order_and_types_are_the_automatons(seed, keys, n, ncuts, skip, row_ids, expr, snap):
    """Matches that start in an earlier batch (values read from the store) or in this one (from
    the batch), columns whose values change type between batches, NULL measures, row ids,
    a snapshot and restore between batches: the same rows, key order and value types."""
    rnd = random.Random(seed)
    cuts = sorted({rnd.randrange(1, n) for _ in range(ncuts)})
    events = _events(rnd, n, keys, cuts)
    extra = ", COALESCE(D.v, LAST(B.v)) AS d_or_b" if expr else ""
    sql = SQL.format(extra=extra, skip=skip)
    snap_at = rnd.randrange(0, len(cuts) + 1) if snap else None
    fast = _run(sql, events, cuts, True, row_ids, snap_at)
    slow = _run(sql, events, cuts, False, row_ids, None)
    assert fast == slow
    assert fast  # (the inputs give matches: the comparison is not of two empty lists)


def test_a_rule_without_measures_or_partition_gives_one_row_per_match():
    """No value lists at all: each match is a row of the rule's name only."""
    sql = "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) DEFINE A AS x < 3, B AS x >= 3)"
    events = [{"ts": i, "x": x} for i, x in enumerate([1, 5, 2, 2, 7, 9, 0, 4])]
    fast = _run(sql, events, [3], True, False, None)
    assert fast == _run(sql, events, [3], False, False, None)
    assert fast == [[("rule", "str", "r")]] * 3


@settings(max_examples=60, deadline=None, derandomize=True)
@given(names=st.lists(st.sampled_from(["k", "a", "b", "rule", "_id", "c"]), min_size=0, max_size=7),
       nconst=st.integers(0, 2), nm=st.integers(0, 5), data=st.data())
def test_rows_built_as_dict_zip_builds_them(names, nconst, nm, data):
    """``_make_rows`` (template copies filled column by column) gives what ``dict(zip(names, row))``
    gives per row: every name once, at its first place, with its last value; the constants
    wherever they fall, repeated names among lists and constants alike."""
    nconst = min(nconst, len(names))
    nvary = data.draw(st.integers(0, len(names) - nconst))
    consts = tuple(f"const{i}" for i in range(nconst))
    nlists = len(names) - nconst
    cols = [[(j, i) for i in range(nm)] for j in range(nlists)]
    parts = [*cols[:nvary], *([c] * nm for c in consts), *cols[nvary:]]
    want = [dict(zip(names, row)) for row in zip(*parts)] if parts else [{} for _ in range(nm)]
    got = batch_dfa._make_rows(cols, names, consts, nvary, nm)
    assert [list(r.items()) for r in got] == [list(r.items()) for r in want]
    assert len({id(r) for r in got}) == nm  # (each row its own dict: a caller may change one)


def test_a_match_starting_at_the_batchs_first_row_reads_the_batch():
    """The store keeps a row per key from the batch before (``PREV`` reads it), so the next batch's
    rows take store indices from 2 on; a match that starts exactly at the batch's first store index
    reads every value from the batch (the compiled loop's gather index is then relative to the
    batch): the rows it matched, not the rows two places further."""
    sql = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
       MEASURES A.ts AS a_ts, A.x AS a_x, LAST(B.x) AS b_x
       PATTERN (A B) DEFINE A AS A.x = 1, B AS B.x > PREV(B.x))"""
    first = [{"k": k, "ts": t, "x": 5 + t} for t in range(3) for k in ("p", "q")]
    second = [{"k": "p", "ts": 3 + i, "x": x} for i, x in enumerate([1, 2, 0, 9])]
    events = first + second
    fast = _run(sql, events, [len(first)], True, False, None)
    assert fast == _run(sql, events, [len(first)], False, False, None)
    assert fast == [[("k", "str", "p"), ("a_ts", "int", 3), ("a_x", "int", 1), ("b_x", "int", 2), ("rule", "str", "r")]]
