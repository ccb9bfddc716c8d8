"""The stateful stage frees a quiet group's expired WITHIN partial matches by its timeout, on every stepping path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cep.batch_dfa as batch_dfa
from patterns.rules import parse_rules
from spark_udf.core import GroupCore
from spark_udf.state import decode_state
from tests.spark_udf.simulate import bucket_of, rows_of, run_stream

RULES_YAML = """
rules:
  - name: fixed
    lateness: 100
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, C.ts AS t1
        PATTERN (A B C) WITHIN INTERVAL '2' SECOND
        DEFINE A AS px > 6, B AS px < 5, C AS px > 4)
"""
COLUMNS = ["k", "ts", "px"]
TYPES = {"k": "string", "ts": "bigint", "px": "bigint"}


def _stored_partial_matches(core: GroupCore, key: tuple, stored: Any) -> int:
    spec, op, header = core._operator(core.rule_named(key[0]))
    op.restore(decode_state(*stored, header, core.state_version))
    return op.live_partial_matches()


@pytest.mark.parametrize("batch", [True, False])
def test_spark_state_of_a_quiet_group_is_freed_by_its_timeout(monkeypatch, batch) -> None:
    """Spark's stateful stage played in Python: a bucket whose key started a match and fell quiet
    asks for a timeout at its WITHIN deadline, and the timed-out call frees the partial match from
    the state store, with the batch DFA as with the automaton. (Before, the batch DFA asked for
    no timeout and the partial match stayed until new rows reached the bucket.)"""
    monkeypatch.setattr(batch_dfa, "USE_BATCH_DFA", batch)
    rules = list(parse_rules(RULES_YAML))
    buckets = 8
    core, _ = GroupCore.for_rules(rules, TYPES, buckets)
    rng = np.random.default_rng(3)
    quiet = [{"k": "quiet", "ts": 1000, "px": 9}, {"k": "quiet", "ts": 1100, "px": 1}]
    key = ("fixed", bucket_of(rules[0], quiet[0], buckets))
    # other keys, in other buckets, keep the watermark moving for 6 more micro-batches
    names = [f"k{i}" for i in range(40) if bucket_of(rules[0], {"k": f"k{i}"}, buckets) != key[1]]
    others = []
    for b in range(6):
        others.append([{"k": k, "ts": 2000 + 1000 * b + i, "px": int(rng.integers(0, 10))} for i, k in enumerate(names)])
    out, state, timeouts, wm = run_stream(core, rules, [quiet, *others], COLUMNS, buckets)
    # the quiet key's A B waited for C until 1000 + 2000; the watermark passed that long ago
    assert key in state and _stored_partial_matches(core, key, state[key]) == 0
    assert key not in timeouts
    assert all(r["k"] != "quiet" for r in rows_of(out, "match"))
    # the quiet key's rows and one batch that moves the watermark past them but not past the
    # deadline: the partial match is alive and its group asked for a timeout at the deadline in
    # Spark's terms (deadline + lateness - 1)
    _, state, timeouts, _ = run_stream(core, rules, [quiet, others[0]], COLUMNS, buckets)
    assert _stored_partial_matches(core, key, state[key]) == 1
    assert timeouts[key] == 1000 + 2000 + 100 - 1
