"""The percolator: standing Lucene queries indexed by their terms, matched against documents."""

from __future__ import annotations

import bisect
import gc
import hashlib
import importlib
import math
import pickle
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, compress, count, islice, repeat
from operator import itemgetter
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Union

import ahocorasick
import numpy as np
import orjson

from patterns.analysis import AnalysisConfig, Analyzer, Token
from patterns.errors import CepError
from patterns.lucene import (
    BoolNode,
    ExistsNode,
    MatchAllNode,
    MatchNoneNode,
    Node,
    PhraseNode,
    PrefixNode,
    QueryConfig,
    RangeNode,
    TermNode,
    WildcardNode,
    compile_query,
    iter_nodes,
    parse_date_ms,
    parse_number,
)

__all__ = [
    "PercolatorConfig",
    "Key",
    "QueryPlan",
    "Presearcher",
    "RegisteredQuery",
    "DocumentMatches",
    "BatchStats",
    "BatchResult",
    "Percolator",
    "NoFiltering",
    "Span",
    "QueryId",
    "saved_config",
]

QueryId = Hashable
Span = tuple[str, int, int]
"""``(field, start, end)``: character offsets into the original field text; a list element's
field is written ``name[i]``."""

Key = tuple[Union[str, None], str, str]
"""A presearcher term: ``(field or None for the default fields, kind, text)``; kind ``t`` is a
whole token (or an exact phrase: its tokens joined by spaces), ``p`` a token prefix, ``w`` a
token matching a wildcard pattern."""

_SCANNER_NAMES = ("pyahocorasick", "ahocorasick_rs", "hyperscan")
_FORMAT = "cep-percolator-queries"
_VERSION = 1
_INDEX_FORMAT = "cep-percolator-index"
_INDEX_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class PercolatorConfig:
    """How queries are parsed and indexed and how documents are read."""

    query: QueryConfig = field(default_factory=QueryConfig)
    """Query parsing and text analysis (default operator, default fields, analysis)."""
    id_field: str | None = "id"
    """Document field holding its identity; never searched as a default field."""
    exclude_fields: tuple[str, ...] = ()
    """More fields never searched as default fields (a query may still name them), such as
    the ``stream`` tag the engine adds to events."""
    term_frequencies: Mapping[str, float] | None = field(default=None, compare=False, hash=False)
    """Relative document frequency (0..1) per term, to pick a conjunction's rarest term; None
    estimates selectivity from term length."""
    scanner: Literal["dict", "aho"] = "dict"
    """``dict``: whole-token, prefix and wildcard keys through the term dictionary (one dict
    lookup per document term), exact phrases by Aho-Corasick; ``aho``: every key but wildcards
    by one Aho-Corasick pass over ``" tok1 tok2 ... "``."""
    automaton: Literal["auto", "pyahocorasick", "ahocorasick_rs", "hyperscan"] = "auto"
    """The library behind the Aho-Corasick passes; ``auto`` takes the fastest installed for the
    scanner's workload (measured: pyahocorasick for ``aho``'s dense hits, ahocorasick_rs, else
    pyahocorasick, for ``dict``'s phrases); pyahocorasick is always installed."""
    term_cache_size: int = 250_000
    """Distinct document terms whose keys each segment remembers per field (about 100 bytes
    each); past it, a new term is resolved again wherever it occurs (see :class:`_TermKeys`)."""
    prefill_terms: bool = True
    """Resolve the terms of ``term_frequencies`` (a vocabulary known beforehand) when the
    index is fully built, rather than on their first sighting in a document (delta segments
    always resolve on first sight)."""
    delta_limit: int = 2_000
    """Queries registered since the last full build go to a small delta segment until there are
    more than this many (or more than 1/8 of the base), then everything is rebuilt."""

    vector_threshold: int = 16
    """Batches of at least this many documents take the vectorised (numpy) path (measured at
    100k queries over headlines: one at a time is faster up to 8 documents, numpy from 16)."""
    pause_gc: bool = True
    """Suspend Python's cyclic garbage collector while a vectorised batch runs, an index is
    built, or queries are registered by ``register_many`` / ``load`` (it is turned back on
    before the call returns, if it was on). These allocate many objects that no collection
    could free; collections in the middle only traverse them: measured at 100k queries, about
    30% of the batch time and of the build."""

    def __post_init__(self) -> None:
        if self.scanner not in ("dict", "aho"):
            raise ValueError(f"scanner must be 'dict' or 'aho', got {self.scanner!r}")
        if self.automaton != "auto" and self.automaton not in _SCANNER_NAMES:
            raise ValueError(f"automaton must be 'auto' or one of {', '.join(_SCANNER_NAMES)}, "
                             f"got {self.automaton!r}")
        object.__setattr__(self, "exclude_fields", tuple(self.exclude_fields))


_FINGERPRINT: list[str] = []


def _code_fingerprint() -> str:
    """A digest of the code whose objects a saved index holds (this module, the query parser and
    the analysis): an index is read back only by the code that wrote it."""
    if not _FINGERPRINT:
        digest = hashlib.sha256()
        for module in ("cep.percolator", "patterns.lucene", "patterns.analysis"):
            source = getattr(importlib.import_module(module), "__file__", None)
            try:
                digest.update(Path(source).read_bytes() if source else module.encode())
            except OSError:  # pragma: no cover - no source at hand
                digest.update(module.encode())
        _FINGERPRINT.append(digest.hexdigest()[:32])
    return _FINGERPRINT[0]


@contextmanager
def _gc_paused(pause: bool = True) -> Iterator[None]:
    """Suspend the cyclic garbage collector (when ``pause`` and it runs), then turn it back on.

    Example:
        >>> with _gc_paused():
        ...     gc.isenabled()
        False
        >>> gc.isenabled()
        True
    """
    if not (pause and gc.isenabled()):
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _config_to_json(config: PercolatorConfig) -> dict[str, Any]:
    q, a = config.query, config.query.analysis
    return {
        "query": {
            "default_operator": q.default_operator,
            "default_fields": list(q.default_fields) if q.default_fields is not None else None,
            "allow_leading_wildcard": q.allow_leading_wildcard,
            "auto_phrase": q.auto_phrase,
            "analysis": {"lowercase": a.lowercase, "stopwords": sorted(a.stopwords),
                         "stemmer": a.stemmer},
        },
        "id_field": config.id_field,
        "exclude_fields": list(config.exclude_fields),
        "term_frequencies": (dict(config.term_frequencies)
                             if config.term_frequencies is not None else None),
        "scanner": config.scanner,
        "automaton": config.automaton,
        "term_cache_size": config.term_cache_size,
        "prefill_terms": config.prefill_terms,
        "delta_limit": config.delta_limit,
        "vector_threshold": config.vector_threshold,
        "pause_gc": config.pause_gc,
    }


def saved_config(path: str | Path) -> tuple[str, PercolatorConfig] | None:
    """For a file written by :meth:`Percolator.save` or :meth:`Percolator.save_index`: its kind
    (``"queries"`` or ``"index"``) and the configuration it was saved with; None for any other
    file (such as plain JSON lines of queries). Raises OSError if the file cannot be read.

    Example:
        >>> import os, tempfile
        >>> p = Percolator(PercolatorConfig(query=QueryConfig(default_operator="AND")))
        >>> path = os.path.join(tempfile.mkdtemp(), "queries.jsonl")
        >>> p.save(path)
        >>> kind, config = saved_config(path)
        >>> kind, config.query.default_operator
        ('queries', 'AND')
    """
    with open(path, "rb") as fh:
        first = fh.readline(1 << 26)
    try:
        header = orjson.loads(first)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(header, dict) or "config" not in header:
        return None
    kind = {_FORMAT: "queries", _INDEX_FORMAT: "index"}.get(str(header.get("format")))
    if kind is None:
        return None
    try:
        return kind, _config_from_json(header["config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CepError(f"{path}: the saved configuration cannot be read ({exc})") from None


def _config_from_json(data: dict[str, Any]) -> PercolatorConfig:
    q = dict(data["query"])
    a = q.pop("analysis")
    analysis = AnalysisConfig(a["lowercase"], frozenset(a["stopwords"]), a["stemmer"])
    fields = q.pop("default_fields")
    query = QueryConfig(default_fields=tuple(fields) if fields is not None else None,
                        analysis=analysis, **q)
    return PercolatorConfig(query=query, **{k: v for k, v in data.items() if k != "query"})


# ---------------------------------------------------------------------------------------------
# Presearcher: which terms must a matching document contain?



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
            full = WildcardNode(None, pattern).regex.fullmatch
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


# ---------------------------------------------------------------------------------------------
# Documents as the matcher sees them

_MISSING = object()


def _lookup(doc: Mapping[str, Any], name: str) -> Any:
    if name in doc:
        return doc[name]
    if "." in name:
        cur: Any = doc
        for part in name.split("."):
            if not isinstance(cur, Mapping) or part not in cur:
                return _MISSING
            cur = cur[part]
        return cur
    return _MISSING


def _scalar_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return None


class _Context:
    """What a document view needs from the configuration (shared, immutable)."""

    __slots__ = ("analyzer", "default_fields", "id_field", "skip", "plain")

    def __init__(self, config: PercolatorConfig) -> None:
        self.analyzer = Analyzer(config.query.analysis)
        self.default_fields = config.query.default_fields
        self.id_field = config.id_field
        # fields that are never default fields: the id and the configured exclusions
        self.skip = frozenset(f for f in (config.id_field, *config.exclude_fields) if f is not None)
        self.plain = config.query.analysis.is_plain


class _DocView:
    """One document, analysed lazily and at most once per field."""

    __slots__ = ("doc", "ctx", "_c", "_t", "_n")

    def __init__(self, doc: Mapping[str, Any], ctx: _Context) -> None:
        self.doc = doc
        self.ctx = ctx
        # one cache for everything derived, keyed by (what, field): few objects per document;
        # terms and value counts, read most, by field alone (no key tuple made per reading)
        self._c: dict[tuple[str, str | None], Any] = {}
        self._t: dict[str | None, list[str]] = {}
        self._n: dict[str | None, int] = {}

    def numbers(self, fld: str | None, kind: str) -> list[float | int]:
        """Values of ``fld`` as numbers (``kind`` number) or epoch ms (``kind`` date)."""
        got = self._c.get((kind, fld))
        if got is None:
            convert = _as_number if kind == "number" else _as_date_ms
            got = [x for x in map(convert, self.raw_values(fld)) if x is not None]
            self._c[(kind, fld)] = got
        return got

    def default_fields(self) -> list[str]:
        if self.ctx.default_fields is not None:
            return list(self.ctx.default_fields)
        skip = self.ctx.skip
        out = []
        for k, v in self.doc.items():
            if k in skip:
                continue
            if isinstance(v, str) or (isinstance(v, list) and any(isinstance(x, str) for x in v)):
                out.append(k)
        return out

    def values(self, fld: str | None) -> list[tuple[str, str]]:
        """``(label, text)`` for every text value of ``fld`` (None: the default fields)."""
        got = self._c.get(("v", fld))
        if got is not None:
            return got
        out: list[tuple[str, str]] = []
        if fld is None:
            implicit = self.ctx.default_fields is None
            for name in self.default_fields():
                if implicit:
                    v = self.doc[name]
                    if isinstance(v, str):
                        out.append((name, v))
                    else:
                        out.extend((f"{name}[{i}]", x) for i, x in enumerate(v)
                                   if isinstance(x, str))
                else:
                    out.extend(self.values(name))
        else:
            v = _lookup(self.doc, fld)
            if isinstance(v, list):
                for i, x in enumerate(v):
                    t = _scalar_text(x)
                    if t is not None:
                        out.append((f"{fld}[{i}]", t))
            elif v is not _MISSING:
                t = _scalar_text(v)
                if t is not None:
                    out.append((fld, t))
        self._c[("v", fld)] = out
        return out

    def raw_values(self, fld: str | None) -> list[Any]:
        """Scalar values of ``fld`` (list elements flattened), for ranges."""
        if fld is None:
            out: list[Any] = []
            for name in self.default_fields():
                out.extend(self.raw_values(name))
            return out
        v = _lookup(self.doc, fld)
        if v is _MISSING or v is None:
            return []
        if isinstance(v, list):
            return [x for x in v if x is not None and not isinstance(x, (list, dict))]
        return [] if isinstance(v, dict) else [v]

    def exists(self, fld: str | None) -> bool:
        if fld is None:
            return any(self.exists(name) for name in self.default_fields())
        v = _lookup(self.doc, fld)
        return v is not _MISSING and v is not None and v != []

    def terms(self, fld: str | None) -> list[str]:
        got = self._t.get(fld)
        if got is None:
            ctx = self.ctx
            if fld is None and ctx.default_fields is None and ctx.plain:
                # the common case, without building (label, text) pairs
                skip = ctx.skip
                terms = ctx.analyzer.terms
                fast: list[str] | None = None
                cache = self._t
                n = 0
                for k, v in self.doc.items():
                    if type(v) is str:
                        if k not in skip:
                            # cached per field too: a field both default and named is
                            # analysed once (and then the same list: see _Segment.scan)
                            mine = cache.get(k)
                            if mine is None:
                                mine = cache[k] = terms(v)
                            fast = mine if fast is None else fast + mine
                            n += 1
                    elif isinstance(v, (str, list)):
                        fast = None
                        break
                else:
                    self._n[fld] = n
                    got = cache[fld] = fast if fast is not None else []
                    return got
            vals = self.values(fld)
            an = self.ctx.analyzer
            if len(vals) == 1:
                got = an.terms(vals[0][1])
            else:
                got = []
                for _, text in vals:
                    got.extend(an.terms(text))
            self._t[fld] = got
        return got

    def single_terms(self, fld: str | None) -> list[str] | None:
        """The terms of ``fld`` when it holds exactly one text value and analysis is plain
        (a term's position is then its index in this list), else None."""
        if not self.ctx.plain:
            return None
        terms = self.terms(fld)
        n = self._n.get(fld)
        if n is None:
            n = self._n[fld] = len(self.values(fld))
        return terms if n == 1 else None

    def termset(self, fld: str | None) -> set[str]:
        got = self._c.get(("s", fld))
        if got is None:
            got = self._c[("s", fld)] = set(self.terms(fld))
        return got

    def joined(self, fld: str | None) -> str:
        """``" t1 t2 ... "``: adjacent terms are adjacent positions; values are separated (and
        removed stop words marked) by ``\x01`` so no phrase key matches across them."""
        got = self._c.get(("j", fld))
        if got is None:
            vals = self.values(fld)
            if self.ctx.plain:
                if len(vals) == 1:
                    body = " ".join(self.terms(fld))
                else:
                    an = self.ctx.analyzer
                    body = " \x01 ".join(" ".join(an.terms(text)) for _, text in vals)
            else:
                parts = []
                for _, text in vals:
                    words: list[str] = []
                    last = -1
                    for term, p in self.ctx.analyzer.positioned_terms(text):
                        if p != last + 1:
                            words.append("\x01")
                        words.append(term)
                        last = p
                    parts.append(" ".join(words))
                body = " \x01 ".join(parts)
            got = self._c[("j", fld)] = f" {body} "
        return got

    def positions(self, fld: str | None) -> list[dict[str, list[int]]]:
        """Per text value: term -> sorted positions."""
        got = self._c.get(("p", fld))
        if got is None:
            got = []
            an = self.ctx.analyzer
            vals = self.values(fld)
            for _, text in vals:
                d: dict[str, list[int]] = {}
                pairs = (enumerate(self.terms(fld)) if len(vals) == 1 and self.ctx.plain
                         else ((p, t) for t, p in an.positioned_terms(text)))
                for p, term in pairs:
                    got_list = d.get(term)
                    if got_list is None:
                        d[term] = [p]
                    else:
                        got_list.append(p)
                got.append(d)
            self._c[("p", fld)] = got
        return got

    def tokens(self, fld: str | None) -> list[tuple[str, list[Token]]]:
        got = self._c.get(("k", fld))
        if got is None:
            an = self.ctx.analyzer
            got = self._c[("k", fld)] = [(label, an.tokens(text)) for label, text in self.values(fld)]
        return got


class _Batch:
    """A batch of documents as the vectorised path reads them: each field's terms analysed for
    every document at once (:meth:`Analyzer.terms_many`), and a :class:`_DocView` made only for
    the few documents something must look at one by one (verification, highlighting, values
    that are not plain strings). Terms come out the same as ``_DocView.terms`` (tested)."""

    __slots__ = ("docs", "ctx", "n", "_views", "_terms")

    def __init__(self, docs: list[Mapping[str, Any]], ctx: _Context) -> None:
        self.docs = docs
        self.ctx = ctx
        self.n = len(docs)
        self._views: list[_DocView | None] = [None] * self.n
        self._terms: dict[str | None, tuple[list[list[str]], np.ndarray, list[Any]]] = {}

    def view(self, i: int) -> _DocView:
        v = self._views[i]
        if v is None:
            v = self._views[i] = _DocView(self.docs[i], self.ctx)
        return v

    def terms(self, fld: str | None) -> tuple[list[list[str]], np.ndarray]:
        """Per document, the terms of ``fld`` (None: the default fields), and whether the field
        holds exactly one value under plain analysis (a term's position is then its index)."""
        got = self._terms.get(fld)
        if got is None:
            got = self._terms[fld] = self._analyse(fld)
        return got[0], got[1]

    def sole_field(self) -> str | None:
        """The field every document's default fields consist of, when that is one plain string
        field in each (then its terms are the default fields' terms), else None."""
        got = self._terms.get(None)
        if got is None:
            got = self._terms[None] = self._analyse(None)
        sole = got[2]
        first = sole[0] if sole else None
        if first is None or any(k != first for k in sole):
            return None
        return first

    def _analyse(self, fld: str | None) -> tuple[list[list[str]], np.ndarray, list[Any]]:
        ctx = self.ctx
        docs = self.docs
        texts: list[str] = []
        counts: list[int] = []  # texts per document; -1: read through its view
        sole: list[Any] = []  # the one field holding a document's default text (None: not one)
        if fld is None and ctx.default_fields is None:
            skip = ctx.skip
            for doc in docs:
                c = 0
                key = None
                for k, v in doc.items():
                    if type(v) is str:
                        if k not in skip:
                            texts.append(v)
                            c += 1
                            key = k
                    elif isinstance(v, (str, list)):  # lists, str subclasses: the view's way
                        if c:
                            del texts[-c:]
                        c = -1
                        break
                counts.append(c)
                sole.append(key if c == 1 else None)
        elif fld is not None:
            for doc in docs:
                v = doc.get(fld, _MISSING) if isinstance(doc, dict) else _MISSING
                if type(v) is str:
                    texts.append(v)
                    counts.append(1)
                else:
                    counts.append(-1)
        else:
            counts = [-1] * self.n
        analysed = iter(ctx.analyzer.terms_many(texts))
        per_doc: list[list[str]] = []
        single = np.zeros(self.n, dtype=bool)
        plain = ctx.plain
        for i, c in enumerate(counts):
            if c == 1:
                per_doc.append(next(analysed))
                single[i] = plain
            elif c == 0:
                per_doc.append([])
            elif c > 1:
                per_doc.append(list(chain.from_iterable(islice(analysed, c))))
            else:
                v = self.view(i)
                per_doc.append(v.terms(fld))
                single[i] = v.single_terms(fld) is not None
        return per_doc, single, sole


# ---------------------------------------------------------------------------------------------
# Exact evaluation (verification, and the NoFiltering baseline)


def _as_number(v: Any) -> float | int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return None if isinstance(v, float) and math.isnan(v) else v
    if isinstance(v, str):
        return parse_number(v)
    return None


def _as_date_ms(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return None if isinstance(v, float) and math.isnan(v) else float(v)
    if isinstance(v, str):
        try:
            got = parse_date_ms(v)
        except ValueError:
            return None
        return None if got is None else got[0]
    return None


def _phrase_windows(
    pos: Mapping[str, list[int]], node: PhraseNode, first_only: bool
) -> list[tuple[int, ...]]:
    """Doc positions (one per phrase term) where the phrase matches, Lucene's way.

    Exact phrases need every term at its relative position. Sloppy ones (``~N``) need
    ``max(p_i - o_i) - min(p_i - o_i) <= N`` over chosen positions ``p_i`` (distinct doc
    positions) and query offsets ``o_i``, as Lucene's SloppyPhraseMatcher measures it.
    """
    lists = []
    for t in node.terms:
        got = pos.get(t)
        if not got:
            return []
        lists.append(got)
    offs = node.positions
    out: list[tuple[int, ...]] = []
    if len(lists) == 2 and node.slop:
        # Two terms: some p0, p1 (distinct) with |(p0 - o0) - (p1 - o1)| <= slop.
        first, second = lists
        delta = offs[1] - offs[0]
        slop = node.slop
        for a in first:
            target = a + delta
            j = bisect.bisect_left(second, target - slop)
            while j < len(second) and second[j] <= target + slop:
                if second[j] != a:
                    out.append((a, second[j]))
                    if first_only:
                        return out
                j += 1
        return out
    if node.slop == 0:
        sets = [set(x) for x in lists]
        for p in lists[0]:
            base = p - offs[0]
            if all(base + offs[i] in sets[i] for i in range(1, len(lists))):
                out.append(tuple(base + o for o in offs))
                if first_only:
                    break
        return out
    values = [[p - o for p in lst] for lst, o in zip(lists, offs)]
    starts = sorted({v for vs in values for v in vs})
    slop = node.slop
    k = len(values)

    def pick(i: int, lo: int, used: list[int]) -> list[int] | None:
        if i == k:
            return used
        vs = values[i]
        j = bisect.bisect_left(vs, lo)
        hi = lo + slop
        while j < len(vs) and vs[j] <= hi:
            p = vs[j] + offs[i]
            if p not in used:
                got = pick(i + 1, lo, used + [p])
                if got is not None:
                    return got
            j += 1
        return None

    for lo in starts:
        got = pick(0, lo, [])
        if got is not None:
            out.append(tuple(got))
            if first_only:
                break
    return out


_SEARCH_CACHE: dict[str, re.Pattern[str]] = {}


def _token_search(pattern: str) -> re.Pattern[str]:
    """A regex that finds a whole token matching the wildcard ``pattern`` in ``view.joined``.

    Example:
        >>> bool(_token_search("te?m*").search(" a teams b ")), bool(_token_search("te?m").search(" teams "))
        (True, False)
    """
    rx = _SEARCH_CACHE.get(pattern)
    if rx is None:
        body = "".join(
            "[^ \x01]*" if c == "*" else "[^ \x01]" if c == "?" else re.escape(c) for c in pattern
        )
        rx = re.compile(f" {body}(?= )")
        if len(_SEARCH_CACHE) < 200_000:
            _SEARCH_CACHE[pattern] = rx
    return rx


def _evaluate(node: Node, view: _DocView) -> bool:
    """Does the document match ``node``? The reference semantics."""
    t = type(node)
    if t is TermNode:
        return node.term in view.termset(node.field)  # type: ignore[union-attr]
    if t is BoolNode:
        b: BoolNode = node  # type: ignore[assignment]
        for c in b.must_not:
            if _evaluate(c, view):
                return False
        if b.must:
            return all(_evaluate(c, view) for c in b.must)
        return any(_evaluate(c, view) for c in b.should)
    if t is PhraseNode:
        ph: PhraseNode = node  # type: ignore[assignment]
        one = view.single_terms(ph.field)
        if one is not None:
            # one value under plain analysis: positions of the phrase's terms are their
            # indexes in the term list (no positions table for the whole field)
            want = frozenset(ph.terms)
            pos: dict[str, list[int]] = {}
            for i, x in enumerate(one):
                if x in want:
                    got = pos.get(x)
                    if got is None:
                        pos[x] = [i]
                    else:
                        got.append(i)
            return len(pos) == len(want) and bool(_phrase_windows(pos, ph, True))
        ts = view.termset(ph.field)
        if not all(x in ts for x in ph.terms):
            return False
        return any(_phrase_windows(p, ph, True) for p in view.positions(ph.field))
    if t is PrefixNode:
        pre = node.prefix  # type: ignore[union-attr]
        return any(x.startswith(pre) for x in view.termset(node.field))  # type: ignore[union-attr]
    if t is WildcardNode:
        rx = _token_search(node.pattern)  # type: ignore[union-attr]
        return rx.search(view.joined(node.field)) is not None  # type: ignore[union-attr]
    if t is RangeNode:
        return _in_range(node, view)  # type: ignore[arg-type]
    if t is ExistsNode:
        return view.exists(node.field)  # type: ignore[union-attr]
    if t is MatchAllNode:
        return True
    if t is MatchNoneNode:
        return False
    raise TypeError(f"unknown query node {node!r}")  # pragma: no cover


def _in_range(node: RangeNode, view: _DocView) -> bool:
    if node.kind == "term":
        return bool(_range_hits(node, view, first_only=True))
    contains = node.contains
    return any(contains(x) for x in view.numbers(node.field, node.kind))


def _range_hits(node: RangeNode, view: _DocView, first_only: bool) -> list[Span]:
    """Spans (or one marker) of the values of ``node.field`` inside the range."""
    out: list[Span] = []
    if node.kind == "term":
        for label, toks in view.tokens(node.field):
            for tok in toks:
                if node.contains(tok.term):
                    out.append((label, tok.start, tok.end))
                    if first_only:
                        return out
        return out
    convert = _as_number if node.kind == "number" else _as_date_ms
    fld = node.field
    names = view.default_fields() if fld is None else [fld]
    for name in names:
        v = _lookup(view.doc, name)
        items = list(enumerate(v)) if isinstance(v, list) else [(None, v)]
        for i, x in items:
            if x is None or x is _MISSING:
                continue
            num = convert(x)
            if num is not None and node.contains(num):
                label = name if i is None else f"{name}[{i}]"
                out.append((label, 0, len(x)) if isinstance(x, str) else (label, 0, 0))
                if first_only:
                    return out
    return out


def _spans(node: Node, view: _DocView) -> list[Span]:
    """Spans of the positive parts of ``node`` that match (for highlighting)."""
    t = type(node)
    if t is BoolNode:
        out: list[Span] = []
        for c in node.must + node.should:  # type: ignore[union-attr]
            if _evaluate(c, view):
                out.extend(_spans(c, view))
        return out
    if t is TermNode or t is PrefixNode or t is WildcardNode:
        if t is TermNode:
            term = node.term  # type: ignore[union-attr]

            def test(x: str) -> bool:
                return x == term
        elif t is PrefixNode:
            pre = node.prefix  # type: ignore[union-attr]

            def test(x: str) -> bool:
                return x.startswith(pre)
        else:
            rx = node.regex  # type: ignore[union-attr]

            def test(x: str) -> bool:
                return rx.fullmatch(x) is not None
        return [(label, tok.start, tok.end)
                for label, toks in view.tokens(node.field)  # type: ignore[union-attr]
                for tok in toks if test(tok.term)]
    if t is PhraseNode:
        ph: PhraseNode = node  # type: ignore[assignment]
        out = []
        for (label, toks), pos in zip(view.tokens(ph.field), view.positions(ph.field)):
            by_pos = {tok.position: tok for tok in toks}
            for window in _phrase_windows(pos, ph, False):
                first, last = by_pos[min(window)], by_pos[max(window)]
                out.append((label, first.start, last.end))
        return out
    if t is RangeNode:
        return [s for s in _range_hits(node, view, False) if s[2] > s[1]]  # type: ignore[arg-type]
    return []


def _highlight(node: Node, view: _DocView) -> tuple[Span, ...]:
    return tuple(sorted(set(_spans(node, view))))


# ---------------------------------------------------------------------------------------------
# Registered queries and results


@dataclass(frozen=True)
class RegisteredQuery:
    """A registered query: id, text, metadata, analysed tree and index plan."""

    id: QueryId
    query: str
    metadata: Mapping[str, Any]
    node: Node
    plan: QueryPlan
    slot: int = 0

    def __reduce__(self) -> tuple[Any, ...]:
        # (metadata is a read-only view, which pickle cannot write: a saved index holds a dict)
        return _registered, (self.id, self.query, dict(self.metadata), self.node, self.plan,
                             self.slot)


def _registered(query_id: QueryId, query: str, metadata: dict[str, Any], node: Node,
                plan: QueryPlan, slot: int) -> RegisteredQuery:
    return RegisteredQuery(query_id, query, MappingProxyType(metadata), node, plan, slot)


class DocumentMatches:
    """The queries one document matched.

    Attributes:
        ids: matching query ids, in registration order (in the results of a vectorised batch,
            see ``PercolatorConfig.vector_threshold``, a list built from the batch at each
            reading: keep it if you read it more than once).
        spans: per matching query id, its matched spans (only with ``highlight=True``).
        errors: per query id, why it could not be evaluated (it counts as not matched).
        candidates: queries the presearcher selected; verified: those evaluated on the document.
    """

    __slots__ = ("ids", "spans", "errors", "candidates", "verified", "_slots", "_by_slot")

    def __init__(
        self,
        ids: list[QueryId],
        slots: list[int] | np.ndarray,
        by_slot: Mapping[int, RegisteredQuery],
        spans: dict[QueryId, tuple[Span, ...]] | None = None,
        errors: dict[QueryId, str] | None = None,
        candidates: int = 0,
        verified: int = 0,
    ) -> None:
        self.ids = ids
        self._slots = slots
        self._by_slot = by_slot
        self.spans = spans if spans is not None else {}
        self.errors = errors if errors is not None else {}
        self.candidates = candidates
        self.verified = verified

    @property
    def queries(self) -> list[RegisteredQuery]:
        """The matching queries themselves (text, metadata, plan)."""
        slots = self._slots
        return [self._by_slot[s] for s in (slots if isinstance(slots, list) else slots.tolist())]

    @property
    def metadata(self) -> dict[QueryId, Mapping[str, Any]]:
        """Metadata of each matching query, by id."""
        return {q.id: q.metadata for q in self.queries}

    def __repr__(self) -> str:
        return f"DocumentMatches(ids={self.ids!r}, errors={self.errors!r})"


class _BatchSlots:
    """One vectorised batch's matches, shared by its documents' results: document ``i``'s
    matching slots are ``slots[bounds[i]:bounds[i + 1]]``, their ids ``ids`` at the same
    places."""

    __slots__ = ("ids", "slots", "bounds", "candidates", "verified", "by_slot")

    def __init__(self, ids: np.ndarray, slots: np.ndarray, bounds: list[int],
                 candidates: list[int], verified: list[int],
                 by_slot: Mapping[int, RegisteredQuery]) -> None:
        self.ids = ids
        self.slots = slots
        self.bounds = bounds
        self.candidates = candidates
        self.verified = verified
        self.by_slot = by_slot


class _BatchMatches(DocumentMatches):
    """One document's matches in a vectorised batch (no spans, no errors), read from the
    batch's arrays when asked: ``ids`` is a new list at each reading.

    Why: a batch of 1,000 headlines against 100,000 queries matches ~66,000 times. Lists of
    ids built for every document up front, then traversed by the garbage collector as they
    age, touched every matched id string (scattered in memory) several times. Built when read,
    a consumer that reads each result once touches them once: measured 1.10x the documents/s
    of the batch read that way.
    """

    __slots__ = ("_batch", "_i")

    def __init__(self, batch: _BatchSlots, i: int) -> None:  # every field is read from batch
        self._batch = batch
        self._i = i

    @property
    def ids(self) -> list[QueryId]:  # type: ignore[override]
        b, i = self._batch, self._i
        return b.ids[b.slots[b.bounds[i]:b.bounds[i + 1]]].tolist()  # type: ignore[no-any-return]

    @property
    def _slots(self) -> np.ndarray:  # type: ignore[override]
        b, i = self._batch, self._i
        return b.slots[b.bounds[i]:b.bounds[i + 1]]

    @property
    def _by_slot(self) -> Mapping[int, RegisteredQuery]:  # type: ignore[override]
        return self._batch.by_slot

    @property
    def spans(self) -> dict[QueryId, tuple[Span, ...]]:  # type: ignore[override]
        return {}

    @property
    def errors(self) -> dict[QueryId, str]:  # type: ignore[override]
        return {}

    @property
    def candidates(self) -> int:  # type: ignore[override]
        return self._batch.candidates[self._i]

    @property
    def verified(self) -> int:  # type: ignore[override]
        return self._batch.verified[self._i]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Copied or pickled as a plain :class:`DocumentMatches` holding this document's queries only."""
        slots = self._slots.copy()
        by_slot = self._batch.by_slot
        return DocumentMatches, (self.ids, slots, {int(s): by_slot[int(s)] for s in slots}, {}, {},
                                 self.candidates, self.verified)


@dataclass(frozen=True)
class BatchStats:
    """Counts and time for one percolated batch."""

    documents: int
    candidates: int
    verified: int
    matches: int
    errors: int
    seconds: float


@dataclass(frozen=True)
class BatchResult:
    """Per-document matches (in input order) and the batch's stats."""

    results: list[DocumentMatches]
    stats: BatchStats


MetadataFilter = Union[Mapping[str, Any], Callable[[Mapping[str, Any]], bool], None]


def _meta_ok(meta: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    for k, v in want.items():
        have = meta.get(k, _MISSING)
        if have is _MISSING:
            return False
        if isinstance(have, (list, tuple, set, frozenset)) and not isinstance(v, (list, tuple)):
            if v not in have:
                return False
        elif have != v:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# The query set: registration, snapshots, save / load


class _QuerySet:
    """Registration by id with metadata; readers see immutable snapshots."""

    def __init__(self, config: PercolatorConfig | None = None) -> None:
        self.config = config or PercolatorConfig()
        self.presearcher = Presearcher(self.config.term_frequencies)
        self._ctx = _Context(self.config)
        self._lock = threading.RLock()
        self._queries: dict[QueryId, RegisteredQuery] = {}
        self._next_slot = 0
        self._dirty = True

    # registration
    def compile(self, query: str) -> Node:
        """Parse and analyse ``query`` with this set's configuration (raises CepSyntaxError)."""
        return compile_query(query, self.config.query)

    def register(
        self, query_id: QueryId, query: str, metadata: Mapping[str, Any] | None = None
    ) -> RegisteredQuery:
        """Add a query, or replace the one with the same id. Raises CepSyntaxError if invalid.

        Example:
            >>> p = Percolator()
            >>> p.register("q1", "apple AND pie", {"owner": "ann"}).plan.kind
            'flat'
        """
        node = self.compile(query)
        plan = self.presearcher.plan(node)
        return self._add(query_id, query, metadata, node, plan)

    def register_parsed(
        self, query_id: QueryId, query: str, node: Node, metadata: Mapping[str, Any] | None = None
    ) -> RegisteredQuery:
        """Register a query already compiled with this set's ``config.query`` (a rule file's
        checked queries), without parsing it again.

        Example:
            >>> p = Percolator()
            >>> _ = p.register_parsed("q", "apple", p.compile("apple"))
            >>> p.percolate({"t": "Apple"}).ids
            ['q']
        """
        return self._add(query_id, query, metadata, node, self.presearcher.plan(node))

    def _add(
        self, query_id: QueryId, query: str, metadata: Mapping[str, Any] | None, node: Node,
        plan: QueryPlan,
    ) -> RegisteredQuery:
        if not isinstance(query_id, Hashable):
            raise CepError(f"query id must be hashable (a string or a number), got {query_id!r}")
        meta = MappingProxyType(dict(metadata or {}))
        with self._lock:
            entry = RegisteredQuery(query_id, query, meta, node, plan, self._next_slot)
            self._next_slot += 1
            self._queries[query_id] = entry
            self._dirty = True
        return entry

    def register_many(
        self, queries: Iterable[tuple[QueryId, str] | tuple[QueryId, str, Mapping[str, Any]]]
    ) -> int:
        """Register several queries; returns how many. The first invalid one raises."""
        n = 0
        with _gc_paused(self.config.pause_gc):
            for item in queries:
                self.register(*item)  # type: ignore[arg-type]
                n += 1
        return n

    def delete(self, query_id: QueryId) -> bool:
        """Remove a query; False when there was none with that id.

        Example:
            >>> p = Percolator(); _ = p.register(1, "x")
            >>> p.delete(1), p.delete(1), len(p)
            (True, False, 0)
        """
        with self._lock:
            if self._queries.pop(query_id, None) is None:
                return False
            self._dirty = True
            return True

    def get(self, query_id: QueryId) -> RegisteredQuery | None:
        """The registered query with this id, or None."""
        return self._queries.get(query_id)

    def __len__(self) -> int:
        return len(self._queries)

    def __contains__(self, query_id: object) -> bool:
        return query_id in self._queries

    def queries(self) -> list[RegisteredQuery]:
        """Every registered query, in registration order."""
        with self._lock:
            return sorted(self._queries.values(), key=lambda q: q.slot)

    # filters
    def _allowed(
        self, entries: Iterable[RegisteredQuery], metadata_filter: MetadataFilter,
    ) -> set[int] | None:
        if metadata_filter is None:
            return None
        if callable(metadata_filter):
            return {q.slot for q in entries if metadata_filter(q.metadata)}
        return {q.slot for q in entries if _meta_ok(q.metadata, metadata_filter)}

    # save / load
    def save(self, path: str | Path) -> None:
        """Write the query set to ``path`` as JSON lines: a header with the format, version and
        configuration, then one ``{"id", "query", "metadata"}`` line per query.

        Measured against a pickle of the parsed trees and plans (see docs/search.md), reading
        JSON and parsing again was as fast to load, and it is safe to load from anyone.

        Example:
            >>> import os, tempfile
            >>> p = Percolator(); _ = p.register("q", "apple", {"owner": "ann"})
            >>> path = os.path.join(tempfile.mkdtemp(), "queries.jsonl")
            >>> p.save(path)
            >>> Percolator.load(path).percolate({"t": "Apple"}).metadata
            {'q': mappingproxy({'owner': 'ann'})}
        """
        with self._lock:
            rows = self.queries()
        tmp = Path(str(path) + ".tmp")
        header = {"format": _FORMAT, "version": _VERSION, "config": _config_to_json(self.config)}
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(header) + b"\n")
            for q in rows:
                if isinstance(q.id, bool) or not isinstance(q.id, (str, int)):
                    raise CepError(f"cannot save query id {q.id!r}: ids must be strings or "
                                   "integers to be written as JSON")
                try:
                    line = orjson.dumps({"id": q.id, "query": q.query,
                                         "metadata": dict(q.metadata)})
                except TypeError as exc:
                    raise CepError(f"cannot save query {q.id!r}: its metadata is not JSON "
                                   f"({exc})") from None
                fh.write(line + b"\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> Any:
        """Read a query set written by :meth:`save` (queries are parsed again and the index
        built on first use), or a built index written by :meth:`Percolator.save_index`."""
        with open(path, "rb") as fh:
            first = fh.readline()
            try:
                header = orjson.loads(first)
            except orjson.JSONDecodeError:
                header = None
            if isinstance(header, dict) and header.get("format") == _INDEX_FORMAT:
                return cls._load_index(path, header, fh)
            if not isinstance(header, dict) or header.get("format") != _FORMAT:
                raise CepError(f"{path}: not a saved percolator query set")
            if header.get("version") != _VERSION:
                raise CepError(
                    f"{path}: saved query set version {header.get('version')!r} is not "
                    f"supported (this build reads version {_VERSION}); re-register the queries"
                )
            out = cls(_config_from_json(header["config"]))
            with _gc_paused(out.config.pause_gc):
                for line in fh:
                    row = orjson.loads(line)
                    out.register(row["id"], row["query"], row["metadata"])
        return out

    @classmethod
    def _load_index(cls, path: str | Path, header: dict[str, Any], fh: Any) -> Any:
        if header.get("version") != _INDEX_VERSION or header.get("code") != _code_fingerprint():
            raise CepError(
                f"{path}: this index was written by another version of cep's percolator, and "
                "a built index is only read by the code that wrote it; load the queries "
                "instead (Percolator.load on a file written by save(), or register them again) "
                "and write the index again with save_index()")
        payload = fh.read()
        if len(payload) != header.get("bytes") or \
                hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            raise CepError(f"{path}: the saved index is damaged or cut short (its checksum does "
                           "not match); write it again with save_index()")
        out = cls(_config_from_json(header["config"]))
        with _gc_paused(out.config.pause_gc):
            try:
                state = pickle.loads(payload)  # noqa: S301 - our own file, checked above
            except Exception as exc:  # same code, other libraries (numpy, Python) than the writer's
                raise CepError(
                    f"{path}: the saved index cannot be read here ({type(exc).__name__}: {exc}); it was "
                    "written with other libraries than these; load the queries instead (Percolator.load on "
                    "a file written by save(), or register them again) and write the index again with "
                    "save_index()") from None
            out._restore(state)
        return out

    def _restore(self, state: dict[str, Any]) -> None:
        """Take the queries of a loaded index (see :meth:`Percolator.save_index`)."""
        self._queries = {q.id: q for q in state["queries"]}
        self._next_slot = state["next_slot"]
        self._dirty = True

    # percolation (shared driver)
    def percolate(
        self, doc: Mapping[str, Any], *, highlight: bool = False,
        metadata_filter: MetadataFilter = None,
    ) -> DocumentMatches:
        """The queries ``doc`` matches. ``metadata_filter``: a dict of required metadata values
        (a list-valued metadata entry must contain the value) or a predicate on the metadata.

        Example:
            >>> p = Percolator()
            >>> _ = p.register("q1", '"big apple"', {"owner": "ann"})
            >>> _ = p.register("q2", "apple -pie", {"owner": "bob"})
            >>> r = p.percolate({"title": "The Big Apple"}, highlight=True)
            >>> r.ids, r.spans["q1"]
            (['q1', 'q2'], (('title', 4, 13),))
            >>> p.percolate({"title": "apple"}, metadata_filter={"owner": "ann"}).ids
            []
        """
        return self.percolate_batch([doc], highlight=highlight,
                                    metadata_filter=metadata_filter).results[0]

    def percolate_batch(
        self, docs: Iterable[Mapping[str, Any]], *, highlight: bool = False,
        metadata_filter: MetadataFilter = None,
    ) -> BatchResult:
        """Percolate many documents; results in input order plus the batch's stats."""
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# Scanners: one multi-string pass over a field's token string ``" t1 t2 ... "``


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


_NONE = np.zeros(0, dtype=np.int64)


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


# ---------------------------------------------------------------------------------------------
# The term dictionary: which keys does one document term hold?


class _TermKeys:
    """One field's term dictionary: a document term -> ids of the keys it holds.

    A term holds its own key (``t``), the keys of the prefixes it starts with (``p``) and of the
    wildcards it matches (``w``). Each distinct term is resolved once, when first seen (one
    Aho-Corasick pass over the term finds the prefixes and the wildcards' literal prefixes it
    starts with; only those wildcards are tried), and remembered, so a wildcard costs a dict
    lookup per document term, like a plain term. Terms first seen long after registration
    resolve the same way. At most ``limit`` terms are remembered; past that, new terms are
    resolved at every occurrence.

    Exact phrases are indexed by their first two terms: where the field holds one value,
    :meth:`phrase_keys` looks up each pair of adjacent terms (and compares the rest of longer
    phrases).

    Batches read the same answers through term ids (:meth:`key_hits`, :meth:`phrase_hits_ids`):
    every remembered term has one, its keys sit in CSR arrays, so a batch's terms become key
    hits in one ``map`` and a few numpy calls; the phrases' words hold the first ids, so an
    adjacent pair of them is one integer code.
    """

    __slots__ = ("cache", "ids", "phrases", "_terms", "_prefixes", "_wildcards", "_ready",
                 "_leads", "_free", "_starts", "_limit", "_keys", "_csr", "_lock", "_nphrase",
                 "_pair_codes", "_pair_ends")

    def __init__(self, terms: Mapping[str, list[int]], prefixes: Mapping[str, list[int]],
                 wildcards: list[tuple[str, int]], phrases: list[tuple[str, int]],
                 limit: int) -> None:
        self._terms = terms
        self._prefixes = prefixes
        self._wildcards = wildcards
        self._ready = False  # the prefix automaton and wildcard regexes: made when first needed
        self._leads: Callable[[str], Iterable[tuple[int, Any]]] | None = None
        self._free: list[tuple[str, Callable[[str], Any], int]] = []
        self._lock = threading.Lock()  # readers in several threads may remember new terms
        starts: dict[tuple[str, str], list[tuple[list[str], int]]] = defaultdict(list)
        for text, k in phrases:
            first, second, *rest = text.split(" ")
            starts[(first, second)].append((rest, k))
        self._starts = {t: tuple(v) for t, v in starts.items()}
        self.phrases = bool(phrases)
        self._limit = limit
        self.cache: dict[str, tuple[int, ...]] = {}
        self.ids: dict[str, int] = {}  # remembered term -> term id
        self._keys: list[tuple[int, ...]] = []  # term id -> key ids
        # The phrases' words take the first term ids (always remembered), so that a pair of
        # adjacent words is the code ``first * nphrase + second``.
        words = sorted({w for text, _ in phrases for w in text.split(" ")})
        for w in words:
            self._remember(w, self._compute(w))
        self._nphrase = p = len(words)
        ids = self.ids
        self._pair_ends = {ids[a] * p + ids[b]: tuple(([ids[w] for w in rest], k) for rest, k in v)
                           for (a, b), v in self._starts.items()}
        self._pair_codes = np.array(sorted(self._pair_ends), dtype=np.int64)
        self._csr: tuple[int, np.ndarray, np.ndarray] = (0, np.zeros(1, dtype=np.int64), _NONE)
        self._freeze()

    def _prepare(self) -> None:
        leads: dict[str, tuple[list[int], list[tuple[Callable[[str], Any], int]]]] = {}
        for text, ks in self._prefixes.items():
            leads.setdefault(text, ([], []))[0].extend(ks)
        free: list[tuple[str, Callable[[str], Any], int]] = []
        for pattern, k in self._wildcards:
            full = WildcardNode(None, pattern).regex.fullmatch
            lead = _literal_prefix(pattern)
            if lead:
                leads.setdefault(lead, ([], []))[1].append((full, k))
            else:  # a leading wildcard: filter on its longest literal run instead
                free.append((max(re.split(r"[*?]", pattern), key=len), full, k))
        if leads:
            auto = ahocorasick.Automaton()
            for lead, value in leads.items():
                auto.add_word("\x01" + lead, value)  # \x01 starts the term: prefixes only
            auto.make_automaton()
            self._leads = auto.iter
        self._free = free
        self._ready = True

    def __getstate__(self) -> dict[str, Any]:
        # a saved index keeps what was resolved; the automaton and regexes are made again
        return {name: getattr(self, name) for name in self.__slots__
                if name not in ("_leads", "_free", "_ready", "_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)
        self._ready = False
        self._leads = None
        self._free = []
        self._lock = threading.Lock()

    def _compute(self, term: str) -> tuple[int, ...]:
        if not self._ready:
            self._prepare()
        out = list(self._terms.get(term, ()))
        if self._leads is not None:
            for _, (ks, wild) in self._leads("\x01" + term):
                out.extend(ks)
                for full, k in wild:
                    if full(term) is not None:
                        out.append(k)
        for frag, full, k in self._free:
            if frag in term and full(term) is not None:
                out.append(k)
        return tuple(out)

    def _remember(self, term: str, got: tuple[int, ...]) -> None:
        with self._lock:
            if term not in self.ids:
                self._keys.append(got)  # first, so a reader never sees an id without keys
                self.ids[term] = len(self._keys) - 1
            self.cache[term] = got

    def _freeze(self) -> None:
        """Put every remembered term's keys into the CSR arrays batches read (one attribute,
        replaced whole: a reader in another thread sees the old arrays or the new)."""
        with self._lock:
            keys = self._keys[:]
        counts = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        ptr = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        vals = np.fromiter(chain.from_iterable(keys), dtype=np.int64, count=int(ptr[-1]))
        if len(keys) > self._csr[0]:
            self._csr = (len(keys), ptr, vals)

    def prefill(self, terms: Iterable[str]) -> None:
        """Resolve (and remember) ``terms`` now: a vocabulary known beforehand."""
        resolve = self.resolve
        for t in terms:
            resolve(t)
        self._freeze()

    def resolve(self, term: str) -> tuple[int, ...]:
        """The key ids ``term`` holds (remembered).

        Example:
            >>> tk = _TermKeys({"police": [0]}, {"pol": [1]}, [("pol?ce*", 2), ("*ice", 3)],
            ...                [], 10)
            >>> tk.resolve("police"), tk.resolve("polka"), tk.resolve("ice"), tk.cache["polka"]
            ((0, 1, 2, 3), (1,), (3,), (1,))
        """
        got = self.cache.get(term)
        if got is not None:
            return got
        got = self._compute(term)
        if len(self.cache) < self._limit:
            self._remember(term, got)
        return got

    def keys_of(self, terms: list[str]) -> list[tuple[int, ...]]:
        """Per term, the key ids it holds."""
        got = list(map(self.cache.get, terms))
        if None in got:
            resolve = self.resolve
            got = [resolve(t) if g is None else g for t, g in zip(terms, got)]
        return got  # type: ignore[return-value]

    def key_hits(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For the terms of a batch: ``(term ids, at, kids)``, the term id of each term (-1 when
        not remembered) and one ``(index of the term, key id)`` per key a term holds.

        Example:
            >>> tk = _TermKeys({"police": [0]}, {"pol": [1]}, [], [], 10)
            >>> [x.tolist() for x in tk.key_hits(["police", "cat", "polka", "police"])]
            [[0, 1, 2, 0], [0, 0, 2, 3, 3], [0, 1, 1, 0, 1]]
        """
        m = len(terms)
        tids = np.fromiter(map(self.ids.get, terms, repeat(-1)), dtype=np.int64, count=m)
        lost: dict[int, tuple[int, ...]] = {}  # past the limit: keys by term index
        unknown = np.flatnonzero(tids < 0)
        if len(unknown):
            resolve, ids = self.resolve, self.ids
            for i in unknown.tolist():
                got = resolve(terms[i])
                tid = ids.get(terms[i], -1)
                if tid < 0:
                    if got:
                        lost[i] = got
                else:
                    tids[i] = tid
            frozen = self._csr[0]
            if len(self._keys) - frozen > max(1024, frozen >> 3):  # amortised: 1/8 growth
                self._freeze()
        frozen, ptr, vals = self._csr
        slow: list[int] = []
        inside = None  # every term's keys are in the arrays
        if len(unknown) or len(self._keys) > frozen:
            inside = np.flatnonzero((tids >= 0) & (tids < frozen))
            slow = np.flatnonzero(tids >= frozen).tolist()
        t = tids if inside is None else tids[inside]
        starts = ptr[t]
        counts = ptr[t + 1] - starts
        total = int(counts.sum())
        offsets = np.cumsum(counts) - counts
        idx = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, counts)
        rows = np.arange(m, dtype=np.int64) if inside is None else inside
        at = np.repeat(rows, counts)
        kids = vals[idx]
        if slow or lost:
            keys = self._keys
            extra = [(i, keys[tids[i]]) for i in slow] + list(lost.items())
            at = np.concatenate([at, np.fromiter(
                chain.from_iterable([i] * len(ks) for i, ks in extra), dtype=np.int64)])
            kids = np.concatenate([kids, np.fromiter(
                chain.from_iterable(ks for _, ks in extra), dtype=np.int64)])
        return tids, at, kids

    def phrase_hits_ids(self, tids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every exact phrase in a run of term ids (from :meth:`key_hits`): ``(index of its
        first term, key id, length)``.

        Example:
            >>> tk = _TermKeys({}, {}, [], [("new york", 5), ("new york city", 7)], 9)
            >>> tids, _, _ = tk.key_hits(["in", "new", "york", "city"])
            >>> [x.tolist() for x in tk.phrase_hits_ids(tids)]
            [[1, 1], [5, 7], [2, 3]]
        """
        p = self._nphrase
        if not p or len(tids) < 2:
            return _NONE, _NONE, _NONE
        word = tids.view(np.uint64) < p  # a phrase word (-1 is huge as unsigned)
        first = np.flatnonzero(word[:-1] & word[1:])
        if not len(first):
            return _NONE, _NONE, _NONE
        codes = tids[first] * p + tids[first + 1]
        first = first[_isin_sorted(codes, self._pair_codes)]
        if not len(first):
            return _NONE, _NONE, _NONE
        at: list[int] = []
        kids: list[int] = []
        sizes: list[int] = []
        ends = self._pair_ends
        for i, code in zip(first.tolist(), (tids[first] * p + tids[first + 1]).tolist()):
            for rest, k in ends[code]:
                if not rest or tids[i + 2:i + 2 + len(rest)].tolist() == rest:
                    at.append(i)
                    kids.append(k)
                    sizes.append(2 + len(rest))
        return (np.array(at, dtype=np.int64), np.array(kids, dtype=np.int64),
                np.array(sizes, dtype=np.int64))

    def phrase_keys(self, terms: list[str]) -> list[int]:
        """Ids of the exact phrases in ``terms``, the terms of one value (adjacent positions).

        Example:
            >>> tk = _TermKeys({}, {}, [], [("new york", 5), ("york today", 6),
            ...                             ("new york city", 7)], 9)
            >>> tk.phrase_keys(["in", "new", "york", "today"])
            [5, 6]
        """
        return self.phrase_hits(terms)[1]

    def phrase_hits(self, terms: list[str]) -> tuple[list[int], list[int], list[int]]:
        """Every exact phrase in ``terms``: (index of its first term, key id, length)."""
        at: list[int] = []
        kids: list[int] = []
        sizes: list[int] = []
        starts = self._starts
        # positions of the adjacent pairs that start a phrase, found in C (compress)
        for i in compress(count(), map(starts.__contains__, zip(terms, islice(terms, 1, None)))):
            for rest, k in starts[(terms[i], terms[i + 1])]:
                if not rest or terms[i + 2:i + 2 + len(rest)] == rest:
                    at.append(i)
                    kids.append(k)
                    sizes.append(2 + len(rest))
        return at, kids, sizes


# ---------------------------------------------------------------------------------------------
# The index: segments of queries keyed by presearcher terms


class _Segment:
    """An immutable index over some queries: scanner tables, postings and verification data.

    Postings exist twice: as Python tuples and dicts for one document at a time, and as CSR
    arrays (numpy) for batches. Array postings hold local query numbers (``0..n-1``);
    ``slot_of`` maps them to global slots.
    """

    def __init__(
        self, entries: list[RegisteredQuery], config: PercolatorConfig, prefill: bool = True,
    ) -> None:
        self.entries = entries
        self.slots = frozenset(e.slot for e in entries)
        key_ids: dict[Key, int] = {}

        def kid(key: Key) -> int:
            k = key_ids.get(key)
            if k is None:
                k = key_ids[key] = len(key_ids)
            return k

        proven: dict[int, list[int]] = defaultdict(list)
        cands: dict[int, list[int]] = defaultdict(list)
        pairs: dict[int, dict[int, tuple[list[Any], list[Any], list[Any]]]] = defaultdict(dict)
        ranged: dict[int, list[Any]] = defaultdict(list)
        always: list[int] = []
        verify: dict[int, tuple[Any, ...]] = {}
        # Per local number, for the vectorised batch check: its kind (_V_*), its clauses (each
        # an OR of keys; every one must hit), its forbidden keys, and what is left to check.
        vkind: list[int] = []
        clauses: list[list[list[int]]] = []
        forbid_lists: list[list[int]] = []
        range_rows: list[list[tuple[int, float, float, bool, bool]]] = []
        columns: dict[tuple[str | None, str], int] = {}
        sloppy: dict[int, tuple[int, int, int, int, int]] = {}  # local -> a, b, delta, slop, field
        pair_fields: dict[str | None, int] = {}
        # Slots as int objects made here, side by side in memory: a document touches dozens of
        # them, and scattered ones cost a cache miss each.
        lowest = min((e.slot for e in entries), default=0)
        canon = list(range(lowest, max((e.slot for e in entries), default=0) + 1))
        for e in entries:
            plan = e.plan
            kind = plan.kind
            slot = e.slot
            for key in plan.all_keys:
                kid(key)
            if kind == "general":
                for leaf, _ in iter_nodes(e.node):
                    if isinstance(leaf, WildcardNode):
                        _token_search(leaf.pattern)  # compile now, not on the first document
            req = [kid(k) for k in plan.required]
            forbid_lists.append([kid(k) for k in plan.forbidden])
            cl = [[k] for k in req]
            rows: list[tuple[int, float, float, bool, bool]] = []
            if kind == "flat":
                cl += [[kid(k) for k in g] for g in plan.groups]
                bounds = [_range_row(r) for r in plan.ranges]
                if not plan.ranges:
                    vk = _V_KEYS
                elif all(b is not None for b in bounds):
                    vk = _V_RANGES
                    rows = [(columns.setdefault((r.field, r.kind), len(columns)), *b)
                            for r, b in zip(plan.ranges, bounds) if b is not None]
                else:
                    vk = _V_PYTHON
            elif kind == "general":
                vk = _V_PYTHON
                node = e.node
                if (config.scanner == "dict" and isinstance(node, PhraseNode) and node.slop
                        and len(node.terms) == 2 and node.terms[0] != node.terms[1]):
                    # a sloppy pair of terms: checked from term positions, all at once
                    vk = _V_PAIR
                    sloppy[len(vkind)] = (
                        kid((node.field, "t", node.terms[0])), kid((node.field, "t", node.terms[1])),
                        node.positions[1] - node.positions[0], node.slop,
                        pair_fields.setdefault(node.field, len(pair_fields)))
            else:
                vk = _V_KEYS  # proven: never a candidate
            vkind.append(vk)
            clauses.append(cl)
            range_rows.append(rows)
            if kind != "proven":
                verify[slot] = (
                    _key_check(frozenset(req), [frozenset(map(kid, g)) for g in plan.groups],
                               frozenset(map(kid, plan.forbidden))),
                    _doc_check(e.node, plan),
                )
            if plan.keys is None:
                always.append(slot)
                continue
            slot = canon[slot - lowest]
            if kind == "proven":
                for key in plan.keys:
                    proven[kid(key)].append(slot)
                continue
            second = _second_keys(plan)
            # Decided by the keys found (a key of ``plan.keys``, one of ``second``), or by
            # those and the document's numbers for flat plans with ranges (checked inline),
            # or else a candidate to verify.
            decided = _keys_decide(plan, second)
            if decided and plan.ranges:
                target: Any = (slot, _range_checks(plan.ranges))
                which = 2
            else:
                target, which = slot, 0 if decided else 1
            if second is not None:
                for k1 in map(kid, plan.keys):
                    d = pairs[k1]
                    for k2 in map(kid, second):
                        post = d.get(k2)
                        if post is None:
                            post = d[k2] = ([], [], [])
                        post[which].append(target)
                continue
            for key in plan.keys:
                (proven, cands, ranged)[which][kid(key)].append(target)
        n = len(key_ids)
        self.nkeys = n
        self.key_ids = key_ids
        self.verify = verify
        self.always = tuple(always)
        # key -> (proven slots, candidate slots, {second key: (proven, candidates, ranged)}
        # or None, ranged), where ranged holds (slot, range checks) decided by the document's
        # numbers; None for keys only used to check candidates
        self.post: list[tuple[tuple[int, ...], tuple[int, ...], dict[int, Any] | None,
                              dict[int, Any]] | None]
        self.post = [None] * n
        for k in set(proven) | set(cands) | set(pairs) | set(ranged):
            by_second = pairs.get(k)
            self.post[k] = (
                tuple(proven.get(k, ())), tuple(cands.get(k, ())),
                ({k2: (tuple(a), tuple(b), dict(c)) for k2, (a, b, c) in by_second.items()}
                 if by_second else None),
                dict(ranged.get(k, ())),
            )

        # The same postings as arrays, over local numbers.
        local_of = {e.slot: i for i, e in enumerate(entries)}
        self.slot_of = np.array([e.slot for e in entries], dtype=np.int64)
        self.nlocal = len(entries)
        self.a_proven = _csr(n, ((k, [local_of[s] for s in v]) for k, v in proven.items()))
        # (the batch path checks ranges for all candidates at once: ranged ones are candidates)
        for k, v in ranged.items():
            cands[k].extend(s for s, _ in v)
        self.a_cands = _csr(n, ((k, [local_of[s] for s in v]) for k, v in cands.items()))
        pk: dict[int, list[tuple[int, int, bool]]] = defaultdict(list)
        for k1, d in pairs.items():
            for k2, (sure, maybe, rng) in d.items():
                pk[k1].extend((k2, local_of[s], True) for s in sure)
                pk[k1].extend((k2, local_of[s], False) for s in maybe)
                pk[k1].extend((k2, local_of[s], False) for s, _ in rng)
        self.a_pair_ptr, rows = _csr_rows(n, pk)
        self.a_pair_k2 = np.array([r[0] for r in rows], dtype=np.int64)
        self.a_pair_local = np.array([r[1] for r in rows], dtype=np.int64)
        self.a_pair_sure = np.array([r[2] for r in rows], dtype=bool)
        self.a_always = np.array([local_of[s] for s in always], dtype=np.int64)
        self.a_kind = np.array(vkind, dtype=np.int8)
        self.pair_fields = sorted(pair_fields, key=pair_fields.__getitem__)
        self.a_pair_terms = np.zeros((len(entries), 5), dtype=np.int64)
        for i, row in sloppy.items():
            self.a_pair_terms[i] = row
        # key ids whose term positions the batch path keeps (those of sloppy pairs)
        self.a_positional = np.zeros(max(len(key_ids), 1), dtype=bool)
        self.a_positional[self.a_pair_terms[list(sloppy), :2].ravel()] = True
        self.has_pairs = bool(sloppy)
        self.a_forbid = _csr(len(entries), enumerate(forbid_lists))
        counts = np.zeros(len(entries) + 1, dtype=np.int64)
        counts[1:] = [len(c) for c in clauses]
        self.a_clause_ptr = np.cumsum(counts)  # clause ids of local i: ptr[i]..ptr[i+1]
        flat_clauses = [c for cl in clauses for c in cl]
        self.a_clause_keys = _csr(len(flat_clauses), enumerate(flat_clauses))
        counts = np.zeros(len(entries) + 1, dtype=np.int64)
        counts[1:] = [len(r) for r in range_rows]
        self.a_range_ptr = np.cumsum(counts)
        allrows = [row for rows_ in range_rows for row in rows_]
        self.a_range_col = np.array([r[0] for r in allrows], dtype=np.int64)
        self.a_range_lo = np.array([r[1] for r in allrows], dtype=np.float64)
        self.a_range_hi = np.array([r[2] for r in allrows], dtype=np.float64)
        self.a_range_incl_lo = np.array([r[3] for r in allrows], dtype=bool)
        self.a_range_incl_hi = np.array([r[4] for r in allrows], dtype=bool)
        self.range_columns = sorted(columns, key=columns.__getitem__)

        # Per field (None: the default fields): a term dictionary for whole-token, prefix,
        # wildcard and exact-phrase keys, with an automaton for the phrases of multi-valued
        # fields (scanner="dict"); or an automaton for every key but wildcards ("aho").
        self.lexicons: list[tuple[str | None, _TermKeys]] = []
        self.fallback: dict[str | None, _Scanner] = {}
        self.scanners: list[tuple[str | None, _Scanner]] = []
        by_field: dict[str | None, list[tuple[str, str, int]]] = defaultdict(list)
        for (fld, key_kind, text), k in key_ids.items():
            by_field[fld].append((key_kind, text, k))
        # scanner="dict" scans phrases only (sparse hits), "aho" every key (dense)
        make_scanner = _scanner_class(config.automaton,
                                      "sparse" if config.scanner == "dict" else "dense")
        self.automaton_name = make_scanner.name
        limit = config.term_cache_size
        every: tuple[dict[str, list[int]], dict[str, list[int]], list[tuple[str, int]],
                     list[tuple[str, int]]] = (defaultdict(list), defaultdict(list), [], [])
        for fld, items in by_field.items():
            terms: dict[str, list[int]] = {}
            prefixes: dict[str, list[int]] = {}
            wildcards: list[tuple[str, int]] = []
            phrases: list[tuple[str, int]] = []
            words: list[str] = []
            values: list[int] = []
            for key_kind, text, k in items:
                if key_kind == "w":
                    wildcards.append((text, k))
                    continue
                if config.scanner == "dict":
                    if " " in text:
                        phrases.append((text, k))
                    else:
                        (terms if key_kind == "t" else prefixes)[text] = [k]
                        continue
                words.append(f" {text} " if key_kind == "t" else f" {text}")
                values.append(k)
            if terms or prefixes or wildcards or phrases:
                lex = _TermKeys(terms, prefixes, wildcards, phrases, limit)
                self.lexicons.append((fld, lex))
                for mine, union in zip((terms, prefixes), every[:2]):
                    for text, ks in mine.items():
                        union[text].extend(ks)
                every[2].extend(wildcards)
                every[3].extend(phrases)
            if words:
                scanner = make_scanner(words, values)
                if config.scanner == "dict":
                    self.fallback[fld] = scanner
                else:
                    self.scanners.append((fld, scanner))
        # One dictionary for all those fields, for documents where they hold the same terms
        # (one text field, searched both by default and by name): one lookup per term.
        self.merged = _TermKeys(*every, limit) if len(self.lexicons) > 1 else None
        if prefill and config.prefill_terms and config.term_frequencies:
            # the vocabulary known beforehand: its terms' keys (wildcards expanded) now
            vocab = list(config.term_frequencies)
            for lex in [self.merged] if self.merged is not None else [x for _, x in self.lexicons]:
                lex.prefill(vocab)

    def _lexicons(self, views: list[_DocView]) -> list[tuple[str | None, _TermKeys]]:
        """The per-field dictionaries, or the merged one when every view's fields hold the
        very same term list (then they also hold one value each: see ``_DocView.terms``)."""
        lexicons = self.lexicons
        if self.merged is not None:
            fields = [fld for fld, _ in lexicons]
            for v in views:
                first = v.terms(fields[0])
                for f in fields[1:]:
                    if v.terms(f) is not first:
                        return lexicons
            return [(fields[0], self.merged)]
        return lexicons

    # -- one document ---------------------------------------------------------------------
    def scan(self, view: _DocView) -> set[int]:
        """Ids of the keys the document contains."""
        hits: set[int] = set()
        lexicons = self._lexicons([view]) if self.merged is not None else self.lexicons
        for fld, lex in lexicons:
            terms = view.terms(fld)
            hits.update(chain.from_iterable(lex.keys_of(terms)))
            if lex.phrases:
                one = view.single_terms(fld)
                if one is not None:
                    hits.update(lex.phrase_keys(one))
                else:
                    for f, sc in self.fallback.items():
                        if lex is self.merged or f == fld:
                            hits.update(sc.find(view.joined(f)))
        for fld, sc in self.scanners:
            hits.update(sc.find(view.joined(fld)))
        return hits

    def candidates(
        self, hits: set[int], matched: set[int], ranged: dict[int, Any],
    ) -> set[int]:
        """Add presearcher-proven matches to ``matched`` and the queries decided by range
        checks to ``ranged``; return the queries to check."""
        cands: set[int] = set()
        for entry in _pick(self.post, hits):  # type: ignore[arg-type]
            if entry is None:
                continue
            p, c, d, r = entry
            if p:
                matched.update(p)
            if c:
                cands.update(c)
            if r:
                ranged.update(r)
            if d is not None:
                for k2 in d.keys() & hits:  # C loops over the smaller of the two
                    sure, maybe, r = d[k2]
                    if sure:
                        matched.update(sure)
                    if maybe:
                        cands.update(maybe)
                    if r:
                        ranged.update(r)
        if self.always:
            cands.update(self.always)
        return cands

    def check(
        self, slot: int, hits: set[int], view: _DocView, errors: dict[int, str]
    ) -> tuple[bool, bool]:
        """Verify one candidate: (matches, was evaluated on the document)."""
        keys_ok, doc_ok = self.verify[slot]
        if keys_ok is not None and not keys_ok(hits):
            return False, False
        if doc_ok is None:
            return True, False
        try:
            return doc_ok(view), True
        except Exception as exc:  # one bad query never fails the batch
            errors[slot] = f"{type(exc).__name__}: {exc}"
            return False, True

    # -- a batch of documents ---------------------------------------------------------------
    def _batch_lexicons(self, batch: _Batch) -> list[tuple[str | None, _TermKeys]]:
        """The per-field dictionaries, or the merged one when every document's default fields
        are the one plain string field the other dictionary is for (see :meth:`_lexicons`)."""
        lexicons = self.lexicons
        if self.merged is not None and len(lexicons) == 2:
            names = {fld for fld, _ in lexicons}
            if None in names:
                (named,) = names - {None}
                if batch.sole_field() == named:
                    return [(None, self.merged)]
        return lexicons

    def scan_batch(self, batch: _Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sorted unique codes ``doc * nkeys + key`` of every key each document contains, and
        for the keys of sloppy pairs (``a_positional``) every occurrence: its code and the
        term's index in the document's term list (sorted by code).

        Every document's terms go through the term dictionary at once, as term ids
        (:meth:`_TermKeys.key_hits`); the scanners take the documents' token strings in one
        pass (see :meth:`_Scanner.find_batch`).
        """
        n = batch.n
        k = self.nkeys
        parts = []
        occ_codes: list[np.ndarray] = []
        occ_pos: list[np.ndarray] = []
        for fld, lex in self._batch_lexicons(batch):
            per_doc, single = batch.terms(fld)
            flat = list(chain.from_iterable(per_doc))
            lens = np.fromiter(map(len, per_doc), dtype=np.int64, count=n)
            term_doc = np.repeat(np.arange(n, dtype=np.int64), lens)
            tids, at, kids = lex.key_hits(flat)
            if len(kids):
                code = term_doc[at] * k + kids
                parts.append(code)
                if self.has_pairs:
                    keep = self.a_positional[kids]
                    if keep.any():
                        at = at[keep]
                        occ_codes.append(code[keep])
                        occ_pos.append(at - (np.cumsum(lens) - lens)[term_doc[at]])
            if lex.phrases:
                # phrases over all the documents' terms at once; a hit counts where it lies
                # inside one document holding one value (else that document is scanned)
                first, pkids, sizes = lex.phrase_hits_ids(tids)
                if len(first):
                    doc = term_doc[first]
                    inside = (term_doc[first + sizes - 1] == doc) & single[doc]
                    parts.append(doc[inside] * k + pkids[inside])
                rest = np.flatnonzero(~single).tolist()
                if rest:
                    which = np.array(rest, dtype=np.int64)
                    for f, sc in self.fallback.items():
                        if lex is self.merged or f == fld:
                            docs, kids = sc.find_batch([batch.view(i).joined(f) for i in rest])
                            parts.append(which[docs] * k + kids)
        for fld, sc in self.scanners:
            docs, kids = sc.find_batch([batch.view(i).joined(fld) for i in range(n)])
            parts.append(docs * k + kids)
        codes = _unique(np.concatenate(parts), n * k) if parts else _NONE
        if not occ_codes:
            return codes, _NONE, _NONE
        oc, op = np.concatenate(occ_codes), np.concatenate(occ_pos)
        order = np.argsort(oc, kind="stable")
        return codes, oc[order], op[order]

    def match_batch(
        self, batch: _Batch, allowed: np.ndarray | None, errors: dict[int, dict[int, str]],
        verified: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Matched ``(doc, slot)`` pairs and candidates per document, for a whole batch
        (``errors``: by document, by slot, for queries that failed to evaluate)."""
        n = batch.n
        k = self.nkeys
        nl = max(self.nlocal, 1)
        codes, occ_code, occ_pos = self.scan_batch(batch)
        hit_doc = codes // k if k else codes
        hit_kid = codes - hit_doc * k
        # proven postings
        rows, vals = _expand(self.a_proven, hit_doc, hit_kid)
        m_parts = [rows * nl + vals]
        # pairs: both keys present
        idx, rows2 = _expand_index(self.a_pair_ptr, hit_doc, hit_kid)
        c_parts = []
        if len(idx):
            present = _isin_sorted(rows2 * k + self.a_pair_k2[idx], codes)
            local = self.a_pair_local[idx]
            sure = self.a_pair_sure[idx]
            m_parts.append(rows2[present & sure] * nl + local[present & sure])
            c_parts.append(rows2[present & ~sure] * nl + local[present & ~sure])
        rows3, vals3 = _expand(self.a_cands, hit_doc, hit_kid)
        c_parts.append(rows3 * nl + vals3)
        if len(self.a_always):
            c_parts.append(np.repeat(np.arange(n, dtype=np.int64), len(self.a_always)) * nl
                           + np.tile(self.a_always, n))
        cand = _unique(np.concatenate(c_parts), n * nl)
        c_doc = cand // nl
        c_loc = cand - c_doc * nl
        cand_count = np.bincount(c_doc, minlength=n)
        if allowed is not None and len(cand):
            keep = allowed[self.slot_of[c_loc]]
            c_doc, c_loc = c_doc[keep], c_loc[keep]
        # every candidate's clauses (an OR of keys each) must hit and no forbidden key may
        ok = self._clauses_hold(c_doc, c_loc, codes)
        c_doc, c_loc = c_doc[ok], c_loc[ok]
        kinds = self.a_kind[c_loc]
        decided = kinds == _V_KEYS
        m_parts.append(c_doc[decided] * nl + c_loc[decided])
        sel = kinds == _V_RANGES
        if sel.any():
            r_doc, r_loc = c_doc[sel], c_loc[sel]
            in_range, unsure = self._ranges_hold(r_doc, r_loc, batch)
            verified += np.bincount(r_doc[~unsure], minlength=n)
            m_parts.append(r_doc[in_range] * nl + r_loc[in_range])
            kinds = kinds.copy()
            kinds[np.flatnonzero(sel)[unsure]] = _V_PYTHON  # multi-valued: checked one by one
        sel = kinds == _V_PAIR
        if sel.any():
            s_doc, s_loc = c_doc[sel], c_loc[sel]
            holds, unsure = self._pairs_hold(s_doc, s_loc, batch, occ_code, occ_pos)
            verified += np.bincount(s_doc[~unsure], minlength=n)
            m_parts.append(s_doc[holds] * nl + s_loc[holds])
            kinds = kinds.copy()
            kinds[np.flatnonzero(sel)[unsure]] = _V_PYTHON  # several values: checked one by one
        sel = kinds == _V_PYTHON
        if sel.any():
            p_doc, p_loc = c_doc[sel], c_loc[sel]
            bounds = np.searchsorted(hit_doc, np.arange(n + 1))
            kids = hit_kid.tolist()
            good: list[bool] = []
            hits: set[int] = set()
            last = -1
            bounds_l = bounds.tolist()
            failed: dict[int, str] = {}
            for d, slot in zip(p_doc.tolist(), self.slot_of[p_loc].tolist()):
                if d != last:
                    hits = set(kids[bounds_l[d]:bounds_l[d + 1]])
                    last = d
                ok_one, evaluated = self.check(slot, hits, batch.view(d), failed)
                if evaluated:
                    verified[d] += 1
                    if failed:
                        errors.setdefault(d, {}).update(failed)
                        failed.clear()
                good.append(ok_one)
            g = np.array(good, dtype=bool)
            m_parts.append(p_doc[g] * nl + p_loc[g])
        matched = np.concatenate(m_parts)
        m_doc = matched // nl
        return m_doc, self.slot_of[matched - m_doc * nl], cand_count


    def _clauses_hold(self, c_doc: np.ndarray, c_loc: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Per candidate: every clause has a key the document contains, no forbidden key does."""
        m = len(c_loc)
        ok = np.ones(m, dtype=bool)
        if not m:
            return ok
        k = self.nkeys
        rows = np.arange(m, dtype=np.int64)
        clause_ids, which = _expand_index(self.a_clause_ptr, rows, c_loc)
        if len(clause_ids):
            kidx, crow = _expand_index(self.a_clause_keys[0], np.arange(len(clause_ids)),
                                       clause_ids)
            found = _isin_sorted(c_doc[which[crow]] * k + self.a_clause_keys[1][kidx], codes)
            satisfied = np.bincount(crow[found], minlength=len(clause_ids)) > 0
            ok &= np.bincount(which[~satisfied], minlength=m) == 0
        idx, which = _expand_index(self.a_forbid[0], rows, c_loc)
        if len(idx):
            hit = _isin_sorted(c_doc[which] * k + self.a_forbid[1][idx], codes)
            ok &= np.bincount(which[hit], minlength=m) == 0
        return ok

    def _pairs_hold(
        self, s_doc: np.ndarray, s_loc: np.ndarray, batch: _Batch,
        occ_code: np.ndarray, occ_pos: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(holds, undecided here) per sloppy-pair candidate: some positions ``i`` of its
        first term and ``j`` of its second with ``|j - i - delta| <= slop``, where the field
        holds one value under plain analysis (term index = position)."""
        m = len(s_loc)
        a, b, delta, slop, fld = self.a_pair_terms[s_loc].T
        fields = self.pair_fields
        unsure = np.zeros(m, dtype=bool)
        for f in set(fld.tolist()):  # by field: one document mask each
            sel = fld == f
            unsure[sel] = ~batch.terms(fields[f])[1][s_doc[sel]]
        k = self.nkeys
        lo_a = np.searchsorted(occ_code, s_doc * k + a, side="left")
        n_a = np.searchsorted(occ_code, s_doc * k + a, side="right") - lo_a
        lo_b = np.searchsorted(occ_code, s_doc * k + b, side="left")
        n_b = np.searchsorted(occ_code, s_doc * k + b, side="right") - lo_b
        n_a[unsure] = 0
        pairs = n_a * n_b  # every (first, second) occurrence pair of each candidate
        row = np.repeat(np.arange(m, dtype=np.int64), pairs)
        t = np.arange(len(row), dtype=np.int64) - np.repeat(np.cumsum(pairs) - pairs, pairs)
        i = occ_pos[lo_a[row] + t // n_b[row]]
        j = occ_pos[lo_b[row] + t % n_b[row]]
        close = np.abs(j - i - delta[row]) <= slop[row]
        return np.bincount(row[close], minlength=m) > 0, unsure

    def _ranges_hold(
        self, r_doc: np.ndarray, r_loc: np.ndarray, batch: _Batch
    ) -> tuple[np.ndarray, np.ndarray]:
        """(all ranges hold, undecided here) per candidate, for single-valued fields."""
        n = batch.n
        docs = batch.docs
        cols = np.full((max(len(self.range_columns), 1), n), np.nan)
        multi = np.zeros((max(len(self.range_columns), 1), n), dtype=bool)
        needed = sorted(set(r_doc.tolist()))
        for c, (fld, kind) in enumerate(self.range_columns):
            column = cols[c]
            for d in needed:
                # a plain int or float field: what numbers() would give, without the detour
                x = docs[d].get(fld) if fld is not None else None  # type: ignore[arg-type]
                if (type(x) is int or type(x) is float) and abs(x) < _EXACT:  # NaN fails too
                    column[d] = x
                    continue
                vals = batch.view(d).numbers(fld, kind)
                if len(vals) == 1 and abs(vals[0]) < _EXACT:
                    column[d] = vals[0]
                elif vals:
                    multi[c, d] = True
        idx, which = _expand_index(self.a_range_ptr, np.arange(len(r_loc)), r_loc)
        col = self.a_range_col[idx]
        doc = r_doc[which]
        v = cols[col, doc]
        lo, hi = self.a_range_lo[idx], self.a_range_hi[idx]
        row_ok = ((v > lo) | (self.a_range_incl_lo[idx] & (v == lo))) & (
            (v < hi) | (self.a_range_incl_hi[idx] & (v == hi)))
        unsure_row = multi[col, doc]
        m = len(r_loc)
        unsure = np.bincount(which[unsure_row], minlength=m) > 0
        good = (np.bincount(which[~row_ok], minlength=m) == 0) & ~unsure
        return good, unsure


def _second_keys(plan: QueryPlan) -> frozenset[Key] | None:
    """Keys one of which a candidate must also hold, besides one of ``plan.keys``: the most
    selective required key not among them, else the smallest group they do not satisfy."""
    first = plan.keys or frozenset()
    for k in plan.required:
        if k not in first:
            return frozenset((k,))
    groups = [g for g in plan.groups if not first <= g]
    return min(groups, key=len) if groups else None


def _keys_decide(plan: QueryPlan, second: frozenset[Key] | None) -> bool:
    """Whether a key of ``plan.keys`` (and one of ``second``, if any) together satisfy every
    key condition of a flat plan, so that at most its ranges are left to check."""
    if plan.kind != "flat" or plan.forbidden:
        return False
    first = plan.keys or frozenset()
    one = first if len(first) == 1 else None
    for k in plan.required:
        if frozenset((k,)) not in (one, second):
            return False
    return all(first <= g or (second is not None and second <= g) for g in plan.groups)


_RangeCheck = tuple[Union[str, None], str, Any, bool, Any, bool]


def _range_checks(ranges: tuple[RangeNode, ...]) -> tuple[_RangeCheck, ...]:
    """Numeric / date ranges as ``(field, kind, lower, inclusive, upper, inclusive)``."""
    return tuple(
        (r.field, r.kind,
         -math.inf if r.lower is None else r.lower, r.include_lower or r.lower is None,
         math.inf if r.upper is None else r.upper, r.include_upper or r.upper is None)
        for r in ranges
    )


def _ranges_hold(checks: tuple[_RangeCheck, ...], view: _DocView) -> bool:
    """Every range holds some value of its field (what ``RangeNode.contains`` decides)."""
    for fld, kind, lo, lo_in, hi, hi_in in checks:
        for x in view.numbers(fld, kind):
            if (x > lo or (lo_in and x == lo)) and (x < hi or (hi_in and x == hi)):
                break
        else:
            return False
    return True


# The checks below are partials of module functions, not closures, so that a built index can
# be saved (pickled) with them; a partial calls as fast as a closure.


def _keys_hold(req: frozenset[int], forbid: frozenset[int], hits: set[int]) -> bool:
    return req <= hits and forbid.isdisjoint(hits)


def _keys_and_groups_hold(req: frozenset[int], forbid: frozenset[int],
                          groups: tuple[frozenset[int], ...], hits: set[int]) -> bool:
    return (req <= hits and forbid.isdisjoint(hits)
            and not any(g.isdisjoint(hits) for g in groups))


def _key_check(
    req: frozenset[int], groups: list[frozenset[int]], forbid: frozenset[int]
) -> Callable[[set[int]], bool] | None:
    """A function of the document's key ids: all of ``req``, one of each group, no ``forbid``.

    Example:
        >>> check = _key_check(frozenset({1}), [frozenset({2, 3})], frozenset({4}))
        >>> check({1, 3}), check({1}), check({1, 2, 4})
        (True, False, False)
    """
    if not groups and not forbid:
        return req.issubset if req else None
    if not groups:
        return partial(_keys_hold, req, forbid)
    return partial(_keys_and_groups_hold, req, forbid, tuple(groups))


def _one_range_holds(contains: Callable[[Any], bool], fld: str | None, kind: str,
                     view: _DocView) -> bool:
    return any(map(contains, view.numbers(fld, kind)))


def _ranges_all_hold(ranges: tuple[RangeNode, ...], view: _DocView) -> bool:
    return all(_in_range(r, view) for r in ranges)


def _node_holds(node: Node, view: _DocView) -> bool:
    return _evaluate(node, view)  # looked up per call: tests may patch it


def _doc_check(node: Node, plan: QueryPlan) -> Callable[[_DocView], bool] | None:
    """What is left to check on the document once the keys passed (None: nothing)."""
    if plan.kind == "flat":
        if not plan.ranges:
            return None
        if len(plan.ranges) == 1:
            r = plan.ranges[0]
            return partial(_one_range_holds, r.contains, r.field, r.kind)
        return partial(_ranges_all_hold, plan.ranges)
    return partial(_node_holds, node)


_EXACT = 2.0**53  # floats hold every integer below this exactly
_V_KEYS, _V_RANGES, _V_PYTHON, _V_PAIR = 0, 1, 2, 3
_SETTLE_AT = 20_000  # queries in a freshly built segment worth one full collection


def _range_row(node: RangeNode) -> tuple[float, float, bool, bool] | None:
    """A numeric or date range as float bounds (None when a bound is not exact as a float)."""
    lo = -math.inf if node.lower is None else node.lower
    hi = math.inf if node.upper is None else node.upper
    for b in (lo, hi):
        if not isinstance(b, (int, float)) or (isinstance(b, int) and abs(b) >= _EXACT):
            return None
    return float(lo), float(hi), node.include_lower, node.include_upper  # type: ignore[arg-type]


def _csr(n: int, rows: Iterable[tuple[int, list[int]]]) -> tuple[np.ndarray, np.ndarray]:
    """(pointers, values) with row ``i``'s values at ``values[ptr[i]:ptr[i+1]]``."""
    counts = np.zeros(n + 1, dtype=np.int64)
    items = [(r, v) for r, v in rows if v]
    for r, v in items:
        counts[r + 1] = len(v)
    ptr = np.cumsum(counts)
    vals = np.zeros(int(ptr[-1]), dtype=np.int64)
    for r, v in items:
        vals[ptr[r]:ptr[r + 1]] = v
    return ptr, vals


def _csr_rows(n: int, rows: Mapping[int, list[Any]]) -> tuple[np.ndarray, list[Any]]:
    counts = np.zeros(n + 1, dtype=np.int64)
    for r, v in rows.items():
        counts[r + 1] = len(v)
    ptr = np.cumsum(counts)
    flat: list[Any] = [None] * int(ptr[-1])
    for r, v in rows.items():
        flat[ptr[r]:ptr[r + 1]] = v
    return ptr, flat


def _expand_index(
    ptr: np.ndarray, rows: np.ndarray, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each (row, key), every position of the key's CSR row: (positions, repeated rows)."""
    if not len(keys):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = ptr[keys]
    counts = ptr[keys + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    idx = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, counts)
    return idx, np.repeat(rows, counts)


def _expand(
    csr: tuple[np.ndarray, np.ndarray], rows: np.ndarray, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    idx, rep = _expand_index(csr[0], rows, keys)
    return rep, csr[1][idx]


def _pick(items: Any, at: Any) -> list[Any]:
    """``[items[i] for i in at]`` in one C loop (``itemgetter``): the items' memory is fetched
    with overlapping cache misses, measured 1.6x faster on 66 scattered ids.

    Example:
        >>> _pick(["a", "b", "c"], [2, 0]), _pick(["a"], [0]), _pick(["a"], [])
        (['c', 'a'], ['a'], [])
    """
    if len(at) > 1:
        return list(itemgetter(*at)(items))
    return [items[i] for i in at]


def _unique(values: np.ndarray, bound: int | None = None) -> np.ndarray:
    """Sorted distinct values (``np.unique`` without its overhead; several times faster).

    ``bound``: every value is below it; under 2**31 they are sorted as int32 (about twice as
    fast), and come back as int64.
    """
    if len(values) < 2:
        return values
    # stable: timsort, which merges the runs these codes come in (document by document)
    if bound is not None and bound < 2**31:
        values = np.sort(values.astype(np.int32), kind="stable").astype(np.int64)
    else:
        values = np.sort(values, kind="stable")
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _isin_sorted(values: np.ndarray, sorted_codes: np.ndarray) -> np.ndarray:
    """``values`` membership in an ascending array."""
    if not len(sorted_codes):
        return np.zeros(len(values), dtype=bool)
    pos = np.searchsorted(sorted_codes, values)
    pos[pos == len(sorted_codes)] = 0
    return sorted_codes[pos] == values


class _Snapshot:
    """What readers use: segments, dead slots, slot -> query. Never mutated after build."""

    __slots__ = ("segments", "dead", "by_slot", "ids", "ids_arr", "dead_mask")

    def __reduce__(self) -> tuple[Any, ...]:
        return _Snapshot, (self.segments, self.dead, self.by_slot)

    def __init__(
        self, segments: tuple[_Segment, ...], dead: frozenset[int],
        by_slot: dict[int, RegisteredQuery],
    ) -> None:
        self.segments = segments
        self.dead = dead
        self.by_slot = by_slot
        size = max(max(by_slot, default=-1), max(dead, default=-1)) + 1
        ids: list[QueryId] = [None] * size
        for slot in sorted(by_slot):
            qid = by_slot[slot].id
            # string ids copied side by side in slot order: results touch dozens per document
            ids[slot] = (qid + "\0")[:-1] if type(qid) is str else qid
        self.ids = ids
        self.ids_arr = np.empty(size, dtype=object)
        self.ids_arr[:] = ids
        self.dead_mask = np.zeros(size, dtype=bool)
        if dead:
            self.dead_mask[list(dead)] = True


class Percolator(_QuerySet):
    """An indexed query set: the presearcher picks candidates, only those are verified.

    Registration marks the index stale; the next percolation rebuilds it (new queries go to a
    small delta segment; see :attr:`PercolatorConfig.delta_limit`). Percolation reads an
    immutable snapshot, so it is safe while other threads register queries.

    Example:
        >>> p = Percolator()
        >>> for qid, q in [("a", "apple AND pie"), ("b", "pi*"), ("c", '"apple pie"~1')]:
        ...     _ = p.register(qid, q)
        >>> p.percolate({"id": 7, "text": "Pie with apple"}).ids
        ['a', 'b']
    """

    def __init__(self, config: PercolatorConfig | None = None) -> None:
        super().__init__(config)
        self._snapshot = _Snapshot((), frozenset(), {})

    def snapshot(self) -> _Snapshot:
        """The current index, rebuilt first if queries changed since the last build."""
        if self._dirty:
            with self._lock:
                if self._dirty:
                    with _gc_paused(self.config.pause_gc):
                        self._snapshot = self._rebuild(self._snapshot)
                        self._dirty = False
                    self._settle(self._snapshot)
        return self._snapshot

    def save_index(self, path: str | Path) -> None:
        """Write the built index to ``path``, so that :meth:`load` starts without parsing a
        query or building anything (measured at 100,000 queries: see docs/search.md).

        The file is a JSON header line (format, version, configuration, checksum) and a pickle
        of the queries and the index. Read only index files you wrote: a pickle may run code
        when read; the checksum catches a damaged file, not a forged one. An index is read only
        by the code that wrote it (else :meth:`load` says so): keep the queries too
        (:meth:`save`), the portable form.

        Example:
            >>> import os, tempfile
            >>> p = Percolator(); _ = p.register("q", "apple AND pie", {"owner": "ann"})
            >>> path = os.path.join(tempfile.mkdtemp(), "index.bin")
            >>> p.save_index(path)
            >>> again = Percolator.load(path)
            >>> again.percolate({"t": "Apple pie"}).ids, again.get("q").metadata["owner"]
            (['q'], 'ann')
        """
        with self._lock:
            snap = self.snapshot()
            rows = self.queries()
            state = {"queries": rows, "next_slot": self._next_slot, "snapshot": snap}
            try:
                payload = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                raise CepError(f"cannot save the index: a query id or metadata value cannot "
                               f"be written ({exc})") from None
        header = {"format": _INDEX_FORMAT, "version": _INDEX_VERSION, "code": _code_fingerprint(),
                  "queries": len(rows), "bytes": len(payload),
                  "sha256": hashlib.sha256(payload).hexdigest(),
                  "config": _config_to_json(self.config)}
        tmp = Path(str(path) + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(header) + b"\n")
            fh.write(payload)
        tmp.replace(path)

    def _restore(self, state: dict[str, Any]) -> None:
        super()._restore(state)
        snap = state["snapshot"]
        if snap is not None:
            self._snapshot = snap
            self._dirty = False
            self._settle(snap)

    def rebuild(self) -> None:
        """Rebuild the whole index now (one segment)."""
        with self._lock:
            with _gc_paused(self.config.pause_gc):
                live = sorted(self._queries.values(), key=lambda q: q.slot)
                self._snapshot = _Snapshot((_Segment(live, self.config),), frozenset(),
                                           {q.slot: q for q in live})
                self._dirty = False
            self._settle(self._snapshot)

    def _settle(self, snap: _Snapshot) -> None:
        # A large index built with the collector paused is a million young objects: the
        # collections they are due would land on the first documents (twice, as they age).
        # One full collection now makes them old, in the build's time instead.
        if self.config.pause_gc and gc.isenabled() and len(snap.segments) == 1 \
                and snap.segments[0].nlocal >= _SETTLE_AT:
            gc.collect()

    def _rebuild(self, old: _Snapshot) -> _Snapshot:
        live = {q.slot: q for q in self._queries.values()}
        config = self.config
        base = old.segments[0] if old.segments else None
        if base is not None:
            indexed = set(base.slots)
            delta_entries = [q for q in live.values() if q.slot not in indexed]
            dead = frozenset(s for s in indexed if s not in live)
            limit = max(self.config.delta_limit, len(base.slots) // 8)
            if len(delta_entries) <= limit and len(dead) <= limit:
                delta_entries.sort(key=lambda q: q.slot)
                segs = ((base, _Segment(delta_entries, config, prefill=False))
                        if delta_entries else (base,))
                return _Snapshot(segs, dead, live)
        entries = sorted(live.values(), key=lambda q: q.slot)
        return _Snapshot((_Segment(entries, config),), frozenset(), live)

    def percolate_batch(
        self, docs: Iterable[Mapping[str, Any]], *, highlight: bool = False,
        metadata_filter: MetadataFilter = None,
    ) -> BatchResult:
        docs = docs if isinstance(docs, list) else list(docs)
        if len(docs) < self.config.vector_threshold:
            return self._percolate_each(docs, highlight, metadata_filter)
        with _gc_paused(self.config.pause_gc):
            return self._percolate_vectorised(docs, highlight, metadata_filter)

    def percolate(
        self, doc: Mapping[str, Any], *, highlight: bool = False,
        metadata_filter: MetadataFilter = None,
    ) -> DocumentMatches:
        # One document, without the batch's bookkeeping (same answers; see _QuerySet).
        snap = self.snapshot()
        allowed = (None if metadata_filter is None
                   else self._allowed(snap.by_slot.values(), metadata_filter))
        view = _DocView(doc, self._ctx)
        slots, errors, cand_count, verified = self._match_one(snap, view, allowed)
        return self._result(snap, view, slots, _pick(snap.ids, slots), errors,
                            highlight, cand_count, verified)

    percolate.__doc__ = _QuerySet.percolate.__doc__

    @staticmethod
    def _match_one(
        snap: _Snapshot, view: _DocView, allowed: set[int] | None,
    ) -> tuple[list[int], dict[int, str], int, int]:
        """(matching slots in order, errors by slot, candidates, verified) for one document."""
        matched: set[int] = set()
        errors: dict[int, str] = {}
        cand_count = verified = 0
        for seg in snap.segments:
            hits = seg.scan(view)
            ranged: dict[int, Any] = {}
            cands = seg.candidates(hits, matched, ranged)
            if ranged:  # (_ranges_hold, inline: a headline has several)
                cand_count += len(ranged)
                numbers = view.numbers
                for slot, checks in ranged.items():
                    if allowed is not None and slot not in allowed:
                        continue
                    verified += 1
                    for fld, kind, lo, lo_in, hi, hi_in in checks:
                        for x in numbers(fld, kind):
                            if (x > lo or (lo_in and x == lo)) and (x < hi or (hi_in and x == hi)):
                                break
                        else:
                            break
                    else:
                        matched.add(slot)
            if not cands:
                continue
            cand_count += len(cands)
            if allowed is not None:
                cands &= allowed
            for slot, (keys_ok, doc_ok) in zip(cands, _pick(seg.verify, cands)):
                if keys_ok is not None and not keys_ok(hits):
                    continue
                if doc_ok is None:
                    matched.add(slot)
                    continue
                verified += 1
                try:
                    if doc_ok(view):
                        matched.add(slot)
                except Exception as exc:  # one bad query never fails the batch
                    errors[slot] = f"{type(exc).__name__}: {exc}"
        if allowed is not None:
            matched &= allowed
        if snap.dead:
            matched -= snap.dead
        return sorted(matched), errors, cand_count, verified

    def _percolate_each(
        self, docs: list[Mapping[str, Any]], highlight: bool, metadata_filter: MetadataFilter,
    ) -> BatchResult:
        t0 = time.perf_counter()
        snap = self.snapshot()
        allowed = self._allowed(snap.by_slot.values(), metadata_filter)
        ctx = self._ctx
        match_one = self._match_one
        results = []
        n_cand = n_ver = n_match = n_err = 0
        for doc in docs:
            view = _DocView(doc, ctx)
            slots, errors, cand_count, verified = match_one(snap, view, allowed)
            res = self._result(snap, view, slots, _pick(snap.ids, slots), errors, highlight,
                               cand_count, verified)
            results.append(res)
            n_cand += cand_count
            n_ver += verified
            n_match += len(slots)
            n_err += len(res.errors)
        stats = BatchStats(len(results), n_cand, n_ver, n_match, n_err, time.perf_counter() - t0)
        return BatchResult(results, stats)

    @staticmethod
    def _result(
        snap: _Snapshot, view: _DocView, slots: list[int] | np.ndarray, ids: list[QueryId],
        slot_errors: dict[int, str], highlight: bool, candidates: int, verified: int,
    ) -> DocumentMatches:
        by_slot = snap.by_slot
        errors = ({by_slot[s].id: msg for s, msg in slot_errors.items() if s not in snap.dead}
                  if slot_errors else {})
        spans = None
        if highlight:
            spans = {}
            for slot in (slots if isinstance(slots, list) else slots.tolist()):
                q = by_slot[slot]
                try:
                    spans[q.id] = _highlight(q.node, view)
                except Exception as exc:  # pragma: no cover - highlighting mirrors matching
                    errors[q.id] = f"{type(exc).__name__}: {exc}"
        return DocumentMatches(ids, slots, by_slot, spans, errors, candidates, verified)

    def _percolate_vectorised(
        self, docs: list[Mapping[str, Any]], highlight: bool, metadata_filter: MetadataFilter,
    ) -> BatchResult:
        t0 = time.perf_counter()
        snap = self.snapshot()
        n = len(docs)
        allowed_set = self._allowed(snap.by_slot.values(), metadata_filter)
        allowed = None
        size = len(snap.ids)
        if allowed_set is not None:
            allowed = np.zeros(size, dtype=bool)
            if allowed_set:
                allowed[list(allowed_set)] = True
        batch = _Batch(docs, self._ctx)
        errors: dict[int, dict[int, str]] = {}
        verified = np.zeros(n, dtype=np.int64)
        cand_count = np.zeros(n, dtype=np.int64)
        m_docs, m_slots = [], []
        for seg in snap.segments:
            d, s, c = seg.match_batch(batch, allowed, errors, verified)
            m_docs.append(d)
            m_slots.append(s)
            cand_count += c
        m_doc = np.concatenate(m_docs)
        m_slot = np.concatenate(m_slots)
        keep = ~snap.dead_mask[m_slot] if snap.dead else None
        if allowed is not None:
            keep = allowed[m_slot] if keep is None else keep & allowed[m_slot]
        if keep is not None:
            m_doc, m_slot = m_doc[keep], m_slot[keep]
        width = max(size, 1)
        codes = _unique(m_doc * width + m_slot, n * width)
        m_doc = codes // width
        m_slot = codes - m_doc * width
        bounds = np.searchsorted(m_doc, np.arange(n + 1)).tolist()
        shared = _BatchSlots(snap.ids_arr, m_slot, bounds, cand_count.tolist(),
                             verified.tolist(), snap.by_slot)
        results: list[DocumentMatches] = list(map(_BatchMatches, repeat(shared, n), range(n)))
        n_err = 0
        for i in sorted(set(errors) | (set(range(n)) if highlight else set())):
            a, b = bounds[i], bounds[i + 1]
            res = self._result(snap, batch.view(i), m_slot[a:b], snap.ids_arr[m_slot[a:b]].tolist(),
                               errors.get(i, {}), highlight, shared.candidates[i],
                               shared.verified[i])
            n_err += len(res.errors)
            results[i] = res
        stats = BatchStats(n, int(cand_count.sum()), int(verified.sum()), len(m_slot), n_err,
                           time.perf_counter() - t0)
        return BatchResult(results, stats)


class NoFiltering(_QuerySet):
    """The baseline: every query evaluated on every document, no index.

    Example:
        >>> b = NoFiltering(); _ = b.register("q", "apple AND NOT pie")
        >>> b.percolate({"t": "apple tart"}).ids
        ['q']
    """

    def percolate_batch(
        self, docs: Iterable[Mapping[str, Any]], *, highlight: bool = False,
        metadata_filter: MetadataFilter = None,
    ) -> BatchResult:
        t0 = time.perf_counter()
        entries = self.queries()
        by_slot = {q.slot: q for q in entries}
        allowed = self._allowed(entries, metadata_filter)
        if allowed is not None:
            entries = [q for q in entries if q.slot in allowed]
        results = []
        n_match = n_err = 0
        for doc in docs:
            view = _DocView(doc, self._ctx)
            matched = []
            errors: dict[QueryId, str] = {}
            for q in entries:
                try:
                    if _evaluate(q.node, view):
                        matched.append(q)
                except Exception as exc:
                    errors[q.id] = f"{type(exc).__name__}: {exc}"
            spans = {q.id: _highlight(q.node, view) for q in matched} if highlight else None
            results.append(DocumentMatches([q.id for q in matched], [q.slot for q in matched],
                                           by_slot, spans, errors, len(entries), len(entries)))
            n_match += len(matched)
            n_err += len(errors)
        n = len(results)
        stats = BatchStats(n, n * len(entries), n * len(entries), n_match, n_err,
                           time.perf_counter() - t0)
        return BatchResult(results, stats)
