"""Batch-DFA rules of one stepped history: mask columns taken from the shared conjunct masks by signature equal the evaluated ones."""

from __future__ import annotations

import random
import sys
import threading

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
import cep.operator as operator_mod
from cep.engine import Engine
from patterns.rules import parse_rule_text

HEAD = "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts\n"

# conditions repeat across rules (x > PREV(x), y < 3) so that most rules find every conjunct's mask
# in the batch's cache; y is an int column in some batches and a float one in others, and x jumps
# past 2**53 in the last batch (PREV then reads it as Python ints, not float64)
SHAPES = (
    "MEASURES FIRST(U.ts) AS t0, LAST(U.ts) AS t1, COUNT(U.*) AS n\n"
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (U{{{n},}}) DEFINE U AS U.x > PREV(U.x))",
    "MEASURES A.ts AS t0, B.ts AS t1, B.y AS yb\n"
    "PATTERN (A B) DEFINE A AS A.y < {a} AND A.x > PREV(A.x), B AS B.y >= PREV(B.y))",
    "MEASURES S.ts AS t0, LAST(D.ts) AS t1\n"
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (S D+) DEFINE D AS D.x < PREV(D.x))",
    "MEASURES A.ts AS t0\nPATTERN (A) DEFINE A AS A.y > PREV(A.y, 2) + {a})",
    # never starts: no x reaches it
    "MEASURES A.ts AS t0, B.ts AS t1\nPATTERN (A B) DEFINE A AS A.x > 2000000000000000000, B AS B.x < PREV(B.x))",
    # new combinations of conditions the rules above evaluate: their masks come from those rules'
    # conjunct masks (the first variable of the second one has no condition: every row)
    "MEASURES A.ts AS t0, LAST(B.ts) AS t1\nPATTERN (A B+) DEFINE A AS A.x > PREV(A.x), B AS B.x < PREV(B.x))",
    "MEASURES S.ts AS t0, LAST(U.ts) AS t1\nAFTER MATCH SKIP PAST LAST ROW PATTERN (S U+ D)\n"
    "DEFINE U AS U.x > PREV(U.x), D AS D.y >= PREV(D.y) AND D.x < PREV(D.x))",
)


def _rules(rnd: random.Random, n: int) -> list:
    return [parse_rule_text(HEAD + SHAPES[i % len(SHAPES)].format(a=rnd.choice([1, 3]), n=rnd.choice([2, 3])),
                            f"r{i}") for i in range(n)]


def _batches(rnd: random.Random, keys: int, rows: int, nbatch: int) -> list[list[dict]]:
    x = {k: 5 for k in range(keys)}
    events = []
    for t in range(rows):
        k = rnd.randrange(keys)
        x[k] = max(0, x[k] + rnd.choice([-2, -1, 0, 1, 2]))
        events.append({"k": f"k{k}", "ts": t, "x": x[k], "y": rnd.randrange(6)})
    cuts = sorted(rnd.sample(range(1, rows), nbatch - 1))
    out = [events[lo:hi] for lo, hi in zip([0, *cuts], [*cuts, rows])]
    for b, evs in enumerate(out):
        if b % 2:  # y as a float column in this batch
            for e in evs:
                e["y"] = e["y"] + 0.5
    for e in out[-1]:  # the last batch: x past 2**53 in some rows (rules then evaluate PREV(x) row by row)
        if rnd.random() < 0.02:
            e["x"] += 2**60
    return out


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1))
def test_masks_by_signature_equal_the_evaluated_masks(seed: int) -> None:
    rnd = random.Random(seed)
    rules = _rules(rnd, 14)
    batches = _batches(rnd, keys=3, rows=900, nbatch=5)
    fast = operator_mod.PatternOperator._masks_by_history
    slow = operator_mod.PatternOperator._masks
    hits = [0]

    def checked(self, ko, cols):
        got = fast(self, ko, cols)
        if got is not None:
            hits[0] += 1
            # the same column evaluated the long way, without the shared caches
            ref = slow(self, cols, ko.starts, ko.ends, [], ko.seg_keys, None)
            assert got.dtype == ref.dtype and np.array_equal(got, ref), self.name
        return got

    def run(by_signature: bool, use_batch_dfa: bool = True) -> tuple[list, dict]:
        operator_mod.PatternOperator._masks_by_history = checked if by_signature else (lambda self, ko, cols: None)
        old = batch_dfa.USE_BATCH_DFA
        batch_dfa.USE_BATCH_DFA = use_batch_dfa  # (whatever CEP_BATCH_DFA says for the process)
        try:
            eng = Engine(rules)
            rows = [m for evs in batches for m in eng.process(evs).matches] + eng.finish().matches
            return rows, {n: vars(c) for n, c in eng.counts().items()}
        finally:
            operator_mod.PatternOperator._masks_by_history = fast
            batch_dfa.USE_BATCH_DFA = old

    got = run(True)
    assert hits[0] >= 2 * len(batches)  # (the path was taken: the test compares something)
    assert got == run(False)
    assert got == run(False, use_batch_dfa=False)  # the per-key automaton, the reference
    assert any(got[0])


def test_engines_in_threads_give_each_its_own_rows() -> None:
    """The kernels' output buffers are per thread: engines stepping in two threads at once (switching
    between them as often as the interpreter allows) give the rows each gives alone."""
    rnd = random.Random(7)
    rules = _rules(rnd, 8)
    data = [_batches(random.Random(s), keys=4, rows=1500, nbatch=4) for s in (1, 2)]

    def rows_of(batches: list[list[dict]]) -> list:
        eng = Engine(rules)
        return [m for evs in batches for m in eng.process(evs).matches] + eng.finish().matches

    alone = [rows_of(b) for b in data]
    got: list = [None, None]

    def work(i: int) -> None:
        for _ in range(3):
            got[i] = rows_of(data[i])

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert got == alone
    assert alone[0] and alone[1] and alone[0] != alone[1]
