"""The cut log ``STATE/cuts``: where each batch (or idle advance) since the checkpoint began and ended."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = []

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
