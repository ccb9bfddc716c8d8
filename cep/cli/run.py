"""``cep run``: run a rule file over event files and write the complex events."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Iterable, Iterator

from cep.cli.exit_codes import EXIT_MATCHES, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from cep.cli.inputs import _parse_inputs, input_batches
from cep.cli.outputs import _open_outputs
from cep.cli.progress import Progress
from patterns.errors import CepError, RuleErrors, count_noun

__all__ = ["cmd_run", "live_batches"]


def live_batches(batches: Iterable[Any], engine: Any, idle: Any, sink: Callable[[Any], None]) -> Iterator[Any]:
    """The batches of a live input; while none comes, ``idle`` (an IdleProgress) moves time on.

    The input is read in a thread of its own (:func:`cep.idle.ticking`), so a quiet pipe does not
    hold the run: whenever nothing came for a while the rules due are advanced and what that
    releases or ends goes to ``sink``. The caller calls ``idle.input_seen()`` after each batch.
    """
    from cep.idle import ticking

    for item in ticking(batches, idle.wait_seconds):
        if item is not None:
            yield item
            continue
        targets = idle.targets(engine)
        if targets:
            sink(idle.apply(engine, targets))


def cmd_run(args) -> int:
    from cep.gc_pause import StartupCollector

    # (the collector off until the first batch is through, in a process of the command's own)
    start = StartupCollector(getattr(args, "own_process", False))
    try:
        return _cmd_run(args, start)
    finally:
        start.done()


def _cmd_run(args, start: Any) -> int:
    from cep.engine import Engine, late_warning, timeouts_note, with_time_unit
    from cep.events import DEFAULT_BATCH_SIZE, STDIN
    from patterns.rules import load_rules

    if args.batch_size is not None and args.batch_size < 1:
        print(f"cep run: --batch-size must be at least 1, got {args.batch_size}", file=sys.stderr)
        return EXIT_USAGE

    if args.state or args.follow:
        from cep import durable

        cfg = durable.config_from_args(args)
        if isinstance(cfg, str):
            print(f"cep run: {cfg}", file=sys.stderr)
            return EXIT_USAGE
        # (its start ends after its first batch too; one that finds no batch ends it on return)
        return durable.run_durable(cfg, first_batch_done=start.done)
    from patterns.files import command_line_roots

    try:
        rules = with_time_unit(load_rules(args.rules, queries_roots=command_line_roots(getattr(args, "queries_root", None))),
                               args.time_unit)
    except RuleErrors as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    if not args.quiet:
        for w in rules.warnings:  # what cep check warns about: the rules run all the same
            print(w.format(), file=sys.stderr)
    inputs = _parse_inputs(args.input)
    if sum(path == STDIN for _, path in inputs) > 1:
        print("cep run: standard input ('-') can be read once only", file=sys.stderr)
        return EXIT_USAGE
    for _, path in inputs:
        if path == STDIN:
            continue
        if not os.path.exists(path):
            print(f"cep run: input file not found: {path}", file=sys.stderr)
            return EXIT_USAGE
        if os.path.isdir(path):
            print(f"cep run: {path} is a directory; read a log directory with --state DIR (see --follow)",
                  file=sys.stderr)
            return EXIT_USAGE
    idle = None
    if getattr(args, "idle_progress", None) is not None:
        from cep.idle import IdleProgress, check_idle_seconds

        problem = check_idle_seconds(args.idle_progress)
        if problem is None and [p for _, p in inputs] != [STDIN]:
            problem = ("--idle-progress needs a live input: --input - (standard input) alone, or --follow with "
                       "--state; a run over files ends with them (the end of input is the final watermark)")
        if problem is not None:
            print(f"cep run: {problem}", file=sys.stderr)
            return EXIT_USAGE
        idle = IdleProgress(args.idle_progress)
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
        batches = input_batches(rules, inputs, args.time_field, args.input_format,
                                args.batch_size if args.batch_size is not None else DEFAULT_BATCH_SIZE)
    except ValueError as e:
        print(f"cep run: {e}", file=sys.stderr)
        return EXIT_USAGE
    writers = _open_outputs(args)
    if isinstance(writers, str):
        print(f"cep run: {writers}", file=sys.stderr)
        return EXIT_USAGE
    out, late, errs, timeouts = writers
    if any(p == STDIN for _, p in inputs):  # a live pipe: rows reach their files as they come
        for writer in (out, late, errs, timeouts):
            if writer:
                writer.live = True
    total = sum(os.path.getsize(p) for _, p in inputs if p != STDIN)
    enabled = args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty() and total > 5_000_000
                                         and all(p != STDIN for _, p in inputs))
    progress = Progress(total, enabled)
    n_events = 0
    n_late = 0
    n_err = 0
    n_timeouts = 0

    def sink(res) -> None:
        nonlocal n_late, n_err, n_timeouts
        for w in res.warnings:  # even with --quiet: the answer is likely wrong
            print(f"cep run: {w}", file=sys.stderr, flush=True)
        out.write(res.matches)
        n_late += len(res.late)
        n_err += len(res.errors)
        n_timeouts += len(res.timeouts)
        if timeouts:
            timeouts.write(res.timeouts)
        if late:
            late.write(res.late)
        if errs:
            errs.write(res.errors)

    try:
        done = 0
        for b, stream in (batches if idle is None else live_batches(batches, engine, idle, sink)):
            res = engine.process(b, stream)
            start.done()
            n_events += b.n
            done += b.n * 100
            sink(res)
            progress.update(min(done, total), n_events, out.count)
            if idle is not None:
                idle.input_seen()
        open_at_end = {name: op.live_partial_matches() for name, op in engine.operators.items()
                       if hasattr(op, "live_partial_matches")}
        sink(engine.finish())
    except CepError as e:
        progress.close()
        print(f"cep run: {e}", file=sys.stderr)
        return EXIT_RUNTIME
    finally:
        out.close()
        for writer in (late, errs, timeouts):
            if writer:
                writer.close()
    progress.close()
    if not args.quiet:
        print(f"cep run: {count_noun(n_events, 'event')}, {count_noun(out.count, 'complex event')}, "
              f"{n_late:,} late, {count_noun(n_err, 'error')}"
              + timeouts_note(n_timeouts, timeouts is not None)
              + (f", {count_noun(idle.advances, 'idle advance')}" if idle is not None and idle.advances else ""),
              file=sys.stderr)
        for name, c in engine.counts().items():
            print(
                f"  {name}: read {c.read:,}, processed {c.processed:,}, late {c.late:,}, errors {c.errors:,}, "
                f"matches {c.matches:,}"
                + (f", timeouts {c.timeouts:,}" if c.timeouts else "")
                # over every key, before the final flush ended them; only pattern rules have them
                + (f", partial matches open at the end {open_at_end[name]:,}" if name in open_at_end else "")
                + (f", partial matches dropped at the cap {c.partial_matches_dropped:,}" if c.partial_matches_dropped else "")
                + (f", partial matches dropped by the work budget {c.budget_dropped:,}" if c.budget_dropped else "")
                + (f", condition errors {c.eval_errors:,}" if c.eval_errors else ""),
                file=sys.stderr,
            )
        from cep.engine import table_lines

        for line in table_lines(engine):
            print(line, file=sys.stderr)
    warning = late_warning(engine.counts())
    if warning:  # even with --quiet: most of the answer is missing
        print(f"cep run: {warning}", file=sys.stderr)
    if args.fail_on_match and out.count:
        return EXIT_MATCHES
    return EXIT_OK

