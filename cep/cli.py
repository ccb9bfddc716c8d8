"""The ``cep`` command: check rule files, run them over event files, percolate, benchmark.

Exit codes: 0 ok; 1 matches were found and ``--fail-on-match`` was given; 2 usage or rule errors;
3 a runtime failure. Every subcommand's ``--help`` ends with the codes it can return.
"""

from __future__ import annotations

import argparse
import base64
import heapq
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from cep.progress import Progress
from patterns.errors import CepError, RuleErrors

__all__ = ["main", "build_parser", "OutputWriter"]

EXIT_OK, EXIT_MATCHES, EXIT_USAGE, EXIT_RUNTIME = 0, 1, 2, 3


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 on usage errors already; keep the text short
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``cep`` command and its subcommands."""
    p = _ArgumentParser(
        prog="cep",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Complex-event processing and stream search. A rule file (YAML) holds pattern rules\n"
            "(SQL MATCH_RECOGNIZE), windowed analytics rules and Lucene-syntax search rules; cep runs\n"
            "them over event files, embedded or on Spark, and percolates documents against queries."
        ),
        epilog=(
            "examples (from the repository root, on the bundled data):\n"
            "  cep check rules/fraud.yaml\n"
            "  cep run rules/fraud.yaml --input rules/data/transactions.jsonl\n"
            "  cep bench rules/trading.yaml --input rules/data/sp500_daily_2017_sample.jsonl\n"
            "  cep percolate --queries rules/data/news_queries.jsonl --input rules/data/headlines_sample.jsonl\n"
            "\n"
            "'cep COMMAND --help' describes each command. README.md has the tour and the rule-file\n"
            "reference; docs/ the semantics.\n"
            "\n"
            "exit codes:\n"
            "  0  ok (bad and late events are reported and counted, not failures)\n"
            "  1  complex events were emitted and 'cep run --fail-on-match' was given\n"
            "  2  usage or rule errors: bad options, a missing input file, a rule file with errors\n"
            "  3  runtime failure"
        ),
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("check", help="validate rule files and list every error", description=(
        "Parse and check rule files (YAML or .sql) without reading any event: every rule kind, every "
        "key, every statement and query. Prints every error with file, line, column and a caret, and "
        "one 'FILE: ok, N rules (names)' line per valid file."),
        epilog="Exit codes: 0 every file is valid; 2 a file has errors, or a usage error.")
    c.add_argument("rules", nargs="+", help="rule files (.yaml/.yml or .sql)")

    r = sub.add_parser("run", help="run a rule file over event files", description=(
        "Run every rule of RULES over the input events in event-time order and write one row per "
        "complex event: for a pattern rule the PARTITION BY columns and the measures, for an analytics "
        "rule the SELECT items, for a search rule the listed fields and the query's id; each row "
        "carries 'rule'. Late and bad events are counted and go to --late and --errors. A summary "
        "per rule goes to stderr."),
        epilog=("Exit codes: 0 ok (late and bad events are reported, not failures); 1 complex events "
                "were emitted and --fail-on-match was given; 2 usage or rule errors (a missing input "
                "file, a rule file with errors); 3 runtime failure."))
    r.add_argument("rules", help="rule file (.yaml/.yml or .sql)")
    r.add_argument("--input", "-i", action="append", required=True, metavar="[NAME=]PATH",
                   help="event file: JSON lines (default), .csv/.tsv, .parquet or a web-server access log "
                   "(.log). Repeat for several files, merged in event time; NAME=PATH names a stream: its "
                   "events carry 'stream': NAME and a rule's FROM NAME reads only them")
    r.add_argument("--output", "-o", default="-", help="where complex events go ('-' for stdout, the default)")
    r.add_argument("--output-format", choices=("jsonl", "csv", "parquet"), default=None,
                   help="output format (default: from the output file's ending, else jsonl). JSON lines "
                   "are written as complex events come; CSV and Parquet once, at the end")
    r.add_argument("--input-format", choices=("jsonl", "csv", "parquet", "log"), default=None,
                   help="input format (default: from each file's ending)")
    r.add_argument("--late", metavar="FILE", help="write late events here (JSON lines)")
    r.add_argument("--errors", metavar="FILE", help="write bad events here (JSON lines)")
    r.add_argument("--time-field", help="event-time field used to merge several inputs "
                   "(default: the rules' ORDER BY column)")
    r.add_argument("--batch-size", type=int, default=8192, help="events per batch (default 8192)")
    r.add_argument("--fail-on-match", action="store_true", help="exit 1 when any complex event was emitted")
    r.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar on stderr (auto: only when stderr is a terminal)")
    r.add_argument("--quiet", "-q", action="store_true", help="no summary on stderr")
    d = r.add_argument_group("durable runs (docs/reliability.md)")
    d.add_argument("--state", metavar="DIR", help="keep input offsets, engine state and output lengths in DIR; a "
                   "rerun resumes where the last checkpoint left off, with exactly-once output (JSON lines)")
    d.add_argument("--follow", "-f", action="store_true", help="keep reading as files grow or appear in the "
                   "input directory (name order; dot-files ignored) until SIGINT/SIGTERM (needs --state)")
    d.add_argument("--checkpoint-every", type=int, default=100_000, metavar="N",
                   help="checkpoint after N input lines (default 100000)")
    d.add_argument("--checkpoint-seconds", type=float, default=30.0, metavar="T",
                   help="checkpoint at least every T seconds (default 30)")
    d.add_argument("--watch-rules", action="store_true", help="reload the rule file when it changes (SIGHUP "
                   "reloads it too); unchanged rules keep their state, a file with errors is refused")
    d.add_argument("--finish", action="store_true", help="with --state: the input ends here; flush every "
                   "partial match and close the state")
    d.add_argument("--poll", type=float, default=0.2, metavar="SECONDS", help="--follow: pause between looks "
                   "for new data (default 0.2)")
    lim = r.add_argument_group("bounded state")
    lim.add_argument("--idle-state-ttl", metavar="DURATION", help="a key with no event for DURATION of event time "
                   "ends its session (flushed, state freed); e.g. '1 hour' or milliseconds")
    lim.add_argument("--max-partial-matches-total", type=int, metavar="N",
                   help="cap on one rule's partial matches over all keys (the rule's on_cap policy applies)")
    lim.add_argument("--max-buffered-events", type=int, metavar="N",
                   help="cap on one rule's events waiting for the watermark; beyond it the watermark moves up")

    b = sub.add_parser("bench", help="measure a rule file on your own events", description=(
        "Run a rule file over your events and report, per rule and for all rules together: events/s, "
        "matches, partial matches alive (peak and at end), late and bad events, peak memory, and the "
        "time split between decoding, ingest, predicate evaluation and automaton stepping."),
        epilog="Exit codes: 0 ok; 2 usage or rule errors (a missing input file, a rule file with errors); "
        "3 runtime failure.")
    from cep import bench as _bench

    _bench.add_arguments(b)

    from cep import spark_cli  # defines the parser only; pyspark is imported when a job runs

    sp = spark_cli.add_arguments(sub)
    spark_exit = ("Exit codes: 0 ok; 2 usage or rule errors (bad options, a rule file with errors, a "
                  "rule kind Spark does not run yet); 3 the Spark job failed.")
    sp.epilog = spark_exit
    for action in sp._actions:
        if isinstance(action, argparse._SubParsersAction):
            for spark_cmd in action.choices.values():
                spark_cmd.epilog = spark_exit

    pc = sub.add_parser("percolate", help="match documents against registered search queries", description=(
        "Register Lucene-syntax queries and write, for each document, one line with the ids of the "
        "queries that match it (docs/search.md). Bad query and document lines are reported on stderr "
        "with their line number and skipped."),
        epilog="Exit codes: 0 ok; 2 usage errors, an unreadable file, or no query could be loaded; "
        "3 runtime failure.")
    try:
        from cep import percolate_cli

        percolate_cli.add_arguments(pc)
    except ImportError:  # pragma: no cover - the percolator is optional in a partial checkout
        pc.set_defaults(_unavailable="the percolator is not installed")
    return p


# ------------------------------------------------------------------ output


def _json_default(v: Any):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    return str(v)


class OutputWriter:
    """Writes rows as JSON lines (streaming), CSV or Parquet (written on close)."""

    def __init__(self, target: str, fmt: str | None = None):
        self.target = target
        if fmt is None:
            suffix = Path(target).suffix.lower() if target != "-" else ""
            fmt = {".csv": "csv", ".parquet": "parquet"}.get(suffix, "jsonl")
        self.fmt = fmt
        self.rows: list[dict] = []
        self.count = 0
        if fmt == "jsonl":
            self.fh = sys.stdout.buffer if target == "-" else open(target, "wb")
        elif target == "-" and fmt == "parquet":
            raise CepError("Parquet output needs a file: pass --output FILE.parquet")
        elif target != "-":
            open(target, "wb").close()  # CSV and Parquet are written at the end: fail now, not then

    def write(self, rows: Iterable[dict]) -> None:
        from cep.durable import dumps_row  # survives events nested deeper than orjson writes

        for row in rows:
            self.count += 1
            if self.fmt == "jsonl":
                self.fh.write(dumps_row(row))
            else:
                self.rows.append(row)
        if self.fmt == "jsonl" and self.target == "-":
            self.fh.flush()

    def close(self) -> None:
        if self.fmt == "jsonl":
            if self.target != "-":
                self.fh.close()
            return
        cols: dict[str, None] = {}
        for r in self.rows:
            for k in r:
                cols.setdefault(k, None)
        if self.fmt == "csv":
            import csv

            fh = sys.stdout if self.target == "-" else open(self.target, "w", newline="")
            w = csv.DictWriter(fh, fieldnames=list(cols))
            w.writeheader()
            for r in self.rows:
                # sketches (HLL_SKETCH) as base64 text, as in JSON lines; Parquet keeps them binary
                w.writerow({k: base64.b64encode(v).decode("ascii") if isinstance(v, (bytes, bytearray)) else v
                            for k, v in r.items()})
            if fh is not sys.stdout:
                fh.close()
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in self.rows])
            pq.write_table(table, self.target)


# ------------------------------------------------------------------ run


def _parse_inputs(specs: list[str]) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = []
    for s in specs:
        name, sep, path = s.partition("=")
        if sep and name and not os.path.exists(s) and "/" not in name:
            out.append((name, path))
        else:
            out.append((None, s))
    return out


def _merged_batches(inputs, time_field: str | None, fmt: str | None, batch_size: int) -> Iterator[tuple[Any, str | None]]:
    """Several named inputs merged in event-time order (ties: input order, then file order)."""
    from cep.events import batch_from_records, parse_times, read_events

    def events(idx: int, name: str, path: str):
        seq = 0
        for b in read_events(path, batch_size, fmt):
            for bl in b.bad:
                yield (-(2**63), idx, seq, None, bl)
                seq += 1
            if time_field is None:  # no rule reads event time (search rules only): inputs in turn
                ms, ok = np.zeros(b.n, dtype=np.int64), np.zeros(b.n, dtype=bool)
            else:
                ms, ok, _ = parse_times(b.column(time_field))
            for i in range(b.n):
                rec = b.record(i)
                rec.setdefault("stream", name)
                yield (int(ms[i]) if ok[i] else -(2**63), idx, seq, (rec, b.line_of(i), b.source), None)
                seq += 1

    gens = [events(i, name or f"input{i}", path) for i, (name, path) in enumerate(inputs)]
    recs: list[dict] = []
    lines: list[int] = []
    bad: list = []
    for _, _, _, item, bl in heapq.merge(*gens):
        if bl is not None:
            bad.append(bl)
            continue
        rec, line, _src = item
        recs.append(rec)
        lines.append(line)
        if len(recs) >= batch_size:
            b = batch_from_records(recs, lines, "merged input")
            b.bad, bad = bad, []
            yield b, None
            recs, lines = [], []
    if recs or bad:
        b = batch_from_records(recs, lines, "merged input")
        b.bad = bad
        yield b, None


def merge_time_field(rules: Any) -> str | None:
    """The one field the rules order by, which merges several inputs (None: no rule orders by time).

    Raises:
        ValueError: the rules order by different fields.
    """
    times = (r.compiled.statement.order_by if r.compiled is not None else r.spec.time_column for r in rules)
    fields = {t for t in times if t}  # a search rule may have no time field
    if len(fields) > 1:
        raise ValueError(f"the rules order by different fields ({', '.join(sorted(fields))}); "
                         "pass --time-field to say which one merges the inputs")
    return fields.pop() if fields else None


def input_batches(
    rules: Any, inputs: list[tuple[str | None, str]], time_field: str | None, fmt: str | None, batch_size: int
) -> Iterator[tuple[Any, str | None]]:
    """The events of ``inputs`` ((stream name or None, path) pairs) as (batch, stream name) pairs.

    One input is read as it is; several are merged in event time on ``time_field``, by default the
    field the rules order by (:func:`merge_time_field`, which raises ValueError when they differ).
    """
    from cep.events import read_events

    if len(inputs) == 1:
        name, path = inputs[0]
        return ((b, name) for b in read_events(path, batch_size, fmt))
    tf = time_field if time_field is not None else merge_time_field(rules)
    return _merged_batches(inputs, tf, fmt, batch_size)


def _open_outputs(args) -> tuple[OutputWriter, OutputWriter | None, OutputWriter | None] | str:
    """The --output, --late and --errors writers, or what is wrong with one of them."""
    opened: list[OutputWriter | None] = []
    for option, target, fmt in (("--output", args.output, args.output_format),
                                ("--late", args.late, "jsonl"), ("--errors", args.errors, "jsonl")):
        try:
            opened.append(OutputWriter(target, fmt) if target is not None else None)
        except OSError as e:
            return (f"cannot write {option} {target!r}: {e.strerror or e}; expected a file in an existing, "
                    "writable folder, or '-' for stdout")
        except CepError as e:
            return str(e)
    out, late, errs = opened
    assert out is not None
    return out, late, errs


def cmd_check(args) -> int:
    from patterns.rules import load_rules

    status = EXIT_OK
    for path in args.rules:
        try:
            rs = load_rules(path)
        except RuleErrors as e:
            n = len(e.errors)
            print(str(e), file=sys.stderr)
            print(f"{path}: {n} error{'s' if n != 1 else ''}", file=sys.stderr)
            status = EXIT_USAGE
            continue
        print(f"{path}: ok, {len(rs)} rule{'s' if len(rs) != 1 else ''} ({', '.join(rs.names())})")
    return status


def cmd_run(args) -> int:
    from cep.engine import Engine
    from patterns.rules import load_rules

    if args.state or args.follow:
        from cep import durable

        cfg = durable.config_from_args(args)
        if isinstance(cfg, str):
            print(f"cep run: {cfg}", file=sys.stderr)
            return EXIT_USAGE
        return durable.run_durable(cfg)
    try:
        rules = load_rules(args.rules)
    except RuleErrors as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    inputs = _parse_inputs(args.input)
    for _, path in inputs:
        if not os.path.exists(path):
            print(f"cep run: input file not found: {path}", file=sys.stderr)
            return EXIT_USAGE
        if os.path.isdir(path):
            print(f"cep run: {path} is a directory; read a log directory with --state DIR (see --follow)",
                  file=sys.stderr)
            return EXIT_USAGE
    named = [n for n, _ in inputs if n]
    engine = Engine(rules, streams=named)
    if args.idle_state_ttl or args.max_partial_matches_total or args.max_buffered_events:
        from cep.durable import limits_from_args

        try:
            engine.set_state_limits(limits_from_args(args))
        except ValueError as e:
            print(f"cep run: {e}", file=sys.stderr)
            return EXIT_USAGE
    try:
        batches = input_batches(rules, inputs, args.time_field, args.input_format, args.batch_size)
    except ValueError as e:
        print(f"cep run: {e}", file=sys.stderr)
        return EXIT_USAGE
    writers = _open_outputs(args)
    if isinstance(writers, str):
        print(f"cep run: {writers}", file=sys.stderr)
        return EXIT_USAGE
    out, late, errs = writers
    total = sum(os.path.getsize(p) for _, p in inputs)
    enabled = args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty() and total > 5_000_000)
    progress = Progress(total, enabled)
    n_events = 0
    n_late = 0
    n_err = 0

    def sink(res) -> None:
        nonlocal n_late, n_err
        out.write(res.matches)
        n_late += len(res.late)
        n_err += len(res.errors)
        if late:
            late.write(res.late)
        if errs:
            errs.write(res.errors)

    try:
        done = 0
        for b, stream in batches:
            res = engine.process(b, stream)
            n_events += b.n
            done += b.n * 100
            sink(res)
            progress.update(min(done, total), n_events, out.count)
        open_at_end = {name: op.live_partial_matches() for name, op in engine.operators.items()
                       if hasattr(op, "live_partial_matches")}
        sink(engine.finish())
    except CepError as e:
        progress.close()
        print(f"cep run: {e}", file=sys.stderr)
        return EXIT_RUNTIME
    finally:
        out.close()
        if late:
            late.close()
        if errs:
            errs.close()
    progress.close()
    if not args.quiet:
        print(f"cep run: {n_events:,} events, {out.count:,} complex events, {n_late:,} late, {n_err:,} errors",
              file=sys.stderr)
        for name, c in engine.counts().items():
            print(
                f"  {name}: read {c.read:,}, processed {c.processed:,}, late {c.late:,}, errors {c.errors:,}, "
                f"matches {c.matches:,}"
                # over every key, before the final flush ended them; only pattern rules have them
                + (f", partial matches open at the end {open_at_end[name]:,}" if name in open_at_end else "")
                + (f", partial matches dropped at the cap {c.partial_matches_dropped:,}" if c.partial_matches_dropped else "")
                + (f", condition errors {c.eval_errors:,}" if c.eval_errors else ""),
                file=sys.stderr,
            )
    if args.fail_on_match and out.count:
        return EXIT_MATCHES
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``cep`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        if args.command == "check":
            return cmd_check(args)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "spark":
            from cep import spark_cli

            return spark_cli.run(args)
        if args.command == "bench":
            from cep import bench

            return bench.run(args)
        if args.command == "percolate":
            if getattr(args, "_unavailable", None):
                print(f"cep percolate: {args._unavailable}", file=sys.stderr)
                return EXIT_RUNTIME
            from cep import percolate_cli

            return percolate_cli.run(args)
    except BrokenPipeError:
        return EXIT_OK
    except CepError as e:
        print(f"cep {args.command}: {e}", file=sys.stderr)
        return EXIT_RUNTIME
    except OSError as e:  # a disk that fills, a file that vanishes mid-run: a message, not a traceback
        print(f"cep {args.command}: {e}", file=sys.stderr)
        return EXIT_RUNTIME
    parser.print_help()
    return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
