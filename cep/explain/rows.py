"""The rows an explanation is about: one key's rows of the input, and the time range shown."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from cep.events import EventBatch, format_time

__all__ = ["key_rows", "in_range", "range_notes", "stream_rows", "plain"]


def plain(v: Any) -> Any:
    """A numpy scalar as the Python value it holds; anything else unchanged."""
    return v.item() if isinstance(v, np.generic) else v


def stream_rows(batch: EventBatch, stream: str, streams: Iterable[str] | None) -> EventBatch:
    """The rows a rule reading ``stream`` gets, as the Engine selects them: with named input
    streams (``streams``) that include the rule's, only the rows tagged with it in ``stream``."""
    names = set(streams or ())
    tags = batch.columns.get("stream")
    if not names or stream not in names or tags is None:
        return batch
    return batch.take(np.flatnonzero(tags == stream))


def typed_key(batch: EventBatch, key: dict[str, Any]) -> dict[str, Any]:
    """``key`` with each value as the input holds it: ``--key 404`` is text, a status column numbers.

    Example:
        >>> from cep.events import to_batch
        >>> typed_key(to_batch([{"status": 200}, {"status": 404}]), {"status": "404"})
        {'status': 404}
    """
    from cep.explain.pattern import _same

    out = dict(key)
    for c, want in key.items():
        if c not in batch.columns:
            continue
        hit = next((v for v in batch.column(c).tolist() if _same(v, want)), None)
        if hit is not None:
            out[c] = plain(hit)
    return out


def key_rows(batch: EventBatch, key_cols: list[str], key: dict[str, Any]) -> np.ndarray:
    """Positions of the rows whose key columns equal ``key`` (every row for a rule without keys).

    Example:
        >>> from cep.events import to_batch
        >>> key_rows(to_batch([{"k": "a"}, {"k": "b"}, {"k": "a"}]), ["k"], {"k": "a"}).tolist()
        [0, 2]
    """
    if set(key) != set(key_cols):
        raise ValueError(
            f"the key names {sorted(key)!r}; the rule's key columns are {key_cols!r}: give a value for each "
            "of them (and only them)"
        )
    hit = np.ones(batch.n, dtype=bool)
    for c in key_cols:
        want = key[c]
        col = batch.column(c)
        hit &= np.fromiter((v is not None and plain(v) == want for v in col.tolist()), dtype=bool, count=batch.n)
    return np.flatnonzero(hit)


def in_range(ts: int | None, t_from: int | None, t_to: int | None) -> bool:
    """Whether an event time is shown: ``t_from <= ts <= t_to`` (None: open); a row without a
    readable time is shown only when no range is given."""
    if t_from is None and t_to is None:
        return True
    if ts is None:
        return False
    return (t_from is None or ts >= t_from) and (t_to is None or ts <= t_to)


def range_notes(shown: int, total: int, t_from: int | None, t_to: int | None) -> list[str]:
    """The caveat an explanation cut to a time range carries."""
    if t_from is None and t_to is None:
        return []
    lo = format_time(t_from) if t_from is not None else "the start"
    hi = format_time(t_to) if t_to is not None else "the end"
    return [
        f"time range {lo} .. {hi}: {shown} of the key's {total} rows shown; every row was replayed, "
        "so the state (windows, clock, lateness) is the one the engine had"
    ]
