"""One pattern rule as a keyed event-time operator: validation, watermark, buffering, matching.

Batches flow in (``process``), complex events flow out. Per key, events wait in a buffer until
the watermark (largest event time seen minus the allowed lateness) passes them, then run through
the automaton in event-time order (ties keep arrival order). An event behind the watermark is
late: it goes to the late output with its reason. ``finish`` is the final watermark.

One concept over about 1,900 lines, so one module: :class:`PatternOperator` is a single class whose
parts (buffering to the watermark, the deadline heap, idle sessions and state caps, the column-wise
masks it feeds the automaton, snapshot and restore) all read and write the same per-key states,
buffers and counters. Split across files they would be one class spread over mixins, or functions
reaching into its private fields. What has a job of its own lives apart: the automaton's stepping
in :mod:`cep.nfa` (every key of a batch at once in :mod:`cep.batch_dfa`), the column-wise absence path in :mod:`cep.absence`, idle progress in
:mod:`cep.idle`, first-seen filters in :mod:`cep.seen`, work shared with other rules over a batch in
:mod:`cep.sharing`, temporal joins in :mod:`cep.tables`.
"""

from __future__ import annotations

import heapq
import pickle
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

import cep.absence as absence_path
import cep.batch_dfa as batch_dfa
import cep.lanes as lanes_path
from cep.events import (
    DEFAULT_MAX_FUTURE_SKEW_MS,
    Clock,
    EventBatch,
    UnitHint,
    clock_now,
    event_times,
    format_time,
    future_guard,
    to_batch,
    unit_hint,
)
from cep.expressions import ColumnarUnsupported, Node, derived_columns
from cep.gc_pause import gc_paused
from cep.json_exact import dumps_exact
from cep.lanes import LaneRun, lane_match, lane_threads
from cep.nfa import Attempt, KeyState, PatternAutomaton, StepStats
from cep.safe_pickle import loads as safe_loads
from cep.seen import SeenFilter, key_hashes
from cep.sharing import (
    KeyOrder,
    PartitionKeys,
    SharedBatch,
    arrange,
    judge,
    kernel_key,
    partition_keys,
)
from patterns.errors import CepError

__all__ = ["PatternOperator", "OperatorOutput", "OperatorCounts", "StateVersionError", "NO_WATERMARK"]

STATE_VERSION = 1
_MAX_TS = np.iinfo(np.int64).max
NO_WATERMARK = np.iinfo(np.int64).min
"""``late_before`` of an event with no watermark before it (see :meth:`PatternOperator.ingest`): never late."""


class StateVersionError(CepError):
    """A snapshot written by another state encoding or for another rule."""


def load_state(data: bytes, version: int, rule: str) -> dict:
    """A snapshot's state dict, after checking its version byte (operators' snapshot format)."""
    if not data or data[0] != version:
        got = data[0] if data else None
        raise StateVersionError(
            f"rule {rule!r}: snapshot has state version {got}, this engine reads version "
            f"{version}; replay the input from the start or use the engine that wrote it"
        )
    return safe_loads(data[1:], f"rule {rule!r}: snapshot")


def late_row(rule: str, batch: EventBatch, i: int, ts: int, watermark: int, lateness: int) -> dict[str, Any]:
    """The late-events output row of event ``i`` of ``batch``: where it came from and by how much."""
    return {
        "rule": rule,
        "source": batch.source,
        "line": batch.line_of(i),
        "reason": (
            f"late: event time {format_time(ts)} is {watermark - ts} ms behind the watermark "
            f"{format_time(watermark)} (allowed lateness {lateness} ms)"
        ),
        "event": batch.record(i),
    }


@dataclass
class OperatorCounts:
    """What an operator has seen: every event read is processed, late, or an error."""

    read: int = 0
    processed: int = 0
    late: int = 0
    errors: int = 0
    buffered: int = 0


@dataclass
class OperatorOutput:
    """Rows produced by one call: complex events, late events, bad events; and warnings for the user."""

    matches: list[dict[str, Any]] = field(default_factory=list)
    late: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # said once per run (the engine's unit check)
    # partial matches WITHIN ended without a match (ONE ROW PER MATCH WITH TIMEOUT ROWS)
    timeouts: list[dict[str, Any]] = field(default_factory=list)

    def extend(self, other: OperatorOutput) -> None:
        self.matches.extend(other.matches)
        self.late.extend(other.late)
        self.errors.extend(other.errors)
        self.warnings.extend(other.warnings)
        self.timeouts.extend(other.timeouts)


class _Pending:
    """Events accepted but not yet passed by the watermark, as parallel arrays."""

    def __init__(self, ncols: int):
        self.ts = np.zeros(0, dtype=np.int64)
        self.seq = np.zeros(0, dtype=np.int64)
        self.keys = np.zeros(0, dtype=object)
        self.cols = [np.zeros(0, dtype=object) for _ in range(ncols)]
        self.records = np.zeros(0, dtype=object)
        self.join_keys: list[np.ndarray] = []  # a temporal join's event key columns (cep.tables.join)

    def __len__(self) -> int:
        return len(self.ts)


class PatternOperator:
    """A MATCH_RECOGNIZE rule run over batches, keyed by its PARTITION BY columns.

    Example:
        >>> from patterns.rules import parse_rule_text
        >>> rule = parse_rule_text('''SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        ...   MEASURES FIRST(A.ts) AS t0, COUNT(B.*) AS nb PATTERN (A B+)
        ...   DEFINE A AS v = 0, B AS v > 0)''')
        >>> op = PatternOperator(rule.compiled, name="r")
        >>> out = op.process([{"k": 1, "ts": i, "v": v} for i, v in enumerate([0, 1, 2, 0, 5])])
        >>> out.matches + op.finish().matches
        [{'k': 1, 't0': 0, 'nb': 2, 'rule': 'r'}, {'k': 1, 't0': 3, 'nb': 1, 'rule': 'r'}]
    """

    def __init__(
        self,
        compiled,
        name: str = "rule",
        lateness_ms: int = 0,
        max_partial_matches: int = 10_000,
        on_cap: str = "drop_oldest",
        time_unit: str = "ms",
        max_future_skew_ms: int | None = DEFAULT_MAX_FUTURE_SKEW_MS,
        max_steps_per_event: int | None = None,
    ):
        self.name = name
        self._compiled = compiled
        self._automaton_options = dict(
            max_partial_matches=max_partial_matches, on_cap=on_cap, max_steps_per_event=max_steps_per_event
        )
        self._bind(self._new_automaton(compiled, **self._automaton_options))
        a = self.automaton
        self.lateness = int(lateness_ms)
        self.time_unit = time_unit
        self.max_future_skew_ms = max_future_skew_ms
        self.clock: Clock | None = None  # the future guard's wall clock (None: the machine's)
        self.unit_checked = False  # the first batch's times were looked at for a wrong unit
        self.unit_hint: UnitHint | None = None
        self.states: dict[Any, KeyState] = {}
        self._lane_pool: Any = None  # the lane arrays of the keys stepped in one call (cep/lanes.py step_batch)
        # keys with live partial matches, in the order they became live (a dict: ordered, so the
        # order of rows emitted at a watermark is the same in every run)
        self.active: dict[Any, None] = {}
        self.max_ts: int | None = None
        self.seq = 0
        # WITHIN deadlines by key, so a watermark visits only the keys it passes: a heap of
        # (deadline, key number, key), lazily cleaned; _deadline_of[key] is the entry that counts
        self._deadlines: list[tuple[int, int, Any]] = []
        self._deadline_of: dict[Any, int] = {}
        self._deadline_seq = 0
        self.pending = _Pending(len(self.columns))
        self.counts = OperatorCounts()
        self.stats = StepStats()
        self.demoted: set[tuple[int, int]] = set()
        self._out: list[dict[str, Any]] = []
        self._row_seq = 0
        # durable runs and bounded state, set through Engine.set_row_ids / Engine.set_state_limits
        self.row_ids = False  # each output row gets a deterministic "_id"
        self.idle_state_ttl_ms: int | None = None
        self.max_partial_matches_total: int | None = None
        self.max_buffered_events: int | None = None
        self.floor: int | None = None  # the watermark as forced forward by the buffered-events cap
        self._next_sweep: int | None = None
        # FIRST_SEEN(col) and MATCHES(cols, 'query') in DEFINE: values computed per batch
        self.derived = derived_columns(list(a.cp.defines.values()))
        self.seen: dict[str, SeenFilter] = {n: SeenFilter() for n, f in self.derived.items() if f.name == "FIRST_SEEN"}
        self.searches = {n: _RowSearch(f) for n, f in self.derived.items() if f.name == "MATCHES"}
        # FROM s JOIN t FOR SYSTEM_TIME AS OF: the table, bound by the engine (cep.tables.join.TableJoin)
        self.join: Any = None
        self.released_to: int | None = None  # the last watermark events were released to (joins: table compaction)
        # work shared with the engine's other rules over the batch being processed (set by the
        # engine around process(); None: compute everything here)
        self.shared: SharedBatch | None = None
        self._fresh: np.ndarray | None = None  # this batch's accepted rows, when nothing else was pending

    def _bind(self, a: PatternAutomaton) -> None:
        """Step with automaton ``a``: set what this operator reads from it."""
        self.automaton = a
        # the compiled lane path makes a start-row object per queued lane and a tuple per kept row,
        # thousands a batch, none of them garbage in a cycle: the collector's passes over them
        # (a sixth of xetra_v_shape's CPU) wait until the batch is stepped
        self.time_col = a.mr.order_by
        self.key_cols = list(a.mr.partition_by)
        self.columns = a.columns
        self.keep_records = a.all_rows
        # NEXT in DEFINE holds each key's last rows back; WITH UNMATCHED ROWS outputs every row:
        # both step every key's rows from st.rows (see _step_held), never by the skip fast path
        self.careful = a.lookahead > 0 or a.with_unmatched
        self.time_col_index = a.time_index
        # PATTERN (A NOT B) WITHIN T with row-local conditions: decided column-wise (cep/absence.py);
        # chosen at the first batch, when no idle-state TTL or global cap asks for the automaton
        self._absence_plan = absence_path.absence_plan(a)
        self._fast: absence_path.AbsencePath | None = None
        # lazy-DFA rules over many keys: every key of a batch stepped by one compiled loop
        # (cep/batch_dfa.py); planned at the first batch, chosen under the same conditions
        self._batch_plan: Any = False  # False: not planned yet; None: the rule does not fit
        self._keyed: batch_dfa.BatchDFA | None = None
        self._kernel_keys = [[kernel_key(x, a.var_names[vid]) for x in a.local_exprs[vid]] for vid in range(a.nvars)]
        # what decides this rule's whole mask column over a batch: every variable's conjuncts, in
        # order (None: some conjunct reads per-rule state); rules with the same one share it
        keys = [k for ks in self._kernel_keys for k in ks]
        self._masks_key: str | None = None if None in keys else "\0masks " + repr(self._kernel_keys)

    def _restore_mode(self, state: dict) -> None:
        """Step in the mode a snapshot was written in: node chains or DFA states.

        The exact rewrites of patterns/rewrite.py can make a rule's conditions row-local, which
        turns its runs from node chains into DFA states. A snapshot written without them (by an
        older engine, or with ``cep.nfa.REWRITE_CONDITIONS`` off) holds node chains; this operator
        then steps the rule as written, which gives the same rows (the rewrite is exact)."""
        saved = state.get("dfa")
        if saved is None:  # written before the mode was saved: read it from the partial matches
            if state.get("batch_dfa") is not None:
                saved = True
            for key in state["keys"]:
                for att in key[4]:  # (start, start_ts, threads, ...): DFA threads are ("dfa", ...)
                    saved = isinstance(att[2], tuple) and bool(att[2]) and att[2][0] == "dfa"
                    break
                if saved is not None:
                    break
        if saved is None or saved == self.automaton.dfa:
            return
        a = self._new_automaton(self._compiled, rewrite=not self.automaton.rewritten, **self._automaton_options)
        if a.dfa != saved or a.columns != self.columns:
            raise StateVersionError(
                f"rule {self.name!r}: the snapshot's partial matches are "
                f"{'DFA states' if saved else 'node chains'} and this engine steps the rule "
                f"{'as DFA states' if self.automaton.dfa else 'with node chains'}; restore with the engine that wrote it"
            )
        self._bind(a)

    def _new_automaton(self, compiled, **options: Any) -> PatternAutomaton:
        """The automaton this operator steps (``cep explain``'s operator builds one that reports what it does)."""
        return PatternAutomaton(compiled, **options)

    @classmethod
    def from_rule(cls, rule) -> PatternOperator:
        """The operator of a pattern rule, with the rule's options."""
        return cls(
            rule.compiled,
            name=rule.name,
            lateness_ms=rule.lateness_ms,
            max_partial_matches=rule.max_partial_matches,
            on_cap=rule.on_cap,
            time_unit=rule.time_unit,
            max_future_skew_ms=rule.max_future_skew_ms,
            max_steps_per_event=getattr(rule, "max_steps_per_event", None),
        )

    # ------------------------------------------------------------------ public API
    @property
    def watermark(self) -> int | None:
        if self.max_ts is None:
            return self.floor
        wm = self.max_ts - self.lateness
        return wm if self.floor is None or wm >= self.floor else self.floor

    def process(self, events: Any) -> OperatorOutput:
        """Take a batch of events (EventBatch, dicts, pandas or Arrow); return what it completes."""
        batch = to_batch(events)
        out = OperatorOutput()
        t0 = time.perf_counter()
        self._ingest(batch, out)
        if self.max_buffered_events is not None and len(self.pending) > self.max_buffered_events:
            self._force_watermark()
        self.stats.seconds_ingest += time.perf_counter() - t0
        self._release(self._release_mark(), out)
        self._fresh = None
        return out

    def release(self) -> OperatorOutput:
        """Release what the watermark allows now, without new events (a joined table's watermark moved)."""
        out = OperatorOutput()
        self._release(self._release_mark(), out)
        return out

    def _release_mark(self) -> int | None:
        """How far events may be released: the watermark, and with a temporal join no further than
        the table's changes are complete (both watermarks must have passed an event, as in Flink)."""
        wm = self.watermark
        if self.join is None or wm is None:
            return wm
        bound = self.join.table.release_bound()
        return None if bound is None else min(wm, bound)

    # The external-clock calls: a host (Spark) that knows the watermark better than one operator,
    # which may hold only some of the keys, says where it stands instead of the largest event time.
    def ingest(self, events: Any, late_before: int | np.ndarray) -> OperatorOutput:
        """Buffer a batch judged against the caller's watermark, without releasing anything.

        ``late_before`` is the watermark each event is judged against (a scalar for a whole
        Spark micro-batch, one value per event for a backfill that replays arrival order): an
        event with a valid time earlier than it is late. :data:`NO_WATERMARK` means never late.
        Only accepted events move :attr:`max_ts`; the operator's own watermark is not used.

        Example:
            >>> from patterns.rules import parse_rule_text
            >>> rule = parse_rule_text('''SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
            ...   MEASURES A.ts AS t0, B.ts AS t1 PATTERN (A B) WITHIN INTERVAL '10' SECOND
            ...   DEFINE A AS v = 0, B AS v = 1)''')
            >>> op = PatternOperator(rule.compiled, name="r")
            >>> out = op.ingest([{"k": 1, "ts": 5, "v": 0}, {"k": 1, "ts": 9, "v": 1}], late_before=0)
            >>> op.next_deadline()
            5
            >>> op.advance_to(9).matches
            [{'k': 1, 't0': 5, 't1': 9, 'rule': 'r'}]
            >>> op.ingest([{"k": 1, "ts": 3, "v": 0}], late_before=9).late[0]["reason"][:40]
            'late: event time 1970-01-01T00:00:00.003'
        """
        batch = to_batch(events)
        out = OperatorOutput()
        t0 = time.perf_counter()
        self._ingest(batch, out, late_before)
        self.stats.seconds_ingest += time.perf_counter() - t0
        return out

    def advance_to(self, watermark: int) -> OperatorOutput:
        """Move event time to ``watermark``: release buffered events, end timed-out partial matches.

        Then :meth:`compact` idle keys, since a host saves the state after every call. With a
        temporal join, no further than the table's changes are complete: a quiet changelog holds
        the events (and deadlines) back, as it does for events that moved the watermark.
        """
        out = OperatorOutput()
        mark: int | None = int(watermark)
        if self.join is not None:
            bound = self.join.table.release_bound()
            mark = None if bound is None else min(int(watermark), bound)
        self._release(mark, out)
        self.compact()
        return out

    def next_deadline(self) -> int | None:
        """The smallest watermark at which :meth:`advance_to` would release or expire something.

        A buffered event at time t is released once the watermark reaches t; a partial match
        that started at s dies (and its best match so far is emitted) once it reaches
        s + WITHIN. ``None`` when nothing waits on time (partial matches without ``WITHIN`` wait
        for rows, not for time).
        """
        best: int | None = int(self.pending.ts.min()) if len(self.pending) else None
        d = self._fast.next_deadline() if self._fast is not None else self._first_deadline()
        if d is not None and (best is None or d < best):
            best = d
        d = self._keyed.next_deadline() if self._keyed is not None else None
        if d is not None and (best is None or d < best):
            best = d
        return best

    def _key_deadline(self, key: Any) -> int | None:
        """The earliest WITHIN deadline of the key's live partial matches (attempts are in start order)."""
        st = self.states.get(key)
        within = self.automaton.within
        if st is None or within is None:
            return None
        for a in st.attempts:
            if a.threads:  # still alive (an empty thread list or DFA state 0 is dead)
                d = a.start_ts + within
                held = self._held_ts(st)
                if held is not None and held < d:
                    return None  # a held row comes first: the key's next rows decide, not time
                return d
        return None

    def _watch(self, key: Any) -> None:
        """Keep the deadline heap holding an entry no later than the key's earliest deadline."""
        d = self._key_deadline(key)
        if d is None:
            return
        old = self._deadline_of.get(key)
        if old is None or d < old:
            self._deadline_of[key] = d
            self._deadline_seq += 1
            heapq.heappush(self._deadlines, (d, self._deadline_seq, key))

    def _live_deadlines(self) -> list[tuple[int, int, Any]]:
        """The heap entries that count (one per key, the first to pop), in heap order."""
        seen: set[Any] = set()
        live = []
        for d, n, key in sorted(self._deadlines, key=lambda e: (e[0], e[1])):
            if key not in seen and self._deadline_of.get(key) == d:
                seen.add(key)
                live.append((d, n, key))
        return live

    def _first_deadline(self) -> int | None:
        """The earliest deadline of any key, cleaning stale heap entries on the way."""
        heap = self._deadlines
        while heap:
            d, _, key = heap[0]
            if self._deadline_of.get(key) == d:
                actual = self._key_deadline(key)
                if actual == d:
                    return d
                del self._deadline_of[key]
                heapq.heappop(heap)
                if actual is not None:
                    self._watch(key)
                continue
            heapq.heappop(heap)
        return None

    def _fire_deadlines(self, watermark: int, emit) -> None:
        """End the partial matches whose WITHIN deadline the watermark has passed, key by key."""
        heap = self._deadlines
        a = self.automaton
        while heap and heap[0][0] <= watermark:
            d, _, key = heapq.heappop(heap)
            if self._deadline_of.get(key) != d:
                continue  # a newer entry counts for this key
            del self._deadline_of[key]
            st = self.states.get(key)
            if st is None:
                continue
            held = self._held_ts(st)
            # rows held for NEXT come before any later row: time ends nothing they could extend
            a.expire(st, watermark if held is None or held > watermark else held, emit, self.stats)
            if a.with_unmatched:
                self._flush_unmatched(st, emit)
            if not st.attempts and not st.deferred and held is None:
                self.active.pop(key, None)
            else:
                self._watch(key)

    def reset(self) -> None:
        """Forget every key: the state of a freshly built operator (settings are kept)."""
        empty = getattr(self, "_empty_snapshot", None)
        if empty is None:
            a = self.automaton
            fresh = type(self)(a.cp, name=self.name, lateness_ms=self.lateness,
                               max_partial_matches=a.max_partial_matches, on_cap=a.on_cap,
                               time_unit=self.time_unit, max_future_skew_ms=self.max_future_skew_ms,
                               max_steps_per_event=a.max_steps_per_event)
            empty = self._empty_snapshot = fresh.snapshot()
        self.restore(empty)

    def compact(self) -> None:
        """Forget the rows an idle key no longer needs (all but the last PREV depth).

        The automaton materialises rows in runs of up to 64 ahead and trims lazily, which is
        cheap in memory but makes every idle key carry up to 64 rows in each saved snapshot.
        """
        keep = self.automaton.max_back
        active = self.active
        for key, st in self.states.items():
            if len(st.rows) > keep and key not in active and not st.attempts and not st.deferred:
                if keep:
                    del st.rows[:-keep]
                else:
                    st.rows = []
                st.base = st.nrows - len(st.rows)

    def key_count(self) -> int:
        """Keys with runtime state (idle keys included)."""
        return (len(self.states) + (self._fast.keys() if self._fast is not None else 0)
                + (self._keyed.keys() if self._keyed is not None else 0))

    def live_partial_matches(self) -> int:
        """Partial matches alive now, over every key."""
        total = self._fast.live() if self._fast is not None else 0
        if self._keyed is not None:
            total += self._keyed.live()
        for key in self.active:
            for a in self.states[key].attempts:
                total += (1 if a.threads else 0) if isinstance(a.threads, int) else len(a.threads)
        return total

    def finish(self) -> OperatorOutput:
        """End of input: the final watermark passes everything, every partial match ends."""
        out = OperatorOutput()
        self._release(None, out, final=True)
        return out

    # ------------------------------------------------------------------ ingest
    def _ingest(self, batch: EventBatch, out: OperatorOutput, late_before: int | np.ndarray | None = None) -> None:
        """Validate and buffer; lateness against the running maximum, or the caller's ``late_before``."""
        n = batch.n
        self.counts.read += n
        if n == 0:
            return
        shared = self.shared
        all_ok = False
        if shared is not None:
            ms, ok, reasons = shared.times(self.time_col, self.time_unit)
            latest, all_ok = shared.latest(self.time_col, self.time_unit)
            if self.max_future_skew_ms is not None and latest is not None:
                now = clock_now(self.clock)
                # only a time ahead of this rule's clock is refused: none when the largest is not
                if latest > now + self.max_future_skew_ms:
                    ok, reasons = future_guard(batch.column(self.time_col), ms, ok, reasons, now, self.max_future_skew_ms)
                    all_ok = False
        else:
            ms, ok, reasons = event_times(batch, self.time_col, self.time_unit, self.max_future_skew_ms, self.clock)
        if not self.unit_checked:
            self.unit_checked = True
            self.unit_hint = (shared.unit_hint(self.time_col, self.time_unit, unit_hint) if shared is not None
                              else unit_hint(batch, self.time_col, self.time_unit))
        if not all_ok:
            for i in np.flatnonzero(~ok):
                r = reasons[i] or "not a time"
                self._error(out, batch, int(i), f"event-time field {self.time_col!r}: {r}")
        keys, valid = self._keys(batch, ok, out)
        if late_before is None:
            # late: behind the watermark as it stood when the event arrived (running max before it);
            # rules that accept every row and stand at the same watermark share the answer
            if shared is not None and valid is ok and all_ok:
                j = shared.judged(self.time_col, self.time_unit, self.max_ts, self.lateness, self.floor)
            else:
                idx = np.flatnonzero(valid)
                if len(idx) == 0:
                    return
                j = judge(ms[idx], idx, self.max_ts, self.lateness, self.floor)
            for q in j.late.tolist():
                row = int(j.idx[q])
                self.counts.late += 1
                out.late.append(late_row(self.name, batch, row, int(j.ts[q]), int(j.wm_before[q]), self.lateness))
            self.max_ts = j.new_max if self.max_ts is None else max(self.max_ts, j.new_max)
            idx, kept_ts = j.kept, j.kept_ts
        else:
            idx = np.flatnonzero(valid)
            if len(idx) == 0:
                return
            ts = ms[idx]
            wm_before = np.broadcast_to(np.asarray(late_before, dtype=np.int64), (n,))[idx]
            late = ts < wm_before
            for q in np.flatnonzero(late).tolist():
                row = int(idx[q])
                self.counts.late += 1
                out.late.append(late_row(self.name, batch, row, int(ts[q]), int(wm_before[q]), self.lateness))
            keep = ~late
            # on the caller's clock only accepted events count (a late one may lie past this
            # operator's keys' maximum when other keys moved the caller's watermark)
            kept_ts = ts[keep]
            if len(kept_ts):
                new_max = int(kept_ts.max())
                self.max_ts = new_max if self.max_ts is None else max(self.max_ts, new_max)
            idx = idx[keep]
        m = len(idx)
        if m == 0:
            return
        p = self.pending
        self._fresh = idx if shared is not None and len(p) == 0 else None
        if shared is not None and m == n:
            # rules that accepted every row and counted the same rows before share one (never written to)
            seq = shared.seq(self.seq, m)
        else:
            seq = np.arange(self.seq, self.seq + m, dtype=np.int64)
        self.seq += m
        # nothing pending: the accepted times themselves (shared with other rules: never written to)
        p.ts = kept_ts if len(p) == 0 and self.join is None and kept_ts.dtype == p.ts.dtype \
            else np.concatenate((p.ts, kept_ts))
        p.seq = seq if len(p.seq) == 0 else np.concatenate((p.seq, seq))
        # every row accepted (the usual case): the batch's own arrays, not copies of them; only a
        # temporal join writes into pending columns (cep/tables/join.py), so it keeps copies
        whole = m == n and self.join is None
        p.keys = (keys if whole else keys[idx]) if len(p.keys) == 0 else _concat(p.keys, keys[idx])
        for ci, c in enumerate(self.columns):
            col = batch.column(c) if whole else batch.column(c)[idx]
            p.cols[ci] = col if len(p.cols[ci]) == 0 else _concat(p.cols[ci], col)
        if self.keep_records:
            recs = np.empty(m, dtype=object)
            recs[:] = [batch.record(int(i)) for i in idx]
            p.records = np.concatenate((p.records, recs))
        if self.join is not None:
            jk = [batch.column(c)[idx] for c in self.join.event_keys]
            p.join_keys = jk if not p.join_keys else [_concat(a, b) for a, b in zip(p.join_keys, jk)]
        self.counts.buffered = len(p)

    def _keys(self, batch: EventBatch, ok: np.ndarray, out: OperatorOutput) -> tuple[np.ndarray, np.ndarray]:
        """Partition keys per row (the value of one column or a tuple; ``_BAD`` where unusable) and
        which rows are usable (a valid time and key)."""
        if self.key_cols and self.join is not None and self.join.partition_joined:
            # partitioned by a joined column: the key is known once the join ran (at release)
            keys = np.empty(batch.n, dtype=object)
            keys[:] = [()] * batch.n
            keys[~ok] = _BAD
            return keys, ok.copy()
        pk = self.shared.keys(self.key_cols) if self.shared is not None else partition_keys(batch, self.key_cols)
        for i in sorted(pk.reasons):
            if ok[i]:  # a row with a bad time has its error already
                self._error(out, batch, i, pk.reasons[i])
        if self.shared is not None and ok is self.shared.times(self.time_col, self.time_unit)[1]:
            # rules reading the same keys and the same time checks share the answer (do not change it)
            slot = self.shared.usable.get((tuple(self.key_cols), self.time_col, self.time_unit))
            if slot is None:
                slot = self.shared.usable[(tuple(self.key_cols), self.time_col, self.time_unit)] = self._usable(pk, ok)
            return slot
        return self._usable(pk, ok)

    @staticmethod
    def _usable(pk: PartitionKeys, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        bad = pk.bad | ~ok
        keys = pk.values
        if not bad.any():
            return keys, ok  # integer keys stay integers: factorizing them is fast
        keys = keys.astype(object) if keys.dtype != object else keys.copy()
        keys[bad] = _BAD
        return keys, ~bad

    def _error(self, out: OperatorOutput, batch: EventBatch, i: int, reason: str) -> None:
        self.counts.errors += 1
        out.errors.append(
            {"rule": self.name, "source": batch.source, "line": batch.line_of(i), "reason": reason, "event": batch.record(i)}
        )

    # ------------------------------------------------------------------ release and match
    def _release(self, watermark: int | None, out: OperatorOutput, final: bool = False) -> None:
        """Match what ``watermark`` releases (everything when ``final``) into ``out``."""
        self._release_rows(watermark, out, final)
        a = self.automaton
        if a.measure_errors:  # measures that were NULL because their values raised (PatternAutomaton.guarded)
            self.stats.eval_errors += a.measure_errors
            a.measure_errors = 0

    def _release_rows(self, watermark: int | None, out: OperatorOutput, final: bool) -> None:
        p = self.pending
        if len(p):
            if final or (watermark is not None and self.max_ts is not None and watermark >= self.max_ts):
                # every pending time is at most max_ts (the largest accepted): all of them go
                rel = None
            else:
                rel = p.ts <= watermark if watermark is not None else np.zeros(len(p), dtype=bool)
            if rel is None or rel.any():
                idx = _positions(len(p)) if rel is None else np.flatnonzero(rel)
                if self.join is not None:
                    idx = self.join.enrich(self, idx, out)
                if len(idx):
                    with gc_paused():  # (the rows, start rows and row tuples made here are not cyclic garbage)
                        self._match(idx, out)
                if len(idx) == len(p) and self.join is None:
                    # everything released (the usual case at lateness 0): empty, of the same types
                    # (new arrays, not views that would keep the batch's alive)
                    p.ts, p.seq, p.keys = _empty(p.ts), _empty(p.seq), _empty(p.keys)
                    p.cols = [_empty(c) for c in p.cols]
                    if self.keep_records:
                        p.records = _empty(p.records)
                else:
                    keep = ~rel if rel is not None else np.zeros(len(p), dtype=bool)
                    p.ts, p.seq, p.keys = p.ts[keep], p.seq[keep], p.keys[keep]
                    p.cols = [c[keep] for c in p.cols]
                    p.join_keys = [c[keep] for c in p.join_keys]
                    if self.keep_records:
                        p.records = p.records[keep]
                self.counts.buffered = len(self.pending)
        if watermark is not None and not final:
            self.released_to = watermark
        a = self.automaton
        emit = self._emitter(out)
        if self._fast is not None and (final or watermark is not None):
            self._fast.fire(None if final else watermark, self._absence_row(out), self.stats)
        if final:
            if self._keyed is not None:
                t0 = time.perf_counter()
                out.matches.extend(self._keyed.flush(self.stats, self.name, self.row_ids))
                self.stats.seconds_automaton += time.perf_counter() - t0
            end = self.watermark
            for key in list(self.active):
                self._close_key(self.states[key], emit, end)
            self.active.clear()
        elif watermark is not None and a.within is not None:
            if self._deadlines:
                self._fire_deadlines(watermark, emit)
            if self._keyed is not None:
                self._keyed.expire(watermark)
        if not final and watermark is not None:
            if self.max_partial_matches_total is not None and self.active:
                self._global_cap(emit)
            ttl = self.idle_state_ttl_ms
            if ttl is not None and (self._next_sweep is None or watermark >= self._next_sweep):
                self._sweep_idle(watermark, ttl, emit)

    # ------------------------------------------------------------------ bounded state, row ids
    def _add_ids(self, st: KeyState, best: Node, number: int, rows: list[dict[str, Any]]) -> None:
        """``_id`` = rule:key:start time:match number (:row for ALL ROWS PER MATCH).

        The match number alone repeats after an idle key's state expires; the start time does not
        (a new session starts after the old one's last row), so the pair is unique per key.
        """
        import orjson

        a = self.automaton
        first = st.rows[best.rno - best.n + 1 - st.base]
        key = dumps_exact(list(first[: a.npartition]), default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()
        base = f"{self.name}:{key}:{first[a.time_index]}:{number}"
        if a.all_rows:
            for i, r in enumerate(rows):
                r["_id"] = f"{base}:{i}"
        else:
            for r in rows:
                r["_id"] = base

    def _idle_sessions(self, states: list[KeyState], starts: np.ndarray, ts: np.ndarray, codes: np.ndarray) -> list[bool]:
        """Which segments begin a new session of their key (after a gap longer than the idle TTL).

        Decided from event times alone (the gap before the segment's first row), so the result
        does not depend on batching nor on when :meth:`_sweep_idle` frees the memory. A
        session-starting segment gets a fresh state here; :meth:`_end_session` flushes the old one
        just before the segment is stepped.
        """
        ttl = self.idle_state_ttl_ms
        assert ttl is not None
        last = np.fromiter((-1 if st.last_ts is None else st.last_ts for st in states), dtype=np.int64, count=len(states))
        known = np.fromiter((st.last_ts is not None for st in states), dtype=bool, count=len(states))
        first = ts[starts]
        flags = known & (first - np.where(known, last, first) > ttl)
        # a key's rows in this batch split at a gap: each later segment starts a session
        flags[1:] |= codes[starts[1:]] == codes[starts[:-1]]
        for i in np.flatnonzero(flags).tolist():
            states[i] = KeyState()
        return flags.tolist()

    def _end_session(self, key: Any, fresh: KeyState, emit) -> None:
        """The key's session is over: flush it as at end of input, then start ``fresh``."""
        key = key.item() if isinstance(key, np.generic) else key
        old = self.states.get(key)
        if old is not None:
            ttl = self.idle_state_ttl_ms
            self._close_key(old, emit, None if old.last_ts is None or ttl is None else old.last_ts + ttl)
            self.stats.keys_expired += 1
        self.states[key] = fresh
        self.active.pop(key, None)

    def _sweep_idle(self, watermark: int, ttl: int, emit) -> None:
        """Flush and forget keys idle past the TTL: any later row of theirs starts a new session."""
        cutoff = watermark - ttl
        dead = [k for k, st in self.states.items() if st.last_ts is not None and st.last_ts < cutoff]
        for k in dead:
            st = self.states.pop(k)
            if st.attempts or st.deferred or k in self.active:
                self._close_key(st, emit, None if st.last_ts is None else st.last_ts + ttl)
            self.active.pop(k, None)
        self.stats.keys_expired += len(dead)
        self._next_sweep = watermark + max(ttl // 2, 1)

    def _force_watermark(self) -> None:
        """Too many buffered events: move the watermark up so the oldest are released now.

        Events that arrive later behind the forced watermark are late, as for any watermark.
        """
        p = self.pending
        k = len(p) - int(self.max_buffered_events or 0) - 1
        f = int(np.partition(p.ts, k)[k])
        if self.floor is None or f > self.floor:
            self.floor = f
        self.stats.buffer_cap_hits += 1

    def _global_cap(self, emit) -> None:
        """More partial matches over all keys than the rule-wide cap: shed them by the policy.

        drop_oldest ends the partial matches that started earliest, whatever their key (ties:
        the key that became live first); skip_key forgets every partial match of the keys
        holding most of them.
        """
        import heapq

        def size(x: Attempt) -> int:
            return (1 if x.threads else 0) if isinstance(x.threads, int) else len(x.threads)

        cap = int(self.max_partial_matches_total or 0)
        live = {k: sum(size(x) for x in self.states[k].attempts) for k in self.active}
        total = sum(live.values())
        if total <= cap:
            return
        stats = self.stats
        stats.cap_hits += 1
        a = self.automaton
        order = {k: i for i, k in enumerate(live)}
        touched = []
        if a.on_cap == "skip_key":
            for k in sorted(live, key=lambda k: (-live[k], order[k])):
                if total <= cap:
                    break
                total -= live[k]
                stats.partial_matches_dropped += live[k]
                self.states[k].attempts.clear()
                touched.append(k)
        else:
            heap = [(self.states[k].attempts[0].start_ts, order[k], k) for k in live if self.states[k].attempts]
            heapq.heapify(heap)
            while total > cap and heap:
                _, o, k = heapq.heappop(heap)
                st = self.states[k]
                x = st.attempts.pop(0)
                total -= size(x)
                stats.partial_matches_dropped += size(x)
                touched.append(k)
                if st.attempts:
                    heapq.heappush(heap, (st.attempts[0].start_ts, o, k))
        past_last = a.skip.mode == "PAST_LAST_ROW"
        for k in dict.fromkeys(touched):
            st = self.states[k]
            if st.attempts:
                a._resolve(st, emit, stats, past_last)
            if not st.attempts and not st.deferred and self._held_ts(st) is None:
                self.active.pop(k, None)

    def _emitter(self, out: OperatorOutput):
        a = self.automaton
        unmatched = a.with_unmatched

        def emit(st: KeyState, best: Node, number: int | None = None, timeout: Attempt | None = None) -> None:
            if timeout is not None:
                out.timeouts.append(self._timeout_row(st, timeout))
                return
            if number is None:
                number = st.match_number
                if a.max_next and (st.deferred or best.rno + a.max_next >= st.base + len(st.rows)):
                    # NEXT(...) in a measure reads rows after the match: wait until they are in
                    # st.rows. Not st.nrows: a step counts its whole segment there first but
                    # appends the rows in runs of 64, so a row already counted may be missing yet
                    st.deferred.append((best, number))
                    return
            if unmatched:
                # rows before this match that no match covers come first, in partition order
                start = best.rno - best.n + 1
                self._emit_unmatched(st, start, out)
                st.covered_end = max(st.covered_end, best.rno)
            rows = a.match_rows(st, best, number)
            for r in rows:
                r["rule"] = self.name
            if self.row_ids:
                self._add_ids(st, best, number, rows)
            self.stats.rows_emitted += len(rows)
            out.matches.extend(rows)

        emit.out = out  # type: ignore[attr-defined]  # where _flush_unmatched writes
        return emit

    def _timeout_row(self, st: KeyState, attempt: Attempt) -> dict[str, Any]:
        """The timeouts output row of an attempt WITHIN ended unmatched: measures over its rows so far.

        ``_waiting_for`` names the variables its most preferred run could take next and
        ``_deadline`` is when WITHIN ran out, in the event-time field's own unit (ISO-8601 UTC text
        when that field is not a number). MATCH_NUMBER() is NULL: no match was numbered.
        """
        import orjson

        a = self.automaton
        node, waiting, deadline = attempt.timeout  # type: ignore[misc]
        row = a.match_rows(st, node, None)[0]  # type: ignore[arg-type]
        row["rule"] = self.name
        first = st.rows[attempt.start - st.base]
        t0 = first[a.time_index]
        row["_waiting_for"] = list(waiting)
        row["_deadline"] = self._time_value(t0, attempt.start_ts, deadline)
        if self.row_ids:
            key = dumps_exact(list(first[: a.npartition]), default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()
            row["_id"] = f"{self.name}:{key}:{t0}:timeout:{attempt.start}"
        self.stats.rows_emitted += 1
        return row

    def _time_value(self, raw: Any, raw_ms: int, ms: int) -> Any:
        """Event time ``ms`` written like ``raw`` (the field's value at ``raw_ms``): same unit, or text."""
        if isinstance(raw, (int, float, np.integer, np.floating)) and not isinstance(raw, bool):
            per_ms = {"s": 0.001, "ms": 1, "us": 1000, "ns": 1_000_000}[self.time_unit]
            v = raw + (ms - raw_ms) * per_ms
            return int(v) if float(v).is_integer() else float(v)
        return format_time(ms)

    def _absence_row(self, out: OperatorOutput):
        """How the column-wise absence path emits: the automaton's match row for a one-row match."""
        a = self.automaton
        vid = self._fast.vid if self._fast is not None else 0

        def emit_row(row: tuple, number: int) -> None:
            st = KeyState()
            st.rows, st.base, st.nrows, st.match_number = [row], 0, 1, number
            node = a.new_node(0, vid, None, row, False)
            rows = a.match_rows(st, node, number)
            for r in rows:
                r["rule"] = self.name
            if self.row_ids:
                self._add_ids(st, node, number, rows)
            self.stats.rows_emitted += len(rows)
            out.matches.extend(rows)

        return emit_row

    def _step_held(self, st: KeyState, emit, final: bool = False) -> None:
        """Step the key's rows that are known (in ``st.rows``) but not stepped yet.

        With ``NEXT`` in DEFINE (look-ahead k) a row is stepped only once the k rows after it
        are known, so its condition reads them; at the partition's end (``final``) the rest are
        stepped and NEXT past the last row is NULL. Which rows are stepped depends only on the
        key's rows, never on how they were batched; the held rows live in ``st.rows`` and so in
        every snapshot.
        """
        a = self.automaton
        known = st.base + len(st.rows)
        if known:
            st.last_ts = st.rows[-1][-2]  # idle sessions count from the last row known (ms)
        n = known - st.nrows - (0 if final else a.lookahead)
        if n > 0:
            lo = st.nrows - st.base
            seq = st.rows[lo : lo + n]
            masks = [r[-1] for r in seq]
            ts = [r[-2] for r in seq]  # event times in ms (see _match)
            bits = a.start_bits
            cands = [j for j, m in enumerate(masks) if m & bits]
            last_ts = st.last_ts
            a.step_key(st, None, 0, n, masks, ts, emit, self.stats, cands, seq, materialised=True)  # type: ignore[arg-type]
            st.last_ts = last_ts
        if st.deferred:
            self._emit_deferred(st, emit, final)
        if a.with_unmatched:
            self._flush_unmatched(st, emit)

    def _held_ts(self, st: KeyState) -> int | None:
        """Event time (ms) of the key's first row held back for NEXT in DEFINE (None: none is held)."""
        if not self.careful:
            return None
        i = st.nrows - st.base
        return st.rows[i][-2] if 0 <= i < len(st.rows) else None

    def _close_key(self, st: KeyState, emit, end_time: int | None) -> None:
        """The key's partition ends at event time ``end_time`` (the last watermark at end of
        input; the last row plus the idle TTL for an idle session): step the held rows, end what
        WITHIN ended by then, end every other partial match (a run waiting at '$' matches), and
        emit what waited. Ending at a time fixed by the events keeps '$' with WITHIN the same
        whatever the batching."""
        a = self.automaton
        if st.base + len(st.rows) > st.nrows:
            self._step_held(st, emit, final=True)
        if end_time is not None and a.within is not None and st.attempts:
            a.expire(st, end_time, emit, self.stats)
        a.flush(st, emit, self.stats)
        self._emit_deferred(st, emit, final=True)
        if self.automaton.with_unmatched:
            self._flush_unmatched(st, emit)

    def _flush_unmatched(self, st: KeyState, emit) -> None:
        """WITH UNMATCHED ROWS: output the rows no match can include any more.

        A row is settled once every attempt that starts at or before it has ended and its
        matches are out: so up to the earliest live attempt's start, the earliest match still
        waiting for NEXT's rows, and the rows stepped.
        """
        upto = st.nrows
        if st.attempts:
            upto = min(upto, st.attempts[0].start)
        if st.deferred:
            first = st.deferred[0][0]
            upto = min(upto, first.rno - first.n + 1)
        self._emit_unmatched(st, upto, emit.out)

    def _emit_unmatched(self, st: KeyState, upto: int, out: OperatorOutput) -> None:
        """Output the rows before partition row ``upto`` that no match covers, with NULL measures."""
        a = self.automaton
        lo = max(st.unmatched_from, st.covered_end + 1)
        if lo < upto:
            mr = a.mr
            extra_i = len(a.columns)
            import orjson

            rows = []
            for r in range(lo, upto):
                row = st.rows[r - st.base]
                o = {c: row[i] for i, c in enumerate(mr.partition_by)}
                o[mr.order_by] = row[a.time_index]
                for name, _ in a.measures:
                    o[name] = None
                record = row[extra_i] if len(row) > extra_i else None
                if isinstance(record, dict):
                    for k, v in record.items():
                        if k not in o:
                            o[k] = v
                o["rule"] = self.name
                if self.row_ids:
                    key = dumps_exact(list(row[: a.npartition]), default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()
                    o["_id"] = f"{self.name}:{key}:{row[a.time_index]}:u{r}"
                rows.append(o)
            self.stats.rows_emitted += len(rows)
            out.matches.extend(rows)
        if upto > st.unmatched_from:
            st.unmatched_from = upto

    def _emit_deferred(self, st: KeyState, emit, final: bool = False) -> None:
        """Emit the matches whose NEXT rows have arrived (all of them at end of input)."""
        need = self.automaton.max_next
        while st.deferred and (final or st.deferred[0][0].rno + need < st.base + len(st.rows)):
            best, number = st.deferred.pop(0)
            emit(st, best, number)

    def _match(self, rel: np.ndarray, out: OperatorOutput) -> None:
        p = self.pending
        shared, fresh = self.shared, self._fresh
        ko: KeyOrder | None = None
        if shared is not None and fresh is not None and self.idle_state_ttl_ms is None and len(rel) == len(p):
            # everything pending is this batch's accepted rows: rules that accepted the same rows
            # share their order, columns and masks
            ko = shared.order((tuple(self.key_cols), self.time_col, self.time_unit), fresh, p.keys, p.ts)
            sel = ko.order  # rel is every pending row
            cols = [ko.column(shared.batch, c) for c in self.columns]
        else:
            ko = arrange(p.keys[rel], p.ts[rel], p.seq[rel], self.idle_state_ttl_ms)
            sel = rel[ko.order]
            cols = [c[sel] for c in p.cols]
        codes, uniques, ts, starts, ends, seg_keys = ko.codes, ko.uniques, ko.ts, ko.starts, ko.ends, ko.seg_keys
        n = len(sel)
        self.counts.processed += n
        if self._fast is None and self._absence_plan is not None and absence_path.USE_ABSENCE_PATH \
                and not self.states and self.idle_state_ttl_ms is None and self.max_partial_matches_total is None:
            self._fast = absence_path.AbsencePath(self.automaton, self._absence_plan)
        if self._fast is not None:
            t0 = time.perf_counter()
            masks = self._masks(cols, starts, ends, [], seg_keys, ko)
            t1 = time.perf_counter()
            self.stats.seconds_predicates += t1 - t0
            self._fast.step(codes, uniques, ts, cols, masks, self.stats)
            self.stats.seconds_automaton += time.perf_counter() - t1
            return
        if self._keyed is None and self._batch_ok():
            self._keyed = batch_dfa.BatchDFA(self.automaton, self._batch_plan)
        if self._keyed is not None:
            keyed = self._keyed
            if ko.rows is None:  # an order of this rule's own: what it stepped is its own history
                keyed.history = None
            keyed.bind(seg_keys, ko.values if ko.rows is not None else None)
            t0 = time.perf_counter()
            masks = self._masks(cols, starts, ends, [], seg_keys, ko)
            t1 = time.perf_counter()
            self.stats.seconds_predicates += t1 - t0
            out.matches.extend(keyed.step(starts, ends, ts, cols, masks, self.stats, self.name, self.row_ids))
            if ko.rows is not None:
                keyed.history = ko.history_after(keyed.history)
            self.stats.seconds_automaton += time.perf_counter() - t1
            return
        states_map = self.states
        states = list(map(states_map.get, seg_keys))
        for i in [i for i, st in enumerate(states) if st is None]:
            st = KeyState()
            if seg_keys[i] not in states_map:
                states_map[seg_keys[i]] = st
            states[i] = st
        sessions = self._idle_sessions(states, starts, ts, codes) if self.idle_state_ttl_ms is not None else None
        t0 = time.perf_counter()
        masks = self._masks(cols, starts, ends, states, seg_keys, ko)
        t1 = time.perf_counter()
        self.stats.seconds_predicates += t1 - t0
        a = self.automaton
        cand_all = np.flatnonzero(masks & a.start_bits)
        segs: Any = range(len(seg_keys))  # the segments to step (every key's, on the old path)
        if shared is not None and sessions is None and not self.careful:
            # keys with nothing to start and nothing alive only count their rows: done for all of
            # them at once, so a rule that nothing in the batch can start costs no per-key stepping
            segs = self._quiet_keys(cand_all, starts, ends, states, seg_keys, cols, masks, ts,
                                    p.records[sel] if self.keep_records else None)
            if not segs:
                self.stats.seconds_automaton += time.perf_counter() - t1
                return
        emit = self._emitter(out)
        cuts = np.searchsorted(cand_all, starts).tolist() + [len(cand_all)]
        stats = self.stats
        active = self.active
        watch = a.within is not None
        starts_l, ends_l = starts.tolist(), ends.tolist()
        # (the compiled lane path makes the tuples of only the rows it keeps: cep/lanes.py)
        own_rows = a.lanes is not None and a.lanes.kernel is not None and not self.careful

        made_lists: list[tuple[list, list, list]] = []

        def as_lists() -> tuple[list, list, list]:
            """The batch's columns as lists (each retained row is a tuple of them), its times, its masks."""
            if made_lists:
                return made_lists[0]
            if ko.rows is not None:
                col_lists = [ko.column_list(shared.batch, c) for c in self.columns]  # type: ignore[union-attr]
                ts_list = ko.lists.get("\0ts")
                if ts_list is None:
                    ts_list = ko.lists["\0ts"] = ts.tolist()
            else:
                col_lists = [c.tolist() for c in cols]
                ts_list = ts.tolist()
            if self.keep_records:
                col_lists.append(p.records[sel].tolist())
            masks_list = masks.tolist()
            if self.careful:
                # rows stepped later (held for NEXT) carry their event time in ms: the field itself may
                # be text or another unit
                col_lists.append(ts_list)
            col_lists.append(masks_list)  # each retained row ends with its mask (replay of DFA matches)
            made_lists.append((col_lists, ts_list, masks_list))
            return made_lists[0]

        batch = None
        if own_rows and sessions is None and lanes_path.USE_BATCH and ts.dtype == np.int64:
            # every key on the compiled lane path steps in one call; what each still needs of the
            # engine (a match to output, the cap) is done below in key order. It reads the
            # columns as arrays (the rows it keeps and outputs are few): lists only if a key
            # needs the engine's own stepping
            arrs = list(cols) + ([p.records[sel]] if self.keep_records else []) + [masks]
            batch = lanes_path.step_batch(a, self._lane_pool, states, segs, starts_l, ends_l, cuts, arrs, masks, ts,
                                          states_map.values(), stats, masks, (arrs, ts), as_lists)
            if batch is not None:
                self._lane_pool = batch.pool
                if len(batch.took) == len(segs):  # (the call took every key to step: no list needed)
                    batch.finish_all(states, seg_keys, ends_l, emit, stats, active, self._watch if watch else None,
                                     lambda st: self._emit_deferred(st, emit))
                    batch.keep_rows()
                    stats.seconds_automaton += time.perf_counter() - t1
                    return
        col_lists, ts_list, masks_list = as_lists()
        # (as a list only when a key steps on its own: on the compiled lane path every key of a
        # batch usually steps in one call, and every row of a rule whose first variable has no
        # condition is a candidate, so the list cost about 4% of such rules' time)
        cand_list: list[int] | None = None
        # dense work (rows that can start a match, or rows of keys with live partial matches):
        # build every row tuple at once (one C-level zip) rather than per key
        busy = len(cand_all)
        if busy * 8 <= n and self.active:
            seg_len = ends - starts
            busy += int(seg_len[np.fromiter((bool(st.attempts) for st in states), dtype=bool, count=len(states))].sum())
        rows_all = list(zip(*col_lists)) if busy * 8 > n and not own_rows else None
        step = a.step_key
        max_back = a.max_back
        if batch is None and own_rows and sessions is None and lanes_path.USE_BATCH:
            # (event times not int64: the same call over the lists)
            batch = lanes_path.step_batch(a, self._lane_pool, states, segs, starts_l, ends_l, cuts, col_lists, masks_list,
                                          ts_list, states_map.values(), stats, masks, (cols, ts))
            if batch is not None:
                self._lane_pool = batch.pool
        where = batch.where if batch is not None else {}
        for i in segs:
            s, e, st, key = starts_l[i], ends_l[i], states[i], seg_keys[i]
            if sessions is not None and sessions[i]:
                self._end_session(key, st, emit)
            if self.careful:
                st.rows.extend(rows_all[s:e] if rows_all is not None else zip(*[c[s:e] for c in col_lists]))
                self._step_held(st, emit)
                if st.attempts or st.deferred or st.base + len(st.rows) > st.nrows:
                    active[key] = None
                    if watch and st.attempts:
                        self._watch(key)
                elif key in active:
                    del active[key]
                continue
            c0, c1 = cuts[i], cuts[i + 1]
            if c0 == c1 and not st.attempts and not st.deferred:
                # nothing can start and nothing is alive: only the key's row count and the rows
                # that PREV may look back at change
                st.nrows += e - s
                st.last_ts = ts_list[e - 1]
                if max_back:
                    keep = max(s, e - max_back)
                    tail = rows_all[keep:e] if rows_all is not None else list(zip(*[c[keep:e] for c in col_lists]))
                    if keep > s:
                        st.rows = list(tail)
                    else:
                        st.rows.extend(tail)
                        if len(st.rows) > max_back:
                            del st.rows[: len(st.rows) - max_back]
                    st.base = st.nrows - len(st.rows)
                else:
                    st.rows.clear()
                    st.base = st.nrows
                if key in active:
                    del active[key]
                continue
            x = where.get(i)
            if x is not None:
                batch.finish(x, st, emit, stats, e)  # type: ignore[union-attr]
            else:
                if cand_list is None:
                    cand_list = cand_all.tolist()
                step(st, col_lists, s, e, masks_list, ts_list, emit, stats, cand_list[c0:c1], rows_all)
            if st.deferred:
                self._emit_deferred(st, emit)
            if st.attempts or st.deferred:
                active[key] = None
                if watch and st.attempts:
                    self._watch(key)
            elif key in active:
                del active[key]
        if batch is not None:
            batch.keep_rows()  # (the rows of the keys it finished without the engine)
        stats.seconds_automaton += time.perf_counter() - t1

    def limits_refused(self, idle_state_ttl_ms: int | None, max_partial_matches_total: int | None,
                       keyed: bool | None = None) -> str | None:
        """What of these state limits this rule cannot keep (None: it keeps them all).

        The batch DFA (``keyed``: whether the rule steps on it, by default whether it does now)
        keeps neither sessions nor a rule-wide cap, and its state cannot move to the per-key
        automaton, so a rule takes them only from a state without it (:meth:`_batch_ok` then keeps
        it off the batch path)."""
        if not (self._keyed is not None if keyed is None else keyed):
            return None
        if idle_state_ttl_ms is not None:
            return "idle TTL (sessions)"
        if max_partial_matches_total is not None:
            return "partial-match total (max_partial_matches_total)"
        return None

    def _batch_ok(self) -> bool:
        """Whether this rule steps its keys with :class:`cep.batch_dfa.BatchDFA` from now on: it fits
        (:func:`cep.batch_dfa.batch_plan`), no key has automaton state yet, and nothing the batch
        path does not keep is asked for (idle TTL, global cap, temporal join, FIRST_SEEN or MATCHES
        in DEFINE)."""
        if not batch_dfa.USE_BATCH_DFA or self.states or self.idle_state_ttl_ms is not None:
            return False
        if self.max_partial_matches_total is not None or self.join is not None or self.derived:
            return False
        if self._batch_plan is False:
            self._batch_plan = batch_dfa.batch_plan(self.automaton)
        return self._batch_plan is not None

    def _quiet_keys(self, cand_all: np.ndarray, starts: np.ndarray, ends: np.ndarray, states: list[KeyState],
                    seg_keys: list, cols: list[np.ndarray], masks: np.ndarray, ts: np.ndarray,
                    records: np.ndarray | None) -> list[int]:
        """Advance every key whose segment can start nothing and that holds nothing alive (what the
        stepping loop does for such a key: count its rows, keep the last ones PREV reads); return
        the other segments, in order, for the stepping loop."""
        nseg = len(starts)
        cuts = np.searchsorted(cand_all, starts)
        busy = np.diff(np.append(cuts, len(cand_all))) > 0
        if busy.all():  # (every key can start a match: a rule whose first variable has no condition)
            return list(range(nseg))
        active = self.active
        if active:
            # a key with partial matches or matches waiting for NEXT's rows is always in active
            busy |= np.fromiter((k in active for k in seg_keys), dtype=bool, count=nseg)
        quiet = np.flatnonzero(~busy)
        if not len(quiet):
            return list(range(nseg))
        qs, qe = starts[quiet], ends[quiet]
        lens = (qe - qs).tolist()
        last = ts[qe - 1].tolist()
        qstates = [states[i] for i in quiet.tolist()]
        max_back = self.automaton.max_back
        if not max_back:
            for st, ln, lt in zip(qstates, lens, last):
                st.nrows += ln
                st.last_ts = lt
                st.rows.clear()
                st.base = st.nrows
            return np.flatnonzero(busy).tolist()
        # each quiet key's last max_back rows (fewer when its segment is shorter), as row tuples
        keep = np.maximum(qs, qe - max_back)
        counts = qe - keep
        tidx = np.repeat(keep - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        parts = [c[tidx].tolist() for c in cols]
        if records is not None:
            parts.append(records[tidx].tolist())
        parts.append(masks[tidx].tolist())
        tails = list(zip(*parts))
        pos = 0
        for st, ln, lt, k, cnt in zip(qstates, lens, last, (keep > qs).tolist(), counts.tolist()):
            st.nrows += ln
            st.last_ts = lt
            tail = tails[pos : pos + cnt]
            pos += cnt
            if k:
                st.rows = tail
            else:
                st.rows.extend(tail)
                if len(st.rows) > max_back:
                    del st.rows[: len(st.rows) - max_back]
            st.base = st.nrows - len(st.rows)
        return np.flatnonzero(busy).tolist()

    def _masks(self, cols: list[np.ndarray], starts, ends, states: list[KeyState], seg_keys: list,
               ko: KeyOrder | None = None) -> np.ndarray:
        """Per row, bit v set when the row passes the row-local part of variable v's condition.

        With a shared key order (``ko.rows`` set), the column values and the masks of conditions
        other rules have evaluated over the same rows are reused: a condition's mask is keyed by
        its canonical text and by what it read from before the batch (PREV of each key's first
        rows), which is this rule's own history.
        """
        if ko is not None and ko.rows is not None and self._keyed is not None and self._keyed.history is not None \
                and not states and not self.demoted and self._masks_key is not None and not self.seen and not self.searches:
            got = self._masks_by_history(ko, cols)
            if got is not None:
                return got
        a = self.automaton
        n = len(cols[0]) if cols else 0
        masks = np.zeros(n, dtype=np.int64)
        cache: dict[tuple[str, int], tuple] = {}
        sigs: dict[tuple[str, int], Any] = {}  # what each input read from before the batch
        col_index = a.layout.col_index
        share = ko is not None and ko.rows is not None
        values = ko.values if ko is not None else {}

        def get(name: str, lag: int):
            key = (name, lag)
            if key in cache:
                return cache[key]
            if name in self.seen:
                # FIRST_SEEN flags, in row order (keys' rows are in event-time order); computed
                # once per batch, which also records the batch's values as seen
                kh = np.repeat(key_hashes(seg_keys), np.asarray(ends) - np.asarray(starts))
                arg = self.derived[name].args[0]
                cache[key] = self.seen[name].first_seen(kh, cols[col_index[arg.name]])  # type: ignore[attr-defined]
                return cache[key]
            if name in self.searches:
                cache[key] = self.searches[name].evaluate(cols, col_index, n, self.stats)
                return cache[key]
            ci = col_index[name]
            base = cols[ci]
            fills: list[list] = []
            direct = None  # the batch path's PREV values, as numbers (no Python list per row)
            # PREV of an int column is read as float64 (NaN: no row): only where that is exact
            if not lag or base.dtype.kind not in "iu" or not len(base):
                exact_nums = True
            elif share and ("\0exact", name) in values:  # (the same sorted column for every sharing rule)
                exact_nums = values[("\0exact", name)]
            else:
                exact_nums = max(int(base.max()), -int(base.min())) <= 2**53
                if share:
                    values[("\0exact", name)] = exact_nums
            sig: Any = None
            if lag and self._keyed is not None and not states:
                keyed = self._keyed
                numbers = base.dtype.kind in "iuf" and exact_nums and keyed.numbers_ok(ci)
                if share and keyed.history is not None:
                    # the values PREV reads from before the batch are those of every rule with the
                    # same history (cep.sharing.KeyOrder.history_after): named by it, not read here
                    sig = ("history", keyed.history, numbers, keyed.cols[ci].dtype.str)
                    sigs[key] = sig
                    got = values.get((name, lag, sig))
                    if got is not None:
                        cache[key] = got
                        return got
                if numbers:
                    direct = keyed.fill_numbers(ci, lag, ends - starts)
                if direct is None:
                    fills = keyed.fills(ci, lag, ends - starts)
            elif lag:
                # rows whose lagged row lies before this batch's segment: read the key's history
                seg_len = ends - starts
                for o in range(lag):
                    sel = np.flatnonzero(seg_len > o)
                    if not len(sel):
                        break
                    fill = []
                    for idx in sel.tolist():
                        st = states[idx]
                        r = st.base + len(st.rows) + o - lag  # after the rows known (held ones too)
                        i = r - st.base
                        fill.append(st.rows[i][ci] if r >= 0 and 0 <= i < len(st.rows) else None)
                    fills.append(fill)
            if share and sig is None:
                if direct is not None:
                    # the values as float64 bytes (the form both paths turn numbers into): equal
                    # bytes are equal values, and the signature costs no Python object per key
                    sig = ("numbers",) + tuple((sel.tobytes(), got.tobytes()) for sel, got in direct)
                else:
                    try:
                        sig = tuple(tuple((type(v), v) for v in fill) for fill in fills)
                        hash(sig)
                    except TypeError:
                        sig = None
                if sig is not None:
                    sigs[key] = sig
                    got = values.get((name, lag, sig))
                    if got is not None:
                        cache[key] = got
                        return got
            if lag == 0:
                vals = base
            elif direct is not None:
                vals = np.full(n, np.nan)
                vals[lag:] = base[: n - lag] if lag < n else base[:0]
                for o, (sel, got) in enumerate(direct):
                    vals[starts[sel] + o] = got
            else:
                numeric = base.dtype.kind in "iuf" and exact_nums
                vals = np.full(n, np.nan) if numeric else np.empty(n, dtype=object)
                vals[lag:] = base[: n - lag] if lag < n else base[:0]
                vals[: min(lag, n)] = np.nan if numeric else None
                seg_len = ends - starts
                for o, fill in enumerate(fills):
                    sel = np.flatnonzero(seg_len > o)
                    if numeric and not all(isinstance(v, float) or v is None or (isinstance(v, int) and abs(v) <= 2**53)
                                           for v in fill):
                        vals = vals.astype(object)
                        numeric = False
                    if numeric:
                        vals[starts[sel] + o] = np.array([np.nan if v is None else v for v in fill], dtype=float)
                    else:
                        tmp = np.empty(len(fill), dtype=object)
                        tmp[:] = fill
                        vals[starts[sel] + o] = tmp
            res = _typed(vals)
            if lag and base.dtype.kind in "iu" and res[0].dtype.kind == "f":
                res = _ints_back(res)
            cache[key] = res
            if sig is not None:
                values[(name, lag, sig)] = res
            return res

        shared_masks = ko.masks if share else None  # type: ignore[union-attr]
        whole: str | None = None
        read = get
        if shared_masks is not None and self._keyed is not None and not states and not self.demoted \
                and self._masks_key is not None and not self.seen and not self.searches:
            # rules with the same conditions share the whole mask column, keyed (as one conjunct's
            # mask is, see _shared_mask) by what each value they read held before the batch
            whole = self._masks_key
            entry = shared_masks.get(whole)
            if entry is not None:
                reads, by_sig = entry
                for r in reads:
                    get(*r)
                sig = tuple(sigs.get(r) for r in reads)
                if None not in sig:
                    got = by_sig.get(sig)
                    if got is not None:
                        return got  # (shared: never written to)
            reads_now: list[tuple[str, int]] = []

            def recording(name: str, lag: int):
                reads_now.append((name, lag))
                return get(name, lag)

            read = recording
        for vid in range(a.nvars):
            # the conjuncts' masks and-ed together; the first one is taken as it is (a shared mask is
            # never written to: ``&`` makes a new array), no all-true start array
            ok: Any = None
            for k, kernel in enumerate(a.local_kernels[vid]):
                if (vid, k) not in self.demoted:
                    kkey = self._kernel_keys[vid][k] if shared_masks is not None else None
                    if kkey is not None:
                        got = self._shared_mask(shared_masks, kkey, kernel, read, sigs, n)  # type: ignore[arg-type]
                        if got is not None:
                            ok = got if ok is None else ok & got
                            continue
                    try:
                        got = kernel(read, n)
                        ok = got if ok is None else ok & got
                        continue
                    except (ColumnarUnsupported, TypeError):
                        # mixed types or a function without a kernel: evaluate row by row
                        self.demoted.add((vid, k))
                got = self._rowwise(a.row_local_fns[vid][k], read, n)
                ok = got if ok is None else ok & got
            if ok is None:  # no row-local condition: every row
                masks |= 1 << vid
            elif vid == 0:
                masks = np.array(ok, dtype=np.int64)  # (a copy: ok may be a shared mask)
                if masks.shape != (n,):
                    masks = np.broadcast_to(masks, (n,)).copy()
            else:
                masks |= np.asarray(ok).astype(np.int64) << vid  # (ufunc where= is several times slower)
        if whole is not None and not self.demoted:
            reads = tuple(dict.fromkeys(reads_now))
            sig = tuple(sigs.get(r) for r in reads)
            if None not in sig:
                entry = shared_masks.get(whole)  # type: ignore[union-attr]
                if entry is None or entry[0] != reads:
                    entry = shared_masks[whole] = (reads, {})  # type: ignore[index]
                entry[1][sig] = masks
        return masks

    def _masks_by_history(self, ko: KeyOrder, cols: list[np.ndarray]) -> np.ndarray | None:
        """:meth:`_masks` from the masks other rules left in ``ko``'s cache, without evaluating or
        reading anything but the signatures; None when one is missing (then :meth:`_masks` runs).

        A batch-DFA rule with a known stepped history signs every value ``PREV`` reads from before
        the batch by that history (see :meth:`_masks`' ``get``), so each conjunct's and the whole
        column's cache keys follow from its reads alone: for a rule whose conjuncts another rule
        of its history evaluated already, the mask column is one dictionary look-up per conjunct
        and a few array operations, not a call of ``get`` per value read and conjunct."""
        keyed = self._keyed
        assert keyed is not None
        shared_masks, values = ko.masks, ko.values
        col_index = self.automaton.layout.col_index
        read_sigs: dict[tuple[str, int], Any] = {}

        def sig_of(reads: tuple) -> tuple | None:
            out = []
            for r in reads:
                got = read_sigs.get(r)
                if got is None:
                    name, lag = r
                    ci = col_index.get(name)
                    if ci is None:
                        return None
                    if not lag:
                        got = ()  # (what get() signs a row's own value with)
                    else:
                        base = cols[ci]
                        if base.dtype.kind not in "iu" or not len(base):
                            exact_nums = True
                        else:
                            exact_nums = values.get(("\0exact", name))
                            if exact_nums is None:
                                exact_nums = values[("\0exact", name)] = max(int(base.max()), -int(base.min())) <= 2**53
                        numbers = base.dtype.kind in "iuf" and exact_nums and keyed.numbers_ok(ci)
                        got = ("history", keyed.history, numbers, keyed.cols[ci].dtype.str)
                    read_sigs[r] = got
                out.append(got)
            return tuple(out)

        whole = shared_masks.get(self._masks_key)  # type: ignore[arg-type]
        if whole is not None:
            sig = sig_of(whole[0])
            if sig is not None:
                got = whole[1].get(sig)
                if got is not None:
                    return got  # (shared: never written to)
        n = len(cols[0]) if cols else 0
        masks: Any = None
        reads_all: list[tuple[str, int]] = []
        for vid, kkeys in enumerate(self._kernel_keys):
            ok: Any = None
            for kkey in kkeys:
                entry = shared_masks.get(kkey)  # type: ignore[arg-type]
                if entry is None:
                    return None
                sig = sig_of(entry[0])
                got = entry[1].get(sig) if sig is not None else None
                if got is None:
                    return None
                reads_all += entry[0]
                ok = got if ok is None else ok & got
            if vid == 0:
                if ok is None:
                    masks = np.ones(n, dtype=np.int64)
                else:
                    masks = np.array(ok, dtype=np.int64)  # (a copy: ok is a shared mask)
                    if masks.shape != (n,):
                        masks = np.broadcast_to(masks, (n,)).copy()
            elif ok is None:
                masks |= 1 << vid
            else:
                masks |= np.asarray(ok).astype(np.int64) << vid
        if masks is None:  # (no variable: never the case for a pattern)
            return None
        # kept for the rules with the same conditions, as _masks keeps it
        reads = tuple(dict.fromkeys(reads_all))
        sig = sig_of(reads)
        if sig is not None:
            if whole is None or whole[0] != reads:
                whole = shared_masks[self._masks_key] = (reads, {})  # type: ignore[index]
            whole[1][sig] = masks
        return masks

    @staticmethod
    def _shared_mask(shared: dict, kkey: str, kernel, get, sigs: dict, n: int) -> Any:
        """A row-local conjunct's mask from the rules' shared cache, evaluated and cached on a miss;
        None when the kernel fails (the caller demotes it, as without sharing)."""
        entry = shared.get(kkey)
        if entry is not None:
            reads, by_sig = entry
            for r in reads:
                get(*r)  # fills sigs[r] (and this rule's own cache)
            sig = tuple(sigs.get(r) for r in reads)
            if None not in sig:
                got = by_sig.get(sig)
                if got is not None:
                    return got
        reads_now: list[tuple[str, int]] = []

        def recording(name: str, lag: int):
            reads_now.append((name, lag))
            return get(name, lag)

        try:
            got = kernel(recording, n)
        except (ColumnarUnsupported, TypeError):
            return None
        reads = tuple(dict.fromkeys(reads_now))
        sig = tuple(sigs.get(r) for r in reads)
        if None not in sig:
            if entry is None or entry[0] != reads:
                entry = shared[kkey] = (reads, {})
            entry[1][sig] = got
        return got

    def _rowwise(self, compiled, get, n: int) -> np.ndarray:
        from cep.expressions import truthy

        needs, fn = compiled
        arrays = {}
        for key in needs:
            vals, nulls = get(*key)
            lst = vals.tolist() if isinstance(vals, np.ndarray) else [vals] * n
            if nulls is not False and nulls is not None:
                nl = np.broadcast_to(np.asarray(nulls, dtype=bool), (n,))
                for i in np.flatnonzero(nl):
                    lst[i] = None
            arrays[key] = lst
        out = np.zeros(n, dtype=bool)
        for i in range(n):
            try:
                out[i] = truthy(fn((i, arrays)))
            except (TypeError, ValueError, ArithmeticError):
                self.stats.eval_errors += 1
        return out

    # ------------------------------------------------------------------ snapshot
    def snapshot(self) -> bytes:
        """This operator's whole runtime state as bytes (restore with :meth:`restore`)."""
        nodes: dict[int, int] = {}
        flat: list[tuple] = []

        def nid(node: Node | None) -> int:
            if node is None:
                return -1
            chain = []
            x: Node | None = node
            while x is not None and id(x) not in nodes:
                chain.append(x)
                x = x.parent
            for y in reversed(chain):
                nodes[id(y)] = len(flat)
                flat.append((y.rno, y.vid, nodes[id(y.parent)] if y.parent is not None else -1, y.n, y.last, y.first, y.aggs, y.excl))
            return nodes[id(node)]

        keys = []
        keep: list = []
        for k, st in self.states.items():
            attempts = []
            for a in st.attempts:
                best_at = a.best
                if isinstance(a.threads, int):  # lazy-DFA attempt: its automaton states, by value
                    ds = self.automaton.dfa_states
                    threads: Any = ("dfa", ds[a.threads], [ds[x] for x in a.path])
                elif isinstance(a.threads, LaneRun):  # a lane (cep/lanes.py): saved as the general path's runs
                    built = lane_threads(self.automaton, st, a)
                    keep.append(built)  # (nid keys nodes by id: built nodes must outlive the snapshot)
                    threads = [(pc, nid(nd)) for pc, nd in built]
                else:
                    threads = [(pc, nid(nd)) for pc, nd in a.threads]
                if isinstance(best_at, int) and self.automaton.lanes is not None:
                    best_at = lane_match(self.automaton, st, a, best_at)
                    keep.append(best_at)
                best = ("row", best_at) if isinstance(best_at, int) else nid(best_at)
                if a.timeout is None:
                    attempts.append((a.start, a.start_ts, threads, best))
                else:
                    node, waiting, deadline = a.timeout
                    attempts.append((a.start, a.start_ts, threads, best, (nid(node), waiting, deadline)))
            deferred = [(nid(b), num) for b, num in st.deferred]
            keys.append((k, st.rows, st.base, st.nrows, attempts, st.resume, st.match_number, st.last_ts, deferred,
                         st.unmatched_from, st.covered_end))
        p = self.pending
        state = {
            "rule": self.name,
            "program": self.automaton.ins,
            "dfa": self.automaton.dfa,  # node chains or DFA states (see _restore_mode)
            "seen": {name: f.to_bytes() for name, f in self.seen.items()},
            "max_ts": self.max_ts,
            "seq": self.seq,
            "pending": (p.ts, p.seq, p.keys, p.cols, p.records, p.join_keys),
            "join": None if self.join is None else (self.released_to, dict(self.join.counts)),
            "nodes": flat,
            "keys": keys,
            "active": list(self.active),
            "counts": asdict(self.counts),
            "stats": asdict(self.stats),
            "demoted": sorted(self.demoted),
            "floor": self.floor,
            "next_sweep": self._next_sweep,
            "absence": self._fast.state() if self._fast is not None else None,
            "batch_dfa": self._keyed.state() if self._keyed is not None else None,
            # the heap's live entries with their sequence numbers: keys whose deadlines tie fire in
            # the same order after a restore as in an uninterrupted run
            "deadlines": (self._deadline_seq, self._live_deadlines()),
        }
        return bytes([STATE_VERSION]) + pickle.dumps(state, protocol=5)

    @property
    def keyed_state(self) -> batch_dfa.BatchDFA | None:
        """This rule's batch-DFA state (None: its keys step on another path)."""
        return self._keyed

    def restore(self, data: bytes) -> None:
        """Replace this operator's state with a snapshot taken by :meth:`snapshot`."""
        state = load_state(data, STATE_VERSION, self.name)
        if state["program"] != self.automaton.ins:
            raise StateVersionError(
                f"rule {self.name!r}: the snapshot was taken for a different pattern; "
                "a changed PATTERN cannot resume old partial matches (start from an empty state)"
            )
        self._restore_mode(state)
        nodes: list[Node] = []
        for rno, vid, parent, n, last, first, aggs, excl in state["nodes"]:
            nodes.append(Node(rno, vid, nodes[parent] if parent >= 0 else None, n, last, first, aggs, excl))
        self.states = {}
        self._lane_pool = None
        for k, rows, base, nrows, attempts, resume, mnum, last_ts, deferred, *more in state["keys"]:
            st = KeyState()
            if more:
                st.unmatched_from, st.covered_end = more[0], more[1]
            st.deferred.extend((nodes[i], num) for i, num in deferred)
            st.rows, st.base, st.nrows, st.resume, st.match_number, st.last_ts = rows, base, nrows, resume, mnum, last_ts
            for start, start_ts, threads, best, *more in attempts:
                path = None
                if isinstance(threads, tuple) and threads and threads[0] == "dfa":
                    th: Any = self.automaton._dfa_id(tuple(threads[1]))
                    path = [self.automaton._dfa_id(tuple(x)) for x in threads[2]]
                else:
                    th = [(pc, nodes[i] if i >= 0 else None) for pc, i in threads]
                if isinstance(best, tuple):
                    b: Any = best[1]
                else:
                    b = nodes[best] if best >= 0 else None
                timeout = None
                if more:
                    i, waiting, deadline = more[0]
                    timeout = (nodes[i], tuple(waiting), deadline)
                st.attempts.append(Attempt(start, start_ts, th, b, path, timeout))
            self.states[k] = st
        self.max_ts = state["max_ts"]
        self.seq = state["seq"]
        p = _Pending(len(self.columns))
        p.ts, p.seq, p.keys, p.cols, p.records, *jk = state["pending"]
        p.join_keys = list(jk[0]) if jk else []
        self.pending = p
        joined = state.get("join")
        if joined is not None:
            self.released_to = joined[0]
            if self.join is not None:
                self.join.counts.update(joined[1])
        self.active = dict.fromkeys(state["active"])
        self.counts = OperatorCounts(**state["counts"])
        self.stats = StepStats(**state["stats"])
        self.demoted = {tuple(x) for x in state["demoted"]}
        saved = state.get("seen", {})
        self.seen = {name: SeenFilter.from_bytes(saved[name]) if name in saved else SeenFilter() for name in self.seen}
        self.floor = state.get("floor")
        self._next_sweep = state.get("next_sweep")
        self._deadlines, self._deadline_of, self._deadline_seq = [], {}, 0
        saved_deadlines = state.get("deadlines")
        if saved_deadlines is None:  # a snapshot from before the heap was kept
            for k in self.active:
                self._watch(k)
        else:
            self._deadline_seq, entries = saved_deadlines
            self._deadlines = [(d, n, k) for d, n, k in entries]
            heapq.heapify(self._deadlines)
            self._deadline_of = {k: d for d, _, k in entries}
        self._keyed = None
        if state.get("batch_dfa") is not None:
            if self._batch_plan is False:
                self._batch_plan = batch_dfa.batch_plan(self.automaton)
            if self._batch_plan is None:
                raise StateVersionError(
                    f"rule {self.name!r}: the snapshot holds the batch DFA's state (cep/batch_dfa.py) "
                    "and this engine cannot run it (is numba installed?); restore with the engine that wrote it"
                )
            refused = self.limits_refused(self.idle_state_ttl_ms, self.max_partial_matches_total, keyed=True)
            if refused is not None:
                raise StateVersionError(
                    f"rule {self.name!r}: the snapshot holds the batch DFA's state (cep/batch_dfa.py), which "
                    f"keeps no {refused}; restore it into an engine without that state limit, or start from "
                    "an empty state to run with it"
                )
            self._keyed = batch_dfa.BatchDFA(self.automaton, self._batch_plan)
            self._keyed.load(state["batch_dfa"])
        self._fast = None
        if state.get("absence") is not None and self._absence_plan is not None:
            self._fast = absence_path.AbsencePath(self.automaton, self._absence_plan)
            self._fast.load(state["absence"])




class _RowSearch:
    """``MATCHES(col, ..., 'query')``: does each row, as a document of those columns, match the query."""

    def __init__(self, call) -> None:
        from cep.percolator import NoFiltering, PercolatorConfig
        from patterns.lucene import QueryConfig

        self.columns = [x.name for x in call.args[:-1]]
        config = PercolatorConfig(query=QueryConfig(default_fields=tuple(self.columns)), id_field=None)
        self.query = NoFiltering(config)
        self.query.register("q", call.args[-1].value)

    def evaluate(self, cols: list[np.ndarray], col_index: dict[str, int], n: int, stats) -> tuple[np.ndarray, bool]:
        values = [cols[col_index[c]].tolist() for c in self.columns]
        docs = [dict(zip(self.columns, row)) for row in zip(*values)]
        res = self.query.percolate_batch(docs)
        out = np.fromiter((bool(r.ids) for r in res.results), dtype=bool, count=n)
        stats.eval_errors += sum(1 for r in res.results if getattr(r, "errors", None))
        return out, False


class _BadKey:
    def __repr__(self) -> str:
        return "<bad key>"


_BAD = _BadKey()


_EMPTY: dict[np.dtype, np.ndarray] = {}


def _empty(a: np.ndarray) -> np.ndarray:
    """An empty array of ``a``'s type: one per type, read only (every rule empties its pending rows
    at every batch; nothing writes into an empty array, it is replaced)."""
    got = _EMPTY.get(a.dtype)
    if got is None:
        got = _EMPTY[a.dtype] = np.empty(0, dtype=a.dtype)
        got.flags.writeable = False
    return got


_POSITIONS = np.arange(0, dtype=np.int64)


def _positions(n: int) -> np.ndarray:
    """``np.arange(n)``, read only, shared by the rules that release a whole batch of ``n`` rows."""
    global _POSITIONS
    if len(_POSITIONS) < n:
        _POSITIONS = np.arange(max(n, 2 * len(_POSITIONS)), dtype=np.int64)
        _POSITIONS.flags.writeable = False
    return _POSITIONS[:n]


def _concat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype != b.dtype and (a.dtype == object or b.dtype == object or a.dtype.kind != b.dtype.kind):
        return np.concatenate((a.astype(object), b.astype(object)))
    return np.concatenate((a, b))


def _ints_back(res: tuple[np.ndarray, Any]) -> tuple[np.ndarray, Any]:
    """PREV of an int column, read as float64 with NaN for no row, as int64 and its NULLs again:
    the row path (and the automaton) see Python ints there, whose arithmetic does not round."""
    f, nulls = res
    g = np.where(nulls, 0.0, f)
    if not (np.abs(g) < 2.0**63).all() or not (np.floor(g) == g).all():
        return res  # (a float from an earlier batch's rows: left as it was)
    return g.astype(np.int64), nulls


def _typed(vals: np.ndarray) -> tuple[np.ndarray, Any]:
    """(values, nulls) for column kernels: numbers as float64 with NaN for NULL, else objects."""
    if vals.dtype != object:
        if vals.dtype.kind == "f":
            return vals, np.isnan(vals)
        return vals, False
    import pandas as pd

    kind = pd.api.types.infer_dtype(vals, skipna=True)
    nulls = pd.isna(vals)
    if kind in ("integer", "floating", "mixed-integer-float", "decimal"):
        f = pd.Series(vals, dtype=object).astype("float64").to_numpy()
        if kind in ("integer", "mixed-integer-float") and (np.abs(f) >= 2**53).any():
            # an integer float64 would round: objects, which the kernels leave to the row path
            return vals, nulls
        return f, nulls
    if kind == "boolean":
        b = np.zeros(len(vals), dtype=bool)
        b[~nulls] = vals[~nulls].astype(bool)
        return b, nulls
    if kind == "empty":
        return np.full(len(vals), np.nan), np.ones(len(vals), dtype=bool)
    return vals, nulls
