"""Batch-DFA rules share by stepped history after Engine.restore: same rows as an unrestored run and the automaton, and the sharing itself."""

from __future__ import annotations

import collections
import pickle
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep.batch_dfa as batch_dfa
import cep.engine as engine_mod
from cep.engine import SNAPSHOT_MAGIC, SNAPSHOT_VERSION, Engine
from cep.operator import STATE_VERSION
from cep.safe_pickle import loads as safe_loads
from cep.sharing import rejoin_histories
from patterns.rules import parse_rule_text

# histories are the batch DFA's (compiled with numba, a dependency): with CEP_NO_NUMBA=1 no rule
# steps on it, so there is nothing to share or restore (tests/cep/test_compiled.py covers that mode)
pytestmark = pytest.mark.skipif(not batch_dfa._numba_ok(), reason="the batch DFA needs numba (CEP_NO_NUMBA is set)")

HEAD = "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts\n"

# condition texts recur across rules (thresholds from a short list) so that masks, PREV values
# and key ids are shared between them; x is an integer walk, y a float with some nulls
SHAPES = (
    "MEASURES FIRST(U.ts) AS t0, LAST(U.ts) AS t1, COUNT(U.*) AS n\n"
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (U{{{n},}}) DEFINE U AS U.x > PREV(U.x))",
    "MEASURES A.ts AS t0, B.ts AS t1, B.x AS bx\n"
    "PATTERN (A B) DEFINE A AS A.x >= {a} AND PREV(A.x) < {a}, B AS B.x > PREV(B.x, 2))",
    "MEASURES A.ts AS t0, A.y AS ay\nPATTERN (A) DEFINE A AS A.y > PREV(A.y) + {a})",
    "MEASURES FIRST(D.ts) AS t0, LAST(U.ts) AS t1\n"
    "AFTER MATCH SKIP PAST LAST ROW PATTERN (D{{{n},}} U+) DEFINE D AS D.x < PREV(D.x), U AS U.x > PREV(U.x))",
    "MEASURES A.ts AS t0, B.ts AS t1\n"
    "PATTERN (A B) WITHIN INTERVAL '{w}' MILLISECOND DEFINE A AS A.x > PREV(A.x, 3), B AS B.y < {a})",
)


def _rules(rnd: random.Random, n: int = 24) -> list:
    out = []
    for i in range(n):
        shape = i % len(SHAPES)
        sql = HEAD + SHAPES[shape].format(a=rnd.choice([2, 3]), n=rnd.choice([2, 3]), w=rnd.choice([5, 9]))
        out.append(parse_rule_text(sql, f"r{i}_{shape}"))
    return out


def _events(rnd: random.Random, keys: int = 3, per_key: int = 200) -> list[dict]:
    """Keys interleaved, a couple of hundred rows each (some late for every rule, some null y)."""
    walk = dict.fromkeys(range(keys), 5)
    left = dict.fromkeys(range(keys), per_key)
    now, out = 0, []
    while left:
        k = rnd.choice(list(left))
        walk[k] = max(0, min(12, walk[k] + rnd.choice([-2, -1, -1, 0, 1, 1, 2])))
        now += rnd.choice([0, 1, 1, 2])
        t = now - (3 if rnd.random() < 0.02 else 0)
        y: Any = None if rnd.random() < 0.02 else walk[k] / 2 + rnd.choice([0.0, 0.25])
        out.append({"k": f"key{k}", "ts": t, "x": walk[k], "y": y})
        left[k] -= 1
        if not left[k]:
            del left[k]
    return out


def _rows(outs: list) -> dict[str, list]:
    got: dict[str, list] = collections.defaultdict(list)
    for o in outs:
        for kind in ("matches", "late", "errors"):
            got[kind].extend(repr(sorted(r.items())) for r in getattr(o, kind))
    return got


def _histories(eng: Engine) -> dict[str, int | None]:
    return {name: op.keyed_state.history for name, op in eng.operators.items() if op.keyed_state is not None}


def _groups(h: dict[str, int | None]) -> set[frozenset[str]]:
    """Which rules have the same (known) history."""
    by: dict[int, set[str]] = collections.defaultdict(set)
    for name, x in h.items():
        if x is not None:
            by[x].add(name)
    return {frozenset(v) for v in by.values() if len(v) > 1}


class _Reads:
    """Counts the batch DFA's reads of PREV values from before a batch (one per rule without sharing)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.n = 0
        for name in ("fills", "fill_numbers"):
            real = getattr(batch_dfa.BatchDFA, name)

            def spy(self_, *args: Any, _real: Any = real) -> Any:
                self.n += 1
                return _real(self_, *args)

            monkeypatch.setattr(batch_dfa.BatchDFA, name, spy)


def _run(rules: list, batches: list[list[dict]], restore_after: int | None, fresh: bool) -> tuple[dict, Engine]:
    eng = Engine(rules)
    outs = []
    for i, b in enumerate(batches):
        outs.append(eng.process(b))
        if i == restore_after:
            data = eng.snapshot()
            if fresh:
                eng = Engine(rules)
            eng.restore(data)
    outs.append(eng.finish())
    return _rows(outs), eng


def _cut(rnd: random.Random, events: list[dict], n: int) -> list[list[dict]]:
    cuts = sorted(rnd.sample(range(1, len(events)), n - 1))
    return [events[lo:hi] for lo, hi in zip([0, *cuts], [*cuts, len(events)])]


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), nbatches=st.integers(3, 6), fresh=st.booleans())
def test_restored_rules_give_the_rows_of_an_unrestored_run_and_of_the_automaton(seed: int, nbatches: int, fresh: bool) -> None:
    rnd = random.Random(seed)
    rules = _rules(rnd)
    batches = _cut(rnd, _events(rnd), nbatches)
    at = rnd.randrange(nbatches - 1)  # restore after this batch: at least one batch follows
    want, plain = _run(rules, batches, None, False)
    got, eng = _run(rules, batches, at, fresh)
    assert got == want
    assert _groups(_histories(eng)) == _groups(_histories(plain))
    assert _groups(_histories(eng))  # (rules do share by history at the end of both runs)
    old = batch_dfa.USE_BATCH_DFA
    batch_dfa.USE_BATCH_DFA = False
    try:
        ref, auto = _run(rules, batches, at, fresh)
    finally:
        batch_dfa.USE_BATCH_DFA = old
    assert all(op.keyed_state is None for op in auto.operators.values())
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in ref.items()}
    assert want["matches"] and want["late"]


def _prefix(rules: list, batches: list[list[dict]]) -> Engine:
    eng = Engine(rules)
    for b in batches:
        eng.process(b)
    return eng


def test_restored_rules_share_what_they_shared_before(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(15)
    rules = _rules(rnd)
    batches = _cut(rnd, _events(rnd), 4)
    eng = _prefix(rules, batches[:2])
    before = _groups(_histories(eng))
    assert before and max(len(g) for g in before) >= 10
    data = eng.snapshot()
    restored = Engine(rules)
    restored.restore(data)
    assert _groups(_histories(restored)) == before  # the same rules together, under new numbers
    unknown = Engine(rules)
    monkeypatch.setattr(engine_mod, "rejoin_histories", lambda states: 0)  # the engine before: no history
    unknown.restore(data)
    monkeypatch.undo()
    assert not _groups(_histories(unknown))
    reads = _Reads(monkeypatch)
    counts = {}
    for name, e in (("unrestored", eng), ("restored", restored), ("unknown", unknown)):
        reads.n = 0
        out = e.process(batches[2])
        counts[name] = (reads.n, sorted(repr(sorted(r.items())) for r in out.matches))
    # one read of each PREV input per history, as before the snapshot; without the history every
    # rule reads its own
    assert counts["restored"] == counts["unrestored"]
    assert counts["unknown"][1] == counts["unrestored"][1]
    assert counts["restored"][0] * 2 < counts["unknown"][0]
    assert _groups(_histories(restored)) == _groups(_histories(eng))


def _edit_rules(data: bytes, edit: Any) -> bytes:
    """An engine snapshot with ``edit(name, batch_dfa_state)`` applied to every rule's batch-DFA state."""
    assert data.startswith(SNAPSHOT_MAGIC)
    body = safe_loads(data[7:], "test")
    for name, blob in body["rules"].items():
        state = safe_loads(blob[1:], "test")
        if state.get("batch_dfa") is not None:
            edit(name, state["batch_dfa"])
        body["rules"][name] = bytes([STATE_VERSION]) + pickle.dumps(state, protocol=5)
    return SNAPSHOT_MAGIC + bytes([SNAPSHOT_VERSION]) + pickle.dumps(body, protocol=5)


def test_a_snapshot_without_histories_restores_with_no_sharing_by_history() -> None:
    rnd = random.Random(3)
    rules = _rules(rnd)
    batches = _cut(rnd, _events(rnd), 4)
    want, _ = _run(rules, batches, None, False)
    eng = Engine(rules)
    outs = [eng.process(b) for b in batches[:2]]
    old = _edit_rules(eng.snapshot(), lambda name, s: s.pop("history"))  # as written before histories were saved
    restored = Engine(rules)
    restored.restore(old)
    assert _histories(restored) and not _groups(_histories(restored))
    outs += [restored.process(b) for b in batches[2:]] + [restored.finish()]
    assert _rows(outs) == want


def test_a_rule_with_another_history_under_the_same_number_is_kept_apart() -> None:
    rnd = random.Random(7)
    rules = _rules(rnd)
    batches = _cut(rnd, _events(rnd), 4)
    late = parse_rule_text(HEAD + SHAPES[0].format(n=2), "late_comer")  # same conditions as r0, added later
    eng = _prefix(rules, batches[:1])
    eng.reload([*rules, late])
    for b in batches[1:3]:
        eng.process(b)
    h = _histories(eng)
    assert h["late_comer"] != h["r0_0"] and h["r0_0"] == h["r5_0"]
    # a corrupt snapshot: the late comer saved under the others' number
    data = _edit_rules(eng.snapshot(), lambda name, s: s.update(history=h["r0_0"]) if name == "late_comer" else None)
    restored = Engine([*rules, late])
    restored.restore(data)
    got = _histories(restored)
    assert got["late_comer"] is None  # its keys' row counts differ: no history, so no sharing
    assert got["r0_0"] is not None and got["r0_0"] == got["r5_0"]
    ref = Engine([*rules, late])
    ref.restore(_edit_rules(eng.snapshot(), lambda name, s: None))
    assert _rows([restored.process(batches[3]), restored.finish()]) == _rows([ref.process(batches[3]), ref.finish()])


def test_states_that_differ_in_a_value_prev_reads_are_not_joined() -> None:
    rnd = random.Random(11)
    rules = _rules(rnd)
    batches = _cut(rnd, _events(rnd), 3)
    eng = _prefix(rules, batches[:2])
    blobs = {name: op.snapshot() for name, op in eng.operators.items()}
    fresh = Engine(rules)
    for name, blob in blobs.items():
        fresh.operators[name].restore(blob)
    states = {name: op.keyed_state for name, op in fresh.operators.items() if op.keyed_state is not None}
    a, b, c = states["r0_0"], states["r5_0"], states["r10_0"]
    assert a.restored_history == b.restored_history == c.restored_history is not None
    ci = a.a.columns.index("x")
    last = int(b.k[3, 0])  # key 0's last row: what PREV(x) reads first in the next batch
    b.cols[ci][last] += 1
    assert rejoin_histories([a, b, c]) == 2
    assert a.history == c.history is not None and b.history is None
    assert a.restored_history is None  # (consumed)
    assert rejoin_histories([a, b, c]) == 0  # nothing saved any more


def test_rejoining_compares_typed_values_and_nan_is_nan() -> None:
    from cep.sharing import _back_view

    have = np.array([True, True])
    assert _back_view(have, np.array([1.0, np.nan])) == _back_view(have, np.array([1.0, np.nan]))
    assert _back_view(have, np.array([1, float("nan")], dtype=object)) == _back_view(have, np.array([1, float("nan")], dtype=object))
    assert _back_view(have, np.array([1, 2], dtype=object)) != _back_view(have, np.array([1.0, 2], dtype=object))
    assert _back_view(have, np.array([1, 2])) != _back_view(np.array([True, False]), np.array([1, 2]))
