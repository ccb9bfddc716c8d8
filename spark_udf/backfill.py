"""A backfill's key-set groups: every pattern rule of one PARTITION BY column set in one group, in one scan; no pyspark.

The general backfill (:meth:`spark_udf.core.GroupCore.static_group`) gives every rule its own
groups, ``(rule, bucket)``, and every row its arrival watermark (``_cep_prior``) from two passes
over the input. A backfill of pattern rules only needs neither:

* rules with the same ``PARTITION BY`` columns hash a row to the same group, so one group
  ``(key set, partition)`` serves all of them: a row is packed and decoded once per key set,
  not once per rule, and the group's events, in arrival order, go to every rule of the key set
  in batches of ``cep run``'s size, each with one :class:`~cep.sharing.SharedBatch` (times
  parsed, keys built, rows ordered once for every rule, as the embedded engine's rules share a
  batch; :meth:`spark_udf.core.GroupCore.replay_in_batches`);
* the arrival watermarks come from the same scan: the map side (:class:`Packer`) sees each input
  segment's rows in order, so it keeps per segment and key set the largest and smallest valid
  time and how far a row falls behind the running maximum of earlier rows (from which
  :func:`late_free` decides whether any row can be late), and each row's watermark within its
  segment. Its rows leave as one Arrow stream per group, and its statistics go to every reduce
  partition; Spark runs the reduce side (:class:`PackedGroups`) only once every map task is done,
  so each reduce partition rebuilds the whole arrival plan and adds each segment's watermark
  before it. When no row can be late the groups are judged with
  :data:`~cep.operator.NO_WATERMARK`.

A pattern operator uses the per-row watermark for lateness only (it releases nothing before
:meth:`finish`), so both give the general path's rows (tests/spark_udf/test_backfill_groups.py
checks them against ``cep run``). Analytics rules read the per-row watermark as their clock
(docs/spark.md, "Windowed analytics rules on Spark") and stay on the general path.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, NamedTuple

import numpy as np
import pandas as pd

from cep.events import DEFAULT_BATCH_SIZE
from cep.gc_pause import StartupCollector
from spark_udf.core import (
    CORRUPT_BUCKET,
    CORRUPT_COL,
    SOURCE_COL,
    GroupCore,
    TimeReading,
    arrival_plan,
)
from spark_udf.schema import RESERVED_PREFIX

__all__ = ["Packer", "PackedGroups", "late_free", "murmur3_int", "partition_values", "reduce_partitions", "stream_rows",
           "PACKED_SCHEMA", "PART_COL", "PARTITION_BYTES"]

ORDER_COL = "_cep_order"  # a row's index in its map task; with the task's partition: (partition << 33) + row
_MIN = np.iinfo(np.int64).min


def late_free(rows: list[tuple[str, int, Any, Any, Any]], plan: dict[str, tuple[int, list[int]]], ks: int,
              lateness_ms: int) -> bool:
    """Whether no row of key set ``ks`` is late for a rule with this allowed lateness.

    A row is late when its time is earlier than its arrival watermark minus the lateness; the
    watermark is the larger of the segment's (``plan``, from every earlier segment) and the
    running maximum inside the segment. So no row is late when, in every segment, the smallest
    time is not behind the segment's watermark by more than the lateness, and no row is behind
    an earlier row of its segment by more than the lateness.

    Example:
        >>> from spark_udf.core import arrival_plan
        >>> rows = [('["a"]', 0, 9, 1, 3), ('["b"]', 0, 12, 8, 0)]
        >>> plan = arrival_plan([(s, k, mx) for s, k, mx, _, _ in rows], 1)
        >>> late_free(rows, plan, 0, 0), late_free(rows, plan, 0, 3)
        (False, True)
    """
    for seg, k, mx, mn, lag in rows:
        if k != ks or mx is None:
            continue
        if int(lag) > lateness_ms:
            return False
        before = plan[seg][1][ks]
        if before != _MIN and int(mn) < before - lateness_ms:
            return False
    return True


# ------------------------------------------------------------------ one scan: packed groups

PART_COL = "_cep_part"  # the reduce partition a packed row goes to (see partition_values)
ROWS_COL = "_cep_rows"  # a group's rows from one map task, as an Arrow IPC stream
SEG_CODE_COL = "_cep_seg_code"  # a row's input segment, as an index into the packed rows' segment keys
WITHIN_COL = "_cep_within"  # per key set: the largest valid time of the earlier rows of the row's segment
PACKED_SCHEMA = (f"{PART_COL} int, _cep_ks int, _cep_bucket int, {ROWS_COL} binary, "
                 "_cep_seg string, _cep_mx bigint, _cep_mn bigint, _cep_lag bigint")
_SEGS_META = b"cep_segments"
_TASK_META = b"cep_task"  # the map task's partition id: a row's order is (partition << 33) + its ORDER_COL
_NARROW_META = b"cep_narrow"  # the stream carries only the fields its key set's rules read (Packer.keep)
_ROW_BITS = 33  # a row's order: (partition << _ROW_BITS) + its index in the task


def murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of one ``int`` value (Murmur3 x86 32-bit, seed 42), as a signed 32-bit int.

    Example:
        >>> murmur3_int(0), murmur3_int(1)
        (933211791, -559580957)
    """
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k = rotl(k, 15) * 0x1B873593 & 0xFFFFFFFF
    h = (seed ^ k) & 0xFFFFFFFF
    h = (rotl(h, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= 4
    h ^= h >> 16
    h = h * 0x85EBCA6B & 0xFFFFFFFF
    h ^= h >> 13
    h = h * 0xC2B2AE35 & 0xFFFFFFFF
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_values(n: int) -> list[int]:
    """For each of ``n`` partitions, a small int that ``repartition(n, column)`` sends there.

    Spark's hash partitioning puts value ``v`` in partition ``pmod(hash(v), n)``; tagging the
    packed rows of partition ``p`` with the p-th value gives every partition exactly its share
    (consecutive ints would collide and leave a core idle). Rows go where their value's hash says
    whatever this returns, so the mapping only decides balance, never which rows meet.

    Example:
        >>> vals = partition_values(4)
        >>> [murmur3_int(v) % 4 for v in vals]
        [0, 1, 2, 3]
    """
    out: dict[int, int] = {}
    v = 0
    while len(out) < n and v < 1_000_000:
        out.setdefault(murmur3_int(v) % n, v)
        v += 1
    return [out.get(p, p) for p in range(n)]


FLUSH_BYTES = 256 << 20
"""Input bytes a map task holds before it packs them (see :meth:`Packer.pack_task`)."""

PARTITION_BYTES = 256 << 20
"""Input bytes per reduce partition of a key-set backfill beyond one per core (each reduce task holds its rows)."""


def reduce_partitions(cores: int, input_bytes: int | None, key_sets: int = 1) -> int:
    """The default reduce partitions of a key-set backfill: one per core, more for a large input.

    Each reduce task costs a Python worker call, its function and its groups' set-up (about half a
    CPU second each on the S&P file: 2 partitions used 12-18 CPU s, 8 used 17-23, in one session),
    so as few as keep every core busy; but a task holds its partition's rows in memory, and every
    key set packs every row once, so a large input gets one partition per ``PARTITION_BYTES`` of
    input per key set (which also keeps a partition's packed rows well under the 2 GiB a Spark
    Arrow binary column holds when they reach the reduce side). Unknown size: 4 per core.

    Example:
        >>> reduce_partitions(2, 66 << 20), reduce_partitions(2, 10 << 30), reduce_partitions(2, None)
        (2, 40, 8)
        >>> reduce_partitions(2, 10 << 30, key_sets=3)
        120
    """
    if input_bytes is None:
        return max(1, 4 * cores)
    return max(1, cores, -(-input_bytes * max(1, key_sets) // PARTITION_BYTES))


def _arrow_values(col: Any) -> np.ndarray:
    """An Arrow column as the engine's readers see it: numbers as numpy, anything with NULLs or
    text as objects with None (exact integers, never floats with NaN)."""
    import pyarrow as pa

    t = col.type
    if (pa.types.is_integer(t) or pa.types.is_floating(t)) and not col.null_count:
        return col.to_numpy(zero_copy_only=False)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return col.to_numpy(zero_copy_only=False)
    out = np.empty(len(col), dtype=object)
    out[:] = col.to_pylist()
    return out


def _key_text(v: Any) -> str:
    """The text a key value is hashed by: equal values as the engine compares keys, equal texts
    (``-0.0`` is the key ``0.0``; a nested value, which is no key, by its JSON)."""
    if isinstance(v, float):
        return str(v + 0.0)  # -0.0 + 0.0 is 0.0
    if isinstance(v, (list, dict, tuple)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def _key_hash(cols: list[Any], memo: dict[Any, np.uint64] | None = None) -> np.ndarray:
    """A stable 64-bit hash per row of the key columns (NULL hashes as itself): equal keys, equal hashes,
    in every task (a column's Arrow type is the same in every batch). ``memo`` keeps each value's hash
    across the batches of a task (keys repeat from batch to batch); it is keyed by the column's type
    and the value, since Python takes ``True``, ``1`` and ``1.0`` (and ``0.0`` and ``-0.0``) for one
    dict key: keyed by value alone, the first column to meet it would decide its hash in that task
    only, and one key's rows would go to different groups in different tasks."""
    import pyarrow as pa

    memo = {} if memo is None else memo
    h = np.zeros(len(cols[0]) if cols else 0, dtype=np.uint64)
    for col in cols:
        col = _array(col)
        if pa.types.is_dictionary(col.type) and not _is_text(col.type):
            col = col.cast(col.type.value_type)
        mask = col.is_null().to_numpy(zero_copy_only=False)
        if pa.types.is_nested(col.type):  # no dictionary kernel for lists and structs: one text per row
            texts = np.asarray([_key_text(v) for v in col.to_pylist()], dtype=object)
            got = pd.util.hash_array(texts) if len(texts) else np.zeros(0, dtype=np.uint64)
        else:  # (a dictionary of strings as it is: a string repeated in it hashes alike)
            enc = col if pa.types.is_dictionary(col.type) else col.dictionary_encode()
            kind = str(enc.type.value_type)
            values = [(kind, v) for v in enc.dictionary.to_pylist()]
            new = [v for v in values if v not in memo]
            if new:
                texts = np.asarray([_key_text(v) for _, v in new], dtype=object)
                memo.update(zip(new, pd.util.hash_array(texts)))
            per = np.fromiter((memo[v] for v in values), dtype=np.uint64, count=len(values))
            codes = np.where(mask, 0, enc.indices.fill_null(0).to_numpy(zero_copy_only=False)).astype(np.int64)
            got = per[codes] if len(per) else np.zeros(len(codes), dtype=np.uint64)
        got = np.where(mask, np.uint64(0x9E3779B97F4A7C15), got)
        h = h * np.uint64(0x100000001B3) ^ got
    return h


@dataclass
class Packer:
    """The map side of a key-set backfill: one pass over the input that packs each group's rows.

    Runs in ``mapInArrow`` over the input as Spark read it (one scan, the rows never leave Arrow):
    for every batch it reads the event times and keys (as the first arrival pass did), keeps per
    input segment and key set the statistics :func:`late_free` reads and each row's largest valid
    earlier time of its segment (``_cep_within_<i>``, what the second pass computed), hashes the
    key into one of ``len(parts)`` groups per key set, and emits, per group, its rows as one Arrow
    IPC stream with the segment's key and the row's order (``(partition << 33) + row``, as
    ``monotonically_increasing_id``). At the end it emits its segments' statistics once for every
    reduce partition (``parts``), so that every group, wherever it runs, sees all of them.
    """

    time_col: str
    key_sets: list[tuple[str, ...]]
    seg_cols: tuple[str, ...]
    reading: TimeReading
    parts: list[int]
    flush_rows: int = 65_536
    flush_bytes: int = FLUSH_BYTES
    decoder: Any = None
    """The engine's decoder of a JSON lines input read as text (:class:`spark_udf.json_lines.JsonLinesDecoder`):
    the task's batches are its lines, decoded here into the columns Spark's reader would give."""
    keep: list[frozenset[str] | None] | None = None
    """Per key set, the fields its rules read (:func:`columns_read`; None: every field), when the map
    tasks read the files themselves (:class:`spark_udf.local_files.SplitReader`): a flush whose rows
    cannot become a late or error row of their own segment sends only those (see :meth:`_pack`)."""

    def pack(self, batches: Iterator[Any]) -> Iterator[Any]:
        """Inside a Spark task: the task's input batches, packed (see :meth:`pack_task`)."""
        from pyspark import TaskContext

        from spark_udf.core import partition_id

        pid = partition_id(TaskContext)
        packer = self
        if self.keep is not None:
            # a narrow row's whole event is decoded again from the task's splits (PackedGroups.reread),
            # found by the task's partition: only where the task reads the splits of its own index
            batches = list(batches)
            if [i for rb in batches for i in rb.column("id").to_pylist()] != [pid]:
                packer = replace(self, keep=None)
        if self.decoder is not None:
            batches = self.decoder.decode(iter(batches))
        return _worker_start(packer.pack_task(batches, pid))

    def pack_task(self, batches: Iterator[Any], pid: int) -> Iterator[Any]:
        """The packed rows (``PACKED_SCHEMA``) of the input batches of partition ``pid``, in input order.

        Batches are held until ``flush_rows`` rows or ``flush_bytes`` bytes, then read as one table:
        the times, keys and segments of many of Spark's small batches in one vectorised call each
        (one time parse per distinct text of the held rows, not per batch). The byte bound keeps
        wide rows inside Arrow's 32-bit offsets (2 GiB per string or binary array): the held rows
        are combined into one table, and each key set's packed rows leave as a batch of their own.
        The row bound (65,536: a few of the engine-decoded blocks, many of Spark's batches of
        10,000) keeps a task's memory to a flush's worth, reused by the next flush: holding a
        whole 35 MB split (330,000 S&P bars) cost the first backfill of a worker 30,000 fresh
        pages against 23,000 (0.44 against 0.31 CPU s for its two map tasks).
        """
        import pyarrow as pa

        nparts = len(self.parts)
        stats: dict[str, list[list[int]]] = {}  # seg -> per key set [max, min, lag]
        seg_codes: dict[str, int] = {}
        hashes: dict[Any, np.uint64] = {}
        held: list[Any] = []
        rows = size = 0
        done = 0  # rows of this task packed so far: the row order
        for batch in batches:
            if batch.num_rows:
                held.append(batch)
                rows += batch.num_rows
                size += batch.nbytes
            if rows < self.flush_rows and size < self.flush_bytes:
                continue
            yield from self._pack(held, pid, done, stats, seg_codes, hashes, nparts)
            done += rows
            held, rows, size = [], 0, 0
        if held:
            yield from self._pack(held, pid, done, stats, seg_codes, hashes, nparts)
        rows_out = [(seg, i, st) for seg, per in stats.items() for i, st in enumerate(per)]
        if rows_out:
            k = len(rows_out)
            yield pa.RecordBatch.from_pydict({
                PART_COL: pa.array([p for p in self.parts for _ in range(k)], pa.int32()),
                "_cep_ks": pa.array([r[1] for _ in self.parts for r in rows_out], pa.int32()),
                "_cep_bucket": pa.array([None] * (k * nparts), pa.int32()),
                ROWS_COL: pa.array([None] * (k * nparts), pa.binary()),
                "_cep_seg": pa.array([r[0] for _ in self.parts for r in rows_out], pa.string()),
                "_cep_mx": pa.array([None if r[2][0] == _MIN else r[2][0] for _ in self.parts for r in rows_out], pa.int64()),
                "_cep_mn": pa.array([None if r[2][1] == _MIN else r[2][1] for _ in self.parts for r in rows_out], pa.int64()),
                "_cep_lag": pa.array([r[2][2] for _ in self.parts for r in rows_out], pa.int64()),
            })

    def _pack(self, held: list[Any], pid: int, done: int, stats: dict[str, list[list[int]]], seg_codes: dict[str, int],
              hashes: dict[Any, np.uint64], nparts: int) -> list[Any]:
        """The held batches (rows ``done`` on of the task) as one packed row per group; ``stats``,
        ``seg_codes`` and ``hashes`` carry over the task's flushes."""
        import pyarrow as pa

        table = pa.Table.from_batches(held).combine_chunks()
        n = table.num_rows
        names = table.schema.names
        ms, ok = self._times(table.column(self.time_col))
        corrupt = (table.column(CORRUPT_COL).is_valid().to_numpy(zero_copy_only=False)
                   if CORRUPT_COL in names else np.zeros(n, dtype=bool))
        code = np.empty(n, dtype=np.int32)
        within = [np.full(n, _MIN, dtype=np.int64) for _ in self.key_sets]
        valid = [ok & _present([table.column(c) if c in names else None for c in ks], n) for ks in self.key_sets]
        for seg, a, b in _arrow_segments(table, self.seg_cols, pid):
            code[a:b] = seg_codes.setdefault(seg, len(seg_codes))
            cur = stats.setdefault(seg, [[_MIN, _MIN, 0] for _ in self.key_sets])
            for i, v in enumerate(valid):
                vals = np.where(v[a:b], ms[a:b], _MIN)
                run = np.maximum.accumulate(vals)
                before = np.empty(b - a, dtype=np.int64)
                before[0] = cur[i][0]
                before[1:] = np.maximum(run[:-1], cur[i][0])
                within[i][a:b] = before
                sel = v[a:b]
                if sel.any():
                    t = ms[a:b][sel]
                    bt = before[sel]
                    behind = bt > t  # the int64 minimum is behind nothing
                    lag = int((bt[behind] - t[behind]).max()) if behind.any() else 0
                    lo = int(t.min())
                    cur[i] = [max(cur[i][0], int(run[-1])), lo if cur[i][1] == _MIN else min(cur[i][1], lo),
                              max(cur[i][2], lag)]
        # the segment's reserved columns (cep spark backfill's file path and block) travel as its code
        table = table.drop_columns([c for c in self.seg_cols if c.startswith(RESERVED_PREFIX) and c in names])
        assigned = []
        for i, ks in enumerate(self.key_sets):
            bucket = ((_key_hash([table.column(c) for c in ks], hashes) % np.uint64(nparts)).astype(np.int64)
                      if ks else np.zeros(n, dtype=np.int64))
            # a malformed record goes to one group only (the first key set's), which reports it
            assigned.append(np.where(corrupt, CORRUPT_BUCKET if i == 0 else -2, bucket))
        rows = np.arange(done, done + n, dtype=np.int64)
        per_row = [(SEG_CODE_COL, pa.array(code.astype(_narrow_int(len(seg_codes) - 1)))),
                   (ORDER_COL, pa.array(rows.astype(_narrow_int(done + n - 1, 32))))]
        # a row's watermark within its segment only where it is behind an earlier row there: elsewhere
        # the segment's watermark decides alone (within <= time: time < max(plan, within) - L only if
        # time < plan - L, for every lateness L >= 0), and a flush without such rows sends none
        behind = [bool((w[ok] > ms[ok]).any()) for w in within]
        within_cols = [(f"{WITHIN_COL}_{i}", pa.array(w)) if b else None for i, (w, b) in enumerate(zip(within, behind))]
        # only the fields the key set's rules read, where no row can be an error row (no valid time or
        # key; malformed records keep their text) and none is behind an earlier row of its segment:
        # the rows a rule may still report whole (late against an earlier segment) are decoded again
        # from the file on the reduce side, which the map tasks' own reading of the splits allows
        narrow = [None if self.keep is None or self.keep[i] is None or behind[i] or bool((~v & ~corrupt).any())
                  else self.keep[i] for i, v in enumerate(valid)]
        return self._flush(_plain_large_dictionaries(table, nparts), assigned, seg_codes, pid, per_row, within_cols,
                           narrow)

    def _times(self, col: Any) -> tuple[np.ndarray, np.ndarray]:
        """Each row's event time (ms) and whether it is valid, as :class:`~spark_udf.core.TimeReading`
        reads the column; texts dictionary-encoded by Arrow, so each distinct text is parsed once."""
        import pyarrow as pa

        col = _array(col)
        if _is_text(col.type):
            enc = col if pa.types.is_dictionary(col.type) else col.dictionary_encode()
            texts = np.empty(len(enc.dictionary) + 1, dtype=object)
            texts[:-1] = enc.dictionary.to_numpy(zero_copy_only=False)
            texts[-1] = None
            codes = enc.indices.fill_null(len(enc.dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)
            ms, ok, _ = self.reading.read_texts(codes, texts, self.time_col)
        else:
            ms, ok, _ = self.reading.read(pd.DataFrame({self.time_col: _arrow_values(col)}), self.time_col)
        return ms, ok

    def _flush(self, table: Any, assigned: list[np.ndarray], seg_codes: dict[str, int], pid: int,
               per_row: list[tuple[str, Any]], within_cols: list[tuple[str, Any] | None],
               narrow: list[frozenset[str] | None] | None = None) -> list[Any]:
        """One packed row per group of the held rows, a batch per key set: each key set's rows ordered
        by group once, then each group's slice written as an Arrow stream.

        A stream carries the data columns, each row's segment code and index in the task (the
        narrowest integers that hold them), its key set's watermarks within the segment when some
        row is behind (``within_cols``), and the malformed records only in the group that reports
        them: every other group's copy of the all-NULL column was 6% of the S&P file's packed bytes.
        Where ``narrow`` names a key set's fields, its streams carry only those (and say so)."""
        import pyarrow as pa

        segs = sorted(seg_codes, key=seg_codes.__getitem__)
        meta = {_SEGS_META: json.dumps(segs).encode(), _TASK_META: str(pid).encode()}
        out = []
        for ks in range(len(self.key_sets)):
            gid = assigned[ks]
            perm = np.argsort(gid, kind="stable")
            ordered = gid[perm]
            cuts = np.flatnonzero(np.diff(ordered)) + 1
            starts = np.concatenate([[0], cuts])
            ends = np.concatenate([cuts, [len(ordered)]])
            wanted = [(int(ordered[a]), int(a), int(e)) for a, e in zip(starts, ends) if len(ordered) and ordered[a] != -2]
            if not wanted:
                continue
            mine = table
            fields = narrow[ks] if narrow is not None else None
            if fields is not None:
                mine = mine.drop_columns([c for c in mine.schema.names
                                          if c not in fields and not c.startswith(RESERVED_PREFIX)])
            for name, arr in per_row + ([within_cols[ks]] if within_cols[ks] is not None else []):
                mine = mine.append_column(name, arr)
            taken = mine.take(pa.array(perm)).replace_schema_metadata(
                {**meta, _NARROW_META: b"1"} if fields is not None else meta)
            clean = taken.drop_columns([CORRUPT_COL]) if CORRUPT_COL in taken.schema.names else taken
            parts, buckets = [], []
            # every group's stream written one after the other into one buffer, which becomes the binary
            # column as it is (where each stream stops: its offsets): no copy of the packed rows into Python bytes
            sink = pa.BufferOutputStream()
            stops = [0]
            for bucket, a, e in wanted:
                sub = (taken if bucket == CORRUPT_BUCKET else clean).slice(a, e - a)
                with pa.ipc.new_stream(sink, sub.schema) as w:
                    w.write_table(sub)
                stops.append(sink.tell())
                parts.append(self.parts[bucket % len(self.parts)])
                buckets.append(bucket)
            n = len(buckets)
            out.append(pa.RecordBatch.from_pydict({
                PART_COL: pa.array(parts, pa.int32()), "_cep_ks": pa.array([ks] * n, pa.int32()),
                "_cep_bucket": pa.array(buckets, pa.int32()), ROWS_COL: _binary(sink.getvalue(), stops),
                "_cep_seg": pa.array([None] * n, pa.string()), "_cep_mx": pa.array([None] * n, pa.int64()),
                "_cep_mn": pa.array([None] * n, pa.int64()), "_cep_lag": pa.array([None] * n, pa.int64()),
            }))
        return out


def _task_row(order: int) -> tuple[int, int]:
    """A row's map task (its partition) and index in the task, from its order ``(partition << 33) + row``.

    Example:
        >>> _task_row((3 << 33) + 7)
        (3, 7)
    """
    return order >> _ROW_BITS, order & ((1 << _ROW_BITS) - 1)


def _narrow_int(largest: int, least: int = 8) -> Any:
    """The narrowest numpy signed integer type of at least ``least`` bits that holds 0 to ``largest``.

    Example:
        >>> _narrow_int(127), _narrow_int(128), _narrow_int(5, 32), _narrow_int(1 << 31, 32)
        (<class 'numpy.int8'>, <class 'numpy.int16'>, <class 'numpy.int32'>, <class 'numpy.int64'>)
    """
    for t in (np.int8, np.int16, np.int32):
        if np.iinfo(t).bits >= least and largest <= np.iinfo(t).max:
            return t
    return np.int64


class Stream(NamedTuple):
    """One packed stream read back (:func:`stream_rows`)."""

    data: Any
    """The rows without the packing's columns."""
    segments: list[str]
    codes: np.ndarray
    """Each row's index into ``segments``."""
    rank: np.ndarray
    """Each row's segment's place in the arrival plan."""
    order: np.ndarray
    """Each row's order in the input: ``(partition << 33) + row``, as ``monotonically_increasing_id``."""
    before: np.ndarray | None
    """Each row's arrival watermark before the lateness (when judged)."""
    narrow: bool
    """Whether ``data`` holds only the fields its key set's rules read (:attr:`Packer.keep`)."""


def stream_rows(t: Any, plan: dict[str, tuple[int, list[int]]], ks: int, judged: bool, group: Any = None) -> Stream:
    """One packed stream of key set ``ks`` read back against the arrival ``plan``.

    When ``judged``, each row's arrival watermark before the lateness is the larger of its
    segment's (from the plan) and its own within the segment where the map task sent one."""
    meta = t.schema.metadata
    segs = json.loads(meta[_SEGS_META])
    missing = [s for s in segs if s not in plan]
    if missing:  # every segment was ranked by the statistics of the same pass
        raise RuntimeError(f"rows of group {group!r} come from input segment {missing[0]} that no map task "
                           "reported: its statistics did not reach this partition")
    codes = t.column(SEG_CODE_COL).to_numpy().astype(np.int64)
    rank = np.asarray([plan[s][0] for s in segs], dtype=np.int64)[codes]
    order = (np.int64(int(meta[_TASK_META])) << np.int64(_ROW_BITS)) + t.column(ORDER_COL).to_numpy().astype(np.int64)
    within = f"{WITHIN_COL}_{ks}"
    before = None
    if judged:
        before = np.asarray([plan[s][1][ks] for s in segs], dtype=np.int64)[codes]
        if within in t.schema.names:
            before = np.maximum(before, t.column(within).to_numpy())
    data = t.drop_columns([c for c in (SEG_CODE_COL, ORDER_COL, within) if c in t.schema.names])
    return Stream(data.replace_schema_metadata(None), segs, codes, rank, order, before, _NARROW_META in meta)


def columns_read(rule: Any) -> frozenset[str] | None:
    """The event fields a pattern rule reads to match (its conditions, measures, ORDER BY and
    PARTITION BY fields), or None when it keeps whole events (``ALL ROWS PER MATCH``).

    They are what its operator takes from a batch (:attr:`cep.operator.PatternOperator.columns`,
    ``time_col``, ``key_cols``): a field outside them changes nothing but the events of its late
    and error rows (tests/spark_udf/test_backfill_fields.py runs every pattern rule of ``rules/`` both ways).

    Example:
        >>> from patterns.rules import parse_rules
        >>> sql = ("SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.px AS p "
        ...        "PATTERN (A B) DEFINE B AS B.qty > A.qty)")
        >>> sorted(columns_read(parse_rules(sql).rules[0]))
        ['k', 'px', 'qty', 'ts']
    """
    from cep.operator import PatternOperator

    op = PatternOperator.from_rule(rule)
    if op.keep_records or op.join is not None:
        return None
    return frozenset([*op.columns, op.time_col, *op.key_cols])


def _binary(data: Any, ends: list[int]) -> Any:
    """An Arrow binary array over ``data``, value ``i`` its bytes ``ends[i]:ends[i + 1]``, without copying them.

    A binary array's offsets are 32-bit: past 2 GiB (``flush_bytes`` far above its default) Arrow
    refuses the values, as it refused them when they were Python bytes.

    Example:
        >>> import pyarrow as pa
        >>> _binary(pa.py_buffer(b"abcde"), [0, 2, 5]).to_pylist()
        [b'ab', b'cde']
    """
    import pyarrow as pa

    if ends[-1] > np.iinfo(np.int32).max:
        raise pa.ArrowCapacityError(f"packed rows of {ends[-1]:,} bytes in one flush: a binary column holds at most "
                                    "2 GiB; lower the packer's flush_bytes")
    offsets = pa.py_buffer(np.asarray(ends, dtype=np.int32))
    return pa.Array.from_buffers(pa.binary(), len(ends) - 1, [None, offsets, data])


def _plain_large_dictionaries(table: Any, nparts: int) -> Any:
    """The table with each dictionary column whose dictionary is large for its rows cast to its values
    (``nparts`` 0: every dictionary column).

    Every group's Arrow stream carries the whole dictionary of a column it slices: for a column of
    few distinct strings (dates, tickers) that is the cheap way to send them (a code per row), for
    one of many (ids, URLs) it would send the distinct strings once per group. A dictionary stays
    while its strings, once per group, are at most a quarter of the rows."""
    import pyarrow as pa

    for i, f in enumerate(table.schema):
        if pa.types.is_dictionary(f.type):
            col = _array(table.column(i))
            if not nparts or len(col.dictionary) * nparts * 4 > max(1, table.num_rows):
                table = table.set_column(i, f.name, col.cast(f.type.value_type))
    return table


def _is_text(t: Any) -> bool:
    """Whether an Arrow type is a string, or a dictionary of strings."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _array(col: Any) -> Any:
    """One Arrow array of a column (a table's columns are chunked)."""
    import pyarrow as pa

    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _present(cols: list[Any], n: int) -> np.ndarray:
    """Which rows have a value in every key column (NULL, NaN or an absent column: none), as
    :func:`spark_udf.core.keys_present` reads a pandas frame."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ok = np.ones(n, dtype=bool)
    for col in cols:
        if col is None:
            return np.zeros(n, dtype=bool)
        ok &= col.is_valid().to_numpy(zero_copy_only=False)
        if pa.types.is_floating(col.type):
            ok &= ~pc.fill_null(pc.is_nan(col), False).to_numpy(zero_copy_only=False)
    return ok


def _arrow_segments(rb: Any, seg_cols: tuple[str, ...], pid: int) -> list[tuple[str, int, int]]:
    """:func:`spark_udf.core.segments` of an Arrow batch: runs of rows of one input segment, ``(key, start, end)``.

    Compared as Arrow dictionary codes, never as Python values per row (a batch is mostly one file block).
    """
    n = rb.num_rows
    if not n:
        return []
    if not seg_cols:
        return [(json.dumps([pid]), 0, n)]
    names = rb.schema.names
    change = np.zeros(n, dtype=bool)
    change[0] = True
    cols = [rb.column(names.index(c)) for c in seg_cols]
    for col in cols:
        idx = _array(col).dictionary_encode().indices.fill_null(-1).to_numpy(zero_copy_only=False)
        change[1:] |= idx[1:] != idx[:-1]
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    # (the partition last, as spark_udf.core.segments: a segment that several tasks read ranks part by part)
    return [(json.dumps([*(col[int(a)].as_py() for col in cols), pid], default=str), int(a), int(b))
            for a, b in zip(starts, ends)]


def _int_or_none(v: Any) -> int | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)


@dataclass
class PackedGroups:
    """The reduce side of a key-set backfill: every group of one reduce partition, in arrival order.

    Runs in ``mapInPandas`` over the packed rows of one partition (:class:`Packer`): the segments'
    statistics (every map task sent them to every partition) give the arrival plan, from which each
    key set's rules know whether any row can be late; each group's rows are put back in arrival
    order (segment rank, then row order), their arrival watermark is the larger of the segment's
    (from the plan) and the row's own within its segment, and every rule of the key set ingests
    the one event batch and finishes.
    """

    core: GroupCore
    rules_of: dict[int, list[str]]
    lateness: dict[int, list[int]]
    nsets: int
    seg_cols: tuple[str, ...]
    arrival_order: bool = True
    batch_rows: int = DEFAULT_BATCH_SIZE
    """Rows of a group fed to its rules at a time, in arrival order (``cep run``'s batch size)."""
    reader: Any = None
    """The map tasks' reader of their splits (:class:`spark_udf.local_files.SplitReader`), when their
    streams may be narrow (:attr:`Packer.keep`): a narrow row's whole event is decoded again with it."""
    _tasks: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)

    def reread(self, order: int) -> dict[str, Any]:
        """The whole event of the input row of ``order`` (``(partition << 33) + row``), decoded again
        from its map task's splits, as the map task decoded it (the rows of a task decoded once per
        reduce task, when the first of its narrow rows becomes a late or error row)."""
        import pyarrow as pa

        from cep.events import batch_from_arrow

        if self.reader is None:
            raise RuntimeError("a narrow packed row needs the map tasks' split reader to give its whole event")
        pid, row = _task_row(order)
        table = self._tasks.get(pid)
        if table is None:
            got = list(self.reader.decode(iter([pa.record_batch([pa.array([pid], pa.int64())], names=["id"])])))
            table = pa.Table.from_batches(got) if got else None
            if table is not None:
                table = table.select([c for c in table.schema.names if not c.startswith(RESERVED_PREFIX)])
            self._tasks[pid] = table
        if table is None or row >= table.num_rows:
            raise RuntimeError(f"row {row} of map task {pid} is not in its input any more: did an input file change "
                               "during the backfill?")
        return batch_from_arrow(table.slice(row, 1).combine_chunks()).record(0)

    def _events(self, batch: Any, order: np.ndarray, thin: np.ndarray, fields: set[str]) -> Any:
        """The whole event of row ``i`` of a group's ``batch`` where the row was packed narrow
        (``thin``; None elsewhere), decoded again (:meth:`reread`) and checked against the ``fields``
        it was packed with: a file changed since the map side read it fails the task."""

        def whole(i: int) -> dict[str, Any] | None:
            if not thin[i]:
                return None
            got = self.reread(int(order[i]))
            packed = {c: v for c, v in batch.record(i).items() if c in fields}
            if any(got.get(c) != v for c, v in packed.items()):
                pid, row = _task_row(int(order[i]))
                raise RuntimeError(f"input row {row} of map task {pid} reads otherwise now ({packed} packed, "
                                   f"{ {c: got.get(c) for c in packed} } now): did an input file change during the "
                                   "backfill?")
            return got

        return whole

    def run(self, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """Inside a Spark task: the groups of one reduce partition (see :meth:`run_task`)."""
        return _worker_start(self.run_task(frames))

    def run_task(self, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        blobs: dict[tuple[int, int], list[bytes]] = {}
        stats: dict[tuple[str, int], list[Any]] = {}  # [max or None, min or None, lag]
        for pdf in frames:
            for ks, bucket, blob, seg, mx, mn, lag in zip(
                    pdf["_cep_ks"].tolist(), pdf["_cep_bucket"].tolist(), pdf[ROWS_COL].tolist(),
                    pdf["_cep_seg"].tolist(), pdf["_cep_mx"].tolist(), pdf["_cep_mn"].tolist(), pdf["_cep_lag"].tolist()):
                if blob is not None:
                    blobs.setdefault((int(ks), int(bucket)), []).append(blob)
                    continue
                # a segment read by several tasks (arrival columns of the user's) sends several rows
                got = [_int_or_none(mx), _int_or_none(mn), int(lag)]
                have = stats.setdefault((seg, int(ks)), got)
                if have is not got:
                    have[0] = got[0] if have[0] is None else have[0] if got[0] is None else max(have[0], got[0])
                    have[1] = got[1] if have[1] is None else have[1] if got[1] is None else min(have[1], got[1])
                    have[2] = max(have[2], got[2])
        if not blobs:
            return
        rows: list[tuple[str, int, Any, Any, Any]] = [(seg, ks, st[0], st[1], st[2]) for (seg, ks), st in stats.items()]
        plan = arrival_plan(((s, k, mx) for s, k, mx, _, _ in rows), self.nsets)
        judged = {i: self.arrival_order and not all(late_free(rows, plan, i, lt) for lt in self.lateness.get(i, []))
                  for i in range(self.nsets)}
        for key in sorted(blobs):
            frame = self.group(key, blobs[key], plan, judged.get(key[0], False))
            if frame is not None and len(frame):
                yield frame

    def group(self, key: tuple[int, int], blobs: list[bytes], plan: dict[str, tuple[int, list[int]]],
              judged: bool) -> pd.DataFrame | None:
        """One group's rows (packed by one or more map tasks): arrival order, then every rule of its key set."""
        import pyarrow as pa

        from cep.events import batch_from_arrow

        ks, bucket = key
        at = self.seg_cols.index(SOURCE_COL) if SOURCE_COL in self.seg_cols else None
        tables, ranks, orders, befores, sources, narrow = [], [], [], [], [], []
        for blob in blobs:
            st = stream_rows(pa.ipc.open_stream(blob).read_all(), plan, ks, judged, key)
            ranks.append(st.rank)
            orders.append(st.order)
            narrow.append(np.full(st.data.num_rows, st.narrow))
            if st.before is not None:
                befores.append(st.before)
            if at is not None:
                sources.append(np.asarray([json.loads(s)[at] for s in st.segments], dtype=object)[st.codes])
            tables.append(st.data)
        types: dict[str, set[Any]] = {}
        for t in tables:
            for f in t.schema:
                types.setdefault(f.name, set()).add(f.type)
        if any(len(v) > 1 for v in types.values()):  # a column a dictionary in some tasks' rows only
            tables = [_plain_large_dictionaries(t, 0) for t in tables]
        # (narrow streams lack the fields no rule reads: NULL in their rows, whose whole events are decoded again)
        table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
        order = np.concatenate(orders)
        perm = np.lexsort((order, np.concatenate(ranks)))
        table = table.take(pa.array(perm))
        order, thin = order[perm], np.concatenate(narrow)[perm]
        fields = next((set(t.schema.names) for t, n in zip(tables, narrow) if len(n) and n[0]), set())
        src = np.concatenate(sources)[perm] if sources else (
            _arrow_values(table.column(SOURCE_COL)) if SOURCE_COL in table.column_names else None)
        prior = np.concatenate(befores)[perm] if judged else None
        core = self.core
        if bucket == CORRUPT_BUCKET:
            pdf = pd.DataFrame({CORRUPT_COL: _arrow_values(table.column(CORRUPT_COL)),
                                SOURCE_COL: src if src is not None else np.full(table.num_rows, None, dtype=object)})
            return core._malformed([pdf])
        data = table.select([c for c in table.column_names if not c.startswith(RESERVED_PREFIX)])
        batch = batch_from_arrow(data)
        batch.lines = np.arange(1, batch.n + 1, dtype=np.int64)  # row numbers: mapped back to sources
        frames = core.replay_in_batches(self.rules_of.get(ks, []), bucket, batch, src, prior, self.batch_rows,
                                        release=self.arrival_order,
                                        events=self._events(batch, order, thin, fields) if thin.any() else None)
        if not frames:
            return None
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


_STARTED = False  # this Python worker ran a backfill task before


def _worker_start(out: Iterator[Any]) -> Iterator[Any]:
    """A backfill task's output; the first task of a Python worker runs as a process's start
    (:class:`cep.gc_pause.StartupCollector`): the collector off until its first output is made
    (what the worker imported and loaded for it: pandas, pyarrow, numba's compiler and the
    engine's kernels), then those objects frozen and the collector on. A Spark Python worker is a
    process of its own that runs tasks (the daemon forks it), so its objects are the tasks'."""
    global _STARTED
    if _STARTED:
        yield from out
        return
    _STARTED = True
    start = StartupCollector(own=True)
    try:
        for x in out:
            start.done()
            yield x
    finally:
        start.done()
