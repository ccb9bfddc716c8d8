"""The embedded engine: many rules in one pass over one or several event streams.

Example:
    >>> from patterns.rules import parse_rules
    >>> engine = Engine(parse_rules('''
    ... rules:
    ...   - name: rise
    ...     sql: |
    ...       SELECT * FROM ticks MATCH_RECOGNIZE (
    ...         PARTITION BY sym ORDER BY ts
    ...         MEASURES FIRST(A.px) AS low, LAST(B.px) AS high
    ...         PATTERN (A B+)
    ...         DEFINE B AS B.px > PREV(B.px))
    ... '''))
    >>> out = engine.process([{"sym": "X", "ts": t, "px": p} for t, p in enumerate([5, 6, 7, 3])])
    >>> out.matches + engine.finish().matches
    [{'sym': 'X', 'low': 5, 'high': 7, 'rule': 'rise'}]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from cep.events import Clock, EventBatch, UnitHint, to_batch
from cep.gc_pause import gc_paused
from cep.operator import OperatorOutput, StateVersionError
from cep.sharing import SharedBatch, rejoin_histories
from patterns.errors import CepError
from patterns.rules import Rule, RuleSet, load_rules

__all__ = [
    "Engine", "EngineOutput", "Counts", "ReloadReport", "StateLimits", "late_warning", "late_share_warning", "table_lines",
    "with_time_unit"]

# Share work across rules (decoded event times, partition keys, row-local condition masks; skip
# rules nothing in a batch can start): a switch so benchmarks and tests can measure and check the
# engine without it.
SHARE_WORK = True

SNAPSHOT_MAGIC = b"CEPENG"
SNAPSHOT_VERSION = 1


EngineOutput = OperatorOutput


@dataclass
class Counts:
    """Per-rule counters: read = processed + late + errors + buffered."""

    read: int
    processed: int
    late: int
    errors: int
    buffered: int
    matches: int
    partial_matches_peak: int
    partial_matches_dropped: int
    cap_hits: int
    eval_errors: int
    budget_dropped: int = 0  # partial matches dropped by the work budget (max_steps_per_event)
    budget_hits: int = 0  # events after which the work budget dropped some
    timeouts: int = 0  # partial matches WITHIN ended unmatched, written as timeout rows (WITH TIMEOUT ROWS)


LATE_WARNING_SHARE = 0.1
"""A bounded input with more than this share of a rule's events late is most likely not sorted by
event time (or needs a lateness): the run's summary says so, with the two fixes."""


def late_warning(counts: dict[str, Counts]) -> str | None:
    """The warning for rules that found more than a tenth of their events late, or None.

    Example:
        >>> c = Counts(100, 10, 90, 0, 0, 0, 0, 0, 0, 0)
        >>> print(late_warning({"v": c}))
        warning: rule 'v' found 90 of 100 events (90.0%) late: is the input sorted by event time? Sort it by the rules' ORDER BY field, or give the rule a 'lateness:' that covers how far out of order events come (docs/semantics.md, "Event time")
    """
    return late_share_warning((f"rule {name!r}", c.late, c.read) for name, c in counts.items())


def late_share_warning(figures: Iterable[tuple[str, int, int]]) -> str | None:
    """The same warning from ``(who, late, read)`` figures, for a runner without :class:`Counts`.

    Example:
        >>> late_share_warning([("the rules", 5, 100)]) is None
        True
        >>> late_share_warning([("the rules", 30, 100)]).split(": is")[0]
        'warning: the rules found 30 of 100 events (30.0%) late'
    """
    over = [(who, late, read) for who, late, read in figures if read and late > LATE_WARNING_SHARE * read]
    if not over:
        return None
    what = "; ".join(f"{who} found {late:,} of {read:,} events ({late / read:.1%}) late" for who, late, read in over)
    return (f"warning: {what}: is the input sorted by event time? Sort it by the rules' ORDER BY field, "
            "or give the rule a 'lateness:' that covers how far out of order events come "
            '(docs/semantics.md, "Event time")')


def table_lines(engine: Any) -> list[str]:
    """The run summary's line per table and per view: what it read or emitted, and its size in memory."""
    def size(t: dict[str, Any]) -> str:
        return (f"live keys {t['live_keys']:,} of {t['keys']:,}, versions {t['versions']:,}, rows {t['rows']:,}, "
                f"{t['bytes'] / 2**20:,.1f} MiB (about {t['bytes_per_row']:,.0f} bytes per row)")

    lines = [f"  table {name}: changes read {t['read']:,}, applied {t['applied']:,}, late {t['late']:,}, "
             f"errors {t['errors']:,}, snapshot rows {t['snapshot_rows']:,}; " + size(t)
             for name, t in engine.table_stats().items()]
    lines += [f"  view {name}: inserts {v['inserts']:,}, updates {v['updates']:,}, deletes {v['deletes']:,}; " + size(v)
              for name, v in engine.view_stats().items()]
    return lines


def timeouts_note(n: int, written: bool, durable: bool = False) -> str:
    """The summary's time-out count: empty for none, and how to keep them when not written.

    A durable run cannot add ``--timeouts`` to a state made without it, so it names a new state.

    Example:
        >>> timeouts_note(0, False), timeouts_note(21, True), timeouts_note(1, False)
        ('', ', 21 timed out', ', 1 timed out (not written: pass --timeouts FILE)')
        >>> timeouts_note(21, False, durable=True)
        ', 21 timed out (not written: --timeouts FILE needs a new --state directory)'
    """
    if not n:
        return ""
    if written:
        return f", {n:,} timed out"
    hint = "--timeouts FILE needs a new --state directory" if durable else "pass --timeouts FILE"
    return f", {n:,} timed out (not written: {hint})"


# rule kind -> "module:Class" of its operator; every operator has from_rule(rule), process(batch),
# finish(), snapshot(), restore(bytes), and the counters `counts` and `stats`.
OPERATORS = {
    "pattern": "cep.operator:PatternOperator",
    "analytics": "cep.analytics:WindowOperator",
    "search": "cep.search_rules:SearchOperator",
}


@dataclass
class ReloadReport:
    """What :meth:`Engine.reload` did with each rule, or why it refused the new rules."""

    accepted: bool
    kept: list[str] = field(default_factory=list)  # unchanged: state kept
    added: list[str] = field(default_factory=list)  # new names: start empty
    changed: list[str] = field(default_factory=list)  # same name, new text or options: start empty
    removed: list[str] = field(default_factory=list)  # gone or disabled: state dropped
    errors: list[str] = field(default_factory=list)  # formatted errors of a refused rule set
    tables_added: list[str] = field(default_factory=list)  # new tables: their snapshot file, then their changelog
    tables_removed: list[str] = field(default_factory=list)  # no longer declared: rows dropped

    def summary(self) -> str:
        """One line for a log; the errors follow on their own lines when refused."""
        if not self.accepted:
            return "rules not reloaded, the old rules keep running:\n" + "\n".join(self.errors)
        parts = [f"{what} {', '.join(names)}" for what, names in (
            ("kept", self.kept), ("added", self.added), ("changed (state reset)", self.changed),
            ("removed (state dropped)", self.removed), ("tables added", self.tables_added),
            ("tables removed", self.tables_removed)) if names]
        return "rules reloaded: " + ("; ".join(parts) if parts else "no rules")


@dataclass(frozen=True)
class StateLimits:
    """Engine-wide bounds on operator state, applied to every pattern rule (None: no bound)."""

    idle_state_ttl_ms: int | None = None  # a key quiet for longer (event time) starts afresh; its state is freed
    max_partial_matches_total: int | None = None  # partial matches of one rule across all keys
    max_buffered_events: int | None = None  # events of one rule waiting for the watermark


def rule_fingerprint(rule: Rule) -> tuple:
    """What decides whether a reloaded rule may keep its state: kind, statement, options.

    The statement is compared token by token, so whitespace, comments and ``description`` may
    change without resetting the rule.
    """
    from patterns.sql_lexer import tokenize

    try:
        text: Any = tuple((t.kind, t.value) for t in tokenize(rule.source)) if rule.source else ""
    except CepError:
        text = rule.source
    spec = rule.spec
    try:
        hash(spec)
    except TypeError:
        spec = repr(spec)
    return (rule.kind, text, spec, rule.lateness_ms, rule.max_partial_matches, rule.on_cap, rule.time_unit,
            getattr(rule, "max_steps_per_event", None))


def with_time_unit(rules: RuleSet | Iterable[Rule], unit: str | None) -> RuleSet:
    """The rules with every rule's ``time_unit`` set to ``unit`` (None: as the rules say).

    ``cep run --time-unit``: the same rule file over inputs whose numeric times differ in unit
    (a sample in milliseconds, the full log in seconds).

    Example:
        >>> from patterns.rules import parse_rule_text
        >>> [r.time_unit for r in with_time_unit([parse_rule_text("SELECT * FROM t MATCH_RECOGNIZE "
        ...     "(ORDER BY ts PATTERN (A) DEFINE A AS x > 1)")], "s")]
        ['s']
    """
    from dataclasses import replace

    from patterns.rules import TIME_UNITS

    path = getattr(rules, "path", None)
    if unit is None:
        return rules if isinstance(rules, RuleSet) else RuleSet(tuple(rules), path)
    if unit not in TIME_UNITS:
        raise ValueError(f"unknown time unit {unit!r}; expected one of {', '.join(TIME_UNITS)}")
    return RuleSet(tuple(replace(r, time_unit=unit) for r in rules), path)


def joined_table(op: Any) -> str | None:
    """The name of the table an operator's rule joins (``FROM s JOIN t FOR SYSTEM_TIME AS OF``), or None."""
    join = getattr(getattr(getattr(op, "automaton", None), "mr", None), "join", None)
    if join is None:
        join = getattr(getattr(op, "spec", None), "join", None)
    return None if join is None else str(join.table)


def _spec_changes(old: Any, new: Any) -> list[str]:
    """The fields in which two table declarations differ (the description aside)."""
    from dataclasses import fields as dc_fields

    return [f.name for f in dc_fields(old) if f.name != "description" and getattr(old, f.name) != getattr(new, f.name)]


def make_operator(rule: Rule) -> Any:
    """The runtime operator of one rule, by its kind."""
    import importlib

    module, _, cls = OPERATORS[rule.kind].partition(":")
    return getattr(importlib.import_module(module), cls).from_rule(rule)


class Engine:
    """Runs every rule of a rule set over pushed events; each output row names its rule.

    A rule reads the input stream its ``FROM`` names when the engine has a stream of that name;
    otherwise it reads every stream (events carry their stream's name in the ``stream`` field).
    ``clock`` is the wall clock the rules' future guard reads (epoch ms; default the machine's).
    """

    def __init__(self, rules: RuleSet | Iterable[Rule] | str, streams: Iterable[str] | None = None,
                 clock: Clock | None = None):
        if isinstance(rules, str):
            rules = load_rules(rules)
        self.rules = list(rules)
        self.streams = set(streams or ())
        self._named_streams = streams is not None  # the run named its inputs: tables fed by none are static
        self.clock = clock
        self.operators: dict[str, Any] = {r.name: make_operator(r) for r in self.rules}
        self.bad_lines = 0
        self.tables: dict[str, Any] = {}
        self._startup = EngineOutput()  # the tables' snapshot files' bad rows, returned by the first call
        specs = getattr(rules, "tables", None) or {}
        if specs:
            from cep.tables import Table

            for name, spec in specs.items():
                table = self.tables[name] = Table(spec)
                # a table whose changelog is none of the named inputs is its snapshot: joins do not wait
                table.static = self._named_streams and bool(self.streams) and spec.stream not in self.streams
                self._startup.extend(table.load_snapshot())
        self.views: dict[str, Any] = {}
        self._build_views(getattr(rules, "views", None) or {})
        self._configure(self.operators.values())

    def _build_views(self, specs: dict[str, Any]) -> None:
        """The views of the rule set, in file order (a view may join the views before it)."""
        if not specs:
            return
        from cep.tables.view import View

        for name, spec in specs.items():
            joinable = self._joinable()
            self.views[name] = View(spec, joinable[spec.left], joinable[spec.right])

    def _joinable(self) -> dict[str, Any]:
        """What a join may name: the tables, and the views' tables."""
        return {**self.tables, **{name: v.table for name, v in getattr(self, "views", {}).items()}}

    def _advance_views(self, out: EngineOutput, final: bool = False) -> None:
        """Emit the views' changes that became final (every change at the end of input)."""
        for view in self.views.values():
            out.matches.extend(view.advance(final))

    def _reads(self, rule: Rule, stream: str | None) -> bool:
        if stream is None or rule.stream not in self.streams:
            # a table's changelog goes to the table, not to rules that read every stream
            return stream is None or rule.stream == stream or stream not in self._table_streams
        return rule.stream == stream

    @property
    def _table_streams(self) -> dict[str, None]:
        # in the tables' order, not a set's: the late and error rows of two changelogs in one batch
        # come out in the same order in every process (a set of strings iterates by a salted hash)
        return dict.fromkeys(t.spec.stream for t in self.tables.values())

    def _apply_changes(self, batch: EventBatch, stream: str | None, out: EngineOutput) -> EventBatch:
        """Feed the tables their changelog rows; the rest of the batch, for the rules."""
        if not self.tables:
            return batch
        if stream is not None:
            for t in self.tables.values():
                if t.spec.stream == stream:
                    out.extend(t.apply(batch))
            return batch
        tags = batch.columns.get("stream")
        if tags is None:
            return batch
        rest = np.ones(batch.n, dtype=bool)
        for s in self._table_streams:
            mine = tags == s
            if mine.any():
                part = batch.take(np.flatnonzero(mine))
                for t in self.tables.values():
                    if t.spec.stream == s:
                        out.extend(t.apply(part))
                rest &= ~mine
        return batch if rest.all() else batch.take(np.flatnonzero(rest))

    def _compact_tables(self) -> None:
        """Let each table (and view) forget the versions no joined rule or view can look up any more."""
        for table in self._joinable().values():
            marks = [op.released_to for op in self.operators.values()
                     if getattr(op, "join", None) is not None and op.join.table is table]
            # a view looks its tables up from the time it has emitted to (the rows just before its next changes)
            marks += [v.emitted_to for v in self.views.values() if table is v.left or table is v.right]
            if not marks:
                wm = table.watermark
                if wm is not None:
                    table.compact(wm)
            elif all(m is not None for m in marks):
                table.compact(min(marks))

    def process(self, events: Any, stream: str | None = None) -> EngineOutput:
        """Push a batch (EventBatch, dict, list of dicts, pandas or Arrow) through every rule."""
        with gc_paused():  # (cep/gc_pause.py: a batch's rows are not cyclic garbage)
            return self._process(events, stream)

    def _process(self, events: Any, stream: str | None) -> EngineOutput:
        batch = to_batch(events)
        out = EngineOutput()
        if self._startup.errors:
            out.extend(self._startup)
            self._startup = EngineOutput()
        for bl in batch.bad:
            self.bad_lines += 1
            out.errors.append({"rule": None, **bl.to_dict()})
        if stream is not None:
            self.streams.add(stream)
            if "stream" not in batch.columns:
                batch.columns["stream"] = np.full(batch.n, stream, dtype=object)
        full = batch
        batch = self._apply_changes(batch, stream, out)
        if self.views:  # before the rules: a rule joining a view releases what the view's new rows allow
            self._advance_views(out)
        # a merged batch (events of several named streams, each tagged in "stream"): a rule whose
        # FROM names one of them reads that stream's rows only
        tags = batch.columns.get("stream") if stream is None and self.streams else None
        parts: dict[str, EventBatch] = {}
        fed: set[str] = set()
        # rules reading the same events share their decoded times, keys, order and masks
        shared: dict[int, SharedBatch] = {}
        for rule in self.rules:
            if not self._reads(rule, stream):
                continue
            part = batch
            if tags is not None and rule.stream in self.streams:
                if rule.stream not in parts:
                    src = full if rule.stream in self._table_streams else batch
                    tags_of = src.columns["stream"]
                    parts[rule.stream] = src.take(np.flatnonzero(tags_of == rule.stream))
                part = parts[rule.stream]
            fed.add(rule.name)
            op = self.operators[rule.name]
            # a joined rule's rows gain the table's columns at release: it works alone
            if SHARE_WORK and hasattr(op, "shared") and getattr(op, "join", None) is None:
                sb = shared.get(id(part))
                if sb is None:
                    sb = shared[id(part)] = SharedBatch(part)
                op.shared = sb
                try:
                    out.extend(op.process(part))
                finally:
                    op.shared = None
            else:
                out.extend(op.process(part))
        if self.tables or self.views:
            # a table's watermark may have moved: joined rules release what it now allows
            for rule in self.rules:
                op = self.operators[rule.name]
                if rule.name not in fed and getattr(op, "join", None) is not None:
                    out.extend(op.release())
            self._compact_tables()
        if self._unit_pending:
            out.warnings.extend(self._unit_warnings())
        return out

    def _unit_warnings(self) -> list[str]:
        """The unit checks that rules made on their first batch since the last call, one line per
        field and units (the rules named in it)."""
        groups: dict[tuple[str, str, str], tuple[float, list[str]]] = {}
        for name in [n for n in self.operators if n in self._unit_pending]:
            op = self.operators[name]
            if not getattr(op, "unit_checked", True):
                continue
            self._unit_pending.discard(name)
            hint = getattr(op, "unit_hint", None)
            if hint is not None:
                groups.setdefault((hint.field, hint.unit, hint.looks_like), (hint.median, []))[1].append(name)
        return [UnitHint(*key, median).message(names) for key, (median, names) in groups.items()]

    def finish(self) -> EngineOutput:
        """End of input: flush every rule (final watermark)."""
        out = EngineOutput()
        if self._startup.errors:
            out.extend(self._startup)
            self._startup = EngineOutput()
        if self.views:
            self._advance_views(out, final=True)
        with gc_paused():
            for rule in self.rules:
                out.extend(self.operators[rule.name].finish())
        return out

    def table_stats(self) -> dict[str, dict[str, Any]]:
        """Per table: changes read, applied, late, errors; keys, versions, rows and memory (bytes, per row)."""
        from dataclasses import asdict

        return {name: {**asdict(t.counts), **t.stats().to_dict(), "watermark": t.watermark}
                for name, t in self.tables.items()}

    def view_stats(self) -> dict[str, dict[str, Any]]:
        """Per view: changes emitted (inserts, updates, deletes); keys, versions, rows, memory; watermark."""
        return {name: v.stats() for name, v in self.views.items()}

    # ------------------------------------------------------------------ time without events
    def watermarks(self) -> dict[str, int | None]:
        """Each rule's watermark (epoch ms), None for a rule that has no event time yet."""
        return {r.name: getattr(self.operators[r.name], "watermark", None) for r in self.rules}

    def next_deadlines(self, names: Iterable[str] | None = None) -> dict[str, int]:
        """The smallest watermark at which each rule would release or end something.

        Rules with nothing waiting on time (and search rules, which hold nothing back) are
        left out; ``names`` limits the question to those rules.
        """
        out: dict[str, int] = {}
        for r in self.rules:
            if names is not None and r.name not in names:
                continue
            fn = getattr(self.operators[r.name], "next_deadline", None)
            d = fn() if fn is not None else None
            if d is not None:
                out[r.name] = int(d)
        return out

    def advance_watermarks(self, targets: dict[str, int]) -> EngineOutput:
        """Move the named rules' watermarks forward to ``targets`` without an event (idle progress).

        What the new watermark passes comes out as if an event had moved it there: buffered
        events are released, partial matches whose ``WITHIN`` ran out end, windows close. The
        watermark then stays there: a later event behind it is late. A target at or behind a
        rule's watermark, and a rule that is not in this engine, change nothing; rules move in
        the rule file's order, so the rows are the same whatever the order of ``targets``.

        Example:
            >>> from patterns.rules import parse_rule_text
            >>> eng = Engine([parse_rule_text('''SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
            ...   MEASURES A.ts AS t0, COUNT(B.*) AS nb PATTERN (A B*) WITHIN INTERVAL '10' SECOND
            ...   DEFINE A AS v = 1, B AS v = 2)''', "open")])
            >>> eng.process([{"k": "x", "ts": 1000, "v": 1}]).matches
            []
            >>> eng.next_deadlines()
            {'open': 11000}
            >>> eng.advance_watermarks({"open": 11000}).matches
            [{'k': 'x', 't0': 1000, 'nb': 0, 'rule': 'open'}]
            >>> len(eng.process([{"k": "x", "ts": 10999, "v": 2}]).late)  # behind the new watermark
            1
        """
        out = EngineOutput()
        for rule in self.rules:
            target = targets.get(rule.name)
            op = self.operators[rule.name]
            if target is None or not hasattr(op, "advance_to"):
                continue
            target = int(target)
            wm = op.watermark
            if wm is not None and target <= wm:
                continue
            out.extend(op.advance_to(target))
            # a pattern rule's own watermark comes from its largest event time; its floor (the
            # watermark forced forward, saved with its state) holds the new one, so that events
            # behind it are judged late. A window rule's advance_to moves its clock itself.
            if hasattr(op, "floor") and (op.floor is None or op.floor < target):
                op.floor = target
        return out

    def run(self, batches: Iterable[Any]) -> EngineOutput:
        """Process every batch then finish; everything emitted, in order."""
        out = EngineOutput()
        for b in batches:
            out.extend(self.process(b))
        out.extend(self.finish())
        return out

    def counts(self) -> dict[str, Counts]:
        """Counters per rule."""
        res = {}
        for name, op in self.operators.items():
            c, s = op.counts, op.stats
            res[name] = Counts(
                c.read, c.processed, c.late, c.errors, c.buffered, s.matches,
                getattr(s, "partial_matches_peak", 0), getattr(s, "partial_matches_dropped", 0),
                getattr(s, "cap_hits", 0), getattr(s, "eval_errors", 0),
                getattr(s, "budget_dropped", 0), getattr(s, "budget_hits", 0), getattr(s, "timeouts", 0),
            )
        return res

    def snapshot(self) -> bytes:
        """Every rule's state as bytes: restore into an engine built from the same rules."""
        import pickle

        parts = {name: op.snapshot() for name, op in self.operators.items()}
        tables = {name: t.state() for name, t in self.tables.items()}
        views = {name: v.state() for name, v in self.views.items()}
        body = pickle.dumps({"rules": parts, "streams": sorted(self.streams), "bad_lines": self.bad_lines,
                             "tables": tables, "views": views}, protocol=5)
        return SNAPSHOT_MAGIC + bytes([SNAPSHOT_VERSION]) + body

    def restore(self, data: bytes) -> None:
        """Restore a snapshot; rules absent from it start empty, rules absent here are dropped."""
        from cep.safe_pickle import loads as safe_loads

        if not data.startswith(SNAPSHOT_MAGIC) or len(data) < 7 or data[6] != SNAPSHOT_VERSION:
            raise StateVersionError(
                "not an engine snapshot of this version (expected magic CEPENG and version "
                f"{SNAPSHOT_VERSION}); start from an empty state or use the engine that wrote it"
            )
        state = safe_loads(data[7:], "engine snapshot")
        for name, saved in state.get("tables", {}).items():
            if name in self.tables:  # the snapshot holds the snapshot file's rows too
                self.tables[name].restore(saved)
        for name, saved in state.get("views", {}).items():
            if name in self.views:
                self.views[name].restore(saved)
        self._startup = EngineOutput()
        restored = []
        for name, blob in state["rules"].items():
            if name in self.operators:
                self.operators[name].restore(blob)
                restored.append(self.operators[name])
        # batch-DFA rules that stepped the same shared batches before the snapshot share again
        # (key ids, PREV values, masks), once checked to hold the same keys and rows
        rejoin_histories([k for k in (getattr(op, "keyed_state", None) for op in restored) if k is not None])
        self.streams = set(state["streams"])
        self.bad_lines = state["bad_lines"]

    # ------------------------------------------------------------------ durable runs
    def reload(self, rules: RuleSet | Iterable[Rule] | str) -> ReloadReport:
        """Swap in a new rule set between batches; refuse it whole if any rule fails.

        A rule with the same name and the same statement and options keeps its state; a new name
        starts empty; a changed rule starts empty (old partial matches cannot run under a new
        pattern); a removed rule's state is dropped without flushing. ``rules`` may be a path.

        Tables (a rule set's ``tables:``; a plain list of rules keeps the engine's): an unchanged
        table keeps its rows; a new one starts from its snapshot file and its changelog from here
        on; one no longer declared is dropped. A *changed* table (key, columns, format, times,
        snapshot...) refuses the reload: its rows came from the part of its changelog already
        read, which the engine cannot read again, so no rebuild could give the rows a restart
        from an empty state would. Restart from an empty state, or declare the new shape under a
        new name.

        Example:
            >>> from dataclasses import replace
            >>> from patterns.rules import parse_rule_text
            >>> up = parse_rule_text("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) DEFINE B AS B.x > A.x)", "up")
            >>> eng = Engine([up])
            >>> rep = eng.reload([up, replace(up, name="up2")])
            >>> rep.kept, rep.added
            (['up'], ['up2'])
        """
        from patterns.errors import RuleErrors

        if isinstance(rules, str):
            try:
                rules = load_rules(rules)
            except RuleErrors as e:
                return ReloadReport(False, errors=[x.format() for x in e.errors])
        new = list(rules)
        old = {r.name: r for r in self.rules}
        report = ReloadReport(True)
        specs = getattr(rules, "tables", None)
        new_specs = {name: t.spec for name, t in self.tables.items()} if specs is None else dict(specs)
        changed = [f"table {name!r} changed ({', '.join(diff)}): its rows come from the changelog this run has "
                   "already read, which cannot be read again; restart from an empty state, or declare the new "
                   "table under another name"
                   for name, t in self.tables.items() if name in new_specs
                   for diff in [_spec_changes(t.spec, new_specs[name])] if diff]
        if changed:
            return ReloadReport(False, errors=changed)
        new_views = getattr(rules, "views", None)
        if new_views is not None and {n: v.spec for n, v in self.views.items()} != dict(new_views):
            return ReloadReport(False, errors=[
                "the views changed: a view's rows come from its tables' changelogs as this run has read them; "
                "a reload keeps the views as they are (restart from an empty state to change them)"])
        ops: dict[str, Any] = {}
        for r in new:
            prev = old.get(r.name)
            if prev is not None and rule_fingerprint(prev) == rule_fingerprint(r):
                ops[r.name] = self.operators[r.name]
                report.kept.append(r.name)
                continue
            try:
                ops[r.name] = make_operator(r)
            except (CepError, ImportError, ValueError) as e:
                return ReloadReport(False, errors=[f"rule {r.name!r}: {e}"])
            (report.changed if prev is not None else report.added).append(r.name)
        for name, op in ops.items():
            joined = joined_table(op)
            if joined is not None and joined not in new_specs and joined not in self.views:
                return ReloadReport(False, errors=[f"rule {name!r} joins table {joined!r}, which the new rules do not "
                                                   "declare (tables:)"])
        report.removed = [n for n in old if n not in ops]
        report.tables_removed = [n for n in self.tables if n not in new_specs]
        report.tables_added = [n for n in new_specs if n not in self.tables]
        if report.tables_added:
            from cep.tables import Table

            for name in report.tables_added:
                spec = new_specs[name]
                table = Table(spec)
                table.static = bool(self.streams) and spec.stream not in self.streams and self._named_streams
                self._startup.extend(table.load_snapshot())
                self.tables[name] = table
        for name in report.tables_removed:
            del self.tables[name]
        self.rules = new
        self.operators = ops
        self._configure(ops.values())
        return report

    def set_row_ids(self, on: bool = True) -> None:
        """Give every output row a deterministic ``_id`` (rule, key, match start, match number)."""
        self._row_ids = on
        self._configure(self.operators.values())

    def set_state_limits(self, limits: StateLimits) -> None:
        """Bound every pattern rule's state (idle-key expiry, global caps); see :class:`StateLimits`.

        An idle TTL or a partial-match total is refused (:class:`CepError`, nothing changed) for a
        rule that already steps on the batch DFA (cep/batch_dfa.py), which keeps neither: set them
        before the first batch."""
        refused = []
        for name, op in self.operators.items():
            check = getattr(op, "limits_refused", None)
            what = check(limits.idle_state_ttl_ms, limits.max_partial_matches_total) if check is not None else None
            if what is not None:
                refused.append(f"rule {name!r} steps on the batch DFA, which keeps no {what}")
        if refused:
            raise CepError("; ".join(refused) + " (its rows would silently ignore it): set the state limits before "
                           "the first batch, or restore a snapshot written with them")
        self._limits = limits
        self._configure(self.operators.values())

    def _configure(self, ops: Iterable[Any]) -> None:
        row_ids = getattr(self, "_row_ids", False)
        limits = getattr(self, "_limits", None)
        # rules whose first batch's times are still to be looked at for a wrong unit
        self._unit_pending = {n for n, op in self.operators.items() if not getattr(op, "unit_checked", True)}
        tables = self._joinable()
        for op in ops:
            join = joined_table(op)
            if join is not None and getattr(op, "join", None) is None:
                table = tables.get(join)
                if table is None:
                    raise ValueError(f"rule {op.name!r} joins table {join!r}, which this engine does not have "
                                     "(build the engine from the whole rule file: its tables: section declares it)")
                bind = getattr(op, "bind_table", None)
                if bind is not None:
                    bind(table)
                else:  # a pattern rule (cep.tables imports cep.operator: the engine binds it)
                    from cep.tables.join import TableJoin

                    op.join = TableJoin(table, op.automaton.mr.join, list(op.columns), list(op.key_cols))
            if hasattr(op, "clock"):
                op.clock = self.clock
            if hasattr(op, "row_ids"):
                op.row_ids = row_ids
            if limits is not None and hasattr(op, "idle_state_ttl_ms"):
                op.idle_state_ttl_ms = limits.idle_state_ttl_ms
                op.max_partial_matches_total = limits.max_partial_matches_total
                op.max_buffered_events = limits.max_buffered_events
