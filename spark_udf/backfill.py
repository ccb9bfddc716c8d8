"""A backfill's key-set groups: every pattern rule of one PARTITION BY column set in one group per bucket; no pyspark.

The general backfill (:meth:`spark_udf.core.GroupCore.static_group`) gives every rule its own
groups, ``(rule, bucket)``, and every row its arrival watermark (``_cep_prior``) from a second
pass over the input. A backfill of pattern rules only needs neither in the common case:

* rules with the same ``PARTITION BY`` columns hash a row to the same bucket, so one group
  ``(key set, bucket)`` serves all of them: a row is shuffled and converted once per key set,
  not once per rule, and the group's events become one :class:`~cep.events.EventBatch` that
  each rule's operator ingests, with one :class:`~cep.sharing.SharedBatch` (times parsed, keys
  built, rows ordered once for every rule, as the embedded engine's rules share a batch);
* lateness needs the arrival watermark only when some row *is* late. The first arrival pass
  (:func:`segment_stats`) also gathers, per input segment, its smallest valid event time and how
  far a row falls behind the running maximum of earlier rows of the segment; from those
  :func:`late_free` decides, per key set and allowed lateness, whether any row can be late
  (for input in time order, or out of order within the lateness, none is). If none can, the
  groups are judged with :data:`~cep.operator.NO_WATERMARK` and the second pass is skipped;
  otherwise the second pass adds ``_cep_prior_<i>`` as in the general path.

A pattern operator uses the per-row watermark for lateness only (it releases nothing before
:meth:`finish`), so both give the general path's rows (tests/spark_udf/test_backfill_groups.py
checks them against ``cep run``). Analytics rules read the per-row watermark as their clock
(docs/spark.md, "Windowed analytics rules on Spark") and stay on the general path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd

from cep.sharing import SharedBatch
from spark_udf.core import (
    CORRUPT_BUCKET,
    PRIOR_COL,
    SEQ_COL,
    SOURCE_COL,
    GroupCore,
    TimeReading,
    prior_times,
    segment_times,
)

__all__ = ["KeySetCore", "segment_stats", "late_free", "ORDER_COL", "SEG_RANK_COL"]

ORDER_COL = "_cep_order"  # Spark's monotonically_increasing_id: row order within a partition
SEG_RANK_COL = "_cep_seg_rank"  # a row's input segment's rank in arrival order (from the first pass)
_MIN = np.iinfo(np.int64).min


def segment_stats(
    batches: Iterator[pd.DataFrame], time_col: str, key_sets: list[tuple[str, ...]], seg_cols: tuple[str, ...],
    reading: TimeReading = TimeReading(),
) -> Iterator[pd.DataFrame]:
    """Per input segment and key set: largest and smallest valid event time, and the largest lag.

    The lag of a row is how far its time is behind the largest valid time of the earlier rows of
    its segment (0 when it is not behind). With :func:`~spark_udf.core.arrival_plan`'s watermark
    before the segment, these say whether any row of the segment can be late (:func:`late_free`)
    without a second pass. Rows reach this function in input order, segment by segment.
    """
    # per segment: [max, min, lag] per key set; the running max carries over batches of a segment
    best: dict[str, list[list[int]]] = {}
    for seg, i, sel in segment_times(batches, time_col, key_sets, seg_cols, reading):
        cur = best.setdefault(seg, [[_MIN, _MIN, 0] for _ in key_sets])
        if not len(sel):
            continue
        run = np.maximum.accumulate(sel)
        before = np.empty(len(sel), dtype=np.int64)
        before[0] = cur[i][0]
        before[1:] = np.maximum(run[:-1], cur[i][0])
        behind = before > sel  # the int64 minimum is behind nothing
        lag = int((before[behind] - sel[behind]).max()) if behind.any() else 0
        lo = int(sel.min())
        cur[i] = [max(cur[i][0], int(run[-1])), lo if cur[i][1] == _MIN else min(cur[i][1], lo),
                  max(cur[i][2], lag)]
    rows = [(seg, i, *stats) for seg, per in best.items() for i, stats in enumerate(per)]
    yield pd.DataFrame({
        "seg": [r[0] for r in rows], "ks": [r[1] for r in rows],
        "mx": [None if r[2] == _MIN else r[2] for r in rows],
        "mn": [None if r[3] == _MIN else r[3] for r in rows],
        "lag": [r[4] for r in rows],
    }, dtype=object)


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


@dataclass
class KeySetCore:
    """Runs the pattern rules of each key set over a group ``(key set, bucket)``; picklable, Spark-free.

    ``rules_of[i]`` names the rules whose ``PARTITION BY`` is the i-th key set (rule file
    order); ``judged[i]`` says whether the group carries arrival watermarks (``_cep_prior_<i>``,
    some row may be late) or none can be late. Rows arrive in any order: they are put back in
    arrival order by ``order_cols`` (the input segment's columns or its rank, then Spark's row
    order); ``sources`` gives the source of the rows of each segment rank when the rank stands for
    the segment's columns (:func:`spark_udf.api._segment_ranks`).
    """

    core: GroupCore
    rules_of: dict[int, list[str]]
    judged: dict[int, bool]
    order_cols: tuple[str, ...]
    sources: list[Any] | None = None  # by segment rank: the source column's value, when the rows carry the rank

    def group(self, key: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        """Every rule of one key set over one bucket's rows: arrival order, then the final watermark."""
        ks, bucket = int(key[0]), int(key[1])
        core = self.core
        if self.sources is not None and SEG_RANK_COL in pdf.columns:
            # the rows' source as the segment they came from (a few values shared by every row)
            rank = pdf[SEG_RANK_COL]
            if rank.isna().any():  # every segment was ranked by the first pass over the same input
                raise RuntimeError(f"{int(rank.isna().sum())} rows of group {key!r} come from an input segment the "
                                   "arrival pass did not see: did the input change during the backfill?")
            pdf[SOURCE_COL] = np.asarray(self.sources, dtype=object)[rank.to_numpy(dtype=np.int64)]
        if bucket == CORRUPT_BUCKET:
            frame = core._malformed([pdf])
            return frame if frame is not None else core._empty()
        by = [c for c in ((SEQ_COL,) if SEQ_COL in pdf.columns else self.order_cols) if c in pdf.columns]
        if by:
            pdf = pdf.sort_values(by, kind="stable", ignore_index=True)
        prior = prior_times(pdf, f"{PRIOR_COL}_{ks}") if self.judged.get(ks) else None
        batch, src = core._batch(pdf)  # once for every rule of the key set
        # and its times, keys and key order once too (the rules of a key set read the same rows)
        shared = SharedBatch(batch)
        frames = [f for f in (core.replay(name, bucket, batch, src, prior, shared) for name in self.rules_of.get(ks, []))
                  if f is not None]
        if not frames:
            return core._empty()
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
