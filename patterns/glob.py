"""Wildcard matching in linear time: Lucene's ``*``/``?`` and SQL ``LIKE``'s ``%``/``_``.

A regular expression such as ``.*a.*a.*a.*c`` backtracks: against one long token without a
``c`` it takes time exponential in the number of stars (a 13-star query over a 40-letter token
took a minute). A glob has no nesting, so it needs no backtracking at all: the parts between
the stars must occur in order, each as early as possible (taking the leftmost occurrence never
rules out a match that a later one would allow), the first part anchored at the start and the
last at the end. Each part is found with ``str.find`` (or, when it holds single-character
wildcards, with a fixed-length regular expression that cannot backtrack), so a match costs
O(len(text) * len(pattern)) at worst and usually one scan of the text.
"""

from __future__ import annotations

import re
from typing import Callable

__all__ = ["Glob"]


class Glob:
    """A compiled wildcard pattern; ``fullmatch(text)`` is True when the whole text matches.

    ``many`` stands for any run of characters (also none), ``one`` for exactly one character;
    every other character is literal.

    Example:
        >>> Glob("te?m*").fullmatch("teams"), Glob("te?m*").fullmatch("tam")
        (True, None)
        >>> Glob("%a_c%", many="%", one="_").fullmatch("xabcx")
        True
        >>> Glob("a*a*a*a*a*a*a*a*a*a*a*a*c").fullmatch("a" * 10_000) is None
        True
    """

    __slots__ = ("pattern", "_exact", "_first", "_last", "_middle", "_min_len")

    def __init__(self, pattern: str, many: str = "*", one: str = "?") -> None:
        self.pattern = pattern
        parts = pattern.split(many)
        if len(parts) == 1:
            self._exact: _Part | None = _Part(parts[0], one)
            self._first = self._last = None
            self._middle: tuple[_Part, ...] = ()
        else:
            self._exact = None
            self._first = _Part(parts[0], one)
            self._last = _Part(parts[-1], one)
            self._middle = tuple(_Part(p, one) for p in parts[1:-1] if p)
        self._min_len = sum(len(p) for p in parts)

    def fullmatch(self, text: str) -> bool | None:
        """True when ``text`` matches the whole pattern, else None (like ``re.fullmatch``)."""
        n = len(text)
        if n < self._min_len:
            return None
        if self._exact is not None:
            return True if n == len(self._exact.text) and self._exact.at(text, 0) else None
        first, last = self._first, self._last
        assert first is not None and last is not None
        end = n - len(last.text)
        if not first.at(text, 0) or not last.at(text, end):
            return None
        pos = len(first.text)
        for part in self._middle:
            found = part.find(text, pos, end)
            if found < 0:
                return None
            pos = found + len(part.text)
        return True

    def __repr__(self) -> str:
        return f"Glob({self.pattern!r})"


class _Part:
    """Literal text between two many-wildcards, possibly holding one-character wildcards."""

    __slots__ = ("text", "at", "find")

    def __init__(self, text: str, one: str) -> None:
        self.text = text
        self.at: Callable[[str, int], bool]
        self.find: Callable[[str, int, int], int]
        if one not in text:
            self.at = lambda s, i: s.startswith(text, i)
            self.find = lambda s, i, j: s.find(text, i, j)
        else:
            # fixed length, no quantifier: the engine cannot backtrack beyond len(text) per start
            rx = re.compile("".join("." if c == one else re.escape(c) for c in text), re.DOTALL)
            self.at = lambda s, i: rx.match(s, i, i + len(text)) is not None
            self.find = lambda s, i, j: m.start() if (m := rx.search(s, i, j)) else -1
