"""Output sinks of durable runs: JSON lines files cut back to the checkpoint at restart, and standard output."""

from __future__ import annotations

import base64
import os
import sys
from typing import Any, BinaryIO, Iterable

import numpy as np
import orjson

from cep.durable.errors import DurableError
from cep.json_exact import wide_ints_exact

__all__ = ["dumps_row", "dumps_rows", "STDOUT"]

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
_LIST_OPTS = orjson.OPT_SERIALIZE_NUMPY  # a whole list of rows, cut into lines (dumps_rows)


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
        >>> dumps_row({"event": {"id": 2**64, "n": [-2**63 - 1, 5]}})  # ints past 64 bits: exact JSON numbers
        b'{"event":{"id":18446744073709551616,"n":[-9223372036854775809,5]}}\\n'
    """
    try:
        return orjson.dumps(row, default=_json_default, option=_OPTS)
    except orjson.JSONEncodeError:
        pass
    try:  # an integer orjson cannot write (beyond 64 bits): its exact digits, the row kept whole
        return orjson.dumps(wide_ints_exact(row), default=_json_default, option=_OPTS)
    except (orjson.JSONEncodeError, RecursionError):
        safe = {}
        for k, v in row.items():
            try:
                # checked one level down, as it sits in the row: a value at the depth limit on
                # its own is one too deep inside the row
                orjson.dumps([v], default=_json_default, option=orjson.OPT_SERIALIZE_NUMPY)
                safe[str(k)] = v
            except (orjson.JSONEncodeError, RecursionError):
                text = _safe_repr(v)
                safe[str(k)] = text if len(text) <= 1000 else text[:997] + "..."
        return orjson.dumps(safe, default=_json_default, option=_OPTS)


def dumps_rows(rows: list[dict[str, Any]]) -> bytes:
    """JSON lines of ``rows``, as :func:`dumps_row` writes each (in one call for them all when it can).

    Example:
        >>> dumps_rows([{"a": 1}, {"b": bytes((2, 1))}])
        b'{"a":1}\\n{"b":"AgE="}\\n'
        >>> dumps_rows([{"a": "},{"}, {"b": [{"c": 1}, {"c": 2}]}])  # a boundary's bytes inside rows
        b'{"a":"},{"}\\n{"b":[{"c":1},{"c":2}]}\\n'
    """
    if len(rows) > 1 and set(map(type, rows)) == {dict}:
        # One call for the whole list costs a tenth of one call per row. Rows are objects, so the
        # list reads ``[{...},{...}]`` and every boundary between two rows is ``},{``: when the
        # text holds exactly one fewer of those than there are rows, there is none inside a row
        # (in a string or a nested value) and cutting at each gives the rows' own bytes.
        try:
            whole = orjson.dumps(rows, default=_json_default, option=_LIST_OPTS)
        except orjson.JSONEncodeError:  # a value orjson cannot write (nested too deep): below
            whole = b""
        if whole.count(b"},{") == len(rows) - 1:
            return whole[1:-1].replace(b"},{", b"}\n{") + b"\n"
    try:
        return b"".join([orjson.dumps(r, default=_json_default, option=_OPTS) for r in rows])
    except orjson.JSONEncodeError:  # a value orjson cannot write: each row on its own
        return b"".join(map(dumps_row, rows))


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
