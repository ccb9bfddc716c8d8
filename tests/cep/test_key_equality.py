"""Partition and group keys compare as values (1, 1.0 and true one key), alike in patterns and analytics, at any batch size."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cep.engine import Engine
from cep.events import read_events
from patterns.rules import parse_rules

# values Python's == joins in groups: {1, True, 1.0}, {0, False, 0.0}, {2**63, 2.0**63}; strings apart
VALUES = [1, True, 1.0, 0, False, 0.0, 2**63, 2.0**63, "1", "true", "a", -1]

RULES = """
rules:
  - name: pairs
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, LAST(B.ts) AS t1
        ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A B) DEFINE A AS x >= 0, B AS x >= 0)
  - name: counts
    kind: analytics
    sql: |
      SELECT k, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY k, TUMBLE(ts, INTERVAL '1' HOUR)
"""


def _run(path: Path, batch_size: int) -> list[dict]:
    eng = Engine(list(parse_rules(RULES).rules))
    out: list[dict] = []
    for b in read_events(str(path), batch_size=batch_size):
        out += eng.process(b).matches
    out += eng.finish().matches
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_keys_join_as_python_values_in_both_operators(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400  # keys with about a hundred rows each: runs cross every batch size below
    events = [{"k": VALUES[int(rng.integers(len(VALUES)))], "ts": i * 1000, "x": int(rng.integers(0, 5))} for i in range(n)]
    path = tmp_path / "e.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))

    # the reference: a Python dict keyed by the value (so by ==), rows in time order
    groups: dict[object, list[dict]] = {}
    for e in events:
        groups.setdefault(e["k"], []).append(e)
    assert len(groups) == 7  # {1,True,1.0} {0,False,0.0} {2**63} "1" "true" "a" -1
    want_pairs = sorted((g[i]["ts"], g[i + 1]["ts"]) for g in groups.values() for i in range(0, len(g) - 1, 2))
    want_counts = {k: (len(g), sum(e["x"] for e in g)) for k, g in groups.items()}

    for bs in (3, 64, 1000):
        rows = _run(path, bs)
        pairs = [r for r in rows if r["rule"] == "pairs"]
        got_pairs = sorted((r["t0"], r["t1"]) for r in pairs)
        assert got_pairs == want_pairs, bs
        for r in pairs:  # the reported key is one of the group's values
            first = next(e for e in events if e["ts"] == r["t0"])
            assert r["k"] == first["k"] and type(r["k"]) in (int, float, bool, str)
        counts = [r for r in rows if r["rule"] == "counts"]
        got = {}
        for r in counts:
            assert r["k"] not in got, (bs, r)  # one row per key class and window
            got[r["k"]] = (r["n"], r["s"])
        assert got == want_counts, bs
        # a string never joins a number or a boolean
        assert ("1" in got) and ("true" in got)
