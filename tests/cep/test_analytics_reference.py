"""Brute-force reference for windowed analytics rules: the documented semantics, event by event.

Nothing here shares code with ``cep.analytics``: windows are recomputed from the list of accepted
events at every step with plain Python (lists, sets, Counter), so the operator's panes, partials,
segments and sketches are checked against the definition in docs/analytics.md.

The rule checked everywhere is (``KINDS`` supplies the GROUP BY window)::

    SELECT k, COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi, COUNT(DISTINCT u) AS d,
           window_start, window_end
    FROM s GROUP BY k, <window> HAVING COUNT(*) >= {min_n}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from patterns.rules import Rule, parse_rules

SELECT = (
    "SELECT k, COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi, COUNT(DISTINCT u) AS d, "
    "window_start, window_end FROM s GROUP BY k, {window} HAVING COUNT(*) >= {min_n}"
)


def rule(sql: str, lateness: int = 0, name: str = "r", sketches: str = "") -> Rule:
    """One analytics rule from SQL (via a YAML rule file, as users write them)."""
    body = "".join(f"      {line}\n" for line in sql.splitlines())
    text = f"rules:\n  - name: {name}\n    kind: analytics\n    lateness: {lateness}\n{sketches}    sql: |\n{body}"
    return parse_rules(text).rules[0]


def window_sql(kind: str, size: int, slide: int = 0) -> str:
    iv = lambda ms: f"INTERVAL '{ms}' MILLISECOND"  # noqa: E731
    if kind == "HOP":
        return f"HOP(ts, {iv(slide)}, {iv(size)})"
    return f"{kind}(ts, {iv(size)})"


@dataclass
class Ev:
    k: str
    ts: int
    v: int
    u: int
    seq: int


def _agg(rows: list[Ev]) -> dict[str, Any]:
    vs = [r.v for r in rows]
    return {"n": len(rows), "s": sum(vs), "lo": min(vs), "hi": max(vs), "d": len({r.u for r in rows})}


def _row(key: str, rows: list[Ev], start: int, end: int, min_n: int) -> dict | None:
    if len(rows) < min_n:
        return None
    return {"k": key, **_agg(rows), "window_start": start, "window_end": end, "rule": "r", "correction": False}


def _accept(events: list[dict], lateness: int):
    """Yield (event, clock after it) for the events that are not late, in arrival order; and the late ones."""
    clock = None
    accepted, late = [], []
    for i, e in enumerate(events):
        ts = e["ts"]
        if clock is not None and ts < clock - lateness:
            late.append(e)
            continue
        clock = ts if clock is None else max(clock, ts)
        accepted.append((Ev(e["k"], ts, e["v"], e["u"], i), clock))
    return accepted, late


def _retract(row: dict) -> dict:
    return {**row, "correction": True, "retract": True}


def _correct(row: dict) -> dict:
    return {**row, "correction": True}


def reference_panes(events: list[dict], size: int, step: int, lateness: int, min_n: int) -> list[dict]:
    """TUMBLE (step == size) and HOP windows: on-time rows, corrections and retractions, in order."""
    accepted, _late = _accept(events, lateness)
    seen: list[Ev] = []
    fired: dict[tuple[str, int], tuple[int, dict | None]] = {}  # -> (rows when fired, row emitted)
    finals: set[tuple[str, int]] = set()
    out: list[dict] = []

    def end(k: int) -> int:
        return k * step + size

    def wins(ts: int) -> range:
        return range((ts - size) // step + 1, ts // step + 1)

    def content(key: str, k: int) -> list[Ev]:
        return [e for e in seen if e.k == key and k * step <= e.ts < k * step + size]

    def advance(clock: float) -> None:
        acts = []
        cands = {(e.k, k) for e in seen for k in wins(e.ts)}
        for key, k in cands:
            if (key, k) not in fired and (key, k) not in finals and end(k) <= clock:
                acts.append((end(k), 0, key, k))
        for key, k in fired:
            if (key, k) not in finals and end(k) + lateness <= clock:
                acts.append((end(k) + lateness, 1, key, k))
        for _t, kind, key, k in sorted(acts, key=lambda a: (a[0], a[1], a[2])):
            rows = content(key, k)
            new = _row(key, rows, k * step, end(k), min_n)
            if kind == 0:
                fired[(key, k)] = (len(rows), new)
                if new is not None:
                    out.append(new)
                if lateness == 0:
                    finals.add((key, k))
            else:
                finals.add((key, k))
                n0, old = fired[(key, k)]
                if len(rows) == n0:
                    continue
                if new is not None and new != old:
                    out.append(_correct(new))
                elif new is None and old is not None:
                    out.append(_retract(old))

    for e, clock in accepted:
        seen.append(e)
        advance(clock)
    advance(float("inf"))
    return out


def sessions_of(rows: list[Ev], gap: int) -> list[list[Ev]]:
    """Sessions of one key's events: split where consecutive times are gap or more apart."""
    rows = sorted(rows, key=lambda e: (e.ts, e.seq))
    out: list[list[Ev]] = []
    for e in rows:
        if out and e.ts - out[-1][-1].ts < gap:
            out[-1].append(e)
        else:
            out.append([e])
    return out


def reference_sessions_final(events: list[dict], gap: int, lateness: int, min_n: int) -> dict:
    """The final view of SESSION windows: (key, window_start) -> row, over every event not late."""
    accepted, _late = _accept(events, lateness)
    by_key: dict[str, list[Ev]] = {}
    for e, _c in accepted:
        by_key.setdefault(e.k, []).append(e)
    view = {}
    for key, rows in by_key.items():
        for s in sessions_of(rows, gap):
            row = _row(key, s, s[0].ts, s[-1].ts + gap, min_n)
            if row is not None:
                view[(key, s[0].ts)] = {**row, "correction": None}
    return view


def reference_sessions_in_order(events: list[dict], gap: int, min_n: int) -> list[dict]:
    """SESSION rows in emission order for input already in time order (no late events)."""
    accepted, late = _accept(events, 0)
    assert not late
    seen: list[Ev] = []
    done: set[tuple[str, int]] = set()
    out: list[dict] = []

    def advance(clock: float) -> None:
        acts = []
        for key in sorted({e.k for e in seen}):
            for s in sessions_of([e for e in seen if e.k == key], gap):
                end = s[-1].ts + gap
                if (key, s[0].ts) not in done and end <= clock:
                    acts.append((end, key, s))
        for _end, key, s in sorted(acts, key=lambda a: (a[0], a[1], a[2][0].ts)):
            done.add((key, s[0].ts))
            row = _row(key, s, s[0].ts, s[-1].ts + gap, min_n)
            if row is not None:
                out.append(row)

    for e, clock in accepted:
        seen.append(e)
        advance(clock)
    advance(float("inf"))
    return out


def reference_slide(events: list[dict], size: int, lateness: int, min_n: int) -> list[dict]:
    """SLIDE windows: per event not late, the key's events in (t - size, t] up to itself (time,
    then arrival), emitted once the watermark reaches the event."""
    accepted, _late = _accept(events, lateness)
    seen: list[Ev] = []
    released: set[int] = set()
    out: list[dict] = []

    def advance(clock: float) -> None:
        wm = clock - lateness
        ready = sorted((e for e in seen if e.seq not in released and e.ts <= wm), key=lambda e: (e.ts, e.k, e.seq))
        for e in ready:
            released.add(e.seq)
            rows = [x for x in seen if x.k == e.k and e.ts - size < x.ts <= e.ts and (x.ts, x.seq) <= (e.ts, e.seq)]
            row = _row(e.k, rows, e.ts - size, e.ts, min_n)
            if row is not None:
                out.append(row)

    for e, clock in accepted:
        seen.append(e)
        advance(clock)
    advance(float("inf"))
    return out


def final_view(rows: list[dict]) -> dict:
    """Apply rows in order: a row sets (key, window_start), a retraction removes it."""
    view: dict = {}
    for r in rows:
        key = (r["k"], r["window_start"])
        if r.get("retract"):
            assert key in view, f"retraction of a row never emitted: {r}"
            del view[key]
        else:
            view[key] = {**r, "correction": None}
    return view


# ---------------------------------------------------------------- the reference's own checks


def test_sessions_split_at_the_gap():
    rows = [Ev("a", t, 0, 0, i) for i, t in enumerate([0, 4, 9, 20, 24])]
    assert [[e.ts for e in s] for s in sessions_of(rows, 5)] == [[0, 4], [9], [20, 24]]


def test_reference_panes_corrects_a_late_event():
    ev = [dict(k="a", ts=t, v=1, u=t) for t in (1, 12, 3, 30)]
    rows = reference_panes(ev, 10, 10, 10, 1)
    # at clock 30 window [10, 20) is due (threshold 20) and window [0, 10) final (10 + lateness 10):
    # equal thresholds, on-time rows first
    assert [(r["window_start"], r["n"], r["correction"]) for r in rows] == [
        (0, 1, False), (10, 1, False), (0, 2, True), (30, 1, False)]


def test_final_view_applies_retractions():
    rows = [{"k": "a", "window_start": 0, "n": 1}, {"k": "a", "window_start": 0, "n": 2, "retract": True}]
    assert final_view(rows) == {}
