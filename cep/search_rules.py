"""Search rules as an operator: percolate each document of a batch and emit one row per matching query.

A :class:`SearchOperator` runs one :class:`~patterns.search_rules.SearchSpec` with the indexed
query set of ``cep.percolator`` (presearcher, then verification of candidates only). It is
stateless apart from its counters and the watermark: a document's rows come out in the call that
brings the document, in arrival order (queries in rule order), without waiting for the
watermark, since no later event can change them.

With a ``time_field``, documents are judged as the other operators judge events: a missing or
unreadable time is a bad event (errors output), and a document behind the watermark as it stood
when the document arrived (largest time seen minus the allowed lateness) goes to the late output.

A query that raises while a document is verified counts as no match for that document, is counted
(``stats.eval_errors``, and per query in ``stats.query_errors``) and reported in the errors
output with the document; the rest of the batch goes on.
"""

from __future__ import annotations

import os
import pickle
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from cep.events import (
    DEFAULT_MAX_FUTURE_SKEW_MS,
    Clock,
    EventBatch,
    UnitHint,
    event_times,
    to_batch,
    unit_hint,
)
from cep.operator import OperatorCounts, OperatorOutput, StateVersionError, late_row
from cep.percolator import Percolator, PercolatorConfig
from cep.safe_pickle import UnsafeState
from cep.safe_pickle import loads as safe_loads
from patterns.search_rules import ROW_FIELDS, STREAM_FIELD, SearchSpec

__all__ = ["SearchOperator", "SearchStats"]

STATE_VERSION = 1
_NEG = np.iinfo(np.int64).min


@dataclass
class SearchStats:
    """What a search operator has done: documents percolated, candidates, matches, failures."""

    matches: int = 0  # rows emitted: one per (document, matching query)
    documents: int = 0  # documents percolated (events not late and not bad)
    candidates: int = 0  # queries the presearcher could not decide alone
    verified: int = 0  # candidates evaluated on the document itself
    eval_errors: int = 0  # (document, query) pairs whose evaluation raised; counted as no match
    query_errors: dict[Any, int] = field(default_factory=dict)  # query id -> evaluations that raised
    seconds_percolate: float = 0.0


class SearchOperator:
    """A search rule run over batches: every document against every query of the rule, via the index.

    Example:
        >>> from patterns.rules import parse_rules
        >>> rule = parse_rules('''
        ... rules:
        ...   - name: fruit
        ...     kind: search
        ...     from: news
        ...     highlight: true
        ...     queries:
        ...       - {id: apples, query: 'apple*', metadata: {desk: food}}
        ...       - {id: pies, query: '"apple pie"'}
        ... ''').rules[0]
        >>> op = SearchOperator.from_rule(rule)
        >>> for row in op.process([{"id": 1, "title": "Apple pie recipes"}, {"id": 2, "title": "pears"}]).matches:
        ...     print(row)
        {'id': 1, 'query_id': 'apples', 'metadata': {'desk': 'food'}, 'spans': [['title', 0, 5]], 'rule': 'fruit'}
        {'id': 1, 'query_id': 'pies', 'metadata': {}, 'spans': [['title', 0, 9]], 'rule': 'fruit'}
    """

    def __init__(self, spec: SearchSpec, name: str = "rule", lateness_ms: int = 0, time_unit: str = "ms",
                 max_future_skew_ms: int | None = DEFAULT_MAX_FUTURE_SKEW_MS):
        self.spec = spec
        self.name = name
        self.lateness = int(lateness_ms)
        self.time_col = spec.time_field
        self.time_unit = time_unit
        self.max_future_skew_ms = max_future_skew_ms
        self.clock: Clock | None = None  # the future guard's wall clock (None: the machine's)
        self.unit_checked = self.time_col is None  # the first batch's times were looked at for a wrong unit
        self.unit_hint: UnitHint | None = None
        config = PercolatorConfig(query=spec.query_config, id_field=spec.id_field, exclude_fields=(STREAM_FIELD,))
        self.percolator = Percolator(config)
        for q in spec.queries:
            if q.node is None:
                self.percolator.register(q.id, q.query, q.metadata)
            else:
                self.percolator.register_parsed(q.id, q.query, q.node, q.metadata)
        self._metadata = {q.id: q.metadata for q in spec.queries}
        self.max_ts: int | None = None
        self.seq = 0  # events read so far: names rows of batches that do not say where they came from
        self.counts = OperatorCounts()
        self.stats = SearchStats()
        self.row_ids = False  # set through Engine.set_row_ids: each row gets a deterministic "_id"
        # a join: documents wait in arrival order until the table can answer for them (cep.tables.queue)
        self.join: Any = None
        self._join_saved: dict[str, Any] | None = None

    def bind_table(self, table: Any) -> None:
        """Join the rule's documents with ``table`` (the engine's, named by the rule's ``join:``)."""
        from cep.tables.queue import ArrivalQueue

        assert self.spec.join is not None
        self.join = _Join(table, self.spec.join, ArrivalQueue())
        if self._join_saved is not None:
            self.join.load(self._join_saved)
            self._join_saved = None

    @property
    def released_to(self) -> int | None:
        """With a join: the earliest event time a lookup can still be made at (table compaction)."""
        if self.join is None or self.max_ts is None:
            return None
        first = self.join.waiting.min_ts()
        wm = self.max_ts - self.lateness
        return wm if first is None else min(wm, first)

    @classmethod
    def from_rule(cls, rule: Any) -> SearchOperator:
        """The operator of a search rule, with the rule's options."""
        return cls(rule.spec, name=rule.name, lateness_ms=rule.lateness_ms, time_unit=rule.time_unit,
                   max_future_skew_ms=rule.max_future_skew_ms)

    # ------------------------------------------------------------------ public API
    @property
    def watermark(self) -> int | None:
        """Largest event time seen minus the allowed lateness (None without a time field or events)."""
        return None if self.max_ts is None else self.max_ts - self.lateness

    def process(self, events: Any) -> OperatorOutput:
        """Take a batch of events (EventBatch, dicts, pandas or Arrow); return the rows it emits."""
        batch = to_batch(events)
        out = OperatorOutput()
        self._process(batch, out)
        return out

    def ingest(self, events: Any, late_before: int | np.ndarray) -> OperatorOutput:
        """Take a batch judged against the caller's watermark (a scalar, or one value per event).

        As :meth:`process`, but a document with a valid time before its ``late_before`` is late,
        instead of one behind the largest time seen before it; the smallest int64 means "no
        watermark yet" (never late). For hosts that know the watermark better than one operator
        (a Spark backfill replaying arrival order). With a join, the documents on time then wait for
        the table as in :meth:`process` (:meth:`release` lets out those its moved watermark allows).

        Example:
            >>> from patterns.rules import parse_rules
            >>> op = SearchOperator.from_rule(parse_rules('''
            ... rules:
            ...   - {name: r, kind: search, from: news, time_field: ts, query: apple}
            ... ''').rules[0])
            >>> out = op.ingest([{"id": 1, "ts": 5, "t": "apple"}, {"id": 2, "ts": 3, "t": "apple"}], [0, 4])
            >>> [m["id"] for m in out.matches], out.late[0]["reason"][:40]
            ([1], 'late: event time 1970-01-01T00:00:00.003')
        """
        batch = to_batch(events)
        out = OperatorOutput()
        self._process(batch, out, late_before)
        return out

    def release(self) -> OperatorOutput:
        """Percolate the waiting documents a joined table's moved watermark now allows."""
        out = OperatorOutput()
        if self.join is not None:
            self._release(out)
        return out

    def finish(self) -> OperatorOutput:
        """End of input: without a join nothing is buffered; with one, every waiting document goes."""
        out = OperatorOutput()
        if self.join is not None:
            self._release(out, final=True)
        return out

    def _release(self, out: OperatorOutput, final: bool = False) -> None:
        from cep.tables.queue import join_batch

        j = self.join
        bound = np.iinfo(np.int64).max if final else j.table.release_bound()
        if bound is None:
            return
        for w in j.waiting.pop_ready(int(bound)):
            batch, hit, _ = join_batch(j.table, j.spec.event_keys, j.spec.columns, w.batch, w.ts)
            n_hit = int(hit.sum())
            j.counts["joined"] += n_hit
            j.counts["unmatched"] += batch.n - n_hit
            rows = np.arange(batch.n)
            if j.spec.kind == "INNER" and n_hit < batch.n:
                j.counts["dropped"] += batch.n - n_hit
                self.counts.processed += batch.n - n_hit  # processed: the join had nothing for them
                rows = np.flatnonzero(hit)
            self._percolate(batch, rows.tolist(), w.tag[rows].tolist(), out)
        self.counts.buffered = len(j.waiting)

    # ------------------------------------------------------------------ ingest
    def _process(self, batch: EventBatch, out: OperatorOutput, late_before: Any = None) -> None:
        n = batch.n
        first_seq = self.seq
        self.seq += n
        self.counts.read += n
        if n == 0:
            return
        take = np.ones(n, dtype=bool)
        ms = None
        if self.time_col is not None:
            take, ms = self._judge_times(batch, self.time_col, out, late_before)
        rows = np.flatnonzero(take)
        if self.join is not None and ms is not None:
            if len(rows):
                self.join.waiting.push(batch.take(rows), ms[rows], first_seq + rows)
            self._release(out)
            return
        if len(rows):
            self._percolate(batch, rows.tolist(), (first_seq + rows).tolist(), out)

    def _percolate(self, batch: EventBatch, rows: list[int], seqs: list[int], out: OperatorOutput) -> None:
        """Percolate the documents ``rows`` of ``batch`` (``seqs``: the number of each among those read)."""
        if not rows:
            return
        docs = [batch.record(i) for i in rows]
        t0 = time.perf_counter()
        result = self.percolator.percolate_batch(docs, highlight=self.spec.highlight)
        self.stats.seconds_percolate += time.perf_counter() - t0
        self.counts.processed += len(rows)
        st = self.stats
        st.documents += len(rows)
        st.candidates += result.stats.candidates
        st.verified += result.stats.verified
        spec = self.spec
        name = self.name
        copy = spec.fields
        highlight = spec.highlight
        where = self._position(batch) if self.row_ids else None
        metadata = self._metadata
        emit = out.matches.append
        for i, seq, doc, res in zip(rows, seqs, docs, result.results):
            for qid, reason in res.errors.items():
                st.eval_errors += 1
                st.query_errors[qid] = st.query_errors.get(qid, 0) + 1
                out.errors.append({
                    "rule": name, "source": batch.source, "line": batch.line_of(i), "query_id": qid,
                    "reason": f"query {qid!r} could not be evaluated ({reason}); counted as no match",
                    "event": doc,
                })
            ids = res.ids  # (a batch's results build their id lists when read)
            if not ids:
                continue
            if spec.all_fields:
                base = {k: v for k, v in doc.items() if k not in ROW_FIELDS}
            else:
                base = {f: doc.get(f) for f in copy}
            for qid in ids:
                row = {**base, "query_id": qid, "metadata": dict(metadata[qid])}  # each row its own copy
                if highlight:
                    row["spans"] = [list(s) for s in res.spans.get(qid, ())]
                row["rule"] = name
                if where is not None:
                    row["_id"] = f"{name}:{where(i, seq)}:{qid}"
                emit(row)
            st.matches += len(ids)

    def _judge_times(self, batch: EventBatch, time_col: str, out: OperatorOutput,
                     late_before: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Which events to percolate (and their times, ms); the others go to the errors or the late output."""
        ms, ok, reasons = event_times(batch, time_col, self.time_unit, self.max_future_skew_ms, self.clock)
        if not self.unit_checked and batch.n:
            self.unit_checked = True
            self.unit_hint = unit_hint(batch, time_col, self.time_unit)
        take = ok.copy()
        for r in np.flatnonzero(~ok).tolist():
            self.counts.errors += 1
            out.errors.append({
                "rule": self.name, "source": batch.source, "line": batch.line_of(r),
                "reason": f"event-time field {time_col!r}: {reasons[r] or 'not a time'}",
                "event": batch.record(r),
            })
        good = np.flatnonzero(ok)
        if not len(good):
            return take, ms
        ts = ms[good].astype(np.int64)
        start = self.max_ts if self.max_ts is not None else _NEG
        run = np.maximum.accumulate(np.concatenate(([start], ts)))
        if late_before is None:
            prior = run[:-1]
            wm_before = np.where(prior == _NEG, _NEG, prior - self.lateness)
        else:
            wm_before = np.broadcast_to(np.asarray(late_before, dtype=np.int64), (batch.n,))[good]
        late = ts < wm_before
        for j in np.flatnonzero(late).tolist():
            i = int(good[j])
            self.counts.late += 1
            out.late.append(late_row(self.name, batch, i, int(ts[j]), int(wm_before[j]), self.lateness))
            take[i] = False
        self.max_ts = int(run[-1])
        return take, ms

    @staticmethod
    def _position(batch: EventBatch) -> Any:
        """How a row names its document: file name and line when the batch knows them (the
        same in every run over the same input, whatever the rule's history), else the number
        of the event among those the rule has read."""
        if batch.lines is not None and batch.source:
            base = os.path.basename(batch.source)
            return lambda i, _seq: f"{base}:{batch.line_of(i)}"
        return lambda i, seq: f"#{seq}"

    # ------------------------------------------------------------------ snapshot
    def snapshot(self) -> bytes:
        """The operator's state as bytes: the watermark's clock, the event count and the counters.

        The query index is not part of it: it is rebuilt from the rule, so a snapshot restores
        into the same rule with more, fewer or other queries.
        """
        state = {
            "kind": "search",
            "rule": self.name,
            "max_ts": self.max_ts,
            "seq": self.seq,
            "counts": asdict(self.counts),
            "stats": asdict(self.stats),
            "join": None if self.join is None else self.join.state(),
        }
        return bytes([STATE_VERSION]) + pickle.dumps(state, protocol=5)

    def restore(self, data: bytes) -> None:
        """Replace this operator's state with a snapshot taken by :meth:`snapshot`."""
        state: Any = None
        if data and data[0] == STATE_VERSION:
            try:
                state = safe_loads(data[1:], f"rule {self.name!r}: snapshot")
            except UnsafeState:
                raise
            except Exception:  # another operator's encoding: refused below
                state = None
        if not isinstance(state, dict) or state.get("kind") != "search":
            got = data[0] if data else None
            raise StateVersionError(
                f"rule {self.name!r}: not a search-rule snapshot of state version {STATE_VERSION} (found "
                f"version {got}); the rule changed kind or the state was written by another engine: start "
                "from an empty state"
            )
        self.max_ts = state["max_ts"]
        self.seq = state["seq"]
        self.counts = OperatorCounts(**state["counts"])
        self.stats = SearchStats(**state["stats"])
        joined = state.get("join")
        if joined is not None:
            if self.join is not None:
                self.join.load(joined)
            else:
                self._join_saved = joined


@dataclass
class _Join:
    """A search rule's join: the table, the checked ``join:`` and the documents waiting for the table."""

    table: Any
    spec: Any  # patterns.tables.JoinSpec
    waiting: Any  # cep.tables.queue.ArrivalQueue, tagged with each document's arrival number
    counts: dict[str, int] = field(default_factory=lambda: {"joined": 0, "unmatched": 0, "dropped": 0})

    def state(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "waiting": self.waiting.state()}

    def load(self, state: dict[str, Any]) -> None:
        self.counts = dict(state["counts"])
        self.waiting.load(state["waiting"])
