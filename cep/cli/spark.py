"""The ``cep spark`` commands: run a rule file as a Spark Structured Streaming job, or backfill.

``cep spark run`` reads a stream (files by default; any Spark source by ``--format`` and
``--source-option``), runs every rule as keyed stateful operators and writes every output
(complex events, late events, errors) to one file sink partitioned by ``output`` and ``rule``,
exactly once, with its checkpoint. ``cep spark backfill`` runs the same rules over a static
dataset and writes the same layout. ``--input NAME=PATH`` (repeatable) names input streams,
as for ``cep run``: a rule whose FROM names one of them reads that stream only. ``cep spark
cat`` prints an output's committed rows as JSON lines without Spark. Spark is imported only
when a job runs, so the rest of ``cep`` never starts a JVM; a job's failure is one line
(:mod:`cep.cli.spark_failures`) and exit 3.

Wired into ``cep/cli/command.py`` with::

    from cep.cli import spark
    spark.add_arguments(sub)                     # in build_parser()
    if args.command == "spark": return spark.run(args)   # in main()
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import traceback
import warnings
from typing import Any

from cep.cli.spark_failures import check_master, describe_failure, first_cause
from patterns.errors import count_noun

__all__ = ["add_arguments", "run", "main"]

EXIT_OK, EXIT_USAGE, EXIT_RUNTIME = 0, 2, 3
FILE_FORMATS = ("json", "parquet", "csv")
SOURCE = "_cep_source"  # where a row came from: spark_udf copies it onto late and error rows
BLOCK = "_cep_block"  # the offset of the row's file block


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("rules", help="rule file (.yaml/.yml or .sql)")
    p.add_argument("--queries-root", action="append", metavar="DIR",
                   help="a folder whose files a search rule's queries_file may name, besides the rule file's "
                   "own folder and those in $CEP_QUERIES_ROOTS (repeat for several; docs/reliability.md)")
    p.add_argument("--input", "-i", action="append", required=True, metavar="[NAME=]PATH",
                   help="input path (a directory of files, a file or a glob; for Kafka, leave it out); repeat "
                   "as NAME=PATH for several named streams, as for 'cep run': every row carries 'stream': NAME "
                   "and a rule whose FROM names one of them reads that stream's rows only")
    p.add_argument("--format", default="json", metavar="FORMAT",
                   help="input format: json (JSON lines, the default), parquet, csv, or any Spark source "
                   "such as kafka (needs --packages and --schema: the message value is parsed as JSON)")
    p.add_argument("--schema", metavar="DDL",
                   help="input schema as Spark DDL, e.g. 'sym string, ts long, px double' (default: inferred "
                   "from the files present; a stream must have files to infer from)")
    p.add_argument("--source-option", action="append", default=[], metavar="K=V",
                   help="option for the Spark source (repeatable), e.g. maxFilesPerTrigger=1 or "
                   "kafka.bootstrap.servers=host:9092")
    p.add_argument("--output", "-o", required=True, help="output directory (a Spark file sink)")
    p.add_argument("--output-format", choices=("json", "parquet"), default="json",
                   help="output file format (default json)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--buckets", type=int, default=64,
                   help="hash buckets per rule: the stateful operator's groups (default 64; fixed by a "
                   "checkpoint's first run)")
    p.add_argument("--search-buckets", type=int, default=8, metavar="N",
                   help="streams: groups the search rules' documents are hashed into in the stateful stage "
                   "(default 8; they keep no state, so it may change between runs)")
    p.add_argument("--shuffle-partitions", type=int, default=None, metavar="N",
                   help="spark.sql.shuffle.partitions (default 4; fixed by a checkpoint's first run)")
    p.add_argument("--packages", action="append", default=[], metavar="COORDS",
                   help="Maven coordinates for spark.jars.packages, e.g. "
                   "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 (repeatable)")
    p.add_argument("--conf", action="append", default=[], metavar="K=V", help="extra Spark setting (repeatable)")
    p.add_argument("--ship-engine", action=argparse.BooleanOptionalAction, default=None,
                   help="add the engine's own packages (cep, patterns, sketches, spark_udf) to the executors as a "
                   "zip of Python files (default: on unless --master is local; --no-ship-engine when the "
                   "executors' Python has cep-engine installed)")
    p.add_argument("--quiet", "-q", action="store_true", help="no summary on stderr")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="Spark's log at warning level, and the whole error (with Spark's stack) when the job fails")


def add_arguments(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``spark`` (with ``run`` and ``backfill``) to the ``cep`` command's subparsers."""
    sp = subparsers.add_parser(
        "spark", help="run rule files on Spark: streaming jobs and backfills",
        description="Run a rule file on Apache Spark: 'run' starts a Structured Streaming job with a "
        "checkpoint; 'backfill' processes a static dataset and gives the rows 'cep run' gives over it: "
        "a stream's rows, plus what the end of the input flushes (a stream has no end).")
    ssub = sp.add_subparsers(dest="spark_command", metavar="SPARK_COMMAND")
    r = ssub.add_parser(
        "run", help="run rules over a stream (exactly-once output, restartable from --checkpoint)",
        description="Run every rule as a keyed stateful operator over a stream and write complex events, "
        "late events and errors to OUTPUT (partitioned by output=match|late|error and rule). Stop and "
        "start again with the same --checkpoint to continue where it stopped.")
    _common(r)
    r.add_argument("--checkpoint", required=True, help="checkpoint directory (one per query and output)")
    r.add_argument("--trigger", default="available-now",
                   help="available-now (process what is there, then stop; the default), once, or "
                   "processing-time=10s (a micro-batch every 10 s until interrupted)")
    r.add_argument("--max-files-per-trigger", type=int, metavar="N", help="file sources: files per micro-batch")
    r.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="stop the query after this many seconds, between two micro-batches "
                   "(processing-time triggers)")
    r.add_argument("--on-rule-change", choices=("fail", "reset"), default="fail",
                   help="when a changed rule cannot use its saved state: fail (the default) or reset it")
    b = ssub.add_parser(
        "backfill", help="run rules over a static dataset (the rows 'cep run' gives)",
        description="Run every rule over a static dataset with Spark and write the same layout as "
        "'cep spark run'. Late events are judged in the input's row order and the end of the input "
        "flushes what is still open, as 'cep run' does (a stream never ends, so never flushes).")
    _common(b)
    b.add_argument("--mode", choices=("error", "overwrite", "append"), default="error",
                   help="when OUTPUT exists: error (the default), overwrite or append")
    c = ssub.add_parser(
        "cat", help="print the committed rows of a 'cep spark' output as JSON lines (no Spark needed)",
        description="Print the rows of OUTPUT (the folder of 'cep spark run' or 'cep spark backfill') as JSON "
        "lines on stdout, each with its 'output' and 'rule'. Only committed files are read: a stream's part "
        "files are those its _spark_metadata log lists (a micro-batch that died before its commit leaves part "
        "files that its rerun writes again, so 'cat OUTPUT/*/*/*.json' shows rows twice); a backfill's once "
        "_SUCCESS is there. Reads JSON and Parquet outputs in local folders, without starting a JVM.")
    c.add_argument("output", metavar="OUTPUT", help="the output folder of 'cep spark run' or 'cep spark backfill'")
    c.add_argument("--output", dest="outputs", action="append", default=[], metavar="KIND",
                   choices=("match", "late", "error", "timeout"),
                   help="only these outputs: match, late, error or timeout (repeatable; default: all)")
    c.add_argument("--rule", dest="rules", action="append", default=[], metavar="RULE",
                   help="only the rows of this rule (repeatable; default: all)")
    st = ssub.add_parser(
        "state", help="show what a streaming query's checkpoint holds, per rule and key",
        description="Read the keyed stage's state of a 'cep spark run' checkpoint with Spark's state data source "
        "(spark.read.format('statestore')) at its last committed micro-batch, and show it as 'cep state' shows a "
        "durable run's: per rule and key the live partial matches with their rows, buffered events, open windows "
        "with their aggregates and sketch sizes; with the query's watermark and the sources' offsets. The "
        "checkpoint keeps no rule text, so --rules names the rule file the query runs (docs/spark.md, "
        "'Reading the state').")
    st.add_argument("--checkpoint", required=True, help="the --checkpoint of 'cep spark run'")
    st.add_argument("--rules", required=True, metavar="FILE", help="the rule file the query runs")
    st.add_argument("--queries-root", action="append", metavar="DIR",
                    help="a folder a search rule's queries_file may name (as for 'cep spark run')")
    st.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    st.add_argument("--verbose", "-v", action="store_true", help="Spark's log at warning level, and the whole error")
    from cep.cli.state import add_view_options

    add_view_options(st)
    sp.set_defaults(_spark_parser=sp)
    return sp


def _state(args: Any) -> int:
    """``cep spark state``: the checkpoint's state through Spark's state data source, shown as ``cep state``."""
    from cep.cli.state import print_view
    from cep.state_view import StateViewError
    from patterns.errors import RuleErrors
    from patterns.files import command_line_roots
    from patterns.rules import load_rules

    try:
        rules = load_rules(args.rules, queries_roots=command_line_roots(args.queries_root))
    except RuleErrors as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    from spark_udf.state_reader import offset_log

    try:
        offset_log(args.checkpoint)  # not a checkpoint: said before the JVM starts
    except StateViewError as e:
        print(f"cep spark state: {e}", file=sys.stderr)
        return e.exit_code
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\..*")
    try:
        from pyspark import SparkContext

        from spark_udf.session import DEFAULT_SHUFFLE_PARTITIONS, local_session

        ours = SparkContext._active_spark_context is None
        spark = local_session(args.master, DEFAULT_SHUFFLE_PARTITIONS, verbose=args.verbose)
    except Exception as e:  # noqa: BLE001 - a JVM that does not start
        return _fail("state", "starting Spark", e, args.verbose)
    from spark_udf.state_reader import spark_state_view

    try:
        view = spark_state_view(spark, args.checkpoint, rules)
    except StateViewError as e:
        print(f"cep spark state: {e}", file=sys.stderr)
        return e.exit_code
    except Exception as e:  # noqa: BLE001 - Spark's state reader failed
        if not _from_spark(e):
            raise
        return _fail("state", "reading the checkpoint's state", e, args.verbose)
    finally:
        if ours:
            try:
                spark.stop()
            except Exception:  # noqa: BLE001 - a JVM that is already gone
                pass
    return print_view(view, args, "cep spark state")


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise ValueError(f"{what} {item!r}: expected KEY=VALUE")
        out[k.strip()] = v
    return out


_UNITS = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "min": "minutes", "h": "hours"}


def _trigger(text: str) -> str:
    """``processing-time=10s`` -> ``processing-time=10 seconds`` (Spark's interval words)."""
    t = text.strip().lower()
    if t.startswith("processing-time="):
        value = t.split("=", 1)[1].strip()
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]+)", value)
        if m and m.group(2) in _UNITS:
            value = f"{m.group(1)} {_UNITS[m.group(2)]}"
        elif re.fullmatch(r"\d+", value):
            value = f"{value} seconds"
        return f"processing-time={value}"
    if t in ("available-now", "availablenow", "once"):
        return t
    raise ValueError(f"--trigger {text!r}: expected available-now, once or processing-time=10s")


def _inputs(specs: list[str]) -> list[tuple[str | None, str]]:
    """``--input`` values as (stream name or None, path); a name given twice is refused."""
    from cep.cli.inputs import _parse_inputs

    inputs = _parse_inputs(specs)
    names = [n for n, _ in inputs if n]
    for n in names:
        if names.count(n) > 1:
            raise ValueError(f"--input {n}=... is given {names.count(n)} times; give each input its own name, or one "
                             "path per name (a directory or a glob reads several files)")
    if len(inputs) > 1:  # as 'cep run' tags the rows of unnamed inputs it merges
        inputs = [(n or f"input{i}", p) for i, (n, p) in enumerate(inputs)]
    return inputs


def _read(spark: Any, args: Any, streaming: bool, path: str | None = None) -> tuple[Any, str | None]:
    """One input's DataFrame, and the column naming each row's source (file or Kafka offset)."""
    from pyspark.sql import functions as F

    fmt = args.format.lower()
    opts = _pairs(args.source_option, "--source-option")
    if streaming and getattr(args, "max_files_per_trigger", None):
        opts.setdefault("maxFilesPerTrigger", str(args.max_files_per_trigger))
    if fmt == "csv":
        opts.setdefault("header", "true")
    reader = spark.readStream if streaming else spark.read
    if fmt == "kafka":
        if not args.schema:
            raise ValueError("--format kafka needs --schema: the DDL of the JSON message values")
        schema = _with_corrupt(spark.createDataFrame([], args.schema).schema)
        raw = reader.format("kafka").options(**opts).load()
        parsed = raw.select(
            F.from_json(F.col("value").cast("string"), schema, {"mode": "PERMISSIVE"}).alias("e"),
            F.concat_ws("", F.col("topic"), F.lit("/"), F.col("partition").cast("string"), F.lit("@"),
                        F.col("offset").cast("string")).alias(SOURCE),
        )
        return parsed.select("e.*", SOURCE), SOURCE
    if args.schema:
        schema = spark.createDataFrame([], args.schema).schema
    elif fmt in FILE_FORMATS:
        infer = dict(opts)
        infer.pop("maxFilesPerTrigger", None)
        if fmt == "csv":
            infer.setdefault("inferSchema", "true")
        try:
            schema = spark.read.format(fmt).options(**infer).load(path).schema
        except Exception as e:  # noqa: BLE001 - Spark raises AnalysisException and friends
            if "PATH_NOT_FOUND" in str(e):
                raise  # a Spark failure with its own advice, not a schema to give
            raise ValueError(
                f"cannot infer the schema of {path!r} ({str(e).splitlines()[0]}); pass --schema"
            ) from None
    else:
        schema = None
    if fmt in ("json", "csv") and schema is not None:
        schema = _with_corrupt(schema)
    if fmt == "json" and not streaming and not opts and path:
        # the map tasks of a key-set backfill decode the lines with the engine (docs/spark.md)
        from spark_udf.api import read_json_lines

        return read_json_lines(spark, path, schema, SOURCE, BLOCK), SOURCE
    r = reader.format(fmt).options(**opts)
    if schema is not None:
        r = r.schema(schema)
    df = r.load(path) if path else r.load()
    if fmt in FILE_FORMATS:
        df = df.withColumn(SOURCE, F.col("_metadata.file_path"))
        if not streaming:  # arrival order of a backfill: files by path, blocks by offset
            df = df.withColumn(BLOCK, F.col("_metadata.file_block_start"))
        return df, SOURCE
    return df, None


def _with_corrupt(schema: Any) -> Any:
    from pyspark.sql import types as T

    if "_corrupt_record" in schema.fieldNames():
        return schema
    return T.StructType(schema.fields + [T.StructField("_corrupt_record", T.StringType(), True)])


_error_text = first_cause  # the name earlier tests and callers use


def _stop_between_batches(query: Any, patience: float = 600.0) -> None:
    """Stop once no micro-batch is running (a stop mid-batch redoes that batch on restart)."""
    end = time.monotonic() + patience
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < end:
        time.sleep(0.1)
    query.stop()


class _Clock:
    """Wall time of a command and its phases, for the summary line."""

    def __init__(self) -> None:
        self.start = self.mark = time.monotonic()
        self.phases: list[tuple[str, float]] = []

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.phases.append((name, now - self.mark))
        self.mark = now

    def summary(self) -> str:
        """``"72.1 s (Spark start 12.0 s, planning 3.1 s, streaming 57.0 s)"``."""
        parts = ", ".join(f"{name} {secs:.1f} s" for name, secs in self.phases)
        return f"{time.monotonic() - self.start:.1f} s" + (f" ({parts})" if parts else "")


_GLOB = re.compile(r"[*?\[{]")


def _missing_input(path: str | None) -> bool:
    """A local input path (no scheme, no glob) that does not exist: said before Spark starts."""
    if not path or _GLOB.search(path):
        return False
    if path.startswith("file:"):
        from urllib.parse import unquote, urlparse

        path = unquote(urlparse(path).path)
    elif "://" in path:
        return False  # Spark's file systems (hdfs, s3a, ...) answer for themselves
    return not os.path.exists(path)


def _from_spark(e: BaseException) -> bool:
    """Raised by PySpark or Py4J (PySpark's ValueError subclasses included), not by our own checks."""
    return type(e).__module__.split(".")[0] in ("pyspark", "py4j")


def _fail(cmd: str, what: str, e: BaseException, verbose: bool) -> int:
    """Print a Spark failure as one line (the whole error first with --verbose); exit 3."""
    if verbose:
        traceback.print_exception(e, file=sys.stderr)
    print(f"cep spark {cmd}: {describe_failure(e, what)}", file=sys.stderr)
    return EXIT_RUNTIME


def _cat(args: Any) -> int:
    from spark_udf.sink_log import NotASinkError, SinkLogError, read_rows

    out = sys.stdout.buffer
    try:
        for line in read_rows(args.output, args.outputs, args.rules):
            out.write(line + b"\n")
        out.flush()
    except NotASinkError as e:
        print(f"cep spark cat: {e}", file=sys.stderr)
        return EXIT_USAGE
    except SinkLogError as e:
        print(f"cep spark cat: {e}", file=sys.stderr)
        return EXIT_RUNTIME
    except OSError as e:
        if isinstance(e, BrokenPipeError):
            raise
        print(f"cep spark cat: {e}", file=sys.stderr)
        return EXIT_RUNTIME
    return EXIT_OK


def run(args: Any) -> int:
    """Run ``cep spark run``, ``backfill``, ``cat`` or ``state``; return the exit code."""
    clock = _Clock()
    cmd = getattr(args, "spark_command", None)
    if cmd == "cat":
        return _cat(args)
    if cmd == "state":
        return _state(args)
    if cmd not in ("run", "backfill"):
        parser = getattr(args, "_spark_parser", None)
        if parser is not None:
            parser.print_help(sys.stderr)
        return EXIT_USAGE
    local_out = args.output[len("file:"):] if args.output.startswith("file:") else args.output
    if cmd == "backfill" and args.mode == "error" and "://" not in args.output and os.path.exists(local_out):
        # said before Spark starts (half a minute), not after, and in this command's own words
        print(f"cep spark backfill: --output {args.output!r} already exists; pass --mode overwrite to "
              "replace it or --mode append to add to it", file=sys.stderr)
        return EXIT_USAGE
    from patterns.errors import RuleErrors
    from patterns.files import command_line_roots
    from patterns.rules import load_rules

    try:
        rules = load_rules(args.rules, queries_roots=command_line_roots(args.queries_root))
    except RuleErrors as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    try:
        trigger = _trigger(args.trigger) if cmd == "run" else None
        conf = _pairs(args.conf, "--conf")
        _pairs(args.source_option, "--source-option")
        inputs = _inputs(args.input)
        bad_master = check_master(args.master)
        if bad_master:
            raise ValueError(bad_master)
        for flag, value in (("--buckets", args.buckets), ("--search-buckets", args.search_buckets)):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1, found {value}")
        if args.format.lower() in FILE_FORMATS:  # the options first, then the file system
            for _, path in inputs:
                if _missing_input(path):
                    raise ValueError(f"--input {path!r} does not exist")
    except ValueError as e:
        print(f"cep spark {cmd}: {e}", file=sys.stderr)
        return EXIT_USAGE

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\..*")
    try:
        from pyspark import SparkContext

        from spark_udf.session import DEFAULT_SHUFFLE_PARTITIONS, local_session

        ours = SparkContext._active_spark_context is None  # a session this command starts, it stops
        spark = local_session(args.master, args.shuffle_partitions or DEFAULT_SHUFFLE_PARTITIONS,
                              packages=args.packages, conf=conf, ship_engine=args.ship_engine,
                              verbose=args.verbose, batch=(cmd == "backfill"),
                              engine_reads=cmd == "backfill" and _engine_reads(args, rules, inputs, conf))
    except Exception as e:  # noqa: BLE001 - a JVM that does not start, a refused setting
        return _fail(cmd, "starting Spark", e, args.verbose)
    clock.lap("Spark start")
    try:
        status, summary = _job(cmd, args, spark, rules, inputs, trigger, clock)
    finally:
        if ours:  # inside the time the summary reports: on a cluster, releasing the executors takes a while
            try:
                spark.stop()
            except Exception:  # noqa: BLE001 - a JVM that is already gone
                pass
    if summary is not None and not args.quiet:
        if ours:
            clock.lap("Spark stop")
        head, lines = summary
        print(f"cep spark {cmd}: {head} in {clock.summary()} -> {args.output}", file=sys.stderr)
        for line in lines:
            print(line, file=sys.stderr)
    return status


def _engine_reads(args: Any, rules: Any, inputs: list[tuple[str | None, str]], conf: dict[str, str]) -> bool:
    """Whether the backfill's map tasks will read and decode the input themselves (the JVM's options
    depend on it: :data:`spark_udf.session.ENGINE_BATCH_JVM_OPTIONS`)."""
    from spark_udf.local_files import engine_reads_input

    return engine_reads_input(rules, inputs, args.format, args.schema, _pairs(args.source_option, "--source-option"),
                              args.master, conf)


def _late_share(counts: dict[str, int], names: list[str], frames: dict[str, Any]) -> str | None:
    """``cep run``'s warning for a backfill most of whose events were late (an unsorted input).

    The input rows are counted (one more scan) only when some rule found late events; a rule
    is measured against every input row, a share no larger than ``cep run``'s for a rule that
    reads one of several named inputs.
    """
    from cep.engine import late_share_warning

    late = [(name, counts.get(f"late_{i}", 0)) for i, name in enumerate(names)]
    if not any(n for _, n in late):
        return None
    rows = sum(f.count() for f in frames.values())
    return late_share_warning((f"rule {name!r}", n, rows) for name, n in late)


def _job(cmd: str, args: Any, spark: Any, rules: Any, inputs: list[tuple[str | None, str]], trigger: str | None,
         clock: _Clock) -> tuple[int, tuple[str, list[str]] | None]:
    """Plan and run the job on ``spark``: the exit code, and the summary (None after a failure)."""
    from cep.engine import timeouts_note
    from patterns.errors import CepError
    from spark_udf.api import ProgressCounts, SparkRunConfig, apply_rules

    frames: dict[str, Any] = {}
    try:
        for name, path in inputs:
            frame, source_col = _read(spark, args, streaming=(cmd == "run"), path=path)
            frames[name or ""] = frame
    except ValueError as e:
        if _from_spark(e):
            return _fail(cmd, "reading the input", e, args.verbose), None
        print(f"cep spark {cmd}: {e}", file=sys.stderr)
        return EXIT_USAGE, None
    except Exception as e:  # noqa: BLE001 - a path Spark cannot find, a source it cannot load
        return _fail(cmd, "reading the input", e, args.verbose), None
    try:
        source: Any = frame if len(inputs) == 1 and inputs[0][0] is None else frames
        arrival = (SOURCE, BLOCK) if cmd == "backfill" and source_col == SOURCE and args.format in FILE_FORMATS else ()
        cfg = SparkRunConfig(buckets=args.buckets, search_buckets=args.search_buckets, source_column=source_col,
                             arrival_columns=arrival, on_rule_change=getattr(args, "on_rule_change", "fail"))
        result = apply_rules(source, rules, cfg)  # a backfill in rule groups runs its arrival-order pass here
    except Exception as e:  # noqa: BLE001 - Spark's exceptions carry the Python worker's error
        if isinstance(e, (ValueError, CepError)) and not _from_spark(e):
            print(f"cep spark {cmd}: {e}", file=sys.stderr)  # the rules or options do not fit the input
            return EXIT_USAGE, None
        what = "the arrival-order pass" if cmd == "backfill" else "planning the query"
        return _fail(cmd, what, e, args.verbose), None
    # key-set groups find arrival order in the backfill job itself (one scan): planning runs no job
    rule_groups = getattr(result, "keyed_groups", "rule") == "rule"
    clock.lap("planning and arrival-order pass" if cmd == "backfill" and rule_groups else "planning")
    names = [r.name for r in rules]
    if cmd == "backfill":
        from spark_udf.api import time_unit_warnings

        try:
            for w in time_unit_warnings(source, rules):  # the first rows only: one small job, even with --quiet
                print(f"cep spark backfill: {w}", file=sys.stderr)
        except Exception as e:  # noqa: BLE001 - Spark's exceptions carry the Python worker's error
            return _fail(cmd, "reading the first rows", e, args.verbose), None
        try:
            result.write(args.output, args.output_format, mode=args.mode)
            counts = result.counts()
            warning = _late_share(counts, names, frames)
        except Exception as e:  # noqa: BLE001 - Spark's exceptions carry the Python worker's error
            return _fail(cmd, "the backfill job", e, args.verbose), None
        if warning:  # even with --quiet: most of the answer is missing
            print(f"cep spark backfill: {warning}", file=sys.stderr)
        clock.lap("job")
        head = (f"{count_noun(counts['matches'], 'complex event')}, {counts['late']:,} late, "
                f"{count_noun(counts['errors'], 'error')}")
        head += timeouts_note(counts.get("timeouts", 0), True)
        lines = [f"  {name}: {count_noun(counts.get(f'matches_{i}', 0), 'complex event')}" for i, name in enumerate(names)]
        return EXIT_OK, (head, lines)

    progress = ProgressCounts(names)
    query = None
    status = EXIT_OK
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    try:
        query = result.write_stream(args.output, args.checkpoint, format=args.output_format,
                                    trigger=trigger or "available-now")
        while not query.awaitTermination(2):
            progress.merge_recent(query)
            if deadline is not None and time.monotonic() >= deadline:
                _stop_between_batches(query)
                break
    except KeyboardInterrupt:
        if query is not None:
            query.stop()
    except Exception as e:  # noqa: BLE001 - StreamingQueryException and the JVM's errors
        status = _fail(cmd, "the streaming query", e, args.verbose)
    finally:
        if query is not None:
            try:
                progress.merge_recent(query)
            except Exception:  # noqa: BLE001 - the counts of a query whose JVM is gone
                pass
    clock.lap("streaming")
    t = progress.totals
    head = (f"{count_noun(t['batches'], 'micro-batch', 'micro-batches')}, {count_noun(t['input_rows'], 'input row')}, "
            f"{count_noun(t['matches'], 'complex event')}, {t['late']:,} late, {count_noun(t['errors'], 'error')}")
    head += timeouts_note(t["timeouts"], True)
    return status, (head, [f"  {name}: {count_noun(progress.per_rule[name], 'complex event')}" for name in names])


def main(argv: list[str] | None = None) -> int:
    """``python -m cep.cli.spark run|backfill|cat ...`` (the same as ``cep spark ...``)."""
    parser = argparse.ArgumentParser(prog="cep")
    sub = parser.add_subparsers(dest="command")
    add_arguments(sub)
    args = parser.parse_args(["spark", *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
