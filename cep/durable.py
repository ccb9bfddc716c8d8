"""Durable embedded runs: follow a log directory, checkpoint offsets with the engine state, exactly-once output.

``cep run RULES --input DIR --state STATE --output OUT [--follow]`` is a log consumer:

* **Input.** A file, or a directory whose files are read in name order (names starting with a dot
  are ignored, so write ``.name.tmp`` and rename it to add a file). Only JSON lines. A line is
  consumed once its newline is written; a file's unterminated last line is taken only once the
  file is closed (a later file exists) or the run was told the input ends (``--finish``).
* **Batches** are the next ``--batch-size`` lines of one file, shorter at the end of a closed
  file, at the end of the input without ``--follow``, and (``--follow``) whenever less is there
  when the run looks: what has arrived is processed at once. Checkpoints fall on batch boundaries.
* **Rows leave after every batch**: written and flushed (not fsynced) before the next batch, on
  their own clock, not the checkpoint's.
* **Checkpoint.** One file ``STATE/checkpoint`` holds the consumer offsets, the engine snapshot,
  the rule text in force and the byte length of every output file, written together (temporary
  file, fsync, rename, fsync of the directory) every N lines or T seconds, after a reload, and
  at a clean stop. ``STATE/cuts`` records where each batch since began and ended, before its rows
  are written.
* **Exactly-once output.** Every row carries a deterministic ``_id``; at restart each output file
  is cut back to the length recorded in the checkpoint, and the input is replayed from the
  offsets recorded with it, in the batches recorded in ``STATE/cuts``: the rows written after the
  checkpoint come back byte for byte, so a reader that keeps its byte offset sees each row once.
  Standard output (``--output -``) cannot be cut back: there the rows after the checkpoint are
  written again (at-least-once, the same ``_id``s).
* **Signals.** SIGINT / SIGTERM: finish the batch, checkpoint, exit 0. SIGHUP: reload the rules
  (as ``--watch-rules`` does when the rule file's modification time changes, or the content of a
  search rule's ``queries_file``).

See docs/reliability.md for what is and is not guaranteed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, TextIO

import numpy as np
import orjson

from cep.engine import Engine, ReloadReport, StateLimits, late_warning, with_time_unit
from cep.events import BadLine, EventBatch, batch_from_records, decode_json_line
from cep.idle import IdleProgress, check_idle_seconds
from patterns.errors import CepError, RuleErrors, count_noun
from patterns.files import command_line_roots

__all__ = [
    "DurableConfig",
    "DurableError",
    "StateMismatch",
    "LogSource",
    "Checkpoint",
    "read_checkpoint",
    "write_checkpoint",
    "run_durable",
    "config_from_args",
    "dumps_row",
    "MAX_LINE_BYTES",
]

MAGIC = b"CEPSTATE"
VERSION = 1
CHECKPOINT = "checkpoint"
MAX_LINE_BYTES = 8 << 20

EXIT_OK, EXIT_USAGE, EXIT_RUNTIME = 0, 2, 3


class DurableError(CepError):
    """A state directory that cannot be used: locked, corrupt, or written by another version."""


class StateMismatch(DurableError):
    """The command line disagrees with what the state directory was written with."""


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
    batch_lines: int = 8192  # input lines per batch (part of the state: fixed for its life)
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


# ------------------------------------------------------------------ output rows


def _json_default(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        # sketches (HLL_SKETCH) as base64 text, as Spark's JSON writer carries binary columns
        return base64.b64encode(v).decode("ascii")
    return str(v)


_OPTS = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY


def dumps_row(row: dict[str, Any]) -> bytes:
    """One JSON line; a value JSON cannot hold (nested too deep) becomes its shortened text.

    Example:
        >>> deep: dict = {}
        >>> d = deep
        >>> for _ in range(300):
        ...     d["a"] = {}
        ...     d = d["a"]
        >>> dumps_row({"line": 3, "event": deep})[:40]
        b'{"line":3,"event":"{\\'a\\': {\\'a\\': {\\'a\\': {\\'a'
        >>> dumps_row({"sketch": bytes((2, 1, 7, 12))})  # bytes as base64 text, as Spark writes binary
        b'{"sketch":"AgEHDA=="}\\n'
    """
    try:
        return orjson.dumps(row, default=_json_default, option=_OPTS)
    except orjson.JSONEncodeError:
        safe = {}
        for k, v in row.items():
            try:
                orjson.dumps(v, default=_json_default, option=orjson.OPT_SERIALIZE_NUMPY)
                safe[str(k)] = v
            except (orjson.JSONEncodeError, RecursionError):
                text = _safe_repr(v)
                safe[str(k)] = text if len(text) <= 1000 else text[:997] + "..."
        return orjson.dumps(safe, default=_json_default, option=_OPTS)


def _safe_repr(v: Any) -> str:
    try:
        return repr(v)
    except RecursionError:
        return f"<{type(v).__name__} nested too deep to show>"


class _Sink:
    """An append-only JSON lines file whose tail after the last checkpoint can be cut off.

    Rows are flushed to the file after every batch (readers see them at once); the file is
    fsynced only at checkpoints, which record its length.
    """

    def __init__(self, path: str, length: int):
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.fh: BinaryIO = os.fdopen(fd, "r+b")
        size = os.fstat(fd).st_size
        if size < length:
            self.fh.close()
            raise DurableError(
                f"output {path!r} holds {size} bytes but the checkpoint recorded {length}: it was "
                "truncated or replaced since; restore it or start over with a new --state directory"
            )
        self.fh.truncate(length)
        self.fh.seek(length)
        self.length = length
        self.rows = 0

    def write(self, rows: Iterable[dict[str, Any]]) -> None:
        data = b"".join(map(dumps_row, rows))
        if data:
            self.fh.write(data)
            self.fh.flush()
            self.length += len(data)
            self.rows += data.count(b"\n")

    def sync(self) -> int:
        self.fh.flush()
        os.fsync(self.fh.fileno())
        return self.length

    def flush(self) -> int:
        """Flush what is buffered (not fsync); the length written."""
        self.fh.flush()
        return self.length

    def fileno(self) -> int | None:
        """The descriptor to fsync, or None when there is no file to sync."""
        return self.fh.fileno()

    def close(self) -> None:
        self.fh.close()


class _StdoutSink(_Sink):
    """``--output -``: rows flushed to standard output after every batch; at-least-once.

    Nothing written can be taken back, so a restart writes the rows after the checkpoint again
    (the same bytes, the same ``_id``s). The recorded length counts bytes written, for the record.
    """

    def __init__(self, length: int):
        self.path = "-"
        self.fh = sys.stdout.buffer
        self.length = length
        self.rows = 0

    def write(self, rows: Iterable[dict[str, Any]]) -> None:
        try:
            super().write(rows)
        except BrokenPipeError:
            raise _ReaderGone() from None

    def sync(self) -> int:
        try:
            self.fh.flush()
        except BrokenPipeError:
            raise _ReaderGone() from None
        return self.length

    flush = sync

    def fileno(self) -> int | None:
        return None

    def close(self) -> None:
        try:
            self.fh.flush()
        except (BrokenPipeError, ValueError):
            pass


class _ReaderGone(Exception):
    """The reader of standard output went away (``| head``)."""


STDOUT = "-"


# ------------------------------------------------------------------ cut log


class _CutLog:
    """``STATE/cuts``: where every batch since the checkpoint began and ended, written before its rows.

    A following run takes what is there when it looks, so its batch boundaries depend on timing.
    Rows are written after every batch, ahead of the checkpoint; a restart cuts its replay at the
    recorded boundaries, so it writes again exactly the bytes a reader may already have seen. One
    JSON line per batch, ``[batch number, file, start offset, start line, end offset, end line]``;
    a checkpoint leaves only the cuts it does not cover. An idle advance (``--idle-progress``: the
    watermarks moved by the wall clock while no input came) is a step of its own, numbered with
    the batches: ``[number, {"idle": {rule: watermark}}]``, replayed as recorded.
    """

    NAME = "cuts"

    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, self.NAME)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def load(self, after: int) -> list[Any]:
        """The recorded steps ``after + 1``, ``after + 2``, ... (a torn last line ends them): each a
        cut (a list) or an idle advance (``{"idle": {rule: watermark}}``)."""
        try:
            data = Path(self.path).read_bytes()
        except OSError:
            return []
        out: list[Any] = []
        for raw in data.split(b"\n")[:-1]:
            try:
                cut = json.loads(raw)
            except ValueError:
                break
            if not (isinstance(cut, list) and (len(cut) == 6 or _is_idle(cut)) and isinstance(cut[0], int)):
                break
            if cut[0] <= after:
                continue
            if cut[0] != after + len(out) + 1:
                break
            out.append(cut[1] if len(cut) == 2 else cut[1:])
        return out

    def append(self, number: int, cut: list | dict) -> None:
        os.write(self.fd, _cut_line(number, cut))

    def drop(self, n: int, after: int) -> None:
        """Drop the first ``n`` cuts, those a checkpoint covering batch ``after`` made useless.

        Cheap (no parsing) for the run's own log, which starts right after the previous
        checkpoint; anything unexpected falls back to :meth:`keep`.
        """
        try:
            data = Path(self.path).read_bytes()
        except OSError:
            data = b""
        parts = data.split(b"\n", n)
        tail = parts[n] if len(parts) > n else b""
        if tail:
            try:
                ok = json.loads(tail[: tail.find(b"\n")])[0] == after + 1
            except (ValueError, TypeError, IndexError, KeyError):
                ok = False
            if not ok:
                self.keep(after)
                return
        self._rewrite(tail)

    def _rewrite(self, data: bytes) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def keep(self, after: int, upto: int | None = None) -> list[list]:
        """Rewrite the log to hold only the cuts of batches ``after + 1`` to ``upto`` (all when None)."""
        cuts = self.load(after)
        if upto is not None:
            cuts = cuts[: max(0, upto - after)]
        self._rewrite(b"".join(_cut_line(after + 1 + i, c) for i, c in enumerate(cuts)))
        return cuts

    def close(self) -> None:
        os.close(self.fd)


def _cut_line(number: int, cut: list | dict) -> bytes:
    return json.dumps([number, cut] if isinstance(cut, dict) else [number, *cut]).encode() + b"\n"


def _is_idle(line: list) -> bool:
    """A cut-log line that records an idle advance: ``[number, {"idle": {rule: watermark}}]``."""
    if len(line) != 2 or not isinstance(line[1], dict) or set(line[1]) != {"idle"}:
        return False
    targets = line[1]["idle"]
    return isinstance(targets, dict) and all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in targets.items())


class _CheckpointWriter:
    """Makes a checkpoint durable in a thread of its own: fsync the outputs, then write the file.

    The run takes the consistent cut itself (output lengths, offsets, engine snapshot) and goes on
    processing and writing rows while the disk catches up, so a slow fsync does not hold back the
    complex events of the next batches. One checkpoint at a time; :meth:`wait` joins it and
    re-raises what went wrong.
    """

    def __init__(self, state_dir: str):
        self.state_dir = state_dir
        self.thread: Any = None
        self.error: BaseException | None = None
        self.batches = 0  # the batches the checkpoint in flight covers

    def start(self, fds: list[int], ck: Checkpoint, batches: int) -> None:
        import threading

        def work() -> None:
            try:
                for fd in fds:
                    os.fsync(fd)
                write_checkpoint(self.state_dir, ck)
            except BaseException as e:  # noqa: BLE001 - handed to the run's thread
                self.error = e

        self.batches = batches
        self.thread = threading.Thread(target=work, name="cep-checkpoint", daemon=True)
        self.thread.start()

    def done(self) -> bool:
        """A checkpoint finished and was not collected yet."""
        return self.thread is not None and not self.thread.is_alive()

    def wait(self) -> int | None:
        """Join the checkpoint in flight; the batches it covers, or None when there was none."""
        if self.thread is None:
            return None
        self.thread.join()
        self.thread = None
        if self.error is not None:
            err, self.error = self.error, None
            raise err
        return self.batches


# ------------------------------------------------------------------ waiting for input


class _Waiter:
    """Sleeps until the input directory changes (Linux inotify) or ``timeout`` passes.

    Without inotify (another system, or no watch left) it sleeps ``timeout``: ``--poll``.
    """

    _MASK = 0x2 | 0x8 | 0x80 | 0x100  # IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE

    def __init__(self, path: str):
        self.fd = -1
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return
            target = path if os.path.isdir(path) else (os.path.dirname(os.path.abspath(path)) or ".")
            if libc.inotify_add_watch(fd, os.fsencode(target), self._MASK) < 0:
                os.close(fd)
                return
            self.fd = fd
        except (OSError, AttributeError):
            self.fd = -1

    def wait(self, timeout: float) -> None:
        if self.fd < 0:
            time.sleep(timeout)
            return
        import select

        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            try:
                while os.read(self.fd, 65536):
                    pass
            except BlockingIOError:
                pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# ------------------------------------------------------------------ checkpoint file


@dataclass
class Checkpoint:
    """Consumer offsets, output lengths, rule text and engine snapshot: one consistent cut."""

    meta: dict[str, Any]
    snapshot: bytes


def write_checkpoint(state_dir: str, ck: Checkpoint) -> None:
    """Write ``ck`` atomically: temporary file, fsync, rename over the old one, fsync the directory."""
    meta = json.dumps(ck.meta, sort_keys=True).encode()
    body = MAGIC + bytes([VERSION]) + struct.pack(">Q", len(meta)) + meta + struct.pack(">Q", len(ck.snapshot)) + ck.snapshot
    body += hashlib.sha256(body).digest()
    tmp = os.path.join(state_dir, f".{CHECKPOINT}.tmp")
    with open(tmp, "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(state_dir, CHECKPOINT))
    dfd = os.open(state_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_checkpoint(state_dir: str) -> Checkpoint | None:
    """The last checkpoint in ``state_dir``, or None when there is none yet."""
    path = os.path.join(state_dir, CHECKPOINT)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < len(MAGIC) + 1 + 16 + 32 or not data.startswith(MAGIC):
        raise DurableError(f"{path} is not a cep checkpoint; use another --state directory")
    if data[len(MAGIC)] != VERSION:
        raise DurableError(
            f"{path} was written by checkpoint format {data[len(MAGIC)]}, this engine reads format "
            f"{VERSION}; use the engine that wrote it or a new --state directory"
        )
    body, digest = data[:-32], data[-32:]
    if hashlib.sha256(body).digest() != digest:
        raise DurableError(f"{path} is damaged (checksum mismatch); use a new --state directory")
    i = len(MAGIC) + 1
    (n,) = struct.unpack(">Q", body[i : i + 8])
    meta = json.loads(body[i + 8 : i + 8 + n])
    i += 8 + n
    (m,) = struct.unpack(">Q", body[i : i + 8])
    return Checkpoint(meta, bytes(body[i + 8 : i + 8 + m]))


def _lock(state_dir: str) -> Any:
    import fcntl

    fh = open(os.path.join(state_dir, "lock"), "a+")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise DurableError(f"another cep run is using the state directory {state_dir!r}") from None
    return fh


# ------------------------------------------------------------------ input


class LogSource:
    """Lines of a file or of a directory's files in name order, from recorded byte offsets.

    ``offsets`` maps a file name to ``[byte offset, lines consumed]`` and is updated as batches
    are taken; it is what a checkpoint records. ``last_cut`` is the batch just taken, as
    ``[file name, start offset, start line, end offset, end line]``: what the cut log records.
    ``replay`` holds cuts to take again, in order, before any other batch (a restart repeats the
    batches its killed predecessor took after the checkpoint).
    """

    def __init__(self, path: str, offsets: dict[str, list[int]], batch_lines: int, follow: bool,
                 max_line_bytes: int = MAX_LINE_BYTES, warn: TextIO | None = None, scan_seconds: float = 0.2):
        self.path = path
        self.is_dir = os.path.isdir(path)
        self.offsets = offsets
        self.batch_lines = batch_lines
        self.follow = follow
        self.max_line = max_line_bytes
        self.finishing = False  # the input ends: an unterminated last line is a line
        self.warn = warn or sys.stderr
        self.replay: list[Any] = []  # cuts (lists); the run takes recorded idle advances (dicts) itself
        self.replay_dropped = False  # the replay was abandoned (the input no longer fits it)
        self.last_cut: list | None = None
        self.last_replayed = False  # the last batch was a replayed cut
        # --follow: the file the last batch came from is read again without listing the directory,
        # for at most scan_seconds between listings (so a file appearing before it is not starved)
        self.hot: str | None = None
        self.scan_seconds = scan_seconds
        self.last_scan = 0.0

    def names(self) -> list[str]:
        """Files to read, in name order."""
        if not self.is_dir:
            return [os.path.basename(self.path)] if os.path.exists(self.path) else []
        if not os.path.isdir(self.path):
            return []
        out = []
        with os.scandir(self.path) as it:
            for e in it:
                if not e.name.startswith(".") and e.is_file():
                    out.append(e.name)
        return sorted(out)

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name) if self.is_dir else self.path

    def pending_bytes(self) -> int:
        """Bytes present but not consumed yet (complete or not)."""
        total = 0
        for name in self.names():
            try:
                size = os.path.getsize(self._file(name))
            except OSError:
                continue
            total += max(0, size - self.offsets.get(name, [0, 0])[0])
        return total

    def next_batch(self, force: bool = False) -> tuple[EventBatch, int] | None:
        """The next batch and its number of lines, or None when none is ready.

        A batch shorter than ``batch_lines`` comes only from the end of a closed file (a later
        file exists, or the input ends), without ``--follow``, or when ``force`` is set (a
        following run sets it: what is there when it looks is processed at once), or as a
        replayed cut.
        """
        if self.replay:
            assert isinstance(self.replay[0], list), "the run applies a recorded idle advance before the next batch"
            got = self._replay_next()
            if got is not None:
                return got
        if self.follow and self.hot is not None and time.monotonic() - self.last_scan < self.scan_seconds:
            taken = self._take(self.hot, closed=False, force=force)
            if taken:
                return taken
        self.last_scan = time.monotonic()
        names = self.names()
        for idx, name in enumerate(names):
            closed = idx + 1 < len(names) or self.finishing
            taken = self._take(name, closed, force)
            if taken is None:
                return None  # a partial batch of the newest file: wait for more
            if taken:
                return taken
        return None

    def _take(self, name: str, closed: bool, force: bool) -> tuple[EventBatch, int] | tuple[()] | None:
        """The next batch of one file; ``()`` when it has no line to give, None to wait for more."""
        path = self._file(name)
        off, line = self.offsets.get(name, [0, 0])
        try:
            size = os.path.getsize(path)
        except OSError:
            return ()
        if size < off:
            self.warn.write(f"cep run: {path} shrank below the consumed offset {off}; reading it again from the start\n")
            off, line = 0, 0
            self.offsets[name] = [0, 0]
        if size == off:
            return ()
        got = self._read(path, off, line, closed)
        if got is None:
            return ()
        lines, new_off, new_line = got
        if not lines:
            return ()
        if len(lines) < self.batch_lines and not (closed or not self.follow or force):
            return None  # the newest file may still grow: wait for a full batch
        self.offsets[name] = [new_off, new_line]
        self.last_cut = [name, off, line, new_off, new_line]
        self.last_replayed = False
        self.hot = name
        return _decode(lines, path, self.max_line), len(lines)

    def _replay_next(self) -> tuple[EventBatch, int] | None:
        """The next recorded cut, read again; None (and no more replay) when the input no longer fits it."""
        name, off, line, end, end_line = self.replay[0]
        path = self._file(name)
        why = None
        try:
            size = os.path.getsize(path)
        except OSError:
            size = -1
        if self.offsets.get(name, [0, 0]) != [off, line]:
            why = f"it starts at byte {off} of {path}, the checkpoint at {self.offsets.get(name, [0, 0])[0]}"
        elif size < end:
            why = f"{path} holds {size} bytes, the cut ends at byte {end}"
        else:
            got = self._read(path, off, line, True, end)
            if got is None or not got[0] or (got[1], got[2]) != (end, end_line):
                why = f"{path} no longer has the same lines between bytes {off} and {end}"
        if why is not None:
            self.warn.write(f"cep run: the batches recorded after the checkpoint do not fit the input ({why}); "
                            "cutting batches afresh: rows written after the checkpoint may be rewritten in "
                            "another order\n")
            self.replay = []
            self.replay_dropped = True
            return None
        assert got is not None
        self.replay.pop(0)
        lines, new_off, new_line = got
        self.offsets[name] = [new_off, new_line]
        self.last_cut = [name, off, line, new_off, new_line]
        self.last_replayed = True
        self.hot = name
        return _decode(lines, path, self.max_line), len(lines)

    def _read(self, path: str, off: int, line: int, closed: bool, end: int | None = None):
        lines: list[tuple[int, bytes | None, int]] = []
        limit = self.max_line
        try:
            fh = open(path, "rb")
        except OSError:
            return None
        with fh:
            fh.seek(off)
            pos = off
            while len(lines) < self.batch_lines and (end is None or pos < end):
                raw = fh.readline(limit + 1)
                if not raw:
                    break
                if end is not None and pos + len(raw) > end:
                    raw = raw[: end - pos]  # a replayed cut took an unterminated tail that has grown since
                if raw.endswith(b"\n"):
                    line += 1
                    pos += len(raw)
                    lines.append((line, raw, len(raw)))
                    continue
                if len(raw) > limit:
                    # a line longer than the limit: skip to its end without holding it
                    skipped = len(raw)
                    ended = False
                    while True:
                        chunk = fh.readline(1 << 20)
                        if not chunk:
                            break
                        skipped += len(chunk)
                        if chunk.endswith(b"\n"):
                            ended = True
                            break
                    if end is not None and pos + skipped > end:
                        skipped = end - pos
                    if not ended and not closed:
                        break  # still being written
                    line += 1
                    pos += skipped
                    lines.append((line, None, skipped))
                    continue
                if closed:  # an unterminated last line of a file that is done
                    line += 1
                    pos += len(raw)
                    lines.append((line, raw, len(raw)))
                break
        return lines, pos, line


def _decode(lines: list[tuple[int, bytes | None, int]], src: str, limit: int) -> EventBatch:
    """JSON lines to a batch; a line that is not a JSON object becomes a BadLine with its reason."""
    records: list[dict] = []
    nums: list[int] = []
    bad: list[BadLine] = []
    for lineno, raw, size in lines:
        if raw is None:
            bad.append(BadLine(lineno, f"line of {size:,} bytes is longer than the limit of {limit:,} bytes", src, None))
            continue
        got = decode_json_line(raw, lineno, src, mark_unterminated=True)
        if isinstance(got, BadLine):
            bad.append(got)
        elif got is not None:
            records.append(got)
            nums.append(lineno)
    b = batch_from_records(records, nums, src)
    b.bad = bad
    return b


# ------------------------------------------------------------------ the run


class _Flags:
    def __init__(self) -> None:
        self.stop = False
        self.reload = False


class _Run:
    """One durable run. ``clock`` (seconds, default ``time.monotonic``) times checkpoints and idle
    progress, and ``waiter`` (default: inotify on the input) waits for input; tests pass fakes."""

    def __init__(self, cfg: DurableConfig, err: TextIO, clock: Callable[[], float] | None = None,
                 waiter: Any = None):
        self.cfg = cfg
        self.err = err
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
                "batch_lines": cfg.batch_lines,
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
        if m["batch_lines"] != self.cfg.batch_lines:
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
        self.n_lines += nlines
        self.meta["lines"] += nlines
        self.since += nlines
        if self.idle is not None:
            self.idle.input_seen()

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
            if "_id" not in row:  # rule kinds without their own ids: rule and row number
                rule = str(row.get("rule"))
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
            + (f", {self.n_timeouts:,} timed out" + ("" if self.cfg.timeouts else " (not written: pass --timeouts FILE)")
               if self.n_timeouts else "")
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
                waiter: Any = None) -> int:
    """Run ``cfg`` to the end of its input (or, with ``follow``, until SIGINT / SIGTERM); exit code.

    ``clock`` (seconds) and ``waiter`` (an object with ``wait(seconds)`` and ``close()``) replace
    the wall clock and the wait for input: a test drives a following run without sleeping.
    """
    err = err or sys.stderr
    if cfg.batch_lines < 1 or cfg.checkpoint_every < 1:
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
    run = _Run(cfg, err, clock=clock, waiter=waiter)
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
