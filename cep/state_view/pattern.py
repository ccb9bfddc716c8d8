"""A pattern rule's state as plain data: per key, its partial matches with their rows, buffered events, deadlines."""

from __future__ import annotations

from typing import Any

import numpy as np

from cep.lanes import LaneRun, lane_threads
from cep.nfa import Attempt, KeyState, PatternAutomaton
from cep.operator import PatternOperator
from cep.state_view.model import RuleView, key_dict, key_text, plain, time_text
from patterns.compiler import OP_IGNORE, OP_VAR

__all__ = ["pattern_view"]


def pattern_view(op: PatternOperator) -> RuleView:
    """What a restored :class:`~cep.operator.PatternOperator` holds, key by key.

    A partial match is shown once per distinct sequence of rows, with the variables its runs of
    the automaton wait for next; ``runs`` counts those runs, and the rule's ``partial_matches``
    total is the sum, the figure ``cep run``'s summary gives ("partial matches open at the end").

    Example:
        >>> from patterns.rules import parse_rule_text
        >>> rule = parse_rule_text('''SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        ...   MEASURES A.ts AS t0 PATTERN (A B+ C) WITHIN INTERVAL '1' MINUTE
        ...   DEFINE A AS v = 0, B AS v > PREV(v), C AS v < PREV(v))''', "r")
        >>> op = PatternOperator.from_rule(rule)
        >>> _ = op.process([{"k": "x", "ts": 1000, "v": 0}, {"k": "x", "ts": 2000, "v": 3}])
        >>> pm = pattern_view(op).keys[0]["partial_matches"][0]
        >>> [(r["variable"], r["values"]["v"]) for r in pm["rows"]], pm["waiting_for"], pm["deadline"]
        ([('A', 0), ('B', 3)], ['B', 'C'], 61000)
    """
    a = op.automaton
    cols = list(a.columns)
    keys_out: list[dict[str, Any]] = []
    by_key: dict[Any, dict[str, Any]] = {}

    def entry(key: Any) -> dict[str, Any]:
        got = by_key.get(_hashable(key))
        if got is None:
            got = by_key[_hashable(key)] = {
                "key": key_dict(op.key_cols, key), "partial_matches": [], "buffered": [],
                "matches_so_far": 0, "rows_retained": 0, "deadline": None, "deadline_time": None,
                "matches_waiting_for_next_rows": 0,
            }
            keys_out.append(got)
        return got

    runs_total = 0
    # the batch DFA path (cep/batch_dfa.py) keeps its keys in arrays: shown as the automaton's
    states = op._keyed.key_states() if op._keyed is not None else op.states
    for key, st in states.items():
        pms = [_attempt_view(a, st, att, cols) for att in st.attempts if att.threads]
        if not pms and not st.deferred and key not in op.active:
            continue  # an idle key: only rows kept for PREV
        e = entry(key)
        e["partial_matches"] = pms
        e["matches_so_far"] = st.match_number
        e["rows_retained"] = len(st.rows)
        e["matches_waiting_for_next_rows"] = len(st.deferred)
        d = op._deadline_of.get(key)
        e["deadline"], e["deadline_time"] = d, time_text(d)
        runs_total += sum(p["runs"] for p in pms)
    if op._fast is not None:
        runs_total += _absence_view(op, entry)
    p = op.pending
    for j in np.argsort(p.seq, kind="stable").tolist() if len(p) else []:
        values = {c: plain(p.cols[i][j]) for i, c in enumerate(cols) if i < len(p.cols)}
        rec = p.records[j] if len(p.records) > j else None
        if isinstance(rec, dict):
            values.update({k: plain(v) for k, v in rec.items() if k not in values})
        entry(p.keys[j])["buffered"].append({"time": int(p.ts[j]), "values": values})
    c = op.counts
    s = op.stats
    view = RuleView(
        name=op.name, kind="pattern", watermark=op.watermark,
        counts={"read": c.read, "processed": c.processed, "late": c.late, "errors": c.errors,
                "buffered": c.buffered, "matches": s.matches, "timeouts": s.timeouts,
                "partial_matches_dropped": s.partial_matches_dropped},
        totals={"keys_with_state": len(keys_out), "keys": op.key_count(), "partial_matches": runs_total,
                "buffered_events": len(p)},
        keys=sorted(keys_out, key=lambda e: key_text(e["key"])),
    )
    if a.within is not None:
        view.totals["within_ms"] = int(a.within)
    return view


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        return repr(key)
    return key


def _values(row: tuple, cols: list[str]) -> dict[str, Any]:
    return {c: plain(row[i]) for i, c in enumerate(cols) if i < len(row)}


def _attempt_view(a: PatternAutomaton, st: KeyState, att: Attempt, cols: list[str]) -> dict[str, Any]:
    """One live attempt (the partial matches that start at one row): its row sequences and what they wait for."""
    within = a.within
    deadline = int(att.start_ts + within) if within is not None else None
    base: dict[str, Any] = {
        "start_row": att.start, "start_time": int(att.start_ts), "deadline": deadline,
        "deadline_time": time_text(deadline),
    }
    if isinstance(att.threads, int):  # a lazy-DFA attempt: one state for every run, rows by replay
        rows, waiting = _dfa_rows(a, st, att, cols)
        best = att.best if isinstance(att.best, int) else None
        return {**base, "runs": 1, "waiting_for": waiting, "rows": rows, "match_found_up_to_row": best,
                "variables": _variables(rows)}
    # general path: runs (pc, node) in preference order; runs that share their rows are one sequence
    groups: dict[int, tuple[Any, list[int]]] = {}
    threads = lane_threads(a, st, att) if isinstance(att.threads, LaneRun) else att.threads
    for pc, node in threads:
        groups.setdefault(id(node), (node, []))[1].append(pc)
    node, pcs = next(iter(groups.values()))  # the most preferred sequence is the one shown
    rows = []
    for nd in node.chain() if node is not None else []:
        i = nd.rno - st.base
        values = _values(st.rows[i], cols) if 0 <= i < len(st.rows) else {}
        rows.append({"row": nd.rno, "variable": a.var_names[nd.vid], "excluded": bool(nd.excl), "values": values})
    best = att.best.rno if att.best is not None and not isinstance(att.best, int) else att.best
    out = {**base, "runs": len(threads), "waiting_for": _waiting(a, pcs), "rows": rows,
           "match_found_up_to_row": best, "variables": _variables(rows)}
    if len(groups) > 1:
        out["other_row_sequences"] = len(groups) - 1
    return out


def _variables(rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in rows:
        out.setdefault(r["variable"], []).append(r["row"])
    return out


def _waiting(a: PatternAutomaton, pcs: list[int] | tuple[int, ...]) -> list[str]:
    """The variables runs at these program counters can take next (``NOT B`` for an absence)."""
    out: list[str] = []
    for pc in pcs:
        ins = a.ins[pc]
        if ins[0] == OP_VAR:
            name = a.var_names[ins[1]]
        elif ins[0] == OP_IGNORE:
            name = "NOT " + "|".join(a.var_names[v] for v in ins[1])
        else:
            name = "$" if pc in a.end_pcs else "?"
        if name not in out:
            out.append(name)
    return out


def _dfa_rows(a: PatternAutomaton, st: KeyState, att: Attempt, cols: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of a lazy-DFA attempt mapped to the variables of its most preferred run.

    The attempt keeps the automaton state before each of its rows (``path``); walking the
    transitions back from the current state's first run, as a match is rebuilt, gives the
    instruction (so the variable) that took each row.
    """
    sid = att.threads
    pcs = a.dfa_states[sid]
    path = att.path or []
    n = len(path)
    rows_of = st.rows
    base = st.base
    consumers: list[int | None] = [None] * n
    target = pcs[0] if pcs else None
    for i in range(n - 1, -1, -1):
        rno = att.start + i
        j = rno - base
        if target is None or not 0 <= j < len(rows_of):
            break
        m = rows_of[j][-1]
        r = a.dfa_trans[path[i]].get(m) or a._dfa_step(path[i], m)
        nxt = a.dfa_states[r[0]]
        if target not in nxt:
            break
        consumers[i] = r[2][nxt.index(target)]
        target = consumers[i]
    rows = []
    for i in range(n):
        rno = att.start + i
        j = rno - base
        c = consumers[i]
        rows.append({
            "row": rno,
            "variable": a.var_names[a.ins[c][1]] if c is not None else "?",
            "excluded": bool(a.ins[c][3]) if c is not None else False,
            "values": _values(rows_of[j], cols) if 0 <= j < len(rows_of) else {},
        })
    return rows, _waiting(a, pcs)


def _absence_view(op: PatternOperator, entry: Any) -> int:
    """``PATTERN (A NOT B) WITHIN T`` on the column-wise path: the A rows waiting for their deadline."""
    fast = op._fast
    assert fast is not None
    a = op.automaton
    name = a.var_names[fast.vid]
    kill = [a.var_names[v] for v in range(a.nvars) if (fast.kill_bits >> v) & 1]
    cols = list(a.columns)
    n = 0
    for key, waiting in fast.waiting.items():
        e = entry(key)
        e["matches_so_far"] = fast.numbers.get(key, e["matches_so_far"])
        if waiting:
            e["deadline"], e["deadline_time"] = int(waiting[0][0]), time_text(waiting[0][0])
        for deadline, _seq, start_ts, row in waiting:
            n += 1
            e["partial_matches"].append({
                "start_row": None, "start_time": int(start_ts), "deadline": int(deadline),
                "deadline_time": time_text(deadline), "runs": 1, "waiting_for": ["NOT " + "|".join(kill)],
                "rows": [{"row": None, "variable": name, "excluded": False, "values": _values(row, cols)}],
                "match_found_up_to_row": None, "variables": {name: [None]},
            })
    return n
