"""Joined rules in the Spark worker core, without Spark: Spark's stateful-stage contract played in plain
Python (every group of a joined rule gets every change row; rows cut into chunks, changes and events
interleaved; a restart from the saved blobs anywhere) gives the embedded engine's rows."""

from __future__ import annotations

import pickle
import random
import zlib
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import pytest

from patterns.rules import parse_rules
from spark_udf.core import GroupCore
from spark_udf.keyed import KEYED_KINDS, kind_of
from spark_udf.tables import (
    JoinedOperator,
    bucket_columns,
    keyed_columns,
    rule_join,
    split_snapshot,
    table_bindings,
    tick_stream,
)
from tests.spark_udf.tables_workload import (
    RULES,
    SEARCH_RULES,
    embedded,
    engine_outputs,
    search_metadata,
    spark_outputs,
    workload,
)

COLUMNS = ["account", "ts", "amount", "id", "tier", "country", "__deleted", "stream"]
TYPES = {"account": "bigint", "ts": "bigint", "amount": "bigint", "id": "bigint", "tier": "string",
         "country": "string", "__deleted": "string", "stream": "string"}


def _keyed(rule: Any, spec: Any) -> tuple[str, ...] | None:
    return keyed_columns(tuple(KEYED_KINDS[kind_of(rule)].key_columns(rule)), rule_join(rule), spec)


def _core(rules: Any, buckets: int) -> GroupCore:
    keyed = [r for r in rules if kind_of(r) in KEYED_KINDS]
    core, _ = GroupCore.for_rules(keyed, TYPES, buckets)
    bindings = table_bindings(keyed, dict(rules.tables), lambda spec: True, lambda r, s: _keyed(r, s) is not None)
    for name, b in bindings.items():
        core.specs[name].table = b
    return core


def _hash(values: tuple, buckets: int) -> int:
    return zlib.crc32(repr(values).encode()) % buckets


def _groups(rule: Any, binding: Any, row: dict[str, Any], buckets: int) -> list[tuple[int, dict[str, Any]]]:
    """The groups of the rule a row goes to, and the row as it arrives there (as api._assign_groups)."""
    keys = _keyed(rule, binding.spec) if binding.keyed else None
    if keys is None:
        keys = bucket_columns(tuple(KEYED_KINDS[kind_of(rule)].key_columns(rule)), rule_join(rule))
    if row["stream"] != "account_changes":
        return [(_hash(tuple(row.get(k) for k in keys), buckets) if keys else 0, row)]
    if not binding.keyed:  # a replica: once to every group of the rule
        return [(b, row) for b in range(buckets if keys else 1)]
    pk = tuple(row.get(k) for k in binding.spec.primary_key)
    out = [(_hash(pk, buckets), row)]  # its key's group, hashed as the events' join columns are
    if all(v is not None for v in pk):  # and its time to every group
        out += [(b, dict(row, stream=tick_stream(binding.spec))) for b in range(buckets)]
    return out


def simulate(rules: Any, batches: list[tuple[list[dict], list[dict]]], buckets: int, chunk: int, seed: int,
             restart_at: int) -> pd.DataFrame:
    """Spark's contract (see simulate.py) for a joined rule set; the core is rebuilt from a pickled copy
    and the saved blobs before micro-batch ``restart_at``, as a restarted query rebuilds it."""
    rnd = random.Random(seed)
    core = _core(rules, buckets)
    state: dict = {}
    timeouts: dict = {}
    frames: list[pd.DataFrame] = []
    watermark = 0
    keyed = [r for r in rules if kind_of(r) in KEYED_KINDS]

    def call(key, chunks, timed_out):
        frame, new_state, timeout = core.stream_group(key, chunks, state.get(key), watermark, timed_out)
        if frame is not None:
            frames.append(frame)
        state.pop(key, None) if new_state is None else state.__setitem__(key, new_state)
        timeouts.pop(key, None)
        if timeout is not None:
            timeouts[key] = timeout

    for b, (changes, pays) in enumerate(batches):
        if b == restart_at:
            core = pickle.loads(pickle.dumps(core))
        ch = [dict(c, stream="account_changes") for c in changes]
        ev = [dict(p, stream="payments") for p in pays]
        rows = []  # the two inputs interleaved at random, each in its own order
        while ch or ev:
            rows.append((ch if ch and (not ev or rnd.random() < 0.5) else ev).pop(0))
        groups: dict[tuple, list[dict]] = {}
        for row in rows:
            for r in keyed:
                for g, got in _groups(r, core.specs[r.name].table, row, buckets):
                    groups.setdefault((r.name, g), []).append(got)
        for key, grows in groups.items():
            recs = [{c: g.get(c) for c in COLUMNS} for g in grows]
            call(key, [pd.DataFrame(recs[i: i + chunk], columns=COLUMNS) for i in range(0, len(recs), chunk)], False)
        for key in [k for k, t in list(timeouts.items()) if k not in groups and t < watermark]:
            call(key, [], True)
        watermark = max([watermark] + [p["ts"] for p in pays])
    for key in [k for k, t in list(timeouts.items()) if t < watermark]:
        call(key, [], True)
    return pd.concat(frames, ignore_index=True)


def _rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in rec.items()}
            for rec in frame.to_dict("records")]


@pytest.mark.parametrize("seed", range(4))
def test_joined_rules_in_the_core_give_the_embedded_rows(seed: int) -> None:
    rnd = random.Random(seed)
    rules = parse_rules(RULES)
    batches = workload(seed, rnd.randint(2, 5))
    buckets, chunk = rnd.randint(1, 4), rnd.randint(1, 9)
    frame = simulate(rules, batches, buckets, chunk, seed, restart_at=rnd.randint(1, len(batches) - 1))
    got = spark_outputs(_rows(frame))
    want = engine_outputs(embedded(rules, batches))
    assert got == want
    assert sum(got[0].values()) > 10 and got[1] and got[2]  # matches, late rows and LEFT JOIN errors


def test_a_joined_groups_blob_holds_the_operator_and_the_table() -> None:
    """What `cep spark state` reads back: the operator's own snapshot and the replica's rows."""
    rules = parse_rules(RULES)
    core = _core(rules, 1)
    changes, pays = workload(1, 1)[0]
    recs = [dict(c, stream="account_changes") for c in changes] + [dict(p, stream="payments") for p in pays]
    _, blob, _ = core.stream_group(("gold_pair", 0), [pd.DataFrame(recs, columns=COLUMNS)], None, 0, False)
    from spark_udf.state import BucketHeader, decode_state

    op, header = core._ops["gold_pair"]
    assert isinstance(op, JoinedOperator)
    op_bytes, table = split_snapshot(decode_state(blob[0], blob[1], header))
    fresh = KEYED_KINDS["pattern"].new_operator(rules.rules[0])
    fresh.restore(op_bytes)
    assert fresh.counts.read == len(pays)
    assert table["counts"]["applied"] == len(changes)
    assert isinstance(header, BucketHeader) and "+table:accounts:" in header.fingerprint


def test_every_replica_applies_a_micro_batchs_changes_alike_whatever_their_order() -> None:
    """Spark fixes no order between a micro-batch's input partitions: two groups handed the same
    changes in other orders and chunks (a tie of one key at one time, a change behind another of its
    micro-batch, one behind the previous micro-batch) keep byte-identical replicas."""
    rules = parse_rules(RULES)
    core = _core(rules, 2)
    first = [dict(id=a, ts=a, tier="silver", country="NL", stream="account_changes") for a in range(1, 5)]
    batch = [dict(id=1, ts=50, tier="gold", country="DE"), dict(id=1, ts=50, tier="silver", country="FR"),
             dict(id=2, ts=60, tier="gold", country="NL"), dict(id=2, ts=40, tier="silver", country="DE"),
             dict(id=3, ts=2, tier="gold", country="NL"), dict(id=4, ts=45, __deleted="true")]
    batch = [dict(c, stream="account_changes") for c in batch]
    tables = []
    for bucket, seed, chunk in ((0, 1, 2), (1, 2, 4)):
        rows = list(batch)
        random.Random(seed).shuffle(rows)
        recs = [{c: r.get(c) for c in COLUMNS} for r in rows]
        _, blob, _ = core.stream_group(("gold_pair", bucket), [pd.DataFrame(first, columns=COLUMNS)], None, 0, False)
        chunks = [pd.DataFrame(recs[i: i + chunk], columns=COLUMNS) for i in range(0, len(recs), chunk)]
        frame, blob, _ = core.stream_group(("gold_pair", bucket), chunks, blob, 0, False)
        op, header = core._ops["gold_pair"]
        from spark_udf.state import decode_state

        tables.append(split_snapshot(decode_state(blob[0], blob[1], header))[1])
    assert pickle.dumps(tables[0]) == pickle.dumps(tables[1])
    assert tables[0]["counts"]["late"] == 1 and tables[0]["counts"]["applied"] == 4 + 5  # ts 2 < 4: late


@pytest.mark.parametrize("seed", range(3))
def test_joined_search_rules_in_the_core_give_the_embedded_rows(seed: int) -> None:
    """Search rules with ``join:`` in the keyed stage (kept by key: grouped by the join's document
    field): the embedded engine's rows, late rows and change errors, with a restart anywhere."""
    rnd = random.Random(100 + seed)
    rules = parse_rules(SEARCH_RULES)
    batches = workload(seed, rnd.randint(2, 5))
    buckets, chunk = rnd.randint(1, 4), rnd.randint(1, 9)
    core = _core(rules, buckets)
    assert core.specs["gold_docs"].table.keyed and core.specs["inner_docs"].table.keyed
    frame = simulate(rules, batches, buckets, chunk, seed, restart_at=rnd.randint(1, len(batches) - 1))
    got = spark_outputs([search_metadata(r) for r in _rows(frame)])
    engine = embedded(rules, batches)
    engine.matches = [search_metadata(m) for m in engine.matches]
    want = engine_outputs(engine)
    assert got == want
    searched = Counter(dict(m)["rule"] for m in got[0].elements())
    assert searched["gold_docs"] > 5 and searched["inner_docs"] > 5
    assert any(r == "inner_docs" for r, _ in got[1])  # its own lateness: its own late rows

