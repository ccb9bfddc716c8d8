"""The configuration of a durable run, and how ``cep run`` arguments make one."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cep.durable.sinks import STDOUT
from cep.durable.source import MAX_LINE_BYTES
from cep.engine import StateLimits
from patterns.files import command_line_roots

__all__ = ["DurableConfig", "config_from_args", "limits_from_args"]

@dataclass(frozen=True)
class DurableConfig:
    """Everything a durable run needs; one field per ``cep run`` option."""

    rules: str  # rule file (YAML or .sql); its text is kept in the checkpoint
    input: str  # a JSON lines file, or a directory of them (read in name order)
    state: str  # state directory: checkpoint and lock
    output: str  # complex events, JSON lines (a file: it is cut back at restart)
    late: str | None = None  # late events, JSON lines
    errors: str | None = None  # bad events and lines, JSON lines
    timeouts: str | None = None  # timed-out partial matches (WITH TIMEOUT ROWS), JSON lines
    stream: str | None = None  # stream name given to the events (NAME=PATH)
    follow: bool = False  # keep reading as files grow or appear
    # input lines per batch (part of the state: fixed for its life); None: the state's, or
    # cep.events.DEFAULT_BATCH_SIZE for a new state
    batch_lines: int | None = None
    checkpoint_every: int = 100_000  # input lines between checkpoints
    checkpoint_seconds: float = 30.0  # seconds between checkpoints (checked between batches)
    watch_rules: bool = False  # reload when the rule file or the content of a rule's queries_file changes
    poll_seconds: float = 0.05  # --follow: longest pause between looks for new data (inotify wakes it sooner)
    finish: bool = False  # the input ends here: final watermark, then the state is closed
    max_line_bytes: int = MAX_LINE_BYTES  # a longer line is a bad line, never held whole
    limits: StateLimits = field(default_factory=StateLimits)
    quiet: bool = False  # no summary on stderr
    overwrite: bool = False  # a fresh state may cut output files that already hold rows
    queries_roots: tuple[str, ...] | None = None  # folders a queries_file may be in besides the rule file's (None: $CEP_QUERIES_ROOTS)
    time_unit: str | None = None  # --time-unit: every rule's unit of numeric event times (None: the rules')
    idle_progress: float | None = None  # --idle-progress: seconds of quiet input after which event time moves with the wall clock


def config_from_args(args: Any) -> DurableConfig | str:
    """A DurableConfig from ``cep run`` arguments, or the reason they do not make one."""
    if not args.state:
        return "--follow needs --state DIR (where offsets and engine state are kept)"
    if len(args.input) != 1:
        return "--state reads one --input: a JSON lines file or a directory of them"
    if args.input[0] == "-":
        return ("--state cannot read standard input: a restart must read the input again from its "
                "checkpointed offset; write the stream to files (a directory with --follow)")
    output = args.output or STDOUT
    for flag in ("late", "errors", "timeouts"):
        if getattr(args, flag, None) == STDOUT:
            return (f"--{flag} cannot be standard output with --state (only --output can: its rows are written "
                    "again after a restart); pass a file")
    fmt = args.output_format or {".csv": "csv", ".parquet": "parquet"}.get(Path(output).suffix.lower(), "jsonl")
    if fmt != "jsonl" or (args.input_format not in (None, "jsonl")):
        return "--state reads and writes JSON lines only"
    try:
        limits = limits_from_args(args)
    except ValueError as e:
        return str(e)
    spec = args.input[0]
    name, sep, path = spec.partition("=")
    stream = None
    if sep and name and not os.path.exists(spec) and "/" not in name:
        stream, spec = name, path
    return DurableConfig(
        rules=args.rules, input=spec, state=args.state, output=output, late=args.late,
        errors=args.errors, timeouts=getattr(args, "timeouts", None), stream=stream, follow=args.follow, batch_lines=args.batch_size,
        checkpoint_every=args.checkpoint_every, checkpoint_seconds=args.checkpoint_seconds,
        watch_rules=args.watch_rules, poll_seconds=args.poll, finish=args.finish,
        limits=limits, quiet=args.quiet, overwrite=getattr(args, "overwrite", False),
        queries_roots=command_line_roots(getattr(args, "queries_root", None)),
        time_unit=getattr(args, "time_unit", None), idle_progress=getattr(args, "idle_progress", None),
    )


def limits_from_args(args: Any) -> StateLimits:
    """The StateLimits of ``--idle-state-ttl``, ``--max-partial-matches-total``, ``--max-buffered-events``."""
    ttl = None
    if getattr(args, "idle_state_ttl", None):
        from patterns.errors import CepSyntaxError
        from patterns.match_recognize import parse_interval_ms

        text = args.idle_state_ttl
        try:
            ttl = int(text) if text.strip().isdigit() else parse_interval_ms(text)
        except CepSyntaxError:
            raise ValueError(
                f"--idle-state-ttl: cannot read {text!r} as a duration; write milliseconds or text such as '1 hour'"
            ) from None
    for flag in ("max_partial_matches_total", "max_buffered_events"):
        v = getattr(args, flag, None)
        if v is not None and v < 0:
            raise ValueError(f"--{flag.replace('_', '-')} must not be negative, found {v}")
    return StateLimits(
        idle_state_ttl_ms=ttl,
        max_partial_matches_total=getattr(args, "max_partial_matches_total", None),
        max_buffered_events=getattr(args, "max_buffered_events", None),
    )
