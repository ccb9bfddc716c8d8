"""Explain a windowed analytics rule for one key: per row its windows, aggregates, lateness, rows emitted.

The rule runs in its own ``WindowOperator`` over the whole input (every key: the clock, the
watermark and the shared sketches are the engine's), each row of the explained key in a call of
its own, so what that call emits and the key's windows right after it (``WindowOperator.peek``)
belong to the row. The operator is a subclass that only marks each row it evaluates with its key
id (stripped before anything is shown) and, while asked, records every aggregate of the windows
it evaluates, HAVING's verdict included; the rows it emits are the engine's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

import numpy as np

from cep.analytics import WindowOperator
from cep.analytics.context import _Ctx
from cep.analytics.operator import WindowStats
from cep.events import EventBatch, event_times, format_time, to_batch
from cep.explain.model import ExplainedRow, Explanation, Verdict
from cep.explain.rows import (
    in_range,
    key_rows,
    plain,
    range_notes,
    refuse_joined,
    stream_rows,
    typed_key,
)
from cep.expressions import truthy
from patterns.rules import Rule

__all__ = ["explain_analytics"]

_KEY = "\0explain_key"  # marks each evaluated row with its key's value; never shown


class _ExplainingOperator(WindowOperator):
    """The engine's WindowOperator, marking the rows it evaluates with their key and, while
    ``recording``, describing every window of the ``target`` key it evaluates (aggregates,
    SELECT items, HAVING)."""

    recording = False
    target: Any = None

    def reset(self) -> None:
        super().reset()
        self.described: list[dict[str, Any]] = []

    def _results_apart(self, results: list, prevres: dict | None, ctx: _Ctx) -> tuple[np.ndarray, list[dict]]:
        # every way the operator evaluates windows (one window, many read at once, sessions,
        # slides) ends here
        at, rows = super()._results_apart(results, prevres, ctx)
        if rows:
            keys = ctx.keys()
            for i, row in zip(at.tolist(), rows):
                row[_KEY] = keys[i]
        if self.recording:
            stats = WindowStats(**asdict(self.stats))
            try:
                self.described.extend(self._describe(ctx))
            finally:
                self.stats = stats
        return at, rows

    def _describe(self, ctx: _Ctx) -> list[dict[str, Any]]:
        """Every cell of ``ctx`` of the target key: its window, aggregates, SELECT items, HAVING."""
        out = []
        lists: dict = {}
        keys = ctx.keys()
        for i in [i for i, k in enumerate(keys) if k == self.target]:
            aggs = {}
            for s, a in enumerate(self.spec.aggregates):
                aggs[a.text] = _value(ctx, f"\0agg{s}", i)
            for s in self.spec.prev:
                aggs[f"PREV_WINDOW({self.spec.aggregates[s].text})"] = _value(ctx, f"\0prev{s}", i)
            having = None
            if self._having_rows is not None:
                having = bool(truthy(self._safe(self._having_rows, (i, ctx, lists))))
            select = {}
            for name, col, fn in self._select:
                select[name] = _value(ctx, col, i) if col is not None else plain(self._safe(fn, (i, ctx, lists)))
            out.append({"window_start": int(ctx.wstart[i]), "window_end": int(ctx.wend[i]),
                        "aggregates": aggs, "values": select, "having": having})
        return out


def _value(ctx: _Ctx, name: str, i: int) -> Any:
    vals, nulls = ctx.column(name)
    if nulls is not False and nulls is not None and bool(np.broadcast_to(np.asarray(nulls, dtype=bool), (ctx.n,))[i]):
        return None
    return plain(vals[i])


def _show(v: Any) -> str:
    if isinstance(v, (bytes, bytearray)):
        return f"<{len(v)} bytes>"
    return repr(v)


def explain_analytics(rule: Rule, events: EventBatch | Any, key: dict[str, Any], t_from: int | None,
                      t_to: int | None, *, streams: Iterable[str] | None = None) -> Explanation:
    """Replay ``events`` through the analytics rule and explain, row by row, one key's windows.

    ``key`` maps each GROUP BY key column to its value (``{}`` for a rule without keys); rows of
    the key with an event time in ``[t_from, t_to]`` are shown (None: open), but every row is
    replayed. ``streams`` are the named input streams, as the Engine is given them (a rule then
    reads only the rows of the stream its FROM names).

    Example:
        >>> from patterns.rules import parse_rules
        >>> rules = parse_rules('''rules:
        ...   - name: busy
        ...     kind: analytics
        ...     sql: SELECT k, COUNT(*) AS n FROM t GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND) HAVING COUNT(*) > 1
        ... ''')
        >>> ev = [{"k": "a", "ts": 1}, {"k": "b", "ts": 2}, {"k": "a", "ts": 3}, {"k": "a", "ts": 12}]
        >>> ex = explain_analytics(rules.rules[0], ev, {"k": "a"}, None, None)
        >>> v = ex.rows[1].verdicts[0]
        >>> v.kind, v.data["window_start"], v.data["window_end"], v.data["aggregates"], v.ok
        ('window', 0, 10, {'COUNT(*)': 2}, True)
        >>> [v.data["row"] for v in ex.outcome if v.kind == "emitted"]
        [{'k': 'a', 'n': 2, 'rule': 'busy', 'correction': False}]
    """
    spec = rule.spec
    refuse_joined(rule)
    batch = stream_rows(to_batch(events), spec.stream, streams)
    key_cols = list(spec.keys)
    key = typed_key(batch, key)
    idx, _ = key_rows(batch, key_cols, key, f"rule {rule.name!r}")
    keyval: Any = () if not key_cols else key[key_cols[0]] if len(key_cols) == 1 else tuple(key[c] for c in key_cols)
    op = _ExplainingOperator(spec, name=rule.name, lateness_ms=rule.lateness_ms, time_unit=rule.time_unit,
                             max_future_skew_ms=rule.max_future_skew_ms)
    op.target = keyval
    win = spec.window
    slide = win.kind == "SLIDE"
    op.recording = slide  # SLIDE rows are evaluated when released: record every release
    sub = batch.take(idx)
    ms, ok, _why = event_times(sub, op.time_col, op.time_unit, op.max_future_skew_ms, op.clock)
    rows = [ExplainedRow(j, int(ms[j]) if ok[j] else None, sub.record(j)) for j in range(len(idx))]
    ex = Explanation(rule.name, "analytics", dict(key))
    emitted: list[Verdict] = []
    state: dict[str, int | None] = {"last": None}  # the key row the latest emissions follow

    def take_emitted(out_rows: list[dict], when: str) -> None:
        for r in out_rows:
            if _KEY not in r or r[_KEY] != keyval:
                continue
            row = {k: v for k, v in r.items() if k != _KEY}
            what = "retraction" if row.get("retract") else "correction" if row.get("correction") else "row"
            text = f"{what} emitted {when}: " + ", ".join(f"{k}={_show(v)}" for k, v in row.items()
                                                            if k not in ("rule", "correction", "retract"))
            v = Verdict("emitted", text, not row.get("retract"), {"row": row, "after_row": state["last"]})
            emitted.append(v)
            last = state["last"]
            if last is not None:
                rows[last].verdicts.append(v)

    shown = [in_range(r.ts, t_from, t_to) for r in rows]
    # the key's rows by input line; a line number alone is not enough (several inputs each have a
    # line 3), so a late or bad row is the key's only when its event is the key row's too
    line_of_key: dict[int, list[int]] = {}
    for j, i in enumerate(idx.tolist()):
        line_of_key.setdefault(batch.line_of(i), []).append(j)

    def run_chunk(lo: int, hi: int) -> None:
        """Rows the explanation does not show one by one: fed together, as the engine would."""
        if hi <= lo:
            return
        out = op.process(batch.take(np.arange(lo, hi)))
        for kind, got in (("late", out.late), ("error", out.errors)):
            for r in got:
                for j in line_of_key.get(int(r.get("line") or 0), []):
                    if lo <= int(idx[j]) < hi and rows[j].event == r.get("event"):
                        rows[j].verdicts.append(Verdict(kind, r["reason"], False))
                        break
        take_emitted(out.matches, f"when later events moved the clock to {_when(op.max_ts)}")

    pos = 0
    for j, i in enumerate(idx.tolist()):
        if not shown[j]:
            continue
        run_chunk(pos, i)
        before = op.peek(keyval) if win.kind == "SESSION" else []
        filtered = op.stats.filtered
        clock_before = op.max_ts
        out = op.process(batch.take(np.array([i])))
        state["last"] = j
        row = rows[j]
        if out.errors:
            row.verdicts.append(Verdict("error", out.errors[0]["reason"], False))
        elif out.late:
            row.verdicts.append(Verdict("late", out.late[0]["reason"], False,
                                        {"watermark": None if clock_before is None else clock_before - op.lateness}))
        elif op.stats.filtered > filtered:
            row.verdicts.append(Verdict("info", "WHERE left the row out (it still moved the clock)", False,
                                        {"where": False}))
        elif not slide:
            row.verdicts.extend(_window_verdicts(op, keyval, row.ts, before))
        take_emitted(out.matches, f"as the row moved the clock to {_when(op.max_ts)}")
        pos = i + 1
    run_chunk(pos, batch.n)
    state["last"] = None
    out = op.finish()
    take_emitted(out.matches, "at the end of the input (the final watermark)")
    applied = [j for j, r in enumerate(rows)
               if not any(v.kind in ("late", "error") or v.data.get("where") is False for v in r.verdicts)]
    if slide:
        _slide_verdicts(op, rows, applied)
    ex.rows = [r for r, s in zip(rows, shown) if s]
    ex.outcome = list(emitted)
    fixes = sum(1 for v in emitted if v.data["row"].get("correction"))
    n_late = sum(1 for r in rows for v in r.verdicts if v.kind == "late")
    n_err = sum(1 for r in rows for v in r.verdicts if v.kind == "error")
    ex.outcome.append(Verdict(
        "info", f"{len(rows):,} row{'' if len(rows) == 1 else 's'} of the key: {len(applied):,} processed, {n_late:,} late, "
        f"{n_err:,} error{'' if n_err == 1 else 's'}; {len(emitted):,} row{'' if len(emitted) == 1 else 's'} emitted "
        f"({fixes:,} correction{'' if fixes == 1 else 's'} or retraction{'' if fixes == 1 else 's'})", None,
        {"rows": len(rows), "applied": len(applied), "late": n_late, "errors": n_err, "emitted": len(emitted)}))
    ex.notes = range_notes(len(ex.rows), len(rows), t_from, t_to)
    if any(a.func == "APPROX_TOP_K" for a in spec.aggregates):
        ex.notes.append(
            "APPROX_TOP_K counts depend on how the input is cut into batches (docs/analytics.md: Misra-Gries "
            "merges are not associative) and explain feeds each shown row alone: its counts may differ from "
            "cep run's, within the sketch's bound")
    if ex.notes:
        ex.notes.append("the outcome lists every row emitted for the key over the whole input")
    return ex


def _when(ms: int | None) -> str:
    return "nothing" if ms is None else f"{format_time(ms)} ({ms})"


def _window_verdicts(op: _ExplainingOperator, keyval: Any, ts: int | None, before: list[dict]) -> list[Verdict]:
    """The key's windows holding the row, right after it, described by the engine's own evaluation."""
    op.described = []
    op.recording = True
    try:
        wins = op.peek(keyval)
    finally:
        op.recording = False
    desc = {(d["window_start"], d["window_end"]): d for d in op.described}
    out = []
    kind = op.spec.window.kind
    for w in wins:
        s, e = w["window_start"], w["window_end"]
        if ts is None or not (s <= ts < e):
            continue
        d = desc.get((s, e), {"aggregates": {}, "values": {}, "having": None})
        parts = [f"{kind} [{_t(s)}, {_t(e)})"]
        if kind == "SESSION":
            parts.append(_session_change(before, s, e, ts))
        text = " ".join(parts) + ": " + ", ".join(f"{k} = {_show(v)}" for k, v in d["aggregates"].items())
        if d["having"] is not None:
            text += f"; HAVING {'holds' if d['having'] else 'fails'}"
        if w["fired"]:
            text += (f"; the window's on-time row was already due (the clock passed {_t(e)}): the row changes it, "
                     f"so it is corrected when the window becomes final at {_t(e + op.lateness)}")
        else:
            text += f"; its row is due when the clock reaches {_t(e)}"
        data = {"window": kind, "window_start": s, "window_end": e, "aggregates": d["aggregates"],
                "values": d["values"], "having": d["having"], "fired": w["fired"], "row": w["row"]}
        out.append(Verdict("window", text, d["having"], data))
    return out


def _session_change(before: list[dict], s: int, e: int, ts: int) -> str:
    """How the row changed the key's sessions: a new one, an extension, or a merge."""
    touched = [w for w in before if w["window_start"] < e and s < w["window_end"]]
    if not touched:
        return "(a new session)"
    if len(touched) > 1:
        olds = ", ".join(f"[{_t(w['window_start'])}, {_t(w['window_end'])})" for w in touched)
        return f"(the row bridged sessions {olds}: merged into one)"
    w = touched[0]
    if (w["window_start"], w["window_end"]) != (s, e):
        return f"(extended from [{_t(w['window_start'])}, {_t(w['window_end'])}))"
    return "(joined the session)"


def _slide_verdicts(op: _ExplainingOperator, rows: list[ExplainedRow], applied: list[int]) -> None:
    """SLIDE: each released row's own window (t - size, t]; rows are released in event-time
    order, ties by arrival, so the recorded windows of the key follow its rows in that order."""
    size = op.spec.window.size_ms
    order = sorted(applied, key=lambda j: (rows[j].ts, j))
    cand = iter(order)
    for d in op.described:
        # WHERE leaves rows out unseen here: the next row of the key with the window's time
        j = next((j for j in cand if rows[j].ts == d["window_end"]), None)
        if j is None:
            break
        t = d["window_end"]
        text = (f"SLIDE ({_t(t - size)}, {_t(t)}] (evaluated when the watermark reached the row): "
                + ", ".join(f"{k} = {_show(v)}" for k, v in d["aggregates"].items()))
        if d["having"] is not None:
            text += f"; HAVING {'holds' if d['having'] else 'fails'}"
        data = {"window": "SLIDE", "window_start": d["window_start"], "window_end": d["window_end"],
                "aggregates": d["aggregates"], "values": d["values"], "having": d["having"], "fired": True}
        rows[j].verdicts.insert(0, Verdict("window", text, d["having"], data))


def _t(ms: int) -> str:
    return f"{format_time(ms)}"
