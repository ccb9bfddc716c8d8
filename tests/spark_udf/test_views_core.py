"""Table-table views in the Spark worker core, without Spark: the view's changelog group and the groups of
rules joining the view, played through Spark's stateful-stage contract in plain Python (rows cut into
chunks, the inputs interleaved at random, a restart from the saved blobs anywhere), give the embedded
engine's view changelog and rule rows."""

from __future__ import annotations

import json
import pickle
import random
import zlib
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cep.engine import Engine
from patterns.rules import parse_rules
from spark_udf.api import _table_bindings, _view_rules
from spark_udf.core import GroupCore, InputLayout, RuleSpec
from spark_udf.keyed import KEYED_KINDS, kind_of
from spark_udf.tables import bucket_columns, rule_join
from tests.spark_udf.tables_workload import own_columns

RULES = """
tables:
  - {name: accounts, from: account_changes, primary_key: id, columns: [tier, region], time_field: ts}
  - {name: regions, from: region_changes, primary_key: region, columns: [country], time_field: ts, lateness: 20ms}
views:
  - name: account_regions
    sql: |
      SELECT a.tier, a.region, r.country FROM accounts AS a LEFT JOIN regions AS r ON a.region = r.region
rules:
  - name: gold_payment
    sql: |
      SELECT * FROM payments AS p JOIN account_regions FOR SYSTEM_TIME AS OF p.ts AS v ON p.account = v.id
      MATCH_RECOGNIZE (PARTITION BY account ORDER BY ts MEASURES A.ts AS t, A.country AS country
        AFTER MATCH SKIP PAST LAST ROW PATTERN (A) DEFINE A AS A.tier = 'gold')
  - name: per_country
    kind: analytics
    sql: |
      SELECT country, COUNT(*) AS n, window_start
      FROM payments AS p LEFT JOIN account_regions FOR SYSTEM_TIME AS OF p.ts AS v ON p.account = v.id
      GROUP BY country, TUMBLE(ts, INTERVAL '100' MILLISECOND)
"""
STREAMS = ("payments", "account_changes", "region_changes")
COLUMNS = ["account", "ts", "amount", "id", "tier", "region", "country", "__deleted", "stream"]
TYPES = {"account": "bigint", "ts": "bigint", "amount": "bigint", "id": "bigint", "tier": "string",
         "region": "string", "country": "string", "__deleted": "string", "stream": "string"}


def workload(seed: int, files: int) -> list[dict[str, list[dict]]]:
    """Per micro-batch, each input's rows: file i covers [100 i, 100 i + 100); from the second on each
    changelog leads with a late change, and some changes are deletes (an account, a region)."""
    rnd = random.Random(seed)
    out: list[dict[str, list[dict]]] = []
    regions = ["R1", "R2", "R3"]
    for i in range(files):
        base = 100 * i
        acc: list[dict] = []
        reg: list[dict] = []
        if i == 0:
            acc = [{"id": a, "ts": a, "tier": rnd.choice(["gold", "silver"]), "region": rnd.choice(regions)}
                   for a in range(1, 6)]
            reg = [{"region": r, "ts": j, "country": rnd.choice(["NL", "DE"])} for j, r in enumerate(regions[:2])]
        else:
            acc.append({"id": 1, "ts": max(c["ts"] for c in out[-1]["account_changes"]) - 1, "tier": "gold",
                        "region": "R9"})  # late: not applied
            reg.append({"region": "R1", "ts": max(c["ts"] for c in out[-1]["region_changes"]) - 30,
                        "country": "XX"})  # late for a 20 ms lateness
            for t in sorted(rnd.sample(range(base, base + 100), 4)):
                a = rnd.randint(1, 6)
                if rnd.random() < 0.2:
                    acc.append({"id": a, "ts": t, "__deleted": "true"})
                else:
                    acc.append({"id": a, "ts": t, "tier": rnd.choice(["gold", "silver"]),
                                "region": rnd.choice(regions)})
            for t in sorted(rnd.sample(range(base, base + 100), 3)):
                r = rnd.choice(regions)
                if rnd.random() < 0.2:
                    reg.append({"region": r, "ts": t, "__deleted": "true"})
                else:
                    reg.append({"region": r, "ts": t, "country": rnd.choice(["NL", "DE", "FR"])})
        pays = [{"account": rnd.randint(1, 6), "ts": t, "amount": rnd.randint(1, 50)}
                for t in sorted(rnd.sample(range(base + 6, base + 100), 12))]
        out.append({"account_changes": acc, "region_changes": reg, "payments": pays})
    end = 100 * files + 500  # both changelogs move on, so that the view passes every payment
    out.append({"account_changes": [{"id": 99, "ts": end, "tier": "silver", "region": "R1"}],
                "region_changes": [{"region": "R7", "ts": end, "country": "NL"}], "payments": []})
    return out


def embedded(rules: Any, batches: list[dict[str, list[dict]]]) -> Any:
    """The engine fed the same micro-batches: the changes (accounts, regions), then the payments; no finish."""
    eng = Engine(rules, streams=list(STREAMS))
    out = eng.process([])
    for b in batches:
        for s in ("account_changes", "region_changes", "payments"):
            out.extend(eng.process(b[s], stream=s))
    return out


def _core(rules: Any, buckets: int) -> tuple[GroupCore, list[Any]]:
    keyed = list(rules)
    layout = InputLayout(STREAMS, ())
    bindings = _table_bindings(keyed, dict(rules.tables), layout, TYPES, dict(rules.views))
    views = _view_rules(dict(rules.views), dict(rules.tables), layout, keyed)
    core, env = GroupCore.for_rules(keyed, TYPES, buckets)
    from spark_udf.schema import Envelope

    fields = {r.name: (kind_of(r), KEYED_KINDS[kind_of(r)].output_fields(r, TYPES)) for r in keyed}
    fields.update({v.name: (v.kind, KEYED_KINDS[v.kind].output_fields(v, TYPES)) for v in views})
    env = Envelope.build(fields)
    core.envelope_columns = list(env.columns)
    core.specs = {r.name: RuleSpec.of(r, env) for r in keyed}
    for name, b in bindings.items():
        core.specs[name].table = b
    for v in views:
        core.specs[v.name] = RuleSpec.of(v, env)
    return core, views


def _hash(values: tuple, buckets: int) -> int:
    return zlib.crc32(repr(values).encode()) % buckets


def simulate(rules: Any, batches: list[dict[str, list[dict]]], buckets: int, chunk: int, seed: int,
             restart_at: int) -> pd.DataFrame:
    """Spark's contract for the rule set (as api._assign_groups routes rows): a payment to its rule's
    bucket, a change row to every group of each rule joining the view and to the view's group."""
    rnd = random.Random(seed)
    core, views = _core(rules, buckets)
    state: dict = {}
    timeouts: dict = {}
    frames: list[pd.DataFrame] = []
    watermark = 0

    def call(key, chunks, timed_out):
        frame, new_state, timeout = core.stream_group(key, chunks, state.get(key), watermark, timed_out)
        if frame is not None:
            frames.append(frame)
        state.pop(key, None) if new_state is None else state.__setitem__(key, new_state)
        timeouts.pop(key, None)
        if timeout is not None:
            timeouts[key] = timeout

    for b, batch in enumerate(batches):
        if b == restart_at:
            core = pickle.loads(pickle.dumps(core))
        queues = [[dict(r, stream=s) for r in batch[s]] for s in STREAMS]
        rows = []  # the three inputs interleaved at random, each in its own order
        while any(queues):
            q = rnd.choice([q for q in queues if q])
            rows.append(q.pop(0))
        groups: dict[tuple, list[dict]] = {}
        for row in rows:
            for r in rules:
                keys = bucket_columns(tuple(KEYED_KINDS[kind_of(r)].key_columns(r)), rule_join(r))
                if row["stream"] == "payments":
                    targets = [_hash(tuple(row.get(k) for k in keys), buckets) if keys else 0]
                else:
                    targets = list(range(buckets if keys else 1))
                for g in targets:
                    groups.setdefault((r.name, g), []).append(row)
            if row["stream"] != "payments":
                for v in views:
                    groups.setdefault((v.name, 0), []).append(row)
        for key, grows in groups.items():
            recs = [{c: g.get(c) for c in COLUMNS} for g in grows]
            call(key, [pd.DataFrame(recs[i: i + chunk], columns=COLUMNS) for i in range(0, len(recs), chunk)], False)
        for key in [k for k, t in list(timeouts.items()) if k not in groups and t < watermark]:
            call(key, [], True)
        watermark = max([watermark] + [p["ts"] for p in batch["payments"]])
    return pd.concat(frames, ignore_index=True)


def _sorted_json(v: Any) -> Any:
    return None if v is None else json.dumps(json.loads(v) if isinstance(v, str) else v, sort_keys=True)


def _view_row(r: dict[str, Any]) -> tuple:
    ts = r["ts_ms"]
    return (r.get("view"), r["op"], _sorted_json(r["key"]), _sorted_json(r["before"]), _sorted_json(r["after"]),
            None if ts is None or (isinstance(ts, float) and np.isnan(ts)) else int(ts))


VIEW_COLUMNS = ("view", "op", "key", "before", "after", "ts_ms")


def spark_side(rows: list[dict[str, Any]]) -> tuple[Counter, Counter, Counter]:
    """A run's envelope rows as (view changelog rows, rule rows, late rows), comparable with :func:`engine_side`."""
    rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()} for r in rows]
    view = Counter(_view_row(r) for r in rows if r["output"] == "match" and r["kind"] == "view")
    rules = Counter(own_columns({k: v for k, v in r.items() if k not in VIEW_COLUMNS})
                    for r in rows if r["output"] == "match" and r["kind"] != "view")
    late = Counter((r["rule"], r["reason"]) for r in rows if r["output"] == "late")
    return view, rules, late


def engine_side(out: Any) -> tuple[Counter, Counter, Counter]:
    view = Counter(_view_row(r) for r in out.matches if "view" in r)
    rules = Counter(own_columns({k: v for k, v in m.items() if k not in ("correction", "retract")})
                    for m in out.matches if "view" not in m)
    late = Counter((r["rule"], r["reason"]) for r in out.late)
    return view, rules, late


@pytest.mark.parametrize("seed", range(3))
def test_a_view_and_rules_joining_it_in_the_core_give_the_embedded_rows(seed: int) -> None:
    rnd = random.Random(seed)
    rules = parse_rules(RULES)
    batches = workload(seed, rnd.randint(2, 4))
    buckets, chunk = rnd.randint(1, 3), rnd.randint(1, 7)
    frame = simulate(rules, batches, buckets, chunk, seed, restart_at=rnd.randint(1, len(batches) - 1))
    got = spark_side(frame.to_dict("records"))
    want = engine_side(embedded(rules, batches))
    assert got == want
    assert {op for _, op, *_ in want[0]} >= {"c", "u", "d"}
    assert {dict(m)["rule"] for m in want[1]} == {"gold_payment", "per_country"}
    assert sum(1 for (_, reason) in want[2] if "late change" in reason) >= 2  # each table's, written once
