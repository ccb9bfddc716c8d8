"""Which stepping path ``cep run`` takes for a pattern rule, why a faster one was declined, and what the rewrite changed.

``cep explain`` follows every partial match on the automaton's general path (only node chains say
which row went to which variable); the engine may step the same rule faster: column-wise absence
(:mod:`cep.absence`), every key at once (:mod:`cep.batch_dfa`), the lazy DFA per key
(:mod:`cep.nfa`), many start rows as arrays (:mod:`cep.lanes`). The rows are the same on every path;
this module says which one ``cep run`` uses, from the engine's own plans, so that the explanation
names the automaton that really runs. The reasons are the plans' conditions in words; a test checks
them against the plans themselves (``tests/cep/test_explain_paths.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cep.absence as absence_path
import cep.batch_dfa as batch_dfa
import cep.lanes as lanes
from cep.explain.sql import expr_sql
from cep.expressions import derived_columns
from cep.operator import PatternOperator
from patterns.rewrite import fixed_length

__all__ = ["StepPath", "stepping_path", "PATHS"]

PATHS = {
    "absence": "column-wise absence (cep/absence.py): the pattern's NOT decided over whole batches",
    "batch_dfa": "the batch DFA (cep/batch_dfa.py): every key of a batch stepped together by one compiled loop",
    "lazy_dfa": "the lazy DFA (cep/nfa.py): each key's partial matches as automaton states, key by key",
    "lanes": "lanes (cep/lanes.py): a key's live start rows as arrays, each condition evaluated over all of them",
    "general": "the general path (cep/nfa.py): each partial match with its matched rows",
}


@dataclass
class StepPath:
    """The path ``cep run`` steps a rule on, the faster paths it does not take (with why), and the
    conditions the exact rewrites changed (variable, as written, as run)."""

    path: str
    declined: list[tuple[str, str]] = field(default_factory=list)
    rewritten: list[tuple[str, str, str]] = field(default_factory=list)

    def notes(self) -> list[str]:
        """The explanation's notes: the path, each declined path with its reason, each rewrite."""
        if self.path == "general":
            out = [f"cep run steps this rule on {PATHS[self.path]}, as explain does"]
        else:
            out = [f"cep run steps this rule on {PATHS[self.path]}; explain follows each partial match on "
                   f"the general path, with the conditions cep run evaluates (the rows are the same)"]
        for path, why in self.declined:
            out.append(f"not {PATHS[path].split(' (')[0]}: {why}")
        for var, written, run in self.rewritten:
            out.append(f"{var} is evaluated as {run} (written: {written}; an exact rewrite, the same "
                       f"value in every match: docs/semantics.md, Compile-time rewrites)")
        return out


def stepping_path(rule: Any) -> StepPath:
    """The path of ``rule`` (a pattern rule) in ``cep run`` with this process's switches.

    Example:
        >>> from patterns.rules import parse_rule_text
        >>> rule = parse_rule_text('''SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        ...   MEASURES A.ts AS t0 PATTERN (A B+ C) WITHIN INTERVAL '1' SECOND
        ...   DEFINE A AS v = 0, B AS v > PREV(v), C AS v < PREV(v))''', "r")
        >>> p = stepping_path(rule)
        >>> p.path, p.declined[0][0]
        ('lazy_dfa', 'batch_dfa')
        >>> p.declined[0][1][:52]
        'WITHIN over a pattern whose matches have different l'
    """
    op = PatternOperator.from_rule(rule)
    a = op.automaton
    cp = a.cp
    rewritten = []
    for vid, expr in a.defines.items():
        if expr is not cp.defines[vid]:
            rewritten.append((a.var_names[vid], expr_sql(cp.defines[vid]), expr_sql(expr)))
    out = StepPath("general", rewritten=rewritten)
    if absence_path.USE_ABSENCE_PATH and op._absence_plan is not None:
        out.path = "absence"
        return out
    if a.dfa:
        why = _batch_declined(a, op)
        if why is None:
            out.path = "batch_dfa"
            return out
        out.path = "lazy_dfa"
        out.declined.append(("batch_dfa", why))
        return out
    out.declined.append(("lazy_dfa", _dfa_declined(a)))
    if a.lanes is not None:
        out.path = "lanes"
        return out
    out.declined.append(("lanes", _lanes_declined(a)))
    return out


def _dfa_declined(a: Any) -> str:
    """Why the automaton keeps node chains (the conditions of :meth:`cep.nfa.PatternAutomaton._init_dfa`)."""
    if not a.history_free:
        parts = [f"{a.var_names[v]}: {expr_sql(e)}" for v, e in enumerate(a.hist_exprs) if e is not None]
        return ("a condition reads the match so far or a later row (" + "; ".join(parts)
                + "), so each partial match keeps its rows")
    if a.anchored:
        return "the pattern has an anchor (^ or $): a run needs its rows to know where the partition starts or ends"
    if a.has_not:
        return "the pattern has NOT: a deadline completes an absence from the run's rows"
    if a.timeout_rows:
        return "WITH TIMEOUT ROWS: a timed-out partial match is written with its rows"
    return "AFTER MATCH NO SKIP: every completed run is a match of its own"


def _batch_declined(a: Any, op: PatternOperator) -> str | None:
    """Why a lazy-DFA rule does not step every key at once (:func:`cep.batch_dfa.batch_plan` and
    :meth:`cep.operator.PatternOperator._batch_ok`), or None when it does."""
    plan = batch_dfa.batch_plan(a)
    if plan is not None:
        if not batch_dfa.USE_BATCH_DFA:
            return "switched off in this process (CEP_BATCH_DFA=0)"
        if derived_columns(list(a.cp.defines.values())):
            return "FIRST_SEEN or MATCHES in DEFINE: computed per batch by the per-key operator"
        return None
    if a.lookahead:
        return "NEXT in DEFINE holds each key's last rows back"
    if a.with_unmatched:
        return "WITH UNMATCHED ROWS writes every row"
    if a.within is not None and fixed_length(a.mr.pattern) is None:
        return ("WITHIN over a pattern whose matches have different lengths: a match may wait behind an "
                "earlier partial match that time ends, which the compiled loop does not keep")
    if batch_dfa.measure_plan(a) is None:
        return ("a measure other than a column, FIRST/LAST of one without offset, CLASSIFIER(), "
                "MATCH_NUMBER(), COUNT(*), COUNT(var.*) or arithmetic over these (or ALL ROWS PER MATCH)")
    if a.max_steps is not None:
        return f"a work budget of {a.max_steps} partial matches per event (max_steps_per_event)"
    if a.nvars > batch_dfa.MAX_VARS:
        return f"{a.nvars} variables, more than {batch_dfa.MAX_VARS}"
    if a.skip.mode not in ("PAST_LAST_ROW", "TO_NEXT_ROW"):
        return f"AFTER MATCH SKIP {a.skip.mode.replace('_', ' ')}"
    if not batch_dfa._numba_ok():
        return "numba is not available (or CEP_NO_NUMBA=1)"
    return (f"its DFA has more than {batch_dfa.MAX_STATES} states or {batch_dfa.MAX_CELLS:,} table cells "
            "(states times condition masks)")


def _lanes_declined(a: Any) -> str:
    """Why a general-path rule does not take the lanes (the first conditions of :func:`cep.lanes.lane_plan`)."""
    if not lanes.USE_LANES:
        return "switched off in this process (CEP_LANES=0)"
    if a.anchored or a.has_not or a.timeout_rows or a.no_skip:
        return "anchors, NOT, WITH TIMEOUT ROWS and AFTER MATCH NO SKIP take the general path"
    if a.skip.mode != "PAST_LAST_ROW":
        return "lanes take AFTER MATCH SKIP PAST LAST ROW only"
    if a.max_steps is not None:
        return f"a work budget of {a.max_steps} partial matches per event (max_steps_per_event)"
    if a.lookahead or a.max_next:
        return "NEXT in DEFINE or MEASURES"
    if a.with_unmatched:
        return "WITH UNMATCHED ROWS writes every row"
    return ("the pattern is not one start variable, one repeated variable and one closing variable "
            "(S R{n,m} B, m unbounded or at least 16) with conditions the lanes evaluate (the current row, "
            "the start row, the previous row, COUNT/SUM/AVG)")
