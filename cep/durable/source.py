"""The log source: JSON lines of a file or a directory's files, in batches from recorded byte offsets, and the wait for more."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

from cep.events import BadLine, EventBatch, _with_bad, decode_json_line, json_batch

__all__ = ["LogSource", "MAX_LINE_BYTES"]

MAX_LINE_BYTES = 8 << 20


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
    raws: list[bytes] = []
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
            raws.append(raw)
    return _with_bad(json_batch(records, nums, src, raws), bad)
