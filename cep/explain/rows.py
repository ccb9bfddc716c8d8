"""The rows an explanation is about: one key's rows of the input, and the time range shown."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from cep.events import EventBatch, format_time
from cep.explain.model import ExplainError

__all__ = ["key_rows", "same", "joined_table", "refuse_joined", "in_range", "range_notes", "stream_rows", "plain"]


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


def joined_table(rule: Any) -> str | None:
    """The table a rule joins (``FROM s JOIN t FOR SYSTEM_TIME AS OF ...``, a search rule's ``join:``), or None."""
    compiled = getattr(rule, "compiled", None)
    statement = getattr(compiled, "statement", None) if compiled is not None else None
    join = getattr(statement, "join", None) or getattr(getattr(rule, "spec", None), "join", None)
    if join is None:
        return None
    return str(getattr(join, "table", join))


def refuse_joined(rule: Any) -> None:
    """Refuse a rule with a temporal join: the replay runs the rule's operator without the engine's
    tables, so every joined column would read NULL and every verdict would be wrong.

    Raises:
        ExplainError: the rule joins a table.
    """
    table = joined_table(rule)
    if table is not None:
        raise ExplainError(f"rule {rule.name!r} joins table {table!r}: explaining rules with a temporal join is not "
                           "supported yet (the replay would not see the table's rows); run it with cep run, or "
                           "explain a copy of the rule without the join over events that carry the joined columns")


def typed_key(batch: EventBatch, key: dict[str, Any]) -> dict[str, Any]:
    """``key`` with each value as the input holds it: ``--key 404`` is text, a status column numbers.

    Example:
        >>> from cep.events import to_batch
        >>> typed_key(to_batch([{"status": 200}, {"status": 404}]), {"status": "404"})
        {'status': 404}
    """
    out = dict(key)
    for c, want in key.items():
        if c not in batch.columns:
            continue
        hit = next((v for v in batch.column(c).tolist() if same(v, want)), None)
        if hit is not None:
            out[c] = plain(hit)
    return out


def same(v: Any, want: Any) -> bool:
    """Whether an input value is the key value asked for; text asked for matches a number of the same value.

    Example:
        >>> same(404, "404"), same(7.0, "7"), same("a", "b"), same(None, None)
        (True, True, False, True)
    """
    if isinstance(v, np.generic):
        v = v.item()
    if v is None:
        return want is None
    if isinstance(want, str) and not isinstance(v, str):
        if str(v) == want:
            return True
        try:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and float(want) == float(v)
        except ValueError:
            return False
    return bool(v == want)


def key_rows(events: EventBatch, cols: list[str], key: dict[str, Any], what: str) -> tuple[np.ndarray, Any]:
    """Rows of ``events`` whose key columns hold ``key`` and the key as the operator sees it.

    Raises:
        ExplainError: the key names other columns, or no event has it (the message shows a few keys).
    """
    if set(key) != set(cols):
        want = ", ".join(cols) if cols else "no key (no PARTITION BY)"
        got = ", ".join(key) if key else "none"
        raise ExplainError(f"{what} is keyed by {want}; --key gave {got}"
                           + (f": pass --key {cols[0]}=VALUE" if len(cols) == 1 else
                              f": pass --key {'=...,'.join(cols)}=..." if cols else ": leave --key out"))
    if not cols:
        return np.arange(events.n), ()
    sel = np.ones(events.n, dtype=bool)
    for c in cols:
        col = events.column(c)
        sel &= np.fromiter((same(v, key[c]) for v in col.tolist()), dtype=bool, count=events.n)
    idx = np.flatnonzero(sel)
    if not len(idx):
        values = list(zip(*[events.column(c).tolist() for c in cols]))
        known = list(dict.fromkeys(v for v in values if not any(x is None for x in v)))
        shown = ", ".join(",".join(f"{c}={x}" for c, x in zip(cols, v)) if len(cols) > 1 else str(v[0]) for v in known[:5])
        wanted = ",".join(f"{c}={key[c]}" for c in cols)
        raise ExplainError(f"{what}: no event of key {wanted} in the input; it has "
                           f"{len(known):,} key{'s' if len(known) != 1 else ''}"
                           + (f", for example {shown}" if known else ""))
    first = int(idx[0])
    vals = [events.column(c)[first] for c in cols]
    vals = [v.item() if isinstance(v, np.generic) else v for v in vals]
    return idx, (vals[0] if len(cols) == 1 else tuple(vals))


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
