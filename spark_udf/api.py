"""Run a rule file over a Spark DataFrame: complex events, late and bad events as DataFrames.

:func:`apply_rules` takes a streaming or a static DataFrame (or several, one per named input
stream) and a rule file. Keyed rules (patterns, analytics) run in one shared stateful stage
grouped by ``(rule, hash bucket of the rule's key)``: ``applyInPandasWithState`` with an
event-time timeout for a stream, ``applyInPandas`` for a static input (a backfill). Each
group's state is one versioned blob holding the embedded operator's snapshot for the keys of
that bucket. On a stream, search rules join the same stage (groups of documents hashed into
``search_buckets``, no state) so that they see the query's watermark and the source is read
once; a backfill runs them in one ``mapInArrow``. Every output row, of every rule and kind,
shares one wide :class:`~spark_udf.schema.Envelope` schema, so one query (one checkpoint, one
sink) carries them all; :class:`CepResult` slices it into typed DataFrames per rule, per kind,
late events and errors.

Example:
    >>> from pyspark.sql import SparkSession                       # doctest: +SKIP
    >>> spark = SparkSession.builder.master("local[2]").getOrCreate()  # doctest: +SKIP
    >>> events = spark.readStream.schema("sym string, ts long, px double").json("in/")  # doctest: +SKIP
    >>> result = apply_rules(events, "rules/trading.yaml")           # doctest: +SKIP
    >>> query = result.write_stream("out/", checkpoint="ck/")        # doctest: +SKIP

About 1,380 lines: the public entry point and the plan of one query (which stage each rule takes,
the arrival passes of a backfill, the outputs) read as one story; what runs inside Spark's
workers lives apart (:mod:`spark_udf.core`, :mod:`spark_udf.backfill`, :mod:`spark_udf.json_lines`,
:mod:`spark_udf.local_files`, :mod:`spark_udf.tables`).
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupStateTimeout

from cep.events import (
    MAX_EVENT_TIME_MS,
    MIN_EVENT_TIME_MS,
    Clock,
    FixedClock,
    unit_hint,
    wall_clock_ms,
)
from patterns.errors import CepError
from patterns.rules import Rule, RuleSet, load_rules
from spark_udf.core import (
    CORRUPT_BUCKET,
    CORRUPT_COL,
    INPUT_COL,
    MALFORMED,
    PRIOR_COL,
    SEQ_COL,
    SOURCE_COL,
    STREAM_COL,
    GroupCore,
    InputLayout,
    RuleSpec,
    TimeReading,
    epoch_ms_in,
    rule_key,
)
from spark_udf.frames import arrival_watermarks, envelope_schema, types_by_name
from spark_udf.keyed import joined_table
from spark_udf.kinds import KEYED_KINDS, STATELESS_KINDS, is_keyed, kind_of
from spark_udf.schema import (
    INTEGRAL,
    NUMERIC,
    PROBLEM_FIELDS,
    RESERVED_PREFIX,
    TIME_TYPES,
    Envelope,
)
from spark_udf.state import STATE_ENCODING_VERSION, STATE_SCHEMA
from spark_udf.tables import tick_stream

__all__ = ["SparkRunConfig", "CepResult", "apply_rules", "ProgressCounts", "METRICS_NAME", "time_unit_warnings",
           "read_json_lines"]

METRICS_NAME = "cep"
GROUP_RULE, GROUP_BUCKET, WM_COL, TIME_COL = "_cep_rule", "_cep_bucket", "_cep_wm", "_cep_time"
PART_COL = "_cep_part"  # a row's Spark partition: the arrival segment of a named input without arrival columns
_DELAY_KEY = "spark.watermarkDelayMs"  # EventTimeWatermark.delayKey


@dataclass(frozen=True)
class SparkRunConfig:
    """How rules run on Spark."""

    buckets: int = 64
    """Hash buckets per rule: the stateful stage's groups. Fixed by a checkpoint's first run. (A backfill in
    key-set groups groups by reduce partition instead: ``backfill_partitions``.)"""
    search_buckets: int = 8
    """Streams: groups the documents of the search rules are hashed into in the stateful stage
    (they keep no state, so the count may change between runs); about 2-4 per shuffle partition."""
    on_rule_change: str = "fail"
    """'fail': a rule whose saved state no longer fits stops the query; 'reset': drop that state."""
    source_column: str | None = None
    """Input column naming where a row came from (e.g. the file); copied onto late and error rows."""
    corrupt_column: str = "_corrupt_record"
    """Column Spark's permissive JSON/CSV readers fill with a record that does not parse."""
    arrival_order: bool = True
    """Backfill: judge lateness in the input's row order, as the embedded engine reading it would."""
    arrival_columns: tuple[str, ...] = ()
    """Backfill: columns naming each row's input segment (e.g. file path and block start), whose
    sorted values order the segments; empty: Spark partitions in order."""
    state_version: int = STATE_ENCODING_VERSION
    """Encoding version written to and expected from state (tests simulate upgrades with it)."""
    key_set_groups: bool = True
    """Backfill: run pattern rules in one group per PARTITION BY column set and reduce partition, in one
    scan of the input (docs/spark.md, "Key-set groups"); False: one group per rule and bucket with two
    arrival passes, as for analytics rules and joins."""
    backfill_partitions: int | None = None
    """Backfill: Spark partitions of the group stage. Rule groups: None gives as many as there are groups,
    at most 4 per core of the session (``defaultParallelism``), set explicitly so adaptive execution
    does not merge them: the stage's work is CPU in each group, and merged partitions leave cores idle
    (with 4 shuffle partitions merged into 3 tasks, one of 2 cores waited a third of the stage); 0: the
    session's shuffle partitions, merged as adaptive execution decides. Key-set groups: each reduce
    partition is one group per key set; None gives one per core, more for a large input (one per
    256 MB of input per key set as Spark estimates it: every key set packs every row once; 4 per
    core when it does not know), 0 the session's
    shuffle partitions."""
    clock: Clock | None = None
    """Wall clock (epoch ms) of the rules' future guard: None reads the machine's (a stream: each
    worker at each call, and Spark's batch time for the watermark; a backfill: once, on the
    driver, for every task). Tests pin it with :class:`cep.events.FixedClock`."""

    def __post_init__(self) -> None:
        if self.buckets < 1:
            raise ValueError(f"buckets must be at least 1, found {self.buckets!r}")
        if self.backfill_partitions is not None and self.backfill_partitions < 0:
            raise ValueError(f"backfill_partitions must be 0 or more, found {self.backfill_partitions!r}")
        if self.search_buckets < 1:
            raise ValueError(f"search_buckets must be at least 1, found {self.search_buckets!r}")
        if self.on_rule_change not in ("fail", "reset"):
            raise ValueError(f"on_rule_change must be 'fail' or 'reset', found {self.on_rule_change!r}")


ROW_FORMATS = frozenset({"json", "csv"})
"""Output formats whose open file holds only a buffer (see :meth:`CepResult.write`)."""
ROW_FORMAT_WRITERS = 64
"""Open files per task of a partitioned write in a row format before Spark falls back to sorting the rest."""
_ROW_FORMAT_WRITE = threading.Lock()


@dataclass
class CepResult:
    """Every output of a rule set over one input, as one envelope DataFrame and typed slices."""

    envelope: DataFrame
    envelope_layout: Envelope
    rules: list[Any]
    observation: Observation | None = None
    config: SparkRunConfig = field(default_factory=SparkRunConfig)
    keyed_groups: str | None = None
    """How the keyed rules run: ``"stream"`` (a stateful stage), ``"key-set"`` (a backfill of pattern rules,
    one group per PARTITION BY column set and bucket), ``"rule"`` (a backfill, one group per rule and
    bucket: analytics rules, joins, named inputs), None (no keyed rule)."""

    @property
    def is_streaming(self) -> bool:
        return self.envelope.isStreaming

    def matches(self, rule: str) -> DataFrame:
        """Complex events of one rule, with that rule's own column names and types."""
        if rule not in self.envelope_layout.rule_columns:
            raise KeyError(f"no rule named {rule!r}; rules: {', '.join(self.envelope_layout.rule_columns)}")
        cols = [F.col(_q(env)).alias(name) for name, env, _ in self.envelope_layout.columns_of(rule)]
        return self.envelope.where((F.col("output") == "match") & (F.col("rule") == rule)).select(*cols, "rule")

    def kind(self, kind: str = "pattern") -> DataFrame:
        """Complex events of every rule of one kind: ``rule`` plus the union of their columns."""
        names = [r for r, k in self.envelope_layout.rule_kinds.items() if k == kind]
        cols: dict[str, None] = {}
        for r in names:
            for _, env, _ in self.envelope_layout.columns_of(r):
                cols.setdefault(env, None)
        return self.envelope.where((F.col("output") == "match") & (F.col("kind") == kind)).select(
            "rule", *[_q(c) for c in cols]
        )

    def timeouts(self, rule: str) -> DataFrame:
        """Timed-out partial matches of one rule (``ONE ROW PER MATCH WITH TIMEOUT ROWS``): the rule's
        columns (measures over the rows matched so far), ``_waiting_for`` and ``_deadline``."""
        if rule not in self.envelope_layout.rule_columns:
            raise KeyError(f"no rule named {rule!r}; rules: {', '.join(self.envelope_layout.rule_columns)}")
        cols = [F.col(_q(env)).alias(name) for name, env, _ in self.envelope_layout.columns_of(rule)]
        return self.envelope.where((F.col("output") == "timeout") & (F.col("rule") == rule)).select(*cols, "rule")

    @property
    def late(self) -> DataFrame:
        """Events behind the watermark, with the reason (rule, kind, source, line, reason, event)."""
        return self._problems("late")

    @property
    def errors(self) -> DataFrame:
        """Events that could not be used (bad time, missing key, malformed record) and why."""
        return self._problems("error")

    def _problems(self, what: str) -> DataFrame:
        return self.envelope.where(F.col("output") == what).select("rule", "kind", *[n for n, _ in PROBLEM_FIELDS])

    def write_stream(
        self,
        path: str,
        checkpoint: str,
        format: str = "json",
        trigger: str = "available-now",
        partition_by: tuple[str, ...] = ("output", "rule"),
        query_name: str | None = None,
        options: dict[str, str] | None = None,
    ):
        """Start one streaming query writing every output to a file sink (exactly once).

        ``trigger``: ``available-now`` (process what is there, then stop), ``once``, or
        ``processing-time=10 seconds``. Read the sink back with ``spark.read.<format>(path)``:
        Spark then lists the committed files from ``path/_spark_metadata``.
        """
        w = self.envelope.writeStream.format(format).outputMode("append").option("path", path)
        w = w.option("checkpointLocation", checkpoint)
        for k, v in (options or {}).items():
            w = w.option(k, v)
        if partition_by:
            w = w.partitionBy(*partition_by)
        if query_name:
            w = w.queryName(query_name)
        return _with_trigger(w, trigger).start()

    def write(self, path: str, format: str = "json", mode: str = "errorifexists",
              partition_by: tuple[str, ...] = ("output", "rule")) -> None:
        """Write a static (backfill) result; same layout as :meth:`write_stream`.

        A partitioned write in a row format (JSON, CSV) writes each task's rows as they come,
        one open file per output folder (``ROW_FORMAT_WRITERS`` at most, then Spark sorts the rest),
        instead of sorting every row by folder first: the sort held the rows until a task's last
        group was done and then wrote them all (0.05-0.1 s of a 0.84 s warm backfill of the S&P file,
        docs/spark.md). An open file of a row format holds a buffer; one of Parquet or ORC holds a
        row group's columns, so those formats keep the sort."""
        w = self.envelope.write.format(format).mode(mode)
        if partition_by:
            w = w.partitionBy(*partition_by)
        if not partition_by or format.lower() not in ROW_FORMATS:
            w.save(path)
            return
        conf = self.envelope.sparkSession.conf
        settings = {"spark.sql.optimizer.plannedWrite.enabled": "false",
                    "spark.sql.maxConcurrentOutputFileWriters": str(ROW_FORMAT_WRITERS)}
        # the settings are the session's: writes from several threads take turns, so each puts back
        # what the user had (a job another thread plans meanwhile sees them; it writes the same rows)
        with _ROW_FORMAT_WRITE:
            before = {k: conf.get(k, None) for k in settings}
            try:
                for k, v in settings.items():
                    conf.set(k, v)
                w.save(path)
            finally:
                for k, v in before.items():
                    if v is None:
                        conf.unset(k)
                    else:
                        conf.set(k, v)

    def counts(self) -> dict[str, int]:
        """Backfill counts once an action ran: matches, late, errors and matches per rule."""
        if self.observation is None:
            raise CepError("counts() is for static results; a stream reports them in its query progress")
        return {k: int(v or 0) for k, v in self.observation.get.items()}


def _with_trigger(w: Any, trigger: str) -> Any:
    t = trigger.strip().lower()
    if t in ("available-now", "availablenow", "available_now"):
        return w.trigger(availableNow=True)
    if t == "once":
        return w.trigger(once=True)
    if t.startswith("processing-time="):
        return w.trigger(processingTime=t.split("=", 1)[1])
    raise ValueError(f"unknown trigger {trigger!r}; expected available-now, once or processing-time=10 seconds")


# ------------------------------------------------------------------ building the plan


def apply_rules(frame: DataFrame | Mapping[str, DataFrame], rules: RuleSet | Iterable[Rule] | str | Path,
                config: SparkRunConfig | None = None) -> CepResult:
    """Every rule of ``rules`` over ``frame`` (streaming or static).

    ``frame`` is one DataFrame, or a mapping ``{stream name: DataFrame}`` (all streaming or all
    static): the inputs are unioned by column name (a column an input lacks is NULL) and every
    row is tagged with its stream's name in ``stream``; a rule whose ``FROM`` names one of the
    streams reads that stream's rows only, any other rule reads every row, as the embedded
    engine does with ``cep run --input NAME=PATH``.

    Streams run keyed rules with ``applyInPandasWithState`` (append mode, event-time timeout,
    a watermark on the rules' common event-time column) and search rules in the same stage,
    judged against the same watermark; static frames run keyed rules with ``applyInPandas``
    and the final watermark at the end, search rules with ``mapInArrow`` (a backfill gives the
    rows the embedded engine gives over the same rows in the same order). Columns whose names
    start with ``_cep_`` are reserved.
    """
    cfg = config or SparkRunConfig()
    twin = _JSON_TEXT.get(frame) if isinstance(frame, DataFrame) else None
    if twin is not None:
        twin = twin.held(frame)
    if isinstance(rules, (str, Path)):
        rules = load_rules(rules)
    views = dict(getattr(rules, "views", None) or {})
    tables = dict(getattr(rules, "tables", None) or {})
    rules = list(rules)
    if not rules:
        raise CepError("the rule set is empty: nothing to run")
    keyed, stateless = [], []
    for r in rules:
        k = kind_of(r)
        if is_keyed(r):
            keyed.append(r)
        elif k in STATELESS_KINDS:
            stateless.append(r)
        else:
            known = ", ".join(sorted((set(KEYED_KINDS) - {"view"}) | set(STATELESS_KINDS)))  # a view is no rule kind
            raise CepError(f"rule {r.name!r}: kind {k!r} cannot run on Spark yet (runnable kinds: {known})")
        joined = joined_table(r)
        if joined is not None and not is_keyed(r):
            raise CepError(f"rule {r.name!r} joins table {joined!r}: a {k} rule's temporal join cannot run on Spark "
                           "yet (docs/spark.md, \"Tables\"); run it in the embedded engine (cep run)")
        if joined is not None and joined not in tables and joined not in views:
            raise CepError(f"rule {r.name!r} joins table {joined!r}, which the rules do not declare (tables:); pass "
                           "the whole rule file (its RuleSet), not a list of its rules")

    if views:  # before any work (one DataFrame has no named inputs: its tables are static)
        _check_views(views, tables, rules, tuple(frame) if isinstance(frame, Mapping) else ())
    frame, layout = _inputs(frame, cfg)
    # changelog rows feed their tables, never a rule that reads every stream (as in cep run)
    changelogs = sorted({spec.stream for spec in tables.values() if spec.stream in layout.streams})
    corrupt = cfg.corrupt_column if cfg.corrupt_column and cfg.corrupt_column in frame.columns else None
    if corrupt:
        frame = frame.withColumnRenamed(corrupt, CORRUPT_COL)
    frame = _with_source(frame, cfg)
    frame, output_types, engine_types = _engine_view(frame)
    bindings = _table_bindings(rules, tables, layout, engine_types, views)
    view_rules = _view_rules(views, tables, layout, rules)
    rules = _read_time_types_as_ms(rules, output_types)
    keyed = [r for r in rules if is_keyed(r)]
    stateless = [r for r in rules if not is_keyed(r)]
    rule_fields = {}
    for r in rules:
        kind = KEYED_KINDS[kind_of(r)] if is_keyed(r) else STATELESS_KINDS[kind_of(r)]
        rule_fields[r.name] = (kind_of(r), kind.output_fields(r, output_types))
    for v in view_rules:  # a view's changelog: kind "view", the view's name in "rule"
        rule_fields[v.name] = (v.kind, KEYED_KINDS[v.kind].output_fields(v, output_types))
    env = Envelope.build(rule_fields)
    by_type = types_by_name(frame.schema)

    by_kind: dict[str, list[Any]] = {}
    for r in stateless:
        by_kind.setdefault(kind_of(r), []).append(r)
    # On a stream, stateless kinds that can (search) join the stateful stage: they see the
    # query's watermark there, and the source is read once for every rule (one branch)
    staged: dict[str, list[Any]] = {}
    if frame.isStreaming:
        for name, group in by_kind.items():
            if hasattr(STATELESS_KINDS[name], "stage_core"):
                staged[name] = group
        timed = bool(keyed) or any(STATELESS_KINDS[n].time_column(r) for n, g in staged.items()  # type: ignore[attr-defined]
                                   for r in g)
        if not timed:  # no event time anywhere: no watermark to judge by, a plain map is cheaper
            staged = {}
    parts: list[DataFrame] = []
    keyed_groups = None
    if keyed or staged:
        # malformed records ride along to one group of the stage (one scan of the input)
        stage, keyed_groups = _stateful_stage(frame, keyed, staged, cfg, env, engine_types, by_type, corrupt is not None,
                                              layout, bindings, changelogs, view_rules, twin)
        parts.append(stage)
    rest = sorted(n for n in by_kind if n not in staged)
    reporter = None
    if corrupt and not (keyed or staged):
        reporter = next((n for n in rest if getattr(STATELESS_KINDS[n], "reports_malformed", False)), None)
        if reporter is None:
            parts.append(_corrupt_rows(frame, cfg))
    if changelogs:  # the stateless kinds' own sub-plans (a backfill's search rules) read no changelog
        frame = frame.where(F.col(CORRUPT_COL).isNotNull() | ~_any_stream(changelogs)) if corrupt else \
            frame.where(~_any_stream(changelogs))
    clean = frame.where(F.col(CORRUPT_COL).isNull()).drop(CORRUPT_COL) if corrupt else frame
    for name in rest:
        parts.append(STATELESS_KINDS[name].build(frame if name == reporter else clean, by_kind[name], env, cfg,
                                                 layout=layout))  # type: ignore[call-arg]
    schema = envelope_schema(env, by_type)
    out = _conform(parts[0], schema)
    for p in parts[1:]:
        out = out.unionByName(_conform(p, schema))
    metrics = _metrics(rules)
    observation = None
    if out.isStreaming:
        out = out.observe(METRICS_NAME, *metrics)
    else:
        observation = Observation(METRICS_NAME)
        out = out.observe(observation, *metrics)
    return CepResult(out, env, rules, observation, cfg, keyed_groups)


def time_unit_warnings(frame: DataFrame | Mapping[str, DataFrame], rules: RuleSet | Iterable[Rule] | str | Path,
                       sample: int = 1000) -> list[str]:
    """Warnings for rules whose numeric event times look like another unit (see :func:`cep.events.unit_hint`).

    Looks at the first ``sample`` rows of a static input: one small Spark job per event-time
    field, once, before the backfill runs (never per batch). A stream has no first rows on the
    driver: it is not looked at (an empty list); check a sample with ``cep run`` or a backfill.
    """
    from cep.events import batch_from_records

    frames = [frame] if isinstance(frame, DataFrame) else list(frame.values())
    if not frames or any(f.isStreaming for f in frames):
        return []
    if isinstance(rules, (str, Path)):
        rules = load_rules(rules)
    groups: dict[tuple[str, str], list[str]] = {}
    for r in rules:
        tf = _time_field(r)
        if tf is not None:
            groups.setdefault((tf, r.time_unit), []).append(r.name)
    out = []
    for (tf, unit), names in groups.items():
        for f in frames:
            if tf not in f.columns or isinstance(f.schema[tf].dataType, (T.TimestampType, T.TimestampNTZType, T.DateType)):
                continue
            first = [{tf: row[0]} for row in f.select(F.col(_q(tf))).limit(sample).collect()]
            hint = unit_hint(batch_from_records(first), tf, unit)
            if hint is not None:
                out.append(hint.message(names))
                break
    return out


def _time_field(rule: Any) -> str | None:
    """The event-time field a rule reads (None: a search rule without one)."""
    return rule.compiled.statement.order_by if rule.compiled is not None else rule.spec.time_column


def _read_time_types_as_ms(rules: list[Any], input_types: Mapping[str, str]) -> list[Any]:
    """Rules whose event-time column is a Spark timestamp or date read it in ms, whatever their time_unit.

    The engine view hands such columns over as epoch milliseconds (as the embedded engine reads
    pandas and Arrow timestamps); a ``time_unit`` is for numeric columns only.
    """
    from dataclasses import replace

    return [replace(r, time_unit="ms") if input_types.get(_time_field(r) or "") in TIME_TYPES and r.time_unit != "ms"
            else r for r in rules]


def _inputs(frame: Any, cfg: SparkRunConfig) -> tuple[DataFrame, InputLayout]:
    """One DataFrame from the input (or the named inputs, tagged and unioned) and its layout."""
    if isinstance(frame, DataFrame):
        return frame, InputLayout((), tuple(cfg.arrival_columns))
    if not isinstance(frame, Mapping) or not frame:
        raise CepError(
            f"the input must be a DataFrame or a non-empty mapping {{stream name: DataFrame}}, found {frame!r}"
        )
    names = list(frame)
    for n, f in frame.items():
        if not isinstance(n, str) or not n:
            raise CepError(f"input stream names must be non-empty strings, found {n!r}")
        if not isinstance(f, DataFrame):
            raise CepError(f"input stream {n!r}: expected a DataFrame, found {type(f).__name__}")
    _check_case(frame)
    modes = {n: frame[n].isStreaming for n in names}
    if len(set(modes.values())) > 1:
        live = ", ".join(n for n in names if modes[n])
        static = ", ".join(n for n in names if not modes[n])
        raise CepError(f"input streams mix streaming ({live}) and static ({static}) DataFrames; "
                       "read them all with readStream (a stream) or all with read (a backfill)")
    streaming = modes[names[0]]
    seen: dict[str, tuple[str, T.DataType]] = {}
    for n in names:
        for fld in frame[n].schema.fields:
            if fld.name == STREAM_COL:
                continue
            first = seen.setdefault(fld.name, (n, fld.dataType))
            if first[1] != fld.dataType:
                raise CepError(
                    f"column {fld.name!r} is {first[1].simpleString()} in input stream {first[0]!r} but "
                    f"{fld.dataType.simpleString()} in {n!r}; give it one type in every input (a schema, or a cast) "
                    "so that the streams can be unioned"
                )
    out = None
    for i, n in enumerate(names):
        f = frame[n]
        # as the embedded engine's merge: a row that names its stream keeps it
        tag = F.coalesce(F.col(STREAM_COL).cast("string"), F.lit(n)) if STREAM_COL in f.columns else F.lit(n)
        f = f.withColumn(STREAM_COL, tag)
        if not streaming:
            f = f.withColumn(INPUT_COL, F.lit(i))
        out = f if out is None else out.unionByName(f, allowMissingColumns=True)
    assert out is not None
    segments: tuple[str, ...] = ()
    if not streaming and cfg.arrival_order:
        if cfg.arrival_columns:
            segments = (INPUT_COL, *cfg.arrival_columns)
        else:  # each input's Spark partitions in order
            out = out.withColumn(PART_COL, F.spark_partition_id())
            segments = (INPUT_COL, PART_COL)
    return out, InputLayout(tuple(names), segments)


def _check_case(frames: Mapping[str, DataFrame]) -> None:
    """Refuse inputs whose column names differ only in case when Spark resolves names without case.

    Rules read fields case-sensitively (as ``cep run`` does), but Spark's default
    (``spark.sql.caseSensitive=false``) would union ``Symbol`` of a changelog with ``symbol`` of
    the events into one column.
    """
    first = next(iter(frames.values()))
    if str(first.sparkSession.conf.get("spark.sql.caseSensitive", "false")).lower() == "true":
        return
    seen: dict[str, tuple[str, str]] = {}
    for n, f in frames.items():
        for c in f.columns:
            other = seen.setdefault(c.lower(), (c, n))
            if other[0] != c:
                raise CepError(
                    f"column {c!r} of input stream {n!r} and column {other[0]!r} of {other[1]!r} differ only in "
                    "case, and this Spark session resolves names without case (spark.sql.caseSensitive=false, "
                    "Spark's default), so the union would merge them; set spark.sql.caseSensitive=true (cep spark "
                    "does), as rules read fields case-sensitively")


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_ .:/@+-]*")


def _metrics(rules: list[Any]) -> list[Column]:
    """The observed counts: every output kind, and each rule's matches and late rows.

    Written as SQL expressions (one call into the JVM each, not one per operator: a few
    milliseconds, not 40, of a backfill's planning) when the rule names need no quoting in a
    SQL string; built from columns otherwise."""
    if all(_PLAIN_NAME.fullmatch(r.name) for r in rules):
        def count(cond: str, alias: str) -> Column:
            return F.expr(f"count(CASE WHEN {cond} THEN 1 END)").alias(alias)

        ms = [count(f"output = '{o}'", name) for o, name in
              (("match", "matches"), ("late", "late"), ("error", "errors"), ("timeout", "timeouts"))]
        for i, r in enumerate(rules):
            ms.append(count(f"output = 'match' AND rule = '{r.name}'", f"matches_{i}"))
            ms.append(count(f"output = 'late' AND rule = '{r.name}'", f"late_{i}"))
        return ms
    out = F.col("output")
    ms = [
        F.count(F.when(out == "match", 1)).alias("matches"),
        F.count(F.when(out == "late", 1)).alias("late"),
        F.count(F.when(out == "error", 1)).alias("errors"),
        F.count(F.when(out == "timeout", 1)).alias("timeouts"),
    ]
    for i, r in enumerate(rules):
        ms.append(F.count(F.when((out == "match") & (F.col("rule") == r.name), 1)).alias(f"matches_{i}"))
        ms.append(F.count(F.when((out == "late") & (F.col("rule") == r.name), 1)).alias(f"late_{i}"))
    return ms


def _q(name: str) -> str:
    """A column name quoted for F.col / select (dots and spaces stay literal)."""
    return "`" + name.replace("`", "``") + "`"


def _corrupt_rows(frame: DataFrame, cfg: SparkRunConfig) -> DataFrame:
    """Error rows for the records the reader could not parse (when no keyed stage carries them)."""
    c = F.col(CORRUPT_COL)
    src = F.col(SOURCE_COL) if SOURCE_COL in frame.columns else F.lit(None).cast("string")
    # Spark refuses a scan of raw JSON/CSV that reads the corrupt-record column alone, so the
    # event text falls back to the parsed fields (never used: the record is non-NULL here).
    others = [F.col(_q(f)) for f in frame.columns if f != CORRUPT_COL]
    text = F.coalesce(c, F.to_json(F.struct(*others))) if others else c
    return frame.where(c.isNotNull()).select(
        F.lit("error").alias("output"),
        F.lit(None).cast("string").alias("rule"),
        F.lit(None).cast("string").alias("kind"),
        src.alias("source"),
        F.lit(None).cast("bigint").alias("line"),
        F.lit(MALFORMED).alias("reason"),
        text.alias("event"),
    )


def _with_source(frame: DataFrame, cfg: SparkRunConfig) -> DataFrame:
    if not cfg.source_column or cfg.source_column == SOURCE_COL:
        return frame
    return frame.withColumn(SOURCE_COL, F.col(_q(cfg.source_column)).cast("string"))


def _engine_view(frame: DataFrame) -> tuple[DataFrame, dict[str, str], dict[str, str]]:
    """Columns as the engine reads them: times as epoch milliseconds, decimals as doubles.

    Returns the frame, the output types (a time column stays a timestamp in outputs) and the
    types the engine sees.
    """
    cols, out_types, eng_types = [], {}, {}
    fields = frame.schema.fields
    if not any(isinstance(f.dataType, (T.TimestampType, T.TimestampNTZType, T.DateType, T.DecimalType))
               for f in fields if not f.name.startswith(RESERVED_PREFIX)):
        # nothing to convert: the frame as it is, without a projection of every column to plan
        types = {f.name: f.dataType.simpleString() for f in fields if not f.name.startswith(RESERVED_PREFIX)}
        return frame, types, dict(types)
    for f in fields:
        name, dtype = f.name, f.dataType
        c = F.col(_q(name))
        typ = dtype.simpleString()
        if name.startswith(RESERVED_PREFIX):
            cols.append(c)
            continue
        out_types[name] = typ
        if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
            c, typ = F.unix_millis(c.cast("timestamp")) if isinstance(dtype, T.TimestampNTZType) else F.unix_millis(c), "bigint"
        elif isinstance(dtype, T.DateType):
            c, typ = F.unix_date(c).cast("bigint") * F.lit(86_400_000), "bigint"
        elif isinstance(dtype, T.DecimalType):
            c, typ = c.cast("double"), "double"
            out_types[name] = "double"
        eng_types[name] = typ
        cols.append(c.alias(name))
    return frame.select(*cols), out_types, eng_types


def _conform(frame: DataFrame, schema: T.StructType) -> DataFrame:
    """The envelope's columns, in order: missing ones NULL, others cast to the envelope's type."""
    current = frame.schema
    if [(f.name, f.dataType) for f in current.fields] == [(f.name, f.dataType) for f in schema.fields]:
        return frame  # already the envelope's columns, in order, of its types
    have = {f.name: f.dataType for f in current.fields}
    cols = []
    for f in schema.fields:
        c = F.col(_q(f.name)) if f.name in have else F.lit(None)
        cols.append(c.cast(f.dataType).alias(f.name) if f.name not in have or have[f.name] != f.dataType else c)
    return frame.select(*cols)


def _time_ms(frame: DataFrame, name: str, engine_types: dict[str, str], unit: str = "ms",
             max_future_skew_ms: int | None = None, clock: Clock | None = None) -> Column:
    """The stream's watermark column: each row's event time in epoch ms, as the operators read it,
    NULL where they refuse it (not a time, before 1900 or from 2200 on, more than the skew ahead
    of the clock), so that no refused row moves Spark's watermark."""
    typ = engine_types.get(name)
    c = F.col(_q(name))
    mul, div = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}[unit]
    if typ in INTEGRAL:
        n = c.cast("bigint")
        if mul > 1:  # guarded: under ANSI mode an overflowing product fails the query
            ms = F.when(F.abs(n) < F.lit(MAX_EVENT_TIME_MS // mul + 1), n * F.lit(mul))
        elif div > 1:  # exact floor division (a double would round nanoseconds)
            ms = F.floor(n.cast("decimal(20,0)") / F.lit(div)).cast("bigint")
        else:
            ms = n
    elif typ in NUMERIC:
        x = c.cast("double")
        ok = ~F.isnan(x) & (F.abs(x) < F.lit(float(MAX_EVENT_TIME_MS) * div / mul + 1))
        if unit == "ms":
            ms = F.when(ok, x.cast("bigint"))
        else:  # as parse_times: to the microsecond (half to even), then down to the millisecond
            ms = F.when(ok, F.floor(F.bround(x * F.lit(mul) / F.lit(div), 3)).cast("bigint"))
    else:
        # strings (ISO-8601 or digits): parsed in Python exactly as the embedded engine parses them
        udf: Any = F.pandas_udf(epoch_ms_in(unit), "bigint")  # type: ignore[call-overload]
        ms = udf(c.cast("string"))
    ok = (ms >= F.lit(MIN_EVENT_TIME_MS)) & (ms < F.lit(MAX_EVENT_TIME_MS))
    if max_future_skew_ms is not None:
        now = F.lit(clock()) if clock is not None else F.unix_millis(F.current_timestamp())
        ok = ok & (ms <= now + F.lit(max_future_skew_ms))
    return F.when(ok, ms)


def _stage_reading(keyed: list[Any], staged: dict[str, list[Any]]) -> tuple[str, int | None]:
    """The one unit and future skew the stage reads its time column with: one Spark query has one
    watermark, so every rule that shares it must read times alike."""
    rules = list(keyed) + [r for group in staged.values() for r in group if _time_field(r) is not None]
    readings: dict[tuple[str, int | None], list[str]] = {}
    for r in rules:
        readings.setdefault((r.time_unit, r.max_future_skew_ms), []).append(r.name)
    if len(readings) > 1:
        from cep.events import format_duration

        def show(u: str, skew: int | None) -> str:
            return f"time_unit {u}, max_future_skew {'none' if skew is None else format_duration(skew)}"

        detail = "; ".join(f"{show(*k)}: {', '.join(names)}" for k, names in readings.items())
        raise CepError(
            f"rules read their event times differently ({detail}); one Spark query has one watermark, shared "
            "by every pattern and analytics rule and every search rule with a time_field: give them one "
            "time_unit and max_future_skew, or run them as separate queries (one rule file each)"
        )
    return next(iter(readings), ("ms", None))


def _stage_time_column(keyed: list[Any], kinds: list[Any], staged: dict[str, list[Any]]) -> str:
    """The one event-time column of the stateful stage: every keyed rule's, and every staged
    (search) rule's that has one."""
    fields: dict[str, list[str]] = {}
    for k, r in zip(kinds, keyed):
        fields.setdefault(k.time_column(r), []).append(r.name)
    for name, group in staged.items():
        kind: Any = STATELESS_KINDS[name]
        for r in group:
            tc = kind.time_column(r)
            if tc is not None:
                fields.setdefault(tc, []).append(r.name)
    if len(fields) != 1:
        detail = "; ".join(f"{f!r}: {', '.join(names)}" for f, names in sorted(fields.items()))
        raise CepError(
            f"rules order by different event-time fields ({detail}); one Spark query has one watermark, "
            "shared on a stream by every pattern and analytics rule and every search rule with a time_field: "
            "run the rules of each time field as a separate query (one rule file each)"
        )
    return next(iter(fields))


def _row_hash_columns(frame: DataFrame) -> list[Column]:
    """The input's plain columns, whose hash spreads documents over the search groups."""
    plain = (T.StringType, T.NumericType, T.BooleanType, T.BinaryType, T.DateType, T.TimestampType,
             T.TimestampNTZType)
    return [F.col(_q(f.name)) for f in frame.schema.fields
            if not f.name.startswith(RESERVED_PREFIX) and isinstance(f.dataType, plain)]


def _stateful_stage(frame: DataFrame, keyed: list[Any], staged: dict[str, list[Any]], cfg: SparkRunConfig,
                    env: Envelope, engine_types: dict[str, str], by_type: dict[str, T.DataType], corrupt: bool,
                    layout: InputLayout, bindings: dict[str, Any] | None = None,
                    changelogs: list[str] | None = None, views: list[Any] | None = None,
                    twin: JsonText | None = None) -> tuple[DataFrame, str]:
    """The keyed stage: pattern and analytics rules, and (streams) the search rules, and which form it took
    (``"stream"``, ``"key-set"`` or ``"rule"`` groups: :attr:`CepResult.keyed_groups`).

    Groups are ``(rule, bucket of the rule's key)`` for keyed rules and ``(-1 - i, bucket of
    the row's hash)`` for the i-th staged stateless kind (every search rule in one group per
    bucket: a document is shuffled once, whatever the number of search rules).
    """
    kinds = [KEYED_KINDS[kind_of(r)] for r in keyed]
    time_col = _stage_time_column(keyed, kinds, staged)
    columns = set(frame.columns)
    shown = ", ".join(c for c in frame.columns if not c.startswith(RESERVED_PREFIX))
    bindings = bindings or {}
    for k, r in zip(kinds, keyed):
        for c in (*_bucket_columns(k, r), k.time_column(r)):
            if c not in columns:
                raise CepError(
                    f"rule {r.name!r}: column {c!r} ({getattr(k, 'clause', 'key / event time')}) is not in the input; "
                    f"input columns: {shown}"
                )
    for name, group in staged.items():
        skind: Any = STATELESS_KINDS[name]
        for r in group:
            tc = skind.time_column(r)
            if tc is not None and tc not in columns:
                raise CepError(
                    f"rule {r.name!r}: column {tc!r} ({getattr(skind, 'clause', 'event time')}) is not in the input; "
                    f"a stream's watermark is read from it; input columns: {shown}"
                )
    specs = {r.name: RuleSpec.of(r, env) for r in keyed}
    for name, binding in bindings.items():
        specs[name].table = binding
    views = list(views or [])
    for v in views:  # each view's changelog: one group, (view, 0)
        specs[v.name] = RuleSpec.of(v, env)
    unit, skew = _stage_reading(keyed, staged)
    # a backfill reads the wall clock once, here, for every task and both arrival passes
    clock = cfg.clock if frame.isStreaming else FixedClock((cfg.clock or wall_clock_ms)())
    core = GroupCore(specs, list(env.columns), engine_types, cfg.buckets, cfg.on_rule_change, cfg.state_version,
                     clock)
    schema = envelope_schema(env, by_type)
    key_sets = sorted({_bucket_columns(k, r) for k, r in zip(kinds, keyed)})
    live = list(changelogs or [])

    if frame.isStreaming:
        joined: dict[int, Any] = {}
        extra: list[tuple[int, Column, Column | None]] = []
        hashed = _row_hash_columns(frame)
        row_bucket = (F.pmod(F.xxhash64(*hashed), F.lit(cfg.search_buckets)).cast("int") if hashed
                      else F.lit(0))
        for i, name in enumerate(sorted(staged)):
            group = staged[name]
            joined[-1 - i] = STATELESS_KINDS[name].stage_core(frame, group, env, layout, clock)  # type: ignore[attr-defined]
            routes = [layout.route(r) for r in group]
            reads = (_any_stream(sorted(set(routes))) if None not in routes  # type: ignore[arg-type]
                     else ~_any_stream(live) if live else None)
            extra.append((-1 - i, row_bucket, reads))
        event_ms = _time_ms(frame, time_col, engine_types, unit, skew, clock)
        if live:  # changelog rows move no watermark of the rules (a table has its own, in each group)
            event_ms = F.when(~_any_stream(live), event_ms)
        x = frame.withColumn(TIME_COL, F.timestamp_millis(event_ms))
        x = x.withWatermark(TIME_COL, "0 seconds")
        x = _assign_groups(x, keyed, kinds, cfg, None, corrupt, layout, extra, bindings, live, views)
        # The stage needs a watermark column among its inputs for an event-time timeout, and
        # Spark drops rows behind the watermark before a stage with one. A NULL column that
        # carries the watermark marker satisfies the first and is never "behind", so late rows
        # reach the operator, which reports them; the real watermark column is projected away.
        # The marker is a bigint: PySpark converts timestamp columns for pandas row by row.
        x = x.drop(TIME_COL).withColumn(
            WM_COL, F.lit(None).cast("bigint").alias(WM_COL, metadata={_DELAY_KEY: 0})
        )

        def stream_fn(key, pdfs, state):
            group, bucket = int(key[0]), int(key[1])
            if bucket != CORRUPT_BUCKET and group in joined:  # stateless: no state, no timeout
                rows = joined[group].stream_group(pdfs, state.getCurrentWatermarkMs())
                if rows is not None:
                    yield rows
                return
            stored = tuple(state.get) if state.exists else None
            frame_out, new_state, timeout = core.stream_group(
                key, pdfs, stored, state.getCurrentWatermarkMs(), state.hasTimedOut
            )
            if new_state is None:
                if state.exists:
                    state.remove()
            else:
                state.update(new_state)
                if timeout is not None:
                    state.setTimeoutTimestamp(timeout)
            if frame_out is not None:
                yield frame_out

        return x.groupBy(GROUP_RULE, GROUP_BUCKET).applyInPandasWithState(
            stream_fn, schema, STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout
        ), "stream"

    if cfg.key_set_groups and _key_set_ready(keyed, bindings, views, layout, live):
        return _key_set_stage(frame, keyed, kinds, cfg, core, schema, time_col, key_sets, corrupt, layout,
                              TimeReading(unit, skew, clock), twin), "key-set"
    x = frame
    priors = None
    if cfg.arrival_order:
        x, priors = arrival_watermarks(x, time_col, key_sets, layout.segment_columns, layout.per_input,
                                       TimeReading(unit, skew, clock))
    else:
        x = x.withColumn(SEQ_COL, F.monotonically_increasing_id())
    prior_cols = {ks: f"{PRIOR_COL}_{i}" for i, ks in enumerate(key_sets)} if priors else None
    x = _assign_groups(x, keyed, kinds, cfg, prior_cols, corrupt, layout, [], bindings, live, views)

    def static_fn(key, pdf):
        return core.static_group(key, pdf)

    x = _spread_groups(x, cfg, len(keyed) * cfg.buckets)
    return x.groupBy(GROUP_RULE, GROUP_BUCKET).applyInPandas(static_fn, schema), "rule"


def _spread_groups(x: DataFrame, cfg: SparkRunConfig, groups: int) -> DataFrame:
    """A backfill's rows hash-partitioned by group into a fixed number of partitions (see
    :attr:`SparkRunConfig.backfill_partitions`); the grouping that follows reuses the partitioning."""
    n = cfg.backfill_partitions
    if n == 0:
        return x
    if n is None:
        try:
            cores = x.sparkSession.sparkContext.defaultParallelism
        except Exception:  # a Spark Connect session has no SparkContext: its shuffle partitions
            cores = max(1, int(x.sparkSession.conf.get("spark.sql.shuffle.partitions", "4") or 4) // 4)
        n = max(1, min(groups, 4 * cores))
    return x.repartition(n, GROUP_RULE, GROUP_BUCKET)


def _key_set_ready(keyed: list[Any], bindings: Mapping[str, Any], views: list[Any], layout: InputLayout,
                   changelogs: list[str]) -> bool:
    """Whether a backfill's keyed rules can run in key-set groups (:mod:`spark_udf.backfill`): pattern
    rules only, no table or view joined, one unnamed input (no FROM routing)."""
    return (bool(keyed) and all(kind_of(r) == "pattern" for r in keyed) and not bindings and not views
            and not layout.streams and not changelogs)


def _key_set_stage(frame: DataFrame, keyed: list[Any], kinds: list[Any], cfg: SparkRunConfig, core: GroupCore,
                   schema: T.StructType, time_col: str, key_sets: list[tuple[str, ...]], corrupt: bool,
                   layout: InputLayout, reading: TimeReading, twin: JsonText | None = None) -> DataFrame:
    """A backfill of pattern rules in one scan: each map task packs its rows by (key set, group), the
    packed rows meet per reduce partition, where every rule of the key set runs over its group.

    The map side (:class:`spark_udf.backfill.Packer`, ``mapInArrow``) reads each row's time and keys
    once, keeps the arrival statistics of the former first pass and each row's watermark within its
    segment, and sends each group's rows as one Arrow stream; the segments' statistics go to every
    reduce partition, so the reduce side (:class:`spark_udf.backfill.PackedGroups`, ``mapInPandas``)
    knows the arrival plan without a second job (docs/spark.md, "Key-set groups"). Given the text
    ``twin`` of a JSON lines input (:func:`read_json_lines`), the map side reads the lines and decodes
    them with the engine (:mod:`spark_udf.json_lines`) when the schema allows it.
    """
    from spark_udf.backfill import PACKED_SCHEMA, PART_COL, PackedGroups, Packer, partition_values

    index = {ks: i for i, ks in enumerate(key_sets)}
    rules_of: dict[int, list[str]] = {}
    lateness: dict[int, list[int]] = {}
    sets = [index[_bucket_columns(k, r)] for k, r in zip(kinds, keyed)]
    for k, r, i in zip(kinds, keyed, sets):
        rules_of.setdefault(i, []).append(r.name)
        lateness.setdefault(i, []).append(int(k.lateness_ms(r)))
    seg_cols = tuple(layout.segment_columns)
    parts = _backfill_partitions(frame, cfg, len(key_sets))
    decoder = _engine_decoder(frame, twin, corrupt) if twin is not None else None
    packer = Packer(time_col, key_sets, seg_cols, reading, partition_values(parts), decoder=decoder)
    runner = PackedGroups(core, rules_of, lateness, len(key_sets), seg_cols, cfg.arrival_order)
    source = frame
    if decoder is not None and twin is not None:
        local = _local_splits(twin, decoder)
        if local is not None:  # the map tasks read the files themselves (spark_udf/local_files.py)
            from spark_udf.local_files import SplitReader

            source, tasks = local
            packer.decoder = runner.reader = SplitReader(decoder, twin.source_column, twin.block_column, tasks)
            # each key set's streams with only the fields its rules read; a row's whole event, where a
            # late or error row needs it, decoded again from the task's splits
            packer.keep = [_fields_read([r for r, i in zip(keyed, sets) if i == ks]) for ks in range(len(key_sets))]
        else:
            source = twin.text
    packed = source.mapInArrow(packer.pack, PACKED_SCHEMA).repartition(parts, F.col(PART_COL))
    return packed.mapInPandas(runner.run, schema)


def _fields_read(rules: list[Any]) -> frozenset[str] | None:
    """The event fields any of ``rules`` (pattern rules) reads, None when one keeps whole events."""
    from spark_udf.backfill import columns_read

    out: set[str] = set()
    for r in rules:
        got = columns_read(r)
        if got is None:
            return None
        out |= got
    return frozenset(out)


def _engine_decoder(frame: DataFrame, twin: JsonText, corrupt: bool) -> Any:
    """The engine's decoder of the JSON lines ``twin`` for the planned ``frame`` (its engine view), or
    None when Spark's reader must read them: a column type the engine does not read as Spark does
    (:func:`spark_udf.json_lines.column_kinds`), a reserved column the text has not, the reader's
    malformed-record column not the one the run reads, column names matched without case, or a
    session whose JSON settings make Spark's reader read otherwise (empty strings as NULL; string
    columns not read exactly as written, the default before Spark 4.0).

    The types are the reader's: the engine view has a timestamp or date as epoch milliseconds
    (bigint) and a decimal as a double, which the lines do not hold."""
    from spark_udf.json_lines import JsonLinesDecoder, column_kinds

    corrupt_name = twin.corrupt
    if not corrupt or corrupt_name in frame.columns:
        return None
    conf = frame.sparkSession.conf
    if str(conf.get("spark.sql.caseSensitive", "false")).lower() != "true":
        return None
    # session settings that change what Spark's reader gives: an empty string as NULL in an integer
    # or boolean column (not a malformed record), and a number, array or object in a string column
    # written again by Jackson ("1.50" as "1.5", "[1, 2]" as "[1,2]"), Spark before 4.0 without the
    # setting; the engine's decoder reads neither so
    if str(conf.get("spark.sql.legacy.json.allowEmptyString.enabled", "false")).lower() == "true":
        return None
    exact = _session_setting(conf, "spark.sql.json.enableExactStringParsing") == "true"
    fields, passed = [], []
    for f in frame.schema.fields:
        if f.name == CORRUPT_COL:
            continue
        if f.name.startswith(RESERVED_PREFIX):
            if twin.reserved_type(f.name) != f.dataType:
                return None
            passed.append(f.name)
            continue
        fields.append((f.name, f.dataType.simpleString()))
    read = [(f.name, f.dataType.simpleString()) for f in twin.schema.fields if f.name != corrupt_name]
    if fields != read:  # a column the view converted (a time, a decimal), or one not read from the lines
        return None
    kinds = column_kinds(fields)
    if kinds is None or (not exact and any(t == "string" for _, t in kinds)):
        return None
    return JsonLinesDecoder(kinds, CORRUPT_COL, tuple(passed), dictionary=True)


def _local_splits(twin: JsonText, decoder: Any) -> tuple[DataFrame, list[Any]] | None:
    """The splits of the JSON lines files of ``twin`` for the map tasks to read themselves, one
    partition per task (:mod:`spark_udf.local_files`), or None when Spark's text source must read
    them: a file not on the local file system (``file:``) or compressed, a column the decoder passes
    that is not the file or the block, a session without a SparkContext (Spark Connect), or
    ``spark.cep.backfill.localFiles`` set to false."""
    from spark_udf.local_files import byte_size, plan_files

    spark = twin.spark
    reader = twin.reader() if twin.reader is not None else None
    if reader is None:
        return None
    conf = spark.conf
    if str(conf.get("spark.cep.backfill.localFiles", "true")).lower() != "true":
        return None
    if set(decoder.passed) - {twin.source_column, twin.block_column}:
        return None
    try:
        sc = spark.sparkContext
        names = reader.inputFiles()  # the files of the text source too: the same paths, listed alike
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext to parallelize the splits with
        return None
    if _scanned_files(reader) != len(names):
        # a file named twice (a folder and a file in it, overlapping globs): Spark's scan reads it
        # once per naming, inputFiles() lists it once; reading the list would lose the repeats
        return None

    def setting(key: str, default: int) -> int:
        got = byte_size(_session_setting(conf, key) or "")
        return default if got is None else got

    cores = setting("spark.sql.files.minPartitionNum", 0) or sc.defaultParallelism
    tasks = plan_files(names, setting("spark.sql.files.maxPartitionBytes", 128 << 20),
                       setting("spark.sql.files.openCostInBytes", 4 << 20), cores)
    if not tasks:
        return None
    # a task per partition, its splits shipped with the map function (SplitReader.tasks)
    return spark.range(0, len(tasks), 1, len(tasks)), tasks


def _scanned_files(text: DataFrame) -> int | None:
    """How many files Spark's scan of ``text`` (one file source) reads, a file named twice counted
    twice (``inputFiles()`` lists each once), or None when the plan does not say."""
    try:
        leaves = text._jdf.queryExecution().optimizedPlan().collectLeaves()
        if leaves.size() != 1:
            return None
        return int(leaves.apply(0).relation().location().allFiles().size())
    except Exception:  # noqa: BLE001 - not a file source relation, or a Spark without these classes
        return None


def _session_setting(conf: Any, key: str) -> str | None:
    """A Spark setting's value in the session, its registered default when not set, None when this
    Spark has no such setting (``conf.get(key, default)`` would give ``default`` whenever the
    session has not set the key, not the setting's own default)."""
    try:
        return str(conf.get(key)).lower()
    except Exception:  # noqa: BLE001 - an unknown key: Py4J's or Spark Connect's NoSuchElement error
        return None


@dataclass(frozen=True)
class JsonText:
    """The lines of a :func:`read_json_lines` frame: its files, the reader's malformed-record column and
    schema (with that column), and the reader's frame (weakly: this is the frame's entry in
    ``_JSON_TEXT``). The files read as text (:attr:`text`) are planned only when Spark's text source
    must read them: map tasks that read the files themselves need no such plan."""

    spark: Any
    path: str | list[str]
    corrupt: str
    schema: T.StructType
    source_column: str = SOURCE_COL
    block_column: str = "_cep_block"
    reader: Any = None
    """The reader's frame (which lists the same files) when called: a ``weakref.ref`` in ``_JSON_TEXT``,
    a strong reference in the copy a planning holds (:meth:`held`)."""

    @functools.cached_property
    def text(self) -> DataFrame:
        """The files read as text, with the reader frame's reserved columns."""
        return _tagged(self.spark.read.text(self.path), ["value"], self.source_column, self.block_column)

    def held(self, frame: DataFrame) -> JsonText:
        """This twin holding the reader's ``frame`` strongly, for one planning (:func:`apply_rules`).

        The entry of ``_JSON_TEXT`` refers to it weakly (a strong reference from the value would keep
        the key alive for good), and a frame passed as a temporary, ``apply_rules(read_json_lines(...),
        ...)``, has no other reference once the planning has derived its own frames from it: the
        local-files read (:func:`_local_splits`) would find it gone and fall back to Spark's text source."""
        from dataclasses import replace

        return replace(self, reader=lambda: frame)

    def reserved_type(self, name: str) -> T.DataType | None:
        """The type of a reserved column of :attr:`text` (the file, the block), None for another name."""
        return {self.source_column: T.StringType(), self.block_column: T.LongType()}.get(name)


# a DataFrame of read_json_lines -> its lines
_JSON_TEXT: weakref.WeakKeyDictionary[DataFrame, JsonText] = weakref.WeakKeyDictionary()


def read_json_lines(spark: Any, path: str | list[str], schema: Any = None, source_column: str = SOURCE_COL,
                    block_column: str = "_cep_block", corrupt_column: str = "_corrupt_record") -> DataFrame:
    """A static JSON lines input for a backfill, read as ``cep spark backfill`` reads it.

    Spark's JSON reader gives the DataFrame (``schema``: a ``StructType`` or DDL; None infers it from
    the files), with each row's file in ``source_column`` and its file block's offset in
    ``block_column`` (pass both as :attr:`SparkRunConfig.source_column` and
    :attr:`SparkRunConfig.arrival_columns`). When :func:`apply_rules` runs its rules in key-set
    groups and the schema is flat, the map tasks read the same files as text and decode the lines
    with the engine's decoder instead of Spark's reader (docs/spark.md, "Engine-decoded JSON lines"):
    the same rows, a third of the CPU. Any other use of the DataFrame reads it with Spark's reader.
    """
    # the reader's malformed-record column is the one named here, not the session's
    # (spark.sql.columnNameOfCorruptRecord): the engine's decoder fills this one
    read = spark.read.option("columnNameOfCorruptRecord", corrupt_column)
    if schema is None:
        schema = read.json(path).schema
    elif isinstance(schema, str):
        schema = _ddl_schema(spark, schema)
    if corrupt_column not in schema.fieldNames():
        schema = T.StructType(schema.fields + [T.StructField(corrupt_column, T.StringType(), True)])
    frame = _tagged(read.schema(schema).json(path), schema.fieldNames(), source_column, block_column)
    _JSON_TEXT[frame] = JsonText(spark, path, corrupt_column, schema, source_column, block_column, weakref.ref(frame))
    return frame


def _tagged(df: DataFrame, columns: list[str], source_column: str, block_column: str) -> DataFrame:
    """``df`` (whose columns are ``columns``) with each row's file and file block's offset, in one
    projection; a column of either name is replaced, as ``withColumn`` replaces it."""
    # a clash without case too: a session that matches names without case replaces such a column
    # (withColumn's resolver), where a projection would add a second one of the same name
    names = {c.lower() for c in columns}
    if source_column.lower() in names or block_column.lower() in names or source_column.lower() == block_column.lower():
        return (df.withColumn(source_column, F.col("_metadata.file_path"))  # in turn: the block's name may be the file's
                .withColumn(block_column, F.col("_metadata.file_block_start")))
    # a SQL projection: a third of withColumn's calls into the JVM (planning is a backfill's idle time)
    return df.selectExpr("*", f"_metadata.file_path AS {_q(source_column)}",
                         f"_metadata.file_block_start AS {_q(block_column)}")


_DDL_TYPES = {"string": T.StringType(), "bigint": T.LongType(), "int": T.IntegerType(), "smallint": T.ShortType(),
              "tinyint": T.ByteType(), "double": T.DoubleType(), "boolean": T.BooleanType()}


def _ddl_schema(spark: Any, ddl: str) -> T.StructType:
    """A DDL schema as Spark reads it: a flat one of the decoder's types read here
    (:func:`spark_udf.local_files.flat_ddl`, no call into the JVM), any other by Spark."""
    from spark_udf.local_files import flat_ddl

    fields = flat_ddl(ddl)
    if (fields is None or len({n for n, _ in fields}) != len(fields)
            # a session refusing reserved words as names (FROM, USER...), which the reading here takes
            or _session_setting(spark.conf, "spark.sql.ansi.enforceReservedKeywords") == "true"):
        return spark.createDataFrame([], ddl).schema
    return T.StructType([T.StructField(n, _DDL_TYPES[t], True) for n, t in fields])


def _backfill_partitions(x: DataFrame, cfg: SparkRunConfig, key_sets: int = 1) -> int:
    """The reduce partitions of a key-set backfill (:attr:`SparkRunConfig.backfill_partitions`)."""
    from spark_udf.backfill import reduce_partitions

    n = cfg.backfill_partitions
    if n == 0:
        return max(1, int(x.sparkSession.conf.get("spark.sql.shuffle.partitions", "4") or 4))
    if n is not None:
        return n
    try:
        cores = x.sparkSession.sparkContext.defaultParallelism
    except Exception:  # a Spark Connect session has no SparkContext: its shuffle partitions
        cores = max(1, int(x.sparkSession.conf.get("spark.sql.shuffle.partitions", "4") or 4) // 4)
    return reduce_partitions(cores, _input_bytes(x), key_sets)


def _input_bytes(x: DataFrame) -> int | None:
    """The input's size as Spark's optimizer estimates it (a file source: its files' bytes), or None
    when Spark does not know it (its default estimate) or the session cannot say (Spark Connect)."""
    try:
        size = int(str(x._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
        unknown = int(str(x.sparkSession.conf.get("spark.sql.defaultSizeInBytes", str(2**63 - 1))))
    except Exception:  # noqa: BLE001 - no JVM plan to ask (Spark Connect) or no statistics
        return None
    return None if size <= 0 or size >= unknown else size


def _any_stream(streams: list[str]) -> Column:
    """Rows of any of these input streams."""
    return F.col(STREAM_COL).isin(*streams)


def _assign_groups(x: DataFrame, keyed: list[Any], kinds: list[Any], cfg: SparkRunConfig,
                   prior_cols: dict[tuple[str, ...], str] | None, corrupt: bool, layout: InputLayout,
                   extra: list[tuple[int, Column, Column | None]],
                   bindings: dict[str, Any] | None = None, changelogs: list[str] | None = None,
                   views: list[Any] | None = None) -> DataFrame:
    """Add the group key (rule, bucket); one row per rule (or staged kind) that reads the row.

    A rule whose FROM names one of the input streams reads that stream's rows; ``extra`` are
    the staged stateless kinds' groups: (group key, bucket, which rows or None for all). A
    malformed record goes once, to bucket -1 of the first group, which reports it.
    """
    bindings = bindings or {}
    live = list(changelogs or [])
    # tables kept by key: some rows reach groups as their change's time only, tagged in "s"
    tagged = any(b.keyed for b in bindings.values())

    def struct(*fields: Column, tick: str | None = None) -> Column:
        if tagged:
            fields = (*fields, (F.lit(tick) if tick else F.lit(None).cast("string")).alias("s"))
        return F.struct(*fields)

    entries: list[tuple[Column, Column | None]] = []
    for k, r in zip(kinds, keyed):
        keys = _bucket_columns(k, r)
        binding = bindings.get(r.name)
        hashed = _hash_columns(k, r, binding)
        bucket = (
            F.pmod(F.xxhash64(*[F.col(_q(c)) for c in hashed]), F.lit(cfg.buckets)).cast("int") if hashed
            else F.lit(0)
        )
        prior = [F.col(prior_cols[tuple(keys)]).alias("p")] if prior_cols is not None else []
        route = layout.route(r)
        # a changelog's rows go to its table, not to rules that read every stream (as embedded)
        reads = (F.col(STREAM_COL) == F.lit(route) if route is not None
                 else ~_any_stream(live) if live else None)
        entries.append((struct(F.lit(rule_key(r.name)).alias("r"), bucket.alias("b"), *prior), reads))
        if binding is None or binding.static:
            continue
        if hasattr(binding, "views"):  # a view's replica in every group: every change row of its tables
            for b in range(cfg.buckets if hashed else 1):
                entries.append((struct(F.lit(rule_key(r.name)).alias("r"), F.lit(b).alias("b"), *prior),
                                _any_stream(list(binding.streams))))
            continue
        spec = binding.spec
        changes = F.col(STREAM_COL) == F.lit(spec.stream)
        if binding.keyed:
            # kept by key: a change goes to its key's group (hashed as the events' join columns are),
            # and its time to every group, whose table watermark is over every key
            own = F.pmod(F.xxhash64(*[F.col(_q(c)) for c in spec.primary_key]), F.lit(cfg.buckets)).cast("int")
            entries.append((struct(F.lit(rule_key(r.name)).alias("r"), own.alias("b"), *prior), changes))
            with_key = changes
            for c in spec.primary_key:  # a change without its key is an error row of its group alone
                with_key = with_key & F.col(_q(c)).isNotNull()
            for b in range(cfg.buckets):
                entries.append((struct(F.lit(rule_key(r.name)).alias("r"), F.lit(b).alias("b"), *prior,
                                       tick=tick_stream(spec)), with_key))
        else:
            # every group of a joined rule gets every change row once: its replica of the table
            for b in range(cfg.buckets if hashed else 1):
                entries.append((struct(F.lit(rule_key(r.name)).alias("r"), F.lit(b).alias("b"), *prior), changes))
    for v in views or []:  # a view's changelog group gets every change row of its tables
        prior = [F.lit(None).cast("bigint").alias("p")] if prior_cols is not None else []
        entries.append((struct(F.lit(rule_key(v.name)).alias("r"), F.lit(0).alias("b"), *prior),
                        _any_stream(list(v.binding.streams))))
    for group, bucket, reads in extra:
        entries.append((struct(F.lit(group).alias("r"), bucket.alias("b")), reads))
    drop = list(prior_cols.values()) if prior_cols else []
    if len(entries) == 1 and not corrupt:
        one, reads = entries[0]
        if reads is not None:
            x = x.where(reads)
        x = x.withColumn("_cep_g", one)
    else:
        groups = F.array(*[g if reads is None else F.when(reads, g) for g, reads in entries])
        if any(reads is not None for _, reads in entries):
            groups = F.array_compact(groups)
        if corrupt:
            first = rule_key(keyed[0].name) if keyed else extra[0][0]
            bad = [F.lit(first).alias("r"), F.lit(CORRUPT_BUCKET).alias("b")]
            if prior_cols is not None:
                bad.append(F.lit(None).cast("bigint").alias("p"))
            groups = F.when(F.col(CORRUPT_COL).isNotNull(), F.array(struct(*bad))).otherwise(groups)
        x = x.withColumn("_cep_g", F.explode(groups))
    if tagged:
        x = x.withColumn(STREAM_COL, F.coalesce(F.col("_cep_g.s"), F.col(STREAM_COL)))
    x = x.withColumn(GROUP_RULE, F.col("_cep_g.r")).withColumn(GROUP_BUCKET, F.col("_cep_g.b"))
    if prior_cols is not None:
        x = x.withColumn(PRIOR_COL, F.col("_cep_g.p"))
    return x.drop("_cep_g", *drop)


# ------------------------------------------------------------------ progress counts


class ProgressCounts:
    """Adds up the ``cep`` observed metrics and input rows of a streaming query's progress.

    Call :meth:`merge_recent` with the query now and then (Spark keeps the last
    ``spark.sql.streaming.numRecentProgressUpdates`` = 100 progress reports) and once after it
    ends; every micro-batch counts once. Polling avoids a Python listener, whose py4j callback
    server can fail noisily while the JVM shuts down.
    """

    def __init__(self, rule_names: list[str]):
        self.rule_names = rule_names
        self.seen: set[tuple[str, int]] = set()
        self.totals: dict[str, int] = {"batches": 0, "input_rows": 0, "matches": 0, "late": 0, "errors": 0,
                                       "timeouts": 0}
        self.per_rule: dict[str, int] = {r: 0 for r in rule_names}

    def add(self, run_id: str, batch_id: int, input_rows: int, metrics: Any) -> None:
        if (run_id, batch_id) in self.seen:
            return
        self.seen.add((run_id, batch_id))
        self.totals["batches"] += 1
        self.totals["input_rows"] += int(input_rows or 0)
        if metrics is not None:
            d = metrics.asDict() if hasattr(metrics, "asDict") else dict(metrics)
            for k in ("matches", "late", "errors", "timeouts"):
                self.totals[k] += int(d.get(k) or 0)
            for i, r in enumerate(self.rule_names):
                self.per_rule[r] += int(d.get(f"matches_{i}") or 0)

    def merge_recent(self, query: Any) -> None:
        for p in query.recentProgress:
            metrics = (p.get("observedMetrics") or {}).get(METRICS_NAME)
            self.add(str(p["runId"]), p["batchId"], p["numInputRows"], metrics)


def _bucket_columns(kind: Any, rule: Any) -> tuple[str, ...]:
    """The key columns a keyed rule's events are bucketed by: its key's event columns (not a joined one)."""
    from spark_udf.tables import bucket_columns, rule_join

    return bucket_columns(tuple(kind.key_columns(rule)), rule_join(rule))


def _hash_columns(kind: Any, rule: Any, binding: Any) -> tuple[str, ...]:
    """The columns a keyed rule's events are hashed into buckets by: the join's event columns when its
    table is kept by key (its changes are hashed by the same values), else :func:`_bucket_columns`."""
    if binding is not None and binding.keyed:
        from spark_udf.tables import keyed_columns, rule_join

        cols = keyed_columns(tuple(kind.key_columns(rule)), rule_join(rule), binding.spec)
        assert cols is not None
        return cols
    return _bucket_columns(kind, rule)


def _check_views(views: Mapping[str, Any], tables: Mapping[str, Any], rules: list[Any], streams: tuple[str, ...]) -> None:
    """Refuse, before any work, the views the Spark plan cannot hold (docs/spark.md, "Views on Spark")."""
    from spark_udf.views import needed

    names = {r.name for r in rules}
    if not any(is_keyed(r) for r in rules):
        raise CepError(f"view {next(iter(views))!r}: a view runs on Spark in the keyed stage, beside a pattern, "
                       "analytics or joined search rule; the rule file has none (run it in the embedded engine, cep run)")
    for name in views:
        if name in names:
            raise CepError(f"view {name!r}: a rule has the same name; on Spark a view's changelog rows carry the "
                           "view's name in 'rule': rename one of them")
        used, _ = needed(name, dict(views), dict(tables))
        if not any(tables[t].stream in streams for t in used):
            raise CepError(f"view {name!r}: none of its tables' changelogs ({', '.join(tables[t].stream for t in used)}) "
                           "is among the named inputs; on Spark a view of snapshot files alone is not run (its rows "
                           "would never change: run it in the embedded engine, cep run, or name a changelog input)")


def _view_rules(views: Mapping[str, Any], tables: Mapping[str, Any], layout: InputLayout,
                rules: list[Any]) -> list[Any]:
    """Each view's changelog group, as a rule-like record of the stage (file order)."""
    if not views:
        return []
    from spark_udf.tables import rule_join
    from spark_udf.views import view_bindings, view_rule

    direct = {str(rule_join(r).table) for r in rules if is_keyed(r) and rule_join(r) is not None}
    bound = view_bindings(dict(views), dict(tables), lambda spec: spec.stream in layout.streams, direct)
    return [view_rule(name, b) for name, b in bound.items()]


def _table_bindings(rules: list[Any], tables: Mapping[str, Any], layout: InputLayout,
                    types: Mapping[str, str] | None = None, views: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Per joined keyed rule, its table's replica: the snapshot file read here, once.

    A table is fed by its changelog when its ``from`` is one of the named inputs; otherwise it is
    static (its snapshot), and joins do not wait, as ``cep run`` without the changelog among its
    inputs (one DataFrame is not routed by its ``stream`` column, see *Named input streams*).
    """
    from spark_udf.tables import keyed_columns, rule_join, table_bindings

    def by_key(rule: Any, spec: Any) -> bool:
        # kept by key when the rule is keyed by the join's columns and they hash as the table's key does
        cols = keyed_columns(tuple(KEYED_KINDS[kind_of(rule)].key_columns(rule)), rule_join(rule), spec)
        return (cols is not None and types is not None
                and all(types.get(e) is not None and types.get(e) == types.get(k) for e, k in zip(cols, spec.primary_key)))

    live = lambda spec: spec.stream in layout.streams  # noqa: E731
    views = dict(views or {})
    on_tables = [r for r in rules if not (rule_join(r) is not None and str(rule_join(r).table) in views)]
    out: dict[str, Any] = dict(table_bindings(on_tables, dict(tables), live, by_key))
    if views:  # a rule joining a view: each of its groups keeps the view's tables and the view
        from dataclasses import replace

        from spark_udf.views import view_bindings

        bound = view_bindings(views, dict(tables), live, set(tables))  # reports nothing: the view's group does
        for r in rules:
            join = rule_join(r) if is_keyed(r) else None
            if join is not None and str(join.table) in views:
                out[r.name] = replace(bound[str(join.table)], report=())
    return out
