"""Checkpoint files: the consistent cut written atomically, read back and checked, the background writer and the state lock."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cep.durable.errors import DurableError

__all__ = ["Checkpoint", "read_checkpoint", "write_checkpoint"]

MAGIC = b"CEPSTATE"
VERSION = 1
CHECKPOINT = "checkpoint"


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
