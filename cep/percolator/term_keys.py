"""The term dictionary: which presearcher keys one document term holds."""

from __future__ import annotations

import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from itertools import chain, compress, count, islice, repeat
from typing import Any

import ahocorasick
import numpy as np

from cep.percolator.arrays import _NONE, _isin_sorted
from cep.percolator.loops import _loops
from cep.percolator.presearcher import _literal_prefix
from cep.percolator.tokens import _kernels, _term_at, _TokenStream, _TokenTable
from patterns.lucene import WildcardNode

__all__ = ["_TermKeys"]


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
                 "_pair_codes", "_pair_ends", "_pair_arrays", "_pair_bits", "_table")

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
        self._table: _TokenTable | None = None  # made on the first token stream
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
        # the same as arrays, for the compiled loop (see tokens._phrases_loop)
        entries = [self._pair_ends[c] for c in self._pair_codes.tolist()]
        counts = [len(e) for e in entries]
        e_ptr = np.zeros(len(entries) + 1, dtype=np.int64)
        np.cumsum(counts, out=e_ptr[1:])
        flat = [x for e in entries for x in e]
        r_ptr = np.zeros(len(flat) + 1, dtype=np.int64)
        np.cumsum([len(rest) for rest, _ in flat], out=r_ptr[1:])
        self._pair_arrays = (e_ptr, np.array([k for _, k in flat], dtype=np.int64), r_ptr,
                             np.array([t for rest, _ in flat for t in rest], dtype=np.int64))
        # one bit per pair of phrase words, set where a phrase starts with it: the compiled
        # loop reads a bit (in cache) before searching the codes; none past 2**23 pairs
        self._pair_bits = np.zeros(0, dtype=np.uint8)
        if 0 < p * p <= 1 << 23:
            bits = np.zeros(p * p, dtype=bool)
            bits[self._pair_codes] = True
            self._pair_bits = np.packbits(bits, bitorder="little")
        self._csr: tuple[int, np.ndarray, np.ndarray] = (0, np.zeros(1, dtype=np.int64), _NONE)
        self._freeze()

    def _prepare(self) -> None:
        leads: dict[str, tuple[list[int], list[tuple[Callable[[str], Any], int]]]] = {}
        for text, ks in self._prefixes.items():
            leads.setdefault(text, ([], []))[0].extend(ks)
        free: list[tuple[str, Callable[[str], Any], int]] = []
        for pattern, k in self._wildcards:
            full = WildcardNode(None, pattern).matcher.fullmatch
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
                if name not in ("_leads", "_free", "_ready", "_lock", "_table")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)
        self._ready = False
        self._leads = None
        self._free = []
        self._lock = threading.Lock()
        self._table = None

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
        with self._lock:  # and the table batches read the terms' ids from (see tokens.py)
            self._table = _TokenTable(self.ids)
        _loops()  # the batch loops compiled (or read from numba's cache) now, not in a batch

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
        tids = np.fromiter(map(self.ids.get, terms, repeat(-1)), dtype=np.int64,
                           count=len(terms))
        return self._hits(tids, terms.__getitem__)

    def key_hits_stream(self, stream: _TokenStream) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`key_hits` for a batch's token stream (:mod:`tokens`): term ids read from the
        tokens' bytes, Python strings made only for tokens the table does not hold."""
        with self._lock:
            table = self._table
            if table is None:
                table = self._table = _TokenTable(self.ids)
            tids = table.lookup(stream)
        return self._hits(tids, stream.term, table)

    def key_codes(self, buf: np.ndarray, n: int, nkeys: int, positional: np.ndarray,
                  single: np.ndarray, loops: tuple[Callable[..., Any], ...],
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The compiled path from a batch's bytes (``n`` documents joined by NUL, see
        ``_Batch.buffer``) to the distinct codes ``doc * nkeys + key`` of the keys each
        document holds (its terms' keys, and its exact phrases where ``single``; by document),
        and every occurrence of a ``positional`` key (its code and term index, by document
        in the order of the terms): one
        compiled scan gives each token's term id from the table, Python resolves only the
        tokens the table lacks (as :meth:`_hits`), then one compiled loop per document
        (``loops.py``)."""
        with self._lock:
            table = self._table
            if table is None:
                table = self._table = _TokenTable(self.ids)
            tids, first, unk, u_start, u_end = table.scan(buf, n)
        x_at: list[int] = []
        x_kid: list[int] = []
        if len(unk):
            resolve, ids = self.resolve, self.ids
            learnt: dict[str, int] = {}
            for i, a, b in zip(unk.tolist(), u_start.tolist(), u_end.tolist()):
                term = _term_at(buf, a, b)
                got = resolve(term)
                tid = ids.get(term, -1)
                if tid < 0:
                    if got:  # past the limit: resolved at each sighting
                        x_at.extend([i] * len(got))
                        x_kid.extend(got)
                else:
                    tids[i] = tid
                    learnt[term] = tid
            if learnt:
                with self._lock:
                    table.add_many(learnt.items())
            frozen = self._csr[0]
            if len(self._keys) - frozen > max(1024, frozen >> 3):  # amortised: 1/8 growth
                self._freeze()
        frozen, ptr, vals = self._csr
        if len(unk) or len(self._keys) > frozen:
            # remembered terms not yet in the arrays: their keys as extra (token, key) pairs
            keys = self._keys
            for i in np.flatnonzero(tids >= frozen).tolist():
                got = keys[tids[i]]
                x_at.extend([i] * len(got))
                x_kid.extend(got)
        xa = np.array(x_at, dtype=np.int64)
        xk = np.array(x_kid, dtype=np.int64)
        if len(xa) > 1:
            order = np.argsort(xa, kind="stable")
            xa, xk = xa[order], xk[order]
        return loops[0](tids, first, nkeys, frozen, ptr, vals, positional, single,
                        self._nphrase, self._pair_codes, self._pair_bits, *self._pair_arrays,
                        xa, xk)

    def _hits(self, tids: np.ndarray, term_of: Callable[[int], str],
              table: _TokenTable | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = len(tids)
        lost: dict[int, tuple[int, ...]] = {}  # past the limit: keys by term index
        unknown = np.flatnonzero(tids < 0)
        if len(unknown):
            resolve, ids = self.resolve, self.ids
            learnt: dict[str, int] = {}
            for i in unknown.tolist():
                term = term_of(i)
                got = resolve(term)
                tid = ids.get(term, -1)
                if tid < 0:
                    if got:
                        lost[i] = got
                else:
                    tids[i] = tid
                    learnt[term] = tid
            if table is not None and learnt:
                with self._lock:
                    table.add_many(learnt.items())
            frozen = self._csr[0]
            if len(self._keys) - frozen > max(1024, frozen >> 3):  # amortised: 1/8 growth
                self._freeze()
        frozen, ptr, vals = self._csr
        slow: list[int] = []
        if len(unknown) or len(self._keys) > frozen:
            slow = np.flatnonzero(tids >= frozen).tolist()
        kernels = _kernels() if table is not None else None
        if kernels is not None:
            at, kids = kernels[3](tids, frozen, ptr, vals)
        else:
            inside = None  # every term's keys are in the arrays
            if len(unknown) or len(self._keys) > frozen:
                inside = np.flatnonzero((tids >= 0) & (tids < frozen))
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
        kernels = _kernels()
        if kernels is not None:
            got = kernels[4](tids, p, self._pair_codes, *self._pair_arrays)
            return got if len(got[0]) else (_NONE, _NONE, _NONE)
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
