"""How ``cep explain`` shows an explanation: a table for a terminal (coloured) or a file, JSON for tools.

Example:
    >>> from cep.explain.model import ExplainedRow, Explanation, Verdict
    >>> ex = Explanation("rise", "pattern", {"sym": "X"}, [ExplainedRow(0, 86_400_000, {"sym": "X", "ts": 1, "v": 3},
    ...     [Verdict("condition", "A: v 3 > 2: true", True)])], [Verdict("match", "match 1: ...", True)])
    >>> print(render_text(ex, color=False, time_field="ts"))
    rule rise (pattern), key sym=X: 1 match
      row  time        event  verdicts
        0  1970-01-02  v=3    condition  A: v 3 > 2: true
    outcome:
      match  match 1: ...
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

import orjson

from cep.events import format_time
from cep.explain.model import Explanation, Verdict
from cep.json_exact import dumps_exact

__all__ = ["render_text", "render_json", "use_color"]

_COLORS = {
    "green": "\x1b[32m", "red": "\x1b[31m", "yellow": "\x1b[33m", "cyan": "\x1b[36m", "magenta": "\x1b[35m",
    "dim": "\x1b[2m", "bold": "\x1b[1m", "bold_green": "\x1b[1;32m", "bold_yellow": "\x1b[1;33m",
}
_RESET = "\x1b[0m"
EVENT_WIDTH = 48


def use_color(stream: TextIO, choice: str = "auto") -> bool:
    """Colours on ``stream``: ``always``, ``never``, or ``auto`` (a terminal, and NO_COLOR unset)."""
    if choice != "auto":
        return choice == "always"
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _tone(v: Verdict) -> str | None:
    if v.kind == "condition":
        return "green" if v.ok else "dim" if v.ok is False else None
    if v.kind == "match":
        return "bold_green"
    if v.kind in ("started", "extended"):
        return "green" if v.ok else "cyan"
    if v.kind in ("ended", "pruned", "dropped", "expired"):
        return "yellow"
    if v.kind == "deadline":
        return "magenta"
    if v.kind in ("late", "error"):
        return "red"
    if v.kind == "nearest_miss":
        return "bold_yellow"
    if v.kind in ("window", "emitted", "clause", "presearcher"):
        return "green" if v.ok else "dim" if v.ok is False else None
    return None


def _paint(text: str, tone: str | None, color: bool) -> str:
    return f"{_COLORS[tone]}{text}{_RESET}" if color and tone else text


def _time(ts: int | None) -> str:
    if ts is None:
        return "-"
    t = format_time(ts)
    for tail in ("T00:00:00.000Z", ".000Z"):
        if t.endswith(tail):
            return t[: -len(tail)] + ("" if tail.startswith("T") else "Z")
    return t


def _value(v: Any) -> str:
    if isinstance(v, str):
        return v if v and " " not in v and len(v) <= 40 else repr(v[:37] + "..." if len(v) > 40 else v)
    if isinstance(v, (dict, list)):
        return dumps_exact(v, default=str).decode()  # a nested int past 64 bits: its digits
    return str(v)


def _event(event: dict[str, Any], skip: set[str]) -> str:
    text = " ".join(f"{k}={_value(v)}" for k, v in event.items() if k not in skip)
    return text if len(text) <= EVENT_WIDTH else text[: EVENT_WIDTH - 3] + "..."


def _headline(ex: Explanation) -> str:
    key = ",".join(f"{k}={v}" for k, v in ex.key.items()) or "(none: one key for the whole input)"
    def counted(vs: list[Verdict]) -> int:
        return sum(1 for v in vs if v.kind in ("match", "emitted") and not v.data.get("unmatched"))

    # patterns and analytics list their rows in the outcome; search rules per document
    n = counted(ex.outcome) or counted([v for r in ex.rows for v in r.verdicts])
    noun = {"analytics": ("row emitted", "rows emitted"), "search": ("query match", "query matches")}.get(
        ex.kind, ("match", "matches"))
    said = f"{n:,} {noun[n != 1]}" if n else f"no {noun[0]}"
    return f"rule {ex.rule} ({ex.kind}), key {key}: {said}"


def render_text(ex: Explanation, color: bool = False, time_field: str | None = None) -> str:
    """The explanation as a table: one line per verdict, the row, time and event on its first line."""
    skip = set(ex.key) | ({time_field} if time_field else set())
    lines = [_paint(_headline(ex), "bold", color)]
    table: list[tuple[str, str, str, list[Verdict]]] = []
    for r in ex.rows:
        if r.index < 0:
            label = str(r.event.get("(time)", "time"))
            table.append(("-", _time(r.ts) if label != "end of input" else "end", label, r.verdicts))
        else:
            table.append((str(r.index), _time(r.ts), _event(r.event, skip), r.verdicts))
    if table:
        w_row = max(3, *(len(t[0]) for t in table))
        w_time = max(4, *(len(t[1]) for t in table))
        w_ev = max(5, *(len(t[2]) for t in table))
        w_kind = max(len(v.kind) for t in table for v in t[3]) if any(t[3] for t in table) else 8
        head = f"  {'row':>{w_row}}  {'time':<{w_time}}  {'event':<{w_ev}}  verdicts"
        lines.append(_paint(head, "bold", color))
        for row, time, event, verdicts in table:
            first = f"  {row:>{w_row}}  {time:<{w_time}}  {event:<{w_ev}}  "
            pad = " " * len(first)
            if not verdicts:
                lines.append(first.rstrip())
            for k, v in enumerate(verdicts):
                body = _paint(f"{v.kind:<{w_kind}}  {v.text}", _tone(v), color)
                lines.append((first if k == 0 else pad) + body)
    else:
        lines.append("  (no row of the key in the range)")
    lines.append(_paint("outcome:", "bold", color))
    for v in ex.outcome:
        lines.append("  " + _paint(f"{v.kind}  {v.text}", _tone(v), color))
    for note in ex.notes:
        lines.append(_paint(f"note: {note}", "dim", color))
    return "\n".join(line.rstrip() for line in lines)


def render_json(ex: Explanation) -> str:
    """One JSON line: :meth:`Explanation.to_dict` (numpy values as numbers, the rest as text)."""
    return orjson.dumps(ex.to_dict(), default=str, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()


def write(explanations: list[Explanation], as_json: bool, stream: TextIO | None = None, color: str = "auto",
          time_fields: dict[str, str | None] | None = None) -> None:
    """Print every explanation: JSON lines, or tables separated by a blank line."""
    out = stream or sys.stdout
    if as_json:
        for ex in explanations:
            out.write(render_json(ex) + "\n")
        return
    paint = use_color(out, color)
    for k, ex in enumerate(explanations):
        if k:
            out.write("\n")
        out.write(render_text(ex, paint, (time_fields or {}).get(ex.rule)) + "\n")
