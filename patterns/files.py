"""Files that rule files and command lines name: size limits, regular files only, and confinement to allowed folders.

A rule file is untrusted data, so a path written in it (a search rule's ``queries_file``) may
only name a regular file below the rule file's folder, or below a folder the person running
``cep`` allowed (``--queries-root DIR``, or the ``CEP_QUERIES_ROOTS`` environment variable),
symbolic links resolved first. Every file is read up to a size limit and never past it, so an
endless device (``/dev/zero``) or a file that keeps growing cannot exhaust memory, and a named
pipe is refused before it is opened for reading, so it cannot hang the reader.

Every reader of JSON lines or CSV text drops a leading UTF-8 byte-order mark with
:func:`strip_bom` (Notepad and Excel's "CSV UTF-8" write one).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import AnyStr, Iterable

from patterns.errors import CepError

__all__ = [
    "MAX_RULE_FILE_BYTES",
    "UTF8_BOM",
    "MAX_QUERIES_FILE_BYTES",
    "QUERIES_ROOTS_ENV",
    "FileRefused",
    "file_kind",
    "queries_roots",
    "command_line_roots",
    "confine",
    "check_regular_file",
    "read_limited",
    "strip_bom",
]

#: The largest rule file read (bytes; ``parse_rules`` counts characters of its text).
MAX_RULE_FILE_BYTES = 4 << 20

#: The largest queries file read, by a search rule's ``queries_file`` or ``cep percolate --queries``.
MAX_QUERIES_FILE_BYTES = 256 << 20

#: Folders (separated by ``os.pathsep``) whose files a rule's ``queries_file`` may name, besides
#: the rule file's own folder.
QUERIES_ROOTS_ENV = "CEP_QUERIES_ROOTS"


#: U+FEFF encoded in UTF-8: the byte-order mark some editors write at the start of a text file.
UTF8_BOM = b"\xef\xbb\xbf"


def strip_bom(data: AnyStr) -> AnyStr:
    """``data`` without a leading UTF-8 byte-order mark (bytes, or text already decoded).

    Example:
        >>> strip_bom(b'\\xef\\xbb\\xbf{"id": 1}'), strip_bom('\\ufeffid,price'), strip_bom(b"{}")
        (b'{"id": 1}', 'id,price', b'{}')
    """
    if isinstance(data, bytes):
        return data[len(UTF8_BOM):] if data.startswith(UTF8_BOM) else data
    return data.removeprefix("\ufeff")


class FileRefused(CepError):
    """A named file that is not read: outside the allowed folders, not a regular file, or too large."""


def _limit_text(n: int) -> str:
    return f"{n:,} bytes ({n / (1 << 20):g} MiB)" if n >= 1 << 20 else f"{n:,} bytes"


def file_kind(mode: int) -> str:
    """What a file is, in words, from its ``st_mode``.

    Example:
        >>> file_kind(os.stat("/dev/null").st_mode), file_kind(os.stat("/").st_mode)
        ('a character device', 'a directory')
    """
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def queries_roots(extra: Iterable[str | os.PathLike[str]] | None = None) -> tuple[str, ...]:
    """The folders allowed besides a rule file's own: ``extra`` if given, else ``$CEP_QUERIES_ROOTS``.

    Example:
        >>> queries_roots(["/srv/queries"])
        ('/srv/queries',)
    """
    if extra is not None:
        return tuple(os.fspath(p) for p in extra)
    env = os.environ.get(QUERIES_ROOTS_ENV, "")
    return tuple(p for p in env.split(os.pathsep) if p)


def command_line_roots(given: Iterable[str] | None) -> tuple[str, ...]:
    """The folders of ``$CEP_QUERIES_ROOTS`` followed by those a command line gave (``--queries-root``).

    Example:
        >>> os.environ.pop(QUERIES_ROOTS_ENV, None) and None
        >>> command_line_roots(["/srv/q"]), command_line_roots(None)
        (('/srv/q',), ())
    """
    return queries_roots() + tuple(given or ())


def confine(path: str | os.PathLike[str], base: str | os.PathLike[str], roots: Iterable[str] = (),
            what: str = "queries file", written: str | None = None) -> Path:
    """``path`` with symbolic links resolved, if it lies in ``base`` or one of ``roots`` (or below).

    Raises FileRefused otherwise, naming the path (as ``written`` in the rule, if given), where it
    leads and what to do.

    Example:
        >>> confine("/srv/rules/q.jsonl", "/srv/rules")
        PosixPath('/srv/rules/q.jsonl')
        >>> confine("/srv/rules/../secrets.jsonl", "/srv/rules")
        Traceback (most recent call last):
        ...
        patterns.files.FileRefused: queries file /srv/rules/../secrets.jsonl (/srv/secrets.jsonl) is outside /srv/rules, the rule file's folder; keep it in that folder (or below), or allow its folder with --queries-root DIR or the CEP_QUERIES_ROOTS environment variable
    """
    real = Path(os.path.realpath(path))
    allowed = [Path(os.path.realpath(base)), *(Path(os.path.realpath(r)) for r in roots)]
    if any(real == a or real.is_relative_to(a) for a in allowed):
        return real
    shown = written if written is not None else os.fspath(path)
    if str(real) != shown:
        shown += f" ({real})"
    where = f"{allowed[0]}, the rule file's folder"
    if len(allowed) > 1:
        where += ", and outside " + ", ".join(str(a) for a in allowed[1:])
    raise FileRefused(
        f"{what} {shown} is outside {where}; keep it in that folder (or below), "
        f"or allow its folder with --queries-root DIR or the {QUERIES_ROOTS_ENV} environment variable"
    )


def check_regular_file(path: str | os.PathLike[str], limit: int, what: str, hint: str) -> os.stat_result:
    """The ``stat`` of ``path`` when it is a regular file of at most ``limit`` bytes; FileRefused otherwise.

    ``what`` names the file in the message ("queries file"), ``hint`` says what to do when it is too large.
    Missing files raise FileNotFoundError, as ``open`` would.
    """
    st = os.stat(path)
    _check_stat(st, path, limit, what, hint)
    return st


def _check_stat(st: os.stat_result, path: str | os.PathLike[str], limit: int, what: str, hint: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{what} {os.fspath(path)} is {file_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise FileRefused(_too_large(path, st.st_size, limit, what, hint))


def _too_large(path: str | os.PathLike[str], size: int, limit: int, what: str, hint: str, more: bool = False) -> str:
    held = f"more than {limit:,} bytes" if more else f"{size:,} bytes"
    return f"{what} {os.fspath(path)} holds {held}, past the limit of {_limit_text(limit)}; {hint}"


def read_limited(path: str | os.PathLike[str], limit: int, what: str, hint: str, regular: bool = True) -> bytes:
    """The bytes of ``path``, read without ever holding more than ``limit`` + 1 of them.

    With ``regular`` (the default) only a regular file is read: a named pipe is opened without
    blocking and refused, as are devices, sockets and directories. Without it (a rule file
    named on the command line may be ``<(...)``), anything readable is read up to the limit.
    Raises FileRefused, or OSError (FileNotFoundError, PermissionError, ...) as ``open`` would.

    Example:
        >>> read_limited("/dev/zero", 10, "queries file", "split it")
        Traceback (most recent call last):
        ...
        patterns.files.FileRefused: queries file /dev/zero is a character device, not a regular file
        >>> read_limited("/dev/zero", 10, "rule file", "split it", regular=False)
        Traceback (most recent call last):
        ...
        patterns.files.FileRefused: rule file /dev/zero holds more than 10 bytes, past the limit of 10 bytes; split it
    """
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | (getattr(os, "O_NONBLOCK", 0) if regular else 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if regular or stat.S_ISREG(st.st_mode):
            _check_stat(st, path, limit, what, hint)  # a regular file's size is known before reading
        elif stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            try:
                chunk = os.read(fd, min(limit + 1 - got, 1 << 20))
            except BlockingIOError:  # pragma: no cover - only a non-regular file would block
                break
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:  # a file that grew since its stat, or a device without end
            raise FileRefused(_too_large(path, got, limit, what, hint, more=True))
        return b"".join(chunks)
    finally:
        os.close(fd)
