"""An analytics rule's state as plain data: per key, its open windows with their aggregates and sketch sizes."""

from __future__ import annotations

from typing import Any

import numpy as np

from cep.analytics import WindowOperator
from cep.analytics.context import _Ctx
from cep.analytics.kernels import _CountMin, _Entries, _HyperLogLog, _TopK
from cep.analytics.partials import _combine, _Partial
from cep.state_view.model import RuleView, key_dict, key_text, plain, time_text
from patterns.analytics import AggRef

__all__ = ["analytics_view"]


def analytics_view(op: WindowOperator) -> RuleView:
    """What a restored :class:`~cep.analytics.WindowOperator` holds: its windows, key by key.

    A TUMBLE, HOP or SESSION window is listed from its first event until it is final (end +
    lateness), with each aggregate's value as it stands (what the window's row would say if it
    closed now, before HAVING) and, for sketches, their size. A SLIDE rule holds rows, not
    windows: per key, the events waiting for the watermark and the rows a later window can reach.

    Example:
        >>> from patterns.analytics import compile_analytics
        >>> op = WindowOperator(compile_analytics('''SELECT u, COUNT(*) AS n, APPROX_COUNT_DISTINCT(ip) AS ips
        ...     FROM t GROUP BY u, TUMBLE(ts, INTERVAL '10' SECOND)'''), name="r")
        >>> _ = op.process([{"u": "a", "ts": 1000, "ip": "x"}, {"u": "a", "ts": 2000, "ip": "y"}])
        >>> w = analytics_view(op).keys[0]["windows"][0]
        >>> w["window_start"], w["window_end"], w["status"], [(g["name"], g["value"]) for g in w["aggregates"]]
        (0, 10000, 'open', [('n', 2), ('ips', 2)])
        >>> w["aggregates"][1]["sketch"]
        {'kind': 'hyperloglog', 'precision': 12, 'form': 'sparse', 'registers': 2, 'bytes': 8}
    """
    names = _aggregate_names(op)
    by_key: dict[int, dict[str, Any]] = {}
    keys_out: list[dict[str, Any]] = []

    def entry(kid: int) -> dict[str, Any]:
        got = by_key.get(kid)
        if got is None:
            key = op._key_values.get(kid)
            got = by_key[kid] = {"key": key_dict(op.key_cols, key), "windows": []}
            keys_out.append(got)
        return got

    engine = op.engine
    kind = op.spec.window.kind
    windows = 0
    if kind == "SESSION":
        windows = _sessions(op, engine, names, entry)
    elif kind == "SLIDE":
        _slide(op, engine, entry)
    else:
        windows = _panes(op, engine, names, entry)
    c = op.counts
    s = op.stats
    view = RuleView(
        name=op.name, kind="analytics", watermark=op.watermark,
        counts={"read": c.read, "processed": c.processed, "late": c.late, "errors": c.errors,
                "buffered": c.buffered, "matches": s.matches, "corrections": s.corrections,
                "retractions": s.retractions},
        totals={"keys_with_state": len(keys_out), "keys": op.key_count(), "open_windows": windows},
        keys=sorted(keys_out, key=lambda e: key_text(e["key"])),
    )
    for i, k in enumerate(op.kernels):
        bloom = op._seen.get(i)
        if bloom is not None:
            view.sketches.append({"aggregate": k.agg.text, "kind": "scalable bloom filter",
                                  "filters": len(bloom.filters), "items": int(bloom.count), "bytes": int(bloom.nbytes)})
    return view


def _aggregate_names(op: WindowOperator) -> list[tuple[str, str | None]]:
    """Per aggregate slot: its text and the SELECT name that shows it as is (None when only inside an expression)."""
    alias: dict[int, str] = {}
    for col in op.spec.select:
        if isinstance(col.expr, AggRef) and col.expr.slot not in alias:
            alias[col.expr.slot] = col.name
    return [(a.text, alias.get(i)) for i, a in enumerate(op.spec.aggregates)]


def _aggregates(op: WindowOperator, part: _Partial, wstart: np.ndarray, wend: np.ndarray,
                names: list[tuple[str, str | None]]) -> list[list[dict[str, Any]]]:
    """Per cell of ``part``: every aggregate's value now, and its sketch's size."""
    ctx = _Ctx(op, part.cells, wstart, wend)
    n = len(part.cells)
    out: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    for slot, (k, state) in enumerate(zip(op.kernels, part.states)):
        vals, nulls = k.result(state, part.n, part.cells, ctx)
        null_at = np.broadcast_to(np.asarray(nulls, dtype=bool), (n,)) if nulls is not False and nulls is not None else None
        text, name = names[slot]
        for i in range(n):
            item: dict[str, Any] = {"aggregate": text, "name": name,
                                    "value": None if null_at is not None and null_at[i] else plain(vals[i])}
            sk = _sketch(op, k, state, i)
            if sk is not None:
                item["sketch"] = sk
            out[i].append(item)
    return out


def _sketch(op: WindowOperator, k: Any, state: Any, i: int) -> dict[str, Any] | None:
    """The size of cell ``i``'s sketch in aggregate ``k``'s partial state (None for plain aggregates)."""
    if isinstance(k, _HyperLogLog):
        idx, _cp, dense = state
        if i in dense:
            return {"kind": "hyperloglog", "precision": k.p, "form": "dense", "registers": k.m, "bytes": k.m}
        got = int(np.count_nonzero(idx == i))
        return {"kind": "hyperloglog", "precision": k.p, "form": "sparse", "registers": got, "bytes": 4 * got}
    if isinstance(k, _TopK):
        t = state.get(i)
        return {"kind": "top-k", "capacity": k.capacity, "counters": len(t) if t is not None else 0,
                "bytes": int(t.nbytes) if t is not None else 0}
    if isinstance(k, _CountMin):
        cms = state[0]
        return {"kind": "count-min", "width": k.width, "depth": k.depth, "bytes": int(cms.nbytes),
                "shared": "one sketch for every key of the window"}
    if isinstance(k, _Entries):
        got = int(np.count_nonzero(state[0] == i))
        return {"kind": "exact set", "values": got, "bytes": 16 * got}
    return None


def _panes(op: WindowOperator, engine: Any, names: list[tuple[str, str | None]], entry: Any) -> int:
    n = 0
    lat = op.lateness
    for k in sorted(engine.wins):
        w = engine.wins[k]
        chunks = [c for p in engine.panes_of(k) for c in engine.panes.get(p, ())]
        if not chunks:
            continue
        part = _combine(chunks, op.kernels)
        if not len(part.cells):
            continue
        start, end = k * engine.step, k * engine.step + engine.size
        wstart = np.full(len(part.cells), start, dtype=np.int64)
        wend = np.full(len(part.cells), end, dtype=np.int64)
        aggs = _aggregates(op, part, wstart, wend, names)
        for i, kid in enumerate(part.cells.tolist()):
            n += 1
            entry(kid)["windows"].append(_window(start, end, lat, bool(w.fired), int(part.n[i]), aggs[i]))
    return n


def _window(start: int, end: int, lateness: int, fired: bool, rows: int, aggs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "window_start": start, "window_end": end, "window_start_time": time_text(start),
        "window_end_time": time_text(end),
        # a window's row leaves when the clock (largest event time) reaches its end; it takes
        # late events until end + lateness, then it is final and dropped
        "status": "emitted, open for late events" if fired else "open",
        "final_at": end + lateness, "events": rows, "aggregates": aggs,
    }


def _sessions(op: WindowOperator, engine: Any, names: list[tuple[str, str | None]], entry: Any) -> int:
    engine._build_pending()
    if not len(engine.sid) or not engine.chunks:
        return 0
    part = _combine(engine.chunks, op.kernels, engine._mapper(), keep=np.sort(engine.sid))
    pos_of = {int(s): i for i, s in enumerate(engine.sid.tolist())}
    idx = np.array([pos_of[c] for c in part.cells.tolist()], dtype=np.int64)
    wstart = engine.start[idx]
    wend = engine.last[idx] + engine.gap
    aggs = _aggregates(op, part, wstart, wend, names)
    order = np.lexsort((wstart, engine.kid[idx]))
    for i in order.tolist():
        j = int(idx[i])
        entry(int(engine.kid[j]))["windows"].append(
            _window(int(wstart[i]), int(wend[i]), op.lateness, bool(engine.fired[j]), int(part.n[i]), aggs[i]))
    return len(order)


def _slide(op: WindowOperator, engine: Any, entry: Any) -> None:
    for what, ev in (("pending_events", engine.pending), ("rows_kept", engine.kept)):
        if ev is None or not len(ev):
            continue
        kids, counts = np.unique(ev.kid, return_counts=True)
        for kid, cnt in zip(kids.tolist(), counts.tolist()):
            e = entry(kid)
            e.setdefault("pending_events", 0)
            e.setdefault("rows_kept", 0)
            e[what] = int(cnt)
