"""The WindowOperator: validates and judges events, drives a window engine, evaluates rows, snapshots."""

from __future__ import annotations

import hashlib
import itertools
import pickle
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from cep.analytics.arrays import _NEG, _POS, _Groups, _pair_words
from cep.analytics.context import _BatchCtx, _Ctx, _narrow_obj
from cep.analytics.emission import _Emission, _key_order
from cep.analytics.events import _Events
from cep.analytics.kernels import _aligned_hashes, _HyperLogLog, _make_kernel, _StringHashes, _TopK
from cep.analytics.panes import _PaneWindows
from cep.analytics.partials import _Partial
from cep.analytics.session import _SessionWindows
from cep.analytics.slide import _SlideWindows
from cep.events import (
    DEFAULT_MAX_FUTURE_SKEW_MS,
    Clock,
    EventBatch,
    UnitHint,
    event_times,
    to_batch,
    unit_hint,
)
from cep.expressions import ColumnarUnsupported, _compile_common, compile_columnar, truthy
from cep.operator import (
    OperatorCounts,
    OperatorOutput,
    StateVersionError,
    _typed,
    late_row,
    load_state,
)
from cep.seen import key_hashes
from patterns import ast as A
from patterns.analytics import AggRef, Aggregate, AnalyticsSpec, PrevRef, rebuild_expr
from sketches import ScalableBloomFilter

__all__ = ["WindowOperator", "WindowStats"]

STATE_VERSION = 2  # 2: SUM/AVG keep integer sums as high and low 32-bit halves
_GC_KEYS = 65_536


@dataclass
class WindowStats:
    """What an analytics operator has emitted and kept."""

    matches: int = 0  # rows emitted: on time, corrections and retractions
    corrections: int = 0
    retractions: int = 0
    windows: int = 0  # (key, window) pairs evaluated on time
    filtered: int = 0  # events WHERE left out
    eval_errors: int = 0  # expressions that failed on a row (the value became NULL)


class WindowOperator:
    """A windowed analytics rule run over batches: GROUP BY keys and a window, HAVING emits.

    Example:
        >>> from patterns.analytics import compile_analytics
        >>> spec = compile_analytics('''SELECT user, COUNT(*) AS n, COUNT(DISTINCT ip) AS ips, window_start
        ...     FROM logins GROUP BY user, TUMBLE(ts, INTERVAL '10' SECOND) HAVING COUNT(DISTINCT ip) > 1''')
        >>> op = WindowOperator(spec, name="spread")
        >>> ev = [{"user": "a", "ts": 1000, "ip": "1.1.1.1"}, {"user": "a", "ts": 2000, "ip": "2.2.2.2"},
        ...       {"user": "b", "ts": 3000, "ip": "1.1.1.1"}, {"user": "a", "ts": 12000, "ip": "3.3.3.3"}]
        >>> op.process(ev).matches
        [{'user': 'a', 'n': 2, 'ips': 2, 'window_start': 0, 'rule': 'spread', 'correction': False}]
        >>> op.finish().matches
        []
    """

    def __init__(self, spec: AnalyticsSpec, name: str = "rule", lateness_ms: int = 0, time_unit: str = "ms",
                 max_future_skew_ms: int | None = DEFAULT_MAX_FUTURE_SKEW_MS):
        self.spec = spec
        self.name = name
        self.lateness = int(lateness_ms)
        self.time_col = spec.window.time_column
        self.time_unit = time_unit
        self.max_future_skew_ms = max_future_skew_ms
        self.clock: Clock | None = None  # the future guard's wall clock (None: the machine's)
        self.unit_checked = False  # the first batch's times were looked at for a wrong unit
        self.unit_hint: UnitHint | None = None
        self.key_cols = list(spec.keys)
        self.kernels = [_make_kernel(a, self) for a in spec.aggregates]
        self._compile_outputs()
        self._event_cols = self._needed_columns()
        # FROM s JOIN t FOR SYSTEM_TIME AS OF: the table, bound by the engine (cep.tables.window_join.WindowJoin)
        self.join: Any = None
        self._join_saved: dict[str, Any] | None = None  # a restored join queue, for the join bound later
        self.reset()

    def reset(self) -> None:
        """Forget every window, key and counter: the state of a freshly built operator."""
        kind = self.spec.window.kind
        self.engine: Any = (
            _SessionWindows(self) if kind == "SESSION" else _SlideWindows(self) if kind == "SLIDE" else _PaneWindows(self)
        )
        self.value_kinds: dict[str, str] = {}
        self.max_ts: int | None = None
        self.max_event_ts = _NEG  # the largest event time applied (the clock too, unless a host sets it)
        # id -> (column, its codes, its name): the argument columns of the batch being prepared
        self._args: dict[int, tuple[np.ndarray, tuple[np.ndarray, np.ndarray, Any], str]] = {}
        self._string_hash_cache = _StringHashes()  # hashes of the strings seen, each hashed once
        self.counts = OperatorCounts()
        self.stats = WindowStats()
        self._key_ids: dict[Any, int] = {}
        self._key_values: dict[int, Any] = {}
        self._next_kid = 0
        self._key_hash: dict[int, int] = {}
        self._seen: dict[int, ScalableBloomFilter] = {}
        self._live = 0
        if self.join is not None:
            self.bind_table(self.join.table)

    def bind_table(self, table: Any) -> None:
        """Join the rule's events with ``table`` (the engine's, named by the rule's ``JOIN``)."""
        from cep.tables.window_join import WindowJoin

        assert self.spec.join is not None
        self.join = WindowJoin(table, self.spec.join, self.key_cols)
        if self._join_saved is not None:
            self.join.load(self._join_saved)
            self._join_saved = None

    @property
    def released_to(self) -> int | None:
        """With a join: the earliest event time a lookup can still be made at (table compaction)."""
        return None if self.join is None else self.join.horizon(self.lateness)

    @classmethod
    def from_rule(cls, rule) -> WindowOperator:
        """The operator of an analytics rule, with the rule's options."""
        return cls(rule.spec, name=rule.name, lateness_ms=rule.lateness_ms, time_unit=rule.time_unit,
                   max_future_skew_ms=rule.max_future_skew_ms)

    # ------------------------------------------------------------------ compiling outputs
    def _compile_outputs(self) -> None:
        spec = self.spec

        def as_col(x: A.Expr) -> A.Expr | None:
            if isinstance(x, AggRef):
                return A.Column(None, f"\0agg{x.slot}")
            if isinstance(x, PrevRef):
                return A.Column(None, f"\0prev{x.slot}")
            return None

        self._having_cols = rebuild_expr(spec.having, as_col) if spec.having is not None else None
        self._having_kernel = compile_columnar(self._having_cols, "") if self._having_cols is not None else None
        self._having_rows = self._rowwise(self._having_cols) if self._having_cols is not None else None
        self._select = []
        for oc in spec.select:
            e = rebuild_expr(oc.expr, as_col)
            direct = e.name if isinstance(e, A.Column) else None
            self._select.append((oc.name, direct, None if direct else self._rowwise(e)))
        self._where_kernel = compile_columnar(spec.where, "") if spec.where is not None else None
        self._where_rows = self._rowwise(spec.where) if spec.where is not None else None
        self._arg_fns = [
            None if a.arg is None or isinstance(a.arg, (A.Column, A.Literal)) else self._rowwise(a.arg)
            for a in spec.aggregates
        ]

    def _rowwise(self, e: A.Expr) -> Callable:
        """A closure evaluating ``e`` for row i of a context ((i, ctx, lists))."""

        def c(x: A.Expr) -> Callable:
            if isinstance(x, A.Column):
                name = x.name

                def col(env, name=name):
                    i, ctx, lists = env
                    lst = lists.get(name)
                    if lst is None:
                        vals, nulls = ctx.column(name)
                        lst = vals.tolist()
                        if nulls is not False and nulls is not None:
                            for j in np.flatnonzero(np.broadcast_to(np.asarray(nulls, dtype=bool), (len(lst),))):
                                lst[j] = None
                        lists[name] = lst
                    return lst[i]

                return col
            return _compile_common(x, c)

        return c(e)

    def _safe(self, fn: Callable | None, env) -> Any:
        assert fn is not None
        try:
            return fn(env)
        except (TypeError, ValueError, ArithmeticError):
            self.stats.eval_errors += 1
            return None

    def _needed_columns(self) -> list[str]:
        """Event fields a SLIDE window's SELECT, HAVING or APPROX_COUNT value reads."""
        if self.spec.window.kind != "SLIDE":
            return []
        names: dict[str, None] = {}
        exprs = [oc.expr for oc in self.spec.select] + ([self.spec.having] if self.spec.having is not None else [])
        exprs += [a.extra for a in self.spec.aggregates if a.func == "APPROX_COUNT"]
        for e in exprs:
            for x in _walk_cols(e):
                if x not in self.key_cols and x not in ("window_start", "window_end"):
                    names[x] = None
        return list(names)

    # ------------------------------------------------------------------ public API
    @property
    def watermark(self) -> int | None:
        clock = self.max_ts if self.join is None else self.join.max_ts
        return None if clock is None else clock - self.lateness

    def process(self, events: Any) -> OperatorOutput:
        """Take a batch of events (EventBatch, dicts, pandas or Arrow); return the rows it emits."""
        batch = to_batch(events)
        out = OperatorOutput()
        if self.join is not None:
            self.join.accept(self, batch, out)
            self.join.release(self, out)
            self._gc_keys()
            return out
        self._process(batch, out)
        return out

    def release(self) -> OperatorOutput:
        """Apply what a joined table's moved watermark now allows (nothing without a join)."""
        out = OperatorOutput()
        if self.join is not None:
            self.join.release(self, out)
        return out

    # The external-clock calls: a host (Spark) that knows the watermark better than one operator,
    # which may hold only some of the keys, says where it stands instead of the largest event time.
    def ingest(self, events: Any, late_before: int | np.ndarray) -> OperatorOutput:
        """Take a batch whose watermark the caller sets: a scalar, or one value per event.

        An event with a valid time before its ``late_before`` is late. Before each event is
        applied the clock moves to that event's ``late_before + lateness``, and the windows it
        reaches are emitted first; events never move the clock themselves. So the rows are those
        of :meth:`process` when each event's ``late_before`` is the watermark :meth:`process`
        would have had before it. The smallest int64 means "no watermark yet" (never late).

        Example:
            >>> from patterns.analytics import compile_analytics
            >>> op = WindowOperator(compile_analytics(
            ...     "SELECT k, COUNT(*) AS n FROM t GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)"), name="r")
            >>> op.ingest([{"k": "a", "ts": 3}, {"k": "a", "ts": 12}], late_before=0).matches
            []
            >>> op.next_deadline(), op.advance_to(10).matches
            (10, [{'k': 'a', 'n': 1, 'rule': 'r', 'correction': False}])
            >>> op.ingest([{"k": "a", "ts": 7}], late_before=10).late[0]["reason"][:40]
            'late: event time 1970-01-01T00:00:00.007'
        """
        out = OperatorOutput()
        if self.join is not None:
            # judged now on the host's watermark; applied (on that clock) once the table answers for them
            self.join.ingest(self, to_batch(events), late_before, out)
            return out
        self._process(to_batch(events), out, late_before)
        return out

    def advance_to(self, watermark: int) -> OperatorOutput:
        """Move the clock to ``watermark + lateness``: emit the windows it reaches, end final ones.

        Also forgets the ids of keys no window holds any more, so that a saved state holds only
        live keys (a host saves it after every call).
        """
        out = OperatorOutput()
        watermark = int(watermark)
        if watermark == _NEG:
            return out
        if self.join is not None:
            # the rule's clock moves; the windows' only as far as the table lets events through
            self.join.advance(self, watermark)
            self.join.release(self, out)
            self._gc_keys(force=True)
            return out
        clock = watermark + self.lateness
        if self.max_ts is None or clock > self.max_ts:
            self._move_clock(clock, out)
        self._gc_keys(force=True)
        return out

    def _move_clock(self, clock: int, out: OperatorOutput) -> None:
        """Set the clock from outside, between batches: what it reaches comes out in threshold
        order, after every row of the batch before (as if its last event had moved the clock)."""
        self.max_ts = clock
        self._flush(self.engine.advance(clock, np.zeros(0, dtype=np.int64), _POS), out)

    def next_deadline(self) -> int | None:
        """The smallest watermark at which :meth:`advance_to` would emit or drop something.

        A window is emitted when the clock reaches its end and made final (corrected, its state
        dropped) at end + lateness; a SLIDE row comes out when the watermark reaches its event.
        None when nothing waits on time.
        """
        t = self.engine.next_threshold()
        return None if t is None else t - self.lateness

    def peek(self, key: Any) -> list[dict[str, Any]]:
        """The open windows of one key (its value; a tuple for several key columns, ``()`` for
        none) and the row each would emit now (None when HAVING fails), without emitting or
        counting anything. TUMBLE, HOP and SESSION; a SLIDE row is evaluated only when released.

        Example:
            >>> from patterns.analytics import compile_analytics
            >>> op = WindowOperator(compile_analytics(
            ...     "SELECT k, COUNT(*) AS n FROM t GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)"), name="r")
            >>> _ = op.process([{"k": "a", "ts": 3}, {"k": "a", "ts": 4}])
            >>> op.peek("a")
            [{'window_start': 0, 'window_end': 10, 'fired': False, 'row': {'k': 'a', 'n': 2, 'rule': 'r', 'correction': False}}]
        """
        kid = self._key_ids.get(key)
        peek = getattr(self.engine, "peek", None)
        if kid is None or peek is None:
            return []
        stats = WindowStats(**asdict(self.stats))
        try:
            got = peek(kid)
        finally:
            self.stats = stats
        return [{"window_start": s, "window_end": e, "fired": f, "row": r} for s, e, f, r in got]

    def key_count(self) -> int:
        """Keys the operator holds ids for (a key is forgotten once none of its windows is open)."""
        return len(self._key_values)

    def finish(self) -> OperatorOutput:
        """End of input: the final watermark closes every window."""
        out = OperatorOutput()
        if self.join is not None:
            self.join.release(self, out, final=True)
        ems = self.engine.advance(_POS, np.zeros(0, dtype=np.int64), 0, final=True)
        self._flush(ems, out)
        self._gc_keys()
        return out

    # ------------------------------------------------------------------ ingest
    def _process(self, batch: EventBatch, out: OperatorOutput, late_before: Any = None, count_read: bool = True) -> None:
        """Validate, judge lateness, apply in segments; with ``late_before``, on the caller's clock."""
        n = batch.n
        if count_read:
            self.counts.read += n
        if n == 0:
            return
        ms, ok, reasons = event_times(batch, self.time_col, self.time_unit, self.max_future_skew_ms, self.clock)
        if not self.unit_checked:
            self.unit_checked = True
            self.unit_hint = unit_hint(batch, self.time_col, self.time_unit)
        bad: dict[int, str] = {}
        for r in np.flatnonzero(~ok).tolist():
            bad[r] = f"event-time field {self.time_col!r}: {reasons[r] or 'not a time'}"
        kid = self._kids(batch, ok, bad)
        cand = np.flatnonzero(ok & (kid >= 0))
        self._args = {}
        inputs = []
        for slot, (k, a) in enumerate(zip(self.kernels, self.spec.aggregates)):
            vals = self._arg_values(slot, a, batch, cand)
            x, why = k.prepare(vals)
            inputs.append(x)
            for j, reason in why.items():
                bad.setdefault(int(cand[j]), reason)
        extra_cols = {}
        for c in self._event_cols:
            extra_cols[c] = batch.column(c)[cand]
        for slot, kern in enumerate(self.kernels):
            if isinstance(kern, (_HyperLogLog, _TopK)) and self.spec.window.kind == "SLIDE":
                h0, _h1, _v, _b = _aligned_hashes(
                    self._arg_values(slot, self.spec.aggregates[slot], batch, cand), "", isinstance(kern, _HyperLogLog)
                )
                extra_cols[f"\0h{slot}"] = h0
        self._args = {}  # the argument columns of this batch are prepared: let them go
        for row in sorted(bad):
            self._error(out, batch, row, bad[row])
        good = np.ones(len(cand), dtype=bool)
        if bad:
            good = ~np.isin(cand, np.fromiter(bad.keys(), dtype=np.int64, count=len(bad)))
        ev = _Events(ms[cand], kid[cand], np.zeros(len(cand), dtype=np.int64), inputs, extra_cols)
        if not good.all():
            ev = ev.take(good, self.kernels)
            cand = cand[good]
        if not len(ev):
            return
        # late: behind the watermark as it stood when the event arrived (the clock before it:
        # the running max of event times, or the caller's)
        ts = ev.ts
        start = self.max_ts if self.max_ts is not None else _NEG
        if late_before is None:
            prior = np.maximum.accumulate(np.concatenate(([start], ts)))[:-1]
        else:
            given = np.broadcast_to(np.asarray(late_before, dtype=np.int64), (n,))[cand]
            with np.errstate(over="ignore"):
                prior = np.where(given == _NEG, _NEG, given + self.lateness)
            prior = np.maximum.accumulate(np.maximum(prior, start))  # never behind the clock
        wm_before = np.where(prior == _NEG, _NEG, prior - self.lateness)
        late = ts < wm_before
        for j in np.flatnonzero(late).tolist():
            i = int(cand[j])
            self.counts.late += 1
            out.late.append(late_row(self.name, batch, i, int(ts[j]), int(wm_before[j]), self.lateness))
        if late.any():
            ev = ev.take(~late, self.kernels)
            cand = cand[~late]
            prior = prior[~late]
        m = len(ev)
        if not m:
            return
        # r_all: the clock after each event; split_prior: what each event finds before it, for
        # cutting segments (on the caller's clock, also the later events applied so far)
        seen = np.maximum.accumulate(np.concatenate(([self.max_event_ts], ev.ts)))
        self.max_event_ts = int(seen[-1])
        if late_before is None:
            r_all = np.maximum.accumulate(np.concatenate(([start], ev.ts)))[1:]
            split_prior = prior
        else:
            r_all = np.append(prior[1:], prior[-1])
            split_prior = np.maximum(prior, seen[:-1])
            if prior[0] > start:  # windows the caller's clock reached before this batch
                self._move_clock(int(prior[0]), out)
        ev.pos = np.arange(m, dtype=np.int64)
        keep = self._where(batch, cand)
        if not keep.all():
            dropped = int((~keep).sum())
            self.stats.filtered += dropped
            self.counts.processed += dropped
        data = ev.take(keep, self.kernels) if not keep.all() else ev
        data_prior = split_prior[keep]
        split = np.flatnonzero(self.engine.split_before(data.ts, data_prior))
        bounds = sorted(set(data.pos[split].tolist()) | {0})
        bounds.append(m)
        dpos = data.pos
        for a_pos, b_pos in zip(bounds[:-1], bounds[1:]):
            lo_i, hi_i = np.searchsorted(dpos, [a_pos, b_pos])
            seg = data.take(np.arange(lo_i, hi_i), self.kernels) if (lo_i, hi_i) != (0, len(data)) else data
            clock_before = int(split_prior[a_pos])
            if len(seg):
                if not isinstance(self.engine, _SlideWindows):
                    self._mark_first_seen(seg)
                    self.counts.processed += len(seg)
                self.engine.apply(seg, clock_before)
            self.max_ts = int(r_all[b_pos - 1])
            if self.max_ts != _NEG:  # no clock yet (no watermark given): nothing is due
                self._flush(self.engine.advance(self.max_ts, r_all, a_pos), out)
        self._gc_keys()

    def _flush(self, ems: list[_Emission], out: OperatorOutput) -> None:
        ems.sort(key=_Emission.sort_key)
        for e in ems:
            self.stats.matches += len(e.rows)
            out.matches.extend(e.rows)

    def _error(self, out: OperatorOutput, batch: EventBatch, i: int, reason: str) -> None:
        self.counts.errors += 1
        out.errors.append(
            {"rule": self.name, "source": batch.source, "line": batch.line_of(i), "reason": reason, "event": batch.record(i)}
        )

    def _kids(self, batch: EventBatch, ok: np.ndarray, bad: dict[int, str]) -> np.ndarray:
        """Persistent key ids per row; -1 where the time or a key field is unusable."""
        n = batch.n
        kid = np.full(n, -1, dtype=np.int64)
        if not self.key_cols:
            if not self._key_ids:
                self._register([()])
            kid[ok] = self._key_ids[()]
            return kid
        usable = ok.copy()
        codes: list[Any] = []
        uniques = []
        for c in self.key_cols:
            col = batch.column(c)
            enc = batch.encoded(c)
            if enc is not None:  # strings and None, dictionary-encoded by the decoder: factorized already
                for r in np.flatnonzero((enc[0] < 0) & usable).tolist():
                    bad.setdefault(r, f"group key field {c!r} is missing (null)")
                    usable[r] = False
                codes.append(enc[0])
                uniques.append(enc[1])
                continue
            if col.dtype == object:
                nulls = pd.isna(col)
                kind = pd.api.types.infer_dtype(col, skipna=True)
                if kind not in ("string", "integer", "floating", "mixed-integer-float", "boolean", "empty", "bytes"):
                    for i in np.flatnonzero(~nulls & usable):
                        v = col[i]
                        if isinstance(v, (list, dict, set, tuple)):
                            bad.setdefault(int(i), f"group key field {c!r} holds a {type(v).__name__}; expected a string or a number")
                            usable[i] = False
            elif col.dtype.kind == "f":
                nulls = np.isnan(col)
            else:
                nulls = np.zeros(n, dtype=bool)
            for i in np.flatnonzero(nulls & usable):
                bad.setdefault(int(i), f"group key field {c!r} is missing (null)")
                usable[i] = False
            if col.dtype == object and not usable.all():
                col = col.copy()
                col[~usable] = None  # unhashable values must not reach factorize
            code, uniq = pd.factorize(col)
            codes.append(code)
            uniques.append(uniq)
        idx = np.flatnonzero(usable)
        if not len(idx):
            return kid
        if len(codes) == 1:
            code = codes[0][idx].astype(np.int64)
            nuniq = len(uniques[0])
        else:
            # several key fields: one code per distinct combination (mixed radix, then factorize)
            comb = np.zeros(len(idx), dtype=np.int64)
            radix = 1
            for c, uq in zip(codes, uniques):
                if radix * max(len(uq), 1) >= 1 << 62:
                    # the product would wrap in int64 and merge distinct keys (a file-wide
                    # dictionary holds up to 2**18 strings a column): renumber the combinations first
                    comb, _ = pd.factorize(comb)
                    comb = comb.astype(np.int64)
                    radix = int(comb.max()) + 1
                comb = comb * len(uq) + c[idx]
                radix *= max(len(uq), 1)
            code, _ = pd.factorize(comb)
            code = code.astype(np.int64)
            nuniq = int(code.max()) + 1
        used = np.zeros(nuniq, dtype=bool)
        used[code] = True
        sel = np.flatnonzero(used)
        if len(codes) == 1:
            vals = np.asarray(uniques[0])[sel].tolist()  # Python scalars, only of usable rows
        else:
            first = np.zeros(nuniq, dtype=np.int64)
            first[code[::-1]] = np.arange(len(code))[::-1]
            rows = idx[first[sel]]
            cols = [batch.column(c)[rows].tolist() for c in self.key_cols]
            vals = [tuple(_py(v) for v in t) for t in zip(*cols)]
        ids = np.full(nuniq, -1, dtype=np.int64)
        ids[sel] = self._register(vals)
        kid[idx] = ids[code]
        return kid

    def _register(self, vals: list) -> np.ndarray:
        reg = self._key_ids
        got = list(map(reg.get, vals))
        if None in got:
            for j, v in enumerate(vals):
                if got[j] is None:
                    k = reg.get(v)  # a value may repeat as another type (1 and 1.0)
                    if k is None:
                        k = reg[v] = self._next_kid
                        self._key_values[k] = v
                        self._next_kid += 1
                    got[j] = k
        return np.array(got, dtype=np.int64)

    def _factors_of(self, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any] | None:
        """The decoder's dictionary encoding of an argument column of the batch being prepared
        (codes, distinct strings, and the file-wide dictionary they come from or None)."""
        got = self._args.get(id(vals))
        return got[1] if got is not None and got[0] is vals else None

    def _arg_values(self, slot: int, a: Aggregate, batch: EventBatch, idx: np.ndarray) -> np.ndarray:
        if a.arg is None:
            return np.zeros(len(idx))
        if isinstance(a.arg, A.Column):
            # aggregates of one column (COUNT(DISTINCT url), APPROX_COUNT_DISTINCT(url)) share its
            # rows: the same array, so its codes and hashes are gathered once per batch
            for got in self._args.values():
                if got[2] == a.arg.name:
                    return got[0]
            vals = batch.column(a.arg.name)[idx]
            enc = batch.encoded(a.arg.name)
            if enc is not None:  # kept for this batch's kernels (hashing per distinct value)
                self._args[id(vals)] = (vals, (enc[0][idx], enc[1], batch.dictionary(a.arg.name)), a.arg.name)
            return vals
        if isinstance(a.arg, A.Literal):
            out = np.empty(len(idx), dtype=object)
            out[:] = [a.arg.value] * len(idx)
            return _narrow_obj(out)
        fn = self._arg_fns[slot]
        ctx = _BatchCtx(batch, idx)
        lists: dict = {}
        out = np.empty(len(idx), dtype=object)
        for i in range(len(idx)):
            out[i] = self._safe(fn, (i, ctx, lists))
        return _narrow_obj(out)

    def _where(self, batch: EventBatch, idx: np.ndarray) -> np.ndarray:
        if self._where_kernel is None:
            return np.ones(len(idx), dtype=bool)
        ctx = _BatchCtx(batch, idx)
        try:
            return np.asarray(self._where_kernel(lambda name, lag: ctx.column(name), len(idx)), dtype=bool)
        except (ColumnarUnsupported, TypeError):
            fn = self._where_rows
            lists: dict = {}
            return np.fromiter((truthy(self._safe(fn, (i, ctx, lists))) for i in range(len(idx))), dtype=bool, count=len(idx))

    # ------------------------------------------------------------------ keys, first-seen
    def _khash(self, kids: np.ndarray) -> np.ndarray:
        """A stable 64-bit hash of each key's value (FIRST_SEEN remembers keys by value)."""
        uk, inv = np.unique(kids, return_inverse=True)
        missing = [k for k in uk.tolist() if k not in self._key_hash]
        if missing:
            vals = [self._key_values[k] for k in missing]
            if len(self.key_cols) == 1:
                h = key_hashes(vals)
            else:  # no key: () hashes to 0; several columns: tuples, mixed column by column
                h = key_hashes([tuple(v) for v in vals]) if self.key_cols else np.zeros(len(vals), dtype=np.uint64)
            for k, hv in zip(missing, h.tolist()):
                self._key_hash[k] = hv
        arr = np.fromiter((self._key_hash[k] for k in uk.tolist()), dtype=np.uint64, count=len(uk))
        return arr[inv.reshape(-1)]

    def _mark_first_seen(self, ev: _Events) -> None:
        """Flag, in order, each event whose value its key brings for the first time."""
        for i, k in enumerate(self.kernels):
            if not k.needs_seen or not len(ev):
                continue
            h0, valid, flags = ev.inputs[i]
            flags[:] = 0
            sel = np.flatnonzero(valid)
            if not len(sel):
                continue
            pairs = _pair_words(self._khash(ev.kid[sel]).view(np.int64), h0[sel])
            uniq, first = np.unique(pairs, return_index=True)
            bloom = self._seen.get(i)
            if bloom is None:
                cfg = self.spec.sketches
                bloom = self._seen[i] = ScalableBloomFilter(cfg.bloom_capacity, cfg.bloom_error_rate)
            new = ~np.asarray(bloom.contains(uniq), dtype=bool)
            flags[sel[first[new]]] = 1
            if new.any():
                bloom.update(uniq[new])

    def _gc_keys(self, force: bool = False) -> None:
        """Forget key ids no window holds any more (FIRST_SEEN keeps its keys by value)."""
        # only when many ids are dead: a key that pauses for a window comes back cheaply
        if not force and len(self._key_ids) < max(_GC_KEYS, 4 * self._live):
            return
        live = self.engine.live_kids()
        for k in [k for k in self._key_values if k not in live]:
            v = self._key_values.pop(k)
            del self._key_ids[v]
            self._key_hash.pop(k, None)
        self._live = len(live)

    # ------------------------------------------------------------------ building and evaluating
    def _build(self, ev: _Events, cells: np.ndarray) -> _Partial:
        g = _Groups(cells, stable=not all(k.order_free for k in self.kernels))
        cell_ids = g.codes
        states = [k.build(x, g, cell_ids) for k, x in zip(self.kernels, ev.inputs)]
        return _Partial(cell_ids, g.counts().astype(np.int64), states)

    def _evaluate(self, part: _Partial, prev: _Partial | None, ctx: _Ctx) -> list[tuple[int, dict]]:
        """Rows (index into ``ctx``, row) of the cells of ``part`` that pass HAVING, in key order.

        ``prev`` is the previous window's partial, restricted to these cells (PREV_WINDOW).
        """
        at, rows = self._evaluate_apart(part, prev, ctx)
        return list(zip(at.tolist(), rows))

    def _evaluate_apart(self, part: _Partial, prev: _Partial | None, ctx: _Ctx) -> tuple[np.ndarray, list[dict]]:
        """:meth:`_evaluate` as (the indexes into ``ctx``, the rows): no pair per row for a caller
        that wants them apart (many windows read at once)."""
        results = [k.result(st, part.n, part.cells, ctx) for k, st in zip(self.kernels, part.states)]
        prevres = None
        if self.spec.prev:
            prevres = {}
            at = np.searchsorted(part.cells, prev.cells) if prev is not None else np.zeros(0, dtype=np.int64)
            for s in self.spec.prev:
                k = self.kernels[s]
                full = np.empty(ctx.n, dtype=object)
                full[:] = [k.empty()] * ctx.n
                if len(at) and prev is not None:
                    pctx = _Ctx(self, ctx.kids[at], ctx.wstart[at] - self.spec.window.step_ms, ctx.wend[at] - self.spec.window.step_ms)
                    vals, nulls = k.result(prev.states[s], prev.n, prev.cells, pctx)
                    vl = vals.tolist()
                    nl = np.broadcast_to(np.asarray(nulls, dtype=bool), (len(vl),)).tolist()
                    for j, pos in enumerate(at.tolist()):
                        full[pos] = None if nl[j] else vl[j]
                prevres[s] = _typed(_narrow_obj(full))
        self.stats.windows += ctx.n
        return self._results_apart(results, prevres, ctx)

    def _evaluate_results(self, results: list, prevres: dict | None, ctx: _Ctx) -> list[tuple[int, dict]]:
        at, rows = self._results_apart(results, prevres, ctx)
        return list(zip(at.tolist(), rows))

    def _results_apart(self, results: list, prevres: dict | None, ctx: _Ctx) -> tuple[np.ndarray, list[dict]]:
        n = ctx.n
        for s, (vals, nulls) in enumerate(results):
            if vals.dtype == object:
                vals = _narrow_obj(vals)
            if vals.dtype.kind == "f" and nulls is False:
                nulls = np.isnan(vals)
            ctx.values[f"\0agg{s}"] = (vals, nulls)
        for s, v in (prevres or {}).items():
            ctx.values[f"\0prev{s}"] = v
        if self._having_cols is None:
            passing = np.arange(n)
        else:
            try:
                assert self._having_kernel is not None
                mask = np.asarray(self._having_kernel(lambda name, lag: ctx.column(name), n), dtype=bool)
            except (ColumnarUnsupported, TypeError):
                lists: dict = {}
                fn = self._having_rows
                mask = np.fromiter((truthy(self._safe(fn, (i, ctx, lists))) for i in range(n)), dtype=bool, count=n)
            passing = np.flatnonzero(mask)
        if not len(passing):
            return passing, []
        kv = self._key_values
        pkeys = list(map(kv.__getitem__, ctx.kids[passing].tolist()))
        order = _key_order(pkeys, ctx.wstart[passing], ctx.window_first)
        passing = passing[order]
        pkeys = list(map(pkeys.__getitem__, order.tolist()))
        lists = {}
        columns: list[list] = []
        for _name, col, fn in self._select:
            if col is None:
                columns.append([self._safe(fn, (i, ctx, lists)) for i in passing.tolist()])
            elif col in self.key_cols and col not in ctx.values:
                j = self.key_cols.index(col)
                columns.append(pkeys if len(self.key_cols) == 1 else [k[j] for k in pkeys])
            else:
                vals, nulls = ctx.column(col)
                lst = vals[passing].tolist()
                if nulls is not False and nulls is not None:
                    nm = np.broadcast_to(np.asarray(nulls, dtype=bool), (n,))[passing]
                    for r in np.flatnonzero(nm).tolist():
                        lst[r] = None
                columns.append(lst)
        names = [name for name, _c, _f in self._select] + ["rule", "correction"]
        m = len(passing)
        columns += [[self.name] * m, [False] * m]
        return passing, _row_maker(tuple(names))(columns)

    def _row_for_retraction(self, kid: int, old: dict) -> dict:
        row = dict(old)
        row["correction"] = True
        row["retract"] = True
        return row

    # ------------------------------------------------------------------ snapshot
    def _fingerprint(self) -> tuple:
        return (self.spec.text, self.spec.sketches, self.lateness)

    def layout_fingerprint(self) -> str:
        """A digest of what this operator's snapshots depend on: :meth:`restore` refuses a
        snapshot taken under another (the SQL text, the sketch sizes, the lateness)."""
        return hashlib.sha256(repr(self._fingerprint()).encode()).hexdigest()[:32]

    def snapshot(self) -> bytes:
        """This operator's whole runtime state as bytes (restore with :meth:`restore`).

        Windows and sessions are kept as their partial aggregates (numpy arrays; HyperLogLog cells
        as the sparse address words or dense registers of ``HyperLogLog.to_bytes``) and sketch
        objects, which pickle through their own ``to_bytes``.
        """
        state = {
            "rule": self.name,
            "fingerprint": self._fingerprint(),
            "max_ts": self.max_ts,
            "max_event_ts": self.max_event_ts,
            "keys": (self._key_values, self._next_kid, self._key_hash),
            "seen": self._seen,
            "value_kinds": self.value_kinds,
            "engine": self.engine.state(),
            "counts": asdict(self.counts),
            "stats": asdict(self.stats),
            "join": None if self.join is None else self.join.state(),
        }
        return bytes([STATE_VERSION]) + pickle.dumps(state, protocol=5)

    def restore(self, data: bytes) -> None:
        """Replace this operator's state with a snapshot taken by :meth:`snapshot`."""
        state = load_state(data, STATE_VERSION, self.name)
        if state["fingerprint"] != self._fingerprint():
            raise StateVersionError(
                f"rule {self.name!r}: the snapshot was taken for a different analytics rule (its SQL, sketch "
                "sizes or lateness changed); windows in flight cannot carry over: start from an empty state"
            )
        self.max_ts = state["max_ts"]
        self.max_event_ts = state.get("max_event_ts", _NEG if self.max_ts is None else self.max_ts)
        self._key_values, self._next_kid, self._key_hash = state["keys"]
        self._key_ids = {v: k for k, v in self._key_values.items()}
        self._seen = state["seen"]
        self.value_kinds = state["value_kinds"]
        self.engine.load(state["engine"])
        self.counts = OperatorCounts(**state["counts"])
        self.stats = WindowStats(**state["stats"])
        joined = state.get("join")
        if joined is not None:
            if self.join is not None:
                self.join.load(joined)
            else:
                self._join_saved = joined


def _row_maker(names: tuple[str, ...]) -> Callable[[list[list]], list[dict]]:
    """A function turning columns into row dicts with these keys.

    Up to 12 keys a dict display (its keys read from ``names``) builds each row, at about half
    the cost of ``dict(zip(names, values))``; more keys take that. The displays are written out
    below: a display made for the names at run time would need source text evaluated, which no
    module does (tests/reliability/test_hostile_rules.py).
    """
    maker = _DISPLAYS.get(len(names))
    if maker is not None:
        return lambda cols: maker(names, cols)

    def rows(cols: list[list]) -> list[dict]:
        return list(map(dict, map(zip, itertools.repeat(names), zip(*cols))))

    return rows


def _rows1(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, = names
    return [{k0: a} for a, in zip(*cols)]


def _rows2(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, k1 = names
    return [{k0: a, k1: b} for a, b in zip(*cols)]


def _rows3(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, k1, k2 = names
    return [{k0: a, k1: b, k2: c} for a, b, c in zip(*cols)]


def _rows4(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, k1, k2, k3 = names
    return [{k0: a, k1: b, k2: c, k3: d} for a, b, c, d in zip(*cols)]


def _rows5(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, k1, k2, k3, k4 = names
    return [{k0: a, k1: b, k2: c, k3: d, k4: e} for a, b, c, d, e in zip(*cols)]


def _rows6(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, k1, k2, k3, k4, k5 = names
    return [{k0: a, k1: b, k2: c, k3: d, k4: e, k5: f} for a, b, c, d, e, f in zip(*cols)]


def _rows7(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, k1, k2, k3, k4, k5, k6 = names
    return [{k0: a, k1: b, k2: c, k3: d, k4: e, k5: f, k6: g} for a, b, c, d, e, f, g in zip(*cols)]


def _rows8(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, k1, k2, k3, k4, k5, k6, k7 = names
    return [{k0: a, k1: b, k2: c, k3: d, k4: e, k5: f, k6: g, k7: h} for a, b, c, d, e, f, g, h in zip(*cols)]


def _rows9(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, k1, k2, k3, k4, k5, k6, k7, k8 = names
    return [{k0: a, k1: b, k2: c, k3: d, k4: e, k5: f, k6: g, k7: h, k8: i} for a, b, c, d, e, f, g, h, i in zip(*cols)]


def _rows10(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, k1, k2, k3, k4, k5, k6, k7, k8, k9 = names
    return [{k0: a, k1: b, k2: c, k3: d, k4: e, k5: f, k6: g, k7: h, k8: i, k9: j} for a, b, c, d, e, f, g, h, i, j in zip(*cols)]


def _rows11(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, k10 = names
    return [{k0: a, k1: b, k2: c, k3: d, k4: e, k5: f, k6: g, k7: h, k8: i, k9: j, k10: k} for a, b, c, d, e, f, g, h, i, j, k in zip(*cols)]


def _rows12(names: tuple[str, ...], cols: list[list]) -> list[dict]:
    k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, k10, k11 = names
    return [{k0: a, k1: b, k2: c, k3: d, k4: e, k5: f, k6: g, k7: h, k8: i, k9: j, k10: k, k11: m} for a, b, c, d, e, f, g, h, i, j, k, m in zip(*cols)]


_DISPLAYS: dict[int, Callable[[tuple[str, ...], list[list]], list[dict]]] = {
    1: _rows1, 2: _rows2, 3: _rows3, 4: _rows4, 5: _rows5, 6: _rows6,
    7: _rows7, 8: _rows8, 9: _rows9, 10: _rows10, 11: _rows11, 12: _rows12,
}


def _walk_cols(e: A.Expr):
    from patterns.analytics import _walk

    for x in _walk(e):
        if isinstance(x, A.Column):
            yield x.name


def _py(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v
