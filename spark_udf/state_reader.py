"""A streaming query's saved state read back with Spark's state data source, decoded by ``cep.state_view``.

``cep spark state --checkpoint DIR --rules FILE`` reads the keyed stage's state store with
``spark.read.format("statestore")`` (Spark 4's state data source; it reads the state of
``applyInPandasWithState``, which Spark files as a flatMapGroupsWithState operator): one row per
group, ``key = (_cep_rule, _cep_bucket)`` and ``value = (groupState = (state binary, version
int), timeoutTimestamp)``, at the last committed micro-batch. Each ``state`` is the bucket's
versioned blob (:mod:`spark_udf.state`): checked like a restart checks it (encoding version, rule
kind and fingerprint), then restored into a fresh operator of the rule, and that operator is
read by the same code that reads a durable run's engine (:func:`cep.state_view.operator_view`);
the buckets of one rule are merged into one view.

The checkpoint keeps no rule text (only each rule's fingerprint), so the rule file is required;
a rule whose fingerprint differs is refused by name, as the query's restart would refuse it.
The query's watermark and the sources' offsets come from the checkpoint's offset log.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from cep.state_view import (
    NotAState,
    RuleMismatch,
    StateView,
    UnreadableState,
    merge_views,
    operator_view,
)
from cep.state_view.model import RuleView

__all__ = ["spark_state_view", "offset_log"]


def offset_log(checkpoint: str) -> dict[str, Any]:
    """The last committed micro-batch of a checkpoint: its id, the query's watermark, each source's offset.

    Raises :class:`NotAState` when ``checkpoint`` is not a streaming query's checkpoint.
    """
    commits = os.path.join(checkpoint, "commits")
    offsets = os.path.join(checkpoint, "offsets")
    if not os.path.isdir(checkpoint):
        what = "does not exist" if not os.path.exists(checkpoint) else "is not a directory"
        raise NotAState(f"--checkpoint {checkpoint} {what}; give the --checkpoint of 'cep spark run'")
    batches = _numbered(commits)
    if not os.path.isdir(offsets) or not batches:
        raise NotAState(
            f"{checkpoint} is not the checkpoint of a streaming query that committed a micro-batch (no "
            "commits/ and offsets/ logs); give the --checkpoint of 'cep spark run'"
        )
    batch = max(batches)
    try:
        with open(os.path.join(offsets, str(batch))) as f:
            lines = f.read().splitlines()
        meta = json.loads(lines[1])
        sources = [json.loads(x) if x.strip() not in ("", "-") else None for x in lines[2:]]
    except (OSError, ValueError, IndexError) as e:
        raise UnreadableState(f"the offset log of batch {batch} in {checkpoint} cannot be read: {e}") from None
    out: dict[str, Any] = {}
    for i, off in enumerate(sources):
        entry: dict[str, Any] = {"offset": off}
        if isinstance(off, dict) and "logOffset" in off:
            entry["files"] = _source_files(os.path.join(checkpoint, "sources", str(i)), int(off["logOffset"]))
        out[str(i)] = entry
    return {"batch": batch, "watermark": int(meta.get("batchWatermarkMs", 0)), "offsets": out}


def _numbered(folder: str) -> list[int]:
    try:
        return [int(n) for n in os.listdir(folder) if n.isdigit()]
    except OSError:
        return []


def _source_files(folder: str, upto: int) -> list[str]:
    """The files a file source had read up to log offset ``upto`` (its log: ``N`` and ``N.compact``)."""
    files: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return files
    entries = []
    for n in names:
        stem = n.split(".")[0]
        if stem.isdigit() and int(stem) <= upto:
            entries.append((int(stem), n))
    for _, n in sorted(entries):
        try:
            with open(os.path.join(folder, n)) as f:
                got = [json.loads(x).get("path") for x in f.read().splitlines()[1:] if x.startswith("{")]
        except (OSError, ValueError):
            continue
        if n.endswith(".compact"):
            files = [p for p in got if p]
        else:
            files += [p for p in got if p]
    return files


def _header(blob: bytes) -> dict[str, Any]:
    prefix = struct.Struct(">4sBI")
    if len(blob) < prefix.size or blob[:4] != b"CEPS":
        return {}
    _, _, n = prefix.unpack_from(blob)
    try:
        head = json.loads(blob[prefix.size : prefix.size + n])
    except ValueError:
        return {}
    return head if isinstance(head, dict) else {}


def spark_state_view(spark: Any, checkpoint: str, rules: Any) -> StateView:
    """Every keyed rule's state in a ``cep spark run`` checkpoint, as a :class:`StateView`.

    ``rules`` is the rule set the query runs. Raises :class:`NotAState`, :class:`UnreadableState`
    (another state encoding, a damaged header) or :class:`RuleMismatch` (a rule changed since).
    """
    from spark_udf.core import rule_key
    from spark_udf.keyed import KEYED_KINDS, HostedSearch, is_keyed, kind_of
    from spark_udf.state import BucketHeader, RuleChangedError, StateEncodingError, decode_state
    from spark_udf.views import ViewJoinedOperator

    log = offset_log(checkpoint)
    meta = spark.read.format("state-metadata").load(checkpoint).collect()
    stateful = [r for r in meta if r.operatorName == "applyInPandasWithState"]
    source: dict[str, Any] = {
        "checkpoint": os.path.abspath(checkpoint), "kind": "spark", "batch": log["batch"],
        "watermark": log["watermark"], "offsets": log["offsets"], "operator": None, "operator_id": None,
        "groups": 0,
    }
    blobs: list[tuple[int, int, bytes, int]] = []
    if stateful:
        op_id = int(stateful[0].operatorId)
        source["operator"], source["operator_id"] = "applyInPandasWithState", op_id
        df = (spark.read.format("statestore").option("operatorId", op_id).option("batchId", log["batch"])
              .load(checkpoint))
        rows = df.select("key._cep_rule", "key._cep_bucket", "value.groupState.state",
                         "value.groupState.version").collect()
        blobs = [(int(r[0]), int(r[1]), bytes(r[2]), int(r[3])) for r in rows if r[2] is not None]
        source["groups"] = len(blobs)
    keyed = [r for r in rules if is_keyed(r)]
    tables = dict(getattr(rules, "tables", None) or {})
    view_specs = dict(getattr(rules, "views", None) or {})
    view_binding: dict[str, Any] = {}
    if view_specs:  # the views' replicas, read as the stage builds them (snapshot files read here)
        from spark_udf.views import view_bindings

        view_binding = view_bindings(view_specs, tables, lambda spec: True, set(tables))
    view_groups = {rule_key(n): n for n in view_specs}
    replicas: dict[str, list[Any]] = {}
    by_code = {rule_key(r.name): r for r in keyed}
    parts: dict[str, list[RuleView]] = {r.name: [] for r in keyed}
    notes: list[str] = []
    for code, bucket, blob, version in sorted(blobs, key=lambda b: (b[0], b[1])):
        head = _header(blob)
        rule = by_code.get(code)
        if rule is None and code in view_groups:  # a view's changelog group: its replicas and the view
            from spark_udf.views import ViewEmitter

            name = view_groups[code]
            emitter = ViewEmitter(view_binding[name])
            expected = BucketHeader(name, "view", view_binding[name].fingerprint("view"),
                                    int(head.get("buckets", 0) or 0))
            try:
                emitter.restore(decode_state(blob, version, expected))
            except RuleChangedError as e:
                raise RuleMismatch(str(e)) from None
            except Exception as e:  # noqa: BLE001 - another encoding, a damaged blob
                raise UnreadableState(f"view {name!r}: the saved state cannot be read: {e}") from None
            st = emitter.replicas.view.stats()
            notes.append(f"view {name!r}: its changelog group holds {st['keys']} keys, {st['versions']} versions; "
                         f"emitted up to {emitter.replicas.view.emitted_to}")
            continue
        if rule is None:
            notes.append(f"bucket {bucket} of rule {head.get('rule', code)!r} is in the checkpoint but not in the "
                         "rule file (a removed rule's state, dropped at its next call)")
            continue
        kind = KEYED_KINDS[kind_of(rule)]
        op: Any = kind.new_operator(rule)
        fingerprint = kind.fingerprint(op)
        table = tables.get(_joined(rule) or "")
        if (_joined(rule) or "") in view_binding:  # a rule joining a view: its group keeps the view's replicas
            from dataclasses import replace

            from spark_udf.views import ViewJoinedOperator

            vb = replace(view_binding[str(_joined(rule))], report=())
            fingerprint = vb.fingerprint(fingerprint)
            op = ViewJoinedOperator(op, vb)
        elif table is not None:  # a joined rule's group holds its replica of the table beside the operator
            from spark_udf.tables import JoinedOperator, TableBinding, joined_fingerprint

            fingerprint = joined_fingerprint(fingerprint, table)
            op = JoinedOperator(op, TableBinding(table, {}, static=False, reporter=False))
        expected = BucketHeader(rule.name, kind_of(rule), fingerprint, int(head.get("buckets", 0) or 0))
        try:
            snapshot = decode_state(blob, version, expected)
        except RuleChangedError as e:
            raise RuleMismatch(str(e)) from None
        except StateEncodingError as e:
            raise UnreadableState(str(e)) from None
        try:
            op.restore(snapshot)
        except Exception as e:  # noqa: BLE001 - a snapshot the operator refuses (crafted, another version)
            raise UnreadableState(f"rule {rule.name!r}, bucket {bucket}: the saved state cannot be read: {e}") from None
        if table is not None or isinstance(op, ViewJoinedOperator):
            replicas.setdefault(rule.name, []).append(op.table.stats())
            op = op.op
        if isinstance(op, HostedSearch):  # a joined search rule: the embedded operator inside
            op = op.op
        parts[rule.name].append(operator_view(op))
    views = []
    for r in rules:
        if r.name in parts:
            got = parts[r.name]
            v = merge_views(got) if got else RuleView(r.name, kind_of(r), totals={"keys_with_state": 0})
            # on Spark every group runs at the query's watermark minus the rule's lateness (docs/spark.md)
            v.watermark = log["watermark"] - int(r.lateness_ms) if log["watermark"] else None
            held = replicas.get(r.name, [])
            if held:  # a replica in each group, or the changes kept by key (docs/spark.md, "Tables")
                v.notes.append(f"table {_joined(r)!r}: rows held in {len(held)} groups, "
                               f"{max(st.live_keys for st in held)} live keys in the largest, "
                               f"{sum(st.versions for st in held)} versions in all")
            views.append(v)
        else:
            v = RuleView(r.name, r.kind)
            v.notes.append("a search rule keeps no state on Spark: its groups of the stateful stage save nothing")
            views.append(v)
    return StateView(source, views, notes)


def _joined(rule: Any) -> str | None:
    from spark_udf.tables import rule_join

    join = rule_join(rule)
    return None if join is None else str(join.table)
