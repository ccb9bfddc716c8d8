"""The text ``cep state`` prints: positions first, then per rule its clock, totals and keys as an indented tree."""

from __future__ import annotations

import json
from typing import Any

from cep.state_view.model import RuleView, StateView, key_text, time_text

__all__ = ["render_text"]


def _n(x: int, noun: str, plural: str | None = None) -> str:
    return f"{x:,} {noun if x == 1 else (plural or noun + 's')}"


def _values(values: dict[str, Any]) -> str:
    return json.dumps(values, ensure_ascii=False, separators=(",", ":"), default=str)


def _when(ms: Any) -> str:
    return "none yet" if ms is None else f"{time_text(ms)} ({ms})"


def render_text(view: StateView) -> str:
    """The state as readable text, one line per fact, indented per rule, key, partial match and row.

    Example:
        >>> from cep.state_view.model import RuleView, StateView
        >>> v = RuleView("s", "search", 60000, {"read": 3, "matches": 1}, {"keys": 0}, notes=["no keys"])
        >>> print(render_text(StateView({"kind": "engine"}, [v])))
        rule s (search): watermark 1970-01-01T00:01:00.000Z (60000); read 3, matches 1
          no keys
    """
    lines: list[str] = []
    src = view.source
    if src.get("kind") == "durable":
        lines.append(
            f"state {src['state']}: checkpoint {src.get('checkpoint')}, {_n(src.get('lines') or 0, 'line')} "
            f"consumed in {_n(src.get('batches') or 0, 'batch', 'batches')}"
            + (", finished" if src.get("finished") else "")
        )
        lines.append(f"  rules: {src.get('rules_path')}")
        lines.append(f"  input: {src.get('input')}")
        for name, off in src.get("offsets", {}).items():
            lines.append(f"    {name}: byte {off['bytes']:,} (line {off['lines']:,})")
        for flag, out in src.get("outputs", {}).items():
            lines.append(f"  --{flag} {out['path']}: {out['bytes']:,} bytes")
    elif src.get("kind") == "spark":
        lines.append(f"checkpoint {src['checkpoint']}: batch {src.get('batch')}, "
                     f"query watermark {_when(src.get('watermark'))}")
        for name, off in src.get("offsets", {}).items():
            files = off.get("files")
            shown = f", {_n(len(files), 'file')} read" + (f" (last {files[-1]})" if files else "") if files is not None else ""
            lines.append(f"  source {name}: offset {json.dumps(off.get('offset'), default=str)}{shown}")
        lines.append(f"  state: {src.get('operator')} operator {src.get('operator_id')}, "
                     f"{_n(src.get('groups') or 0, 'group')} with state")
    for note in view.notes:
        lines.append(f"note: {note}")
    for r in view.rules:
        lines.extend(_rule(r))
    return "\n".join(lines)


def _rule(r: RuleView) -> list[str]:
    t = r.totals
    c = r.counts
    head = f"rule {r.name} ({r.kind}): watermark {_when(r.watermark)}"
    if r.kind == "pattern":
        head += (f"; {_n(t.get('keys_with_state', 0), 'key')+' with state'}, {_n(t.get('partial_matches', 0), 'partial match', 'partial matches')}, "
                 f"{_n(t.get('buffered_events', 0), 'buffered event')}; read {c.get('read', 0):,}, matches {c.get('matches', 0):,}")
    elif r.kind == "analytics":
        head += (f"; {_n(t.get('keys_with_state', 0), 'key')+' with state'}, {_n(t.get('open_windows', 0), 'window')} in state; "
                 f"read {c.get('read', 0):,}, rows emitted {c.get('matches', 0):,}")
    else:
        head += f"; read {c.get('read', 0):,}, matches {c.get('matches', 0):,}"
    out = [head]
    for s in r.sketches:
        out.append(f"  {s['aggregate']}: {s['kind']}, {s['items']:,} items, {s['bytes']:,} bytes (whole rule)")
    for k in r.keys:
        out.extend(_key(r, k))
    for note in r.notes:
        out.append(f"  {note}")
    return out


def _key(r: RuleView, k: dict[str, Any]) -> list[str]:
    name = key_text(k["key"])
    if r.kind == "pattern":
        pms = k.get("partial_matches", [])
        buf = k.get("buffered", [])
        head = (f"  key {name}: {_n(len(pms) + k.get('partial_matches_not_shown', 0), 'partial match', 'partial matches')}, "
                f"{_n(len(buf) + k.get('buffered_not_shown', 0), 'buffered event')}, "
                f"{_n(k.get('matches_so_far', 0), 'match', 'matches')} so far")
        if k.get("deadline") is not None:
            head += f", next deadline {time_text(k['deadline'])}"
        out = [head]
        for pm in pms:
            where = f"row {pm['start_row']}" if pm.get("start_row") is not None else "a row"
            line = f"    partial match from {where} at {time_text(pm['start_time'])}, waiting for {' or '.join(pm['waiting_for']) or 'nothing'}"
            if pm.get("deadline") is not None:
                line += f", until {time_text(pm['deadline'])}"
            if pm.get("runs", 1) > 1:
                line += f" ({pm['runs']} runs)"
            out.append(line)
            for row in pm["rows"]:
                at = f"row {row['row']}" if row.get("row") is not None else "row"
                excl = " (excluded)" if row.get("excluded") else ""
                out.append(f"      {row['variable']:<10} {at}{excl}  {_values(row['values'])}")
        for ev in buf:
            out.append(f"    buffered at {time_text(ev['time'])}  {_values(ev['values'])}")
        return out
    if r.kind == "analytics":
        out = [f"  key {name}:"]
        if "pending_events" in k or "rows_kept" in k:
            out[0] += f" {_n(k.get('pending_events', 0), 'event')} waiting for the watermark, {_n(k.get('rows_kept', 0), 'row')} kept for later windows"
        for w in k.get("windows", []):
            aggs = []
            for a in w["aggregates"]:
                label = a["name"] or a["aggregate"]
                text = f"{label}={json.dumps(a['value'], default=str)}"
                sk = a.get("sketch")
                if sk:
                    size = ", ".join(f"{f} {sk[f]}" for f in ("form", "registers", "counters", "values", "width", "depth")
                                     if f in sk)
                    text += f" [{sk['kind']}: {size}, {sk['bytes']:,} bytes]"
                aggs.append(text)
            out.append(f"    window [{w['window_start_time']}, {w['window_end_time']}) {w['status']}, "
                       f"{_n(w['events'], 'event')}: " + ", ".join(aggs))
        return out
    return [f"  key {name}"]
