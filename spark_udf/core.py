"""The pure engine core Spark calls once per (rule, key bucket) group; no pyspark in here.

:class:`GroupCore` is shipped to the Python workers inside the stage's function. For a stream
(``applyInPandasWithState``) it restores the bucket's operator from its state blob, feeds it
the group's pandas chunks with Spark's watermark, advances it, and returns the output frame,
the new blob and the event-time timeout; for a backfill (``applyInPandas``) it replays the
group's rows in arrival order and finishes. Both return frames in the rule set's
:class:`~spark_udf.schema.Envelope` layout.

Watermarks. Spark's query watermark is defined on the event time with no delay, so it is
``M`` = the largest event time of every earlier micro-batch. Rule ``r`` with allowed lateness
``L`` runs at watermark ``W = M - L``: an event of this micro-batch earlier than ``W`` is late,
events at or before ``W`` are matched, and partial matches that ``WITHIN`` rules out by ``W``
end. A group whose next deadline is ``d`` (see
:meth:`~cep.operator.PatternOperator.next_deadline`) asks Spark for an
event-time timeout at ``d + L - 1``: Spark fires it once ``M > d + L - 1``, that is once
``W >= d``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import orjson
import pandas as pd

from cep.events import (
    DEFAULT_MAX_FUTURE_SKEW_MS,
    Clock,
    EventBatch,
    batch_from_pandas,
    event_times,
    parse_times,
)
from cep.operator import NO_WATERMARK, OperatorOutput, StateVersionError
from patterns.search_rules import STREAM_FIELD
from spark_udf.keyed import KEYED_KINDS, KeyedOperator
from spark_udf.schema import INTEGRAL, RESERVED_PREFIX, SPANS_TYPE, describe_value
from spark_udf.state import (
    STATE_ENCODING_VERSION,
    BucketHeader,
    RuleChangedError,
    StateEncodingError,
    decode_state,
    encode_state,
)

__all__ = [
    "rule_key", "RuleSpec", "GroupCore", "InputLayout", "TimeReading", "epoch_ms", "epoch_ms_in", "SOURCE_COL", "PRIOR_COL", "SEQ_COL", "CORRUPT_COL",
    "CORRUPT_BUCKET", "INPUT_COL", "STREAM_COL",
    # the backfill passes' internal API, shared with spark_udf.frames and spark_udf.backfill
    "segments", "segment_times", "segment_maxima", "arrival_plan", "annotate_arrival", "partition_id",
    "keys_present", "prior_times",
]

SOURCE_COL = "_cep_source"
CORRUPT_COL = "_cep_corrupt"
CORRUPT_BUCKET = -1
MALFORMED = "malformed record: it does not parse with the input's format and schema"
PRIOR_COL = "_cep_prior"
SEQ_COL = "_cep_seq"
INPUT_COL = "_cep_input"  # which named input a row came from (its index), for a backfill's arrival order
STREAM_COL = STREAM_FIELD  # the stream a row belongs to, as the embedded engine tags merged inputs


@dataclass(frozen=True)
class InputLayout:
    """Where the rows of one run come from: named input streams, and how a backfill orders them.

    ``streams`` are the names of the inputs (empty: one unnamed input). A rule whose ``FROM``
    names one of them reads that stream's rows only (the rows whose ``stream`` column holds the
    name); any other rule reads every row, as :meth:`cep.engine.Engine.process` does with merged
    inputs. ``segment_columns`` name each row's arrival segment in a backfill (empty: Spark
    partitions in order); with named inputs the first one is the input's index and each input
    is judged in its own arrival order (see :func:`arrival_plan`).

    Example:
        >>> from types import SimpleNamespace as R
        >>> layout = InputLayout(("searches", "clicks"))
        >>> layout.route(R(stream="clicks")), layout.route(R(stream="events"))
        ('clicks', None)
    """

    streams: tuple[str, ...] = ()
    segment_columns: tuple[str, ...] = ()

    @property
    def per_input(self) -> bool:
        """Named inputs: each input's arrival order is its own (the first segment column)."""
        return bool(self.streams)

    def route(self, rule: Any) -> str | None:
        """The stream a rule reads alone, or None when it reads every row."""
        name = getattr(rule, "stream", None)
        return name if name in self.streams else None


def rule_key(name: str) -> int:
    """A rule's group-key number: stable across runs and rule order (names are unique).

    Spark groups by ``(rule_key, bucket)``: integers sort and convert much faster than names.

    Example:
        >>> rule_key("v_shape")
        1948158088
    """
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


@dataclass
class RuleSpec:
    """What a worker needs to run one keyed rule."""

    rule: Any
    kind: str
    lateness_ms: int
    outputs: list[tuple[str, str, str]]  # (rule's column, envelope column, type)
    defaults: dict[str, Any] = field(default_factory=dict)  # values of columns a row leaves out
    table: Any = None  # a joined rule's spark_udf.tables.TableBinding (its replica of the table)

    @property
    def name(self) -> str:
        return self.rule.name

    @classmethod
    def of(cls, rule: Any, envelope: Any) -> "RuleSpec":
        """The spec of a keyed rule whose columns ``envelope`` (a :class:`~spark_udf.schema.Envelope`) maps."""
        from spark_udf.keyed import kind_of

        kind = KEYED_KINDS[kind_of(rule)]
        defaults = kind.output_defaults(rule) if hasattr(kind, "output_defaults") else {}
        return cls(rule, kind_of(rule), kind.lateness_ms(rule), envelope.columns_of(rule.name), dict(defaults))


@dataclass
class GroupCore:
    """Runs keyed rules group by group; everything here is picklable and Spark-free."""

    specs: dict[str, RuleSpec]
    envelope_columns: list[str]
    input_types: dict[str, str]
    buckets: int
    on_rule_change: str = "fail"
    state_version: int = STATE_ENCODING_VERSION
    clock: Clock | None = None  # the operators' wall clock for the future guard (None: the worker's)
    _ops: dict[str, tuple[KeyedOperator, BucketHeader]] = field(default_factory=dict, repr=False)

    @classmethod
    def for_rules(
        cls,
        rules: Iterable[Any],
        input_types: dict[str, str],
        buckets: int = 64,
        on_rule_change: str = "fail",
        state_version: int = STATE_ENCODING_VERSION,
        output_types: dict[str, str] | None = None,
    ) -> tuple["GroupCore", Any]:
        """The core for keyed rules over input columns of these (engine-view) types, and its envelope.

        ``output_types`` are the input's types as outputs show them (default: ``input_types``).
        """
        from spark_udf.keyed import kind_of
        from spark_udf.schema import Envelope

        rules = list(rules)
        shown = output_types or input_types
        fields = {r.name: (kind_of(r), KEYED_KINDS[kind_of(r)].output_fields(r, shown)) for r in rules}
        env = Envelope.build(fields)
        specs = {r.name: RuleSpec.of(r, env) for r in rules}
        return cls(specs, list(env.columns), dict(input_types), buckets, on_rule_change, state_version), env

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_ops"] = {}
        return state

    # ------------------------------------------------------------------ operators
    def rule_named(self, group: Any) -> str:
        """The rule a group key names: its :func:`rule_key` (or the name itself)."""
        if isinstance(group, str):
            return group
        keys = getattr(self, "_by_key", None)
        if keys is None:
            keys = self._by_key = {rule_key(n): n for n in self.specs}
        return keys.get(int(group), f"<rule {int(group)} no longer in the rule file>")

    def _operator(self, rule: str) -> tuple[RuleSpec, KeyedOperator, BucketHeader]:
        spec = self.specs.get(rule)
        if spec is None:
            raise KeyError(rule)
        got = self._ops.get(rule)
        if got is None:
            kind = KEYED_KINDS[spec.kind]
            op = kind.new_operator(spec.rule)
            if hasattr(op, "clock"):
                op.clock = self.clock  # type: ignore[attr-defined]
            fingerprint = kind.fingerprint(op)
            if spec.table is not None and hasattr(spec.table, "views"):  # a join of a view: the group keeps it
                from spark_udf.views import ViewJoinedOperator

                fingerprint = spec.table.fingerprint(fingerprint)
                op = ViewJoinedOperator(op, spec.table)
            elif spec.table is not None:  # a temporal join: the group keeps a replica of the table
                from spark_udf.tables import JoinedOperator, joined_fingerprint

                fingerprint = joined_fingerprint(fingerprint, spec.table.spec)
                op = JoinedOperator(op, spec.table)
            header = BucketHeader(rule, spec.kind, fingerprint, self.buckets, getattr(kind, "state_codec", None))
            got = self._ops[rule] = (op, header)
        return spec, got[0], got[1]

    def _load(self, spec: RuleSpec, op: KeyedOperator, header: BucketHeader, stored: Any, out: OperatorOutput) -> None:
        """Put the bucket's saved state into ``op`` (or empty it)."""
        if stored is None:
            op.reset()
            if hasattr(op, "startup"):  # a joined rule's or a view's snapshot-file errors
                out.extend(op.startup())  # type: ignore[attr-defined]
            return
        blob, version = stored
        try:
            op.restore(decode_state(blob, version, header, self.state_version))
        except RuleChangedError as e:
            if self.on_rule_change != "reset":
                raise
            op.reset()
            out.errors.append({
                "rule": spec.name, "source": None, "line": None, "event": None,
                "reason": f"state reset (on_rule_change='reset'): {e}",
            })
        except StateVersionError as e:
            raise StateEncodingError(
                f"rule {spec.name!r}: the checkpoint's engine snapshot cannot be read: {e}"
            ) from None

    # ------------------------------------------------------------------ streams
    def stream_group(
        self,
        key: tuple,
        chunks: Iterable[pd.DataFrame],
        stored: Any,
        spark_watermark_ms: int,
        timed_out: bool,
    ) -> tuple[pd.DataFrame | None, tuple[bytes, int] | None, int | None]:
        """One micro-batch of one group: ``(output frame or None, state to store, timeout or None)``.

        ``stored`` is the group's ``(state, version)`` tuple or None; ``spark_watermark_ms``
        the query's watermark ``M``. The timeout is in Spark's terms (compare it with ``M``).
        """
        rule, bucket = self.rule_named(key[0]), int(key[1])
        out = OperatorOutput()
        if bucket == CORRUPT_BUCKET:
            return self._malformed(chunks), None, None  # type: ignore[return-value]
        if rule not in self.specs:  # the rule left the rule file: its state goes with it
            return self._frame(None, out), None, None  # type: ignore[return-value]
        spec, op, header = self._operator(rule)
        if spec.table is not None:  # each change's late or error row is written by one group
            op.reporting = spec.table.reporter and (spec.table.keyed or bucket == 0)  # type: ignore[attr-defined]
            op.first_group = bucket == 0  # type: ignore[attr-defined]
        self._load(spec, op, header, stored, out)
        lateness = spec.lateness_ms
        wm = int(spark_watermark_ms) - lateness
        if not timed_out:
            held = spec.table if spec.table is not None else getattr(spec.rule, "binding", None)
            if held is not None and not held.static:
                from spark_udf.tables import changes_in_order

                # every replica applies them alike
                chunks = held.order(list(chunks)) if hasattr(held, "order") else changes_in_order(list(chunks), held.spec)
            for pdf in chunks:
                batch, src = self._batch(pdf)
                res = op.ingest(batch, wm)
                self._attach_sources(res, src)
                out.extend(res)
        out.extend(op.advance_to(wm))
        deadline = op.next_deadline()
        # Spark wants a positive timeout no earlier than its watermark (always true of
        # d + L - 1 but for event times within a millisecond of the epoch)
        timeout = None if deadline is None else max(deadline + lateness - 1, int(spark_watermark_ms), 1)
        state = encode_state(header, op.snapshot(), self.state_version)
        return self._frame(spec, out), state, timeout

    # ------------------------------------------------------------------ backfill
    def static_group(self, key: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        """A whole group of a static input: replay arrival order, then the final watermark."""
        rule = self.rule_named(key[0])
        if int(key[1]) == CORRUPT_BUCKET:
            frame = self._malformed([pdf])
            return frame if frame is not None else self._empty()
        if rule not in self.specs:
            return self._empty()
        if SEQ_COL in pdf.columns:
            pdf = pdf.sort_values(SEQ_COL, kind="stable")
        batch, src = self._batch(pdf)
        frame = self.replay(rule, int(key[1]), batch, src, prior_times(pdf, PRIOR_COL))
        return frame if frame is not None else self._empty()

    def replay(self, rule: str, bucket: int, batch: EventBatch, src: np.ndarray | None,
               prior: np.ndarray | None, shared: Any = None) -> pd.DataFrame | None:
        """One rule over a whole group's rows, in arrival order, then the final watermark: its frame.

        ``prior`` is each row's arrival watermark before the rule's lateness (:func:`prior_times`;
        None: no row can be late). ``shared`` (a :class:`cep.sharing.SharedBatch` of ``batch``)
        lets the rules of one key-set group parse the times, build the keys and order the rows
        once, as the embedded engine's rules over one batch do. The operator is reset before and
        after, so the next group starts empty. Shared by :meth:`static_group` and the key-set
        groups of :mod:`spark_udf.backfill`.
        """
        spec, op, _ = self._operator(rule)
        op.reset()
        # a joined rule's rows gain the table's columns at release: it works alone (as in cep run)
        if shared is not None and hasattr(op, "shared") and getattr(op, "join", None) is None:
            op.shared = shared  # type: ignore[attr-defined]
            try:
                return self._replay(spec, op, bucket, batch, src, prior)
            finally:
                op.shared = None  # type: ignore[attr-defined]
        return self._replay(spec, op, bucket, batch, src, prior)

    def _replay(self, spec: RuleSpec, op: KeyedOperator, bucket: int, batch: EventBatch, src: np.ndarray | None,
                prior: np.ndarray | None) -> pd.DataFrame | None:
        out = OperatorOutput()
        if spec.table is not None:  # each change's late or error row is written by one group
            op.reporting = spec.table.reporter and (spec.table.keyed or bucket == 0)  # type: ignore[attr-defined]
            op.first_group = bucket == 0  # type: ignore[attr-defined]
        if hasattr(op, "startup"):  # a joined rule's or a view's snapshot-file errors
            out.extend(op.startup())  # type: ignore[attr-defined]
        late_before: Any = NO_WATERMARK
        if prior is not None:
            late_before = np.where(prior == NO_WATERMARK, NO_WATERMARK, prior - spec.lateness_ms)
        res = op.ingest(batch, late_before)
        self._attach_sources(res, src)
        out.extend(res)
        out.extend(op.finish())
        op.reset()
        return self._frame(spec, out)

    def replay_in_batches(self, rules: list[str], bucket: int, batch: EventBatch, src: np.ndarray | None,
                          prior: np.ndarray | None, rows: int, release: bool = True,
                          events: Callable[[int], dict[str, Any] | None] | None = None) -> list[pd.DataFrame]:
        """Every rule of a key-set group over the group's rows in arrival order, ``rows`` at a time,
        then the final watermark: each rule's frame (those with rows).

        :meth:`replay` of each rule over the whole group gives the same rows; this feeds them as
        ``cep run`` does, a batch of ``rows`` rows to every rule before the next (one
        :class:`cep.sharing.SharedBatch` per batch), each rule then releasing what its own
        watermark releases, so what a rule buffers and matches at once stays about a batch's
        worth, not a group's (hundreds of thousands of rows in a large backfill). Pattern rules
        only (no joined table or view: key-set groups have none).

        ``release`` false: no release between batches. Without arrival order (``SparkRunConfig.
        arrival_order`` false) no row is late and the rules see the group's rows sorted by time at
        :meth:`finish`; a row may then be any amount behind an earlier one, and a release would apply
        the rows released before it first (different matches).

        ``events`` gives the whole event of row ``i`` of ``batch`` where the batch holds only the
        fields the rules read (None elsewhere): a late or error row of such a row reports it."""
        from cep.sharing import SharedBatch

        ops = []
        for name in rules:
            spec, op, _ = self._operator(name)
            op.reset()
            ops.append((spec, op, OperatorOutput()))
        try:
            for a in range(0, batch.n, max(1, rows)):
                part = batch.take(slice(a, a + rows))
                shared = SharedBatch(part)
                for spec, op, out in ops:
                    late_before: Any = NO_WATERMARK
                    if prior is not None:
                        p = prior[a:a + part.n]
                        late_before = np.where(p == NO_WATERMARK, NO_WATERMARK, p - spec.lateness_ms)
                    sharing = hasattr(op, "shared") and getattr(op, "join", None) is None
                    if sharing:
                        op.shared = shared  # type: ignore[attr-defined]
                    try:
                        res = op.ingest(part, late_before)
                    finally:
                        if sharing:
                            op.shared = None  # type: ignore[attr-defined]
                    _whole_events(res, events)
                    self._attach_sources(res, src)
                    out.extend(res)
                    wm = op.watermark if release and a + part.n < batch.n else None  # type: ignore[attr-defined]
                    if wm is not None:
                        # release what the rule's own watermark releases, as cep run does after a
                        # batch: the group's largest accepted time so far, less the lateness, is at
                        # most every later row's arrival watermark less the lateness, under which
                        # no later row that is not late can fall
                        res = op.advance_to(wm)  # type: ignore[attr-defined]
                        _whole_events(res, events)
                        self._attach_sources(res, src)
                        out.extend(res)
            frames = []
            for spec, op, out in ops:
                res = op.finish()
                _whole_events(res, events)
                out.extend(res)
                frame = self._frame(spec, out)
                if frame is not None:
                    frames.append(frame)
            return frames
        finally:
            for _, op, _ in ops:
                op.reset()

    def _empty(self) -> pd.DataFrame:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in self.envelope_columns})

    def _malformed(self, chunks: Iterable[pd.DataFrame]) -> pd.DataFrame | None:
        """Error rows for records the reader could not parse (they reach no operator)."""
        out = OperatorOutput()
        for pdf in chunks:
            texts = pdf[CORRUPT_COL].tolist() if CORRUPT_COL in pdf.columns else [None] * len(pdf)
            srcs = pdf[SOURCE_COL].tolist() if SOURCE_COL in pdf.columns else [None] * len(texts)
            for text, src in zip(texts, srcs):
                out.errors.append({"rule": None, "source": src, "line": None, "reason": MALFORMED, "event": text})
        return self._frame(None, out)

    # ------------------------------------------------------------------ conversion
    def _batch(self, pdf: pd.DataFrame):
        src = pdf[SOURCE_COL].to_numpy() if SOURCE_COL in pdf.columns else None
        # batch_from_pandas reads only .columns, [name] and len(): a view of our data columns
        # spares converting Spark's grouping columns and selecting a sub-frame
        batch = batch_from_pandas(_DataColumns(pdf))
        for c, col in batch.columns.items():
            if self.input_types.get(c) in INTEGRAL and col.dtype == object:
                # Arrow hands integer columns holding NULLs over as floats: give the engine ints
                col[:] = [v if v is None else int(v) for v in col.tolist()]
        batch.lines = np.arange(1, batch.n + 1, dtype=np.int64)  # row numbers: mapped back to sources
        return batch, src

    @staticmethod
    def _attach_sources(res: OperatorOutput, src: np.ndarray | None) -> None:
        for rec in res.late + res.errors:
            line = rec.get("line")
            rec["source"] = None if src is None or line is None else src[int(line) - 1]
            rec["line"] = None  # Spark sources do not say which line a row came from

    def _frame(self, spec: RuleSpec | None, out: OperatorOutput) -> pd.DataFrame | None:
        """The envelope rows of one call (None when there are none)."""
        problems: list[dict] = []
        # a rule's own rows: its complex events, then its timed-out partial matches (WITH TIMEOUT ROWS)
        rule_rows = out.matches + out.timeouts if spec is not None else []
        n_match = len(out.matches) if spec is not None else 0
        n_own = len(rule_rows)
        n = n_own + len(out.late) + len(out.errors)
        if n == 0:
            return None
        cols: dict[str, np.ndarray] = {}
        kind = spec.kind if spec is not None else None
        if n_own and spec is not None:
            for name, env, typ in spec.outputs:
                f = _converter(typ)
                default = spec.defaults.get(name)
                vals = np.empty(n, dtype=object)
                for i, row in enumerate(rule_rows):
                    v = row.get(name, default)
                    if v is not None:
                        try:
                            vals[i] = f(v)
                        except (TypeError, ValueError, OverflowError):
                            problems.append({
                                "rule": spec.name, "source": None, "line": None, "event": row,
                                "reason": f"output column {name!r}: {describe_value(v)} is not a {typ}; written as NULL",
                            })
                cols[env] = vals
        recs = out.late + out.errors + problems
        n = n_own + len(recs)
        names = self.envelope_columns
        index = {c: i for i, c in enumerate(names)}
        grid = np.empty((n, len(names)), dtype=object)  # one block: cheap to wrap in a DataFrame
        for c, vals in cols.items():
            grid[: len(vals), index[c]] = vals
        o, r, k = index["output"], index["rule"], index["kind"]
        grid[:n_match, o] = "match"
        grid[n_match:n_own, o] = "timeout"
        grid[:n_own, r] = spec.name if spec is not None else None
        grid[:, k] = kind
        n_late = n_own + len(out.late)
        s_, l_, re_, ev_ = index["source"], index["line"], index["reason"], index["event"]
        for j, rec in enumerate(recs, n_own):
            grid[j, o] = "late" if j < n_late else "error"
            grid[j, r] = rec.get("rule")
            grid[j, s_] = None if rec.get("source") is None else str(rec["source"])
            grid[j, l_] = rec.get("line")
            grid[j, re_] = rec.get("reason")
            ev = rec.get("event")
            grid[j, ev_] = None if ev is None else (ev if isinstance(ev, str) else _json(ev))
        frame = pd.DataFrame(grid, columns=names, dtype=object, copy=False)
        for c, typ in self._time_columns().items():
            if c in frame.columns:
                frame[c] = _to_time(frame[c], typ)
        return frame

    def _time_columns(self) -> dict[str, str]:
        got = getattr(self, "_times", None)
        if got is None:
            got = {}
            for spec in self.specs.values():
                for _, env, typ in spec.outputs:
                    if typ in ("timestamp", "timestamp_ntz", "date"):
                        got[env] = typ
            self._times = got
        return got


class _DataColumns:
    """A pandas frame seen without its reserved (``_cep_``) columns, for batch_from_pandas."""

    def __init__(self, pdf: pd.DataFrame):
        self._pdf = pdf
        self.columns = [c for c in pdf.columns if not str(c).startswith(RESERVED_PREFIX)]

    def __getitem__(self, name: str) -> pd.Series:
        return self._pdf[name]

    def __len__(self) -> int:
        return len(self._pdf)


# ------------------------------------------------------------------ values


def _json(v: Any) -> str:
    return orjson.dumps(v, default=_json_default, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def _json_default(v: Any):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return str(v)


def _to_long(v: Any) -> int:
    if isinstance(v, (bool, np.bool_)):
        raise TypeError("a boolean")
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer():
        return int(v)
    raise TypeError(type(v).__name__)


def _bounded(bits: int) -> Callable[[Any], int]:
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def conv(v: Any) -> int:
        x = _to_long(v)
        if not lo <= x <= hi:
            raise OverflowError(x)
        return x

    return conv


def _to_double(v: Any) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(type(v).__name__)
    return float(v)


def _to_bool(v: Any) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise TypeError(type(v).__name__)


def _to_string(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (dict, list, tuple)):
        return _json(v)
    if isinstance(v, np.generic):
        return str(v.item())
    return str(v)


def _to_ms(v: Any) -> int:
    return _to_long(v)


def _converter(typ: str) -> Callable[[Any], Any]:
    if typ in ("bigint", "long"):
        return _bounded(64)
    if typ in ("int", "integer"):
        return _bounded(32)
    if typ in ("smallint", "short"):
        return _bounded(16)
    if typ in ("tinyint", "byte"):
        return _bounded(8)
    if typ in ("double", "float", "real"):
        return _to_double
    if typ == "boolean":
        return _to_bool
    if typ == "string":
        return _to_string
    if typ in ("timestamp", "timestamp_ntz", "date"):
        return _to_ms
    if typ == SPANS_TYPE:
        return _spans
    if typ == "array<string>":  # a timeout row's _waiting_for
        return _strings
    if typ.startswith(_TOP_K[0]) and typ.endswith(_TOP_K[1]):
        return _top_k(_converter(typ[len(_TOP_K[0]) : -len(_TOP_K[1])]))
    return lambda v: v


def _strings(v: Any) -> list[str]:
    """A list of names as ``array<string>``; anything else is a per-row problem, not a failed batch."""
    if not isinstance(v, (list, tuple)):
        raise TypeError(f"expected a list of names, got {type(v).__name__}")
    return [str(x) for x in v]


_TOP_K = ("array<struct<value:", ",count:bigint>>")  # spark_udf.schema.top_k_type


def _top_k(value: Callable[[Any], Any]) -> Callable[[Any], list[dict]]:
    """APPROX_TOP_K's [[value, count], ...] as the (value, count) structs of its Spark type."""

    def conv(pairs: Any) -> list[dict]:
        if not isinstance(pairs, (list, tuple)):
            raise TypeError(type(pairs).__name__)
        return [{"value": None if v is None else value(v), "count": _to_long(c)} for v, c in pairs]

    return conv


def _spans(spans: Any) -> list[dict]:
    """A search row's [[field, start, end], ...] as the structs of :data:`~spark_udf.schema.SPANS_TYPE`."""
    if not isinstance(spans, (list, tuple)):
        raise TypeError(type(spans).__name__)
    return [{"field": None if f is None else str(f), "start": _to_long(a), "end": _to_long(b)} for f, a, b in spans]


def _to_time(s: pd.Series, typ: str) -> pd.Series:
    """Epoch milliseconds (how the engine sees time columns) back to Spark's time types."""
    ms = pd.to_numeric(s, errors="coerce")
    if typ == "date":
        return pd.Series(
            [None if pd.isna(x) else dt.date(1970, 1, 1) + dt.timedelta(milliseconds=int(x)) for x in ms],
            dtype=object,
        )
    out = pd.to_datetime(ms, unit="ms", utc=True)
    return out if typ == "timestamp" else out.dt.tz_localize(None)


def epoch_ms(values: pd.Series, unit: str = "ms") -> pd.Series:
    """Event times as epoch milliseconds (nullable), read exactly as the embedded engine reads them.

    Example:
        >>> epoch_ms(pd.Series(["1970-01-01T00:00:01Z", "5", None, "x"])).tolist()
        [1000, 5, <NA>, <NA>]
        >>> epoch_ms(pd.Series(["1970-01-01T00:00:01Z", "5"]), "s").tolist()
        [1000, 5000]
    """
    ms, ok, _ = parse_times(_time_values(values), unit)
    return pd.Series(pd.arrays.IntegerArray(ms, ~ok))


def epoch_ms_in(unit: str) -> Callable[[pd.Series], pd.Series]:
    """:func:`epoch_ms` for one time unit, as a function of the column alone (a pandas UDF's shape).

    Example:
        >>> epoch_ms_in("s")(pd.Series(["2", "1970-01-01T00:00:01Z"])).tolist()
        [2000, 1000]
    """
    def to_ms(values: pd.Series) -> pd.Series:
        return epoch_ms(values, unit)

    return to_ms


@dataclass(frozen=True)
class TimeReading:
    """How a stage reads its event-time column: the rules' unit and future guard, and the clock.

    The arrival watermarks of a backfill read times through it, so a row the operators refuse
    (in the future, out of range) never becomes a watermark (:func:`cep.events.event_times`).

    Example:
        >>> from cep.events import FixedClock
        >>> pdf = pd.DataFrame({"ts": [807256800, 7258032000]})
        >>> ms, ok, _ = TimeReading("s", 86_400_000, FixedClock(807256800000)).read(pdf, "ts")
        >>> ms.tolist(), ok.tolist()
        ([807256800000, 7258032000000], [True, False])
    """

    unit: str = "ms"
    max_future_skew_ms: int | None = DEFAULT_MAX_FUTURE_SKEW_MS
    clock: Clock | None = None

    def read(self, pdf: pd.DataFrame, time_col: str) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
        """``(ms, ok, reasons)`` of the column's rows, as :func:`cep.events.event_times` reads them."""
        col = pdf[time_col]
        codes, texts = _distinct_texts(col)
        if codes is None:
            batch = EventBatch({time_col: _time_values(col)}, len(pdf))
            return event_times(batch, time_col, self.unit, self.max_future_skew_ms, self.clock)
        return self.read_texts(codes, texts, time_col)

    def read_texts(self, codes: np.ndarray, texts: np.ndarray, time_col: str
                   ) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
        """:meth:`read` of a text column given as codes into its distinct texts (None for a missing one)."""
        # Text times repeat (a daily feed has one date per day for hundreds of keys): each
        # distinct text is parsed once. The reading is a function of the text alone, with one
        # clock reading for the batch, so the rows get what parsing each of them would give.
        ms, ok, why = event_times(EventBatch({time_col: texts}, len(texts)), time_col, self.unit,
                                  self.max_future_skew_ms, self.clock)
        refused = np.flatnonzero(np.fromiter((w is not None for w in why), dtype=bool, count=len(why)))
        # a reason per row only when some row has one (the missing text's reason is there whether or not used)
        if len(refused) and np.isin(codes, refused).any():
            reasons = [why[c] for c in codes.tolist()]
        else:
            reasons = [None] * len(codes)
        return ms[codes], ok[codes], reasons


def _distinct_texts(col: pd.Series) -> tuple[np.ndarray | None, np.ndarray]:
    """A column of texts (missing values allowed) as codes into its distinct values, the last of
    which is None (the missing rows' code); ``(None, ...)`` when some value is not a text.

    Only texts: factorizing mixed values would take ``1``, ``1.0`` and ``True`` for one value,
    which the time reading tells apart.

    Example:
        >>> codes, texts = _distinct_texts(pd.Series(["2013-02-08", None, "2013-02-08", "2013-02-11"]))
        >>> codes.tolist(), texts.tolist()
        ([0, 2, 0, 1], ['2013-02-08', '2013-02-11', None])
        >>> _distinct_texts(pd.Series(["1", 1], dtype=object))[0] is None
        True
    """
    if pd.api.types.infer_dtype(col, skipna=True) != "string":
        return None, np.empty(0, dtype=object)
    codes, uniques = pd.factorize(col, use_na_sentinel=True)
    texts = np.empty(len(uniques) + 1, dtype=object)
    texts[:-1] = np.asarray(uniques, dtype=object)
    texts[-1] = None
    codes = np.where(codes < 0, len(uniques), codes)
    return codes, texts


def _time_values(s: pd.Series) -> np.ndarray:
    """A time column as parse_times wants it: int64/float64 when numeric, else objects with None."""
    arr = s.to_numpy()
    if arr.dtype.kind in "iuf":
        return arr
    obj = s.astype(object).to_numpy(copy=True)
    obj[s.isna().to_numpy()] = None
    return obj


_MIN = np.iinfo(np.int64).min


def prior_times(pdf: pd.DataFrame, col: str) -> np.ndarray | None:
    """A group's arrival watermarks (``_cep_prior`` columns) as int64, the int64 minimum where a row
    had no earlier row; None when the column is absent (no row can be late)."""
    if col not in pdf.columns:
        return None
    p = pdf[col].to_numpy(dtype="float64", na_value=np.nan)
    return np.where(np.isnan(p), _MIN, np.nan_to_num(p)).astype(np.int64)


def segments(pdf: pd.DataFrame, seg_cols: tuple[str, ...], pid: int) -> list[tuple[str, int, int]]:
    """Contiguous runs of rows from one input segment: ``(segment key, start, end)``.

    A segment is a file block (when ``seg_cols`` name the file path and block start) or the
    whole Spark partition, each in input order; its key is its ``seg_cols`` values then the
    partition ``pid``, so the part of a segment each task reads ranks after the parts that
    earlier partitions read (a file split over several tasks when ``seg_cols`` name only the file).
    """
    n = len(pdf)
    if not n:
        return []
    if not seg_cols:
        return [(json.dumps([pid]), 0, n)]
    # Compared column against column, not row by row: a batch of the arrival passes holds
    # thousands of rows of one segment (a file block), and a Python loop over them was the
    # largest part of the first pass's Python time. Only each run's first row becomes a key.
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in seg_cols:
        change[1:] |= _differs_from_previous(pdf[c])
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    firsts = [pdf[c].take(starts).tolist() for c in seg_cols]
    # the partition last: a segment that several tasks read (arrival columns that do not tell a
    # file's blocks apart) arrives part by part in partition order, each part after the earlier
    # ones, so each part's rows are judged against the earlier parts' times too
    return [(json.dumps([*vals, pid], default=str), int(a), int(b)) for vals, a, b in zip(zip(*firsts), starts, ends)]


def _differs_from_previous(s: pd.Series) -> np.ndarray:
    """For rows 1..n-1: whether the value differs from the row before (two missing values do not)."""
    cur = s.iloc[1:].reset_index(drop=True)
    prev = s.iloc[:-1].reset_index(drop=True)
    cur_na, prev_na = cur.isna().to_numpy(), prev.isna().to_numpy()
    both = ~cur_na & ~prev_na
    differs = cur_na != prev_na
    if both.any():
        ne = (cur[both] != prev[both]).to_numpy(dtype=bool)
        differs[np.flatnonzero(both)] = ne
    return differs


def segment_times(
    batches: Iterator[pd.DataFrame], time_col: str, key_sets: list[tuple[str, ...]], seg_cols: tuple[str, ...],
    reading: TimeReading = TimeReading(),
) -> Iterator[tuple[str, int, np.ndarray]]:
    """A backfill's first pass, row by row: ``(segment key, key set, valid event times)`` for every
    run of rows of one input segment and every key set, times in input order (possibly none).

    The general path's first pass (:func:`segment_maxima`) folds these; a segment's runs come in
    input order, segment by segment. Inside a Spark task.
    """
    from pyspark import TaskContext  # only inside a Spark task

    pid = partition_id(TaskContext)
    for pdf in batches:
        if not len(pdf):
            continue
        ms, ok, _ = reading.read(pdf, time_col)
        valid = [ok & keys_present(pdf, keys) for keys in key_sets]
        for seg, a, b in segments(pdf, seg_cols, pid):
            for i, v in enumerate(valid):
                yield seg, i, ms[a:b][v[a:b]]


def segment_maxima(
    batches: Iterator[pd.DataFrame], time_col: str, key_sets: list[tuple[str, ...]], seg_cols: tuple[str, ...],
    reading: TimeReading = TimeReading(),
) -> Iterator[pd.DataFrame]:
    """Per input segment and key set, the largest valid event time (a backfill's first pass)."""
    best: dict[str, list[int]] = {}
    for seg, i, sel in segment_times(batches, time_col, key_sets, seg_cols, reading):
        cur = best.setdefault(seg, [_MIN] * len(key_sets))
        if len(sel):
            cur[i] = max(cur[i], int(sel.max()))
    rows = [(seg, i, None if mx == _MIN else mx) for seg, mxs in best.items() for i, mx in enumerate(mxs)]
    yield pd.DataFrame({"seg": [r[0] for r in rows], "ks": [r[1] for r in rows], "mx": [r[2] for r in rows]},
                       dtype=object)


def arrival_plan(rows: Iterable[Any], nsets: int, per_input: bool = False) -> dict[str, tuple[int, list[int]]]:
    """From the first pass's rows: per segment, its rank in arrival order and the largest
    valid event time of every earlier segment (per key set; the int64 minimum for none).

    ``per_input``: the first value of a segment's key names its input, and only earlier
    segments of the same input count. ``cep run`` merges several inputs in event time, each in
    its own order; in that merge a row is behind an earlier row of another input only if it is
    behind an earlier row of its own input by at least as much (the merge never takes a row of
    another input ahead of a smaller time of this one), so each input's own order decides
    which rows are late.

    Example:
        >>> plan = arrival_plan([('["b"]', 0, 7), ('["a"]', 0, 9), ('["c"]', 0, None)], 1)
        >>> plan['["a"]'][0], plan['["b"]'], plan['["c"]']
        (0, (1, [9]), (2, [9]))
        >>> plan = arrival_plan([('[0, "x"]', 0, 9), ('[1, "x"]', 0, 7), ('[1, "y"]', 0, 8)], 1, per_input=True)
        >>> plan['[1, "x"]'], plan['[1, "y"]']
        ((1, [-9223372036854775808]), (2, [7]))
    """
    per: dict[str, list[int]] = {}
    for seg, ks, mx in rows:
        per.setdefault(seg, [_MIN] * nsets)[ks] = _MIN if mx is None else int(mx)
    plan: dict[str, tuple[int, list[int]]] = {}
    run = [_MIN] * nsets
    current: Any = None
    for rank, seg in enumerate(sorted(per, key=_segment_order)):
        if per_input:
            first = json.loads(seg)[0]
            if first != current:
                run, current = [_MIN] * nsets, first
        plan[seg] = (rank, list(run))
        run = [max(r, mx) for r, mx in zip(run, per[seg])]
    return plan


def _segment_order(seg: str) -> list[tuple[bool, Any]]:
    """A segment key's place in arrival order: its values in order, NULL before any value (as Spark
    sorts), so that a NULL in a user's arrival column ranks instead of failing the comparison."""
    return [(v is not None, v) for v in json.loads(seg)]


def annotate_arrival(
    batches: Iterator[pd.DataFrame],
    time_col: str,
    key_sets: list[tuple[str, ...]],
    seg_cols: tuple[str, ...],
    plan: dict[str, tuple[int, list[int]]],
    reading: TimeReading = TimeReading(),
) -> Iterator[pd.DataFrame]:
    """Add arrival order (``_cep_seq``) and, per key set, the largest valid event time of every
    earlier row (``_cep_prior_<i>``): the watermark the embedded engine had when the row came."""
    from pyspark import TaskContext

    pid = partition_id(TaskContext)
    runs: dict[str, list[int]] = {}
    offsets: dict[str, int] = {}
    for pdf in batches:
        n = len(pdf)
        pdf = pdf.copy()
        seq = np.zeros(n, dtype=np.int64)
        priors = [np.full(n, _MIN, dtype=np.int64) for _ in key_sets]
        if n:
            ms, ok, _ = reading.read(pdf, time_col)
            valid = [ok & keys_present(pdf, keys) for keys in key_sets]
            for seg, a, b in segments(pdf, seg_cols, pid):
                rank, before = plan.get(seg, (0, [_MIN] * len(key_sets)))
                run = runs.setdefault(seg, list(before))
                off = offsets.get(seg, 0)
                seq[a:b] = (np.int64(rank) << np.int64(33)) + np.arange(off, off + b - a, dtype=np.int64)
                offsets[seg] = off + b - a
                for i, v in enumerate(valid):
                    vals = np.where(v[a:b], ms[a:b], _MIN)
                    cm = np.maximum.accumulate(vals)
                    prior = np.empty(b - a, dtype=np.int64)
                    prior[0] = _MIN
                    prior[1:] = cm[:-1]
                    priors[i][a:b] = np.maximum(prior, run[i])
                    run[i] = max(run[i], int(cm[-1]))
        pdf[SEQ_COL] = seq
        for i, prior in enumerate(priors):
            pdf[f"{PRIOR_COL}_{i}"] = pd.arrays.IntegerArray(prior, prior == _MIN)
        yield pdf


def partition_id(task_context: Any) -> int:
    """The Spark partition a task reads (0 outside a task)."""
    ctx = task_context.get()
    return 0 if ctx is None else int(ctx.partitionId())


def keys_present(pdf: pd.DataFrame, keys: tuple[str, ...]) -> np.ndarray:
    """Which rows have a value in every key column (rows without one reach no rule of the key set)."""
    ok = np.ones(len(pdf), dtype=bool)
    for k in keys:
        ok &= (~pdf[k].isna()).to_numpy() if k in pdf.columns else False
    return ok


def _whole_events(res: OperatorOutput, events: Callable[[int], dict[str, Any] | None] | None) -> None:
    """Each late and error row of ``res`` with the whole event of its row (``line``: the row's number
    in the replayed batch) where ``events`` has one (the batch held only the fields the rules read)."""
    if events is None:
        return
    for rec in res.late + res.errors:
        line = rec.get("line")
        if line is not None:
            whole = events(int(line) - 1)
            if whole is not None:
                rec["event"] = whole
