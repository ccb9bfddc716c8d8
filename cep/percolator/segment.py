"""An index segment: some queries' postings, term dictionaries, scanners and verification data,
matched one document at a time or a batch at once."""

from __future__ import annotations

import math
from collections import defaultdict
from itertools import chain
from typing import Any

import numpy as np

from cep.percolator.arrays import (
    _NONE,
    _csr,
    _csr_rows,
    _expand,
    _expand_index,
    _isin_sorted,
    _pick,
    _unique,
)
from cep.percolator.config import PercolatorConfig
from cep.percolator.documents import _Batch, _DocView
from cep.percolator.loops import _loops
from cep.percolator.presearcher import Key
from cep.percolator.query import RegisteredQuery
from cep.percolator.scanners import _Scanner, _scanner_class
from cep.percolator.term_keys import _TermKeys
from cep.percolator.verify import (
    _doc_check,
    _key_check,
    _keys_decide,
    _range_checks,
    _second_keys,
)
from patterns.lucene import PhraseNode, RangeNode, WildcardNode, iter_nodes

__all__ = ["_Segment"]


_EXACT = 2.0**53  # floats hold every integer below this exactly
_V_KEYS, _V_RANGES, _V_PYTHON, _V_PAIR = 0, 1, 2, 3  # as loops.py reads them
_NO_FLAGS = np.zeros(0, dtype=bool)  # no metadata filter: every query allowed


def _range_row(node: RangeNode) -> tuple[float, float, bool, bool] | None:
    """A numeric or date range as float bounds (None when a bound is not exact as a float)."""
    lo = -math.inf if node.lower is None else node.lower
    hi = math.inf if node.upper is None else node.upper
    for b in (lo, hi):
        if not isinstance(b, (int, float)) or (isinstance(b, int) and abs(b) >= _EXACT):
            return None
    return float(lo), float(hi), node.include_lower, node.include_upper  # type: ignore[arg-type]


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
                        _ = leaf.matcher  # compile now, not on the first document
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
                        and len(node.terms) == 2):
                    # a sloppy pair of terms (the same term twice too: two of its
                    # occurrences): checked from term positions, all at once
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
        """Unique codes ``doc * nkeys + key`` of every key each document contains, and for the
        keys of sloppy pairs (``a_positional``) every occurrence: its code and the term's index
        in the document's term list. Sorted, and the occurrences by code, on the numpy path; by
        document on the compiled path (a key's occurrences in ascending index).

        Every document's terms go through the term dictionary at once, as term ids
        (:meth:`_TermKeys.key_hits`); the scanners take the documents' token strings in one
        pass (see :meth:`_Scanner.find_batch`).
        """
        n = batch.n
        k = self.nkeys
        parts = []
        occ_codes: list[np.ndarray] = []
        occ_pos: list[np.ndarray] = []
        plain = batch.ctx.plain
        loops = _loops() if plain else None
        done = _NONE  # a part that is sorted and distinct already
        for fld, lex in self._batch_lexicons(batch):
            if loops is not None:  # bytes to key codes in compiled loops (see loops.py)
                buf, single = batch.buffer(fld)
                got, oc, op = lex.key_codes(buf, n, k, self.a_positional, single, loops)
                parts.append(got)
                done = got
                if len(oc):
                    occ_codes.append(oc)
                    occ_pos.append(op)
                self._fallback_hits(batch, fld, lex, single, parts)
                continue
            if plain:  # the terms stay bytes in one buffer (see tokens.py)
                stream, single = batch.stream(fld)
                lens, term_doc = stream.lens, stream.doc
                tids, at, kids = lex.key_hits_stream(stream)
            else:
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
                self._fallback_hits(batch, fld, lex, single, parts)
        for fld, sc in self.scanners:
            docs, kids = sc.find_batch([batch.view(i).joined(fld) for i in range(n)])
            parts.append(docs * k + kids)
        if len(parts) == 1 and parts[0] is done:
            codes = done  # by document, a document's in no particular order
        else:
            codes = _unique(np.concatenate(parts), n * k) if parts else _NONE
        if not occ_codes:
            return codes, _NONE, _NONE
        if len(occ_codes) == 1 and loops is not None:
            return codes, occ_codes[0], occ_pos[0]  # sorted by code already
        oc, op = np.concatenate(occ_codes), np.concatenate(occ_pos)
        order = np.argsort(oc, kind="stable")
        return codes, oc[order], op[order]

    def _fallback_hits(self, batch: _Batch, fld: str | None, lex: _TermKeys, single: np.ndarray,
                       parts: list[np.ndarray]) -> None:
        """Phrases of the documents whose field holds several values, by the automaton."""
        if not lex.phrases:
            return
        rest = np.flatnonzero(~single).tolist()
        if not rest:
            return
        k = self.nkeys
        which = np.array(rest, dtype=np.int64)
        for f, sc in self.fallback.items():
            if lex is self.merged or f == fld:
                docs, kids = sc.find_batch([batch.view(i).joined(f) for i in rest])
                parts.append(which[docs] * k + kids)

    def match_batch(
        self, batch: _Batch, allowed: np.ndarray | None, errors: dict[int, dict[int, str]],
        verified: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Matched ``(doc, slot)`` pairs and candidates per document, for a whole batch
        (``errors``: by document, by slot, for queries that failed to evaluate)."""
        n = batch.n
        nl = max(self.nlocal, 1)
        codes, occ_code, occ_pos = self.scan_batch(batch)
        loops = _loops()
        if loops is not None:
            m_parts, r_code, p_parts, cand_count = self._decide_compiled(
                loops, batch, allowed, verified, codes, occ_code, occ_pos)
        else:
            m_parts, r_code, p_parts, cand_count = self._decide_numpy(
                batch, allowed, verified, codes, occ_code, occ_pos)
        if len(r_code):
            r_doc = r_code // nl
            r_loc = r_code - r_doc * nl
            in_range, unsure = self._ranges_hold(r_doc, r_loc, batch)
            verified += np.bincount(r_doc[~unsure], minlength=n)
            m_parts.append(r_code[in_range])
            p_parts.append(r_code[unsure])  # multi-valued: checked one by one
        p_code = np.concatenate(p_parts) if p_parts else _NONE
        if len(p_code):
            p_code = np.sort(p_code)  # documents in order, each one's queries in order
            m_parts.append(self._verify_python(p_code, codes, batch, errors, verified))
        matched = np.concatenate(m_parts)
        m_doc = matched // nl
        return m_doc, self.slot_of[matched - m_doc * nl], cand_count

    def _decide_compiled(
        self, loops: tuple[Any, ...], batch: _Batch, allowed: np.ndarray | None,
        verified: np.ndarray, codes: np.ndarray, occ_code: np.ndarray, occ_pos: np.ndarray,
    ) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray], np.ndarray]:
        """:meth:`_decide_numpy` in one compiled loop over the documents (``loops.py``)."""
        n = batch.n
        if self.has_pairs:
            pair_single = np.stack([batch.single(f) for f in self.pair_fields])
        else:
            pair_single = np.ones((1, n), dtype=bool)
        ok = _NO_FLAGS if allowed is None else allowed[self.slot_of]
        matched, r_code, p_code, cand_count, ver = loops[1](
            codes, n, self.nkeys, max(self.nlocal, 1), *self.a_proven,
            self.a_pair_ptr, self.a_pair_k2, self.a_pair_local, self.a_pair_sure,
            *self.a_cands, self.a_always, ok, self.a_clause_ptr, *self.a_clause_keys,
            *self.a_forbid, self.a_kind, self.a_pair_terms, pair_single, occ_code, occ_pos)
        verified += ver
        return [matched], r_code, [p_code], cand_count

    def _decide_numpy(
        self, batch: _Batch, allowed: np.ndarray | None, verified: np.ndarray,
        codes: np.ndarray, occ_code: np.ndarray, occ_pos: np.ndarray,
    ) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray], np.ndarray]:
        """From the batch's key codes: matched codes ``doc * nl + local`` (parts), range
        candidates and candidates left to Python (codes), and candidates per document; the
        sloppy pairs are decided here (counted in ``verified``)."""
        n = batch.n
        k = self.nkeys
        nl = max(self.nlocal, 1)
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
        r_code = c_doc[sel] * nl + c_loc[sel]
        p_parts = []
        sel = kinds == _V_PAIR
        if sel.any():
            s_doc, s_loc = c_doc[sel], c_loc[sel]
            holds, unsure = self._pairs_hold(s_doc, s_loc, batch, occ_code, occ_pos)
            verified += np.bincount(s_doc[~unsure], minlength=n)
            m_parts.append(s_doc[holds] * nl + s_loc[holds])
            p_parts.append(s_doc[unsure] * nl + s_loc[unsure])  # several values: one by one
        sel = kinds == _V_PYTHON
        p_parts.append(c_doc[sel] * nl + c_loc[sel])
        return m_parts, r_code, p_parts, cand_count

    def _verify_python(
        self, p_code: np.ndarray, codes: np.ndarray, batch: _Batch,
        errors: dict[int, dict[int, str]], verified: np.ndarray,
    ) -> np.ndarray:
        """The candidates ``doc * nl + local`` (sorted) checked one by one on their documents:
        the codes of those that match."""
        n = batch.n
        k = self.nkeys
        nl = max(self.nlocal, 1)
        p_doc = p_code // nl
        p_loc = p_code - p_doc * nl
        hit_doc = codes // k if k else codes
        kids = (codes - hit_doc * k).tolist()
        bounds_l = np.searchsorted(hit_doc, np.arange(n + 1)).tolist()
        good: list[bool] = []
        hits: set[int] = set()
        last = -1
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
        return p_code[np.array(good, dtype=bool)]

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
            unsure[sel] = ~batch.single(fields[f])[s_doc[sel]]
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
        # distinct positions: a repeated term ("5 5"~2) needs two of its occurrences
        close = (np.abs(j - i - delta[row]) <= slop[row]) & (i != j)
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
