"""The ``cep`` command's parser and ``main``: check rule files, run them over events, percolate, benchmark.

Exit codes: 0 ok; 1 matches were found and ``--fail-on-match`` was given; 2 usage or rule errors;
3 a runtime failure. Every subcommand's ``--help`` ends with the codes it can return.
"""

from __future__ import annotations

import argparse
import sys

from cep.cli import explain as _explain
from cep.cli.check import cmd_check
from cep.cli.exit_codes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from cep.cli.run import cmd_run
from patterns.errors import CepError

__all__ = ["main", "build_parser"]

QUERIES_ROOT_HELP = ("a folder whose files a search rule's queries_file may name, besides the rule file's own "
                     "folder and those in $CEP_QUERIES_ROOTS (repeat for several; docs/reliability.md)")


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
            "  cep test rules/trading.yaml\n"
            "  cep explain rules/trading.yaml --input rules/data/sp500_daily_2017_sample.jsonl --rule v_shape --key AAPL\n"
            "  cep run rules/trading.yaml --input rules/data/sp500_daily_2017_sample.jsonl\n"
            "  cep bench rules/trading.yaml --input rules/data/sp500_daily_2017_sample.jsonl\n"
            "  cep percolate --queries rules/data/news_queries.jsonl --input rules/data/headlines_sample.jsonl\n"
            "\n"
            "'cep COMMAND --help' describes each command. README.md has the tour and the rule-file\n"
            "reference; docs/ the semantics.\n"
            "\n"
            "exit codes:\n"
            "  0  ok (bad and late events are reported and counted, not failures)\n"
            "  1  complex events were emitted and 'cep run --fail-on-match' was given; a test of 'cep test' failed\n"
            "  2  usage or rule errors: bad options, a missing input file, a rule file with errors\n"
            "  3  runtime failure"
        ),
    )
    p.add_argument("--version", action="version", version=f"cep {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("check", help="validate rule files and list every error", description=(
        "Parse and check rule files (YAML or .sql) without reading any event: every rule kind, every "
        "key, every statement and query. Prints every error with file, line, column and a caret, and "
        "one 'FILE: ok, N rules (names)' line per valid file."),
        epilog="Exit codes: 0 every file is valid; 2 a file has errors, or a usage error.")
    c.add_argument("rules", nargs="+", help="rule files (.yaml/.yml or .sql)")
    c.add_argument("--queries-root", action="append", metavar="DIR", help=QUERIES_ROOT_HELP)

    t = sub.add_parser("test", help="run the tests written next to rule files", description=(
        "Run the tests of each rule file: the 'tests:' list in the file and those of NAME.test.yaml beside "
        "it. Each test feeds its events through the rules as 'cep run' does and compares the complex events "
        "(expect: exactly, contains: a subset), late and bad events and timeout rows with what it expects. "
        "Prints 'PASS file::test' or 'FAIL file::test' with the missing and unexpected rows, then "
        "'N passed, M failed' (docs/cli.md, 'cep test')."),
        epilog="Exit codes: 0 every test passed; 1 a test failed; 2 usage, rule-file or test-file errors "
        "(bad YAML, an unknown key, a missing events file, a file with no tests).")
    t.add_argument("rules", nargs="+", help="rule files (.yaml/.yml or .sql); NAME.test.yaml names NAME.yaml")
    t.add_argument("--queries-root", action="append", metavar="DIR", help=QUERIES_ROOT_HELP
                   + "; an events file of a test may lie there too")

    x = sub.add_parser("explain", help="why a rule matched or did not, row by row, for one key", description=(
        "Replay the input through a rule file's rules as 'cep run' does and tell, for one key and time range, "
        "row by row: which pattern variables' conditions held (with the values they read), which partial "
        "matches started, grew, ended (and on which condition), were pruned, dropped or expired, which "
        "deadlines fired, the matches emitted, and when none was, the nearest miss. A table (coloured on a "
        "terminal) or, with --json, one JSON line per rule (docs/cli.md, 'cep explain')."),
        epilog=_explain.EPILOG)
    _explain.add_arguments(x)

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
                   "(.log); '-' reads standard input (JSON lines unless --input-format), processing events as they "
                   "come. Repeat for several files, merged in event time; NAME=PATH names a stream: its "
                   "events carry 'stream': NAME and a rule's FROM NAME reads only them")
    r.add_argument("--output", "-o", default="-", help="where complex events go ('-' for stdout, the default; "
                   "with --state, stdout is at-least-once: rows since the last checkpoint are written again "
                   "after a restart)")
    r.add_argument("--output-format", choices=("jsonl", "csv", "parquet"), default=None,
                   help="output format (default: from the output file's ending, else jsonl). JSON lines "
                   "are written as complex events come; CSV and Parquet once, at the end")
    r.add_argument("--input-format", choices=("jsonl", "csv", "parquet", "log"), default=None,
                   help="input format (default: from each file's ending)")
    r.add_argument("--late", metavar="FILE", help="write late events here (JSON lines)")
    r.add_argument("--errors", metavar="FILE", help="write bad events here (JSON lines)")
    r.add_argument("--timeouts", metavar="FILE", help="write timed-out partial matches here (JSON lines): rows "
                   "of rules with ONE ROW PER MATCH WITH TIMEOUT ROWS whose WITHIN ran out, with the measures "
                   "of the rows matched so far, _waiting_for and _deadline")
    r.add_argument("--time-field", help="event-time field used to merge several inputs "
                   "(default: the rules' ORDER BY column)")
    r.add_argument("--time-unit", choices=("s", "ms", "us", "ns"), default=None,
                   help="unit of numeric event times for every rule, overriding the rules' time_unit "
                   "(e.g. s for a log whose times are epoch seconds; ISO-8601 times and dates are unaffected)")
    r.add_argument("--batch-size", type=int, default=None,
                   help="events per batch (default 16384; with --state, the size the state was written with)")
    r.add_argument("--fail-on-match", action="store_true", help="exit 1 when any complex event was emitted")
    r.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar on stderr (auto: only when stderr is a terminal)")
    r.add_argument("--quiet", "-q", action="store_true", help="no summary on stderr")
    r.add_argument("--queries-root", action="append", metavar="DIR", help=QUERIES_ROOT_HELP)
    d = r.add_argument_group("durable runs (docs/reliability.md)")
    d.add_argument("--state", metavar="DIR", help="keep input offsets, engine state and output lengths in DIR; a "
                   "rerun resumes where the last checkpoint left off, with exactly-once output (JSON lines)")
    d.add_argument("--follow", "-f", action="store_true", help="keep reading as files grow or appear in the "
                   "input directory (name order; dot-files ignored) until SIGINT/SIGTERM (needs --state); what has "
                   "arrived is processed at once and its rows are written right away, not at the next checkpoint")
    d.add_argument("--checkpoint-every", type=int, default=100_000, metavar="N",
                   help="checkpoint after N input lines (default 100000)")
    d.add_argument("--checkpoint-seconds", type=float, default=30.0, metavar="T",
                   help="checkpoint at least every T seconds (default 30)")
    d.add_argument("--watch-rules", action="store_true", help="reload the rule file when it changes (SIGHUP "
                   "reloads it too); unchanged rules keep their state, a file with errors is refused")
    d.add_argument("--overwrite", action="store_true", help="with a fresh --state (no checkpoint yet): start "
                   "--output, --late, --errors and --timeouts empty even when they already hold rows (refused otherwise)")
    d.add_argument("--finish", action="store_true", help="with --state: the input ends here; flush every "
                   "partial match and close the state")
    d.add_argument("--poll", type=float, default=0.05, metavar="SECONDS", help="--follow: longest pause between "
                   "looks for new data (default 0.05; on Linux a change in the input directory wakes the run at once)")
    d.add_argument("--idle-progress", type=float, metavar="SECONDS", help="--follow or --input -: after SECONDS "
                   "of wall time with no input, event time moves on with the wall clock, so deadlines (WITHIN, "
                   "windows, events held for lateness) pass for keys that send nothing more (default: off; "
                   "docs/semantics.md, 'Idle progress')")
    lim = r.add_argument_group("bounded state")
    lim.add_argument("--idle-state-ttl", metavar="DURATION", help="a key with no event for DURATION of event time "
                   "ends its session (flushed, state freed); e.g. '1 hour' or milliseconds")
    lim.add_argument("--max-partial-matches-total", type=int, metavar="N",
                   help="cap on one rule's partial matches over all keys (the rule's on_cap policy applies)")
    lim.add_argument("--max-buffered-events", type=int, metavar="N",
                   help="cap on one rule's events waiting for the watermark; beyond it the watermark moves up")

    st = sub.add_parser("state", help="show what a durable run's state holds, per rule and key", description=(
        "Read the checkpoint of a durable run (cep run ... --state DIR) and show, per rule: the watermark, "
        "and per key the live partial matches with the rows matched so far, the events buffered for the "
        "watermark, the open windows with their aggregates and sketch sizes; then the input offsets and output "
        "lengths of the checkpoint. The state is read by the operators' own restore, with the rules "
        "recorded in the checkpoint (docs/cli.md, 'cep state')."),
        epilog="Exit codes: 0 ok; 2 usage errors (not a state directory, an unknown --rule, a --rules file that "
        "does not fit the state); 3 the state cannot be read (damaged, crafted, or written by another version).")
    from cep.cli import state as _state

    _state.add_arguments(st)
    st.add_argument("--queries-root", action="append", metavar="DIR", help=QUERIES_ROOT_HELP)

    b = sub.add_parser("bench", help="measure a rule file on your own events", description=(
        "Run a rule file over your events and report, per rule and for all rules together: events/s, "
        "matches, partial matches alive (peak and at end), late and bad events, peak memory, and the "
        "time split between decoding, ingest, predicate evaluation and automaton stepping."),
        epilog="Exit codes: 0 ok; 2 usage or rule errors (a missing input file, a rule file with errors); "
        "3 runtime failure.")
    from cep.cli import bench as _bench

    _bench.add_arguments(b)

    from cep.cli import spark  # defines the parser only; pyspark is imported when a job runs

    sp = spark.add_arguments(sub)
    spark_exit = ("Exit codes: 0 ok; 2 usage or rule errors (bad options, a rule file with errors, a "
                  "rule kind Spark does not run yet); 3 the Spark job failed.")
    sp.epilog = spark_exit
    for action in sp._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, spark_cmd in action.choices.items():
                spark_cmd.epilog = spark_exit if name != "state" else (
                    "Exit codes: 0 ok; 2 usage errors (not a checkpoint, a rule file with errors or a rule "
                    "changed since the checkpoint, an unknown --rule); 3 the state cannot be read, or Spark failed.")

    pc = sub.add_parser("percolate", help="match documents against registered search queries", description=(
        "Register Lucene-syntax queries and write, for each document, one line with the ids of the "
        "queries that match it (docs/search.md). Bad query and document lines are reported on stderr "
        "with their line number and skipped."),
        epilog="Exit codes: 0 ok; 2 usage errors, an unreadable file, or no query could be loaded; "
        "3 runtime failure.")
    try:
        from cep.cli import percolate

        percolate.add_arguments(pc)
    except ImportError:  # pragma: no cover - the percolator is optional in a partial checkout
        pc.set_defaults(_unavailable="the percolator is not installed")
    return p


def _innermost_frame(e: BaseException) -> str:
    """`` (at file.py:123 in func)`` for the innermost frame of the error's traceback."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name})"


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("cep-engine")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source tree without an install
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``cep`` console script."""
    parser = build_parser()
    # the console script (no argv given): the process is the command's (cep.gc_pause.StartupCollector)
    own_process = argv is None
    args = parser.parse_args(argv)
    args.own_process = own_process
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        if args.command == "check":
            return cmd_check(args)
        if args.command == "test":
            from cep.cli.rule_tests import cmd_test

            return cmd_test(args)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "state":
            from cep.cli.state import cmd_state

            return cmd_state(args)
        if args.command == "explain":
            return _explain.cmd_explain(args)
        if args.command == "spark":
            from cep.cli import spark

            return spark.run(args)
        if args.command == "bench":
            from cep.cli import bench

            return bench.run(args)
        if args.command == "percolate":
            if getattr(args, "_unavailable", None):
                print(f"cep percolate: {args._unavailable}", file=sys.stderr)
                return EXIT_RUNTIME
            from cep.cli import percolate

            return percolate.run(args)
    except BrokenPipeError:
        return EXIT_OK
    except CepError as e:
        print(f"cep {args.command}: {e}", file=sys.stderr)
        return EXIT_RUNTIME
    except OSError as e:  # a disk that fills, a file that vanishes mid-run: a message, not a traceback
        print(f"cep {args.command}: {e}", file=sys.stderr)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        print(f"cep {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - never exit 1 (that is --fail-on-match's "a match was found")
        where = _innermost_frame(e)
        print(f"cep {args.command}: internal error: {type(e).__name__}: {str(e)[:300]}{where}; this is a bug in "
              "cep: please report it with the command line and the input that caused it", file=sys.stderr)
        return EXIT_RUNTIME
    parser.print_help()
    return EXIT_USAGE

