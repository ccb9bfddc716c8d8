"""Scanners: one multi-string (Aho-Corasick) pass over a field's token string ``" t1 t2 ... "``,
one adapter per library."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable
from itertools import chain
from typing import Any

import ahocorasick
import numpy as np

from cep.percolator.arrays import _NONE
from patterns.errors import CepError

__all__ = ["available_automata", "_SCANNERS", "_Scanner", "_scanner_class"]


class _Scanner:
    """Every occurrence (overlaps included) of a fixed set of words, each with an int value.

    One subclass per library, all behind this interface: ``find`` scans one text, ``find_batch``
    many at once (one pass over the texts joined by ``\\x02``, which no word contains).
    """

    name = ""
    _source: tuple[list[str], list[int]]

    def __init__(self, words: list[str], values: list[int]) -> None:
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        # a saved index holds the words; the automaton is built again when loaded
        return type(self), self._source

    def find(self, text: str) -> list[int]:
        """Values of the words found in ``text``, once per occurrence."""
        raise NotImplementedError

    def find_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(text index, value)`` arrays, one entry per occurrence."""
        raise NotImplementedError


def _starts(lengths: Iterable[int], n: int) -> np.ndarray:
    """Offsets of each text in the texts joined by one separator character."""
    starts = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(np.fromiter(lengths, dtype=np.int64, count=n)[:-1] + 1, out=starts[1:])
    return starts


class _PyAhoCorasick(_Scanner):
    """pyahocorasick (C): the default, always installed."""

    name = "pyahocorasick"

    def __init__(self, words: list[str], values: list[int]) -> None:
        self._source = (words, values)
        auto = ahocorasick.Automaton()
        for word, value in zip(words, values):
            auto.add_word(word, value)
        auto.make_automaton()
        self._iter = auto.iter

    def find(self, text: str) -> list[int]:
        return [v for _, v in self._iter(text)]

    def find_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        found = list(self._iter("\x02".join(texts)))
        if not found:
            return _NONE, _NONE
        arr = np.fromiter(chain.from_iterable(found), dtype=np.int64,
                          count=2 * len(found)).reshape(-1, 2)
        starts = _starts(map(len, texts), len(texts))
        return np.searchsorted(starts, arr[:, 0], side="right") - 1, arr[:, 1]


class _AhoCorasickRs(_Scanner):
    """ahocorasick_rs (Rust, optional): matches come back as one list, no per-match callback."""

    name = "ahocorasick_rs"

    def __init__(self, words: list[str], values: list[int]) -> None:
        import ahocorasick_rs

        self._source = (words, values)
        self._find = ahocorasick_rs.AhoCorasick(words).find_matches_as_indexes
        self._values = values
        self._value_arr = np.array(values, dtype=np.int64)

    def find(self, text: str) -> list[int]:
        values = self._values
        return [values[i] for i, _, _ in self._find(text, overlapping=True)]

    def find_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        found = self._find("\x02".join(texts), overlapping=True)
        if not found:
            return _NONE, _NONE
        arr = np.array(found, dtype=np.int64)
        starts = _starts(map(len, texts), len(texts))
        return (np.searchsorted(starts, arr[:, 1], side="right") - 1,
                self._value_arr[arr[:, 0]])


def _hs_collect(value: int, start: int, end: int, flags: int, out: Any) -> None:
    out.append(value)


def _hs_collect_end(value: int, start: int, end: int, flags: int, out: Any) -> None:
    out.append(value)
    out.append(end)


class _Hyperscan(_Scanner):
    """Intel Hyperscan (optional): literal mode over UTF-8 bytes; one callback per match."""

    name = "hyperscan"

    def __init__(self, words: list[str], values: list[int]) -> None:
        import hyperscan

        self._source = (words, values)
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=[w.encode("utf-8") for w in words], ids=list(values),
                   elements=len(words), flags=0, literal=True)
        self._db = db
        self._new_scratch = hyperscan.Scratch
        self._local = threading.local()  # a scratch space per thread: scans may run in parallel

    def _scratch(self) -> Any:
        got = getattr(self._local, "scratch", None)
        if got is None:
            got = self._local.scratch = self._new_scratch(self._db)
        return got

    def find(self, text: str) -> list[int]:
        out: list[int] = []
        self._db.scan(text.encode("utf-8"), match_event_handler=_hs_collect, context=out,
                      scratch=self._scratch())
        return out

    def find_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        data = [t.encode("utf-8") for t in texts]
        out: list[int] = []
        self._db.scan(b"\x02".join(data), match_event_handler=_hs_collect_end, context=out,
                      scratch=self._scratch())
        if not out:
            return _NONE, _NONE
        arr = np.array(out, dtype=np.int64).reshape(-1, 2)
        starts = _starts(map(len, data), len(data))
        return np.searchsorted(starts, arr[:, 1] - 1, side="right") - 1, arr[:, 0]


_SCANNERS: dict[str, type[_Scanner]] = {
    c.name: c for c in (_PyAhoCorasick, _AhoCorasickRs, _Hyperscan)
}
# Fastest first, as measured by benchmarks/bench_percolator.py (see docs/search.md).
_AUTO_ORDER = {
    # every key of every token (7 hits per headline): pyahocorasick was fastest, one string at
    # a time and in batches; exact phrases only (sparse): ahocorasick_rs, one at a time
    "dense": ("pyahocorasick",),
    "sparse": ("ahocorasick_rs", "pyahocorasick"),
}


def available_automata() -> list[str]:
    """The Aho-Corasick libraries that import here (``PercolatorConfig.automaton`` values).

    Example:
        >>> "pyahocorasick" in available_automata()
        True
    """
    out = []
    for name in _SCANNERS:
        if name != "pyahocorasick":
            try:
                importlib.import_module(name)
            except ImportError:
                continue
        out.append(name)
    return out


def _scanner_class(name: str, workload: str = "dense") -> type[_Scanner]:
    """The scanner for ``PercolatorConfig.automaton`` (``auto``: the fastest installed for a
    ``dense`` or ``sparse`` workload, as measured by benchmarks/bench_percolator.py)."""
    if name == "auto":
        have = available_automata()
        return _SCANNERS[next(n for n in _AUTO_ORDER[workload] if n in have)]
    if name not in available_automata():
        raise CepError(f"automaton {name!r} is not installed: pip install {name}, or use "
                       "automaton='auto' (the fastest installed one)")
    return _SCANNERS[name]
