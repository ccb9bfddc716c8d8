"""The presearcher: which terms (keys) a document must contain to match a query, and the plan the
index stores for it."""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Union

from patterns.lucene import (
    BoolNode,
    MatchNoneNode,
    Node,
    PhraseNode,
    PrefixNode,
    RangeNode,
    TermNode,
    WildcardNode,
)

__all__ = ["Key", "Presearcher", "QueryPlan", "_literal_prefix"]


Key = tuple[Union[str, None], str, str]
"""A presearcher term: ``(field or None for the default fields, kind, text)``; kind ``t`` is a
whole token (or an exact phrase: its tokens joined by spaces), ``p`` a token prefix, ``w`` a
token matching a wildcard pattern."""


@dataclass(frozen=True)
class QueryPlan:
    """What the index stores for one query (plain data).

    ``keys``: a document containing none of them cannot match (None: check every document).
    ``kind``: ``proven`` (a hit on any key is a match: a term or a disjunction of terms),
    ``flat`` (decided by which keys hit: all of ``required``, one of each of ``groups``, none of
    ``forbidden``), or ``general`` (verified on the document; ``required`` is a quick filter).
    ``required`` is ordered most selective first.
    """

    kind: Literal["proven", "flat", "general"]
    keys: frozenset[Key] | None
    required: tuple[Key, ...] = ()
    groups: tuple[frozenset[Key], ...] = ()
    forbidden: frozenset[Key] = frozenset()
    ranges: tuple[RangeNode, ...] = ()
    """Numeric and date ranges a flat query's document must also satisfy (MUST clauses)."""

    @property
    def all_keys(self) -> frozenset[Key]:
        """Every key the scanner must report for this plan."""
        out = set(self.keys or ())
        out.update(self.required, self.forbidden)
        for g in self.groups:
            out.update(g)
        return frozenset(out)


def _key_of(node: Node) -> Key | None:
    """The one key whose presence decides ``node``: a term, a prefix, a wildcard, or an exact
    phrase of adjacent terms (its terms joined by spaces, found by Aho-Corasick in
    ``" t1 t2 ... "``)."""
    if isinstance(node, TermNode):
        return (node.field, "t", node.term)
    if isinstance(node, PrefixNode):
        return (node.field, "p", node.prefix)
    if isinstance(node, WildcardNode):
        return (node.field, "w", node.pattern)
    if (
        isinstance(node, PhraseNode)
        and node.slop == 0
        and node.positions == tuple(range(len(node.terms)))
    ):
        return (node.field, "t", " ".join(node.terms))
    return None


def _key_disjunction(node: Node) -> frozenset[Key] | None:
    """Keys of a term, a prefix, or an OR of those; None when the node is something else."""
    key = _key_of(node)
    if key is not None:
        return frozenset((key,))
    if isinstance(node, BoolNode) and not node.must and not node.must_not:
        out: set[Key] = set()
        for child in node.should:
            sub = _key_disjunction(child)
            if sub is None:
                return None
            out |= sub
        return frozenset(out)
    return None


def _literal_prefix(pattern: str) -> str:
    """The characters of a wildcard pattern before its first ``*`` or ``?``."""
    return re.split(r"[*?]", pattern, maxsplit=1)[0]


def _literal_count(pattern: str) -> int:
    return len(pattern) - pattern.count("*") - pattern.count("?")


class Presearcher:
    """Extract from each query the terms a matching document must contain.

    A conjunction is indexed by its most selective child, a disjunction by the union of its
    children, prohibited clauses add nothing, a term, prefix, wildcard or exact phrase by
    itself (the index resolves prefixes and wildcards per distinct document term); a query
    with nothing to extract is checked against every document.

    Example:
        >>> from patterns.lucene import compile_query
        >>> p = Presearcher()
        >>> sorted(p.plan(compile_query("apple AND pie")).keys)
        [(None, 't', 'apple')]
        >>> p.plan(compile_query("apple OR pie")).kind
        'proven'
        >>> p.plan(compile_query("price:[1 TO 5]")).keys is None
        True
        >>> wild = p.plan(compile_query("te?m*"))
        >>> wild.kind, sorted(wild.keys)
        ('proven', [(None, 'w', 'te?m*')])
    """

    def __init__(self, term_frequencies: Mapping[str, float] | None = None) -> None:
        self.term_frequencies = term_frequencies
        self._vocab: list[str] | None = None
        self._cumulative: list[float] = []
        self._wildcard_cost: dict[str, float] = {}

    def cost(self, key: Key) -> float:
        """Estimated fraction of documents that contain ``key`` (lower is more selective).

        Without a term-frequency table a term of n letters costs 2**-n, a prefix 2**-(n-1) and a
        wildcard with n literal characters 2**-(n-1); with a table a term costs its frequency,
        a prefix or a wildcard the summed frequency of the table's terms it matches.
        """
        _, kind, text = key
        n = len(text)
        tf = self.term_frequencies
        if kind == "t":
            if " " in text:  # an exact phrase: rarer than its rarest term
                return 0.5 * min(self.cost((key[0], "t", t)) for t in text.split(" "))
            if tf is not None:
                return tf.get(text, 0.0) + 1e-9 * 2.0**-n
            return 2.0**-n
        if kind == "p":
            if tf is not None:
                return min(1.0, self._prefix_frequency(text)) + 1e-9 * 2.0 ** -(n - 1)
            return min(1.0, 2.0 ** -(n - 1))
        n = _literal_count(text)
        if tf is not None:
            return min(1.0, self._wildcard_frequency(text)) + 1e-9 * 2.0 ** -(n - 1)
        return min(1.0, 2.0 ** -(n - 1))

    def _prefix_range(self, prefix: str) -> tuple[int, int]:
        """Positions ``lo:hi`` of the table's terms that start with ``prefix``."""
        if self._vocab is None:
            tf = self.term_frequencies or {}
            self._vocab = sorted(tf)
            acc = [0.0]
            for t in self._vocab:
                acc.append(acc[-1] + tf[t])
            self._cumulative = acc
        lo = bisect.bisect_left(self._vocab, prefix)
        return lo, bisect.bisect_left(self._vocab, prefix + "\U0010ffff", lo)

    def _prefix_frequency(self, prefix: str) -> float:
        lo, hi = self._prefix_range(prefix)
        return self._cumulative[hi] - self._cumulative[lo]

    def _wildcard_frequency(self, pattern: str) -> float:
        got = self._wildcard_cost.get(pattern)
        if got is None:
            lo, hi = self._prefix_range(_literal_prefix(pattern))
            full = WildcardNode(None, pattern).matcher.fullmatch
            tf = self.term_frequencies or {}
            vocab = self._vocab or []
            got = 0.0
            for t in vocab[lo:hi]:
                if full(t):
                    got += tf[t]
            if len(self._wildcard_cost) < 1_000_000:
                self._wildcard_cost[pattern] = got
        return got

    def set_cost(self, keys: frozenset[Key]) -> float:
        """Cost of a key set: the sum of its keys' costs."""
        return sum(self.cost(k) for k in keys)

    def extract(self, node: Node) -> frozenset[Key] | None:
        """Keys at least one of which every matching document contains (None: unknown)."""
        key = _key_of(node)
        if key is not None:
            return frozenset((key,))
        if isinstance(node, PhraseNode):
            return frozenset((min(((node.field, "t", t) for t in node.terms), key=self.cost),))
        if isinstance(node, MatchNoneNode):
            return frozenset()
        if isinstance(node, BoolNode):
            if node.must:
                options = [k for k in map(self.extract, node.must) if k is not None]
                if not options:
                    return None
                return min(options, key=self.set_cost)
            out: set[Key] = set()
            for child in node.should:
                sub = self.extract(child)
                if sub is None:
                    return None
                out |= sub
            return frozenset(out)
        return None  # ranges, exists, match-all

    def necessary(self, node: Node) -> frozenset[Key]:
        """Keys every matching document contains (all of them): a cheap filter."""
        key = _key_of(node)
        if key is not None:
            return frozenset((key,))
        if isinstance(node, PhraseNode):
            return frozenset((node.field, "t", t) for t in node.terms)
        if isinstance(node, BoolNode) and node.must:
            out: set[Key] = set()
            for child in node.must:
                out |= self.necessary(child)
            return frozenset(out)
        return frozenset()

    def plan(self, node: Node) -> QueryPlan:
        """The plan stored for ``node``."""
        keys = self.extract(node)
        disj = _key_disjunction(node)
        if disj is not None:
            return QueryPlan("proven", disj)
        if isinstance(node, BoolNode):
            flat = self._flat(node)
            if flat is not None:
                required, groups, forbidden, ranges = flat
                return QueryPlan("flat", keys, self._by_cost(required), groups, forbidden, ranges)
        return QueryPlan("general", keys, self._by_cost(self.necessary(node)))

    def _by_cost(self, keys: frozenset[Key]) -> tuple[Key, ...]:
        return tuple(sorted(keys, key=lambda k: (self.cost(k), k[1], k[2], k[0] or "")))

    @staticmethod
    def _flat(
        node: BoolNode,
    ) -> tuple[
        frozenset[Key], tuple[frozenset[Key], ...], frozenset[Key], tuple[RangeNode, ...]
    ] | None:
        required: set[Key] = set()
        groups: list[frozenset[Key]] = []
        forbidden: set[Key] = set()
        ranges: list[RangeNode] = []
        for child in node.must:
            if isinstance(child, RangeNode) and child.kind != "term":
                ranges.append(child)
                continue
            d = _key_disjunction(child)
            if d is None:
                return None
            if len(d) == 1:
                required |= d
            else:
                groups.append(d)
        if not node.must:  # SHOULD clauses count only without MUST clauses
            union: set[Key] = set()
            for child in node.should:
                d = _key_disjunction(child)
                if d is None:
                    return None
                union |= d
            groups.append(frozenset(union))
        for child in node.must_not:
            d = _key_disjunction(child)
            if d is None:
                return None
            forbidden |= d
        return frozenset(required), tuple(groups), frozenset(forbidden), tuple(ranges)
