"""Search rules on Spark: the percolator over the input's batches, one query index per Python worker.

A document's rows depend on the document and the query set only, so search rules keep no state.
Where they run:

* **a stream** with an event time (some keyed rule, or a search rule with a ``time_field``):
  in the query's stateful stage (``applyInPandasWithState``), in groups of their own (one
  group per hash bucket of the row, every search rule in it, no state, no timeout), so that
  they judge lateness against the query's watermark exactly as keyed rules do: with ``M``
  the largest event time of every earlier micro-batch, a document earlier than ``M - L`` is
  late (:meth:`SearchCore.stream_group`). One stage also means one scan of the source for a
  rule file of keyed and search rules;
* **a backfill** (and a stream without any event time): one ``mapInArrow`` over the input
  (:meth:`SearchCore.__call__`). A backfill gives each row the largest valid event time of
  every earlier row of the input (as the keyed rules' backfill does), which is the watermark
  the embedded operator had when the row came, and
  :meth:`~cep.search_rules.SearchOperator.ingest` judges by it.

The query sets travel once: the driver pickles every search rule's
:class:`~patterns.search_rules.SearchSpec` (queries already parsed and analysed) into one
broadcast; each Python worker builds the :class:`~cep.search_rules.SearchOperator` (its
percolator index) the first time a task or group needs it and keeps it, keyed by the
broadcast's content hash, for every later task, group and micro-batch it runs.

A rule with a ``queries_file`` watches it: before each task (one Spark partition of one
micro-batch) or group call the worker compares the file's modification time, size and inode
with what it last saw; when they changed and the content hash differs, it reloads the file's
queries (:func:`~patterns.search_rules.reload_queries`: the rule file's own queries stay). What
runs depends on the file's content alone, so every worker runs the same queries: a query of the
file that does not load is left out, and one error row (per worker and content) says why; a
file that cannot be read leaves the rule file's own queries.

With named input streams, a rule whose ``from`` names one of them percolates that stream's
rows only (the ``stream`` column).
"""

from __future__ import annotations

import hashlib
import os
import pickle
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Iterable, Iterator

import numpy as np
import pandas as pd

from cep.events import DEFAULT_MAX_FUTURE_SKEW_MS, Clock
from cep.operator import NO_WATERMARK, OperatorOutput
from cep.safe_pickle import loads as safe_loads
from spark_udf.core import CORRUPT_COL, STREAM_COL, GroupCore, RuleSpec

__all__ = ["SearchCore", "FileStamp", "file_stamp", "pack_query_sets", "build_search", "stage_core"]

_WORKER_CACHE: dict[str, dict[str, _Live]] = {}
"""Per Python worker: content hash of the shipped query sets -> rule name -> its live operator."""
_CACHE_SIZE = 4  # query-set versions a worker keeps (one per running query, usually)


@dataclass(frozen=True)
class FileStamp:
    """What a worker compares to notice a changed queries file: cheap to read, then the content hash."""

    mtime_ns: int
    size: int
    inode: int
    sha: str


def file_stamp(path: str) -> FileStamp | None:
    """The file's stamp (None when it cannot be read).

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
        ...     _ = f.write('{"id": 1, "query": "x"}'); f.flush()
        ...     file_stamp(f.name).size
        23
    """
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None
    return FileStamp(st.st_mtime_ns, st.st_size, st.st_ino, sha)


def pack_query_sets(rules: list[Any]) -> tuple[bytes, str]:
    """Every search rule's spec, lateness and event-time reading as one pickled blob, and its content hash."""
    blob = pickle.dumps({r.name: (r.spec, int(r.lateness_ms), r.time_unit, r.max_future_skew_ms) for r in rules},
                        protocol=5)
    return blob, hashlib.sha256(blob).hexdigest()[:32]


class _Live:
    """One search rule's operator in a worker, and the queries file it was built from."""

    def __init__(self, name: str, spec: Any, lateness_ms: int, stamp: FileStamp | None, time_unit: str = "ms",
                 max_future_skew_ms: int | None = DEFAULT_MAX_FUTURE_SKEW_MS):
        self.name, self.spec, self.lateness = name, spec, lateness_ms
        self.time_unit, self.max_future_skew_ms = time_unit, max_future_skew_ms
        self.op = self._operator(spec)
        self.stamp = stamp
        self.seen = None if stamp is None else (stamp.mtime_ns, stamp.size, stamp.inode)
        self.reported: set[str] = set()

    def _operator(self, spec: Any) -> Any:
        from cep.search_rules import SearchOperator

        return SearchOperator(spec, name=self.name, lateness_ms=self.lateness, time_unit=self.time_unit,
                              max_future_skew_ms=self.max_future_skew_ms)

    def refresh(self, out: OperatorOutput) -> None:
        """Rebuild from the queries file if its content changed since it was last read.

        What runs then depends on the file's content alone, the same in every worker: the
        rule file's own queries and every query of the file that loads. Queries that do not
        load, or a file that cannot be read, are reported once per worker and content.
        """
        path = self.spec.queries_file
        if path is None:
            return
        try:
            st = os.stat(path)
            quick: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            quick = None
        if quick == self.seen:
            return
        self.seen = quick
        stamp = file_stamp(path) if quick is not None else None
        old, self.stamp = self.stamp, stamp
        if stamp is not None and old is not None and stamp.sha == old.sha:
            return  # touched, not changed
        from patterns.errors import RuleErrors
        from patterns.search_rules import reload_queries

        text, problem = "", None
        try:
            if stamp is None:
                raise FileNotFoundError(path)
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            problem = f"cannot be read ({type(e).__name__})"
        spec, errors = reload_queries(self.spec, text)
        self.op = self._operator(spec)
        n_file = sum(1 for q in spec.queries if q.from_file)
        if problem is None and not n_file and not errors:
            problem = "holds no queries"
        if problem is not None:
            self._report(out, f"{problem} {stamp.sha if stamp else ''}",
                         f"queries file {path} {problem}; running the rule file's {len(spec.queries)} queries only")
        elif errors:
            assert stamp is not None
            self._report(out, stamp.sha, (
                f"queries file {path} changed; {len(errors)} problem{'' if len(errors) == 1 else 's'}: "
                "what does not load is left out, "
                f"running {len(spec.queries)} queries: {RuleErrors(errors)}"
            ))

    def _report(self, out: OperatorOutput, what: str, reason: str) -> None:
        if what in self.reported:
            return
        self.reported.add(what)
        out.errors.append({"rule": self.name, "source": self.spec.queries_file, "line": None,
                           "reason": reason, "event": None})


@dataclass
class SearchCore:
    """The worker side of a rule set's search rules; picklable and Spark-free.

    Called as the ``mapInArrow`` function (a backfill) or through :meth:`stream_group` (one
    group of a stream's stateful stage). ``query_sets`` is a Spark broadcast (or, in tests,
    anything with ``.value``) of :func:`pack_query_sets`' blob; ``prior_columns`` names, per
    rule, the input column holding each row's largest earlier event time (a backfill), or None
    (never late in a ``mapInArrow``); ``routes`` names the input stream a rule reads alone;
    ``malformed`` reports the records the reader could not parse (when no other stage does).
    """

    names: list[str]
    query_sets: Any
    content_hash: str
    frames: GroupCore
    arrow_schema: Any
    prior_columns: dict[str, str | None] = field(default_factory=dict)
    stamps: dict[str, FileStamp | None] = field(default_factory=dict)
    routes: dict[str, str] = field(default_factory=dict)
    malformed: bool = False

    @classmethod
    def build(cls, rules: list[Any], envelope: Any, input_types: dict[str, str], query_sets: Any,
              content_hash: str, arrow_schema: Any, prior_columns: dict[str, str | None],
              routes: dict[str, str] | None = None, malformed: bool = False,
              clock: Clock | None = None) -> SearchCore:
        """The core for these search rules, whose rows ``envelope`` lays out; ``clock``: the
        future guard's wall clock (None: each worker's)."""
        specs = {
            r.name: RuleSpec(SimpleNamespace(name=r.name), "search", int(r.lateness_ms), envelope.columns_of(r.name))
            for r in rules
        }
        frames = GroupCore(specs, list(envelope.columns), dict(input_types), 1, clock=clock)
        stamps = {r.name: file_stamp(r.spec.queries_file) if r.spec.queries_file else None for r in rules}
        return cls([r.name for r in rules], query_sets, content_hash, frames, arrow_schema, prior_columns, stamps,
                   dict(routes or {}), malformed)

    def operators(self) -> dict[str, _Live]:
        """This worker's operators for the shipped query sets, built on first use."""
        lives = _WORKER_CACHE.get(self.content_hash)
        if lives is None:
            sets = safe_loads(self.query_sets.value, "the shipped query sets")
            lives = {n: _Live(n, spec, lateness, self.stamps.get(n), unit, skew)
                     for n, (spec, lateness, unit, skew) in sets.items()}
            while len(_WORKER_CACHE) >= _CACHE_SIZE:
                _WORKER_CACHE.pop(next(iter(_WORKER_CACHE)))
            _WORKER_CACHE[self.content_hash] = lives
        return lives

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        """Rows of every search rule for each Arrow batch of one partition (the ``mapInArrow`` function)."""
        import pyarrow as pa

        lives = self.operators()
        frames = self._refresh(lives)
        for rb in batches:
            if rb.num_rows:
                frames.extend(self._rows(lives, rb.to_pandas(), None))
            for frame in frames:
                yield pa.RecordBatch.from_pandas(frame, schema=self.arrow_schema, preserve_index=False)
            frames = []
        for frame in frames:  # a partition without batches still reports a queries file that does not load
            yield pa.RecordBatch.from_pandas(frame, schema=self.arrow_schema, preserve_index=False)

    def stream_group(self, chunks: Iterable[pd.DataFrame], spark_watermark_ms: int) -> pd.DataFrame | None:
        """Rows of every search rule for one group of a stream's micro-batch (None when there are none).

        A document with a valid time earlier than ``M - L`` is late, where ``M`` is
        ``spark_watermark_ms`` (the query's watermark: the largest event time of every
        earlier micro-batch) and ``L`` the rule's allowed lateness, as for keyed rules.
        """
        lives = self.operators()
        frames = self._refresh(lives)
        for pdf in chunks:
            if len(pdf):
                frames.extend(self._rows(lives, pdf, int(spark_watermark_ms)))
        if not frames:
            return None
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)

    def _refresh(self, lives: dict[str, _Live]) -> list[pd.DataFrame]:
        """Reload changed queries files; error rows for those that do not load."""
        notes = OperatorOutput()
        for name in self.names:
            lives[name].refresh(notes)
        out = []
        for name in self.names:
            mine = OperatorOutput(errors=[e for e in notes.errors if e["rule"] == name])
            frame = self.frames._frame(self.frames.specs[name], mine)
            if frame is not None:
                out.append(frame)
        return out

    def _rows(self, lives: dict[str, _Live], pdf: pd.DataFrame, watermark: int | None) -> list[pd.DataFrame]:
        """Envelope frames of every rule for one chunk; ``watermark``: Spark's ``M`` (a stream) or None."""
        out = []
        if CORRUPT_COL in pdf.columns:
            bad = pdf[CORRUPT_COL].notna().to_numpy()
            if bad.any():
                if self.malformed:
                    frame = self.frames._malformed([pdf[bad]])
                    if frame is not None:
                        out.append(frame)
                pdf = pdf[~bad]
                if not len(pdf):
                    return out
        batch, src = self.frames._batch(pdf)
        tags = batch.columns.get(STREAM_COL) if self.routes else None
        subsets: dict[str, np.ndarray] = {}
        for name in self.names:
            spec = self.frames.specs[name]
            late_before: Any = NO_WATERMARK
            prior = self.prior_columns.get(name)
            if watermark is not None:
                late_before = watermark - spec.lateness_ms
            elif prior is not None:
                p = pdf[prior].to_numpy(dtype="float64", na_value=np.nan)
                late_before = np.where(np.isnan(p), NO_WATERMARK, np.nan_to_num(p) - spec.lateness_ms)
                late_before = late_before.astype(np.int64)
            part = batch
            route = self.routes.get(name)
            if route is not None and tags is not None:
                if route not in subsets:
                    subsets[route] = np.flatnonzero(tags == route)
                idx = subsets[route]
                if not len(idx):
                    continue
                part = batch.take(idx)  # keeps the row numbers the sources are found by
                if isinstance(late_before, np.ndarray):
                    late_before = late_before[idx]
            op = lives[name].op
            op.clock = self.frames.clock  # a worker's operators outlive one job: this job's clock
            res = op.ingest(part, late_before)
            self.frames._attach_sources(res, src)
            frame = self.frames._frame(spec, res)
            if frame is not None:
                out.append(frame)
        return out


def build_search(frame: Any, rules: list[Any], envelope: Any, config: Any, layout: Any = None) -> Any:
    """The ``mapInArrow`` sub-plan of a backfill's (or a stream without event time's) search rules.

    A backfill judges lateness in arrival order, as the embedded operator reading the input
    does: each row carries the largest valid event time of every earlier row (per time field).
    ``frame`` may hold the reader's corrupt-record column: those records become error rows here.
    """
    from cep.events import FixedClock, wall_clock_ms
    from spark_udf.core import PRIOR_COL, SEQ_COL, InputLayout, TimeReading
    from spark_udf.frames import arrival_watermarks, envelope_schema, types_by_name

    layout = layout or InputLayout((), tuple(config.arrival_columns))
    x = frame
    prior_columns: dict[str, str | None] = {r.name: None for r in rules}
    clock = getattr(config, "clock", None)
    if not frame.isStreaming:  # one reading of the clock for every task of the job (see TimeReading)
        clock = FixedClock((clock or wall_clock_ms)())
    if not frame.isStreaming and config.arrival_order:
        def reading_of(r: Any) -> tuple[str, str, int | None]:
            return (r.spec.time_field, r.time_unit, r.max_future_skew_ms)

        times = sorted({reading_of(r) for r in rules if r.spec.time_field is not None},
                       key=lambda t: (t[0], t[1], -1 if t[2] is None else t[2]))
        for i, (tf, unit, skew) in enumerate(times):
            if tf not in frame.columns:
                continue  # every row is an error row of that rule (no event time)
            x, _ = arrival_watermarks(x, tf, [()], tuple(layout.segment_columns), layout.per_input,
                                      TimeReading(unit, skew, clock))
            x = x.drop(SEQ_COL).withColumnRenamed(f"{PRIOR_COL}_0", f"{PRIOR_COL}_search_{i}")
            for r in rules:
                if r.spec.time_field is not None and reading_of(r) == (tf, unit, skew):
                    prior_columns[r.name] = f"{PRIOR_COL}_search_{i}"
    core = _core(frame, rules, envelope, layout, prior_columns, malformed=CORRUPT_COL in frame.columns,
                 clock=clock)
    return x.mapInArrow(core, envelope_schema(envelope, types_by_name(frame.schema)))


def stage_core(frame: Any, rules: list[Any], envelope: Any, layout: Any = None,
               clock: Clock | None = None) -> SearchCore:
    """The core of a stream's search groups in the stateful stage (malformed records go elsewhere)."""
    from spark_udf.core import InputLayout

    return _core(frame, rules, envelope, layout or InputLayout(), {r.name: None for r in rules}, malformed=False,
                 clock=clock)


def _core(frame: Any, rules: list[Any], envelope: Any, layout: Any, prior_columns: dict[str, str | None],
          malformed: bool, clock: Clock | None = None) -> SearchCore:
    """Broadcast the query sets once and build the worker side."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_udf.frames import envelope_schema, types_by_name
    from spark_udf.schema import RESERVED_PREFIX

    schema = envelope_schema(envelope, types_by_name(frame.schema))
    session = frame.sparkSession
    blob, digest = pack_query_sets(rules)
    shipped = session.sparkContext.broadcast(blob)
    tz = session.conf.get("spark.sql.session.timeZone")
    input_types = {f.name: f.dataType.simpleString() for f in frame.schema.fields
                   if not f.name.startswith(RESERVED_PREFIX)}
    routes = {r.name: route for r in rules if (route := layout.route(r)) is not None}
    return SearchCore.build(rules, envelope, input_types, shipped, digest, to_arrow_schema(schema, timezone=tz),
                            prior_columns, routes, malformed, clock)
