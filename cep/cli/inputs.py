"""Input specs (``[NAME=]PATH``) and reading them as batches, several merged in event time."""

from __future__ import annotations

import heapq
import os
from typing import Any, Iterator

import numpy as np

__all__ = ["input_batches", "merge_time_field"]


def _parse_inputs(specs: list[str]) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = []
    for s in specs:
        name, sep, path = s.partition("=")
        if sep and name and not os.path.exists(s) and "/" not in name:
            out.append((name, path))
        else:
            out.append((None, s))
    return out


def _merged_batches(inputs, time_field: str | None, fmt: str | None, batch_size: int) -> Iterator[tuple[Any, str | None]]:
    """Several named inputs merged in event-time order (ties: input order, then file order)."""
    from cep.events import batch_from_records, parse_times, read_events

    def events(idx: int, name: str, path: str):
        seq = 0
        for b in read_events(path, batch_size, fmt):
            for bl in b.bad:
                yield (-(2**63), idx, seq, None, bl)
                seq += 1
            if time_field is None:  # no rule reads event time (search rules only): inputs in turn
                ms, ok = np.zeros(b.n, dtype=np.int64), np.zeros(b.n, dtype=bool)
            else:
                ms, ok, _ = parse_times(b.column(time_field))
            for i in range(b.n):
                rec = b.record(i)
                rec.setdefault("stream", name)
                yield (int(ms[i]) if ok[i] else -(2**63), idx, seq, (rec, b.line_of(i), b.source), None)
                seq += 1

    gens = [events(i, name or f"input{i}", path) for i, (name, path) in enumerate(inputs)]
    recs: list[dict] = []
    lines: list[int] = []
    bad: list = []
    for _, _, _, item, bl in heapq.merge(*gens):
        if bl is not None:
            bad.append(bl)
            continue
        rec, line, _src = item
        recs.append(rec)
        lines.append(line)
        if len(recs) >= batch_size:
            b = batch_from_records(recs, lines, "merged input")
            b.bad, bad = bad, []
            yield b, None
            recs, lines = [], []
    if recs or bad:
        b = batch_from_records(recs, lines, "merged input")
        b.bad = bad
        yield b, None


def merge_time_field(rules: Any) -> str | None:
    """The one field the rules order by, which merges several inputs (None: no rule orders by time).

    Raises:
        ValueError: the rules order by different fields.
    """
    times = (r.compiled.statement.order_by if r.compiled is not None else r.spec.time_column for r in rules)
    fields = {t for t in times if t}  # a search rule may have no time field
    if len(fields) > 1:
        raise ValueError(f"the rules order by different fields ({', '.join(sorted(fields))}); "
                         "pass --time-field to say which one merges the inputs")
    return fields.pop() if fields else None


def input_batches(
    rules: Any, inputs: list[tuple[str | None, str]], time_field: str | None, fmt: str | None, batch_size: int
) -> Iterator[tuple[Any, str | None]]:
    """The events of ``inputs`` ((stream name or None, path) pairs) as (batch, stream name) pairs.

    One input is read as it is; several are merged in event time on ``time_field``, by default the
    field the rules order by (:func:`merge_time_field`, which raises ValueError when they differ).
    """
    from cep.events import read_events

    if len(inputs) == 1:
        name, path = inputs[0]
        return ((b, name) for b in read_events(path, batch_size, fmt))
    tf = time_field if time_field is not None else merge_time_field(rules)
    return _merged_batches(inputs, tf, fmt, batch_size)

