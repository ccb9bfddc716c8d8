"""The durable run: start or resume from the checkpoint, process batches, reload rules, checkpoint, stop on signals."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from typing import Any, Callable, TextIO

from cep.durable.checkpoint import Checkpoint, _CheckpointWriter, _lock, read_checkpoint
from cep.durable.config import DurableConfig
from cep.durable.cuts import _CutLog
from cep.durable.errors import StateMismatch
from cep.durable.sinks import STDOUT, _ReaderGone, _Sink, _StdoutSink
from cep.durable.source import LogSource, _Waiter
from cep.engine import (
    Engine,
    ReloadReport,
    StateLimits,
    late_warning,
    table_lines,
    timeouts_note,
    with_time_unit,
)
from cep.events import DEFAULT_BATCH_SIZE, EventBatch
from cep.idle import IdleProgress, check_idle_seconds
from patterns.errors import CepError, RuleErrors, count_noun

__all__ = ["run_durable"]

EXIT_OK, EXIT_USAGE, EXIT_RUNTIME = 0, 2, 3


class _Flags:
    def __init__(self) -> None:
        self.stop = False
        self.reload = False


class _Run:
    """One durable run. ``clock`` (seconds, default ``time.monotonic``) times checkpoints and idle
    progress, and ``waiter`` (default: inotify on the input) waits for input; tests pass fakes."""

    def __init__(self, cfg: DurableConfig, err: TextIO, clock: Callable[[], float] | None = None,
                 waiter: Any = None, first_batch_done: Callable[[], None] | None = None):
        self.cfg = cfg
        self.err = err
        # called once, after the first batch this run processes (the CLI's StartupCollector.done)
        self.first_batch_done = first_batch_done
        self.flags = _Flags()
        self.rules_path = os.path.abspath(cfg.rules)
        self.clock = clock or time.monotonic
        self._waiter = waiter
        self.idle: IdleProgress | None = None
        self.n_idle = 0
        self.n_lines = self.n_matches = self.n_late = self.n_errors = self.n_timeouts = 0

    def log(self, msg: str) -> None:
        self.err.write(f"cep run: {msg}\n")
        self.err.flush()

    # -------------------------------------------------------------- setup
    def _outputs(self) -> dict[str, str]:
        out = {"output": STDOUT if self.cfg.output == STDOUT else os.path.abspath(self.cfg.output)}
        if self.cfg.late:
            out["late"] = os.path.abspath(self.cfg.late)
        if self.cfg.errors:
            out["errors"] = os.path.abspath(self.cfg.errors)
        if self.cfg.timeouts:
            out["timeouts"] = os.path.abspath(self.cfg.timeouts)
        return out

    def start(self) -> int | None:
        cfg = self.cfg
        os.makedirs(cfg.state, exist_ok=True)
        self.lock = _lock(cfg.state)
        ck = read_checkpoint(cfg.state)
        outputs = self._outputs()
        rules_now, rules_err = self._read_rules()
        if ck is None:
            for flag, path in outputs.items():
                size = os.path.getsize(path) if path != STDOUT and os.path.isfile(path) else 0
                if size and not cfg.overwrite:
                    self.log(f"--{flag} {path} already holds {count_noun(size, 'byte')} and {cfg.state} has no "
                             "checkpoint: a fresh durable run starts its outputs empty and would lose them; move "
                             "the file away, choose another file, or pass --overwrite")
                    return EXIT_USAGE
            if rules_now is None:
                self.log(rules_err)
                return EXIT_USAGE
            from patterns.rules import parse_rules

            try:
                ruleset = parse_rules(rules_now, cfg.rules, queries_roots=cfg.queries_roots)
            except RuleErrors as e:
                print(str(e), file=self.err)
                return EXIT_USAGE
            self.engine = Engine(with_time_unit(ruleset, cfg.time_unit), streams=[cfg.stream] if cfg.stream else None)
            self.meta: dict[str, Any] = {
                "input": os.path.abspath(cfg.input),
                "stream": cfg.stream,
                "batch_lines": cfg.batch_lines if cfg.batch_lines is not None else DEFAULT_BATCH_SIZE,
                "files": {},
                "outputs": {k: [p, 0] for k, p in outputs.items()},
                "rules_path": self.rules_path,
                "rules_text": rules_now,
                "lines": 0,
                "batches": 0,
                "checkpoints": 0,
                "fallback_ids": {},
                "finished": False,
                "limits": _limits_meta(cfg.limits),
                "queries_files": _queries_files(ruleset),
                "time_unit": cfg.time_unit,
            }
            self.resumed = False
        else:
            self.meta = ck.meta
            self._check_same(outputs)
            from patterns.rules import parse_rules

            ruleset = parse_rules(self.meta["rules_text"], self.meta["rules_path"], queries_roots=cfg.queries_roots)
            self.engine = Engine(with_time_unit(ruleset, cfg.time_unit))
            self.engine.restore(ck.snapshot)
            self.resumed = True
        self.engine.set_row_ids(True)
        self.engine.set_state_limits(cfg.limits)
        self.sinks = {k: _StdoutSink(n) if p == STDOUT else _Sink(p, n) for k, (p, n) in self.meta["outputs"].items()}
        self.source = LogSource(cfg.input, self.meta["files"], self.meta["batch_lines"], cfg.follow,
                                cfg.max_line_bytes, self.err, scan_seconds=max(cfg.poll_seconds, 0.05))
        self.cuts = _CutLog(cfg.state)
        self.waiter = self._waiter or (_Waiter(cfg.input) if cfg.follow else None)
        if cfg.follow and cfg.idle_progress is not None:
            self.idle = IdleProgress(cfg.idle_progress, self.clock)
        self.rules_sig = _sig(cfg.rules)
        self.rejected: str | None = None
        self.pending_reload: tuple[str, str] | None = None
        self.ck_batches = self.meta["batches"]  # the batches the last durable checkpoint covers
        self.ck_taken = self.meta["batches"]  # the batches the last checkpoint taken covers (durable or in flight)
        self.writer = _CheckpointWriter(cfg.state)
        self.since = 0
        self.last_ck = self.clock()
        self._watch_queries(ruleset)
        if self.resumed:
            done = self.meta["lines"]
            # batches the killed run took after the checkpoint: cut the replay the same way (the log
            # is rewritten to hold exactly them, so the cuts of this run follow on)
            self.source.replay = self.cuts.keep(self.meta["batches"])
            self.log(f"resuming from the checkpoint in {cfg.state} ({done:,} lines consumed)")
            before = self.meta.get("queries_files", {})
            for path, sha in self.queries_seen.items():
                if path in before and before[path] != sha:
                    self.log(f"the queries file {path} changed since the checkpoint; its new content runs")
            self.meta["queries_files"] = dict(self.queries_seen)
            if rules_now is None:
                self.log(f"{rules_err}; running the rules of the checkpoint")
            elif rules_now != self.meta["rules_text"]:
                # after the replay: the killed run processed those batches with the checkpoint's rules
                self.pending_reload = (rules_now, "the rule file changed since the checkpoint")
        else:
            # a first checkpoint before any row: a run killed before its next one restarts from here,
            # cutting back whatever rows it wrote
            self.checkpoint()
        if STDOUT in (p for p, _ in self.meta["outputs"].values()):
            self.log("rows go to standard output after every batch; after a restart the rows since the last "
                     "checkpoint are written again (same _id): at-least-once, deduplicate by _id")
        return None

    def _check_same(self, outputs: dict[str, str]) -> None:
        m = self.meta
        want = {k: p for k, (p, _) in m["outputs"].items()}
        if want != outputs:
            def show(d: dict[str, str]) -> str:
                return ", ".join(f"--{k} {v}" for k, v in sorted(d.items()))
            raise StateMismatch(
                f"state {self.cfg.state!r} writes {show(want)}; this run asks for {show(outputs)}. "
                "Pass the same outputs, or a new --state directory to start over"
            )
        if m["input"] != os.path.abspath(self.cfg.input):
            raise StateMismatch(
                f"state {self.cfg.state!r} consumes {m['input']}; pass the same --input or a new --state"
            )
        if self.cfg.batch_lines is not None and m["batch_lines"] != self.cfg.batch_lines:
            raise StateMismatch(
                f"state {self.cfg.state!r} was written with --batch-size {m['batch_lines']} (batches are "
                "part of the state, so the output stays byte-identical across restarts); pass "
                f"--batch-size {m['batch_lines']} or a new --state directory"
            )
        if m.get("limits", _limits_meta(StateLimits())) != _limits_meta(self.cfg.limits):
            raise StateMismatch(
                f"state {self.cfg.state!r} was written with state limits {m.get('limits')}, this run asks for "
                f"{_limits_meta(self.cfg.limits)} (they decide which rows are emitted); pass the same "
                "--idle-state-ttl / --max-partial-matches-total / --max-buffered-events or a new --state"
            )
        if m.get("time_unit") != self.cfg.time_unit:
            def unit(u: str | None) -> str:
                return f"--time-unit {u}" if u else "no --time-unit"
            raise StateMismatch(
                f"state {self.cfg.state!r} was written with {unit(m.get('time_unit'))}, this run asks for "
                f"{unit(self.cfg.time_unit)} (it decides every event's time); pass the same or a new --state"
            )
        if m.get("stream") != self.cfg.stream:
            raise StateMismatch(
                f"state {self.cfg.state!r} names its stream {m.get('stream')!r}, this run {self.cfg.stream!r}"
            )

    # -------------------------------------------------------------- work
    def checkpoint(self, background: bool = False) -> None:
        """Take a consistent cut and make it durable: now, or (``background``) in the writer thread."""
        self.checkpoint_done()
        for k, s in self.sinks.items():
            self.meta["outputs"][k][1] = s.flush()
        self.meta["checkpoints"] += 1
        self.meta["files"] = self.source.offsets
        ck = Checkpoint(json.loads(json.dumps(self.meta)), self.engine.snapshot())
        fds = [fd for s in self.sinks.values() if (fd := s.fileno()) is not None]
        self.since = 0
        self.ck_taken = self.meta["batches"]
        self.last_ck = self.clock()
        self.writer.start(fds, ck, self.meta["batches"])
        if not background:
            self.checkpoint_done()

    def checkpoint_done(self) -> None:
        """Wait for the checkpoint in flight; once durable, the cut log keeps only what it does not cover."""
        covered = self.writer.wait()
        if covered is not None:
            # the log starts at the previous checkpoint's next batch
            self.cuts.drop(covered - self.ck_batches, covered)
            self.ck_batches = covered

    def step(self, got: tuple[EventBatch, int]) -> None:
        """Process one batch: record its cut, then write (and flush) its rows."""
        batch, nlines = got
        src = self.source
        assert src.last_cut is not None
        self._replay_settled()
        self.meta["batches"] += 1
        if not src.last_replayed:  # a replayed cut is in the log already
            self.cuts.append(self.meta["batches"], src.last_cut)
        self.emit(self.engine.process(batch, self.cfg.stream))
        self._start_over()
        self.n_lines += nlines
        self.meta["lines"] += nlines
        self.since += nlines
        if self.idle is not None:
            self.idle.input_seen()

    def _start_over(self) -> None:
        """The run's start is over (its first batch is through, or it waits for input): tell the caller once."""
        if self.first_batch_done is not None:
            done, self.first_batch_done = self.first_batch_done, None
            done()

    def _replay_settled(self) -> None:
        """After a replay dropped midway: the rest of the recorded cuts no longer count, this run's follow on."""
        if self.source.replay_dropped:
            self.source.replay_dropped = False
            self.checkpoint_done()
            self.cuts.keep(self.ck_batches, self.meta["batches"])

    def replay_idle(self) -> None:
        """Apply the idle advances recorded next in the cut log, as the killed run applied them."""
        replay = self.source.replay
        while replay and isinstance(replay[0], dict):
            targets = replay.pop(0)["idle"]
            self.meta["batches"] += 1
            self.emit(self.engine.advance_watermarks(targets))
            self.n_idle += 1
            if self.idle is not None:
                self.idle.input_seen()  # the quiet spell of this run starts after the replay

    def idle_step(self) -> None:
        """No input: move the watermarks on with the wall clock when that makes something due.

        The advance is recorded in the cut log before its rows are written, as a batch's cut
        is, so a restart from an earlier checkpoint moves the same rules to the same watermarks
        at the same place among the batches, and writes the same bytes.
        """
        assert self.idle is not None
        targets = self.idle.targets(self.engine)
        if not targets:
            return
        self._replay_settled()
        self.meta["batches"] += 1
        self.cuts.append(self.meta["batches"], {"idle": targets})
        self.emit(self.idle.apply(self.engine, targets))
        self.n_idle += 1

    def emit(self, res: Any) -> None:
        for w in res.warnings:  # even with --quiet: the answer is likely wrong
            self.log(w)
        fb = self.meta["fallback_ids"]
        for row in res.matches:
            if "_id" not in row:  # rule kinds (and views) without their own ids: rule or view, and row number
                rule = str(row.get("rule", row.get("view")))
                n = fb[rule] = fb.get(rule, 0) + 1
                row["_id"] = f"{rule}:#{n}"
        self.sinks["output"].write(res.matches)
        self.n_matches += len(res.matches)
        self.n_late += len(res.late)
        self.n_errors += len(res.errors)
        self.n_timeouts += len(res.timeouts)
        if "timeouts" in self.sinks:
            self.sinks["timeouts"].write(res.timeouts)
        if "late" in self.sinks:
            self.sinks["late"].write(res.late)
        if "errors" in self.sinks:
            self.sinks["errors"].write(res.errors)

    def _read_rules(self) -> tuple[str | None, str]:
        """The rule file's text (bounded: patterns.rules.read_rule_file), or None and why not."""
        from patterns.rules import read_rule_file

        try:
            return read_rule_file(self.cfg.rules), ""
        except RuleErrors as e:
            return None, e.errors[0].message

    def _watch_queries(self, ruleset: Any) -> None:
        """Remember the queries files of ``ruleset``'s search rules: path -> content hash as loaded."""
        self.queries_seen: dict[str, str | None] = _queries_files(ruleset)
        self.queries_sig = {p: _sig(p) for p in self.queries_seen}

    def _queries_changed(self, quick: bool) -> list[str]:
        """Queries files whose content differs from what was last loaded or refused.

        ``quick``: look at the content only when the modification time, size or inode changed.
        """
        changed = []
        for path, seen in self.queries_seen.items():
            if quick:
                sig = _sig(path)
                if sig == self.queries_sig.get(path):
                    continue
                self.queries_sig[path] = sig
            if _content_sha(path) != seen:
                changed.append(path)
        return changed

    def reload(self, text: str | None, why: str, queries: list[str] | None = None) -> None:
        """Reload the rules from ``text`` (None: the rule file) when it or a queries file changed.

        ``queries`` names queries files known to have changed: the rules in force are read
        again with their new content, even when the rule file is unchanged.
        """
        from patterns.rules import parse_rules

        if text is None:
            text, problem = self._read_rules()
            if text is None:
                self.log(f"rules not reloaded ({why}): {problem}; the old rules keep running")
                return
        if queries is None and (text == self.meta["rules_text"] or text == self.rejected):
            # the rule file brings nothing new (or was refused as it is): its queries files may
            queries = self._queries_changed(quick=False)
            if not queries:
                return
            text = self.meta["rules_text"]  # the rules in force, with the queries' new content
            why = f"{why}: {_queries_why(queries)}"
        try:
            ruleset = parse_rules(text, self.cfg.rules, queries_roots=self.cfg.queries_roots)
        except RuleErrors as e:
            report = ReloadReport(False, errors=[x.format() for x in e.errors])
        else:
            report = self.engine.reload(with_time_unit(ruleset, self.cfg.time_unit))
        self.log(f"{why}: {report.summary()}")
        if not report.accepted:
            if text != self.meta["rules_text"]:
                self.rejected = text
            for path in queries or ():  # a refused queries file is not tried again until it changes
                self.queries_seen[path] = _content_sha(path)
            return
        if text != self.meta["rules_text"]:
            self.rejected = None  # a new rule text runs; a refused one stays refused
        self.meta["rules_text"] = text
        self.meta["rules_path"] = self.rules_path
        self._watch_queries(ruleset)
        self.meta["queries_files"] = dict(self.queries_seen)
        if self.idle is not None:
            self.idle.input_seen()  # new rules, new watermarks: a quiet spell starts from them
        self.checkpoint()

    def loop(self) -> int:
        cfg = self.cfg
        self.since = 0
        self.last_ck = self.clock()
        self.n_lines = self.n_matches = self.n_late = self.n_errors = self.n_timeouts = 0
        if self.meta["finished"]:
            if self.source.pending_bytes():
                self.log(
                    f"state {cfg.state!r} was closed by --finish (end of input) but the input has grown "
                    "since; start a new --state directory to process it"
                )
                return EXIT_USAGE
            self.log(f"state {cfg.state!r} is finished (end of input); nothing to do")
            self.cfg = DurableConfig(**{**cfg.__dict__, "quiet": True})  # nothing to summarise
            return EXIT_OK
        while not self.flags.stop:
            self.replay_idle()
            # reloads wait until the replayed batches are done: they ran under the checkpoint's rules
            if not self.source.replay:
                if self.pending_reload is not None:
                    text, why = self.pending_reload
                    self.pending_reload = None
                    self.reload(text, why)
                if self.flags.reload:
                    self.flags.reload = False
                    self.reload(None, "SIGHUP")
                elif cfg.watch_rules:
                    sig = _sig(cfg.rules)
                    if sig != self.rules_sig:
                        self.rules_sig = sig
                        self.reload(None, "the rule file changed")
                    changed = self._queries_changed(quick=True)
                    if changed:
                        self.reload(self.meta["rules_text"], _queries_why(changed), changed)
            # following: what is there when we look is a batch, however short (no wait to fill it)
            got = self.source.next_batch(force=cfg.follow)
            if got is None:
                self._start_over()  # (nothing to read now: a following run waits from here)
                if not cfg.follow:
                    break
                if self.idle is not None:
                    self.idle_step()
                if self.writer.done():
                    self.checkpoint_done()
                unsaved = self.meta["batches"] != self.ck_taken  # batches or idle advances since the checkpoint
                if unsaved and self.clock() - self.last_ck >= cfg.checkpoint_seconds:
                    self.checkpoint(background=True)
                wait = cfg.poll_seconds
                if unsaved:
                    wait = min(wait, max(0.001, cfg.checkpoint_seconds - (self.clock() - self.last_ck)))
                if self.idle is not None:
                    wait = min(wait, self.idle.wait_seconds(longest=cfg.poll_seconds))
                assert self.waiter is not None
                self.waiter.wait(wait)
                continue
            self.step(got)
            if self.writer.done():
                self.checkpoint_done()
            if self.since >= cfg.checkpoint_every or self.clock() - self.last_ck >= cfg.checkpoint_seconds:
                self.checkpoint(background=True)
        if cfg.finish and not self.flags.stop:
            self.source.finishing = True
            while True:
                self.replay_idle()
                got = self.source.next_batch(force=True)
                if got is None:
                    break
                self.step(got)
            self.emit(self.engine.finish())
            self.meta["finished"] = True
        self.checkpoint()
        return EXIT_OK

    def summary(self) -> None:
        m = self.meta
        if m["finished"]:  # a bounded input: mostly late means unsorted (said even with --quiet)
            warning = late_warning(self.engine.counts())
            if warning:
                self.log(warning)
        if self.cfg.quiet:
            return
        how = "stopped by a signal" if self.flags.stop else ("finished (end of input)" if m["finished"] else "caught up")
        self.log(
            f"{how}: {count_noun(self.n_lines, 'line')} this run ({m['lines']:,} in all), "
            f"{count_noun(self.n_matches, 'complex event')}, {self.n_late:,} late, {count_noun(self.n_errors, 'error')}"
            + timeouts_note(self.n_timeouts, bool(self.cfg.timeouts), durable=True)
            + (f", {count_noun(self.n_idle, 'idle advance')}" if self.n_idle else "")
            + "; "
            f"checkpoint {m['checkpoints']:,} in {self.cfg.state}"
        )
        tail = self.source.pending_bytes()
        if tail and not m["finished"]:
            self.log(f"{tail:,} bytes wait for a newline or a full batch (an unterminated last line is read "
                     "once a later file exists or with --finish)")
        if self.engine.bad_lines:
            self.log(f"bad lines in all: {self.engine.bad_lines:,}")
        for name, c in self.engine.counts().items():
            self.err.write(
                f"  {name}: read {c.read:,}, processed {c.processed:,}, late {c.late:,}, errors {c.errors:,}, "
                f"buffered {c.buffered:,}, matches {c.matches:,}"
                + (f", timeouts {c.timeouts:,}" if c.timeouts else "") + "\n"
            )
        for line in table_lines(self.engine):
            self.err.write(line + "\n")

    def close(self) -> None:
        writer = getattr(self, "writer", None)
        if writer is not None and writer.thread is not None:
            writer.thread.join()  # a kill would not wait; a clean end must not cut a checkpoint short
        for s in getattr(self, "sinks", {}).values():
            s.close()
        for x in (getattr(self, "cuts", None), getattr(self, "waiter", None)):
            if x is not None:
                x.close()
        lock = getattr(self, "lock", None)
        if lock is not None:
            lock.close()


def _limits_meta(limits: StateLimits) -> dict[str, int | None]:
    return {k: getattr(limits, k) for k in ("idle_state_ttl_ms", "max_partial_matches_total", "max_buffered_events")}


def _queries_files(ruleset: Any) -> dict[str, str | None]:
    """Every search rule's queries file (absolute, links resolved) -> SHA-256 of the content it was built from."""
    out: dict[str, str | None] = {}
    for r in ruleset:
        path = getattr(r.spec, "queries_file", None)
        if path:
            out[path] = getattr(r.spec, "queries_sha256", None)
    return out


def _queries_why(paths: list[str]) -> str:
    return "the queries file " + ", ".join(paths) + " changed"


def _content_sha(path: str) -> str | None:
    """SHA-256 of a queries file's bytes, read as a search rule reads it; None when it cannot be read."""
    from patterns.files import MAX_QUERIES_FILE_BYTES, FileRefused, read_limited

    try:
        return hashlib.sha256(read_limited(path, MAX_QUERIES_FILE_BYTES, "queries file", "")).hexdigest()
    except (OSError, FileRefused):
        return None


def _sig(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def run_durable(cfg: DurableConfig, err: TextIO | None = None, *, clock: Callable[[], float] | None = None,
                waiter: Any = None, first_batch_done: Callable[[], None] | None = None) -> int:
    """Run ``cfg`` to the end of its input (or, with ``follow``, until SIGINT / SIGTERM); exit code.

    ``clock`` (seconds) and ``waiter`` (an object with ``wait(seconds)`` and ``close()``) replace
    the wall clock and the wait for input: a test drives a following run without sleeping.
    ``first_batch_done`` is called once the run's first batch is through (``cep run`` ends its
    start there: :class:`cep.gc_pause.StartupCollector`).
    """
    err = err or sys.stderr
    if (cfg.batch_lines is not None and cfg.batch_lines < 1) or cfg.checkpoint_every < 1:
        err.write("cep run: --batch-size and --checkpoint-every must be at least 1\n")
        return EXIT_USAGE
    if not os.path.exists(cfg.input):
        err.write(f"cep run: input not found: {cfg.input}\n")
        return EXIT_USAGE
    if cfg.idle_progress is not None:
        problem = check_idle_seconds(cfg.idle_progress)
        if problem is None and not cfg.follow:
            problem = ("--idle-progress needs --follow: a run that stops at the end of its input never waits "
                       "for input (its end is the final watermark)")
        if problem is not None:
            err.write(f"cep run: {problem}\n")
            return EXIT_USAGE
    run = _Run(cfg, err, clock=clock, waiter=waiter, first_batch_done=first_batch_done)
    old: dict[int, Any] = {}

    def on_stop(signum, frame):  # noqa: ARG001
        run.flags.stop = True
        # a second signal stops at once; the checkpoint protocol keeps the state consistent
        signal.signal(signum, old.get(signum, signal.SIG_DFL))

    def on_hup(signum, frame):  # noqa: ARG001
        run.flags.reload = True

    try:
        for sig, fn in ((signal.SIGINT, on_stop), (signal.SIGTERM, on_stop), (signal.SIGHUP, on_hup)):
            old[sig] = signal.signal(sig, fn)
    except ValueError:  # not the main thread: no signal handling
        old = {}
    try:
        code = run.start()
        if code is not None:
            return code
        code = run.loop()
        run.summary()
        return code
    except _ReaderGone:
        # rows since the last checkpoint may not have reached anyone: no checkpoint, so a restart
        # writes them again
        err.write("cep run: the reader of standard output went away; stopped without a checkpoint (a restart "
                  "writes the rows since the last one again)\n")
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return EXIT_OK
    except StateMismatch as e:
        err.write(f"cep run: {e}\n")
        return EXIT_USAGE
    except CepError as e:
        err.write(f"cep run: {e}\n")
        return EXIT_RUNTIME
    finally:
        run.close()
        for signum, handler in old.items():
            signal.signal(signum, handler)
