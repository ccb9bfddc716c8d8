"""The ``cep spark`` commands: run a rule file as a Spark Structured Streaming job, or backfill.

``cep spark run`` reads a stream (files by default; any Spark source by ``--format`` and
``--source-option``), runs every rule as keyed stateful operators and writes every output
(complex events, late events, errors) to one file sink partitioned by ``output`` and ``rule``,
exactly once, with its checkpoint. ``cep spark backfill`` runs the same rules over a static
dataset and writes the same layout. ``--input NAME=PATH`` (repeatable) names input streams,
as for ``cep run``: a rule whose FROM names one of them reads that stream only. Spark is
imported only when one of them runs, so the rest of ``cep`` never starts a JVM.

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
import warnings
from typing import Any

__all__ = ["add_arguments", "run", "main"]

EXIT_OK, EXIT_USAGE, EXIT_RUNTIME = 0, 2, 3
FILE_FORMATS = ("json", "parquet", "csv")
SOURCE = "_cep_source"  # where a row came from: spark_udf copies it onto late and error rows
BLOCK = "_cep_block"  # the offset of the row's file block


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("rules", help="rule file (.yaml/.yml or .sql)")
    p.add_argument("--input", "-i", action="append", required=True, metavar="[NAME=]PATH",
                   help="input path (a directory of files, a file or a glob; for Kafka, leave it out); repeat "
                   "as NAME=PATH for several named streams, as for 'cep run': every row carries 'stream': NAME "
                   "and a rule whose FROM names one of them reads that stream's rows only")
    p.add_argument("--format", "-f", default="json", metavar="FORMAT",
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
    p.add_argument("--quiet", "-q", action="store_true", help="no summary on stderr")


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
    sp.set_defaults(_spark_parser=sp)
    return sp


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
            raise ValueError(
                f"cannot infer the schema of {path!r} ({str(e).splitlines()[0]}); pass --schema"
            ) from None
    else:
        schema = None
    if fmt in ("json", "csv") and schema is not None:
        schema = _with_corrupt(schema)
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


_CHECKPOINT_SHAPE = ("sources in the checkpoint offsets", "without stateful operators but restarted with stateful")
_CHECKPOINT_HINT = (
    "; the query no longer has the shape its checkpoint recorded: named inputs (--input NAME=PATH) were "
    "added or removed, a stream's search rules gained or lost their only event time (with one they run in "
    "the stateful stage), or the checkpoint was written by an earlier cep whose search rules ran beside "
    "that stage (reading the source again): finish it with the rules and version that wrote it, or start "
    "a new checkpoint (the input is read again) or run a backfill first"
)


def _error_text(e: BaseException) -> str:
    """The one line of a Spark failure that says what went wrong in our code, if any.

    Example:
        >>> _error_text(RuntimeError("failed: RuleChangedError: rule 'r': the pattern changed"))
        "RuleChangedError: rule 'r': the pattern changed"
    """
    text = str(e)
    line = None
    for pat in (r"(\w*(?:StateEncodingError|RuleChangedError|SparkStateError|StateVersionError): .*)",
                r"(\w+Error: .*)"):
        m = re.search(pat, text)
        if m:
            line = m.group(1).strip()
            break
    if line is None:
        line = text.splitlines()[0] if text else type(e).__name__
    if any(s in text for s in _CHECKPOINT_SHAPE):  # Spark's own words, not what to do here
        line += _CHECKPOINT_HINT
    return line


def _stop_between_batches(query: Any, patience: float = 600.0) -> None:
    """Stop once no micro-batch is running (a stop mid-batch redoes that batch on restart)."""
    end = time.monotonic() + patience
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < end:
        time.sleep(0.1)
    query.stop()


def run(args: Any) -> int:
    """Run ``cep spark run`` or ``cep spark backfill``; return the exit code."""
    cmd = getattr(args, "spark_command", None)
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
    from patterns.errors import CepError, RuleErrors
    from patterns.rules import load_rules

    try:
        rules = load_rules(args.rules)
    except RuleErrors as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    try:
        trigger = _trigger(args.trigger) if cmd == "run" else None
        conf = _pairs(args.conf, "--conf")
        _pairs(args.source_option, "--source-option")
        inputs = _inputs(args.input)
    except ValueError as e:
        print(f"cep spark {cmd}: {e}", file=sys.stderr)
        return EXIT_USAGE
    for flag, value in (("--buckets", args.buckets), ("--search-buckets", args.search_buckets)):
        if value < 1:
            print(f"cep spark {cmd}: {flag} must be at least 1, found {value}", file=sys.stderr)
            return EXIT_USAGE

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\..*")
    from spark_udf.api import ProgressCounts, SparkRunConfig, apply_rules
    from spark_udf.session import DEFAULT_SHUFFLE_PARTITIONS, local_session

    spark = local_session(args.master, args.shuffle_partitions or DEFAULT_SHUFFLE_PARTITIONS,
                          packages=args.packages, conf=conf)
    frames: dict[str, Any] = {}
    try:
        for name, path in inputs:
            frame, source_col = _read(spark, args, streaming=(cmd == "run"), path=path)
            frames[name or ""] = frame
    except ValueError as e:
        print(f"cep spark {cmd}: {e}", file=sys.stderr)
        return EXIT_USAGE
    source: Any = frame if len(inputs) == 1 and inputs[0][0] is None else frames
    arrival = (SOURCE, BLOCK) if cmd == "backfill" and source_col == SOURCE and args.format in FILE_FORMATS else ()
    cfg = SparkRunConfig(buckets=args.buckets, search_buckets=args.search_buckets, source_column=source_col,
                         arrival_columns=arrival, on_rule_change=getattr(args, "on_rule_change", "fail"))
    try:
        result = apply_rules(source, rules, cfg)
    except CepError as e:
        print(f"cep spark {cmd}: {e}", file=sys.stderr)
        return EXIT_USAGE
    names = [r.name for r in rules]
    started = time.monotonic()
    if cmd == "backfill":
        from spark_udf.api import time_unit_warnings

        for w in time_unit_warnings(source, rules):  # the first rows only: one small job, even with --quiet
            print(f"cep spark backfill: {w}", file=sys.stderr)
        try:
            result.write(args.output, args.output_format, mode=args.mode)
            counts = result.counts()
        except Exception as e:  # noqa: BLE001 - Spark's exceptions carry the Python worker's error
            print(f"cep spark backfill: {_error_text(e)}", file=sys.stderr)
            return EXIT_RUNTIME
        if not args.quiet:
            print(
                f"cep spark backfill: {counts['matches']:,} complex events, {counts['late']:,} late, "
                f"{counts['errors']:,} errors in {time.monotonic() - started:.1f} s -> {args.output}",
                file=sys.stderr,
            )
            for i, name in enumerate(names):
                print(f"  {name}: {counts.get(f'matches_{i}', 0):,} complex events", file=sys.stderr)
        return EXIT_OK

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
        print(f"cep spark run: {_error_text(e)}", file=sys.stderr)
        status = EXIT_RUNTIME
    finally:
        if query is not None:
            progress.merge_recent(query)
    if not args.quiet:
        t = progress.totals
        print(
            f"cep spark run: {t['batches']:,} micro-batch{'es' if t['batches'] != 1 else ''}, "
            f"{t['input_rows']:,} input rows, "
            f"{t['matches']:,} complex events, {t['late']:,} late, {t['errors']:,} errors "
            f"in {time.monotonic() - started:.1f} s -> {args.output}",
            file=sys.stderr,
        )
        for name in names:
            print(f"  {name}: {progress.per_rule[name]:,} complex events", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    """``python -m cep.cli.spark run|backfill ...`` (the same as ``cep spark ...``)."""
    parser = argparse.ArgumentParser(prog="cep")
    sub = parser.add_subparsers(dest="command")
    add_arguments(sub)
    args = parser.parse_args(["spark", *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
