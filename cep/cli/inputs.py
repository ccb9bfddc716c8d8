"""Input specs (``[NAME=]PATH``) and reading them as batches, several merged in event time."""

from __future__ import annotations

import heapq
import os
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

__all__ = ["input_batches", "merge_time_field", "merge_sources", "merge_unit"]


def _parse_inputs(specs: list[str]) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = []
    for s in specs:
        name, sep, path = s.partition("=")
        if sep and name and not os.path.exists(s) and "/" not in name:
            out.append((name, path))
        else:
            out.append((None, s))
    return out


def _merged_batches(inputs, time_field: str | None, fmt: str | None, batch_size: int,
                    unit: str = "ms") -> Iterator[tuple[Any, str | None]]:
    """Several named inputs merged in event-time order (ties: input order, then file order)."""
    from cep.events import read_events

    sources = [(name, read_events(path, batch_size, fmt)) for name, path in inputs]
    return merge_sources(sources, time_field, batch_size, unit)


def merge_sources(sources: Sequence[tuple[str | None, Iterable[Any]]], time_field: str | None, batch_size: int,
                  unit: str = "ms") -> Iterator[tuple[Any, str | None]]:
    """Several inputs' batches ((stream name or None, batches) pairs) merged in event-time order
    (ties: input order, then order within the input); each event carries its input's name in
    ``stream`` (``inputN`` for an unnamed one). What ``cep run`` does with several --input files,
    and ``cep test`` with a test's ``inputs:``."""
    from cep.events import batch_from_records, parse_times

    def events(idx: int, name: str, batches: Iterable[Any]):
        seq = 0
        for b in batches:
            for bl in b.bad:
                yield (-(2**63), idx, seq, None, bl)
                seq += 1
            if time_field is None:  # no rule reads event time (search rules only): inputs in turn
                ms, ok = np.zeros(b.n, dtype=np.int64), np.zeros(b.n, dtype=bool)
            else:
                ms, ok, _ = parse_times(b.column(time_field), unit, converted=b.epoch_ms.get(time_field))
            for i in range(b.n):
                rec = b.record(i)
                rec.setdefault("stream", name)
                # the fields of this row that hold epoch ms converted from dates (no time_unit applies)
                conv = tuple(k for k, m in b.epoch_ms.items() if m is True or m[i])
                yield (int(ms[i]) if ok[i] else -(2**63), idx, seq, (rec, b.line_of(i), b.source, conv), None)
                seq += 1

    def batch(recs: list[dict], lines: list[int], convs: list[tuple[str, ...]]) -> Any:
        b = batch_from_records(recs, lines, "merged input")
        for k in {k for c in convs for k in c}:
            b.epoch_ms[k] = np.fromiter((k in c for c in convs), dtype=bool, count=len(convs))
        return b

    gens = [events(i, name or f"input{i}", batches) for i, (name, batches) in enumerate(sources)]
    recs: list[dict] = []
    lines: list[int] = []
    convs: list[tuple[str, ...]] = []
    bad: list = []
    for _, _, _, item, bl in heapq.merge(*gens):
        if bl is not None:
            bad.append(bl)
            continue
        rec, line, _src, conv = item
        recs.append(rec)
        lines.append(line)
        convs.append(conv)
        if len(recs) >= batch_size:
            b = batch(recs, lines, convs)
            b.bad, bad = bad, []
            yield b, None
            recs, lines, convs = [], [], []
    if recs or bad:
        b = batch(recs, lines, convs)
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
    return _merged_batches(inputs, tf, fmt, batch_size, merge_unit(rules, tf))


def merge_unit(rules: Any, field: str | None) -> str:
    """The unit the rules read ``field``'s numbers in, which orders merged inputs (ms by default).

    Raises:
        ValueError: rules read the field in different units.
    """
    units: dict[str, list[str]] = {}
    for r in rules:
        tf = r.compiled.statement.order_by if r.compiled is not None else r.spec.time_column
        if tf == field:
            units.setdefault(r.time_unit, []).append(r.name)
    if len(units) > 1:
        detail = "; ".join(f"{u}: {', '.join(names)}" for u, names in sorted(units.items()))
        raise ValueError(f"the rules read the event-time field {field!r} in different time units ({detail}), so "
                         "merged inputs have no one time order; give them one time_unit (or pass --time-unit)")
    return next(iter(units), "ms")

