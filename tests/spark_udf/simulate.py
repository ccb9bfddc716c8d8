"""Spark's contract for ``applyInPandasWithState`` played out in plain Python, around GroupCore.

What Spark guarantees the stateful stage, and nothing more: per micro-batch, each group with
rows is called once with its rows (in one or several chunks, rows of one key in arrival order);
each group without rows whose event-time timeout lies before the watermark is called once with
``hasTimedOut``; the watermark of a micro-batch is the largest event time of every earlier one
(delay 0); after the last batch with data, batches without data run while the watermark moves.
"""

from __future__ import annotations

import zlib
from typing import Any, Iterable

import numpy as np
import pandas as pd

from cep.events import parse_times
from spark_udf.core import GroupCore
from spark_udf.kinds import KEYED_KINDS, kind_of


def bucket_of(rule: Any, row: dict[str, Any], buckets: int) -> int:
    keys = KEYED_KINDS[kind_of(rule)].key_columns(rule)
    text = repr(tuple(row.get(k) for k in keys))
    return zlib.crc32(text.encode()) % buckets


def run_stream(
    core: GroupCore,
    rules: list[Any],
    batches: Iterable[list[dict[str, Any]]],
    columns: list[str],
    buckets: int,
    chunk: int = 3,
    state: dict | None = None,
    timeouts: dict | None = None,
    watermark: int = 0,
) -> tuple[pd.DataFrame, dict, dict, int]:
    """Every output row of the stream; also the final state, timeouts and watermark (to resume)."""
    state = {} if state is None else state
    timeouts = {} if timeouts is None else timeouts
    frames: list[pd.DataFrame] = []

    def call(key, chunks, timed_out):
        frame, new_state, timeout = core.stream_group(key, chunks, state.get(key), watermark, timed_out)
        if frame is not None:
            frames.append(frame)
        if new_state is None:
            state.pop(key, None)
        else:
            state[key] = new_state
        timeouts.pop(key, None)
        if timeout is not None:
            assert timeout >= watermark and timeout > 0
            timeouts[key] = timeout

    for rows in batches:
        groups: dict[tuple, list[dict]] = {}
        for row in rows:
            for r in rules:
                groups.setdefault((r.name, bucket_of(r, row, buckets)), []).append(row)
        for key, grows in groups.items():
            # each chunk converted on its own, as Arrow batches are: a long column is float only
            # in a chunk that holds a NULL
            recs = [{c: g.get(c) for c in columns} for g in grows]
            call(key, [pd.DataFrame(recs[i : i + chunk], columns=columns) for i in range(0, len(recs), chunk)], False)
        for key in [k for k, t in list(timeouts.items()) if k not in groups and t < watermark]:
            call(key, [], True)
        ms, ok, _ = parse_times(np.asarray([r.get("ts") for r in rows], dtype=object))
        watermark = max([watermark] + ms[ok].tolist())
    # the batch without data Spark runs once the watermark moved after the last data
    for key in [k for k, t in list(timeouts.items()) if t < watermark]:
        call(key, [], True)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=core.envelope_columns)
    return out, state, timeouts, watermark


def rows_of(frame: pd.DataFrame, output: str) -> list[dict[str, Any]]:
    sel = frame[frame["output"] == output]
    out = []
    for rec in sel.to_dict("records"):
        out.append({k: v for k, v in rec.items() if v is not None and not (isinstance(v, float) and v != v)})
    return out
